//! A [`Run`] stepped by hand, as the interpreter ([`crate::interpret::drive`]) steps
//! it, for sans-IO tests and to show the run contract step by step: [`next`] hands out
//! the next step, [`apply`] feeds its outcome. A driver cannot do this (the run's
//! stepping is crate-private): it hands its run to the interpreter.
//!
//! ```
//! use chrono::Utc;
//! use reins_agent::run::{
//!     AfterReasoning, Announcement, CommitAt, Event, ExecOutcome, GateDecision, Run, RunInput,
//!     Step,
//! };
//! use reins_agent::testing::by_hand;
//! use reins_agent::{Agent, RunStatus};
//! use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolUse};
//! use serde_json::json;
//! # let model = reins_model::ScriptedModel::new([reins_model::ScriptedResponse::text("unused")]);
//!
//! // The agent makes every call's start (its rules travel in it); the run is sans-IO.
//! let agent = Agent::builder().system_prompt("Be careful.").model(model).build().expect("an agent");
//! let mut run = Run::new(agent.run_config());
//! let begin = agent.begin("user-7/chat-1", RunInput::Message(Msg::user("delete temp.txt")), Utc::now());
//! by_hand::apply(&mut run, Event::Begin(begin)).expect("a call's input is taken");
//!
//! // Nothing to follow or settle: the input is checked and stored, the call announced.
//! let Step::Commit(first) = by_hand::next(&mut run) else { unreachable!() };
//! assert_eq!(first.at, CommitAt::Begin);
//! assert!(matches!(by_hand::next(&mut run), Step::Announce(Announcement::Started { resumed: false })));
//!
//! // The model is asked, with the request finished; its answer is one call of a tool
//! // that needs a person.
//! let Step::Reason(reason) = by_hand::next(&mut run) else { unreachable!() };
//! assert_eq!(reason.request.messages.len(), 2); // the system prompt, the message
//! let call = ToolUse::new("call_1", "delete_file", json!({"path": "temp.txt"}));
//! by_hand::apply(&mut run, Event::Reasoned {
//!     message: Msg::new(Role::Assistant, vec![ContentBlock::ToolUse(call)]),
//!     gates: vec![GateDecision::Confirm { reason: "deletes a file".into() }],
//!     after: AfterReasoning::default(),
//!     usage: Default::default(),
//!     now: Utc::now(),
//! })
//! .expect("an outcome is never refused");
//!
//! // Before a person is asked, the approval policy and the standing grants are (the
//! // effect is `reins_agent::effects::consult`); here, they decide nothing.
//! let Step::Consult(consult) = by_hand::next(&mut run) else { unreachable!() };
//! assert_eq!(consult.requirements[0].id, "call_1");
//! by_hand::apply(&mut run, Event::DecidedWithoutAsking { decisions: vec![], asked: vec![], now: Utc::now() })
//!     .expect("the consultation is answered");
//!
//! // The run pauses with the requirement: stored, announced, then the call ends.
//! let Step::Commit(pause) = by_hand::next(&mut run) else { unreachable!() };
//! assert_eq!(pause.at, CommitAt::Pause(vec!["call_1".into()]));
//! assert_eq!(by_hand::next(&mut run), Step::Announce(Announcement::Paused));
//! let Step::Pause(reqs) = by_hand::next(&mut run) else { unreachable!() };
//! assert_eq!(reqs[0].id, "call_1");
//!
//! // The next call: `resume()` approves it; the tool runs after the started mark.
//! by_hand::apply(&mut run, Event::Begin(agent.begin("user-7/chat-1", RunInput::Resume, Utc::now())))
//!     .expect("a call's input is taken");
//! assert!(matches!(by_hand::next(&mut run), Step::Commit(_)));
//! assert!(matches!(by_hand::next(&mut run), Step::Announce(Announcement::Started { resumed: true })));
//! let Step::Commit(started) = by_hand::next(&mut run) else { unreachable!() };
//! assert_eq!(started.at, CommitAt::Started);
//! let Step::Execute(batch) = by_hand::next(&mut run) else { unreachable!() };
//! let done = ToolResult::success(&batch.calls[0].tool_use.id, "delete_file", "deleted");
//! by_hand::apply(&mut run, Event::Acted {
//!     outcomes: vec![ExecOutcome::Done(done)],
//!     stop: false,
//!     recorded: false,
//!     now: Utc::now(),
//! })
//! .expect("an outcome is never refused");
//! assert!(matches!(by_hand::next(&mut run), Step::Commit(c) if c.at == CommitAt::Acted));
//!
//! // The requirement's record is cleared before the model is asked again.
//! assert!(matches!(by_hand::next(&mut run), Step::Commit(c) if c.at == CommitAt::Step));
//! let Step::Reason(_) = by_hand::next(&mut run) else { unreachable!() };
//! by_hand::apply(&mut run, Event::Reasoned {
//!     message: Msg::assistant("temp.txt is gone."),
//!     gates: vec![],
//!     after: AfterReasoning::default(),
//!     usage: Default::default(),
//!     now: Utc::now(),
//! })
//! .expect("an outcome is never refused");
//! // Everything to store, as one commit, then the end.
//! let Step::Commit(last) = by_hand::next(&mut run) else { unreachable!() };
//! assert_eq!(last.at, CommitAt::End);
//! assert_eq!(last.commit.expect("the answer is unsaved").append.len(), 1);
//! assert_eq!(by_hand::next(&mut run), Step::Announce(Announcement::Ended(RunStatus::Completed)));
//! assert_eq!(by_hand::next(&mut run), Step::Finish(RunStatus::Completed));
//! let out = run.output(RunStatus::Completed).expect("no structured answer was asked for");
//! assert_eq!(out.message.text(), "temp.txt is gone.");
//! ```

use crate::run::{Event, Refusal, Run, Step};

/// The run's next step (see [`Run`]'s docs and docs/architecture.md, "The run
/// contract").
#[allow(clippy::should_implement_trait)]
pub fn next(run: &mut Run) -> Step {
    run.next()
}

/// Feeds one outcome to the run: only a refused input (answered through
/// [`Event::Refused`]) or a consultation's answer that does not fit comes back as a
/// [`Refusal`].
///
/// # Errors
/// The refusal.
pub fn apply(run: &mut Run, event: Event) -> Result<(), Refusal> {
    run.apply(event)
}
