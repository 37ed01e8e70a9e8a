//! An rmcp server that speaks only revision 2026-07-28 (per-request `_meta`, no
//! `initialize`), served in-process over a byte stream: `confirm` asks through MRTR
//! (`input_required` + `requestState`), `paint` becomes a task that needs input
//! mid-way (`tasks/update`), `endless` is a task that runs until `tasks/cancel`.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use reins_mcp::rmcp::ServerHandler;
use reins_mcp::rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CreateTaskResult,
    DetailedTask, ErrorData, GetTaskParams, GetTaskResult, InputRequests, InputRequiredResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerConfig, Task, TaskPayload,
    TaskStatus, Tool, UpdateTaskParams,
};
use reins_mcp::rmcp::service::{RequestContext, RoleServer, ServiceExt};
use reins_mcp::{ByteStream, McpServer};
use serde_json::{Value, json};

/// What the server saw.
#[derive(Default)]
pub struct Seen {
    /// `method protocol-version` of every request that reached a handler.
    pub requests: Mutex<Vec<String>>,
    /// The `requestState` values echoed on retries.
    pub states: Mutex<Vec<String>>,
    /// Task polls, updates and cancels (`get task-1`, `update task-1 {..}`, ...).
    pub tasks: Mutex<Vec<String>>,
    /// The tasks, by id.
    state: Mutex<std::collections::HashMap<String, TaskState>>,
    /// How many `tasks/get` polls arrived so far (a test waits on it).
    pub polls: tokio::sync::watch::Sender<usize>,
}

impl Seen {
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
    pub fn states(&self) -> Vec<String> {
        self.states.lock().unwrap().clone()
    }
    pub fn tasks(&self) -> Vec<String> {
        self.tasks.lock().unwrap().clone()
    }
}

/// One task: polls so far, the answer given, whether it was cancelled.
type TaskState = (u32, Option<Value>, bool);

#[derive(Clone)]
struct Modern {
    seen: Arc<Seen>,
}

fn form(message: &str, schema: Value) -> InputRequests {
    serde_json::from_value(json!({
        "q": { "method": "elicitation/create", "params": { "mode": "form", "message": message, "requestedSchema": schema } }
    }))
    .unwrap()
}

fn text(t: impl Into<String>) -> CallToolResult {
    serde_json::from_value(json!({ "content": [{ "type": "text", "text": t.into() }] })).unwrap()
}

fn task(id: &str, status: TaskStatus) -> Task {
    Task::new(id, status, "2026-11-24T00:00:00Z", "2026-11-24T00:00:00Z").with_poll_interval_ms(20)
}

impl Modern {
    fn note(&self, method: &str, ctx: &RequestContext<RoleServer>) {
        let v = ctx
            .protocol_version()
            .map_or_else(|| "none".to_owned(), |v| v.as_str().to_owned());
        self.seen
            .requests
            .lock()
            .unwrap()
            .push(format!("{method} {v}"));
    }
}

impl ServerHandler for Modern {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            serde_json::from_value(json!({
                "tools": {},
                "extensions": { "io.modelcontextprotocol/tasks": {} }
            }))
            .unwrap(),
        )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(vec![ProtocolVersion::V_2026_07_28])
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.note("tools/list", &ctx);
        let tool = |name: &str| -> Tool {
            serde_json::from_value(json!({
                "name": name,
                "description": format!("modern tool {name}"),
                "inputSchema": { "type": "object", "properties": { "what": { "type": "string" } } },
                "annotations": { "readOnlyHint": true }
            }))
            .unwrap()
        };
        Ok(ListToolsResult::with_all_items(vec![
            tool("confirm"),
            tool("paint"),
            tool("endless"),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.note("tools/call", &ctx);
        let what = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("what"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        match request.name.as_ref() {
            "confirm" => {
                let Some(state) = request.request_state else {
                    return Ok(InputRequiredResult::new(
                        Some(form(
                            &format!("Really {what}?"),
                            json!({ "type": "object", "properties": { "sure": { "type": "boolean" } }, "required": ["sure"] }),
                        )),
                        Some(format!("state-for-{what}")),
                    )
                    .into());
                };
                self.seen.states.lock().unwrap().push(state.clone());
                if state != format!("state-for-{what}") {
                    return Err(ErrorData::invalid_params("bad requestState", None));
                }
                let answer = request
                    .input_responses
                    .and_then(|r| r.get("q").cloned())
                    .unwrap_or(Value::Null);
                Ok(
                    if answer["action"] == "accept" && answer["content"]["sure"] == true {
                        text(format!("confirmed {what}"))
                    } else {
                        text(format!("not confirmed ({})", answer["action"]))
                    }
                    .into(),
                )
            }
            "paint" | "endless" => {
                let id = format!("{}-{what}", request.name);
                self.seen
                    .state
                    .lock()
                    .unwrap()
                    .insert(id.clone(), (0, None, false));
                Ok(CallToolResponse::Task(CreateTaskResult::new(task(
                    &id,
                    TaskStatus::Working,
                ))))
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.note("tasks/get", &ctx);
        let id = request.task_id;
        self.seen.tasks.lock().unwrap().push(format!("get {id}"));
        self.seen.polls.send_modify(|n| *n += 1);
        let mut states = self.seen.state.lock().unwrap();
        let Some(entry) = states.get_mut(&id) else {
            return Err(ErrorData::invalid_params(
                format!("unknown task {id}"),
                None,
            ));
        };
        entry.0 += 1;
        let payload = if entry.2 {
            TaskPayload::Cancelled
        } else if id.starts_with("endless") || entry.0 < 2 {
            TaskPayload::Working
        } else if let Some(answer) = &entry.1 {
            let color = answer["content"]["color"]
                .as_str()
                .unwrap_or("?")
                .to_owned();
            let result = json!({ "resultType": "complete", "content": [{ "type": "text", "text": format!("painted {color}") }] });
            TaskPayload::Completed {
                result: result.as_object().unwrap().clone(),
            }
        } else {
            TaskPayload::InputRequired {
                input_requests: form(
                    "Which color?",
                    json!({ "type": "object", "properties": { "color": { "type": "string" } }, "required": ["color"] }),
                ),
            }
        };
        let status = match &payload {
            TaskPayload::Working => TaskStatus::Working,
            TaskPayload::InputRequired { .. } => TaskStatus::InputRequired,
            TaskPayload::Completed { .. } => TaskStatus::Completed,
            _ => TaskStatus::Cancelled,
        };
        Ok(GetTaskResult::new(DetailedTask::new(
            task(&id, status).with_status_message(format!("poll {}", entry.0)),
            payload,
        )))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.note("tasks/update", &ctx);
        let id = request.task_id;
        let answer = request.input_responses.get("q").cloned();
        self.seen.tasks.lock().unwrap().push(format!(
            "update {id} {}",
            answer.clone().unwrap_or(Value::Null)
        ));
        if let Some(e) = self.seen.state.lock().unwrap().get_mut(&id) {
            e.1 = answer;
        }
        Ok(())
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.note("tasks/cancel", &ctx);
        let id = request.task_id;
        self.seen.tasks.lock().unwrap().push(format!("cancel {id}"));
        if let Some(e) = self.seen.state.lock().unwrap().get_mut(&id) {
            e.2 = true;
        }
        Ok(())
    }
}

fn connect(seen: Arc<Seen>) -> ByteStream {
    let (client, server) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let (r, w) = tokio::io::split(server);
        if let Ok(running) = (Modern { seen }).serve((r, w)).await {
            let _ = running.waiting().await;
        }
    });
    let (r, w) = tokio::io::split(client);
    (Box::new(r), Box::new(w))
}

/// An [`McpServer`] for the modern server.
pub fn server(seen: &Arc<Seen>) -> McpServer {
    let seen = seen.clone();
    McpServer::stream("modern", move || {
        let seen = seen.clone();
        async move { Ok(connect(seen)) }
    })
}
