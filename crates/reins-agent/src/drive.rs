//! The local driver: every step of a [`Run`](crate::run::Run) runs in this process
//! ([`crate::interpret::drive`] answers them; this module says where). Its own are
//! the session's locks — the lock of this process ([`ClaimedCore`]) and the store's,
//! taken by the call's first commit where it can be, renewed at every step and while
//! tools run, released by its last commit —, the cached copy of the session and its
//! version, and the caller's event channel. It serves both an awaited verb
//! (`session.send(msg).await`) and a started one (`.start()`, a `RunHandle`).

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use reins_memory::Error as StoreError;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::effects::delegate::{ChildAnswer, ChildCall};
use crate::effects::{self, Done, LiveCalls, Ports, Takeover, Witness, Work};
use crate::error::{AgentError, Result};
use crate::interpret::{Driver, Perform};
use crate::lock::StoreLock;
use crate::output::{RunEvent, RunOutput, RunStatus};
use crate::remote::ActiveRun;
use crate::requirement::Requirement;
use crate::run::{Call, Checkpoint, CommitAt, Phase, Run, RunInput};
use crate::state::{ClaimedCore, SessionCore, sync_to_version};
use crate::structured::OutputSpec;
use crate::view::{Actor, ViewToken};

/// Everything one call needs.
pub(crate) struct DriveArgs {
    pub(crate) agent: Agent,
    pub(crate) session: String,
    /// The session, held in this process until the call ends.
    pub(crate) core: ClaimedCore,
    pub(crate) lock: StoreLock,
    pub(crate) input: RunInput,
    /// Who the call acts for.
    pub(crate) actor: Option<Actor>,
    /// The view the call must act on, when it names one.
    pub(crate) view: Option<ViewToken>,
    /// The calling handle's view: set to what the run ends with.
    pub(crate) handle_view: Arc<std::sync::Mutex<ViewToken>>,
    /// What the caller asks of a run this call's message starts.
    pub(crate) asks: Asks,
    pub(crate) cancel: CancellationToken,
    /// Where events go (`None`: nobody listens, as in an awaited `send`).
    pub(crate) events: Option<UnboundedSender<RunEvent>>,
    /// Tools the caller declared for this call and executes itself (see
    /// [`SendBuilder::client_tools`](crate::SendBuilder::client_tools)).
    pub(crate) client_tools: Vec<reins_message::ToolSpec>,
    /// The caller's W3C `traceparent`: the parent of the turn's `invoke_agent` span.
    pub(crate) trace_parent: Option<String>,
}

/// What the caller asks of the run a message starts, beside the agent's own rules.
#[derive(Debug, Clone, Default)]
pub(crate) struct Asks {
    /// The structured answer the run must end with (`None`: the agent's default).
    pub(crate) output: Option<OutputSpec>,
    /// The session's own budget limit, stored with it (`None`: as it is).
    pub(crate) budget: Option<crate::budget::Budget>,
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
        asks,
        cancel,
        events,
        client_tools,
        trace_parent,
    } = args;
    let mut call = agent
        .begin(session.clone(), input, Utc::now())
        .with_actor(actor)
        .with_view(view)
        .with_client_tools(client_tools)
        .with_trace_parent(trace_parent);
    if let Some(spec) = asks.output {
        call = call.with_output(spec);
    }
    if let Some(limit) = asks.budget {
        call = call.with_budget(limit);
    }
    let SessionCore {
        run,
        version,
        stale,
    } = &mut *core;
    let mut local = Local {
        agent,
        session,
        cancel,
        events,
        lock,
        version,
        stale,
    };
    let result = match local.prepare(run, &call).await {
        Ok(()) => crate::interpret::drive(&mut local, run, call).await,
        // Refused by the lock: the run never started.
        Err(e @ AgentError::SessionBusy { .. }) => Err(e),
        Err(e) => {
            crate::interpret::fail(&mut local, run, &e).await;
            Err(e)
        }
    };
    if let Ok(out) = &result {
        // What the call left the session waiting for: its output says (a paused
        // output holds the requirements; any other holds none).
        let now = ViewToken::of(out.status == RunStatus::Paused, &out.requirements);
        match handle_view.lock() {
            Ok(mut v) => *v = now,
            Err(p) => *p.into_inner() = now,
        }
    }
    let Local { lock, .. } = local;
    drop(active);
    lock.release().await;
    result
}

/// The local driver of one call: the agent, the session's locks, the cached copy's
/// version, the caller's events.
struct Local<'a> {
    agent: Agent,
    session: String,
    cancel: CancellationToken,
    events: Option<UnboundedSender<RunEvent>>,
    lock: StoreLock,
    /// The stored version the cached copy matches.
    version: &'a mut u64,
    /// The cached copy may differ from the store (a write failed): read it again.
    stale: &'a mut bool,
}

impl Local<'_> {
    /// The lock and the cache before the call begins: the lock rides in the call's
    /// first commit when the store can take it there and the cache is current as far
    /// as this process knows; otherwise it is taken now (reading the stored version
    /// with it: the cache is read again when it moved). A crash's calls are settled
    /// under the lock.
    async fn prepare(&mut self, run: &mut Run, call: &Call) -> Result<()> {
        // A message on a run stored mid-tool-execution (a crash) may settle calls:
        // under the lock.
        let may_settle =
            run.phase() == Phase::Acting && matches!(call.input(), RunInput::Message(_));
        if !self.lock.is_held() && (*self.stale || may_settle) {
            self.lock.acquire_now().await?;
        }
        if self.lock.is_held() {
            // Boxed (the interpreter boxes `confirm` the same way): see `sync`.
            crate::boxed::boxed(|| self.sync(run)).await?;
        }
        Ok(())
    }

    /// Brings the cached copy up to date with the version read with the lock. Its
    /// future holds a whole session while the store reads it: it is awaited boxed,
    /// so that the call's future — moved whole when the call begins — does not
    /// carry that size for a read most calls never make.
    async fn sync(&mut self, run: &mut Run) -> Result<bool> {
        let seen = self.lock.seen_version();
        if seen == Some(*self.version) && !*self.stale {
            return Ok(false);
        }
        let mut core = SessionCore {
            run: std::mem::replace(run, Run::new(self.agent.run_config())),
            version: *self.version,
            stale: *self.stale,
        };
        let synced = sync_to_version(
            &self.agent.runtime.store,
            self.agent.config.run,
            &self.session,
            &mut core,
            seen,
        )
        .await;
        *run = core.run;
        *self.version = core.version;
        *self.stale = core.stale;
        synced?;
        Ok(true)
    }

    /// Writes `checkpoint`'s commit. The call's first commit takes the store's lock
    /// with it where the lock is not held yet: written even when there is nothing to
    /// store, since the commit's version check is what tells that the cache is
    /// current; a conflict (another worker wrote) takes the lock the usual way and is
    /// returned, and the call begins again on the stored session. The call's last
    /// commit releases the lock where the store can. The decisions a stored commit
    /// applied get their receipts ([`crate::effects::seal`], as every driver does).
    ///
    /// The commit is handed to the store before the returned future is first polled,
    /// so that the future holds the store's (boxed) future and not the commit: the
    /// commit future is part of every call's future, which is moved whole.
    fn store(&mut self, checkpoint: Checkpoint) -> impl Future<Output = Result<()>> + Send + '_ {
        let Checkpoint { commit, at } = checkpoint;
        let Local {
            agent,
            session,
            lock,
            version,
            stale,
            ..
        } = self;
        let agent: &Agent = agent;
        let session: &str = session;
        let request = if at == CommitAt::Begin {
            lock.take_in_commit()
        } else {
            None
        };
        let taking = request.is_some();
        let commit = match request {
            Some(request) => {
                let mut commit = commit.unwrap_or_else(|| reins_memory::Commit::at(**version));
                commit.acquire_lock = Some(request);
                Some(commit)
            }
            None => commit.map(|mut commit| {
                commit.release_lock = if at.is_last() {
                    lock.release_in_commit().map(str::to_owned)
                } else {
                    None
                };
                commit
            }),
        };
        let sent = std::time::Instant::now();
        let pending = commit.map(|mut commit| {
            commit.expected_version = **version;
            let releases = commit.release_lock.is_some();
            let sealed = crate::effects::to_seal(agent, &commit);
            (
                releases,
                sealed,
                agent.runtime.store.commit(session, commit),
            )
        });
        async move {
            let Some((releases, sealed, stored)) = pending else {
                return Ok(());
            };
            let stored = stored.await;
            if !taking {
                crate::telemetry::store_call("commit", sent.elapsed());
            }
            match stored {
                Ok(v) => {
                    **version = v;
                    if taking {
                        lock.taken_by_commit(sent);
                    } else if releases {
                        lock.released_by_commit();
                    }
                    if !sealed.is_empty() {
                        crate::boxed::boxed(|| crate::effects::seal(agent, session, &sealed)).await;
                    }
                    Ok(())
                }
                Err(e) => {
                    // The input is applied to the cache but not stored.
                    **stale = true;
                    if !taking {
                        return Err(e.into());
                    }
                    match e {
                        StoreError::SessionLocked { .. } => Err(AgentError::SessionBusy {
                            session: session.to_owned(),
                        }),
                        e @ (StoreError::Conflict { .. } | StoreError::SessionNotFound { .. }) => {
                            lock.acquire_now().await?;
                            Err(AgentError::Store(match e {
                                StoreError::SessionNotFound { id } => StoreError::Conflict {
                                    session: id,
                                    expected: **version,
                                    actual: 0,
                                },
                                e => e,
                            }))
                        }
                        e => {
                            // The outcome is unknown (a lost connection): release what
                            // may have been taken.
                            lock.taken_by_commit(sent);
                            Err(e.into())
                        }
                    }
                }
            }
        }
    }
}

impl Perform for Local<'_> {
    async fn perform(&mut self, work: Work) -> Result<Done> {
        let ports = Ports {
            agent: &self.agent,
            session: &self.session,
            cancel: &self.cancel,
            witness: &*self,
            live: &self.agent.runtime.live_calls,
            takeover: Takeover::AfterLease,
        };
        effects::perform(&ports, work).await
    }
}

impl Driver for Local<'_> {
    fn agent(&self) -> &Agent {
        &self.agent
    }

    fn session(&self) -> &str {
        &self.session
    }

    fn witness(&self) -> &dyn Witness {
        self
    }

    fn live(&self) -> &LiveCalls {
        &self.agent.runtime.live_calls
    }

    fn defers_results(&self) -> bool {
        self.agent.runtime.store.commit_takes_lock()
    }

    async fn checkpoint(&mut self) -> bool {
        self.lock.renew_if_due().await;
        self.cancel.is_cancelled()
    }

    fn commit(&mut self, checkpoint: Checkpoint) -> impl Future<Output = Result<()>> + Send {
        self.store(checkpoint)
    }

    async fn confirm(&mut self, run: &mut Run) -> Result<bool> {
        if !self.lock.is_held() {
            self.lock.acquire_now().await?;
        }
        self.sync(run).await
    }

    async fn children(&mut self, calls: Vec<ChildCall>) -> Result<Vec<ChildAnswer>> {
        let subagents = &self.agent.runtime.subagents;
        let serve = calls.into_iter().map(|call| {
            let cancel = self.cancel.child_token();
            async move {
                let Some(sub) = subagents.get(&call.tool_use.name) else {
                    return Err(AgentError::Internal(format!(
                        "`{}` is not a sub-agent",
                        call.tool_use.name
                    )));
                };
                sub.serve(call, cancel).await
            }
        });
        futures::future::join_all(serve).await.into_iter().collect()
    }

    async fn wait(&mut self, _requirements: &[Requirement]) -> Result<Option<Call>> {
        // The call ends at its pause; the next input is the next call.
        Ok(None)
    }

    async fn refused(&mut self, error: AgentError) -> Result<Option<Call>> {
        Err(error)
    }
}

/// The local driver's events go to the caller's listener; a long effect keeps the
/// session lock alive.
#[async_trait]
impl Witness for Local<'_> {
    fn listening(&self) -> bool {
        self.events.is_some()
    }

    fn send(&self, event: RunEvent) {
        if let Some(tx) = &self.events {
            let _ = tx.send(event);
        }
    }

    async fn progress(&self) {
        self.lock.renew_if_due().await;
    }

    fn wants_progress(&self) -> bool {
        self.lock.is_due()
    }

    fn progress_every(&self) -> Option<std::time::Duration> {
        Some(self.lock.renew_every())
    }
}
