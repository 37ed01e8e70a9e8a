//! Forks: a new session whose history is another's up to a point, that serves the
//! calls the original already made from the original's ledger instead of running
//! them again ([`Session::fork`]); and replays, which re-drive a recorded session
//! with another model, prompt or toolkit and report where the new run diverged
//! ([`replay`]).
//!
//! A fork copies the messages it keeps (see docs/fork-and-replay.md for why a copy
//! and what it costs), so the original stays untouched and the fork is an ordinary
//! session: it lives on after the original is deleted, exports and imports as a
//! snapshot, and is append-only like any other. What it may serve lives in its run
//! state as a [`Record`]: the original's finished calls after the fork point, each
//! with the fingerprint of the arguments that ran and the result the ledger kept.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use reins_agent::{Agent, Decision, ForkPoint, RunStatus};
//! use reins_message::Msg;
//! use reins_model::{ScriptedModel, ScriptedResponse};
//! use reins_tool::{ToolPolicy, Toolkit};
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Email {
//!     to: String,
//! }
//!
//! // A tool with a side effect that needs approval; it counts what it sends.
//! let sent = Arc::new(AtomicUsize::new(0));
//! let counter = sent.clone();
//! let mut tools = Toolkit::new();
//! tools.add(
//!     Toolkit::function("send_email", "Send an email", move |a: Email, _ctx| {
//!         let counter = counter.clone();
//!         async move {
//!             counter.fetch_add(1, Ordering::SeqCst);
//!             Ok::<_, reins_tool::ToolError>(format!("sent to {}", a.to))
//!         }
//!     })
//!     .policy(ToolPolicy::confirm()),
//! )?;
//! let email = |id: &str| ScriptedResponse::tool_call_with_id(id, "send_email", json!({"to": "bob@example.com"}));
//! let model = ScriptedModel::new([
//!     email("call_1"),
//!     ScriptedResponse::text("Sent."),
//!     email("call_9"), // the fork's model asks the same thing
//!     ScriptedResponse::text("Sent."),
//! ]);
//! let agent = Agent::builder().model(model).toolkit(tools).build()?;
//!
//! let original = agent.session("chat").await?;
//! original.send(Msg::user("email bob")).await?;
//! original.resolve(vec![Decision::approve("call_1").by("ana")]).await?;
//! assert_eq!(sent.load(Ordering::SeqCst), 1);
//!
//! // Fork before the first message and ask again: nothing is asked, nothing is sent.
//! let fork = original.fork(ForkPoint::BeforeTurn(0), "chat-fork").await?;
//! let out = fork.send(Msg::user("email bob")).await?;
//! assert_eq!(out.status, RunStatus::Completed);
//! assert_eq!(sent.load(Ordering::SeqCst), 1, "served from the original's record");
//! # Ok(()) }
//! ```

use std::future::IntoFuture;

use futures::future::BoxFuture;
use reins_hook::HookEvent;
use reins_memory::{Commit, LedgerState, MemoryStore, SessionState};
use reins_message::{ContentBlock, Msg, Role};
use serde::{Deserialize, Serialize};

use crate::error::{AgentError, Result};
use crate::run::{Record, RecordedCall, RunState};
use crate::session::Session;

mod replay;

pub use replay::{Divergence, ReplayReport, ReplayTurn, replay, replay_streaming};

/// Where a fork's history ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum ForkPoint {
    /// Just before the user message that began turn `n` (0-based, see [`turns`]):
    /// the fork holds the turns before it, ready for a new (or the same) message.
    BeforeTurn(usize),
    /// After the first `n` messages. Every tool use among them must have its result
    /// among them (the fork must be a valid transcript).
    Messages(usize),
}

/// One turn of a transcript: a user message and what followed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// The turn's position (0-based).
    pub index: usize,
    /// The position of its user message in the transcript.
    pub message_index: usize,
    /// How many messages it spans (its user message included).
    pub messages: usize,
    /// The user message's text.
    pub text: String,
    /// The tool calls the agent made in it.
    pub tool_calls: Vec<String>,
    /// The agent's last answer text in it (empty when it ended without one).
    pub answer: String,
}

/// The turns of a transcript: each begins with a user message that is not a tool
/// result (messages before the first one, e.g. a stored summary, belong to no turn).
pub fn turns(messages: &[Msg]) -> Vec<Turn> {
    let starts: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| is_turn_start(m))
        .map(|(i, _)| i)
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(index, &start)| {
            let end = starts.get(index + 1).copied().unwrap_or(messages.len());
            let span = &messages[start..end];
            Turn {
                index,
                message_index: start,
                messages: end - start,
                text: span[0].text(),
                tool_calls: span
                    .iter()
                    .flat_map(|m| m.tool_uses().map(|u| u.name.clone()))
                    .collect(),
                answer: span
                    .iter()
                    .rev()
                    .find(|m| m.role == Role::Assistant && !m.text().trim().is_empty())
                    .map(Msg::text)
                    .unwrap_or_default(),
            }
        })
        .collect()
}

fn is_turn_start(m: &Msg) -> bool {
    m.role == Role::User
        && !m
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult(_)))
}

/// Where a fork came from (see [`Session::forked_from`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    /// The session it was forked from.
    pub source: String,
    /// How many of the source's messages it kept.
    pub at: usize,
    /// How many of the source's finished calls it may serve from the record.
    pub recorded_calls: usize,
    /// How many of them it served so far.
    pub served_calls: usize,
}

/// Where a stored session was forked from (its stored run state's record), when it is
/// a fork.
pub(crate) fn origin_of(state: &reins_memory::SessionState) -> Result<Option<ForkOrigin>> {
    let run_state = match &state.run_state {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(v) => serde_json::from_value::<crate::run::RunState>(v.clone()).map_err(|e| {
            AgentError::CorruptRunState {
                session: state.id.clone(),
                detail: e.to_string(),
            }
        })?,
    };
    Ok(run_state.record().map(|r| ForkOrigin {
        source: r.source.clone(),
        at: r.at,
        recorded_calls: r.calls.len(),
        served_calls: r.calls.iter().filter(|c| c.served.is_some()).count(),
    }))
}

/// The number of messages `at` keeps of `messages`, checked: a fork must be a valid
/// transcript (no tool use without its result, no result without its use).
pub fn fork_len(messages: &[Msg], at: ForkPoint) -> Result<usize> {
    let invalid = |reason: String| AgentError::InvalidInput(format!("cannot fork here: {reason}"));
    let n = match at {
        ForkPoint::BeforeTurn(t) => {
            let all = turns(messages);
            all.get(t).map(|turn| turn.message_index).ok_or_else(|| {
                invalid(format!(
                    "the session has {} turn(s), so turn {t} does not exist",
                    all.len()
                ))
            })?
        }
        ForkPoint::Messages(n) if n > messages.len() => {
            return Err(invalid(format!(
                "the session has {} message(s), fewer than {n}",
                messages.len()
            )));
        }
        ForkPoint::Messages(n) => n,
    };
    let prefix = &messages[..n];
    let mut open: Vec<&str> = Vec::new();
    for m in prefix {
        for b in &m.content {
            match b {
                ContentBlock::ToolUse(u) => open.push(&u.id),
                ContentBlock::ToolResult(r) => open.retain(|id| *id != r.id),
                _ => {}
            }
        }
    }
    if let Some(id) = open.first() {
        return Err(invalid(format!(
            "the tool use `{id}` in the first {n} message(s) has no result among them; \
             fork before its message or after its result"
        )));
    }
    Ok(n)
}

/// The record a fork of `source` at `n` messages serves from: the source's finished
/// calls after the fork point, from its ledger (or from its own record, when the
/// source is a fork that served them).
pub(crate) async fn record_of(
    store: &dyn MemoryStore,
    source: &SessionState,
    n: usize,
    strict: bool,
) -> Result<Record> {
    let source_record: Option<Record> = source
        .run_state
        .as_ref()
        .and_then(|v| serde_json::from_value::<RunState>(v.clone()).ok())
        .and_then(|s| s.record().cloned());
    let mut calls = Vec::new();
    for m in &source.messages[n..] {
        for b in &m.content {
            let ContentBlock::ToolResult(r) = b else {
                continue;
            };
            if let Some(entry) = store.ledger_entry(&source.id, &r.id).await? {
                if let (LedgerState::Finished, Some(result)) = (entry.state, entry.result) {
                    calls.push(RecordedCall {
                        tool: r.name.clone(),
                        fingerprint: entry.fingerprint,
                        result,
                        served: None,
                    });
                }
                continue;
            }
            if let Some((recorded, result)) = source_record
                .as_ref()
                .and_then(|rec| rec.served_result(&r.id))
            {
                calls.push(RecordedCall {
                    tool: recorded.tool.clone(),
                    fingerprint: recorded.fingerprint.clone(),
                    result: result.clone(),
                    served: None,
                });
            }
        }
    }
    Ok(Record {
        source: source.id.clone(),
        at: n,
        strict,
        calls,
    })
}

/// Writes a new session `id` into `store` with `messages` and a run state holding
/// `record`. Refused when `id` already holds anything.
pub(crate) async fn write_fork(
    store: &dyn MemoryStore,
    id: &str,
    messages: Vec<Msg>,
    record: Record,
) -> Result<()> {
    if id.trim().is_empty() {
        return Err(AgentError::InvalidInput(
            "a fork needs a session id".to_owned(),
        ));
    }
    let exists = || AgentError::SessionExists {
        session: id.to_owned(),
    };
    if store.session_version(id).await?.is_some_and(|v| v > 0) {
        return Err(exists());
    }
    let existing = store.open_session(id).await?;
    if existing.version > 0 || !existing.messages.is_empty() {
        return Err(exists());
    }
    let state = RunState {
        replay: Some(record),
        ..RunState::default()
    };
    let commit = Commit {
        expected_version: existing.version,
        append: messages,
        run_state: Some(Some(reins_memory::RunStateData::typed(
            std::sync::Arc::new(state),
        ))),
        ..Commit::default()
    };
    match store.commit(id, commit).await {
        Ok(_) => Ok(()),
        Err(reins_memory::Error::Conflict { .. }) => Err(exists()),
        Err(e) => Err(e.into()),
    }
}

impl Session {
    /// Forks this session: a new session `new_id` (same agent, same store) whose
    /// history is this one's up to `at`. Await the builder for the fork's
    /// [`Session`].
    ///
    /// In the fork, a tool call whose tool and argument fingerprint match a finished
    /// call this session made after `at` gets that call's recorded result instead of
    /// running (no approval is asked; the audit trail records it as `replayed`; each
    /// recorded call serves one call). Any other call goes through its tool's policy
    /// and the ledger as usual. [`ForkBuilder::rerun_side_effects`] turns the record
    /// off. This session is not changed.
    ///
    /// Errors: [`AgentError::InvalidInput`] when `at` would cut a tool use from its
    /// result or names a turn that does not exist; [`AgentError::SessionExists`] when
    /// `new_id` is taken. Nothing is written then.
    pub fn fork(&self, at: ForkPoint, new_id: impl Into<String>) -> ForkBuilder<'_> {
        ForkBuilder {
            session: self,
            at,
            new_id: new_id.into(),
            rerun: false,
        }
    }

    /// Where this session was forked from, when it is a fork.
    pub async fn forked_from(&self) -> Result<Option<ForkOrigin>> {
        self.read(|run| {
            run.state().record().map(|r| ForkOrigin {
                source: r.source.clone(),
                at: r.at,
                recorded_calls: r.calls.len(),
                served_calls: r.calls.iter().filter(|c| c.served.is_some()).count(),
            })
        })
        .await
    }
}

/// A fork being made ([`Session::fork`]); await it for the fork's [`Session`].
#[must_use = "a fork is made only when the builder is awaited"]
#[derive(Debug)]
pub struct ForkBuilder<'s> {
    session: &'s Session,
    at: ForkPoint,
    new_id: String,
    rerun: bool,
}

impl ForkBuilder<'_> {
    /// Runs every tool call in the fork again instead of serving the original's
    /// recorded results: each goes through its tool's policy, so a call that needs
    /// approval asks for a fresh one.
    pub fn rerun_side_effects(mut self) -> Self {
        self.rerun = true;
        self
    }

    async fn make(self) -> Result<Session> {
        let agent = self.session.agent().clone();
        let store = agent.runtime.store.as_ref();
        let source = store.load_session(self.session.id()).await?;
        let n = fork_len(&source.messages, self.at)?;
        let mut record = record_of(store, &source, n, false).await?;
        if self.rerun {
            record.calls.clear();
        }
        let recorded_calls = record.calls.len();
        let messages = source.messages[..n].to_vec();
        write_fork(store, &self.new_id, messages, record).await?;
        let fork = agent.session(&self.new_id).await?;
        if agent.runtime.hooks.wants(reins_hook::HookEventKind::Forked) {
            let mut ev = HookEvent::Forked {
                source: source.id.clone(),
                at: n,
                recorded_calls,
            };
            let ctx = reins_hook::HookContext {
                agent_name: agent.config.name.clone(),
                session_id: self.new_id.clone(),
                iteration: 0,
            };
            agent.runtime.hooks.run(&mut ev, &ctx).await?;
        }
        Ok(fork)
    }
}

impl<'s> IntoFuture for ForkBuilder<'s> {
    type Output = Result<Session>;
    type IntoFuture = BoxFuture<'s, Result<Session>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.make())
    }
}
