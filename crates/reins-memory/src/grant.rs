//! Standing grants: stored permissions to run a tool without asking a person, scoped by
//! principal, session, tool and a small declarative predicate over the arguments, with
//! an optional expiry. A grant whose [`effect`](Grant::effect) is
//! [`GrantEffect::Deny`] is a standing *rejection* in the same scope: a matching call
//! is rejected without asking (deny rules are checked before allow grants). The store keeps them ([`MemoryStore::create_grant`],
//! [`MemoryStore::list_grants`], [`MemoryStore::revoke_grant`]); a revoked grant stays
//! stored (with who revoked it and when), so the record of what was allowed survives.
//!
//! ```
//! use chrono::{Duration, Utc};
//! use reins_memory::{ArgCondition, Grant};
//! use serde_json::json;
//!
//! // "allow send_email to @example.com in this session for one hour"
//! let now = Utc::now();
//! let g = Grant::new("g1", "send_email", now)
//!     .session("user-7/chat-1")
//!     .condition(ArgCondition::ends_with("/to", "@example.com"))
//!     .expires_at(now + Duration::hours(1));
//! g.validate().unwrap();
//! let ok = json!({"to": "ana@example.com", "body": "hi"});
//! let other = json!({"to": "eve@evil.test", "body": "hi"});
//! assert!(g.matches("send_email", None, "user-7/chat-1", &ok, now));
//! assert!(!g.matches("send_email", None, "user-7/chat-1", &other, now));
//! assert!(!g.matches("send_email", None, "user-7/chat-2", &ok, now));
//! assert!(!g.matches("send_email", None, "user-7/chat-1", &ok, now + Duration::hours(2)));
//! ```
//!
//! [`MemoryStore::create_grant`]: crate::MemoryStore::create_grant
//! [`MemoryStore::list_grants`]: crate::MemoryStore::list_grants
//! [`MemoryStore::revoke_grant`]: crate::MemoryStore::revoke_grant

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The longest JSON pointer, note or name a grant accepts (in bytes).
const MAX_TEXT: usize = 1024;
/// The most conditions one grant may carry.
pub const MAX_CONDITIONS: usize = 32;

/// What a matching grant does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantEffect {
    /// The call runs without asking (a standing permission).
    #[default]
    Allow,
    /// The call is rejected without asking (a standing rejection, a deny rule).
    Deny,
}

impl GrantEffect {
    /// Whether this is [`GrantEffect::Allow`].
    pub fn is_allow(&self) -> bool {
        *self == Self::Allow
    }
}

/// A standing permission to run a tool without asking, or a standing rejection (see
/// the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    /// Its id (unique in the store).
    pub id: String,
    /// The tool it allows (or, for a deny rule, rejects).
    pub tool: String,
    /// Allow (the default; absent from the JSON) or deny.
    #[serde(default, skip_serializing_if = "GrantEffect::is_allow")]
    pub effect: GrantEffect,
    /// Only calls of sessions acting for this principal (`None`: any principal).
    #[serde(default)]
    pub principal: Option<String>,
    /// Only calls in this session (`None`: any session).
    #[serde(default)]
    pub session: Option<String>,
    /// Every condition must hold for the call's arguments (empty: any arguments).
    #[serde(default)]
    pub conditions: Vec<ArgCondition>,
    /// When it stops matching (`None`: never).
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    /// Why it was given, for the people reading the audit trail.
    #[serde(default)]
    pub note: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// Who created it.
    #[serde(default)]
    pub created_by: Option<String>,
    /// When it was revoked (a revoked grant never matches again).
    #[serde(default)]
    pub revoked_at: Option<DateTime<Utc>>,
    /// Who revoked it.
    #[serde(default)]
    pub revoked_by: Option<String>,
}

impl Grant {
    /// A grant of `tool` to every principal and session, with no conditions and no
    /// expiry, created at `now`.
    pub fn new(id: impl Into<String>, tool: impl Into<String>, now: DateTime<Utc>) -> Self {
        Self {
            id: id.into(),
            tool: tool.into(),
            effect: GrantEffect::Allow,
            principal: None,
            session: None,
            conditions: Vec::new(),
            expires_at: None,
            note: None,
            created_at: now,
            created_by: None,
            revoked_at: None,
            revoked_by: None,
        }
    }

    /// Makes it a deny rule: matching calls are rejected without asking.
    #[must_use]
    pub fn deny(mut self) -> Self {
        self.effect = GrantEffect::Deny;
        self
    }

    /// Only for this principal.
    #[must_use]
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// Only in this session.
    #[must_use]
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// Adds a condition on the arguments.
    #[must_use]
    pub fn condition(mut self, condition: ArgCondition) -> Self {
        self.conditions.push(condition);
        self
    }

    /// Stops matching at `at`.
    #[must_use]
    pub fn expires_at(mut self, at: DateTime<Utc>) -> Self {
        self.expires_at = Some(at);
        self
    }

    /// Sets the note.
    #[must_use]
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// Records who created it.
    #[must_use]
    pub fn created_by(mut self, by: impl Into<String>) -> Self {
        self.created_by = Some(by.into());
        self
    }

    /// Whether it is revoked.
    pub fn is_revoked(&self) -> bool {
        self.revoked_at.is_some()
    }

    /// Whether it expired at `now`.
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_some_and(|t| now >= t)
    }

    /// Whether it is neither revoked nor expired at `now`.
    pub fn is_live(&self, now: DateTime<Utc>) -> bool {
        !self.is_revoked() && !self.is_expired(now)
    }

    /// Whether it allows a call of `tool` with `args`, in `session`, acting for
    /// `principal`, at `now`: live, the same tool, the principal and the session it is
    /// scoped to (when it is), and every condition holds. A grant scoped to a
    /// principal never matches a call that acts for none.
    pub fn matches(
        &self,
        tool: &str,
        principal: Option<&str>,
        session: &str,
        args: &Value,
        now: DateTime<Utc>,
    ) -> bool {
        self.is_live(now)
            && self.tool == tool
            && self
                .principal
                .as_deref()
                .is_none_or(|p| principal == Some(p))
            && self.session.as_deref().is_none_or(|s| s == session)
            && self.conditions.iter().all(|c| c.holds(args))
    }

    /// Checks what a person supplied: a tool name, ids and texts of reasonable length,
    /// well-formed conditions, an expiry after its creation. The message says what to
    /// fix.
    pub fn validate(&self) -> Result<(), String> {
        if self.id.is_empty() || self.id.len() > MAX_TEXT {
            return Err("a grant's id must be 1 to 1024 bytes".to_owned());
        }
        if self.tool.trim().is_empty() || self.tool.len() > MAX_TEXT {
            return Err("`tool` must name a tool (1 to 1024 bytes)".to_owned());
        }
        for (name, v) in [
            ("principal", &self.principal),
            ("session", &self.session),
            ("note", &self.note),
            ("created_by", &self.created_by),
        ] {
            if let Some(v) = v {
                if v.len() > MAX_TEXT || (name != "note" && v.is_empty()) {
                    return Err(format!("`{name}` must be 1 to 1024 bytes when given"));
                }
            }
        }
        if self.conditions.len() > MAX_CONDITIONS {
            return Err(format!(
                "a grant carries at most {MAX_CONDITIONS} conditions ({} given)",
                self.conditions.len()
            ));
        }
        for (i, c) in self.conditions.iter().enumerate() {
            c.validate().map_err(|e| format!("conditions[{i}]: {e}"))?;
        }
        if let Some(t) = self.expires_at {
            if t <= self.created_at {
                return Err(format!(
                    "`expires_at` ({t}) must be after the grant's creation ({})",
                    self.created_at
                ));
            }
        }
        if self.revoked_at.is_some() || self.revoked_by.is_some() {
            return Err("a new grant cannot be revoked already".to_owned());
        }
        Ok(())
    }
}

/// How an [`ArgCondition`] compares the argument it points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgOp {
    /// The argument equals `value` (any JSON).
    Equals,
    /// The argument equals one of `value` (a JSON array).
    OneOf,
    /// The argument is a string starting with `value` (a string).
    StartsWith,
    /// The argument is a string ending with `value` (a string).
    EndsWith,
}

/// One condition over the call's arguments: the value at `pointer` (a JSON pointer,
/// RFC 6901: `/to`, `/items/0/sku`; `""` is the whole arguments) compared by `op` with
/// `value`. A pointer that reaches nothing fails the condition. For `one_of`,
/// `starts_with` and `ends_with`, an argument that is an array holds when it is not
/// empty and every element holds ("every recipient ends with `@example.com`").
///
/// As JSON: `{"pointer": "/to", "op": "ends_with", "value": "@example.com"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArgCondition {
    /// Where in the arguments.
    pub pointer: String,
    /// How to compare.
    pub op: ArgOp,
    /// What to compare with.
    pub value: Value,
}

impl ArgCondition {
    /// The argument at `pointer` equals `value`.
    pub fn equals(pointer: impl Into<String>, value: impl Into<Value>) -> Self {
        Self {
            pointer: pointer.into(),
            op: ArgOp::Equals,
            value: value.into(),
        }
    }

    /// The argument at `pointer` is one of `values`.
    pub fn one_of<V: Into<Value>>(
        pointer: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        Self {
            pointer: pointer.into(),
            op: ArgOp::OneOf,
            value: Value::Array(values.into_iter().map(Into::into).collect()),
        }
    }

    /// The argument at `pointer` starts with `prefix`.
    pub fn starts_with(pointer: impl Into<String>, prefix: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            op: ArgOp::StartsWith,
            value: Value::String(prefix.into()),
        }
    }

    /// The argument at `pointer` ends with `suffix`.
    pub fn ends_with(pointer: impl Into<String>, suffix: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            op: ArgOp::EndsWith,
            value: Value::String(suffix.into()),
        }
    }

    /// Checks its form: a pointer that is empty or starts with `/`, an array for
    /// `one_of`, a non-empty string for `starts_with` / `ends_with`.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.pointer.is_empty() || self.pointer.starts_with('/')) {
            return Err(format!(
                "`pointer` must be a JSON pointer (empty or starting with `/`), not `{}`",
                self.pointer
            ));
        }
        if self.pointer.len() > MAX_TEXT {
            return Err("`pointer` is longer than 1024 bytes".to_owned());
        }
        match self.op {
            ArgOp::Equals => Ok(()),
            ArgOp::OneOf if self.value.is_array() => Ok(()),
            ArgOp::OneOf => Err("`one_of` needs `value` to be an array".to_owned()),
            ArgOp::StartsWith | ArgOp::EndsWith => match &self.value {
                Value::String(s) if !s.is_empty() => Ok(()),
                _ => Err(format!(
                    "`{}` needs `value` to be a non-empty string",
                    if self.op == ArgOp::StartsWith {
                        "starts_with"
                    } else {
                        "ends_with"
                    }
                )),
            },
        }
    }

    /// Whether it holds for `args`.
    pub fn holds(&self, args: &Value) -> bool {
        let Some(found) = args.pointer(&self.pointer) else {
            return false;
        };
        match (self.op, found) {
            (ArgOp::Equals, v) => *v == self.value,
            (_, Value::Array(items)) => !items.is_empty() && items.iter().all(|v| self.one(v)),
            (_, v) => self.one(v),
        }
    }

    fn one(&self, v: &Value) -> bool {
        match self.op {
            ArgOp::Equals => *v == self.value,
            ArgOp::OneOf => self.value.as_array().is_some_and(|a| a.contains(v)),
            ArgOp::StartsWith => {
                matches!((v, &self.value), (Value::String(s), Value::String(p)) if s.starts_with(p.as_str()))
            }
            ArgOp::EndsWith => {
                matches!((v, &self.value), (Value::String(s), Value::String(p)) if s.ends_with(p.as_str()))
            }
        }
    }
}

/// Which grants [`MemoryStore::list_grants`](crate::MemoryStore::list_grants) returns:
/// each field that is set must equal the grant's (a grant for any session has
/// `session: None` and is not listed under `session: Some(..)`). Revoked grants are
/// left out unless `include_revoked`; expired ones are listed (they show when they
/// expired).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrantFilter {
    /// Only grants of this tool.
    pub tool: Option<String>,
    /// Only grants scoped to this principal.
    pub principal: Option<String>,
    /// Only grants scoped to this session.
    pub session: Option<String>,
    /// Revoked grants too.
    pub include_revoked: bool,
}

impl GrantFilter {
    /// Every live or expired grant (not revoked).
    pub fn all() -> Self {
        Self::default()
    }

    /// Only grants of `tool`.
    #[must_use]
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// Whether `g` passes.
    pub fn admits(&self, g: &Grant) -> bool {
        (self.include_revoked || !g.is_revoked())
            && self.tool.as_deref().is_none_or(|t| g.tool == t)
            && self
                .principal
                .as_deref()
                .is_none_or(|p| g.principal.as_deref() == Some(p))
            && self
                .session
                .as_deref()
                .is_none_or(|s| g.session.as_deref() == Some(s))
    }
}

/// Orders grants as every store lists them: oldest first, then by id.
pub(crate) fn sort_grants(grants: &mut [Grant]) {
    grants.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_effect_defaults_to_allow_and_rows_without_it_still_read() {
        let now = chrono::Utc::now();
        let allow = Grant::new("g1", "delete_file", now);
        let json = serde_json::to_value(&allow).unwrap();
        assert!(json.get("effect").is_none(), "{json}");
        let back: Grant = serde_json::from_value(json).unwrap();
        assert_eq!(back.effect, GrantEffect::Allow);
        let deny = Grant::new("g2", "delete_file", now).deny();
        let json = serde_json::to_value(&deny).unwrap();
        assert_eq!(json["effect"], "deny");
        assert_eq!(serde_json::from_value::<Grant>(json).unwrap(), deny);
    }

    #[test]
    fn conditions_match_and_refuse() {
        let args = json!({"to": ["a@example.com", "b@example.com"], "n": 3, "path": "/tmp/x"});
        assert!(ArgCondition::ends_with("/to", "@example.com").holds(&args));
        assert!(!ArgCondition::ends_with("/to", "@other.com").holds(&args));
        assert!(ArgCondition::equals("/n", 3).holds(&args));
        assert!(!ArgCondition::equals("/n", "3").holds(&args));
        assert!(ArgCondition::one_of("/n", [1, 2, 3]).holds(&args));
        assert!(ArgCondition::starts_with("/path", "/tmp/").holds(&args));
        assert!(!ArgCondition::starts_with("/missing", "/tmp/").holds(&args));
        assert!(!ArgCondition::ends_with("/to", "@example.com").holds(&json!({"to": []})));
        assert!(
            !ArgCondition::ends_with("/to", "@example.com")
                .holds(&json!({"to": ["a@example.com", "eve@evil.test"]}))
        );
    }

    #[test]
    fn bad_conditions_say_what_is_wrong() {
        let bad = ArgCondition {
            pointer: "to".into(),
            op: ArgOp::Equals,
            value: json!(1),
        };
        assert!(bad.validate().unwrap_err().contains("JSON pointer"));
        let bad = ArgCondition {
            pointer: "/to".into(),
            op: ArgOp::OneOf,
            value: json!("x"),
        };
        assert!(bad.validate().unwrap_err().contains("array"));
        let now = Utc::now();
        let g = Grant::new("g", "t", now).expires_at(now - chrono::Duration::seconds(1));
        assert!(g.validate().unwrap_err().contains("expires_at"));
        assert!(Grant::new("g", " ", now).validate().is_err());
    }

    #[test]
    fn wire_form() {
        let c: ArgCondition =
            serde_json::from_value(json!({"pointer": "/to", "op": "ends_with", "value": "@x.com"}))
                .unwrap();
        assert_eq!(c, ArgCondition::ends_with("/to", "@x.com"));
        assert!(
            serde_json::from_value::<ArgCondition>(
                json!({"pointer": "/to", "op": "regex", "value": "."})
            )
            .is_err()
        );
    }
}
