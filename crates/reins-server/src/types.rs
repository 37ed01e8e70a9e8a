//! The JSON bodies of the API (their schemas are in `/v1/openapi.json`).
//!
//! Transcript messages, requirements and run outputs are reins-agent's own serde
//! formats (documented in `docs/human-in-the-loop.md`); they appear here as objects.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// `POST /v1/sessions/{id}/runs`: a new user message.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// The user's message.
    pub message: String,
    /// The session's own budget limit, set as this run starts: stored with the
    /// session (over the agent's default) and in force for its later runs until a
    /// person extends it or another run sets one; a limit left out keeps the agent's
    /// default. A limit that cannot be accepted is 422 `invalid_budget` and nothing is
    /// stored; a caller without the admin role may not set a limit above the agent's
    /// default (403 `forbidden`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BudgetLimit>)]
    pub budget: Option<serde_json::Value>,
}

/// Limits on what a session may spend; a limit left out does not apply (see
/// docs/human-in-the-loop.md, "Budgets").
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetLimit {
    /// Model tokens (input and output, of every model call and summary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Cost, in the unit of the agent's price table (needs a price for its model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Tool calls started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// Seconds the session's runs were active (time paused or idle is not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_secs: Option<u64>,
}

/// `?stream=true` answers with Server-Sent Events instead of the final output.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Stream the run's events (SSE) instead of waiting for its output.
    #[serde(default)]
    pub stream: bool,
}

/// How a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// No run in progress.
    Idle,
    /// A run is in progress (on this instance or another one).
    Running,
    /// Waiting for decisions (or for `resume`).
    Paused,
}

/// `GET /v1/sessions/{id}`: the session as stored.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = SessionView)]
pub struct SessionDetail {
    /// The session id.
    pub session_id: String,
    /// The stored version (moves with every committed step).
    pub version: u64,
    /// Idle, running or paused.
    pub status: SessionStatus,
    /// Whether the session waits for decisions.
    pub paused: bool,
    /// The pending requirements (reins-agent's `Requirement` JSON).
    #[schema(value_type = Vec<Object>)]
    pub requirements: Vec<Value>,
    /// Pass this back with decisions: they are refused (409 `stale_view`) when what
    /// is pending changed since this view was read.
    pub view_token: String,
    /// The transcript, oldest first (reins-message's `Msg` JSON).
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Value>,
    /// When the session was last written.
    pub updated_at: DateTime<Utc>,
}

/// What to do with a requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Run the tool (optionally with `edited_args`).
    Approve,
    /// Do not run it (optionally with a `note` for the model).
    Reject,
    /// Supply the `values` a user-input requirement asks for.
    Input,
    /// Hand back the `output` of an externally executed tool.
    ExternalResult,
}

/// One decision.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionItem {
    /// The requirement (= tool use) id.
    pub requirement_id: String,
    /// What to do.
    pub action: Action,
    /// `approve` only: the arguments to run the tool with instead of the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub edited_args: Option<Value>,
    /// `reject` only: why, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// `input` only: the values (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub values: Option<Value>,
    /// `external_result` only: the tool's output (a string or any JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    /// `external_result` only: whether the execution failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// `approve` and `input`: the `fingerprint` of the arguments the approver was shown
    /// (from the inbox item or the session's requirement). When given, the decision is
    /// refused (409 `fingerprint_mismatch`) unless the requirement still shows exactly
    /// those arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown_fingerprint: Option<String>,
}

/// `POST /v1/sessions/{id}/decisions`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionsRequest {
    /// The `view_token` of the session view the decisions were made on. Without it
    /// the decisions apply to whatever is pending (they still name requirement ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view_token: Option<String>,
    /// One decision per requirement answered; the others stay pending.
    pub decisions: Vec<DecisionItem>,
}

/// `GET /v1/sessions/{id}/decisions`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DecisionsList {
    /// The session id.
    pub session_id: String,
    /// Oldest first: reins-agent's `DecisionRecord` JSON (`seq`, `at`,
    /// `requirement_id`, `tool_name`, `kind`, `decision`, `via`, `verdict`, `actor`,
    /// `shown_input`, `executed_input`, `note`, `view`).
    #[schema(value_type = Vec<Object>)]
    pub decisions: Vec<Value>,
}

/// `GET /v1/requirements` query.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InboxQuery {
    /// Only `pending` is supported (the default).
    #[serde(default)]
    pub status: Option<String>,
    /// Page size, 1–200 (default 50).
    #[serde(default)]
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// `me`: only the requirements the caller was notified of (mailed, escalated to).
    #[serde(default)]
    pub assigned: Option<String>,
}

/// One pending requirement in the inbox.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InboxItem {
    /// The session it belongs to.
    pub session_id: String,
    /// The requirement (= tool use) id.
    pub requirement_id: String,
    /// The tool's name.
    pub tool: String,
    /// The arguments as the model made them.
    #[schema(value_type = Object)]
    pub arguments: Value,
    /// `confirmation`, `user_input` or `external`.
    pub kind: String,
    /// For `user_input`: a JSON Schema of the values to supply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub fields: Option<Value>,
    /// Why the run waits, for the person deciding.
    pub reason: String,
    /// When the run paused for it.
    pub created_at: DateTime<Utc>,
    /// After this, decisions are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// The tool's argument schema (to validate edits before sending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub tool_schema: Option<Value>,
    /// The fingerprint of `arguments`: send it back as the decision's
    /// `shown_fingerprint` to bind an approval to what was shown.
    pub fingerprint: String,
    /// The session's view token (pass it back with the decision).
    pub view_token: String,
    /// When the tool needs approvals from several people: how many, and who approved
    /// so far (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<QuorumView>,
    /// Who was told that it waits, through which channel, and where each delivery
    /// stands (the outbox's deliveries of its notices, oldest first).
    #[serde(default)]
    pub notified: Vec<Notified>,
}

/// A `changed` event of the inbox stream (`GET /v1/events`): which session changed
/// and, when the store told it, what the session holds now — its stored version,
/// whether it waits for a decision, and the requirements still open — so that a
/// client need not read the session again to know whether its list moved. Only
/// `session_id` is sure to be there: a run that started or ended on this instance
/// names its session alone, a session no longer stored comes with `removed`, and
/// `session_id: null` means any session may have changed (the store could not be
/// read, or the stream fell behind): read again what you show.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InboxChange {
    /// The session that changed (`null`: any may have).
    pub session_id: Option<String>,
    /// Its stored version now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// When it was last committed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<DateTime<Utc>>,
    /// How many messages it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_count: Option<u64>,
    /// Whether it waits for a decision (some requirement is open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<bool>,
    /// The requirements waiting for a decision, oldest first (the full items, with
    /// arguments and view token, are in `GET /v1/requirements`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_requirements: Option<Vec<OpenRequirementView>>,
    /// The session is no longer stored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

/// A requirement still open, as an [`InboxChange`] names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OpenRequirementView {
    /// The requirement (= tool use) id.
    pub requirement_id: String,
    /// `confirmation`, `user_input` or `external`.
    pub kind: String,
    /// The tool it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// When the run paused for it.
    pub created_at: DateTime<Utc>,
    /// After this, decisions are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

impl InboxChange {
    /// Any session may have changed.
    pub(crate) fn unknown() -> Self {
        Self::named(None)
    }

    /// Session `id` changed; nothing more is known.
    pub(crate) fn named(id: Option<String>) -> Self {
        Self {
            session_id: id,
            ..Self::default()
        }
    }

    /// What the port's subscription said of a session.
    pub(crate) fn of(change: &reins_agent::port::SessionChange) -> Self {
        Self {
            session_id: Some(change.session.clone()),
            version: Some(change.version),
            updated_at: Some(change.updated_at),
            message_count: Some(change.message_count),
            waiting: Some(change.is_waiting()),
            open_requirements: Some(
                change
                    .open_requirements
                    .iter()
                    .map(|r| OpenRequirementView {
                        requirement_id: r.id.clone(),
                        kind: r.kind.clone(),
                        tool: r.tool.clone(),
                        created_at: r.created_at,
                        expires_at: r.expires_at,
                    })
                    .collect(),
            ),
            removed: false,
        }
    }

    /// Session `id` is no longer stored.
    pub(crate) fn removed(id: String) -> Self {
        Self {
            removed: true,
            ..Self::named(Some(id))
        }
    }
}

/// One delivery of a notice about a waiting requirement
/// ([`InboxItem::notified`]).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Notified {
    /// The channel (`email`, `slack`, `terminal`, `webhook:<id>`, …).
    pub channel: String,
    /// The notice: `requirement.waiting`, `requirement.escalated`, ….
    pub notice: String,
    /// Whom it reaches: the principals an email goes to, a Slack channel; the
    /// notice's principals for other channels.
    pub to: Vec<String>,
    /// `pending`, `delivered` or `dead`.
    pub state: String,
    /// Attempts so far.
    pub attempts: u32,
    /// When the delivery last changed.
    pub at: DateTime<Utc>,
    /// The last attempt's error, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /v1/requirements`: one page, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InboxPage {
    /// The requirements.
    pub items: Vec<InboxItem>,
    /// Pass as `cursor` for the next page (absent on the last page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `GET /v1/sessions` query: every filter is optional; they combine with AND.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SessionsQuery {
    /// `paused`, `running` or `idle`, or several separated by commas.
    #[serde(default)]
    pub status: Option<String>,
    /// Only the sessions this principal owns (a `user`: the sessions under its prefix).
    #[serde(default)]
    pub principal: Option<String>,
    /// Only the sessions with a pending call to this tool.
    #[serde(default)]
    pub tool: Option<String>,
    /// Page size, 1–200 (default 50).
    #[serde(default)]
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// One session in `GET /v1/sessions`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionRow {
    /// The session id.
    pub id: String,
    /// Idle, running or paused: the same status as `GET /v1/sessions/{id}` shows.
    pub status: SessionStatus,
    /// The principal that owns it (the `user` whose prefix its id starts with), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The tools of its pending calls, sorted, without repeats (empty unless paused).
    pub pending_tools: Vec<String>,
    /// How many requirements wait for a decision.
    pub pending_count: usize,
    /// The stored version.
    pub version: u64,
    /// How many messages its transcript holds.
    pub message_count: u64,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was last written (the list is ordered by it, newest first).
    pub updated_at: DateTime<Utc>,
}

/// `GET /v1/sessions`: one page, newest activity first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionsPage {
    /// The sessions.
    pub sessions: Vec<SessionRow>,
    /// Pass as `cursor` for the next page (absent on the last page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `POST /v1/sessions/{id}/interrupt`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InterruptAnswer {
    /// The session id.
    pub session_id: String,
    /// `local` (the run executes on this instance and was told at once) or `stored`
    /// (a cancel request was stored; the instance running it stops at its next
    /// checkpoint).
    pub delivered: String,
}

/// `GET /healthz`, `GET /readyz`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, or what is wrong.
    pub status: String,
}

/// `GET /v1/me`: who the token belongs to.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Me {
    /// The principal.
    pub principal: crate::auth::Principal,
    /// The session prefix it owns as a `user`.
    pub session_prefix: String,
}

/// `POST /v1/sessions/{id}/fork`: where to fork and into which id. Give exactly one
/// of `before_turn` and `messages`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// The new session's id (a user must own it too).
    pub new_session_id: String,
    /// Fork just before the user message of this turn (0-based; see `/turns`).
    #[serde(default)]
    pub before_turn: Option<usize>,
    /// Fork after this many messages (every tool use among them must have its result).
    #[serde(default)]
    pub messages: Option<usize>,
    /// Run every call again instead of serving the original's recorded results (each
    /// asks for approval where its tool's policy says so).
    #[serde(default)]
    pub rerun_side_effects: bool,
}

/// The answer to a fork: the new session and where it came from.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ForkAnswer {
    /// The new session's id.
    pub session_id: String,
    /// The session it was forked from.
    pub source: String,
    /// How many of the source's messages it kept.
    pub at: usize,
    /// How many of the source's finished calls it may serve from the record.
    pub recorded_calls: usize,
}

/// `GET /v1/sessions/{id}/turns`: the session's turns and, for a fork, its origin.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TurnsList {
    /// The session id.
    pub session_id: String,
    /// Its turns, oldest first (reins-agent's `Turn` JSON).
    #[schema(value_type = Vec<Object>)]
    pub turns: Vec<Value>,
    /// Where it was forked from (reins-agent's `ForkOrigin` JSON), when it is a fork.
    #[schema(value_type = Option<Object>)]
    pub forked_from: Option<Value>,
}

/// `GET /v1/grants` query: each given field must equal the grant's.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GrantsQuery {
    /// Only grants scoped to this session.
    pub session: Option<String>,
    /// Only grants scoped to this principal.
    pub principal: Option<String>,
    /// Only grants of this tool.
    pub tool: Option<String>,
    /// Revoked grants too (default false).
    pub include_revoked: Option<bool>,
}

/// One condition on a call's arguments: the value at `pointer` (a JSON pointer into the
/// arguments) compared by `op` (`equals`, `one_of`, `starts_with`, `ends_with`) with
/// `value`. For `one_of`, `starts_with` and `ends_with` an array argument holds when
/// every element does.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GrantCondition {
    /// A JSON pointer (`/to`, `/items/0/sku`; empty: the whole arguments).
    pub pointer: String,
    /// `equals`, `one_of`, `starts_with` or `ends_with`.
    pub op: String,
    /// What to compare with (an array for `one_of`, a string for the others but `equals`).
    #[schema(value_type = Object)]
    pub value: Value,
}

/// `POST /v1/grants` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewGrantRequest {
    /// The tool the grant allows.
    pub tool: String,
    /// Only for sessions acting for this principal.
    #[serde(default)]
    pub principal: Option<String>,
    /// Only in this session.
    #[serde(default)]
    pub session: Option<String>,
    /// Conditions on the arguments, all of which must hold.
    #[serde(default)]
    #[schema(value_type = Vec<GrantCondition>)]
    pub conditions: Vec<reins_memory::ArgCondition>,
    /// Lifetime in seconds from now (or give `expires_at`; neither: until revoked).
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    /// When it stops matching.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    /// Why, for the audit trail.
    #[serde(default)]
    pub note: Option<String>,
}

/// A standing grant as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GrantObject {
    /// Its id.
    pub id: String,
    /// The tool.
    pub tool: String,
    /// `allow` (calls run without asking) or `deny` (a standing rejection: calls are
    /// rejected without asking).
    pub effect: String,
    /// The principal it is scoped to (null: any).
    pub principal: Option<String>,
    /// The session it is scoped to (null: any).
    pub session: Option<String>,
    /// Conditions on the arguments.
    #[schema(value_type = Vec<GrantCondition>)]
    pub conditions: Vec<reins_memory::ArgCondition>,
    /// When it stops matching (null: never).
    pub expires_at: Option<DateTime<Utc>>,
    /// Why it was given.
    pub note: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// Who created it.
    pub created_by: Option<String>,
    /// When it was revoked.
    pub revoked_at: Option<DateTime<Utc>>,
    /// Who revoked it.
    pub revoked_by: Option<String>,
    /// `live`, `expired` or `revoked`, when the answer was made.
    pub state: String,
}

impl GrantObject {
    /// The API form of `g` at `now`.
    pub fn of(g: reins_memory::Grant, now: DateTime<Utc>) -> Self {
        let state = if g.is_revoked() {
            "revoked"
        } else if g.is_expired(now) {
            "expired"
        } else {
            "live"
        };
        Self {
            id: g.id,
            tool: g.tool,
            effect: match g.effect {
                reins_memory::GrantEffect::Deny => "deny",
                reins_memory::GrantEffect::Allow => "allow",
            }
            .to_owned(),
            principal: g.principal,
            session: g.session,
            conditions: g.conditions,
            expires_at: g.expires_at,
            note: g.note,
            created_at: g.created_at,
            created_by: g.created_by,
            revoked_at: g.revoked_at,
            revoked_by: g.revoked_by,
            state: state.to_owned(),
        }
    }
}

/// `GET /v1/grants`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GrantsList {
    /// The grants, oldest first.
    pub grants: Vec<GrantObject>,
}

/// Where a quorum stands on a requirement: approvals needed, the roles that count
/// (empty: any), and the approvals so far.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QuorumView {
    /// Approvals needed from distinct approvers.
    pub needed: u32,
    /// Roles that count (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// The approvals so far, oldest first.
    pub approvals: Vec<QuorumApproval>,
}

/// One approval counted towards a quorum.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QuorumApproval {
    /// Who approved.
    pub by: String,
    /// When.
    pub at: DateTime<Utc>,
}

impl From<&reins_agent::QuorumState> for QuorumView {
    fn from(q: &reins_agent::QuorumState) -> Self {
        Self {
            needed: q.needed,
            roles: q.roles.clone(),
            approvals: q
                .approvals
                .iter()
                .map(|a| QuorumApproval {
                    by: a.by.clone(),
                    at: a.at,
                })
                .collect(),
        }
    }
}
