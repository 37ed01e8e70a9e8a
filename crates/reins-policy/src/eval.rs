//! Putting one question to a policy set: the entities, the request, and what Cedar's
//! answer means for reins.

use std::str::FromStr;
use std::sync::OnceLock;

use cedar_policy::{
    Authorizer, Context, Decision, Entities, Entity, EntityId, EntityTypeName, EntityUid, Request,
    RestrictedExpression,
};
use chrono::{DateTime, Datelike, Timelike, Utc};
use reins_agent::Actor;
use reins_agent::approval::{NewGrant, PolicyRequest};
use reins_agent::eligibility::{DecideRequest, GrantRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::load::PolicySet;

/// Which of the three questions (see the [crate docs](crate)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Question {
    /// May this call run without asking (`Reins::Action::"call"`)?
    Call,
    /// May this person approve or reject this call (`Reins::Action::"decide"`)?
    Decide,
    /// May this person create this grant (`Reins::Action::"grant"`)?
    Grant,
}

/// What a policy set answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// `call`: run it; `decide`/`grant`: eligible.
    Allow,
    /// `call`: reject it; `decide`/`grant`: not eligible.
    Deny,
    /// `call` only: ask a person (no policy decided, or an `@ask` forbid matched).
    Ask,
}

/// A policy set's answer to one question, with the policies that produced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// The verdict.
    pub verdict: Verdict,
    /// The ids of the policies that produced it (empty: no policy applied).
    pub policies: Vec<String>,
    /// Policies that failed while evaluating (e.g. a missing tag read without
    /// `hasTag`): `id: error`. Cedar skips them; an allow with errors becomes an ask.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// The `@reason` of the first rejecting policy, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Answer {
    fn ask(errors: Vec<String>) -> Self {
        Self {
            verdict: Verdict::Ask,
            policies: Vec::new(),
            errors,
            note: None,
        }
    }

    /// The policy ids as the audit trail and the inbox show them: `` `a`, `b` ``.
    pub fn named(&self) -> String {
        self.policies
            .iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The schema's names, parsed once.
struct Names {
    user: EntityTypeName,
    role: EntityTypeName,
    tool: EntityTypeName,
    call: EntityTypeName,
    actions: [EntityUid; 3],
}

fn names() -> Result<&'static Names, String> {
    static NAMES: OnceLock<Result<Names, String>> = OnceLock::new();
    NAMES
        .get_or_init(|| {
            let ty = |s: &str| EntityTypeName::from_str(s).map_err(|e| e.to_string());
            let action = |s: &str| {
                EntityUid::from_str(&format!("Reins::Action::\"{s}\"")).map_err(|e| e.to_string())
            };
            Ok(Names {
                user: ty("Reins::User")?,
                role: ty("Reins::Role")?,
                tool: ty("Reins::Tool")?,
                call: ty("Reins::Call")?,
                actions: [action("call")?, action("decide")?, action("grant")?],
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn string(s: &str) -> RestrictedExpression {
    RestrictedExpression::new_string(s.to_owned())
}

fn long(n: i64) -> RestrictedExpression {
    RestrictedExpression::new_long(n)
}

fn count(n: usize) -> RestrictedExpression {
    long(i64::try_from(n).unwrap_or(i64::MAX))
}

/// The time fields every context has.
fn clock(now: DateTime<Utc>) -> [(String, RestrictedExpression); 3] {
    [
        ("time".to_owned(), long(now.timestamp())),
        ("hour".to_owned(), long(i64::from(now.hour()))),
        (
            "weekday".to_owned(),
            long(i64::from(now.weekday().number_from_monday())),
        ),
    ]
}

/// A person (or a session's principal): its roles are its parents, the string values of
/// its metadata (other than `roles`) its tags.
fn user(n: &Names, name: &str, actor: Option<&Actor>) -> Result<(EntityUid, Vec<Entity>), String> {
    let uid = EntityUid::from_type_name_and_id(n.user.clone(), EntityId::new(name));
    let roles: Vec<EntityUid> = actor
        .map(Actor::roles)
        .unwrap_or_default()
        .iter()
        .map(|r| EntityUid::from_type_name_and_id(n.role.clone(), EntityId::new(r)))
        .collect();
    let tags: Vec<(String, RestrictedExpression)> = actor
        .and_then(|a| a.metadata.as_ref())
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != "roles")
        .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), string(s))))
        .collect();
    let mut out: Vec<Entity> = roles
        .iter()
        .map(|r| Entity::new_no_attrs(r.clone(), Default::default()))
        .collect();
    out.push(Entity::new_with_tags(uid.clone(), [], roles, tags).map_err(|e| e.to_string())?);
    Ok((uid, out))
}

/// One call: its tool is its parent, its top-level arguments its tags.
fn call(n: &Names, id: &str, tool: &str, args: &Value) -> Result<(EntityUid, Vec<Entity>), String> {
    let tool_uid = EntityUid::from_type_name_and_id(n.tool.clone(), EntityId::new(tool));
    let uid = EntityUid::from_type_name_and_id(n.call.clone(), EntityId::new(id));
    let tags: Vec<(String, RestrictedExpression)> = args
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            (k.clone(), RestrictedExpression::new_string(text))
        })
        .collect();
    let e = Entity::new_with_tags(
        uid.clone(),
        [("tool".to_owned(), string(tool))],
        [tool_uid.clone()],
        tags,
    )
    .map_err(|e| e.to_string())?;
    Ok((
        uid,
        vec![e, Entity::new_no_attrs(tool_uid, Default::default())],
    ))
}

/// The context fields about where a call is.
fn whereabouts(
    tool: &str,
    session: &str,
    agent: &str,
    path: &[String],
) -> Vec<(String, RestrictedExpression)> {
    vec![
        ("tool".to_owned(), string(tool)),
        ("session".to_owned(), string(session)),
        ("agent".to_owned(), string(agent)),
        (
            "path".to_owned(),
            RestrictedExpression::new_set(path.iter().map(|p| string(p))),
        ),
        ("depth".to_owned(), count(path.len())),
    ]
}

/// A question ready to put to a policy set.
pub(crate) struct Prepared {
    question: Question,
    request: Request,
    entities: Entities,
}

impl Prepared {
    fn new(
        question: Question,
        principal: EntityUid,
        resource: EntityUid,
        context: Vec<(String, RestrictedExpression)>,
        entities: Vec<Entity>,
    ) -> Result<Self, String> {
        let n = names()?;
        let action = match question {
            Question::Call => &n.actions[0],
            Question::Decide => &n.actions[1],
            Question::Grant => &n.actions[2],
        };
        let context = Context::from_pairs(context).map_err(|e| e.to_string())?;
        let request = Request::new(principal, action.clone(), resource, context, None)
            .map_err(|e| e.to_string())?;
        let entities = Entities::from_entities(entities, None).map_err(|e| e.to_string())?;
        Ok(Self {
            question,
            request,
            entities,
        })
    }

    /// May this call run without asking?
    pub(crate) fn call(c: &PolicyRequest<'_>) -> Result<Self, String> {
        let n = names()?;
        let (principal, mut entities) = user(n, c.principal.unwrap_or_default(), None)?;
        let (resource, more) = call(n, c.tool_use_id, c.tool, c.arguments)?;
        entities.extend(more);
        let mut context = whereabouts(c.tool, c.session, c.agent, c.path);
        context.extend(clock(c.now));
        Self::new(Question::Call, principal, resource, context, entities)
    }

    /// May this person decide this call?
    pub(crate) fn decide(d: &DecideRequest<'_>, now: DateTime<Utc>) -> Result<Self, String> {
        let n = names()?;
        let name = d.actor.map_or("", |a| a.principal.as_str());
        let (principal, mut entities) = user(n, name, d.actor)?;
        let (resource, more) = call(n, d.requirement_id, d.tool, d.arguments)?;
        entities.extend(more);
        let mut context = whereabouts(d.tool, d.session, d.agent.unwrap_or_default(), d.path);
        context.extend(clock(now));
        context.push((
            "approve".to_owned(),
            RestrictedExpression::new_bool(d.approve),
        ));
        context.push((
            "quorum".to_owned(),
            RestrictedExpression::new_bool(d.quorum),
        ));
        Self::new(Question::Decide, principal, resource, context, entities)
    }

    /// May this person create this grant?
    pub(crate) fn grant(g: &GrantRequest<'_>, now: DateTime<Utc>) -> Result<Self, String> {
        let n = names()?;
        let (principal, mut entities) = user(n, &g.actor.principal, Some(g.actor))?;
        let NewGrant {
            tool,
            effect,
            principal: scope_principal,
            session,
            conditions,
            ttl,
            ..
        } = g.grant;
        let resource = EntityUid::from_type_name_and_id(n.tool.clone(), EntityId::new(tool));
        entities.push(Entity::new_no_attrs(resource.clone(), Default::default()));
        let effect = match effect {
            reins_agent::approval::GrantEffect::Deny => "deny",
            _ => "allow",
        };
        let mut context = vec![
            ("tool".to_owned(), string(tool)),
            ("effect".to_owned(), string(effect)),
            (
                "session".to_owned(),
                string(session.as_deref().unwrap_or_default()),
            ),
            (
                "principal".to_owned(),
                string(scope_principal.as_deref().unwrap_or_default()),
            ),
            ("conditions".to_owned(), count(conditions.len())),
            (
                "ttl_seconds".to_owned(),
                long(ttl.map_or(0, |t| i64::try_from(t.as_secs()).unwrap_or(i64::MAX))),
            ),
        ];
        context.extend(clock(now));
        Self::new(Question::Grant, principal, resource, context, entities)
    }

    /// Cedar's answer from `set`, in reins' terms.
    pub(crate) fn answer(&self, set: &PolicySet) -> Answer {
        let response = Authorizer::new().is_authorized(&self.request, &set.set, &self.entities);
        let d = response.diagnostics();
        let errors: Vec<String> = d.errors().map(ToString::to_string).collect();
        let mut policies: Vec<String> = d.reason().map(ToString::to_string).collect();
        policies.sort();
        match (response.decision(), self.question) {
            (Decision::Allow, Question::Call) if !errors.is_empty() => Answer {
                verdict: Verdict::Ask,
                policies,
                errors,
                note: None,
            },
            (Decision::Allow, _) => Answer {
                verdict: Verdict::Allow,
                policies,
                errors,
                note: None,
            },
            (Decision::Deny, Question::Call) => {
                if policies.is_empty() {
                    return Answer::ask(errors);
                }
                let meta = |id: &str| set.meta.get(&cedar_policy::PolicyId::new(id));
                let hard: Vec<String> = policies
                    .iter()
                    .filter(|p| !meta(p).is_some_and(|m| m.ask))
                    .cloned()
                    .collect();
                if hard.is_empty() {
                    return Answer {
                        verdict: Verdict::Ask,
                        policies,
                        errors,
                        note: None,
                    };
                }
                let note = hard
                    .iter()
                    .find_map(|p| meta(p).and_then(|m| m.reason.clone()));
                Answer {
                    verdict: Verdict::Deny,
                    policies: hard,
                    errors,
                    note,
                }
            }
            (Decision::Deny, _) => Answer {
                verdict: Verdict::Deny,
                policies,
                errors,
                note: None,
            },
        }
    }

    /// The question.
    pub(crate) fn question(&self) -> Question {
        self.question
    }
}

/// An answer when the question could not even be put (a malformed name): a person is
/// asked, nobody is eligible.
pub(crate) fn unputtable(question: Question, error: String) -> Answer {
    Answer {
        verdict: if question == Question::Call {
            Verdict::Ask
        } else {
            Verdict::Deny
        },
        policies: Vec::new(),
        errors: vec![error],
        note: None,
    }
}
