//! # reins-a2a
//!
//! A remote A2A agent (the Agent2Agent protocol 1.0, JSON-RPC binding) used as a reins
//! tool. The model calls the tool with a message; the tool sends it to the remote
//! agent and returns its answer. When the remote task stops for input
//! (`TASK_STATE_INPUT_REQUIRED`), the tool asks a person through the run
//! ([`ToolContext::ask`]): the local run pauses with a user-input requirement whose
//! reason names the remote agent and what it waits for, and the local decision is sent
//! back as the follow-up message on the remote task. A reins server on the other end
//! shows its requirements as a data part and takes decisions the same way (see
//! reins-server's `docs/protocols.md`).
//!
//! **Where it sits.** Only `reins-tool` and `reins-message` (and an HTTP client): a
//! tool crate beside `reins-mcp`, which no crate below the agent depends on. It needs
//! nothing of `reins-agent`, because pausing mid-call is the toolkit's own
//! [`ToolContext::ask`], which the agent's driver serves.
//!
//! **At most once.** The tool is not idempotent: the agent's ledger never runs a call
//! twice. A call that asked and waits stays live in the process that made it; a
//! decision that reaches another process (or this one after a restart) cannot resume
//! it, and the call's outcome is `Unknown` — the original message is never sent again.
//!
//! The local answer (the requirement's fields) is either `{"approve": true}` /
//! `{"approve": false, "note": "..."}` for everything the remote task waits for, or
//! `{"decisions": [...]}` with the remote's own decision objects. Declining rejects
//! everything; an interrupt cancels the remote task.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use reins_tool::Toolkit;
//!
//! let remote = reins_a2a::A2aAgent::new("billing", "http://127.0.0.1:8081")
//!     .bearer("token-for-billing")
//!     .description("Ask the billing agent; it may need approvals");
//! let mut toolkit = Toolkit::new();
//! toolkit.add_dynamic(remote.tool()?)?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use reins_tool::{
    DynamicTool, QuestionAnswer, ToolContext, ToolError, ToolOutput, ToolPolicy, ToolQuestion,
};
use serde_json::{Value, json};

/// Why a remote agent could not be set up as a tool.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The tool name is not one a model can call.
    #[error("`{0}` is not a tool name (1-64 of a-z A-Z 0-9 _ -)")]
    BadName(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
}

/// A remote A2A agent: where it is, how to authenticate, and what the model is told.
#[derive(Clone)]
pub struct A2aAgent {
    name: String,
    base: String,
    token: Option<String>,
    description: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for A2aAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("A2aAgent")
            .field("name", &self.name)
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl A2aAgent {
    /// The agent at `base` (its JSON-RPC endpoint is `<base>/a2a`, reins-server's), as
    /// the tool `name`.
    #[must_use]
    pub fn new(name: impl Into<String>, base: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            base: base.into().trim_end_matches('/').to_owned(),
            token: None,
            description: None,
            timeout: Duration::from_secs(300),
        }
    }

    /// The bearer token sent with every request (never logged).
    #[must_use]
    pub fn bearer(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// What the model is told the agent does.
    #[must_use]
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// How long one request may take (default 300 s).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The tool: arguments `{"message": "..."}`, not idempotent (at most once).
    ///
    /// # Errors
    ///
    /// [`Error::BadName`] for a name a model cannot call, [`Error::Http`] when the HTTP
    /// client cannot be built.
    pub fn tool(self) -> Result<DynamicTool, Error> {
        let ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            return Err(Error::BadName(self.name));
        }
        let http = reqwest::Client::builder()
            .timeout(self.timeout)
            .build()
            .map_err(|e| Error::Http(e.to_string()))?;
        let description = self.description.clone().unwrap_or_else(|| {
            format!(
                "Send a message to the remote agent `{}` and get its answer",
                self.name
            )
        });
        let schema = json!({
            "type": "object",
            "properties": {"message": {"type": "string", "description": "What to ask the remote agent"}},
            "required": ["message"],
        });
        let name = self.name.clone();
        let remote = Remote { agent: self, http };
        let remote = std::sync::Arc::new(remote);
        Ok(
            DynamicTool::new(&name, &description, schema, move |args, ctx| {
                let remote = remote.clone();
                async move { remote.call(args, ctx).await }
            })
            .policy(ToolPolicy::auto()),
        )
    }
}

struct Remote {
    agent: A2aAgent,
    http: reqwest::Client,
}

/// A remote task as far as the tool cares.
struct TaskState {
    id: String,
    context: String,
    state: String,
    /// For input required: the requirements and the view token.
    input: Option<(Vec<Value>, Option<String>)>,
    answer: String,
}

impl Remote {
    async fn rpc(&self, method: &str, params: Value) -> Result<Value, ToolError> {
        let body = json!({"jsonrpc": "2.0", "id": uuid::Uuid::new_v4().to_string(), "method": method, "params": params});
        let mut req = self
            .http
            .post(format!("{}/a2a", self.agent.base))
            .header("A2A-Version", "1.0")
            .json(&body);
        if let Some(t) = &self.agent.token {
            req = req.bearer_auth(t);
        }
        let res = req.send().await.map_err(|e| {
            ToolError::Failed(format!(
                "the remote agent `{}` cannot be reached: {e}",
                self.agent.name
            ))
        })?;
        let status = res.status();
        let v: Value = res.json().await.map_err(|e| {
            ToolError::Failed(format!(
                "the remote agent `{}` answered HTTP {status} without JSON-RPC: {e}",
                self.agent.name
            ))
        })?;
        if let Some(err) = v.get("error") {
            return Err(ToolError::Failed(format!(
                "the remote agent `{}` refused `{method}` ({}): {}",
                self.agent.name,
                err["code"],
                err["message"].as_str().unwrap_or("")
            )));
        }
        v.get("result").cloned().ok_or_else(|| {
            ToolError::Failed(format!(
                "the remote agent `{}` answered HTTP {status} without a result",
                self.agent.name
            ))
        })
    }

    fn task_of(&self, result: &Value) -> Result<TaskState, ToolError> {
        let t = result.get("task").unwrap_or(result);
        let id = t["id"].as_str().unwrap_or_default().to_owned();
        if id.is_empty() {
            return Err(ToolError::Failed(format!(
                "the remote agent `{}` answered without a task",
                self.agent.name
            )));
        }
        let state = t["status"]["state"].as_str().unwrap_or("").to_owned();
        let input = t["status"]["message"]["parts"]
            .as_array()
            .and_then(|parts| parts.iter().find_map(|p| p.get("data")))
            .map(|d| {
                (
                    d["requirements"].as_array().cloned().unwrap_or_default(),
                    d["view_token"].as_str().map(str::to_owned),
                )
            });
        let answer = t["artifacts"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|a| a["parts"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| p["text"].as_str().map(str::to_owned))
            .collect::<Vec<_>>()
            .join("\n");
        Ok(TaskState {
            id,
            context: t["contextId"].as_str().unwrap_or_default().to_owned(),
            state,
            input,
            answer,
        })
    }

    async fn cancel(&self, task: &str) {
        let _ = self.rpc("CancelTask", json!({"id": task})).await;
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let text = args["message"]
            .as_str()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| {
                ToolError::InvalidArgs("`message` must be a non-empty string".to_owned())
            })?;
        // The message id is the call's: a remote that deduplicates sees one message.
        let message = json!({
            "messageId": ctx.tool_use_id,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        });
        let first = tokio::select! {
            r = self.rpc("SendMessage", json!({"message": message})) => r?,
            () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let mut task = self.task_of(&first)?;
        let mut rounds = 0;
        loop {
            match task.state.as_str() {
                "TASK_STATE_COMPLETED" => {
                    return Ok(ToolOutput::text(task.answer)
                        .with_metadata("a2a_task_id", json!(task.id))
                        .with_metadata("a2a_context_id", json!(task.context)));
                }
                "TASK_STATE_INPUT_REQUIRED" => {}
                other => {
                    return Err(ToolError::Failed(format!(
                        "the remote agent `{}` ended task `{}` as {other}",
                        self.agent.name, task.id
                    )));
                }
            }
            rounds += 1;
            if rounds > 32 {
                self.cancel(&task.id).await;
                return Err(ToolError::Failed(format!(
                    "the remote agent `{}` asked for input more than 32 times; its task was canceled",
                    self.agent.name
                )));
            }
            let (requirements, view) = task.input.clone().unwrap_or_default();
            let question = question_for(&self.agent.name, &task.id, &requirements);
            let answer = tokio::select! {
                a = ctx.ask(question) => a,
                () = ctx.cancel.cancelled() => {
                    self.cancel(&task.id).await;
                    return Err(ToolError::Cancelled);
                }
            };
            let decisions = match answer {
                QuestionAnswer::Accept(values) => decisions_from(&values, &requirements)?,
                QuestionAnswer::Decline => reject_all(&requirements, "declined by the user"),
                QuestionAnswer::Cancel => {
                    self.cancel(&task.id).await;
                    return Err(ToolError::Cancelled);
                }
            };
            let mut data = json!({"decisions": decisions});
            if let Some(v) = view {
                data["view_token"] = json!(v);
            }
            let follow = json!({
                "messageId": format!("{}-{rounds}", ctx.tool_use_id),
                "role": "ROLE_USER",
                "taskId": task.id,
                "contextId": task.context,
                "parts": [{"data": data, "mediaType": "application/json"}],
            });
            let next = tokio::select! {
                r = self.rpc("SendMessage", json!({"message": follow})) => r?,
                () = ctx.cancel.cancelled() => {
                    self.cancel(&task.id).await;
                    return Err(ToolError::Cancelled);
                }
            };
            task = self.task_of(&next)?;
        }
    }
}

/// What the local person is asked: the remote agent, its task, what it waits for.
fn question_for(agent: &str, task: &str, requirements: &[Value]) -> ToolQuestion {
    let what: Vec<String> = requirements
        .iter()
        .map(|r| {
            format!(
                "{} {} ({})",
                r["tool_use"]["name"].as_str().unwrap_or("?"),
                r["tool_use"]["input"],
                r["kind"].as_str().unwrap_or("?")
            )
        })
        .collect();
    ToolQuestion {
        message: format!(
            "the remote agent `{agent}` (A2A task `{task}`) waits for: {}",
            if what.is_empty() {
                "a decision".to_owned()
            } else {
                what.join("; ")
            }
        ),
        schema: json!({
            "type": "object",
            "properties": {
                "approve": {"type": "boolean", "description": "Approve (true) or reject (false) everything it waits for"},
                "note": {"type": "string", "description": "Why, when rejecting"},
                "decisions": {"type": "array", "description": "Or: the remote's own decision objects, one per requirement"},
            },
        }),
    }
}

fn reject_all(requirements: &[Value], note: &str) -> Vec<Value> {
    requirements
        .iter()
        .filter_map(|r| r["id"].as_str())
        .map(|id| json!({"requirement_id": id, "action": "reject", "note": note}))
        .collect()
}

/// The remote decisions a local answer makes.
fn decisions_from(values: &Value, requirements: &[Value]) -> Result<Vec<Value>, ToolError> {
    if let Some(list) = values.get("decisions").and_then(Value::as_array) {
        return Ok(list.clone());
    }
    match values.get("approve").and_then(Value::as_bool) {
        Some(true) => Ok(requirements
            .iter()
            .filter_map(|r| r["id"].as_str())
            .map(|id| json!({"requirement_id": id, "action": "approve"}))
            .collect()),
        Some(false) => Ok(reject_all(
            requirements,
            values.get("note").and_then(Value::as_str).unwrap_or(""),
        )),
        None => Err(ToolError::InvalidArgs(
            "the answer needs `approve` (a boolean) or `decisions` (a list)".to_owned(),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn answers_become_remote_decisions() {
        let reqs = vec![
            json!({"id": "c1", "kind": "confirmation", "tool_use": {"name": "delete_file", "input": {}}}),
        ];
        assert_eq!(
            decisions_from(&json!({"approve": true}), &reqs).unwrap(),
            vec![json!({"requirement_id": "c1", "action": "approve"})]
        );
        assert_eq!(
            decisions_from(&json!({"approve": false, "note": "no"}), &reqs).unwrap()[0]["note"],
            "no"
        );
        assert!(decisions_from(&json!({}), &reqs).is_err());
        let q = question_for("billing", "t1", &reqs);
        assert!(q.message.contains("`billing`") && q.message.contains("delete_file"));
    }

    #[test]
    fn names_are_checked_and_tokens_never_shown() {
        assert!(matches!(
            A2aAgent::new("no spaces", "http://x").tool(),
            Err(Error::BadName(_))
        ));
        let a = A2aAgent::new("ok", "http://x/").bearer("s3cret");
        assert!(!format!("{a:?}").contains("s3cret"));
        assert!(a.tool().is_ok());
    }
}
