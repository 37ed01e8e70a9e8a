//! [`ToolPolicy`]: whether a tool call may run at once, needs a person, or runs
//! elsewhere.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

/// A predicate over a call's arguments: `true` means "ask a person first".
///
/// ```
/// use reins_tool::ConfirmPredicate;
/// use serde_json::json;
///
/// let outside_tmp = ConfirmPredicate::new(|args| {
///     !args["path"].as_str().is_some_and(|p| p.starts_with("/tmp/"))
/// });
/// assert!(outside_tmp.check(&json!({ "path": "/etc/passwd" })));
/// assert!(!outside_tmp.check(&json!({ "path": "/tmp/x" })));
/// ```
#[derive(Clone)]
pub struct ConfirmPredicate(Arc<dyn Fn(&Value) -> bool + Send + Sync>);

impl ConfirmPredicate {
    /// Wraps a function of the arguments.
    pub fn new(f: impl Fn(&Value) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Whether a call with these arguments needs confirmation.
    pub fn check(&self, args: &Value) -> bool {
        (self.0)(args)
    }
}

impl fmt::Debug for ConfirmPredicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConfirmPredicate(..)")
    }
}

/// How a call to a tool is gated before it runs.
#[derive(Debug, Clone, Default)]
pub enum Gate {
    /// Runs without asking anyone.
    #[default]
    Auto,
    /// A person approves (or rejects) each call first; with `when`, only calls whose
    /// arguments satisfy the predicate.
    Confirm {
        /// Ask only when this returns `true`; `None` asks every time.
        when: Option<ConfirmPredicate>,
        /// What the person is told; `None` uses a generic reason naming the tool.
        reason: Option<String>,
    },
    /// A person fills in values (described by a JSON Schema) that are merged into the
    /// arguments before the call.
    UserInput {
        /// A JSON Schema (an object schema) of the values a person supplies.
        fields: Value,
    },
    /// The tool is not run here: the caller executes it and hands back the result.
    External,
}

/// What a tool's policy says about one concrete call (serializable: a driver that
/// journals its steps keeps the gates with the model's answer).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "gate", rename_all = "snake_case")]
pub enum GateDecision {
    /// Run it now.
    Run,
    /// Ask a person first.
    Confirm {
        /// What to tell the person.
        reason: String,
    },
    /// Ask a person for these values (a JSON Schema), then merge them into the
    /// arguments (see [`merge_user_input`]) and run.
    UserInput {
        /// A JSON Schema of the values to ask for.
        fields: Value,
    },
    /// Hand the call to the caller, who returns its result.
    External,
}

impl GateDecision {
    /// Whether the call may run without a person or the caller stepping in.
    pub fn is_run(&self) -> bool {
        matches!(self, Self::Run)
    }
}

/// A tool's confirmation metadata: its [`Gate`], whether it may be re-run after a
/// crash, and how long it may take.
///
/// ```
/// use std::time::Duration;
/// use reins_tool::{GateDecision, ToolPolicy};
/// use serde_json::json;
///
/// let p = ToolPolicy::confirm_if(|a| a["amount"].as_f64() > Some(100.0), "large payment")
///     .timeout(Duration::from_secs(30));
/// assert_eq!(p.decide("pay", &json!({ "amount": 5 })), GateDecision::Run);
/// assert_eq!(
///     p.decide("pay", &json!({ "amount": 500 })),
///     GateDecision::Confirm { reason: "large payment".into() }
/// );
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ToolPolicy {
    /// How calls are gated.
    pub gate: Gate,
    /// Whether running a call twice is harmless, so a call whose fate is unknown after
    /// a crash may simply be run again.
    pub idempotent: bool,
    /// The longest a call may take; `None` uses the executor's default.
    pub timeout: Option<Duration>,
}

impl ToolPolicy {
    /// Runs without asking anyone (the default).
    pub fn auto() -> Self {
        Self::default()
    }

    /// Every call needs a person's approval.
    pub fn confirm() -> Self {
        Self::with_gate(Gate::Confirm {
            when: None,
            reason: None,
        })
    }

    /// Calls whose arguments satisfy `when` need a person's approval; `reason` is what
    /// the person is told.
    pub fn confirm_if(
        when: impl Fn(&Value) -> bool + Send + Sync + 'static,
        reason: impl Into<String>,
    ) -> Self {
        Self::with_gate(Gate::Confirm {
            when: Some(ConfirmPredicate::new(when)),
            reason: Some(reason.into()),
        })
    }

    /// A person supplies the values described by `fields` (a JSON Schema) before each
    /// call.
    pub fn user_input(fields: Value) -> Self {
        Self::with_gate(Gate::UserInput { fields })
    }

    /// The caller executes every call and hands back the result.
    pub fn external() -> Self {
        Self::with_gate(Gate::External)
    }

    /// A policy with this gate, not idempotent, without a timeout of its own.
    pub fn with_gate(gate: Gate) -> Self {
        Self {
            gate,
            idempotent: false,
            timeout: None,
        }
    }

    /// Sets the reason shown when confirmation is asked (for a `Confirm` gate; no
    /// effect otherwise).
    pub fn reason(mut self, text: impl Into<String>) -> Self {
        if let Gate::Confirm { reason, .. } = &mut self.gate {
            *reason = Some(text.into());
        }
        self
    }

    /// Declares whether running a call twice is harmless.
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Sets the longest a call may take.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// What this policy says about a call to `tool_name` with `args`.
    pub fn decide(&self, tool_name: &str, args: &Value) -> GateDecision {
        match &self.gate {
            Gate::Auto => GateDecision::Run,
            Gate::Confirm { when, reason } => {
                if when.as_ref().is_some_and(|p| !p.check(args)) {
                    return GateDecision::Run;
                }
                GateDecision::Confirm {
                    reason: reason
                        .clone()
                        .unwrap_or_else(|| format!("`{tool_name}` requires confirmation")),
                }
            }
            Gate::UserInput { fields } => GateDecision::UserInput {
                fields: fields.clone(),
            },
            Gate::External => GateDecision::External,
        }
    }
}

/// Merges the values a person supplied (for a [`Gate::UserInput`] tool) into the
/// model's arguments: top-level keys of `values` replace those of `args`.
///
/// When `args` is not an object (e.g. `null` because the model sent none), the result
/// is `values` itself. When `values` is not an object, `args` is returned unchanged.
///
/// ```
/// use reins_tool::merge_user_input;
/// use serde_json::json;
///
/// let merged = merge_user_input(&json!({ "to": "a@b.c", "subject": "hi" }), &json!({ "subject": "Hello" }));
/// assert_eq!(merged, json!({ "to": "a@b.c", "subject": "Hello" }));
/// ```
pub fn merge_user_input(args: &Value, values: &Value) -> Value {
    match (args, values) {
        (Value::Object(a), Value::Object(v)) => {
            let mut out = a.clone();
            for (k, val) in v {
                out.insert(k.clone(), val.clone());
            }
            Value::Object(out)
        }
        (_, Value::Object(_)) => values.clone(),
        _ => args.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn auto_always_runs() {
        let p = ToolPolicy::auto();
        assert_eq!(p.decide("t", &json!({})), GateDecision::Run);
        assert!(!p.idempotent);
        assert_eq!(p.timeout, None);
    }

    #[test]
    fn confirm_asks_every_time_with_a_default_reason() {
        let p = ToolPolicy::confirm();
        assert_eq!(
            p.decide("delete_file", &json!({ "path": "/tmp/x" })),
            GateDecision::Confirm {
                reason: "`delete_file` requires confirmation".into()
            }
        );
        let p = ToolPolicy::confirm().reason("irreversible");
        assert_eq!(
            p.decide("delete_file", &json!({})),
            GateDecision::Confirm {
                reason: "irreversible".into()
            }
        );
    }

    #[test]
    fn confirm_if_asks_only_when_the_predicate_holds() {
        let p = ToolPolicy::confirm_if(
            |a| !a["path"].as_str().is_some_and(|p| p.starts_with("/tmp/")),
            "deletes outside /tmp",
        );
        assert_eq!(
            p.decide("delete_file", &json!({ "path": "/tmp/a" })),
            GateDecision::Run
        );
        assert_eq!(
            p.decide("delete_file", &json!({ "path": "/home/a" })),
            GateDecision::Confirm {
                reason: "deletes outside /tmp".into()
            }
        );
        // A missing argument is outside /tmp too: the predicate decides, not a panic.
        assert!(!p.decide("delete_file", &Value::Null).is_run());
    }

    #[test]
    fn user_input_and_external_are_reported_as_such() {
        let fields = json!({ "type": "object", "properties": { "otp": { "type": "string" } } });
        assert_eq!(
            ToolPolicy::user_input(fields.clone()).decide("pay", &json!({})),
            GateDecision::UserInput { fields }
        );
        assert_eq!(
            ToolPolicy::external().decide("run_shell", &json!({})),
            GateDecision::External
        );
    }

    #[test]
    fn builder_sets_idempotence_and_timeout() {
        let p = ToolPolicy::external()
            .idempotent(true)
            .timeout(Duration::from_secs(3))
            .reason("ignored for non-confirm gates");
        assert!(p.idempotent);
        assert_eq!(p.timeout, Some(Duration::from_secs(3)));
        assert!(matches!(p.gate, Gate::External));
        assert_eq!(
            format!("{:?}", ConfirmPredicate::new(|_| true)),
            "ConfirmPredicate(..)"
        );
    }

    #[test]
    fn merge_replaces_top_level_keys() {
        assert_eq!(
            merge_user_input(&json!({ "a": 1, "b": 2 }), &json!({ "b": 3, "c": 4 })),
            json!({ "a": 1, "b": 3, "c": 4 })
        );
        assert_eq!(
            merge_user_input(&Value::Null, &json!({ "c": 4 })),
            json!({ "c": 4 })
        );
        assert_eq!(
            merge_user_input(&json!({ "a": 1 }), &json!(5)),
            json!({ "a": 1 })
        );
    }
}
