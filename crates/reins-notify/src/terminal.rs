//! [`TerminalChannel`]: notices printed as lines on standard error.

use std::io::Write;

use async_trait::async_trait;

use crate::{Attempt, Channel, DeliveryError, Notice};

/// Prints every notice as one line on standard error — what `cargo xtask serve` uses so
/// that a new user sees the flow without Slack or SMTP:
///
/// ```text
/// [notice] requirement.waiting  session=demo/chat-1 requirement=call_1 tool=delete_file  for: ana
/// ```
#[derive(Debug, Clone, Default)]
pub struct TerminalChannel {
    _private: (),
}

impl TerminalChannel {
    /// A terminal channel.
    pub fn new() -> Self {
        Self::default()
    }

    /// The line printed for `notice`.
    pub fn line(notice: &Notice) -> String {
        let mut s = format!("[notice] {:<22}", notice.kind.as_str());
        for (k, v) in [
            ("session", &notice.session),
            ("requirement", &notice.requirement),
            ("tool", &notice.tool),
        ] {
            if let Some(v) = v {
                s.push_str(&format!(" {k}={v}"));
            }
        }
        if !notice.principals.is_empty() {
            s.push_str(&format!("  principals: {}", notice.principals.join(", ")));
        }
        s.push_str(&format!("  id={}", notice.id));
        s
    }
}

#[async_trait]
impl Channel for TerminalChannel {
    fn name(&self) -> &str {
        "terminal"
    }

    fn wants(&self, _notice: &Notice) -> bool {
        true
    }

    async fn deliver(&self, notice: &Notice, _attempt: &Attempt) -> Result<(), DeliveryError> {
        let line = Self::line(notice);
        writeln!(std::io::stderr().lock(), "{line}")
            .map_err(|e| DeliveryError::Retryable(format!("could not write to stderr: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoticeKind;

    #[test]
    fn a_line_names_the_kind_the_session_the_call_and_the_id() {
        let n = Notice::new(NoticeKind::RequirementDecided)
            .session("dev/chat-1")
            .requirement("call_1")
            .tool("delete_file")
            .principal("ana");
        let line = TerminalChannel::line(&n);
        assert!(line.starts_with("[notice] requirement.decided "), "{line}");
        assert!(
            line.contains(
                "session=dev/chat-1 requirement=call_1 tool=delete_file  principals: ana"
            ),
            "{line}"
        );
        assert!(line.ends_with(&format!("id={}", n.id)), "{line}");
    }
}
