//! The runner: one drive function that performs each [`Step`] of a [`Run`] — hooks,
//! model streaming, the ledger, tools, the store — and publishes [`RunEvent`]s. It
//! serves both `Session::call` (awaited) and `Session::start` (a `RunHandle`).

use chrono::Utc;
use futures::StreamExt;
use reins_hook::{Control, HookContext, HookEvent, HookEventKind, SummaryReason};
use reins_memory::{Claim, Error as StoreError, LedgerState};
use reins_message::{Msg, Role, ToolResult};
use reins_model::{ChatChunk, ChatRequest, MessageAccumulator, ToolChoice};
use reins_tool::{ToolCallOutcome, ToolContext};
use tokio::sync::OwnedMutexGuard;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::error::{AgentError, Result};
use crate::lock::StoreLock;
use crate::output::{RunEvent, RunOutput, RunStatus};
use crate::remote::ActiveRun;
use crate::run::{AfterReasoning, ExecOutcome, Execution, Phase, RunInput, Step};
use crate::session::{SessionCore, reload_if_needed, sync_with_store};
use crate::structured::{FINAL_ANSWER_TOOL, OutputMode, OutputSpec};
use crate::view::{Actor, ViewToken};
use reins_tool::Concurrency;
use std::sync::Arc;

mod ask;
mod fit;

pub use ask::ASKED_ELSEWHERE;
pub(crate) use ask::LiveCalls;

/// The text a tool use gets when its process died while it ran.
pub const UNKNOWN_OUTCOME: &str = "outcome unknown: the process running this call stopped before it finished; \
     it may or may not have taken effect";

/// Everything one call needs.
pub(crate) struct DriveArgs {
    pub(crate) agent: Agent,
    pub(crate) session: String,
    pub(crate) core: OwnedMutexGuard<SessionCore>,
    pub(crate) lock: StoreLock,
    pub(crate) input: RunInput,
    /// Who the call acts for.
    pub(crate) actor: Option<Actor>,
    /// The view the call must act on, when it names one.
    pub(crate) view: Option<ViewToken>,
    /// The calling handle's view: set to what the run ends with.
    pub(crate) handle_view: Arc<std::sync::Mutex<ViewToken>>,
    /// The structured answer a run started by this call's message must end with
    /// (`None`: the agent's default).
    pub(crate) output: Option<OutputSpec>,
    pub(crate) cancel: CancellationToken,
    /// Where events go (`None`: nobody listens, as in `Session::call`).
    pub(crate) events: Option<UnboundedSender<RunEvent>>,
}

/// Drives one call to its end.
pub(crate) async fn drive(args: DriveArgs, active: ActiveRun) -> Result<RunOutput> {
    let DriveArgs {
        agent,
        session,
        mut core,
        lock,
        input,
        actor,
        view,
        handle_view,
        output,
        cancel,
        events,
    } = args;
    let mut d = Driver {
        agent,
        session,
        cancel,
        events,
        lock,
    };
    if matches!(&input, RunInput::Message(m) if m.role != Role::Tool) {
        core.run
            .set_next_output(output.or_else(|| d.agent.inner.output.clone()));
    }
    let result = d.run(&mut core, input, actor.as_ref(), view.as_ref()).await;
    match &result {
        Ok(_) => {
            let now = core.run.view();
            match handle_view.lock() {
                Ok(mut v) => *v = now,
                Err(p) => *p.into_inner() = now,
            }
        }
        Err(e) => {
            d.emit(RunEvent::Failed {
                error: e.to_string(),
            });
            let mut ev = HookEvent::Error {
                message: e.to_string(),
            };
            if let Err(he) = d.hooks(&mut ev, core.run.state().iteration).await {
                tracing::warn!(error = %he, "an Error hook failed");
            }
        }
    }
    // Calls that asked a question stay live only while the run waits for the answer.
    d.agent
        .inner
        .live_calls
        .keep_only(&d.session, &core.run.asking());
    drop(active);
    d.lock.release().await;
    result
}

struct Driver {
    agent: Agent,
    session: String,
    cancel: CancellationToken,
    events: Option<UnboundedSender<RunEvent>>,
    lock: StoreLock,
}

impl Driver {
    fn emit(&self, ev: RunEvent) {
        if let Some(tx) = &self.events {
            let _ = tx.send(ev);
        }
    }

    fn ctx(&self, iteration: u32) -> HookContext {
        HookContext {
            agent_name: self.agent.inner.name.clone(),
            session_id: self.session.clone(),
            iteration,
        }
    }

    /// Whether any hook listens for `kind`.
    fn wants(&self, kind: HookEventKind) -> bool {
        let hooks = &self.agent.inner.hooks;
        !hooks.is_empty() && hooks.wants(kind)
    }

    async fn hooks(&self, event: &mut HookEvent, iteration: u32) -> Result<Control> {
        let hooks = &self.agent.inner.hooks;
        if hooks.is_empty() || !hooks.wants(event.kind()) {
            return Ok(Control::default());
        }
        Ok(hooks.run(event, &self.ctx(iteration)).await?)
    }

    async fn run(
        &mut self,
        core: &mut SessionCore,
        input: RunInput,
        actor: Option<&Actor>,
        view: Option<&ViewToken>,
    ) -> Result<RunOutput> {
        // Another worker may have written since this process last looked: one version
        // read, and a reload only when it moved.
        sync_with_store(&self.agent, &self.session, core).await?;
        let resumed = !matches!(input, RunInput::Message(ref m) if m.role != Role::Tool);
        // Copied for the `PreCall` hooks only when one listens.
        let pre_input = match &input {
            RunInput::Message(m) if self.wants(HookEventKind::PreCall) => Some(m.clone()),
            _ => None,
        };

        // Begin: validate and apply the input; store it. A stale cache (another process
        // wrote since we loaded) shows as a conflict: reload once and try again.
        let mut attempt = 0;
        loop {
            if core.run.phase() == Phase::Acting && matches!(input, RunInput::Message(_)) {
                self.settle_from_ledger(core).await?;
            }
            match core.run.begin_as(input.clone(), actor, view, Utc::now()) {
                Ok(()) => {}
                Err(AgentError::NothingToResume { .. }) => {
                    return Err(AgentError::NothingToResume {
                        session: self.session.clone(),
                    });
                }
                Err(e @ (AgentError::StaleView { .. } | AgentError::RequirementExpired { .. })) => {
                    self.record_refusal(core, &input, &e, actor, view).await;
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
            match self.commit(core).await {
                Ok(()) => break,
                Err(AgentError::Store(StoreError::Conflict { .. })) if attempt == 0 => {
                    attempt += 1;
                    reload_if_needed(&self.agent, &self.session, core, true).await?;
                }
                // `commit` marked the cache stale: the next call reloads what the
                // store holds.
                Err(e) => return Err(e),
            }
        }

        self.emit(RunEvent::RunStarted {
            session_id: self.session.clone(),
        });
        if resumed {
            self.emit(RunEvent::Resumed);
        }
        let mut ev = HookEvent::PreCall { input: pre_input };
        self.hooks(&mut ev, core.run.state().iteration).await?;

        let status = loop {
            self.lock.renew_if_due().await;
            if self.cancel.is_cancelled() {
                break self.interrupt(core, Vec::new()).await?;
            }
            match core.run.next_step() {
                Step::Reason { summary } => {
                    if let Some(status) = self.reason(core, summary).await? {
                        break status;
                    }
                }
                Step::Execute(batch) => {
                    if let Some(status) = self.act(core, batch).await? {
                        break status;
                    }
                }
                Step::Pause(reqs) => {
                    self.commit(core).await?;
                    self.emit(RunEvent::Paused { requirements: reqs });
                    break RunStatus::Paused;
                }
                Step::Finish(status) => {
                    self.commit(core).await?;
                    break status;
                }
            }
        };

        if let Some((raw, problems, attempts)) = core.run.output_failure().cloned() {
            return Err(AgentError::InvalidOutput {
                raw,
                problems,
                attempts,
            });
        }
        let out = core.run.output(&self.session, status);
        match status {
            RunStatus::Completed | RunStatus::MaxIterations if self.events.is_some() => {
                self.emit(RunEvent::Completed {
                    message: out.message.clone(),
                    status,
                });
            }
            RunStatus::Completed | RunStatus::MaxIterations => {}
            RunStatus::Cancelled => self.emit(RunEvent::Cancelled),
            RunStatus::Paused => {}
        }
        if !out.repairs.is_empty() {
            tracing::info!(session = %self.session, repairs = ?out.repairs, "transcript repaired");
        }
        if self.wants(HookEventKind::PostCall) {
            let mut ev = HookEvent::PostCall {
                output: out.message.clone(),
            };
            self.hooks(&mut ev, core.run.state().iteration).await?;
        }
        Ok(out)
    }

    /// Records a refused input in the audit trail (without touching the session's
    /// version: other callers' views stay valid). A failure to record is logged; the
    /// caller gets the refusal either way.
    async fn record_refusal(
        &self,
        core: &SessionCore,
        input: &RunInput,
        error: &AgentError,
        actor: Option<&Actor>,
        view: Option<&ViewToken>,
    ) {
        let (attempted, via): (Vec<crate::run::Attempt>, &str) = match input {
            RunInput::Decisions(ds) => (
                ds.iter()
                    .map(|d| {
                        (
                            d.id().to_owned(),
                            d.label().to_owned(),
                            d.decided_by().map(str::to_owned),
                        )
                    })
                    .collect(),
                "resolve",
            ),
            RunInput::Message(m) => (
                m.tool_results_iter()
                    .map(|r| (r.id.clone(), "tool_result".to_owned(), None))
                    .collect(),
                "tool_results",
            ),
            RunInput::Resume => (
                view.map(|v| {
                    v.requirement_ids()
                        .iter()
                        .map(|id| (id.clone(), "approve".to_owned(), None))
                        .collect()
                })
                .unwrap_or_default(),
                "resume",
            ),
        };
        let records = core
            .run
            .refusal_records(&attempted, via, error, actor, view, Utc::now());
        if records.is_empty() {
            return;
        }
        let entries = records
            .iter()
            .map(crate::view::DecisionRecord::to_entry)
            .collect();
        if let Err(e) = self
            .agent
            .inner
            .store
            .append_decisions(&self.session, entries)
            .await
        {
            tracing::warn!(session = %self.session, error = %e, "could not record a refused decision");
        }
    }

    /// Writes the run's changes as one store transaction.
    async fn commit(&self, core: &mut SessionCore) -> Result<()> {
        if !core.run.has_changes() {
            return Ok(());
        }
        let mut commit = core.run.take_commit();
        commit.expected_version = core.version;
        match self.agent.inner.store.commit(&self.session, commit).await {
            Ok(v) => {
                core.version = v;
                Ok(())
            }
            Err(e) => {
                core.stale = true;
                Err(e.into())
            }
        }
    }

    async fn interrupt(
        &self,
        core: &mut SessionCore,
        results: Vec<ToolResult>,
    ) -> Result<RunStatus> {
        core.run.interrupt(results);
        let report = core.run.repairs().clone();
        if !report.is_empty() {
            self.emit(RunEvent::Repaired { report });
        }
        self.commit(core).await?;
        Ok(RunStatus::Cancelled)
    }

    // ----- reasoning ---------------------------------------------------------------

    async fn reason(&self, core: &mut SessionCore, summary: bool) -> Result<Option<RunStatus>> {
        let inner = &self.agent.inner;
        let iteration = core.run.state().iteration + 1;
        if let Some(status) = self.fit_context(core, summary, iteration).await? {
            return Ok(Some(status));
        }
        let (messages, report) = core.run.request_messages(inner.context.is_some());
        if !report.is_empty() {
            tracing::warn!(session = %self.session, ?report, "transcript repaired before the model request");
            self.emit(RunEvent::Repaired { report });
        }
        let mut request_messages = Vec::with_capacity(messages.len() + 2);
        if let Some(p) = &inner.system_prompt {
            request_messages.push(Msg::system(p.clone()).with_id("system-prompt"));
        }
        request_messages.extend(messages);
        let mut request = ChatRequest::new(request_messages).with_options(inner.options.clone());
        let mut output_mode = None;
        let mut event = if summary {
            request
                .messages
                .push(Msg::user(inner.summary_prompt.clone()).with_id("summary-prompt"));
            request.tool_choice = ToolChoice::None;
            HookEvent::PreSummary {
                request,
                reason: SummaryReason::IterationLimit,
            }
        } else {
            request.tools = inner.toolkit.specs();
            if let Some((mode, spec)) = core.run.prepare_output(inner.model.capabilities()) {
                crate::structured::ask_for_output(&mut request, mode, &spec);
                output_mode = Some(mode);
            }
            HookEvent::PreReasoning { request }
        };
        self.hooks(&mut event, iteration).await?;
        let request = match event {
            HookEvent::PreSummary { request, .. } | HookEvent::PreReasoning { request } => request,
            _ => {
                return Err(AgentError::Internal(
                    "a hook replaced the request event".to_owned(),
                ));
            }
        };

        // Checkpoint: before the model call.
        if self.cancel.is_cancelled() {
            return self.interrupt(core, Vec::new()).await.map(Some);
        }
        self.emit(RunEvent::ReasoningStarted { iteration });
        let want_chunks = inner.hooks.wants(HookEventKind::ReasoningChunk);
        let mut answer_index: Option<usize> = None;
        let mut acc = MessageAccumulator::new();
        let stream = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => None,
            s = inner.model.stream(request) => Some(s?),
        };
        let Some(mut stream) = stream else {
            return self.interrupt(core, Vec::new()).await.map(Some);
        };
        loop {
            // Checkpoint: on every streamed chunk.
            let next = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => None,
                c = stream.next() => Some(c),
            };
            let Some(next) = next else {
                // The partially streamed message is dropped (never stored).
                drop(stream);
                return self.interrupt(core, Vec::new()).await.map(Some);
            };
            let Some(chunk) = next else { break };
            let chunk = chunk?;
            self.lock.renew_if_due().await;
            acc.push(&chunk)?;
            match &chunk {
                ChatChunk::TextDelta { text } => {
                    if output_mode == Some(OutputMode::NativeSchema) {
                        self.emit(RunEvent::OutputDelta { json: text.clone() });
                    }
                    self.emit(RunEvent::TextDelta { text: text.clone() });
                }
                ChatChunk::ToolArgsDelta { index, fragment } if answer_index == Some(*index) => {
                    self.emit(RunEvent::OutputDelta {
                        json: fragment.clone(),
                    });
                }
                ChatChunk::ThinkingDelta { text } => {
                    self.emit(RunEvent::ThinkingDelta { text: text.clone() });
                }
                ChatChunk::ToolCallStart { id, name, index } => {
                    if output_mode.is_some_and(|m| m != OutputMode::NativeSchema)
                        && name == FINAL_ANSWER_TOOL
                    {
                        answer_index = Some(*index);
                    }
                    self.emit(RunEvent::ToolCallStarted {
                        id: id.clone(),
                        name: name.clone(),
                    });
                }
                _ => {}
            }
            if want_chunks {
                let mut ev = HookEvent::ReasoningChunk {
                    chunk,
                    accumulated_text: acc.text().to_owned(),
                };
                self.hooks(&mut ev, iteration).await?;
            }
        }
        let done = acc.finish();
        let mut message = done.message;
        message.name = Some(inner.name.clone());

        let mut event = if summary {
            HookEvent::PostSummary {
                message,
                reason: SummaryReason::IterationLimit,
            }
        } else {
            HookEvent::PostReasoning { message }
        };
        let control = self.hooks(&mut event, iteration).await?;
        let message = match event {
            HookEvent::PostSummary { message, .. } | HookEvent::PostReasoning { message } => {
                message
            }
            _ => {
                return Err(AgentError::Internal(
                    "a hook replaced the message event".to_owned(),
                ));
            }
        };
        for u in message.tool_uses() {
            self.emit(RunEvent::ToolCallReady {
                tool_use: u.clone(),
            });
        }
        let gates = message
            .tool_uses()
            .map(|u| self.agent.inner.toolkit.gate(u))
            .collect();
        let after = AfterReasoning {
            stop: control.is_stopped(),
            goto: control.goto().map(<[Msg]>::to_vec).unwrap_or_default(),
        };
        core.run
            .on_model_message(message, gates, after, done.usage, Utc::now());
        self.commit(core).await?;
        Ok(None)
    }

    // ----- acting ------------------------------------------------------------------

    async fn act(
        &self,
        core: &mut SessionCore,
        batch: Vec<Execution>,
    ) -> Result<Option<RunStatus>> {
        let iteration = core.run.state().iteration;
        // Answers routed to paused sub-agents, handed to them with this dispatch.
        let routed: std::collections::HashMap<String, crate::run::ChildInput> = batch
            .iter()
            .filter_map(|e| {
                let id = &e.tool_use.id;
                core.run.routed_input(id).map(|r| (id.clone(), r))
            })
            .collect();
        // Answers to questions of calls in flight, handed to them with this dispatch.
        let answers: std::collections::HashMap<String, reins_tool::QuestionAnswer> = batch
            .iter()
            .filter_map(|e| {
                let id = &e.tool_use.id;
                core.run.question_answer(id).map(|a| (id.clone(), a))
            })
            .collect();
        let route = |e: &Execution| {
            (
                routed.get(&e.tool_use.id).cloned(),
                answers.get(&e.tool_use.id).cloned(),
            )
        };
        let (chunk_tx, mut chunk_rx) = tokio::sync::mpsc::unbounded_channel();
        let exec_all = async {
            let mut outcomes = Vec::with_capacity(batch.len());
            match self.agent.inner.concurrency {
                Concurrency::Parallel if batch.len() > 1 => {
                    let futs = batch.iter().map(|e| {
                        self.execute_and_announce(e, iteration, chunk_tx.clone(), route(e))
                    });
                    outcomes = futures::future::join_all(futs).await;
                }
                _ => {
                    for e in &batch {
                        outcomes.push(
                            self.execute_and_announce(e, iteration, chunk_tx.clone(), route(e))
                                .await,
                        );
                    }
                }
            }
            drop(chunk_tx);
            outcomes
        };
        let want = self.agent.inner.hooks.wants(HookEventKind::ActingChunk);
        let forward = |chunk: reins_tool::ToolChunk| async move {
            let reins_tool::ToolChunk { tool_use_id, block } = chunk;
            if let Some(text) = block.as_text() {
                self.emit(RunEvent::ToolExecutionChunk {
                    id: tool_use_id.clone(),
                    text: text.to_owned(),
                });
            }
            if want {
                let mut ev = HookEvent::ActingChunk {
                    tool_use_id,
                    chunk: block,
                };
                if let Err(e) = self.hooks(&mut ev, iteration).await {
                    tracing::warn!(error = %e, "an ActingChunk hook failed");
                }
            }
        };
        // Until every call of the batch is done (a call that asked a question keeps
        // its chunk sender, so the channel does not close): forward partial output,
        // and keep the session lock alive meanwhile (tools may run long).
        tokio::pin!(exec_all);
        let outcomes = loop {
            tokio::select! {
                biased;
                done = &mut exec_all => break done,
                Some(chunk) = chunk_rx.recv() => {
                    forward(chunk).await;
                    self.lock.renew_if_due().await;
                }
                _ = tokio::time::sleep(self.lock.renew_every()) => self.lock.renew_if_due().await,
            }
        };
        while let Ok(chunk) = chunk_rx.try_recv() {
            forward(chunk).await;
        }

        let mut results = Vec::new();
        let mut stop = false;
        let mut first_error = None;
        for o in outcomes {
            match o {
                Ok((outcome, s)) => {
                    stop |= s;
                    results.push(outcome);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        core.run.on_tool_results(results, stop, Utc::now());
        if let Some(e) = first_error {
            self.commit(core).await?;
            return Err(e);
        }
        // Checkpoint: after tools.
        if self.cancel.is_cancelled() {
            return self.interrupt(core, Vec::new()).await.map(Some);
        }
        self.commit(core).await?;
        Ok(None)
    }

    /// Runs one call through hooks, the ledger and the toolkit. Returns the outcome
    /// and whether a `PostActing` hook asked to stop.
    /// [`Driver::execute_one`], publishing `ToolExecutionFinished` as soon as this call
    /// has its result (not when the whole parallel batch is done).
    async fn execute_and_announce(
        &self,
        exec: &Execution,
        iteration: u32,
        chunks: UnboundedSender<reins_tool::ToolChunk>,
        (routed, answer): (
            Option<crate::run::ChildInput>,
            Option<reins_tool::QuestionAnswer>,
        ),
    ) -> Result<(ExecOutcome, bool)> {
        let out = match answer {
            Some(answer) => self.continue_call(exec, answer, iteration).await,
            None => self.execute_one(exec, iteration, chunks, routed).await,
        };
        if let Ok((ExecOutcome::Done(r), _)) = &out {
            self.emit(RunEvent::ToolExecutionFinished { result: r.clone() });
        }
        out
    }

    async fn execute_one(
        &self,
        exec: &Execution,
        iteration: u32,
        chunks: UnboundedSender<reins_tool::ToolChunk>,
        routed: Option<crate::run::ChildInput>,
    ) -> Result<(ExecOutcome, bool)> {
        let inner = &self.agent.inner;
        let original = &exec.tool_use;
        // Checkpoint: before each tool.
        if self.cancel.is_cancelled() {
            return Ok((
                ExecOutcome::Done(ToolResult::cancelled(
                    &original.id,
                    &original.name,
                    crate::run::NOT_RUN_INTERRUPTED,
                )),
                false,
            ));
        }
        let mut ev = HookEvent::PreActing {
            tool_use: exec.effective_use(),
        };
        let control = self.hooks(&mut ev, iteration).await?;
        let HookEvent::PreActing {
            tool_use: mut to_run,
        } = ev
        else {
            return Err(AgentError::Internal(
                "a hook replaced the PreActing event".to_owned(),
            ));
        };
        // The id and name are the model's: a hook may change the arguments only.
        to_run.id.clone_from(&original.id);
        to_run.name.clone_from(&original.name);
        if let Some(note) = control.rejection() {
            let r = ToolResult::rejected(&original.id, &original.name, Some(note.to_owned()))
                .with_metadata("rejected_by", serde_json::Value::String("hook".to_owned()));
            return Ok((ExecOutcome::Done(r), false));
        }
        if let Some(sub) = inner.subagents.get(&original.name) {
            return self.execute_subagent(sub, to_run, routed, iteration).await;
        }
        let edited = to_run.input != original.input || to_run.raw_input != original.raw_input;

        // The ledger: at most once.
        let fingerprint = reins_memory::fingerprint(&to_run.input);
        let idempotent = inner.toolkit.is_idempotent(&original.name);
        let store = &inner.store;
        let mut claim = store
            .claim(
                &self.session,
                &original.id,
                &fingerprint,
                inner.tool_lease,
                false,
            )
            .await?;
        if matches!(claim, Claim::Expired) && idempotent {
            claim = store
                .claim(
                    &self.session,
                    &original.id,
                    &fingerprint,
                    inner.tool_lease,
                    true,
                )
                .await?;
        }
        match claim {
            Claim::Granted => {}
            Claim::Finished(r) => return Ok((ExecOutcome::Done(r), false)),
            Claim::InFlight { lease_until } => {
                return Err(AgentError::ToolInFlight {
                    id: original.id.clone(),
                    until: lease_until,
                });
            }
            Claim::Expired => {
                let r = ToolResult::unknown(&original.id, &original.name, UNKNOWN_OUTCOME);
                store.finish(&self.session, &original.id, &r).await?;
                return Ok((ExecOutcome::Done(r), false));
            }
        }

        self.emit(RunEvent::ToolExecutionStarted {
            id: original.id.clone(),
            name: original.name.clone(),
        });
        // The call gets a token of its own (the run's interrupt is forwarded while the
        // run waits for it), so that it can outlive the run when it asks a question.
        let (questions_tx, questions) = tokio::sync::mpsc::unbounded_channel();
        let call_cancel = tokio_util::sync::CancellationToken::new();
        let ctx = ToolContext::new(self.session.clone(), original.id.clone())
            .with_cancel(call_cancel.clone())
            .with_chunk_sender(chunks)
            .with_question_sender(questions_tx);
        let opts = reins_tool::ExecOptions {
            grace: inner.grace,
            ..reins_tool::ExecOptions::default()
        };
        let toolkit = inner.toolkit.clone();
        let call_use = to_run.clone();
        let call: ask::CallFuture =
            Box::pin(async move { toolkit.execute(&call_use, ctx, &opts).await });
        let outcome = match self.await_call(call, questions, call_cancel, &to_run).await {
            ask::Waited::Done(outcome) => outcome,
            ask::Waited::Asked(requirement) => {
                return Ok((
                    ExecOutcome::Asking {
                        id: original.id.clone(),
                        requirement,
                    },
                    false,
                ));
            }
        };
        self.finish_call(original, to_run, edited, outcome, iteration)
            .await
    }

    /// The end of a call that ran: its result recorded in the ledger, then the
    /// `PostActing` hooks.
    async fn finish_call(
        &self,
        original: &reins_message::ToolUse,
        to_run: reins_message::ToolUse,
        edited: bool,
        outcome: ToolCallOutcome,
        iteration: u32,
    ) -> Result<(ExecOutcome, bool)> {
        let store = &self.agent.inner.store;
        let mut result = match outcome {
            ToolCallOutcome::Done(r) => r,
            ToolCallOutcome::Suspended { reason, .. } => {
                return Ok((
                    ExecOutcome::Suspended {
                        id: original.id.clone(),
                        reason,
                    },
                    false,
                ));
            }
        };
        result.id.clone_from(&original.id);
        result.name.clone_from(&original.name);
        if edited {
            result
                .metadata
                .insert("executed_input".to_owned(), to_run.input.clone());
        }
        store.finish(&self.session, &original.id, &result).await?;

        self.post_acting(to_run, result, iteration).await
    }

    /// Runs the `PostActing` hooks on a finished call (not after an interrupt): they may
    /// edit the result or ask to stop.
    async fn post_acting(
        &self,
        to_run: reins_message::ToolUse,
        result: ToolResult,
        iteration: u32,
    ) -> Result<(ExecOutcome, bool)> {
        let mut ev = HookEvent::PostActing {
            tool_use: to_run,
            result,
        };
        let control = if self.cancel.is_cancelled() {
            Control::default()
        } else {
            self.hooks(&mut ev, iteration).await?
        };
        let HookEvent::PostActing { result, .. } = ev else {
            return Err(AgentError::Internal(
                "a hook replaced the PostActing event".to_owned(),
            ));
        };
        Ok((ExecOutcome::Done(result), control.is_stopped()))
    }

    /// Serves a sub-agent call (see [`crate::subagent`]): the child session runs, and
    /// its pause becomes this call's.
    async fn execute_subagent(
        &self,
        sub: &crate::subagent::SubAgentTool,
        to_run: reins_message::ToolUse,
        routed: Option<crate::run::ChildInput>,
        iteration: u32,
    ) -> Result<(ExecOutcome, bool)> {
        self.emit(RunEvent::ToolExecutionStarted {
            id: to_run.id.clone(),
            name: to_run.name.clone(),
        });
        let outcome = crate::subagent::execute(
            &self.agent,
            &self.session,
            sub,
            &to_run,
            routed,
            self.cancel.child_token(),
        )
        .await?;
        let ExecOutcome::Done(result) = outcome else {
            return Ok((outcome, false));
        };
        self.post_acting(to_run, result, iteration).await
    }

    /// After a crash in the middle of tool execution, before a new message closes the
    /// turn: calls the ledger shows finished keep their recorded results; calls that
    /// started and never finished become `Unknown`. Calls that never started are
    /// closed by the new message.
    async fn settle_from_ledger(&self, core: &mut SessionCore) -> Result<()> {
        let store = &self.agent.inner.store;
        let mut settled = Vec::new();
        for e in core.run.unsettled() {
            let id = &e.tool_use.id;
            if let Some(entry) = store.ledger_entry(&self.session, id).await? {
                match (entry.state, entry.result) {
                    (LedgerState::Finished, Some(r)) => settled.push(r),
                    _ => {
                        let r = ToolResult::unknown(id, &e.tool_use.name, UNKNOWN_OUTCOME);
                        store.finish(&self.session, id, &r).await?;
                        settled.push(r);
                    }
                }
            }
        }
        if !settled.is_empty() {
            core.run.settle(settled, Utc::now());
        }
        Ok(())
    }
}
