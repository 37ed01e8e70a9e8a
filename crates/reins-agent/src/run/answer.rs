//! Structured output inside the run: how to ask for it, and judging the model's
//! answer against the run's output schema (see [`crate::structured`]).

use reins_message::{Msg, ToolResult, ToolUse};
use serde_json::Value;

use super::{AfterReasoning, GateDecision, OutputState, Phase, Run};
use crate::output::RunStatus;
use crate::structured::{
    FINAL_ANSWER_TOOL, OUTPUT_MARK, OutputMode, OutputSpec, feedback, parse_text_answer,
};

/// What [`Run::take_structured_answer`] made of a model message.
pub(super) enum Answer {
    /// The run asks for no structured answer, or the message is not one.
    NotApplicable,
    /// The answer was accepted, sent back, or failed: nothing else to do.
    Done,
    /// `final_answer` calls mixed with others: their refusals, to store after the
    /// message.
    Mixed(Vec<ToolResult>),
}

impl Run {
    // ----- structured output --------------------------------------------------------

    /// Handles the model's message when the run asks for a structured answer: a text
    /// answer (native mode, or a model that skipped the tool), or a lone `final_answer`
    /// call, is validated — accepted (the run completes), or sent back with what is
    /// wrong (bounded), or, past the bound, the call fails. A `final_answer` call mixed
    /// with other tool calls is refused with an error result; the others go on.
    pub(super) fn take_structured_answer(
        &mut self,
        msg: &mut Msg,
        gates: &mut Vec<GateDecision>,
        after: &AfterReasoning,
    ) -> Answer {
        let Some(out) = self.state.output.clone() else {
            return Answer::NotApplicable;
        };
        let Some(mode) = out.asked else {
            return Answer::NotApplicable;
        };
        let tool_mode = mode != OutputMode::NativeSchema;
        let uses: Vec<ToolUse> = msg.tool_uses().cloned().collect();
        let finals: Vec<usize> = uses
            .iter()
            .enumerate()
            .filter(|(_, u)| tool_mode && u.name == FINAL_ANSWER_TOOL)
            .map(|(i, _)| i)
            .collect();
        if uses.is_empty() {
            if !after.goto.is_empty() {
                return Answer::NotApplicable;
            }
            // A text answer: the JSON itself (native mode), or a model that answered
            // in text instead of calling the tool.
            let text = msg.text();
            let checked = parse_text_answer(&text)
                .map_err(|e| vec![e])
                .and_then(|v| out.spec.validate(&v).map(|()| v));
            self.judge(msg.clone(), &out, text, checked, None);
            return Answer::Done;
        }
        if finals.is_empty() {
            return Answer::NotApplicable;
        }
        if finals.len() == uses.len() && finals.len() == 1 {
            let u = &uses[finals[0]];
            let answer = out.spec.answer_from_args(&u.input);
            let checked = if u.has_malformed_input() {
                Err(vec![format!(
                    "the arguments are not valid JSON: {}",
                    u.raw_input.as_deref().unwrap_or_default()
                )])
            } else {
                out.spec.validate(&answer).map(|()| answer)
            };
            let raw = u.raw_input.clone().unwrap_or_else(|| u.input.to_string());
            self.judge(msg.clone(), &out, raw, checked, Some(u.clone()));
            return Answer::Done;
        }
        // Mixed with other calls (or several answers at once): refuse the answers.
        let mut refused = Vec::new();
        for &i in finals.iter().rev() {
            if i < gates.len() {
                gates.remove(i);
            }
        }
        for &i in &finals {
            let u = &uses[i];
            refused.push(ToolResult::for_use(
                u,
                reins_message::ToolOutcome::Error,
                format!(
                    "not accepted: call `{FINAL_ANSWER_TOOL}` alone, once the other tools                      have finished"
                ),
            ));
        }
        Answer::Mixed(refused)
    }

    /// Accepts, sends back, or (past the bound) fails a structured answer.
    fn judge(
        &mut self,
        mut msg: Msg,
        out: &OutputState,
        raw: String,
        checked: std::result::Result<Value, Vec<String>>,
        via_tool: Option<ToolUse>,
    ) {
        match checked {
            Ok(value) => {
                msg.metadata
                    .insert(OUTPUT_MARK.to_owned(), Value::String("answer".to_owned()));
                self.push(msg.clone());
                if let Some(u) = &via_tool {
                    self.push(Msg::tool_results([ToolResult::for_use(
                        u,
                        reins_message::ToolOutcome::Success,
                        "answer accepted",
                    )]));
                }
                self.call.last_assistant = Some(msg);
                self.call.structured = Some(value);
                self.finish(RunStatus::Completed);
            }
            Err(problems) => {
                msg.metadata
                    .insert(OUTPUT_MARK.to_owned(), Value::String("invalid".to_owned()));
                self.push(msg.clone());
                self.call.last_assistant = Some(msg);
                let text = feedback(
                    &out.spec,
                    &problems,
                    via_tool.is_some() || out.asked != Some(OutputMode::NativeSchema),
                );
                let mut tell = match &via_tool {
                    Some(u) => Msg::tool_results([ToolResult::for_use(
                        u,
                        reins_message::ToolOutcome::Error,
                        text,
                    )]),
                    None => Msg::user(text),
                };
                tell.metadata
                    .insert(OUTPUT_MARK.to_owned(), Value::String("feedback".to_owned()));
                if out.attempts >= out.spec.max_retries {
                    // The tool use still needs its result; a text answer needs nothing.
                    if via_tool.is_some() {
                        self.push(tell);
                    }
                    self.call.output_failure = Some((raw, problems, out.attempts + 1));
                    self.finish(RunStatus::Completed);
                    return;
                }
                self.push(tell);
                if let Some(o) = self.state.output.as_mut() {
                    o.attempts += 1;
                }
                self.state.phase = Phase::Reasoning;
            }
        }
    }
}

impl Run {
    /// For a request about to be made: how to ask for the structured answer with a
    /// model of these capabilities, when the run wants one. Records the mode used.
    pub(super) fn prepare_output(
        &mut self,
        caps: reins_model::ModelCapabilities,
    ) -> Option<(OutputMode, OutputSpec)> {
        if self.state.phase == Phase::Summarizing {
            return None;
        }
        let out = self.state.output.as_mut()?;
        let mode = out.spec.mode.resolve(caps);
        out.asked = Some(mode);
        Some((mode, out.spec.clone()))
    }
}
