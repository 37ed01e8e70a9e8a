//! The MCP side: `tools/list`, `tools/call` (plain, MRTR retry, or a new task), the
//! Tasks extension's `tasks/get|update|cancel`, and `elicitation/create` for clients
//! on revisions before 2026-07-28.

use std::borrow::Cow;
use std::collections::BTreeMap;

use reins_agent::port::Decide;
use reins_agent::run::Phase;
use reins_agent::{
    Actor, AgentError, Decision, Requirement, RequirementKind, RunHandle, RunInput, RunOutput,
    RunStatus, Submission, ViewToken,
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
use crate::state::{Asked, Paused};
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

impl Caller {
    /// Who acts: recorded with every input and decision made through this door.
    pub(crate) fn actor(&self) -> Actor {
        Actor::new(self.principal.clone())
    }
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

    /// Refuses a session the caller does not own (an unknown id and a foreign one
    /// look the same, so ids are not probed).
    pub(crate) fn owned(&self, id: &str, caller: &Caller, what: &str) -> Result<(), McpError> {
        if self.owns(id, caller) {
            return Ok(());
        }
        Err(unknown(what, id))
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
        let mut submission = Submission::new(RunInput::Message(Msg::user(message)));
        submission.actor = Some(caller.actor());
        submission.trace_parent = trace_parent(&params, &ctx);
        let handle = self
            .inner
            .sessions
            .start(&id, submission)
            .await
            .map_err(agent_error)?;
        if caller.modern && caller.tasks && self.inner.tasks {
            self.track(handle);
            let task = task::working(self, &id);
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        let out = self.finish(handle, &ctx).await.map_err(agent_error)?;
        self.answer(&id, out, &args, &caller, ctx).await
    }

    /// A retry with `requestState` (MRTR): opens the state, turns the answers into
    /// decisions on exactly the requirements shown, and hands them to the one decision
    /// path on the view they were shown in; the run refuses what is no longer pending
    /// (`already_decided` when someone decided it, audited) and nothing runs then.
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
        self.owned(&paused.session, caller, "session")?;
        let id = paused.session.as_str();
        let sessions = &self.inner.sessions;
        let responses = params.input_responses.clone().unwrap_or_default();
        let asked = if paused.asked.is_empty() {
            // A state sealed before it carried what it asked: the requirements pending
            // now, when they are the ones it names.
            let view = sessions.view(id).await.map_err(agent_error)?;
            if view.token == paused.view {
                asked_of(&view.requirements)
            } else {
                Vec::new()
            }
        } else {
            paused.asked.clone()
        };
        let (decisions, problems) = decide(
            asked.iter().map(|a| (a.id.as_str(), &a.kind)),
            &responses,
            &caller.principal,
        );
        if decisions.is_empty() {
            // Nothing answered: ask again (the spec's advice for missing input), when
            // the same questions are still open.
            if !problems.is_empty() {
                tracing::debug!(problems = ?problems, "MRTR retry without usable answers");
            }
            let view = sessions.view(id).await.map_err(agent_error)?;
            if view.token != paused.view {
                return Err(McpError::invalid_params(
                    "requestState refers to questions that were already answered or changed (a replay, or a decision made elsewhere), and this retry answers none of them; nothing ran. \
                     Call the tool again with the session to see what is pending now",
                    None,
                ));
            }
            return self.ask(id, &view.requirements, args, caller);
        }
        let mut decide = Decide::new(caller.actor(), decisions).at(paused.view.clone());
        decide.trace_parent = trace_parent(params, &ctx);
        let handle = sessions.decide(id, decide).await.map_err(agent_error)?;
        let out = self.finish(handle, &ctx).await.map_err(agent_error)?;
        self.answer(id, out, args, caller, ctx).await
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
        session: &str,
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
                    return self.ask(session, &out.requirements, args, caller);
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
            let view = ViewToken::of(true, &out.requirements);
            let mut answers = BTreeMap::new();
            for r in &out.requirements {
                let request = question::input_request(&self.inner.sessions.card().name, r);
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
            let asked = asked_of(&out.requirements);
            let (decisions, _) = decide(
                asked.iter().map(|a| (a.id.as_str(), &a.kind)),
                &answers,
                &caller.principal,
            );
            if decisions.is_empty() {
                return Ok(CallToolResponse::Complete(result_of(
                    &out,
                    self.inner.inbox_url.as_deref(),
                )));
            }
            let decide = Decide::new(caller.actor(), decisions).at(view);
            let run = match self.inner.sessions.decide(session, decide).await {
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
        session: &str,
        requirements: &[Requirement],
        args: &Map<String, Value>,
        caller: &Caller,
    ) -> Result<CallToolResponse, McpError> {
        let paused = Paused::new(session, requirements);
        let state = self
            .inner
            .sealer
            .seal(&paused, &caller.principal, &self.inner.tool_name, args)
            .map_err(|e| {
                McpError::internal_error(format!("could not seal requestState: {e}"), None)
            })?;
        Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(input_requests(
                &self.inner.sessions.card().name,
                requirements,
            )?),
            Some(state),
        )))
    }

    /// Keeps a run's interrupter while this server follows it (its handle has not
    /// ended), wherever the driver executes it.
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

    /// Whether a run of this session that this server started is still going.
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

/// What each of these requirements asks.
pub(crate) fn asked_of(requirements: &[Requirement]) -> Vec<Asked> {
    requirements
        .iter()
        .map(|r| Asked {
            id: r.id.clone(),
            kind: r.kind.clone(),
        })
        .collect()
}

/// Decisions for the answered requirements (`(id, kind)` of each one asked), and what
/// could not be used.
pub(crate) fn decide<'a>(
    asked: impl IntoIterator<Item = (&'a str, &'a RequirementKind)>,
    responses: &BTreeMap<String, Value>,
    by: &str,
) -> (Vec<Decision>, Vec<String>) {
    let mut decisions = Vec::new();
    let mut problems = Vec::new();
    for (id, kind) in asked {
        if let Some(answer) = responses.get(id) {
            match question::decision(id, kind, answer, by) {
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

/// A reins refusal as the JSON-RPC error the client gets: `-32600` for a busy session,
/// `-32602` for a decision or input the run refused, `-32603` otherwise. Refusals carry
/// `data.code` (reins-server's codes: `busy`, `stale_view`, `already_decided`, ...);
/// `already_decided` also carries `data.requirement` and `data.decided` (the decision
/// that took effect: `{decision, by, at, via}`).
pub(crate) fn agent_error(e: AgentError) -> McpError {
    let data = |code: &str| Some(json!({ "code": code }));
    match &e {
        AgentError::SessionBusy { .. } => McpError::invalid_request(
            format!("{e}; wait for the run in flight (or cancel its task) and try again"),
            data("busy"),
        ),
        AgentError::AlreadyDecided { id, decided } => McpError::invalid_params(
            e.to_string(),
            Some(json!({
                "code": "already_decided",
                "requirement": id,
                "decided": {
                    "decision": decided.decision,
                    "by": decided.by,
                    "at": decided.at,
                    "via": decided.via,
                },
            })),
        ),
        AgentError::StaleView { .. } => {
            McpError::invalid_params(format!("{e}; nothing ran"), data("stale_view"))
        }
        AgentError::Store(reins_memory::Error::SessionNotFound { id }) => unknown("session", id),
        AgentError::NotEligible { .. } => {
            McpError::invalid_params(e.to_string(), data("not_eligible"))
        }
        AgentError::ShownArgumentsChanged { .. } => {
            McpError::invalid_params(e.to_string(), data("fingerprint_mismatch"))
        }
        AgentError::AlreadyApproved { .. } => {
            McpError::invalid_params(e.to_string(), data("already_approved"))
        }
        AgentError::RequirementExpired { .. } => {
            McpError::invalid_params(e.to_string(), data("expired"))
        }
        AgentError::NothingToResume { .. } => {
            McpError::invalid_params(e.to_string(), data("not_paused"))
        }
        AgentError::UnknownRequirement { .. } => {
            McpError::invalid_params(e.to_string(), data("unknown_requirement"))
        }
        AgentError::InvalidBudget { .. } => {
            McpError::invalid_params(e.to_string(), data("invalid_budget"))
        }
        AgentError::InvalidInput(_)
        | AgentError::WrongDecision { .. }
        | AgentError::DuplicateDecision { .. } => {
            McpError::invalid_params(e.to_string(), data("invalid_decision"))
        }
        _ => McpError::internal_error(e.to_string(), None),
    }
}

/// `unknown session` / `unknown task`: an id the caller may not see, or that does not
/// exist (the two look the same).
pub(crate) fn unknown(what: &str, id: &str) -> McpError {
    McpError::invalid_params(format!("unknown {what} `{}`", clip(id)), None)
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

/// The caller's trace context: the request's `params._meta.traceparent` (W3C Trace
/// Context, where OpenTelemetry's MCP conventions and the MCP proposal SEP-414 put it)
/// becomes the parent of the turn's `invoke_agent` span. A malformed one is ignored
/// by the run.
fn trace_parent(
    params: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
) -> Option<String> {
    ctx.meta
        .get_traceparent()
        .or_else(|| params.meta.as_ref().and_then(|m| m.get_traceparent()))
        .map(str::to_owned)
}
