//! Replays: a recorded session re-driven, turn by turn, by another agent (another
//! model, prompt or toolkit), with every tool call served from the recording and
//! none run; the report says where the new run went another way.
//!
//! The candidate runs in a scratch fork in its own store (an in-memory agent is the
//! usual choice), made with a strict [`Record`](crate::run::Record): a call that
//! matches a recorded one by tool and argument fingerprint gets the recorded result,
//! and any other call is answered [`NOT_IN_RECORD`](crate::run::NOT_IN_RECORD)
//! without running. The scratch session is deleted at the end; the report keeps what
//! it said.

use reins_message::{ContentBlock, Msg, Role, ToolUse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::{record_of, turns, write_fork};
use crate::agent::Agent;
use crate::error::{AgentError, Result};
use crate::output::RunStatus;
use crate::session::Session;

/// Where a replay went another way than the recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Divergence {
    /// The new run made a call of a tool the recorded turn did not call there.
    NewCall {
        /// The turn (0-based).
        turn: usize,
        /// The tool.
        tool: String,
        /// Its arguments.
        input: Value,
    },
    /// The new run called the tool the recording called at that position, with other
    /// arguments.
    DifferentArguments {
        /// The turn (0-based).
        turn: usize,
        /// The tool.
        tool: String,
        /// The recorded call's arguments.
        recorded: Value,
        /// The new call's arguments.
        new: Value,
    },
    /// The turn ended with another answer.
    DifferentAnswer {
        /// The turn (0-based).
        turn: usize,
        /// The recorded answer.
        recorded: String,
        /// The new answer.
        new: String,
    },
}

/// One replayed turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayTurn {
    /// The turn (0-based).
    pub index: usize,
    /// The user message that began it.
    pub text: String,
    /// How the new run ended.
    pub status: RunStatus,
    /// The calls served from the recording (tool names, in order).
    pub served: Vec<String>,
    /// The calls that are not in the recording and were not run.
    pub not_run: Vec<String>,
    /// The recorded answer.
    pub recorded_answer: String,
    /// The new answer.
    pub answer: String,
    /// What differed, in order (empty: the turn went as recorded).
    pub divergences: Vec<Divergence>,
}

/// What a [`replay`] found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The recorded session.
    pub source: String,
    /// Each replayed turn.
    pub turns: Vec<ReplayTurn>,
    /// The first divergence, if any.
    pub first_divergence: Option<Divergence>,
    /// Why the replay ended early: the candidate's run failed in turn `turns.len()`
    /// (a model error, a hook's error), so the turns after it were not replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ReplayReport {
    /// Whether the new run went as recorded in every turn.
    pub fn matches(&self) -> bool {
        self.first_divergence.is_none() && self.error.is_none()
    }
}

/// Replays `recorded` with `candidate`: each of its turns' user messages is sent to
/// the candidate in a scratch fork of the recording, in the candidate's store; tool
/// calls are served from the recording and never run. Returns where the candidate
/// diverged. A turn that does not complete (the candidate's run is cancelled or
/// pauses, or fails: see [`ReplayReport::error`]) ends the replay. Errors: the
/// recording cannot be read, or the candidate's store refuses the scratch session.
///
/// The candidate's store gets a scratch session (`replay/<source>/<clock>-<n>`) for the
/// duration; use an in-memory agent to keep replays out of a shared store.
pub async fn replay(recorded: &Session, candidate: &Agent) -> Result<ReplayReport> {
    replay_streaming(recorded, candidate, None).await
}

/// [`replay`], sending each turn to `turns_out` as soon as it is replayed (for a
/// stream such as reins-server's replay endpoint).
pub async fn replay_streaming(
    recorded: &Session,
    candidate: &Agent,
    turns_out: Option<UnboundedSender<ReplayTurn>>,
) -> Result<ReplayReport> {
    let store = recorded.agent().runtime.store.as_ref();
    let source = store.load_session(recorded.id()).await?;
    let recorded_turns = turns(&source.messages);
    let mut report = ReplayReport {
        source: source.id.clone(),
        turns: Vec::new(),
        first_divergence: None,
        error: None,
    };
    let Some(first) = recorded_turns.first() else {
        return Ok(report);
    };
    let start = first.message_index;
    let record = record_of(store, &source, start, true).await?;
    let scratch_id = scratch_id(&source.id);
    let cstore = candidate.runtime.store.as_ref();
    write_fork(
        cstore,
        &scratch_id,
        source.messages[..start].to_vec(),
        record,
    )
    .await?;
    let outcome = async {
        let scratch = candidate.session(&scratch_id).await?;
        for turn in &recorded_turns {
            let span = &source.messages[turn.message_index..turn.message_index + turn.messages];
            let before = scratch.messages().await?.len();
            let out = match scratch.send(span[0].clone()).await {
                Ok(out) => out,
                Err(e) => {
                    report.error = Some(format!("turn {}: {e}", turn.index));
                    break;
                }
            };
            let after = scratch.messages().await?;
            let replayed = compare(
                turn.index,
                span,
                &after[before.min(after.len())..],
                out.status,
            );
            if report.first_divergence.is_none() {
                report.first_divergence = replayed.divergences.first().cloned();
            }
            if let Some(tx) = &turns_out {
                let _ = tx.send(replayed.clone());
            }
            let done = replayed.status != RunStatus::Completed;
            report.turns.push(replayed);
            if done {
                break;
            }
        }
        Ok::<(), AgentError>(())
    }
    .await;
    let cleanup = cstore.delete_session(&scratch_id).await;
    outcome?;
    cleanup?;
    Ok(report)
}

/// A session id no other replay in this process uses (a clock reading and a counter).
fn scratch_id(source: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default();
    format!("replay/{source}/{nanos:x}-{n}")
}

/// Compares a replayed turn (`new`: the messages it added) with the recorded one.
fn compare(index: usize, recorded: &[Msg], new: &[Msg], status: RunStatus) -> ReplayTurn {
    let recorded_calls: Vec<&ToolUse> = recorded.iter().flat_map(Msg::tool_uses).collect();
    let mut served = Vec::new();
    let mut not_run = Vec::new();
    let mut divergences = Vec::new();
    let results: Vec<&reins_message::ToolResult> = new
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(r),
            _ => None,
        })
        .collect();
    for (k, call) in new.iter().flat_map(Msg::tool_uses).enumerate() {
        let was_served = results
            .iter()
            .any(|r| r.id == call.id && r.metadata.contains_key("replayed_from"));
        if was_served {
            served.push(call.name.clone());
            continue;
        }
        not_run.push(call.name.clone());
        divergences.push(match recorded_calls.get(k) {
            Some(rec) if rec.name == call.name => Divergence::DifferentArguments {
                turn: index,
                tool: call.name.clone(),
                recorded: rec.input.clone(),
                new: call.input.clone(),
            },
            _ => Divergence::NewCall {
                turn: index,
                tool: call.name.clone(),
                input: call.input.clone(),
            },
        });
    }
    let answer_of = |msgs: &[Msg]| {
        msgs.iter()
            .rev()
            .find(|m| m.role == Role::Assistant && !m.text().trim().is_empty())
            .map(Msg::text)
            .unwrap_or_default()
    };
    let recorded_answer = answer_of(recorded);
    let answer = answer_of(new);
    if answer.trim() != recorded_answer.trim() {
        divergences.push(Divergence::DifferentAnswer {
            turn: index,
            recorded: recorded_answer.clone(),
            new: answer.clone(),
        });
    }
    ReplayTurn {
        index,
        text: recorded.first().map(Msg::text).unwrap_or_default(),
        status,
        served,
        not_run,
        recorded_answer,
        answer,
        divergences,
    }
}
