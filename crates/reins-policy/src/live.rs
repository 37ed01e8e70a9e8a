//! The live policy: the active set, swapped atomically on reload, and the shadow set.

use std::sync::{Arc, PoisonError, RwLock};

use async_trait::async_trait;
use chrono::Utc;
use reins_agent::approval::{ApprovalPolicy, PolicyRequest, PolicyVerdict};
use reins_agent::eligibility::{DecideRequest, Eligibility, EligibilityPolicy, GrantRequest};

use crate::error::{Error, Result};
use crate::eval::{Answer, Prepared, Question, Verdict, unputtable};
use crate::load::PolicySet;
use crate::shadow::{ShadowDifference, ShadowLog, summary};

/// The sets one decision reads: swapped together, so a decision sees one of each.
struct Sets {
    active: Arc<PolicySet>,
    shadow: Option<Arc<PolicySet>>,
}

struct Inner {
    sets: RwLock<Arc<Sets>>,
    log: ShadowLog,
}

/// Cedar policies as reins' approval and eligibility policy (see the
/// [crate docs](crate)). Clones share the same sets and shadow log; give one clone to
/// [`AgentBuilder::approval_policy`](reins_agent::AgentBuilder::approval_policy), one to
/// [`AgentBuilder::eligibility_policy`](reins_agent::AgentBuilder::eligibility_policy),
/// and keep one to reload.
#[derive(Clone)]
pub struct CedarPolicy {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CedarPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sets = self.sets();
        f.debug_struct("CedarPolicy")
            .field("active", &sets.active.ids().collect::<Vec<_>>())
            .field(
                "shadow",
                &sets.shadow.as_ref().map(|s| s.ids().collect::<Vec<_>>()),
            )
            .finish()
    }
}

/// Who and what a question is about, for the shadow log.
struct Subject<'a> {
    session: &'a str,
    tool: &'a str,
    call: &'a str,
    arguments: String,
    principal: &'a str,
}

impl CedarPolicy {
    /// Policies answering from `active`, with an in-memory shadow log.
    pub fn new(active: PolicySet) -> Self {
        Self::with_log(active, ShadowLog::default())
    }

    /// Policies answering from `active`, recording shadow differences in `log`.
    pub fn with_log(active: PolicySet, log: ShadowLog) -> Self {
        Self {
            inner: Arc::new(Inner {
                sets: RwLock::new(Arc::new(Sets {
                    active: Arc::new(active),
                    shadow: None,
                })),
                log,
            }),
        }
    }

    fn sets(&self) -> Arc<Sets> {
        Arc::clone(
            &self
                .inner
                .sets
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    fn swap(&self, f: impl FnOnce(&Sets) -> Sets) {
        let mut guard = self
            .inner
            .sets
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let next = f(&guard);
        *guard = Arc::new(next);
    }

    /// The active set.
    pub fn active(&self) -> Arc<PolicySet> {
        Arc::clone(&self.sets().active)
    }

    /// The shadow set, when one is set.
    pub fn shadow(&self) -> Option<Arc<PolicySet>> {
        self.sets().shadow.clone()
    }

    /// Makes `set` the active set: decisions from now on use it; a decision under way
    /// finishes with the set it started with.
    pub fn replace(&self, set: PolicySet) {
        let set = Arc::new(set);
        self.swap(|s| Sets {
            active: set,
            shadow: s.shadow.clone(),
        });
        tracing::info!("policy set replaced");
    }

    /// Reads the active set's files again and makes the result active. On any problem
    /// the error says which file, line and why, and the active set stays as it was.
    /// Returns how many policies are active. A set not read from files reloads as itself.
    pub fn reload(&self) -> Result<usize> {
        let files = self.active().files().to_vec();
        if files.is_empty() {
            return Ok(self.active().len());
        }
        let set = PolicySet::from_files(&files).inspect_err(|e| {
            tracing::warn!(error = %e, "policy reload refused; the active set stays");
        })?;
        let n = set.len();
        self.replace(set);
        Ok(n)
    }

    /// Sets (or with `None`, removes) the shadow set: evaluated beside the active one on
    /// every question, its differences recorded, never acted on.
    pub fn set_shadow(&self, shadow: Option<PolicySet>) {
        let shadow = shadow.map(Arc::new);
        self.swap(|s| Sets {
            active: Arc::clone(&s.active),
            shadow,
        });
    }

    /// The shadow log.
    pub fn shadow_log(&self) -> &ShadowLog {
        &self.inner.log
    }

    /// The recorded shadow differences, oldest first.
    pub fn differences(&self) -> Vec<ShadowDifference> {
        self.inner.log.differences()
    }

    fn answer(
        &self,
        question: Question,
        prepared: std::result::Result<Prepared, String>,
        who: Subject<'_>,
    ) -> Answer {
        self.answer_in(&self.sets(), question, prepared, who)
    }

    /// [`CedarPolicy::answer`] from `sets` (one version of the sets: the answer and the
    /// hash of the set that gave it come from the same).
    fn answer_in(
        &self,
        sets: &Sets,
        question: Question,
        prepared: std::result::Result<Prepared, String>,
        who: Subject<'_>,
    ) -> Answer {
        let prepared = match prepared {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "could not put the question to the policies");
                return unputtable(question, e);
            }
        };
        let active = prepared.answer(&sets.active);
        if let Some(shadow) = &sets.shadow {
            let other = prepared.answer(shadow);
            if other.verdict != active.verdict || other.policies != active.policies {
                self.inner.log.record(ShadowDifference {
                    at: Utc::now(),
                    question: prepared.question(),
                    session: who.session.to_owned(),
                    tool: who.tool.to_owned(),
                    call: who.call.to_owned(),
                    arguments: who.arguments,
                    principal: who.principal.to_owned(),
                    active: active.clone(),
                    shadow: other,
                });
            }
        }
        if !active.errors.is_empty() {
            tracing::warn!(errors = ?active.errors, "policies failed while evaluating");
        }
        active
    }

    /// The active set's answer to "may this call run without asking?".
    pub fn answer_call(&self, call: &PolicyRequest<'_>) -> Answer {
        self.answer_call_in(&self.sets(), call)
    }

    fn answer_call_in(&self, sets: &Sets, call: &PolicyRequest<'_>) -> Answer {
        let who = Subject {
            session: call.session,
            tool: call.tool,
            call: call.tool_use_id,
            arguments: summary(call.arguments),
            principal: call.principal.unwrap_or_default(),
        };
        self.answer_in(sets, Question::Call, Prepared::call(call), who)
    }

    /// The active set's answer to "may this person approve or reject this call?".
    pub fn answer_decide(&self, d: &DecideRequest<'_>) -> Answer {
        let who = Subject {
            session: d.session,
            tool: d.tool,
            call: d.requirement_id,
            arguments: summary(d.arguments),
            principal: d.actor.map_or("", |a| a.principal.as_str()),
        };
        self.answer(Question::Decide, Prepared::decide(d, Utc::now()), who)
    }

    /// The active set's answer to "may this person create this grant?".
    pub fn answer_grant(&self, g: &GrantRequest<'_>) -> Answer {
        let who = Subject {
            session: g.grant.session.as_deref().unwrap_or_default(),
            tool: &g.grant.tool,
            call: "",
            arguments: serde_json::to_value(&g.grant.conditions)
                .map(|v| summary(&v))
                .unwrap_or_default(),
            principal: &g.actor.principal,
        };
        self.answer(Question::Grant, Prepared::grant(g, Utc::now()), who)
    }
}

/// Loads the policies in `dir` (see [`PolicySet::from_dir`]).
impl TryFrom<&std::path::Path> for CedarPolicy {
    type Error = Error;

    fn try_from(dir: &std::path::Path) -> Result<Self> {
        Ok(Self::new(PolicySet::from_dir(dir)?))
    }
}

/// The verdict an answer to "may this call run without asking?" gives.
fn call_verdict(a: &Answer) -> PolicyVerdict {
    match a.verdict {
        Verdict::Allow => PolicyVerdict::allow(format!("allowed by policy {}", a.named())),
        Verdict::Deny => PolicyVerdict::deny(match &a.note {
            Some(n) => format!("Rejected by policy {}: {n}", a.named()),
            None => format!("Rejected by policy {}.", a.named()),
        }),
        Verdict::Ask if a.policies.is_empty() => PolicyVerdict::Ask,
        Verdict::Ask => PolicyVerdict::ask_because(format!("asked because policy {}", a.named())),
    }
}

#[async_trait]
impl ApprovalPolicy for CedarPolicy {
    async fn decide(&self, call: PolicyRequest<'_>) -> PolicyVerdict {
        call_verdict(&self.answer_call(&call))
    }

    /// The verdict and the hash of the active set that gave it ([`PolicySet::hash`]),
    /// both from the same version of the sets: a reload in between changes neither.
    async fn decide_hashed(&self, call: PolicyRequest<'_>) -> (PolicyVerdict, Option<String>) {
        let sets = self.sets();
        let verdict = call_verdict(&self.answer_call_in(&sets, &call));
        (verdict, Some(sets.active.hash().to_owned()))
    }
}

impl EligibilityPolicy for CedarPolicy {
    fn may_decide(&self, d: DecideRequest<'_>) -> Eligibility {
        let a = self.answer_decide(&d);
        let who = d
            .actor
            .map_or("an unnamed decider", |a| a.principal.as_str());
        refusal(&a, || {
            format!("no policy permits `{who}` to decide calls of `{}`", d.tool)
        })
    }

    fn may_grant(&self, g: GrantRequest<'_>) -> Eligibility {
        let a = self.answer_grant(&g);
        refusal(&a, || {
            format!(
                "no policy permits `{}` to create grants for `{}`",
                g.actor.principal, g.grant.tool
            )
        })
    }
}

fn refusal(a: &Answer, none: impl FnOnce() -> String) -> Eligibility {
    match a.verdict {
        Verdict::Allow => Eligibility::Eligible,
        _ if a.policies.is_empty() => Eligibility::refused(none()),
        _ => Eligibility::refused(format!("forbidden by policy {}", a.named())),
    }
}
