//! [`Commit`]: one atomic change to a session.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reins_message::Msg;
use serde_json::Value;

use crate::RunStateData;
use crate::error::{Error, Result};
use crate::store::{DecisionEntry, RequirementRecord, SessionState};

/// One atomic change to a session, applied by [`MemoryStore::commit`](crate::MemoryStore::commit)
/// in a single transaction. Its parts apply in this order:
///
/// 1. `remove` (every id must exist, else [`Error::MessageNotFound`]);
/// 2. `replace` (rewrites messages in place by id, keeping their position);
/// 3. `append` (in order; an id the session already holds is [`Error::DuplicateMessage`]);
/// 4. `clear_requirements`;
/// 5. `add_requirements` (an open requirement with the same id is
///    [`Error::DuplicateRequirement`]; a decided one is replaced);
/// 6. `decide` ([`Error::RequirementNotFound`] / [`Error::RequirementAlreadyDecided`]);
/// 7. `run_state`;
/// 8. `decisions` (appended to the session's decision log).
///
/// Because removal comes before appending, a message may be removed and appended again
/// with the same id in one commit (that is how [`Commit::rewrite`] moves a tail).
///
/// ```
/// use reins_memory::Commit;
/// use reins_message::Msg;
///
/// let c = Commit::at(3).append(Msg::user("hi")).run_state(Some(serde_json::json!({"step": 1})));
/// assert_eq!(c.expected_version, 3);
/// assert!(!c.is_empty());
/// assert!(Commit::at(3).is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Commit {
    /// The version the change is based on.
    pub expected_version: u64,
    /// Messages appended at the end, in order.
    pub append: Vec<Msg>,
    /// Ids of messages to delete.
    pub remove: Vec<String>,
    /// Messages rewritten in place, matched by id.
    pub replace: Vec<Msg>,
    /// Requirements to record.
    pub add_requirements: Vec<RequirementRecord>,
    /// Decisions for open requirements: (requirement id, decision).
    pub decide: Vec<(String, Value)>,
    /// Remove every requirement record first.
    pub clear_requirements: bool,
    /// `Some(v)` sets the run state to `v`; `None` leaves it as it is. A run commits
    /// its typed state ([`RunStateData::typed`]); see [`RunStateData`] for why.
    pub run_state: Option<Option<RunStateData>>,
    /// Entries appended to the session's decision log (the audit trail), in the same
    /// transaction as the rest.
    pub decisions: Vec<DecisionEntry>,
    /// Releases the session's run lock held by this owner in the same transaction, once
    /// the rest applied (a run's last commit and its unlock in one step). Applies even
    /// when the commit writes nothing; on any error the lock stays. Honoured by stores
    /// whose [`commit_releases_lock`](crate::MemoryStore::commit_releases_lock) is true;
    /// not part of [`Commit::is_empty`].
    pub release_lock: Option<String>,
    /// Takes (or renews) the session's run lock for this owner in the same
    /// transaction, so that a run's first write and its lock are one step. The
    /// version is checked first: a stale commit is [`Error::Conflict`] (and takes
    /// nothing) whoever holds the lock; a current one whose lock another owner holds
    /// with a live lease is [`Error::SessionLocked`], and nothing is written. An
    /// expired lease is taken over. Applies even when the commit writes nothing; on
    /// any error the lock is not taken. With [`Commit::release_lock`] of the same owner
    /// the lock is taken, then released (it ends free). Honoured by stores whose
    /// [`commit_takes_lock`](crate::MemoryStore::commit_takes_lock) is true; not part
    /// of [`Commit::is_empty`].
    pub acquire_lock: Option<LockRequest>,
    /// Notices of what this commit changes, written to the outbox in its transaction
    /// when the store records notices ([`MemoryStore::record_notices`](crate::MemoryStore::record_notices));
    /// dropped otherwise. A commit that carries only notices writes them without
    /// changing the session's version. Not part of [`Commit::is_empty`].
    pub notices: Vec<crate::Notice>,
}

/// The run lock a commit takes ([`Commit::acquire_lock`]): who takes it, and for how
/// long (as [`MemoryStore::try_lock_session`](crate::MemoryStore::try_lock_session)'s
/// `owner` and `lease`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRequest {
    /// Who takes the lock.
    pub owner: String,
    /// How long the lease lasts from the commit.
    pub lease: Duration,
}

impl Commit {
    /// An empty commit based on `version`.
    pub fn at(version: u64) -> Self {
        Self {
            expected_version: version,
            ..Self::default()
        }
    }

    /// Replaces the stored transcript `before` by `after` with the smallest tail
    /// rewrite: messages after their common prefix are removed and `after`'s tail is
    /// appended. Repairs of the current turn therefore cost as much as the turn.
    pub fn rewrite(version: u64, before: &[Msg], after: &[Msg]) -> Self {
        let common = before.iter().zip(after).take_while(|(a, b)| a == b).count();
        Self {
            expected_version: version,
            remove: before[common..].iter().map(|m| m.id.clone()).collect(),
            append: after[common..].to_vec(),
            ..Self::default()
        }
    }

    /// Appends a message.
    #[must_use]
    pub fn append(mut self, message: Msg) -> Self {
        self.append.push(message);
        self
    }

    /// Appends messages, in order.
    #[must_use]
    pub fn append_all(mut self, messages: impl IntoIterator<Item = Msg>) -> Self {
        self.append.extend(messages);
        self
    }

    /// Deletes a message by id.
    #[must_use]
    pub fn remove(mut self, id: impl Into<String>) -> Self {
        self.remove.push(id.into());
        self
    }

    /// Rewrites a message in place (matched by its id).
    #[must_use]
    pub fn replace(mut self, message: Msg) -> Self {
        self.replace.push(message);
        self
    }

    /// Records a requirement.
    #[must_use]
    pub fn add_requirement(mut self, requirement: RequirementRecord) -> Self {
        self.add_requirements.push(requirement);
        self
    }

    /// Decides an open requirement.
    #[must_use]
    pub fn decide(mut self, id: impl Into<String>, decision: Value) -> Self {
        self.decide.push((id.into(), decision));
        self
    }

    /// Removes every requirement record (before any are added).
    #[must_use]
    pub fn clear_requirements(mut self) -> Self {
        self.clear_requirements = true;
        self
    }

    /// Sets (or, with `None`, clears) the run state.
    #[must_use]
    pub fn run_state(mut self, state: Option<Value>) -> Self {
        self.run_state = Some(state.map(RunStateData::from));
        self
    }

    /// Sets (or, with `None`, clears) the run state, typed or JSON.
    #[must_use]
    pub fn run_state_data(mut self, state: Option<RunStateData>) -> Self {
        self.run_state = Some(state);
        self
    }

    /// Releases `owner`'s run lock with the commit (see [`Commit::release_lock`]).
    #[must_use]
    pub fn releasing_lock(mut self, owner: impl Into<String>) -> Self {
        self.release_lock = Some(owner.into());
        self
    }

    /// Takes (or renews) `owner`'s run lock for `lease` with the commit (see
    /// [`Commit::acquire_lock`]).
    #[must_use]
    pub fn taking_lock(mut self, owner: impl Into<String>, lease: Duration) -> Self {
        self.acquire_lock = Some(LockRequest {
            owner: owner.into(),
            lease,
        });
        self
    }

    /// Adds a notice for the outbox (see [`Commit::notices`]).
    #[must_use]
    pub fn notify(mut self, notice: crate::Notice) -> Self {
        self.notices.push(notice);
        self
    }

    /// Appends an entry to the session's decision log.
    #[must_use]
    pub fn log_decision(mut self, entry: DecisionEntry) -> Self {
        self.decisions.push(entry);
        self
    }

    /// Whether the commit changes nothing.
    pub fn is_empty(&self) -> bool {
        self.append.is_empty()
            && self.remove.is_empty()
            && self.replace.is_empty()
            && self.add_requirements.is_empty()
            && self.decide.is_empty()
            && !self.clear_requirements
            && self.run_state.is_none()
            && self.decisions.is_empty()
    }

    /// Applies the commit to `state` (the in-memory backend and tests use this; the
    /// SQL backends do the same in SQL). On error `state` may be half-changed: apply
    /// to a copy.
    pub(crate) fn apply_to(self, state: &mut SessionState, now: DateTime<Utc>) -> Result<()> {
        let session = state.id.clone();
        for id in &self.remove {
            let Some(pos) = state.messages.iter().position(|m| &m.id == id) else {
                return Err(Error::MessageNotFound {
                    session,
                    id: id.clone(),
                });
            };
            state.messages.remove(pos);
        }
        for msg in self.replace {
            let Some(slot) = state.messages.iter_mut().find(|m| m.id == msg.id) else {
                return Err(Error::MessageNotFound {
                    session,
                    id: msg.id,
                });
            };
            *slot = msg;
        }
        if !self.append.is_empty() {
            let mut ids: HashSet<&str> = state.messages.iter().map(|m| m.id.as_str()).collect();
            for m in &self.append {
                if !ids.insert(m.id.as_str()) {
                    return Err(Error::DuplicateMessage {
                        session,
                        id: m.id.clone(),
                    });
                }
            }
        }
        state.messages.extend(self.append);
        if self.clear_requirements {
            state.requirements.clear();
        }
        for r in self.add_requirements {
            match state.requirements.iter().position(|x| x.id == r.id) {
                Some(i) if state.requirements[i].is_open() => {
                    return Err(Error::DuplicateRequirement { session, id: r.id });
                }
                Some(i) => {
                    state.requirements.remove(i);
                    state.requirements.push(r);
                }
                None => state.requirements.push(r),
            }
        }
        for (id, decision) in self.decide {
            let Some(r) = state.requirements.iter_mut().find(|r| r.id == id) else {
                return Err(Error::RequirementNotFound { session, id });
            };
            if !r.is_open() {
                return Err(Error::RequirementAlreadyDecided { session, id });
            }
            r.decision = Some(decision);
            r.decided_at = Some(now);
        }
        if let Some(rs) = self.run_state {
            state.run_state =
                rs.map(RunStateData::into_value)
                    .transpose()
                    .map_err(|e| Error::Encode {
                        what: format!("the run state of `{session}`"),
                        detail: e.to_string(),
                    })?;
        }
        state.version += 1;
        state.updated_at = now;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrite_touches_only_the_tail() {
        let a = Msg::user("a");
        let b = Msg::assistant("b");
        let c = Msg::assistant("c");
        let b2 = Msg::assistant("b2");
        let commit = Commit::rewrite(
            4,
            &[a.clone(), b.clone(), c.clone()],
            &[a, b2.clone(), c.clone()],
        );
        assert_eq!(commit.remove, vec![b.id, c.id.clone()]);
        assert_eq!(commit.append, vec![b2, c]);
        assert_eq!(commit.expected_version, 4);
    }

    #[test]
    fn failed_apply_reports_the_first_problem() {
        let mut s = SessionState::new("s", Utc::now());
        let err = Commit::at(0)
            .decide("nope", Value::Null)
            .apply_to(&mut s, Utc::now())
            .unwrap_err();
        assert!(matches!(err, Error::RequirementNotFound { ref id, .. } if id == "nope"));
    }
}
