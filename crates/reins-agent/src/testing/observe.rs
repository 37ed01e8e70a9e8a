//! [`Scenario::HookEvents`]: the hooks that only watch — a tool's partial output
//! (`ActingChunk`) and a call that failed (`Error`) — run on every driver.
//!
//! [`Scenario::HookEvents`]: super::Scenario::HookEvents

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reins_hook::{Control, Hook, HookContext, HookError, HookEvent, HookEventKind};
use reins_message::Msg;

use super::features::append;
use super::{On, SETTLE};
use crate::backend::Submission;
use crate::run::RunInput;

/// The text whose model call [`Watcher`] fails.
const FAIL: &str = "fail";

/// Fails the check with a message when `cond` does not hold.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// Writes `chunk <session>/<call> <text>` for each `ActingChunk` and `error <session>
/// <message>` for each `Error` to the outbox, and fails the `PreReasoning` of a
/// request whose last message is `fail`.
pub(super) struct Watcher {
    outbox: PathBuf,
}

impl Watcher {
    pub(super) fn new(outbox: &Path) -> Self {
        Self {
            outbox: outbox.to_path_buf(),
        }
    }
}

#[async_trait]
impl Hook for Watcher {
    fn interested(&self, kind: HookEventKind) -> bool {
        matches!(
            kind,
            HookEventKind::ActingChunk | HookEventKind::Error | HookEventKind::PreReasoning
        )
    }

    async fn on_event(
        &self,
        event: &mut HookEvent,
        ctx: &HookContext,
        _control: &mut Control,
    ) -> Result<(), HookError> {
        let line = match event {
            HookEvent::ActingChunk { tool_use_id, chunk } => format!(
                "chunk {}/{tool_use_id} {}\n",
                ctx.session_id,
                chunk.as_text().unwrap_or_default()
            ),
            HookEvent::Error { message } => {
                format!("error {} {}\n", ctx.session_id, message.replace('\n', " "))
            }
            HookEvent::PreReasoning { request } => {
                if request.messages.last().map(Msg::text).as_deref() == Some(FAIL) {
                    return Err(HookError::new("the watcher fails this call"));
                }
                return Ok(());
            }
            _ => return Ok(()),
        };
        append(&self.outbox, &line).map_err(|e| HookError::new(e.to_string()))
    }
}

impl On<'_> {
    pub(super) async fn hook_events(&self, session: &str) -> std::result::Result<(), String> {
        // A call that streams partial output: the hook sees its chunk once.
        let id = self.email_approved(session, "chunk@example.com").await?;
        let chunk = format!("chunk {session}/{id} sending to chunk@example.com");
        ensure!(
            self.outbox_lines(&chunk) == 1,
            "the ActingChunk hook must see the call's chunk once, saw it {} times",
            self.outbox_lines(&chunk)
        );
        ensure!(self.runs(session) == 1, "the call must run once");

        // A call whose hook fails: the Error hooks are told, once. (The failure may
        // come back from `submit`, or end the run after it was accepted.)
        let before = self
            .backend
            .view(session)
            .await
            .map_err(|e| e.to_string())?;
        let mut submission = Submission::new(RunInput::Message(Msg::user(FAIL)));
        submission.view = Some(before.token);
        let _ = self.backend.submit(session, submission).await;
        let error = format!("error {session} ");
        let start = Instant::now();
        while self.outbox_lines(&error) == 0 {
            ensure!(
                start.elapsed() < SETTLE,
                "the Error hooks were not told of the failed call within {SETTLE:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Nothing more arrives (no second telling).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let told = std::fs::read_to_string(self.outbox)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(&error))
            .map(str::to_owned)
            .collect::<Vec<_>>();
        ensure!(
            told.len() == 1 && told[0].contains("the watcher fails this call"),
            "the Error hooks must be told once, with the hook's error: {told:?}"
        );
        Ok(())
    }
}
