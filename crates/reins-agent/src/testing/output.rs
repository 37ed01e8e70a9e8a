//! The structured-answer scenarios: the agent's own spec ([`Scenario::OutputSpec`])
//! and one a caller gives a single message ([`Scenario::CallOutput`]).
//!
//! [`Scenario::OutputSpec`]: super::Scenario::OutputSpec
//! [`Scenario::CallOutput`]: super::Scenario::CallOutput

use reins_message::Msg;
use serde_json::{Value, json};

use super::{On, report_spec};
use crate::error::AgentError;
use crate::run::RunInput;
use crate::structured::{FINAL_ANSWER_TOOL, OUTPUT_MARK, OutputSpec};

/// Fails the check with a message when `cond` does not hold.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

type Check = std::result::Result<(), String>;

impl On<'_> {
    /// The structured answers stored on `session` (the `final_answer` calls of the
    /// messages marked as answers), oldest first.
    async fn answers(&self, session: &str) -> std::result::Result<Vec<Option<Value>>, String> {
        Ok(self
            .messages(session)
            .await?
            .iter()
            .filter(|m| m.metadata.get(OUTPUT_MARK) == Some(&json!("answer")))
            .map(|m| {
                m.tool_uses()
                    .find(|u| u.name == FINAL_ANSWER_TOOL)
                    .map(|u| u.input.clone())
            })
            .collect())
    }

    /// The text of the last stored message.
    async fn last_text(&self, session: &str) -> std::result::Result<String, String> {
        Ok(self
            .messages(session)
            .await?
            .last()
            .map(Msg::text)
            .unwrap_or_default())
    }

    pub(super) async fn output_spec(&self, session: &str) -> Check {
        let v = self.send(session, "report", "alice").await?;
        ensure!(!v.paused, "the run must end, got {:?}", v.phase);
        let answers = self.answers(session).await?;
        ensure!(
            answers.last() == Some(&Some(json!({"report": "all quiet"}))),
            "the run must end with the structured report, got {answers:?} (last message `{}`)",
            self.last_text(session).await?
        );
        Ok(())
    }

    pub(super) async fn call_output(&self, session: &str) -> Check {
        // A spec that is not a JSON Schema: refused, nothing stored.
        let bad = OutputSpec::new("report", json!("a report"));
        match self
            .submit_with(
                session,
                RunInput::Message(Msg::user("report")),
                "alice",
                Some(bad),
            )
            .await?
        {
            Err(AgentError::InvalidInput(_)) => {}
            other => {
                return Err(format!(
                    "a spec that is no schema must be refused, got {other:?}"
                ));
            }
        }
        ensure!(
            self.messages(session).await.map_or(true, |m| m.is_empty()),
            "a refused message must leave nothing stored"
        );

        let v = self
            .submit_with(
                session,
                RunInput::Message(Msg::user("report")),
                "alice",
                Some(report_spec()),
            )
            .await?
            .map_err(|e| format!("the message with an output spec was refused: {e}"))?;
        ensure!(!v.paused, "the run must end, got {:?}", v.phase);
        let answers = self.answers(session).await?;
        ensure!(
            answers == vec![Some(json!({"report": "all quiet"}))],
            "the run must end with the structured report, got {answers:?} (last message `{}`)",
            self.last_text(session).await?
        );

        // The spec was the call's, not the session's: the next message is free text.
        let v = self.send(session, "report", "alice").await?;
        ensure!(!v.paused, "the run must end, got {:?}", v.phase);
        ensure!(
            self.answers(session).await?.len() == 1,
            "a message without a spec must not end with a structured answer"
        );
        let last = self.last_text(session).await?;
        ensure!(
            last == "all quiet",
            "a message without a spec must end in plain text, got `{last}`"
        );
        Ok(())
    }
}
