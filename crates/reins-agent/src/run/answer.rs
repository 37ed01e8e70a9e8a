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

/// What a model message is, for a run that asks for a structured answer: decided
/// from the message alone, with no change to the run (unit-tested below).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Reading {
    /// Not an answer: the run goes on as usual.
    NotAnAnswer,
    /// A text answer (native mode, or a model that answered in text instead of
    /// calling the tool): the raw text and the checked value.
    Text {
        raw: String,
        checked: std::result::Result<Value, Vec<String>>,
    },
    /// A lone `final_answer` call: the call, its raw arguments and the checked value.
    Tool {
        call: ToolUse,
        raw: String,
        checked: std::result::Result<Value, Vec<String>>,
    },
    /// `final_answer` calls mixed with others (or several at once): their positions
    /// among the message's tool uses, to refuse.
    Mixed(Vec<usize>),
}

/// Reads `msg` against the run's output state (`None` when the run wants no
/// structured answer or has not asked for one yet).
pub(super) fn read(out: Option<&OutputState>, msg: &Msg, after: &AfterReasoning) -> Reading {
    let Some(out) = out else {
        return Reading::NotAnAnswer;
    };
    let Some(mode) = out.asked else {
        return Reading::NotAnAnswer;
    };
    let tool_mode = mode != OutputMode::NativeSchema;
    let uses: Vec<&ToolUse> = msg.tool_uses().collect();
    let finals: Vec<usize> = uses
        .iter()
        .enumerate()
        .filter(|(_, u)| tool_mode && u.name == FINAL_ANSWER_TOOL)
        .map(|(i, _)| i)
        .collect();
    if uses.is_empty() {
        if !after.goto.is_empty() {
            return Reading::NotAnAnswer;
        }
        let raw = msg.text();
        let checked = parse_text_answer(&raw)
            .map_err(|e| vec![e])
            .and_then(|v| out.spec.validate(&v).map(|()| v));
        return Reading::Text { raw, checked };
    }
    if finals.is_empty() {
        return Reading::NotAnAnswer;
    }
    if finals.len() == uses.len() && finals.len() == 1 {
        let u = uses[finals[0]];
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
        return Reading::Tool {
            call: u.clone(),
            raw,
            checked,
        };
    }
    Reading::Mixed(finals)
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
        match read(self.state.output.as_ref(), msg, after) {
            Reading::NotAnAnswer => Answer::NotApplicable,
            Reading::Text { raw, checked } => {
                let out = self.state.output.clone();
                if let Some(out) = out {
                    self.judge(msg.clone(), &out, raw, checked, None);
                }
                Answer::Done
            }
            Reading::Tool { call, raw, checked } => {
                let out = self.state.output.clone();
                if let Some(out) = out {
                    self.judge(msg.clone(), &out, raw, checked, Some(call));
                }
                Answer::Done
            }
            Reading::Mixed(finals) => {
                let uses: Vec<&ToolUse> = msg.tool_uses().collect();
                for &i in finals.iter().rev() {
                    if i < gates.len() {
                        gates.remove(i);
                    }
                }
                let refused = finals
                    .iter()
                    .filter_map(|&i| uses.get(i))
                    .map(|u| {
                        ToolResult::for_use(
                            u,
                            reins_message::ToolOutcome::Error,
                            format!(
                                "not accepted: call `{FINAL_ANSWER_TOOL}` alone, once the other tools                      have finished"
                            ),
                        )
                    })
                    .collect();
                Answer::Mixed(refused)
            }
        }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use reins_message::{ContentBlock, Role};
    use serde_json::json;

    fn state(mode: OutputMode) -> OutputState {
        let spec = OutputSpec::new(
            "weather",
            json!({
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"]
            }),
        );
        OutputState {
            spec,
            attempts: 0,
            asked: Some(mode),
        }
    }

    fn calls(names: &[&str], input: Value) -> Msg {
        Msg::new(
            Role::Assistant,
            names
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    ContentBlock::ToolUse(ToolUse::new(format!("c{i}"), *n, input.clone()))
                })
                .collect(),
        )
    }

    #[test]
    fn no_output_state_or_no_mode_yet_is_not_an_answer() {
        let msg = Msg::assistant(r#"{"city": "Oslo"}"#);
        let after = AfterReasoning::default();
        assert_eq!(read(None, &msg, &after), Reading::NotAnAnswer);
        let mut s = state(OutputMode::NativeSchema);
        s.asked = None;
        assert_eq!(read(Some(&s), &msg, &after), Reading::NotAnAnswer);
    }

    #[test]
    fn a_text_answer_is_parsed_and_validated() {
        let s = state(OutputMode::NativeSchema);
        let after = AfterReasoning::default();
        let ok = read(Some(&s), &Msg::assistant(r#"{"city": "Oslo"}"#), &after);
        assert!(matches!(ok, Reading::Text { checked: Ok(v), .. } if v == json!({"city": "Oslo"})));
        let bad = read(Some(&s), &Msg::assistant(r#"{"town": 1}"#), &after);
        assert!(matches!(bad, Reading::Text { checked: Err(p), .. } if !p.is_empty()));
        // A hook that sends the model back to reasoning: not an answer.
        let goto = AfterReasoning {
            stop: false,
            goto: vec![Msg::user("again")],
        };
        assert_eq!(
            read(Some(&s), &Msg::assistant("{}"), &goto),
            Reading::NotAnAnswer
        );
    }

    #[test]
    fn a_lone_final_answer_call_is_an_answer_and_a_mixed_one_is_refused() {
        let s = state(OutputMode::AnswerTool);
        let after = AfterReasoning::default();
        let lone = read(
            Some(&s),
            &calls(&[FINAL_ANSWER_TOOL], json!({"city": "Oslo"})),
            &after,
        );
        match lone {
            Reading::Tool { call, checked, .. } => {
                assert_eq!(call.name, FINAL_ANSWER_TOOL);
                assert!(checked.is_ok());
            }
            other => panic!("{other:?}"),
        }
        let mixed = read(
            Some(&s),
            &calls(&["search", FINAL_ANSWER_TOOL], json!({"city": "Oslo"})),
            &after,
        );
        assert_eq!(mixed, Reading::Mixed(vec![1]));
        // Other tools only: the run goes on.
        assert_eq!(
            read(Some(&s), &calls(&["search"], json!({})), &after),
            Reading::NotAnAnswer
        );
        // In native mode a `final_answer` call is just a tool call.
        let native = state(OutputMode::NativeSchema);
        assert_eq!(
            read(
                Some(&native),
                &calls(&[FINAL_ANSWER_TOOL], json!({"city": "Oslo"})),
                &after
            ),
            Reading::NotAnAnswer
        );
    }
}
