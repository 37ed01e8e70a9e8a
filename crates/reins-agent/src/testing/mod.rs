//! Behaviour scenarios written once and run on every driver (feature `testing`).
//!
//! A scenario builds its agent ([`Scenario::agent`]) — the same configuration whatever
//! runs it — and checks what a caller sees through a [`SessionBackend`]
//! ([`Scenario::check`]): the local driver (an [`Agent`] is a backend) and
//! reins-restate's `RestateClient` (a Restate deployment whose service process runs
//! the scenario's agent) implement it, and both test suites instantiate every
//! scenario. The checks read the record (the store) and count tool runs in an outbox
//! file the agent's tool appends to, so they hold across processes.
//!
//! The consent table of issue #36 (each one fails when a driver drops the rule):
//!
//! | scenario | the agent | what must hold |
//! |---|---|---|
//! | [`Scenario::Quorum`] | `quorum("send_email", Quorum::of(2))` | one approval: still paused (1 of 2), 0 runs; the same approver again: `AlreadyApproved`; a second approver: 1 run |
//! | [`Scenario::PolicyDenies`] | an approval policy that denies `send_email` | rejected without a pause, nobody asked, 0 runs, audited `via: "policy"` |
//! | [`Scenario::ApprovalTtl`] | `approval_ttl("send_email", 1 s)` | the requirement expires 1 s after it was raised; an approval after that: `RequirementExpired`, still paused, 0 runs |
//! | [`Scenario::StandingGrant`] | a grant of `send_email` to `bob@example.com` in the store | runs without asking (audited `via: "grant"`); another address still asks |
//! | [`Scenario::OutputSpec`] | `output_spec(report)` | the `final_answer` tool is offered; the run ends with the structured answer |
//! | [`Scenario::CallOutput`] | – | a message submitted with an output spec of its own ([`Submission::output`]): the `final_answer` tool is offered and the run ends with the structured answer; the next message without one ends in plain text; a spec that is not a JSON Schema is refused (`InvalidInput`) and nothing changes |
//! | [`Scenario::PolicyRules`] | an approval and an eligibility policy ([`rules`]: hand-written, or Cedar through [`Scenario::agent_with_rules`]) | internal mail runs (audited with the policy id), `.invalid` mail is rejected, other mail asks and only a `mail-approver` may decide it |
//!
//! Sub-agents and tools that ask a question ([`Scenario::SubAgent`],
//! [`Scenario::AskingTool`]) are described in [`nested`].
//!
//! The features every driver runs (in [`features`](self#features)):
//!
//! | scenario | the agent | what must hold |
//! |---|---|---|
//! | [`Scenario::Hooks`] | a `PreActing` hook that blocks mail to `mallory@example.com` and writes every address in lower case | the blocked call is rejected (`rejected_by: hook`), 0 runs; the other runs once with the edited address (recorded as `executed_input`); the hook saw each call once |
//! | [`Scenario::HookEvents`] | a hook that watches `ActingChunk` and `Error`, and fails the model call of `fail` | an approved call that streams one chunk: the hook saw it once; a call whose `PreReasoning` hook fails: the `Error` hooks are told once, with the hook's error |
//! | [`Scenario::Compression`] | `context(ContextPolicy::new(700).compress_to(400))` | after a long conversation a summary is stored (a message marked `reins.summary`), and the model's last request carried fewer messages than the transcript |
//! | [`Scenario::Reconcile`] | `send_email` reconciles by looking for its own line in the outbox | a call whose ledger entry was started and never finished is put to the tool: one that took effect keeps its effect (0 new runs, `reconciled: happened`, audited `kind: reconcile`), one that did not runs once |
//! | [`Scenario::ForkReplay`] | – | a fork made before a finished call, sent the same message, is served the recorded result: no approval, 0 new runs, audited `replayed` |
//! | [`Scenario::Interrupt`] | – | an interrupt while an approved call runs: the tool's cancellation token fires, the call ends cancelled and never completes, the run ends `Cancelled` |
//! | [`Scenario::LateApprover`] | – | a second approver arriving while the first approval's run goes on (the call waits on a gate): refused `AlreadyDecided` naming the first approver, the refusal in the audit trail before the run ends; the call runs once |
//! | [`Scenario::IdempotencyKey`] | – | the same approval submitted twice with one idempotency key: the tool runs once; the second answer is the first's (a backend that keeps keys) or the refusal of a decision already taken (one that does not) |

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use reins_memory::{ArgCondition, Grant, MemoryStore};
use reins_message::{Msg, Role};
use reins_model::{ChatChunk, ChatModel, ChatRequest, ChatStream, FinishReason, ModelCapabilities};
use reins_tool::{ToolContext, ToolError, ToolPolicy, Toolkit};
use serde_json::{Value, json};

use crate::agent::Agent;
use crate::approval::{ApprovalPolicy, PolicyRequest, PolicyVerdict};
use crate::backend::{SessionBackend, Submission};
use crate::error::{AgentError, Result};
use crate::requirement::{Decision, Quorum};
use crate::run::{Phase, RunInput};
use crate::state::SessionView;
use crate::structured::{FINAL_ANSWER_TOOL, OutputSpec};
use crate::view::{Actor, DecisionRecord};

mod budget;
pub mod by_hand;
mod features;
mod observe;
mod output;
pub mod rules;

/// The tool every scenario's model calls (it needs a person's confirmation).
pub const TOOL: &str = "send_email";

/// How long a scenario waits for a session to settle.
const SETTLE: Duration = Duration::from_secs(30);

/// One behaviour, written once (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Two distinct approvers are needed.
    Quorum,
    /// The application's approval policy denies the tool.
    PolicyDenies,
    /// The tool's requirements expire after 1 s.
    ApprovalTtl,
    /// A standing grant allows the tool for one address.
    StandingGrant,
    /// Every run ends with a structured answer.
    OutputSpec,
    /// One message asks for a structured answer of its own.
    CallOutput,
    /// A sub-agent's pauses, interrupts and decisions (see [`nested`]).
    SubAgent,
    /// A tool asks a question mid-call (see [`nested`]).
    AskingTool,
    /// A hook blocks one call and edits another.
    Hooks,
    /// The hooks of a tool's partial output and of a failed call.
    HookEvents,
    /// A context budget the conversation outgrows.
    Compression,
    /// Calls whose ledger entries were started and never finished.
    Reconcile,
    /// A fork replays a finished call's recorded result.
    ForkReplay,
    /// One approval submitted twice with the same idempotency key.
    IdempotencyKey,
    /// An interrupt while an approved call runs.
    Interrupt,
    /// Rules as policies: which calls run, which are rejected, who may decide.
    PolicyRules,
    /// A budget of one tool call: extended once, then the run is ended at it.
    Budget,
    /// A second approver arrives while the first approval's run goes on.
    LateApprover,
}

impl Scenario {
    /// Every scenario.
    pub const ALL: [Scenario; 18] = [
        Scenario::Quorum,
        Scenario::PolicyDenies,
        Scenario::ApprovalTtl,
        Scenario::StandingGrant,
        Scenario::OutputSpec,
        Scenario::CallOutput,
        Scenario::SubAgent,
        Scenario::AskingTool,
        Scenario::Hooks,
        Scenario::HookEvents,
        Scenario::Compression,
        Scenario::Reconcile,
        Scenario::ForkReplay,
        Scenario::IdempotencyKey,
        Scenario::Interrupt,
        Scenario::PolicyRules,
        Scenario::Budget,
        Scenario::LateApprover,
    ];

    /// Its name (`quorum`, `policy_denies`, `approval_ttl`, `standing_grant`,
    /// `output_spec`, `call_output`, `subagent`, `asking_tool`, `hooks`, `hook_events`,
    /// `compression`, `reconcile`, `fork_replay`, `idempotency_key`, `interrupt`,
    /// `policy_rules`, `budget`, `late_approver`).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Quorum => "quorum",
            Scenario::PolicyDenies => "policy_denies",
            Scenario::ApprovalTtl => "approval_ttl",
            Scenario::StandingGrant => "standing_grant",
            Scenario::OutputSpec => "output_spec",
            Scenario::CallOutput => "call_output",
            Scenario::SubAgent => "subagent",
            Scenario::AskingTool => "asking_tool",
            Scenario::Hooks => "hooks",
            Scenario::HookEvents => "hook_events",
            Scenario::Compression => "compression",
            Scenario::Reconcile => "reconcile",
            Scenario::ForkReplay => "fork_replay",
            Scenario::IdempotencyKey => "idempotency_key",
            Scenario::Interrupt => "interrupt",
            Scenario::PolicyRules => "policy_rules",
            Scenario::Budget => "budget",
            Scenario::LateApprover => "late_approver",
        }
    }

    /// The scenario named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The scenario's agent on `store`: a rule-following model (`email ADDRESS` →
    /// one `send_email` call; `report` → the structured answer when it is asked for,
    /// else plain text; after tool results → `done`), the `send_email` tool (needs a
    /// confirmation; each run appends a line to `outbox`), and the scenario's setting.
    ///
    /// # Errors
    /// When the agent cannot be built.
    pub fn agent(self, store: Arc<dyn MemoryStore>, outbox: &Path) -> Result<Agent> {
        self.agent_with_rules(store, outbox, rules::ScenarioRules::default())
    }

    /// [`Scenario::agent`], with `rules` answering [`Scenario::PolicyRules`]'s questions
    /// (the other scenarios ignore them).
    ///
    /// # Errors
    /// When the agent cannot be built.
    pub fn agent_with_rules(
        self,
        store: Arc<dyn MemoryStore>,
        outbox: &Path,
        rules: rules::ScenarioRules,
    ) -> Result<Agent> {
        let b = Agent::builder()
            .name("ConsentAgent")
            .system_prompt("You send emails when asked.")
            .model(RuleModel)
            .toolkit(toolkit(outbox.to_path_buf())?)
            .store_arc(store.clone());
        let b = match self {
            Scenario::SubAgent => return nested::subagent(b, store, outbox),
            Scenario::AskingTool => return nested::asking(b, outbox),
            Scenario::Quorum => b.quorum(TOOL, Quorum::of(2)),
            Scenario::PolicyDenies => b.approval_policy(NoMail),
            Scenario::ApprovalTtl => b.approval_ttl(TOOL, Duration::from_secs(1)),
            Scenario::StandingGrant | Scenario::CallOutput => b,
            Scenario::OutputSpec => b.output_spec(report_spec()),
            Scenario::Hooks => b.hook(features::MailHook::new(outbox)),
            Scenario::HookEvents => b.hook(observe::Watcher::new(outbox)),
            Scenario::Compression => b.context(features::context_policy()),
            Scenario::PolicyRules => b
                .approval_policy(rules.approval)
                .eligibility_policy(rules.eligibility),
            Scenario::Budget => b.budget(budget::limit()),
            Scenario::Reconcile
            | Scenario::ForkReplay
            | Scenario::IdempotencyKey
            | Scenario::Interrupt
            | Scenario::LateApprover => b,
        };
        b.build()
    }

    /// Runs the scenario through `backend` (whose runs use [`Scenario::agent`] on
    /// `store`, with `outbox`), on a session of its own. `Err` says what did not hold.
    ///
    /// # Errors
    /// What did not hold, or what failed on the way.
    pub async fn check(
        self,
        backend: &dyn SessionBackend,
        store: &dyn MemoryStore,
        outbox: &Path,
    ) -> std::result::Result<(), String> {
        let on = On {
            backend,
            store,
            outbox,
        };
        let session = format!("{}-{}", self.name(), reins_message::new_id());
        match self {
            Scenario::Quorum => on.quorum(&session).await,
            Scenario::PolicyDenies => on.policy_denies(&session).await,
            Scenario::ApprovalTtl => on.approval_ttl(&session).await,
            Scenario::StandingGrant => on.standing_grant(&session).await,
            Scenario::OutputSpec => on.output_spec(&session).await,
            Scenario::CallOutput => on.call_output(&session).await,
            Scenario::SubAgent => on.subagent(&session).await,
            Scenario::AskingTool => on.asking_tool(&session).await,
            Scenario::Hooks => on.hooks(&session).await,
            Scenario::HookEvents => on.hook_events(&session).await,
            Scenario::Compression => on.compression(&session).await,
            Scenario::Reconcile => on.reconcile(&session).await,
            Scenario::ForkReplay => on.fork_replay(&session).await,
            Scenario::IdempotencyKey => on.idempotency_key(&session).await,
            Scenario::Interrupt => on.interrupt(&session).await,
            Scenario::PolicyRules => on.policy_rules(&session).await,
            Scenario::Budget => on.budget(&session).await,
            Scenario::LateApprover => on.late_approver(&session).await,
        }
        .map_err(|e| format!("scenario `{}` (session `{session}`): {e}", self.name()))
    }
}

/// The structured answer [`Scenario::OutputSpec`] asks for.
fn report_spec() -> OutputSpec {
    OutputSpec::new(
        "report",
        json!({
            "type": "object",
            "properties": {"report": {"type": "string"}},
            "required": ["report"],
            "additionalProperties": false
        }),
    )
}

/// Fails the check with a message when `cond` does not hold.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

struct On<'a> {
    backend: &'a dyn SessionBackend,
    store: &'a dyn MemoryStore,
    outbox: &'a Path,
}

impl On<'_> {
    /// Hands `session` an input as `principal` and waits until it settles (paused or
    /// ended). `Ok(Err(e))`: the input was refused.
    async fn submit(
        &self,
        session: &str,
        input: RunInput,
        principal: &str,
    ) -> std::result::Result<std::result::Result<SessionView, AgentError>, String> {
        self.submit_with(session, input, principal, None).await
    }

    /// [`On::submit`] with a structured answer of the caller's (`output`).
    async fn submit_with(
        &self,
        session: &str,
        input: RunInput,
        principal: &str,
        output: Option<OutputSpec>,
    ) -> std::result::Result<std::result::Result<SessionView, AgentError>, String> {
        self.submit_full(session, input, Actor::new(principal), output)
            .await
    }

    /// [`On::submit`] as `actor` (with its roles and metadata).
    async fn submit_as(
        &self,
        session: &str,
        input: RunInput,
        actor: Actor,
    ) -> std::result::Result<std::result::Result<SessionView, AgentError>, String> {
        self.submit_full(session, input, actor, None).await
    }

    /// [`On::submit`] as `actor`, with a structured answer of the caller's (`output`).
    async fn submit_full(
        &self,
        session: &str,
        input: RunInput,
        actor: Actor,
        output: Option<OutputSpec>,
    ) -> std::result::Result<std::result::Result<SessionView, AgentError>, String> {
        let before = match self.backend.view(session).await {
            Ok(v) => Some(v),
            Err(AgentError::Store(reins_memory::Error::SessionNotFound { .. })) => None,
            Err(e) => return Err(format!("reading the session failed: {e}")),
        };
        let submission = Submission {
            input,
            actor: Some(actor),
            view: before.as_ref().map(|v| v.token.clone()),
            idempotency_key: Some(reins_message::new_id()),
            client_tools: Vec::new(),
            output,
            budget: None,
            trace_parent: None,
        };
        if let Err(e) = self.backend.submit(session, submission).await {
            return Ok(Err(e));
        }
        let after = before.map_or(0, |v| v.version);
        self.settled_after(session, after).await.map(Ok)
    }

    /// Waits until `session` is past version `after` and settled (paused or ended).
    async fn settled_after(
        &self,
        session: &str,
        after: u64,
    ) -> std::result::Result<SessionView, String> {
        let start = std::time::Instant::now();
        loop {
            match self.backend.view(session).await {
                Ok(v)
                    if v.version > after
                        && !matches!(
                            v.phase,
                            Phase::Reasoning | Phase::Acting | Phase::Summarizing
                        ) =>
                {
                    return Ok(v);
                }
                Ok(_) | Err(AgentError::Store(reins_memory::Error::SessionNotFound { .. })) => {}
                Err(e) => return Err(format!("reading the session failed: {e}")),
            }
            if start.elapsed() > SETTLE {
                return Err(format!("the session did not settle within {SETTLE:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn send(
        &self,
        session: &str,
        text: &str,
        principal: &str,
    ) -> std::result::Result<SessionView, String> {
        self.submit(session, RunInput::Message(Msg::user(text)), principal)
            .await?
            .map_err(|e| format!("the message `{text}` was refused: {e}"))
    }

    async fn approve(
        &self,
        session: &str,
        id: &str,
        principal: &str,
    ) -> std::result::Result<std::result::Result<SessionView, AgentError>, String> {
        let d = Decision::approve(id).by(principal);
        self.submit(session, RunInput::Decisions(vec![d]), principal)
            .await
    }

    /// How many times the tool ran in `session`.
    fn runs(&self, session: &str) -> usize {
        let mark = format!(" {session}/");
        std::fs::read_to_string(self.outbox)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(TOOL) && l.contains(&mark))
            .count()
    }

    /// The session's audit trail.
    async fn trail(&self, session: &str) -> std::result::Result<Vec<DecisionRecord>, String> {
        let entries = self
            .store
            .decisions(session)
            .await
            .map_err(|e| format!("reading the audit trail failed: {e}"))?;
        entries
            .into_iter()
            .map(|e| serde_json::from_value(e.record).map_err(|e| format!("an audit record: {e}")))
            .collect()
    }

    async fn messages(&self, session: &str) -> std::result::Result<Vec<Msg>, String> {
        Ok(self
            .store
            .load_session(session)
            .await
            .map_err(|e| format!("reading the session failed: {e}"))?
            .messages)
    }

    async fn quorum(&self, session: &str) -> std::result::Result<(), String> {
        let v = self
            .send(session, "email carol@example.com", "alice")
            .await?;
        ensure!(v.paused, "the call must wait for people, got {:?}", v.phase);
        let r = v.requirements.first().ok_or("no requirement")?.clone();
        let needed = r.quorum.as_ref().map(|q| q.needed);
        ensure!(
            needed == Some(2),
            "the requirement must need 2 approvals, shows {needed:?}"
        );

        let v = self
            .approve(session, &r.id, "ana")
            .await?
            .map_err(|e| format!("the first approval was refused: {e}"))?;
        ensure!(
            v.paused,
            "one approval of two must leave the call paused, got {:?}",
            v.phase
        );
        let counted = v
            .requirements
            .first()
            .and_then(|r| r.quorum.as_ref())
            .map(|q| q.approvals.len());
        ensure!(
            counted == Some(1),
            "the requirement must show 1 approval, shows {counted:?}"
        );
        ensure!(
            self.runs(session) == 0,
            "nothing may run after one approval of two"
        );

        let again = self.approve(session, &r.id, "ana").await?;
        ensure!(
            matches!(again, Err(AgentError::AlreadyApproved { .. })),
            "the same approver twice must be refused as AlreadyApproved, got {again:?}"
        );
        ensure!(
            self.runs(session) == 0,
            "nothing may run after a repeated approval"
        );

        let v = self
            .approve(session, &r.id, "ben")
            .await?
            .map_err(|e| format!("the second approver was refused: {e}"))?;
        ensure!(
            !v.paused,
            "two approvals must clear the call, got {:?}",
            v.phase
        );
        ensure!(
            self.runs(session) == 1,
            "the tool must run once, ran {}",
            self.runs(session)
        );
        Ok(())
    }

    async fn policy_denies(&self, session: &str) -> std::result::Result<(), String> {
        let v = self
            .send(session, "email carol@example.com", "alice")
            .await?;
        ensure!(
            !v.paused && v.requirements.is_empty(),
            "the policy's denial must not ask anyone, got {:?} with {} requirement(s)",
            v.phase,
            v.requirements.len()
        );
        ensure!(self.runs(session) == 0, "a denied call must not run");
        let trail = self.trail(session).await?;
        ensure!(
            trail
                .iter()
                .any(|r| r.via == "policy" && r.decision == "reject" && r.tool_name == TOOL),
            "the audit trail must record the policy's rejection: {trail:?}"
        );
        let messages = self.messages(session).await?;
        let rejected = messages.iter().flat_map(|m| m.tool_results_iter()).any(|r| {
            matches!(&r.outcome, reins_message::ToolOutcome::Rejected { note: Some(n) } if n.contains("mail is off"))
        });
        ensure!(
            rejected,
            "the model must read the policy's note as a rejection"
        );
        Ok(())
    }

    async fn approval_ttl(&self, session: &str) -> std::result::Result<(), String> {
        let v = self
            .send(session, "email carol@example.com", "alice")
            .await?;
        ensure!(
            v.paused,
            "the call must wait for a person, got {:?}",
            v.phase
        );
        let r = v.requirements.first().ok_or("no requirement")?.clone();
        let Some(expires_at) = r.expires_at else {
            return Err("the requirement must expire (approval_ttl 1 s), it never does".into());
        };
        let ttl = expires_at - r.created_at;
        ensure!(
            ttl == chrono::Duration::seconds(1),
            "the requirement must live 1 s, lives {ttl}"
        );
        // Past the expiry (real time: the drivers read the clock).
        let wait = (expires_at - Utc::now())
            .to_std()
            .unwrap_or_default()
            .saturating_add(Duration::from_millis(300));
        tokio::time::sleep(wait).await;
        let late = self.approve(session, &r.id, "ana").await?;
        ensure!(
            matches!(late, Err(AgentError::RequirementExpired { .. })),
            "an approval after the expiry must be refused as RequirementExpired, got {late:?}"
        );
        ensure!(
            self.runs(session) == 0,
            "an expired approval must run nothing"
        );
        let v = self
            .backend
            .view(session)
            .await
            .map_err(|e| format!("reading the session failed: {e}"))?;
        ensure!(v.paused, "the session must stay paused, got {:?}", v.phase);
        Ok(())
    }

    async fn standing_grant(&self, session: &str) -> std::result::Result<(), String> {
        let mut grant = Grant::new(
            format!("grant-{}", reins_message::new_id()),
            TOOL,
            Utc::now(),
        );
        grant.session = Some(session.to_owned());
        grant.conditions = vec![ArgCondition::equals("/to", "bob@example.com")];
        self.store
            .create_grant(&grant)
            .await
            .map_err(|e| format!("creating the grant failed: {e}"))?;

        let v = self.send(session, "email bob@example.com", "alice").await?;
        ensure!(
            !v.paused,
            "a call the grant covers must run without asking, got {:?}",
            v.phase
        );
        ensure!(self.runs(session) == 1, "the granted call must run once");
        let trail = self.trail(session).await?;
        ensure!(
            trail
                .iter()
                .any(|r| r.via == "grant" && r.grant_id.as_deref() == Some(grant.id.as_str())),
            "the audit trail must name the grant: {trail:?}"
        );

        let v = self.send(session, "email eve@example.com", "alice").await?;
        ensure!(
            v.paused,
            "a call the grant does not cover must ask, got {:?}",
            v.phase
        );
        ensure!(self.runs(session) == 1, "the uncovered call must not run");
        Ok(())
    }
}

/// Denies every `send_email`.
struct NoMail;

#[async_trait]
impl ApprovalPolicy for NoMail {
    async fn decide(&self, request: PolicyRequest<'_>) -> PolicyVerdict {
        if request.tool == TOOL {
            PolicyVerdict::Deny {
                note: "outgoing mail is off for this team".to_owned(),
            }
        } else {
            PolicyVerdict::Ask
        }
    }
}

/// The scenarios' model: rules over the request's last message.
struct RuleModel;

#[async_trait]
impl ChatModel for RuleModel {
    fn model_name(&self) -> &str {
        "consent-rules"
    }

    fn capabilities(&self) -> ModelCapabilities {
        // A structured answer is asked for with a forced `final_answer` call.
        ModelCapabilities::new(false, true)
    }

    async fn stream(&self, request: ChatRequest) -> reins_model::Result<ChatStream> {
        let n = request.messages.len();
        let offered = request.tools.iter().any(|t| t.name == FINAL_ANSWER_TOOL);
        let call = |name: &str, args: Value| {
            vec![
                ChatChunk::ToolCallStart {
                    index: 0,
                    id: format!("call_{n}"),
                    name: name.to_owned(),
                },
                ChatChunk::ToolArgsDelta {
                    index: 0,
                    fragment: args.to_string(),
                },
                ChatChunk::Finish {
                    reason: FinishReason::ToolUse,
                },
            ]
        };
        let text = |t: &str| {
            vec![
                ChatChunk::TextDelta { text: t.to_owned() },
                ChatChunk::Finish {
                    reason: FinishReason::Stop,
                },
            ]
        };
        let chunks = match request.messages.last() {
            Some(m) if m.role == Role::Tool => text("done"),
            Some(m) if m.role == Role::User => {
                let t = m.text();
                if let Some(task) = t.strip_prefix("delegate twice ") {
                    let mut chunks = Vec::new();
                    for i in 0..2 {
                        chunks.push(ChatChunk::ToolCallStart {
                            index: i,
                            id: format!("call_{n}_{i}"),
                            name: nested::RESEARCH.to_owned(),
                        });
                        chunks.push(ChatChunk::ToolArgsDelta {
                            index: i,
                            fragment: json!({"task": task}).to_string(),
                        });
                    }
                    chunks.push(ChatChunk::Finish {
                        reason: FinishReason::ToolUse,
                    });
                    chunks
                } else if let Some(task) = t.strip_prefix("delegate ") {
                    call(nested::RESEARCH, json!({"task": task}))
                } else if t == "nap" {
                    call(nested::NAP, json!({}))
                } else if t == "slow" {
                    call(nested::SLOW, json!({}))
                } else if t == "greet" {
                    call(nested::ASKING, json!({}))
                } else {
                    match t.strip_prefix("email ") {
                        Some(to) => call(TOOL, json!({"to": to.trim(), "body": "hello"})),
                        None if t == "count" => text(&format!("seen {n}")),
                        None if t.starts_with("Conversation to summarize:") => {
                            text("summary: notes were taken")
                        }
                        None if t == "report" && offered => {
                            call(FINAL_ANSWER_TOOL, json!({"report": "all quiet"}))
                        }
                        None if t == "report" => text("all quiet"),
                        None => text("ok"),
                    }
                }
            }
            _ => text("ok"),
        };
        Ok(Box::pin(futures::stream::iter(chunks.into_iter().map(Ok))))
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EmailArgs {
    /// The address.
    to: String,
    /// The text.
    #[allow(dead_code)]
    body: String,
}

/// `send_email`: needs a confirmation; each run appends `send_email <session>/<call>
/// <to>` to the outbox (one `write`, so processes sharing the file never interleave);
/// asked to reconcile a call, it looks for that call's line.
fn toolkit(outbox: PathBuf) -> Result<Toolkit> {
    let reconcile_outbox = outbox.clone();
    let mut tools = Toolkit::new();
    tools
        .add(
            Toolkit::function(
                TOOL,
                "Send an email",
                move |a: EmailArgs, ctx: ToolContext| {
                    let outbox = outbox.clone();
                    async move {
                        use std::io::Write;
                        if a.to.starts_with("slow") {
                            features::slow_send(&outbox, &ctx).await?;
                        }
                        if a.to.starts_with("gate") {
                            features::gated_send(&outbox, &ctx).await?;
                        }
                        if a.to.starts_with("chunk") {
                            ctx.emit(format!("sending to {}", a.to));
                        }
                        let line =
                            format!("{TOOL} {}/{} {}\n", ctx.session_id, ctx.tool_use_id, a.to);
                        std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&outbox)
                            .and_then(|mut f| f.write_all(line.as_bytes()))
                            .map_err(|e| ToolError::Failed(format!("the outbox: {e}")))?;
                        Ok::<_, ToolError>(format!("sent to {}", a.to))
                    }
                },
            )
            .policy(ToolPolicy::confirm().reason("sends an email"))
            .reconcile(move |ctx: ToolContext| {
                let outbox = reconcile_outbox.clone();
                async move { Ok(features::sent_before(&outbox, &ctx)) }
            }),
        )
        .map_err(|e| AgentError::InvalidInput(e.to_string()))?;
    Ok(tools)
}

pub mod nested;
