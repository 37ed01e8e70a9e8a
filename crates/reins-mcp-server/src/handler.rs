//! The MCP side: `tools/list`, `tools/call` (plain, MRTR retry, or a new task), the
//! Tasks extension's `tasks/get|update|cancel`, and `elicitation/create` for clients
//! on revisions before 2026-07-28.

use std::borrow::Cow;
use std::collections::BTreeMap;

use reins_agent::run::Phase;
use reins_agent::{
    Actor, AgentError, Decision, Requirement, RunHandle, RunOutput, RunStatus, Session,
};
use reins_message::Msg;
use rmcp::ErrorData as McpError;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult,
    ElicitRequestParams, GetTaskParams, GetTaskResult, Implementation, InputRequest,
    InputRequiredResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Map, Value, json};

use crate::config::McpAgentServer;
use crate::question;
use crate::result::{invalid_arguments, result_of};
use crate::state::Paused;
use crate::task;

/// The structured content key with the session (the task id, and the `session`
/// argument that continues the conversation).
pub(crate) const SESSION_FIELD: &str = "session";

/// Who is calling, and how.
pub(crate) struct Caller {
    pub(crate) principal: String,
    modern: bool,
    elicitation: bool,
    tasks: bool,
}

impl McpAgentServer {
    pub(crate) fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Caller, McpError> {
        let principal = self.principal_of(ctx)?;
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        let caps = ctx.client_capabilities();
        Ok(Caller {
            principal,
            modern,
            elicitation: caps.as_ref().is_some_and(|c| c.elicitation.is_some()),
            tasks: caps.as_ref().is_some_and(|c| c.supports_tasks()),
        })
    }

    fn principal_of(&self, ctx: &RequestContext<RoleServer>) -> Result<String, McpError> {
        #[cfg(feature = "http")]
        if let Some(parts) = ctx.extensions.get::<http::request::Parts>() {
            return match &self.inner.authenticate {
                None => Ok(self.inner.principal.clone()),
                Some(f) => f(parts).map(|p| p.replace('/', "%2F")).ok_or_else(|| {
                    McpError::invalid_request(
                        "not authenticated: this server needs credentials (see its configuration); nothing ran",
                        None,
                    )
                }),
            };
        }
        let _ = ctx;
        Ok(self.inner.principal.clone())
    }

    /// The session prefix a principal owns.
    pub(crate) fn prefix(principal: &str) -> String {
        format!("mcp/{principal}/")
    }

    /// Whether a session id is in the caller's namespace.
    fn owns(&self, id: &str, caller: &Caller) -> bool {
        id.starts_with(&Self::prefix(&caller.principal)) && id.len() <= 300
    }

    /// Opens a session the caller owns, or refuses (an unknown id and a foreign one
    /// look the same, so ids are not probed).
    pub(crate) async fn owned_session(
        &self,
        id: &str,
        caller: &Caller,
        what: &str,
    ) -> Result<Session, McpError> {
        if !self.owns(id, caller) {
            return Err(McpError::invalid_params(
                format!("unknown {what} `{}`", clip(id)),
                None,
            ));
        }
        let session = self.inner.agent.session(id).await.map_err(agent_error)?;
        Ok(session.as_actor(Actor::new(caller.principal.clone())))
    }

    /// The exposed tool's input schema.
    fn input_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "message": { "type": "string", "description": "What to ask the agent" },
                SESSION_FIELD: {
                    "type": "string",
                    "description": "Continue this conversation (the `session` of an earlier result); omit to start a new one"
                }
            },
            "required": ["message"],
            "additionalProperties": false
        })
    }

    fn tool(&self) -> Tool {
        let schema: Map<String, Value> = Self::input_schema()
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut annotations = ToolAnnotations::new();
        annotations.read_only_hint = Some(false);
        annotations.destructive_hint = Some(self.inner.destructive);
        annotations.idempotent_hint = Some(self.inner.idempotent);
        annotations.open_world_hint = Some(true);
        Tool::new(
            self.inner.tool_name.clone(),
            self.inner.description.clone(),
            std::sync::Arc::new(schema),
        )
        .with_annotations(annotations)
    }

    async fn call(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = self.caller(&ctx)?;
        if params.name != self.inner.tool_name {
            return Err(McpError::invalid_params(
                format!(
                    "tool `{}` is not served here; the only tool is `{}`",
                    clip(&params.name),
                    self.inner.tool_name
                ),
                None,
            ));
        }
        let args = params.arguments.clone().unwrap_or_default();
        // Arguments the tool cannot take are the caller's to fix: a tool result with
        // `isError`, not a JSON-RPC error (the spec's tools page, "Error Handling").
        if let Err(problems) =
            reins_tool::validate(&Self::input_schema(), &Value::Object(args.clone()))
        {
            return Ok(CallToolResponse::Complete(invalid_arguments(
                &problems.join("; "),
            )));
        }
        if let Some(state) = &params.request_state {
            return self.retry(state, &params, &args, &caller, ctx).await;
        }
        let Some(message) = args.get("message").and_then(Value::as_str) else {
            return Ok(CallToolResponse::Complete(invalid_arguments(
                "`message` (a string) is required",
            )));
        };
        let id = match args.get(SESSION_FIELD) {
            None | Some(Value::Null) => format!(
                "{}{}",
                Self::prefix(&caller.principal),
                uuid::Uuid::now_v7()
            ),
            Some(Value::String(id)) if self.owns(id, &caller) => id.clone(),
            Some(Value::String(id)) => {
                return Ok(CallToolResponse::Complete(invalid_arguments(&format!(
                    "unknown session `{}` (pass the `session` of one of your earlier results, or none to start one)",
                    clip(id)
                ))));
            }
            Some(other) => {
                return Ok(CallToolResponse::Complete(invalid_arguments(&format!(
                    "`session` must be a string, got {other}"
                ))));
            }
        };
        let session = traced(
            self.owned_session(&id, &caller, "session").await?,
            &params,
            &ctx,
        );
        let handle = session
            .send(Msg::user(message))
            .start()
            .await
            .map_err(agent_error)?;
        if caller.modern && caller.tasks && self.inner.tasks {
            let id = session.id().to_owned();
            self.track(handle);
            let task = task::working(self, &id);
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        let out = self.finish(handle, &ctx).await.map_err(agent_error)?;
        self.answer(session, out, &args, &caller, ctx).await
    }

    /// A retry with `requestState` (MRTR): opens the state, turns the answers into
    /// decisions and resolves exactly the requirements shown.
    async fn retry(
        &self,
        state: &str,
        params: &CallToolRequestParams,
        args: &Map<String, Value>,
        caller: &Caller,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let paused: Paused = self
            .inner
            .sealer
            .open(state, &caller.principal, &self.inner.tool_name, args)
            .map_err(|why| McpError::invalid_params(why.to_string(), None))?;
        let session = traced(
            self.owned_session(&paused.session, caller, "session")
                .await?,
            params,
            &ctx,
        );
        let view = session.view().await.map_err(agent_error)?;
        if view.token != paused.view {
            return Err(McpError::invalid_params(
                "requestState refers to questions that were already answered or changed (a replay, or a decision made elsewhere); nothing ran. \
                 Call the tool again with the session to see what is pending now",
                None,
            ));
        }
        let responses = params.input_responses.clone().unwrap_or_default();
        let (decisions, problems) = decide(&view.requirements, &responses, &caller.principal);
        if decisions.is_empty() {
            // Nothing answered: ask again (the spec's advice for missing input).
            if !problems.is_empty() {
                tracing::debug!(problems = ?problems, "MRTR retry without usable answers");
            }
            return self.ask(&session, &view.requirements, args, caller);
        }
        let handle = session
            .resolve(decisions)
            .at(&view.token)
            .start()
            .await
            .map_err(agent_error)?;
        let out = self.finish(handle, &ctx).await.map_err(agent_error)?;
        self.answer(session, out, args, caller, ctx).await
    }

    /// Waits for a run, interrupting it when the request is cancelled.
    async fn finish(
        &self,
        handle: RunHandle,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<RunOutput, AgentError> {
        let stop = handle.interrupter();
        let ct = ctx.ct.clone();
        let watcher = tokio::spawn(async move {
            ct.cancelled().await;
            stop.interrupt();
        });
        let out = handle.wait().await;
        watcher.abort();
        out
    }

    /// The MCP answer for a run's output: a result, questions, or more questions.
    async fn answer(
        &self,
        session: Session,
        mut out: RunOutput,
        args: &Map<String, Value>,
        caller: &Caller,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let mut refusals = 0;
        loop {
            if out.status != RunStatus::Paused || out.requirements.is_empty() {
                return Ok(CallToolResponse::Complete(result_of(
                    &out,
                    self.inner.inbox_url.as_deref(),
                )));
            }
            if caller.modern {
                if caller.elicitation {
                    return self.ask(&session, &out.requirements, args, caller);
                }
                return Ok(CallToolResponse::Complete(result_of(
                    &out,
                    self.inner.inbox_url.as_deref(),
                )));
            }
            if !caller.elicitation {
                return Ok(CallToolResponse::Complete(result_of(
                    &out,
                    self.inner.inbox_url.as_deref(),
                )));
            }
            // Before 2026-07-28: ask with elicitation/create while the call waits.
            let view = session.current_view();
            let mut answers = BTreeMap::new();
            for r in &out.requirements {
                let request = question::input_request(self.inner.agent.name(), r);
                let params: ElicitRequestParams = serde_json::from_value(request["params"].clone())
                    .map_err(|e| {
                        McpError::internal_error(format!("could not build the question: {e}"), None)
                    })?;
                let asked = tokio::select! {
                    a = ctx.peer.create_elicitation(params) => a,
                    () = ctx.ct.cancelled() => return Ok(CallToolResponse::Complete(result_of(&out, self.inner.inbox_url.as_deref()))),
                };
                match asked {
                    Ok(result) => {
                        answers.insert(
                            r.id.clone(),
                            serde_json::to_value(&result).unwrap_or(Value::Null),
                        );
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "elicitation failed; the run stays paused");
                        return Ok(CallToolResponse::Complete(result_of(
                            &out,
                            self.inner.inbox_url.as_deref(),
                        )));
                    }
                }
            }
            let (decisions, _) = decide(&out.requirements, &answers, &caller.principal);
            if decisions.is_empty() {
                return Ok(CallToolResponse::Complete(result_of(
                    &out,
                    self.inner.inbox_url.as_deref(),
                )));
            }
            let run = match session.resolve(decisions).at(&view).start().await {
                Ok(handle) => self.finish(handle, &ctx).await,
                Err(e) => Err(e),
            };
            match run {
                Ok(next) => out = next,
                // A budget extension the run refused (a limit not above the spend)
                // changed nothing: the same form is asked again, a few times.
                Err(e @ AgentError::InvalidBudget { .. }) if refusals < MAX_REFUSED_ANSWERS => {
                    tracing::debug!(error = %e, "a refused budget extension; asking again");
                    refusals += 1;
                }
                Err(e) => return Err(agent_error(e)),
            }
        }
    }

    /// An `InputRequiredResult` for these requirements, with a sealed state.
    fn ask(
        &self,
        session: &Session,
        requirements: &[Requirement],
        args: &Map<String, Value>,
        caller: &Caller,
    ) -> Result<CallToolResponse, McpError> {
        let paused = Paused {
            session: session.id().to_owned(),
            view: reins_agent::ViewToken::of(true, requirements),
        };
        let state = self
            .inner
            .sealer
            .seal(&paused, &caller.principal, &self.inner.tool_name, args)
            .map_err(|e| {
                McpError::internal_error(format!("could not seal requestState: {e}"), None)
            })?;
        Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(input_requests(self.inner.agent.name(), requirements)?),
            Some(state),
        )))
    }

    /// Keeps a run's interrupter while it runs in this process.
    pub(crate) fn track(&self, handle: RunHandle) {
        let id = handle.session_id().to_owned();
        self.inner
            .running()
            .insert(id.clone(), handle.interrupter());
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(e) = handle.wait().await {
                tracing::warn!(session = %id, error = %e, "a task's run failed");
            }
            me.inner.running().remove(&id);
        });
    }

    /// Whether a run of this session executes in this process now.
    pub(crate) fn is_running_here(&self, id: &str) -> bool {
        self.inner.running().contains_key(id)
    }
}

/// The `inputRequests` for these requirements (keyed by requirement id).
pub(crate) fn input_requests(
    agent: &str,
    requirements: &[Requirement],
) -> Result<BTreeMap<String, InputRequest>, McpError> {
    requirements
        .iter()
        .map(|r| {
            serde_json::from_value(question::input_request(agent, r))
                .map(|q| (r.id.clone(), q))
                .map_err(|e| {
                    McpError::internal_error(
                        format!("the question for `{}` cannot be sent as a form: {e}", r.id),
                        None,
                    )
                })
        })
        .collect()
}

/// Decisions for the answered requirements, and what could not be used.
pub(crate) fn decide(
    requirements: &[Requirement],
    responses: &BTreeMap<String, Value>,
    by: &str,
) -> (Vec<Decision>, Vec<String>) {
    let mut decisions = Vec::new();
    let mut problems = Vec::new();
    for r in requirements {
        if let Some(answer) = responses.get(&r.id) {
            match question::decision(r, answer, by) {
                Ok(d) => decisions.push(d),
                Err(why) => problems.push(why),
            }
        }
    }
    (decisions, problems)
}

/// How many answers the run refused (a budget extension not above the spend) a client
/// asked with `elicitation/create` is asked again for, before the call fails with the
/// refusal.
const MAX_REFUSED_ANSWERS: u32 = 3;

pub(crate) fn agent_error(e: AgentError) -> McpError {
    match &e {
        AgentError::SessionBusy { .. } => McpError::invalid_request(
            format!("{e}; wait for the run in flight (or cancel its task) and try again"),
            None,
        ),
        AgentError::StaleView { .. } => McpError::invalid_params(format!("{e}; nothing ran"), None),
        AgentError::InvalidInput(_)
        | AgentError::UnknownRequirement { .. }
        | AgentError::WrongDecision { .. }
        | AgentError::RequirementExpired { .. }
        | AgentError::DuplicateDecision { .. }
        | AgentError::NothingToResume { .. }
        | AgentError::InvalidBudget { .. } => McpError::invalid_params(e.to_string(), None),
        _ => McpError::internal_error(e.to_string(), None),
    }
}

pub(crate) fn clip(s: &str) -> Cow<'_, str> {
    if s.chars().count() > 80 {
        Cow::Owned(s.chars().take(80).collect::<String>() + "…")
    } else {
        Cow::Borrowed(s)
    }
}

impl ServerHandler for McpAgentServer {
    fn get_info(&self) -> ServerConfig {
        let mut caps = json!({ "tools": {} });
        if self.inner.tasks {
            caps["extensions"] = json!({ rmcp::model::TASKS_EXTENSION_ID: {} });
        }
        let caps: ServerCapabilities = serde_json::from_value(caps).unwrap_or_default();
        ServerConfig::new(caps)
            .with_server_info(Implementation::new(
                "reins-mcp-server",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(self.inner.description.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.caller(&ctx)?;
        Ok(ListToolsResult::with_all_items(vec![self.tool()]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == self.inner.tool_name).then(|| self.tool())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, ctx).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        task::get(self, &request.task_id, &ctx).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        task::update(self, &request.task_id, &request.input_responses, &ctx).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        task::cancel(self, &request.task_id, &ctx).await
    }
}

/// The phase a stored session is in, for tasks.
pub(crate) fn is_working(phase: &Phase) -> bool {
    matches!(phase, Phase::Reasoning | Phase::Acting | Phase::Summarizing)
}

/// The session handle with the caller's trace context: the request's
/// `params._meta.traceparent` (W3C Trace Context, where OpenTelemetry's MCP
/// conventions and the MCP proposal SEP-414 put it) becomes the parent of the turn's
/// `invoke_agent` span. A malformed one is ignored.
fn traced(
    session: Session,
    params: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
) -> Session {
    let tp = ctx
        .meta
        .get_traceparent()
        .or_else(|| params.meta.as_ref().and_then(|m| m.get_traceparent()));
    match tp {
        Some(tp) => session.with_trace_parent(tp),
        None => session,
    }
}
