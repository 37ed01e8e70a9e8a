//! The pure half of a refused input's late check: which of its decisions name
//! requirements that are no longer pending, so that the [`Step::Refuse`](super::Step::Refuse)
//! effect can look them up in the audit trail (a decision someone else already took
//! makes the refusal [`AgentError::AlreadyDecided`]; see docs/human-in-the-loop.md,
//! "A late second approver").

use super::{Call, Late, RunInput};
use crate::error::AgentError;

/// What a call's input named, before it is checked.
pub(crate) struct Named {
    named: Vec<(String, String, Option<String>)>,
    via: &'static str,
    actor: Option<crate::view::Actor>,
    view: Option<crate::view::ViewToken>,
    now: chrono::DateTime<chrono::Utc>,
}

/// The decisions `call`'s input makes, by requirement id (`None`: it names none —
/// `resume()`, a user message — and a refusal of it is never late).
pub(crate) fn late(call: &Call) -> Option<Named> {
    let (named, via): (Vec<_>, _) = match call.input() {
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
        RunInput::Resume => return None,
        RunInput::Message(m) => (
            m.tool_results_iter()
                .map(|r| (r.id.clone(), "tool_result".to_owned(), None))
                .collect(),
            "tool_results",
        ),
    };
    if named.is_empty() {
        return None;
    }
    Some(Named {
        named,
        via,
        actor: call.actor().cloned(),
        view: call.view().cloned(),
        now: call.now(),
    })
}

impl Named {
    /// What a refusal with `error` leaves to look up: the named requirements that are
    /// no longer pending (`None` when the error is not about what is pending).
    pub(crate) fn of(self, error: &AgentError) -> Option<Late> {
        let pending: Vec<String> = match error {
            AgentError::UnknownRequirement { pending, .. } => pending.clone(),
            AgentError::StaleView { pending, .. } => pending.iter().map(|r| r.id.clone()).collect(),
            AgentError::NothingToResume { .. } | AgentError::SessionBusy { .. } => Vec::new(),
            _ => return None,
        };
        let gone: Vec<String> = self
            .named
            .iter()
            .map(|(id, _, _)| id.clone())
            .filter(|id| !pending.contains(id))
            .collect();
        if gone.is_empty() {
            return None;
        }
        Some(Late {
            named: self.named,
            gone,
            via: self.via,
            actor: self.actor,
            view: self.view,
            now: self.now,
        })
    }
}

/// What a refusal of `call` with `error` leaves to look up in the audit trail (see
/// [`Late`]).
pub(crate) fn late_of(call: &Call, error: &AgentError) -> Option<Late> {
    late(call)?.of(error)
}
