//! The scenarios of the features every driver runs: hooks, context compression,
//! reconcile, fork/replay and idempotency keys (see the [table](super)).

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use reins_hook::{Control, Hook, HookContext, HookError, HookEvent, HookEventKind};
use reins_message::{Msg, ToolOutcome, ToolResult};
use reins_tool::{Reconciliation, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};

use super::{On, TOOL};
use crate::backend::Submission;
use crate::compression::{ContextPolicy, SUMMARY_MARK};
use crate::error::AgentError;
use crate::fork::{ForkPoint, fork_len, record_of, write_fork};
use crate::requirement::Decision;
use crate::run::RunInput;
use crate::view::Actor;

/// The address [`MailHook`] blocks.
const BLOCKED: &str = "mallory@example.com";

/// Fails the check with a message when `cond` does not hold.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// The `PreActing` hook of [`super::Scenario::Hooks`]: rejects mail to
/// [`BLOCKED`], writes every other address in lower case, and appends `hook
/// <session>/<call>` to the outbox each time it sees a call.
pub(super) struct MailHook {
    outbox: PathBuf,
}

impl MailHook {
    pub(super) fn new(outbox: &Path) -> Self {
        Self {
            outbox: outbox.to_path_buf(),
        }
    }
}

#[async_trait]
impl Hook for MailHook {
    fn interested(&self, kind: HookEventKind) -> bool {
        kind == HookEventKind::PreActing
    }

    async fn on_event(
        &self,
        event: &mut HookEvent,
        ctx: &HookContext,
        control: &mut Control,
    ) -> Result<(), HookError> {
        let HookEvent::PreActing { tool_use } = event else {
            return Ok(());
        };
        append(
            &self.outbox,
            &format!("hook {}/{}\n", ctx.session_id, tool_use.id),
        )
        .map_err(|e| HookError::new(e.to_string()))?;
        let to = tool_use.input["to"].as_str().unwrap_or_default().to_owned();
        if to == BLOCKED {
            control.reject("mail to mallory is blocked by the mail hook");
        } else {
            tool_use.input["to"] = Value::String(to.to_lowercase());
        }
        Ok(())
    }
}

/// Appends `line` to `outbox` in one write.
pub(super) fn append(outbox: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(outbox)
        .and_then(|mut f| f.write_all(line.as_bytes()))
}

/// The context policy of [`super::Scenario::Compression`]: a budget a few padded
/// turns outgrow.
pub(super) fn context_policy() -> ContextPolicy {
    ContextPolicy::new(700).compress_to(400)
}

/// `send_email`'s reconcile: the call took effect when the outbox has its line.
pub(super) fn sent_before(outbox: &Path, ctx: &ToolContext) -> Reconciliation {
    let mark = format!("{TOOL} {}/{} ", ctx.session_id, ctx.tool_use_id);
    let sent = std::fs::read_to_string(outbox)
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with(&mark));
    if sent {
        Reconciliation::Happened(ToolOutput::text("sent (found in the outbox)"))
    } else {
        Reconciliation::NotRun
    }
}

/// The gated part of `send_email` to a `gate…` address: appends `gate
/// <session>/<call>` to the outbox, then waits until the outbox has the line `open
/// <session>/<call>` (the scenario opens the gate), or for the call's cancellation.
pub(super) async fn gated_send(outbox: &Path, ctx: &ToolContext) -> Result<(), ToolError> {
    let call = format!("{}/{}", ctx.session_id, ctx.tool_use_id);
    append(outbox, &format!("gate {call}\n")).map_err(|e| ToolError::Failed(e.to_string()))?;
    let open = format!("open {call}");
    loop {
        let opened = std::fs::read_to_string(outbox)
            .unwrap_or_default()
            .lines()
            .any(|l| l == open);
        if opened {
            return Ok(());
        }
        tokio::select! {
            () = ctx.cancelled() => return Err(ToolError::Cancelled),
            () = tokio::time::sleep(std::time::Duration::from_millis(20)) => {}
        }
    }
}

/// The slow part of `send_email` to a `slow…` address: appends `slow <session>/<call>`
/// to the outbox, then waits (at most 20 s) for the call's cancellation token.
pub(super) async fn slow_send(outbox: &Path, ctx: &ToolContext) -> Result<(), ToolError> {
    append(
        outbox,
        &format!("slow {}/{}\n", ctx.session_id, ctx.tool_use_id),
    )
    .map_err(|e| ToolError::Failed(e.to_string()))?;
    tokio::select! {
        () = ctx.cancelled() => Err(ToolError::Cancelled),
        () = tokio::time::sleep(std::time::Duration::from_secs(20)) => Ok(()),
    }
}

type Check = std::result::Result<(), String>;

impl On<'_> {
    /// How many lines of `outbox` start with `prefix`.
    pub(super) fn outbox_lines(&self, prefix: &str) -> usize {
        std::fs::read_to_string(self.outbox)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(prefix))
            .count()
    }

    /// The stored result of call `id` in `session`.
    async fn result(&self, session: &str, id: &str) -> std::result::Result<ToolResult, String> {
        self.messages(session)
            .await?
            .iter()
            .flat_map(Msg::tool_results_iter)
            .find(|r| r.id == id)
            .cloned()
            .ok_or_else(|| format!("call `{id}` has no stored result"))
    }

    /// Sends `email ADDRESS`, expects a pause, approves it; the call's id.
    pub(super) async fn email_approved(
        &self,
        session: &str,
        to: &str,
    ) -> std::result::Result<String, String> {
        let v = self.send(session, &format!("email {to}"), "alice").await?;
        ensure!(
            v.paused,
            "the call must wait for a person, got {:?}",
            v.phase
        );
        let id = v.requirements.first().ok_or("no requirement")?.id.clone();
        self.approve(session, &id, "ana")
            .await?
            .map_err(|e| format!("the approval was refused: {e}"))?;
        Ok(id)
    }

    pub(super) async fn hooks(&self, session: &str) -> Check {
        let blocked = self.email_approved(session, BLOCKED).await?;
        ensure!(
            self.runs(session) == 0,
            "a call the hook blocks must not run"
        );
        let r = self.result(session, &blocked).await?;
        ensure!(
            matches!(&r.outcome, ToolOutcome::Rejected { note: Some(n) } if n.contains("blocked by the mail hook"))
                && r.metadata.get("rejected_by") == Some(&json!("hook")),
            "the blocked call must be rejected by the hook, got {r:?}"
        );

        let edited = self.email_approved(session, "Carol@Example.COM").await?;
        ensure!(
            self.runs(session) == 1,
            "the edited call must run once, ran {}",
            self.runs(session)
        );
        ensure!(
            self.outbox_lines(&format!("{TOOL} {session}/{edited} carol@example.com")) == 1,
            "the tool must run with the hook's address"
        );
        let r = self.result(session, &edited).await?;
        ensure!(
            r.metadata.get("executed_input").and_then(|i| i.get("to"))
                == Some(&json!("carol@example.com")),
            "the result must record the arguments that ran, got {:?}",
            r.metadata
        );
        for id in [&blocked, &edited] {
            let seen = self.outbox_lines(&format!("hook {session}/{id}"));
            ensure!(
                seen == 1,
                "the hook must see call `{id}` once, saw it {seen} times"
            );
        }
        Ok(())
    }

    pub(super) async fn compression(&self, session: &str) -> Check {
        let pad = "the quarterly numbers look steady and the team wants a short note. ".repeat(10);
        for i in 0..8 {
            self.send(session, &format!("note {i}: {pad}"), "alice")
                .await?;
        }
        let v = self.send(session, "count", "alice").await?;
        ensure!(!v.paused, "the run must end, got {:?}", v.phase);
        let messages = self.messages(session).await?;
        let summaries = messages
            .iter()
            .filter(|m| m.metadata.contains_key(SUMMARY_MARK))
            .count();
        ensure!(summaries >= 1, "a summary must be stored, found none");
        let last = messages.last().map(Msg::text).unwrap_or_default();
        let seen: usize = last
            .strip_prefix("seen ")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("the last answer must say what the model saw: `{last}`"))?;
        ensure!(
            seen < messages.len() - 1,
            "the model's last request must carry fewer messages than the {} stored, carried {seen}",
            messages.len() - 1
        );
        Ok(())
    }

    /// Claims `id`'s ledger entry as a process that started it and died (its lease
    /// runs out at once).
    async fn started_and_died(&self, session: &str, id: &str, input: &Value) -> Check {
        let fingerprint = reins_memory::fingerprint(input);
        self.store
            .claim(
                session,
                id,
                &fingerprint,
                std::time::Duration::from_millis(1),
                false,
            )
            .await
            .map_err(|e| format!("claiming the call failed: {e}"))?;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        Ok(())
    }

    pub(super) async fn reconcile(&self, session: &str) -> Check {
        // It took effect before its process died.
        let v = self.send(session, "email dan@example.com", "alice").await?;
        let r = v.requirements.first().ok_or("no requirement")?.clone();
        self.started_and_died(session, &r.id, &r.tool_use.input)
            .await?;
        append(
            self.outbox,
            &format!("{TOOL} {session}/{} dan@example.com\n", r.id),
        )
        .map_err(|e| e.to_string())?;
        self.approve(session, &r.id, "ana")
            .await?
            .map_err(|e| format!("the approval was refused: {e}"))?;
        ensure!(
            self.runs(session) == 1,
            "a call that took effect must not run again, ran {} times in all",
            self.runs(session)
        );
        let result = self.result(session, &r.id).await?;
        ensure!(
            result.metadata.get("reconciled") == Some(&json!("happened"))
                && result.outcome == ToolOutcome::Success,
            "the call must be settled by its tool's reconcile, got {result:?}"
        );
        let trail = self.trail(session).await?;
        ensure!(
            trail.iter().any(|d| d.kind == "reconcile"
                && d.decision == "happened"
                && d.requirement_id == r.id),
            "the audit trail must record the reconcile: {trail:?}"
        );

        // It did not take effect: it runs, once.
        let v = self
            .send(session, "email erin@example.com", "alice")
            .await?;
        let r = v.requirements.first().ok_or("no requirement")?.clone();
        self.started_and_died(session, &r.id, &r.tool_use.input)
            .await?;
        self.approve(session, &r.id, "ana")
            .await?
            .map_err(|e| format!("the approval was refused: {e}"))?;
        let ran = self.outbox_lines(&format!("{TOOL} {session}/{} ", r.id));
        ensure!(
            ran == 1,
            "a call that never took effect must run once, ran {ran}"
        );
        let trail = self.trail(session).await?;
        ensure!(
            trail.iter().any(|d| d.kind == "reconcile"
                && d.decision == "not_run"
                && d.requirement_id == r.id),
            "the audit trail must record that the call had not run: {trail:?}"
        );
        Ok(())
    }

    pub(super) async fn fork_replay(&self, session: &str) -> Check {
        self.email_approved(session, "frank@example.com").await?;
        ensure!(self.runs(session) == 1, "the original call must run once");
        // The fork: the same store, before the turn with the call.
        let fork = format!("{session}-fork");
        let source = self
            .store
            .load_session(session)
            .await
            .map_err(|e| format!("reading the session failed: {e}"))?;
        let n = fork_len(&source.messages, ForkPoint::BeforeTurn(0)).map_err(|e| e.to_string())?;
        let record = record_of(self.store, &source, n, false)
            .await
            .map_err(|e| e.to_string())?;
        ensure!(
            record.calls.len() == 1,
            "the fork must record the finished call"
        );
        write_fork(self.store, &fork, source.messages[..n].to_vec(), record)
            .await
            .map_err(|e| format!("forking failed: {e}"))?;

        let v = self.send(&fork, "email frank@example.com", "alice").await?;
        ensure!(
            !v.paused,
            "a replayed call must not ask anyone, got {:?}",
            v.phase
        );
        ensure!(self.runs(&fork) == 0, "a replayed call must not run again");
        ensure!(self.runs(session) == 1, "the original ran once");
        let served = self
            .messages(&fork)
            .await?
            .iter()
            .flat_map(Msg::tool_results_iter)
            .any(|r| r.text().contains("sent to frank@example.com"));
        ensure!(served, "the fork's call must get the recorded result");
        let trail = self.trail(&fork).await?;
        ensure!(
            trail.iter().any(|d| d.decision == "replayed"),
            "the fork's audit trail must record the replay: {trail:?}"
        );
        Ok(())
    }

    pub(super) async fn idempotency_key(&self, session: &str) -> Check {
        let v = self
            .send(session, "email gina@example.com", "alice")
            .await?;
        ensure!(
            v.paused,
            "the call must wait for a person, got {:?}",
            v.phase
        );
        let id = v.requirements.first().ok_or("no requirement")?.id.clone();
        let submission = Submission {
            input: RunInput::Decisions(vec![Decision::approve(&id).by("ana")]),
            actor: Some(Actor::new("ana")),
            view: Some(v.token.clone()),
            idempotency_key: Some(format!("approve-{id}")),
            client_tools: Vec::new(),
            output: None,
            budget: None,
            trace_parent: None,
        };
        self.backend
            .submit(session, submission.clone())
            .await
            .map_err(|e| format!("the first approval was refused: {e}"))?;
        let again = self.backend.submit(session, submission).await;
        ensure!(
            matches!(
                &again,
                Ok(()) | Err(AgentError::AlreadyDecided { .. } | AgentError::StaleView { .. })
            ),
            "the same approval again must get the first answer or be refused as already decided, got {again:?}"
        );
        self.settled_after(session, v.version).await?;
        ensure!(
            self.runs(session) == 1,
            "the tool must run once, ran {}",
            self.runs(session)
        );
        let approvals = self
            .trail(session)
            .await?
            .iter()
            .filter(|d| {
                d.requirement_id == id
                    && d.decision == "approve"
                    && d.verdict == crate::view::Verdict::Applied
            })
            .count();
        ensure!(
            approvals == 1,
            "one approval must be applied, {approvals} were"
        );
        Ok(())
    }

    pub(super) async fn interrupt(&self, session: &str) -> Check {
        let v = self
            .send(session, "email slow@example.com", "alice")
            .await?;
        ensure!(
            v.paused,
            "the call must wait for a person, got {:?}",
            v.phase
        );
        let id = v.requirements.first().ok_or("no requirement")?.id.clone();
        let submission = Submission {
            input: RunInput::Decisions(vec![Decision::approve(&id).by("ana")]),
            actor: Some(Actor::new("ana")),
            view: Some(v.token.clone()),
            idempotency_key: None,
            client_tools: Vec::new(),
            output: None,
            budget: None,
            trace_parent: None,
        };
        self.backend
            .submit(session, submission)
            .await
            .map_err(|e| format!("the approval was refused: {e}"))?;
        let started = format!("slow {session}/{id}");
        let deadline = std::time::Instant::now() + super::SETTLE;
        while self.outbox_lines(&started) == 0 {
            ensure!(
                std::time::Instant::now() < deadline,
                "the approved call never started"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let requested = self
            .backend
            .interrupt(session)
            .await
            .map_err(|e| format!("the interrupt was refused: {e}"))?;
        ensure!(requested, "an interrupt while a call runs must be taken");
        let end = self.settled_after(session, v.version).await?;
        ensure!(
            end.phase == crate::run::Phase::Finished(crate::output::RunStatus::Cancelled),
            "the run must end cancelled, got {:?}",
            end.phase
        );
        ensure!(
            self.runs(session) == 0,
            "the interrupted call must not complete"
        );
        let r = self.result(session, &id).await?;
        ensure!(
            matches!(r.outcome, ToolOutcome::Cancelled | ToolOutcome::Interrupted),
            "the interrupted call must end cancelled, got {r:?}"
        );
        Ok(())
    }

    /// A second approver who arrives while the first one's approval runs the call:
    /// refused as already decided (naming the first), recorded in the audit trail as
    /// refused, whatever the timing; the call runs once.
    pub(super) async fn late_approver(&self, session: &str) -> Check {
        let v = self
            .send(session, "email gate@example.com", "alice")
            .await?;
        ensure!(
            v.paused,
            "the call must wait for a person, got {:?}",
            v.phase
        );
        let id = v.requirements.first().ok_or("no requirement")?.id.clone();
        let approval = |who: &str| Submission {
            input: RunInput::Decisions(vec![Decision::approve(&id).by(who)]),
            actor: Some(Actor::new(who)),
            view: Some(v.token.clone()),
            idempotency_key: None,
            client_tools: Vec::new(),
            output: None,
            budget: None,
            trace_parent: None,
        };
        self.backend
            .submit(session, approval("ana"))
            .await
            .map_err(|e| format!("the first approval was refused: {e}"))?;
        // The first approval's run is under way: the call has started and waits.
        let started = format!("gate {session}/{id}");
        let deadline = std::time::Instant::now() + super::SETTLE;
        while self.outbox_lines(&started) == 0 {
            ensure!(
                std::time::Instant::now() < deadline,
                "the approved call never started"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let late = self.backend.submit(session, approval("ben")).await;
        let first = match &late {
            Err(AgentError::AlreadyDecided { id: named, decided }) if *named == id => decided,
            other => {
                return Err(format!(
                    "an approver arriving while the first approval runs must be refused as already decided, got {other:?}"
                ));
            }
        };
        ensure!(
            first.by.as_deref() == Some("ana") && first.decision == "approve",
            "the refusal must name ana's approval, names {first:?}"
        );
        let trail = self.trail(session).await?;
        let refused = trail.iter().any(|d| {
            d.requirement_id == id
                && d.actor.as_ref().is_some_and(|a| a.principal == "ben")
                && matches!(&d.verdict, crate::view::Verdict::Refused { reason, .. } if reason == "already_decided")
        });
        ensure!(
            refused,
            "the audit trail must record ben's refusal while the run goes on: {trail:?}"
        );
        append(self.outbox, &format!("open {session}/{id}\n"))
            .map_err(|e| format!("opening the gate: {e}"))?;
        self.settled_after(session, v.version).await?;
        ensure!(
            self.runs(session) == 1,
            "the tool must run once, ran {}",
            self.runs(session)
        );
        Ok(())
    }
}
