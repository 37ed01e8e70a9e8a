//! Shared helpers for the agent's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_agent::{Agent, AgentBuilder};
use reins_message::{Msg, Role, ToolOutcome};
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_tool::{ToolError, ToolPolicy, Toolkit};
use serde::Deserialize;
use serde_json::{Value, json};

/// Counts executions per tool name, and what each ran with.
#[derive(Clone, Default)]
pub struct Counter(Arc<Mutex<HashMap<String, Vec<Value>>>>);

impl Counter {
    pub fn record(&self, name: &str, args: Value) {
        self.0
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_default()
            .push(args);
    }
    pub fn count(&self, name: &str) -> usize {
        self.0.lock().unwrap().get(name).map_or(0, Vec::len)
    }
    pub fn args(&self, name: &str) -> Vec<Value> {
        self.0
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_default()
    }
    pub fn total(&self) -> usize {
        self.0.lock().unwrap().values().map(Vec::len).sum()
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct PathArgs {
    /// A file path.
    pub path: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct EmailArgs {
    /// Recipient.
    pub to: String,
    /// Body.
    #[serde(default)]
    pub body: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct QueryArgs {
    /// What to search for.
    pub query: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct SleepArgs {
    /// Milliseconds to sleep.
    pub ms: u64,
}

/// The demo's three tools, with `delete_file` and `send_email` under the given policy,
/// plus `slow` (sleeps, honours cancellation) and `suspend` (suspends itself).
pub fn toolkit(counter: &Counter, gated: ToolPolicy) -> Toolkit {
    let mut t = Toolkit::new();
    let c = counter.clone();
    t.add(
        Toolkit::function("delete_file", "Delete a file", move |a: PathArgs, _ctx| {
            let c = c.clone();
            async move {
                c.record("delete_file", json!({"path": a.path}));
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            }
        })
        .policy(gated.clone()),
    )
    .unwrap();
    let c = counter.clone();
    t.add(
        Toolkit::function("send_email", "Send an email", move |a: EmailArgs, _ctx| {
            let c = c.clone();
            async move {
                c.record("send_email", json!({"to": a.to, "body": a.body}));
                Ok::<_, ToolError>(format!("sent to {}", a.to))
            }
        })
        .policy(gated),
    )
    .unwrap();
    let c = counter.clone();
    t.add(Toolkit::function(
        "search_web",
        "Search the web",
        move |a: QueryArgs, _ctx| {
            let c = c.clone();
            async move {
                c.record("search_web", json!({"query": a.query}));
                Ok::<_, ToolError>(format!("3 results for {}", a.query))
            }
        },
    ))
    .unwrap();
    let c = counter.clone();
    t.add(Toolkit::function("slow", "Sleep a while", move |a: SleepArgs, ctx: reins_tool::ToolContext| {
        let c = c.clone();
        async move {
            c.record("slow", json!({"ms": a.ms}));
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(a.ms)) => Ok::<_, ToolError>("slept".to_owned()),
                _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            }
        }
    }))
    .unwrap();
    let c = counter.clone();
    t.add(Toolkit::function(
        "suspend",
        "Hand the work to the caller",
        move |a: QueryArgs, _ctx| {
            let c = c.clone();
            async move {
                c.record("suspend", json!({"query": a.query}));
                Err::<String, _>(ToolError::Suspend(format!(
                    "needs a person to look up {}",
                    a.query
                )))
            }
        },
    ))
    .unwrap();
    t
}

pub fn agent(model: ScriptedModel, tools: Toolkit) -> AgentBuilder {
    Agent::builder()
        .name("SafeAgent")
        .system_prompt("You are careful.")
        .model(model)
        .toolkit(tools)
}

pub fn call(id: &str, name: &str, args: Value) -> ScriptedResponse {
    ScriptedResponse::tool_call_with_id(id, name, args)
}

pub fn text(t: &str) -> ScriptedResponse {
    ScriptedResponse::text(t)
}

/// Provider validity: every tool use has exactly one result after it and before the
/// next assistant message, and no result lacks its use.
pub fn assert_valid(messages: &[Msg]) {
    let mut open: Vec<String> = Vec::new();
    let mut seen_uses = std::collections::HashSet::new();
    for m in messages {
        match m.role {
            Role::Assistant => {
                assert!(
                    open.is_empty(),
                    "tool uses {open:?} have no result before the next assistant message"
                );
                for u in m.tool_uses() {
                    assert!(
                        seen_uses.insert(u.id.clone()),
                        "tool use id {} appears twice",
                        u.id
                    );
                    open.push(u.id.clone());
                }
            }
            _ => {
                assert!(
                    m.role == Role::Tool || !m.has_tool_results(),
                    "tool results outside a tool message"
                );
                for r in m.tool_results_iter() {
                    let pos = open.iter().position(|id| *id == r.id);
                    assert!(
                        pos.is_some(),
                        "tool result {} has no pending tool use",
                        r.id
                    );
                    open.remove(pos.unwrap());
                }
                if m.role == Role::User {
                    assert!(
                        open.is_empty(),
                        "user message while tool uses {open:?} are open"
                    );
                }
            }
        }
    }
}

/// The outcomes of every tool result in the transcript, by tool use id.
pub fn outcomes(messages: &[Msg]) -> HashMap<String, ToolOutcome> {
    messages
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .map(|r| (r.id.clone(), r.outcome.clone()))
        .collect()
}

/// The text of the result for a tool use id.
pub fn result_text(messages: &[Msg], id: &str) -> String {
    messages
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .find(|r| r.id == id)
        .map(|r| r.text())
        .unwrap_or_default()
}

pub fn count_calls(c: &AtomicUsize) -> usize {
    c.load(Ordering::SeqCst)
}

/// A model that streams `chunks` text pieces, `every` apart (for interrupts mid-stream).
#[derive(Clone)]
pub struct DripModel {
    pub chunks: usize,
    pub every: Duration,
    pub calls: Arc<AtomicUsize>,
}

impl DripModel {
    pub fn new(chunks: usize, every: Duration) -> Self {
        Self {
            chunks,
            every,
            calls: Arc::default(),
        }
    }
}

#[async_trait::async_trait]
impl reins_model::ChatModel for DripModel {
    fn model_name(&self) -> &str {
        "drip"
    }
    async fn stream(
        &self,
        _req: reins_model::ChatRequest,
    ) -> reins_model::Result<reins_model::ChatStream> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let (n, every) = (self.chunks, self.every);
        let s = futures::stream::unfold(0usize, move |i| async move {
            if i > n {
                return None;
            }
            tokio::time::sleep(every).await;
            let chunk = if i == n {
                reins_model::ChatChunk::Finish {
                    reason: reins_model::FinishReason::Stop,
                }
            } else {
                reins_model::ChatChunk::TextDelta {
                    text: format!("w{i} "),
                }
            };
            Some((Ok(chunk), i + 1))
        });
        Ok(Box::pin(s))
    }
}
