//! The agent's hooks on a Restate turn, at the points where the local driver runs
//! them, through the same functions (`reins_agent::effects::hooks`). Each point is a
//! journaled step that journals what the hooks decided — the call, result or message
//! they left and their verdict — so a retried or replayed turn never asks them again.
//! A point no hook listens to journals nothing. (The model call's hooks run inside the
//! `model` step, the summarizer's inside `compress`, `Reconciled` inside the tool or
//! `settle` step: each journaled with what it decided.)

use reins_agent::effects::hooks::{self, Verdict};
use reins_agent::run::Run;
use reins_hook::{HookEvent, HookEventKind};
use reins_message::{Msg, ToolResult, ToolUse};
use restate_sdk::prelude::*;

use super::{OnCancel, TurnDriver, effect_error};

impl TurnDriver<'_, '_> {
    /// Whether any of the agent's hooks listens for `kind`.
    pub(super) fn wants(&self, kind: HookEventKind) -> bool {
        hooks::wants(self.agent(), kind)
    }

    /// Runs the hooks of an event the run only reports, as the journaled step `name`.
    pub(super) async fn notify(
        &mut self,
        name: &str,
        iteration: u32,
        event: HookEvent,
    ) -> Result<(), TerminalError> {
        if !self.wants(event.kind()) {
            return Ok(());
        }
        let (agent, session) = (self.agent().clone(), self.session.clone());
        self.journal(name, OnCancel::Retry, move || {
            let (agent, session, event) = (agent.clone(), session.clone(), event.clone());
            async move {
                hooks::notify(&agent, &session, iteration, event)
                    .await
                    .map(Json)
                    .map_err(effect_error)
            }
        })
        .await
    }

    /// The `PreCall` hooks at the start of a call (with its message, when it brings
    /// one).
    pub(super) async fn pre_call(
        &mut self,
        run: &Run,
        input: Option<Msg>,
    ) -> Result<(), TerminalError> {
        let iteration = run.state().iteration();
        self.notify("hook pre-call", iteration, HookEvent::PreCall { input })
            .await
    }

    /// The `PostCall` hooks at the end of a call (its pause, or the run's end), with
    /// the call's last message.
    pub(super) async fn post_call(
        &mut self,
        run: &Run,
        output: Option<Msg>,
    ) -> Result<(), TerminalError> {
        let Some(output) = output else {
            return Ok(());
        };
        let iteration = run.state().iteration();
        self.notify("hook post-call", iteration, HookEvent::PostCall { output })
            .await
    }

    /// A fork's calls served from its record: the `ToolReplayed` hooks, one journaled
    /// step for the batch (when a hook listens).
    pub(super) async fn replayed(
        &mut self,
        run: &Run,
        results: Vec<ToolResult>,
    ) -> Result<(), TerminalError> {
        if !self.wants(HookEventKind::ToolReplayed) {
            return Ok(());
        }
        let iteration = run.state().iteration();
        let (agent, session) = (self.agent().clone(), self.session.clone());
        let ids: Vec<&str> = results.iter().map(|r| r.id.as_str()).collect();
        let name = format!("hook replayed {}", ids.join(","));
        self.journal(&name, OnCancel::Retry, move || {
            let (agent, session, results) = (agent.clone(), session.clone(), results.clone());
            async move {
                for result in results {
                    let event = HookEvent::ToolReplayed { result };
                    hooks::notify(&agent, &session, iteration, event)
                        .await
                        .map_err(effect_error)?;
                }
                Ok(Json(()))
            }
        })
        .await
    }

    /// The `PreActing` hooks on a call about to run, journaled as `hook pre-acting
    /// <id>`: the call they leave and their verdict. `None` journals nothing (no hook
    /// listens).
    pub(super) async fn pre_acting(
        &mut self,
        iteration: u32,
        tool_use: ToolUse,
    ) -> Result<Option<(ToolUse, Verdict)>, TerminalError> {
        if !self.wants(HookEventKind::PreActing) {
            return Ok(None);
        }
        let (agent, session) = (self.agent().clone(), self.session.clone());
        let name = format!("hook pre-acting {}", tool_use.id);
        self.journal(&name, OnCancel::Retry, move || {
            let (agent, session, tool_use) = (agent.clone(), session.clone(), tool_use.clone());
            async move {
                hooks::pre_acting(&agent, &session, iteration, &tool_use)
                    .await
                    .map(|v| Json(Some(v)))
                    .map_err(effect_error)
            }
        })
        .await
    }

    /// The `PostActing` hooks on a finished call, journaled as `hook post-acting <id>`:
    /// the result they leave and whether they asked to stop.
    pub(super) async fn post_acting(
        &mut self,
        iteration: u32,
        tool_use: ToolUse,
        result: ToolResult,
    ) -> Result<(ToolResult, bool), TerminalError> {
        if !self.wants(HookEventKind::PostActing) || self.interrupted() {
            return Ok((result, false));
        }
        let (agent, session) = (self.agent().clone(), self.session.clone());
        let name = format!("hook post-acting {}", tool_use.id);
        let (result, verdict): (ToolResult, Verdict) = self
            .journal(&name, OnCancel::Retry, move || {
                let (agent, session, tool_use, result) = (
                    agent.clone(),
                    session.clone(),
                    tool_use.clone(),
                    result.clone(),
                );
                async move {
                    hooks::post_acting(&agent, &session, iteration, tool_use, result)
                        .await
                        .map(Json)
                        .map_err(effect_error)
                }
            })
            .await?;
        Ok((result, verdict.stop))
    }
}
