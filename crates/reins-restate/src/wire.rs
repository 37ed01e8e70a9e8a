//! What travels between a caller, Restate's ingress and the session object: the
//! inputs a turn starts or goes on with, what `submit` answers, and the refusals (the
//! same errors the local driver raises, as JSON).

use chrono::{DateTime, Utc};
use reins_agent::run::Call;
use reins_agent::{
    Actor, Agent, AgentError, Decided, Decision, OutputSpec, QuorumCount, Requirement, RunInput,
    ViewToken,
};
use reins_message::{Msg, ToolSpec};
use serde::{Deserialize, Serialize};

/// What a caller hands a session: the three inputs of [`RunInput`], as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TurnInput {
    /// A new message: user text (which rejects pending calls), or tool results.
    Message {
        /// The message.
        message: Msg,
    },
    /// Approve every pending confirmation, or go on after a stop.
    Resume,
    /// Answers to pending requirements.
    Decisions {
        /// The answers.
        decisions: Vec<Decision>,
    },
    /// A user message given as its text only (handy from `curl`); the session object
    /// turns it into a [`TurnInput::Message`] when it takes it.
    Text {
        /// The text.
        text: String,
    },
}

impl TurnInput {
    /// The input with a [`TurnInput::Text`] made a user message (a fresh id and time).
    #[must_use]
    pub fn normalized(self) -> Self {
        match self {
            Self::Text { text } => Self::Message {
                message: Msg::user(text),
            },
            other => other,
        }
    }

    /// The run's input.
    pub fn into_run_input(self) -> RunInput {
        match self {
            Self::Message { message } => RunInput::Message(message),
            Self::Text { text } => RunInput::Message(Msg::user(text)),
            Self::Resume => RunInput::Resume,
            Self::Decisions { decisions } => RunInput::Decisions(decisions),
        }
    }

    /// The first requirement a decision names, if any.
    pub(crate) fn first_decided(&self) -> Option<&str> {
        match self {
            Self::Decisions { decisions } => decisions.first().map(|d| d.id()),
            _ => None,
        }
    }
}

/// One input for a session, with who gives it and the view it was decided on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRequest {
    /// The input.
    pub input: TurnInput,
    /// Who acts (recorded with every decision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<Actor>,
    /// The view the caller acts on: a different one is refused
    /// ([`AgentError::StaleView`]) and nothing changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<ViewToken>,
    /// The caller's own tools for the turn this input starts (AG-UI's client tools):
    /// offered to the model beside the toolkit's and always external — a call of one
    /// pauses the run with an `External` requirement, answered with the tool's result
    /// (an `external_result` decision). An input that wakes a paused turn keeps the
    /// tools that turn started with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_tools: Vec<ToolSpec>,
    /// The structured answer the run this message starts must end with, instead of
    /// the agent's (`final_answer` offered, or the model's JSON Schema format); an
    /// input that wakes a paused turn keeps the spec its run started with. A spec that
    /// cannot be asked for is refused `invalid_input`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputSpec>,
    /// The session's own budget limit, set as the run this message starts begins
    /// (stored with the session, over the agent's default); ignored for other inputs.
    /// An invalid limit is refused `invalid_budget`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<reins_agent::budget::Budget>,
    /// The caller's W3C `traceparent`: the parent of the `invoke_agent` span of the
    /// turn this input starts (or wakes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
}

impl TurnRequest {
    /// A user message.
    pub fn message(message: Msg) -> Self {
        Self::new(TurnInput::Message { message })
    }

    /// Decisions about pending requirements.
    pub fn decisions(decisions: Vec<Decision>) -> Self {
        Self::new(TurnInput::Decisions { decisions })
    }

    /// Approve everything pending (or go on after a stop).
    pub fn resume() -> Self {
        Self::new(TurnInput::Resume)
    }

    /// An input with no actor and no view.
    pub fn new(input: TurnInput) -> Self {
        Self {
            input,
            actor: None,
            view: None,
            client_tools: Vec::new(),
            output: None,
            budget: None,
            trace_parent: None,
        }
    }

    /// Who acts.
    #[must_use]
    pub fn by(mut self, actor: Actor) -> Self {
        self.actor = Some(actor);
        self
    }

    /// Acts on exactly this view.
    #[must_use]
    pub fn at(mut self, view: ViewToken) -> Self {
        self.view = Some(view);
        self
    }

    /// Offers the model these tools of the caller's for the turn (see
    /// [`TurnRequest::client_tools`]).
    #[must_use]
    pub fn with_client_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.client_tools = tools;
        self
    }

    /// The run this message starts must end with a structured answer of this shape
    /// (see [`TurnRequest::output`]).
    #[must_use]
    pub fn with_output(mut self, spec: OutputSpec) -> Self {
        self.output = Some(spec);
        self
    }

    /// The session's own budget limit (see [`TurnRequest::budget`]).
    #[must_use]
    pub fn with_budget(mut self, limit: reins_agent::budget::Budget) -> Self {
        self.budget = Some(limit);
        self
    }

    /// The call this request starts on `session` at `now`: `agent`'s own
    /// ([`Agent::begin`], every rule of the agent) with the caller's part — who acts,
    /// the view, the structured answer, the session's own budget (for a message).
    pub(crate) fn call(&self, agent: &Agent, session: &str, now: DateTime<Utc>) -> Call {
        let mut call = agent
            .begin(session.to_owned(), self.input.clone().into_run_input(), now)
            .with_actor(self.actor.clone())
            .with_view(self.view.clone());
        if let Some(spec) = &self.output {
            call = call.with_output(spec.clone());
        }
        if let (Some(limit), TurnInput::Message { .. }) = (self.budget, &self.input) {
            call = call.with_budget(limit);
        }
        call
    }
}

/// How `submit` delivered an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// No turn was running: a new turn invocation was started with the input.
    Started,
    /// The session's turn was waiting (paused): its awakeable was resolved with the
    /// input and the same invocation goes on.
    Resumed,
}

/// What `submit` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    /// How the input was delivered.
    pub delivery: Delivery,
    /// The stored version the input was validated against: the turn's first commit
    /// moves past it (wait with [`RestateClient::wait_settled`](crate::RestateClient::wait_settled)).
    pub version: u64,
}

/// What `interrupt` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interrupted {
    /// A turn was in progress and was asked to stop (its invocation cancelled; its
    /// stream or tool stopped at once when it runs in the process that took the
    /// interrupt).
    pub requested: bool,
}

/// A refused request as the service sends it (inside the terminal error's message) and
/// the client reads it back: the local driver's error, with the code reins-server uses
/// for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refused {
    /// `not_found`, `not_paused`, `unknown_requirement`, `stale_view`, `busy`,
    /// `already_decided`, `already_approved`, `not_eligible`, `invalid_decision`,
    /// `expired`, `invalid_input`, `invalid_budget` or `internal` (the codes reins-server answers with).
    pub code: String,
    /// A sentence for a person.
    pub message: String,
    /// The session.
    pub session: String,
    /// For `unknown_requirement` and `already_decided`: the id given; for `busy`: the
    /// call in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// For `stale_view`: the ids the caller was shown; for `unknown_requirement`: the
    /// ids pending.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<String>,
    /// For `stale_view`: what the session waits for now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<Requirement>,
    /// For `already_decided`: the decision that took effect (who, what, when, how).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<Decided>,
    /// For `expired`: when the requirement expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_at: Option<chrono::DateTime<chrono::Utc>>,
    /// For `already_approved`: who approved again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// For `already_approved`: the quorum's approvals so far and approvals needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<QuorumCount>,
    /// For `not_eligible`: why the approval cannot count; for `invalid_budget`: what is
    /// wrong with the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Refused {
    /// The HTTP status reins-server answers this refusal with (Restate carries it as
    /// the terminal error's code).
    pub fn status(&self) -> u16 {
        match self.code.as_str() {
            "not_eligible" => 403,
            "not_found" | "unknown_requirement" => 404,
            "not_paused" | "stale_view" | "busy" | "already_decided" | "already_approved" => 409,
            "invalid_decision" | "expired" | "invalid_input" => 422,
            _ => 500,
        }
    }

    /// The refusal of `error` on `session`.
    pub fn of(session: &str, error: &AgentError) -> Self {
        let mut r = Self {
            code: String::new(),
            message: error.to_string(),
            session: session.to_owned(),
            id: None,
            ids: Vec::new(),
            pending: Vec::new(),
            decided: None,
            expired_at: None,
            by: None,
            quorum: None,
            reason: None,
        };
        r.code = match error {
            AgentError::SessionBusy { .. } => "busy",
            AgentError::ToolInFlight { id, .. } => {
                r.id = Some(id.clone());
                "busy"
            }
            AgentError::NothingToResume { .. } => "not_paused",
            AgentError::UnknownRequirement { id, pending } => {
                r.id = Some(id.clone());
                r.ids.clone_from(pending);
                "unknown_requirement"
            }
            AgentError::StaleView { seen, pending } => {
                r.ids.clone_from(seen);
                r.pending.clone_from(pending);
                "stale_view"
            }
            AgentError::WrongDecision { .. } | AgentError::DuplicateDecision { .. } => {
                "invalid_decision"
            }
            AgentError::AlreadyDecided { id, decided } => {
                r.id = Some(id.clone());
                r.decided = Some((**decided).clone());
                "already_decided"
            }
            AgentError::RequirementExpired { id, expired_at } => {
                r.id = Some(id.clone());
                r.expired_at = Some(*expired_at);
                "expired"
            }
            AgentError::AlreadyApproved {
                id,
                by,
                needed,
                count,
            } => {
                r.id = Some(id.clone());
                r.by = Some(by.clone());
                r.quorum = Some(QuorumCount {
                    approvals: *count,
                    needed: *needed,
                });
                "already_approved"
            }
            AgentError::NotEligible { id, reason } => {
                r.id = Some(id.clone());
                r.reason = Some(reason.clone());
                "not_eligible"
            }
            AgentError::InvalidInput(_) => "invalid_input",
            AgentError::InvalidBudget { reason } => {
                r.reason = Some(reason.clone());
                "invalid_budget"
            }
            AgentError::Store(reins_memory::Error::SessionNotFound { .. }) => "not_found",
            _ => "internal",
        }
        .to_owned();
        r
    }

    /// The local driver's error this refusal stands for, when it is one of the errors
    /// a caller acts on (`None` for the others: read [`Refused::message`]).
    pub fn to_agent_error(&self) -> Option<AgentError> {
        Some(match self.code.as_str() {
            "busy" => AgentError::SessionBusy {
                session: self.session.clone(),
            },
            "not_paused" => AgentError::NothingToResume {
                session: self.session.clone(),
            },
            "unknown_requirement" => AgentError::UnknownRequirement {
                id: self.id.clone().unwrap_or_default(),
                pending: self.ids.clone(),
            },
            "stale_view" => AgentError::StaleView {
                seen: self.ids.clone(),
                pending: self.pending.clone(),
            },
            "not_found" => AgentError::Store(reins_memory::Error::SessionNotFound {
                id: self.session.clone(),
            }),
            "invalid_input" => AgentError::InvalidInput(self.message.clone()),
            "invalid_budget" => AgentError::InvalidBudget {
                reason: self.reason.clone().unwrap_or_else(|| self.message.clone()),
            },
            "already_decided" => AgentError::AlreadyDecided {
                id: self.id.clone().unwrap_or_default(),
                decided: Box::new(self.decided.clone()?),
            },
            "expired" => AgentError::RequirementExpired {
                id: self.id.clone().unwrap_or_default(),
                expired_at: self.expired_at?,
            },
            "already_approved" => {
                let q = self.quorum?;
                AgentError::AlreadyApproved {
                    id: self.id.clone().unwrap_or_default(),
                    by: self.by.clone().unwrap_or_default(),
                    needed: q.needed,
                    count: q.approvals,
                }
            }
            "not_eligible" => AgentError::NotEligible {
                id: self.id.clone().unwrap_or_default(),
                reason: self.reason.clone()?,
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_round_trips_to_the_same_agent_error() {
        let e = AgentError::UnknownRequirement {
            id: "call_9".into(),
            pending: vec!["call_1".into()],
        };
        let r = Refused::of("s1", &e);
        assert_eq!(r.status(), 404);
        let json = serde_json::to_string(&r).unwrap();
        let back: Refused = serde_json::from_str(&json).unwrap();
        let again = back.to_agent_error().unwrap();
        assert_eq!(again.to_string(), e.to_string());
    }

    #[test]
    fn consent_refusals_round_trip_with_reins_servers_codes() {
        let cases = [
            (
                AgentError::RequirementExpired {
                    id: "call_1".into(),
                    expired_at: chrono::Utc::now(),
                },
                "expired",
                422,
            ),
            (
                AgentError::AlreadyApproved {
                    id: "call_1".into(),
                    by: "ana".into(),
                    needed: 2,
                    count: 1,
                },
                "already_approved",
                409,
            ),
            (
                AgentError::NotEligible {
                    id: "call_1".into(),
                    reason: "only approvers with one of the roles finance count".into(),
                },
                "not_eligible",
                403,
            ),
        ];
        for (e, code, status) in cases {
            let r = Refused::of("s1", &e);
            assert_eq!((r.code.as_str(), r.status()), (code, status));
            let back: Refused = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
            assert_eq!(back.to_agent_error().unwrap().to_string(), e.to_string());
        }
    }

    #[test]
    fn inputs_have_a_tagged_json_form() {
        let r = TurnRequest::resume();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v, serde_json::json!({"input": {"type": "resume"}}));
        let back: TurnRequest = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }
}
