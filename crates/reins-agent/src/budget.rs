//! Budgets that ask: limits on what a session may spend (tokens, cost, tool calls,
//! active time) and the `budget` requirement a run pauses with when one is reached.
//!
//! The run counts what it spends ([`Spend`]) in its stored state, so the count
//! survives a restart and is the same on every driver. Before each model call and
//! before each tool starts, the run compares the count with the limit ([`Budget`]);
//! when a limit is reached it pauses with a [`RequirementKind::Budget`] requirement
//! instead of starting the call. A person extends the budget (approves with a new
//! limit, or the suggested one) or ends the run (rejects it: the run completes with a
//! final message saying the budget ended it). Nothing is cut in the middle: a model
//! call or a tool that started under the limit finishes, and may end over it.
//!
//! ```
//! use reins_agent::budget::{Budget, Price, Spend};
//! use std::time::Duration;
//!
//! let limit = Budget::new().tokens(50_000).cost(2.0).tool_calls(20).wall_time(Duration::from_secs(600));
//! assert!(limit.validate().is_ok());
//! let spent = Spend { tokens: 50_000, ..Spend::default() };
//! assert_eq!(limit.reached(&spent, false), vec!["tokens"]);
//! // A dollar per million input tokens, four per million output tokens.
//! let price = Price::per_million(1.0, 4.0);
//! assert_eq!(price.cost(&reins_message::Usage { input_tokens: 1_000_000, output_tokens: 500_000, ..Default::default() }), 3.0);
//! ```
//!
//! [`RequirementKind::Budget`]: crate::RequirementKind::Budget

use std::collections::BTreeMap;
use std::time::Duration;

use reins_message::Usage;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A limit, a price or an extension that cannot be accepted, and why; a session's call
/// reports it as `AgentError::InvalidBudget`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct InvalidBudget {
    /// What is wrong, and what would be accepted.
    pub reason: String,
}

type Result<T, E = InvalidBudget> = std::result::Result<T, E>;

/// The name of the tool use a budget requirement shows (it is no tool: the run's own
/// question, so that every door can show it the way it shows a call).
pub const BUDGET_TOOL: &str = "budget";

/// Limits on what a session may spend; a limit left unset does not apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Model tokens (input and output, of every model call and summary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Cost, in the unit of the price table (e.g. US dollars).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Tool calls started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// Seconds the session's runs were active (reasoning or acting; time spent paused
    /// or idle is not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_secs: Option<u64>,
}

impl Budget {
    /// No limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most this many model tokens.
    #[must_use]
    pub fn tokens(mut self, tokens: u64) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// At most this cost (in the price table's unit).
    #[must_use]
    pub fn cost(mut self, cost: f64) -> Self {
        self.cost = Some(cost);
        self
    }

    /// At most this many tool calls.
    #[must_use]
    pub fn tool_calls(mut self, calls: u64) -> Self {
        self.tool_calls = Some(calls);
        self
    }

    /// At most this much active time (whole seconds).
    #[must_use]
    pub fn wall_time(mut self, time: Duration) -> Self {
        self.wall_secs = Some(time.as_secs());
        self
    }

    /// Whether no limit is set.
    pub fn is_unlimited(&self) -> bool {
        *self == Self::default()
    }

    /// Refuses a cost that is negative or not a number.
    pub fn validate(&self) -> Result<()> {
        if let Some(c) = self.cost {
            if !c.is_finite() || c < 0.0 {
                return Err(InvalidBudget {
                    reason: format!("the cost limit must be a number of at least 0, not {c}"),
                });
            }
        }
        Ok(())
    }

    /// [`validate`](Self::validate), and refuses a cost limit when the agent's model
    /// has no price (`price`): its cost could never be counted.
    pub fn validate_for(&self, price: Option<Price>) -> Result<()> {
        self.validate()?;
        if self.cost.is_some() && price.is_none() {
            return Err(InvalidBudget {
                reason: "a cost limit needs a price for the agent's model \
                         (AgentBuilder::price); the agent has none"
                    .to_owned(),
            });
        }
        Ok(())
    }

    /// The limits `spent` has reached, by name (`tokens`, `cost`, `tool_calls`,
    /// `wall_secs`). The tool-call limit counts only before a tool starts
    /// (`before_tool`): it does not stop a model call.
    pub fn reached(&self, spent: &Spend, before_tool: bool) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.tokens.is_some_and(|l| spent.tokens >= l) {
            out.push("tokens");
        }
        if self.cost.is_some_and(|l| spent.cost >= l) {
            out.push("cost");
        }
        if before_tool && self.tool_calls.is_some_and(|l| spent.tool_calls >= l) {
            out.push("tool_calls");
        }
        if self
            .wall_secs
            .is_some_and(|l| spent.wall_ms >= l.saturating_mul(1_000))
        {
            out.push("wall_secs");
        }
        out
    }

    /// Tool calls that may still start (`None`: no tool-call limit).
    pub(crate) fn calls_left(&self, spent: &Spend) -> Option<u64> {
        self.tool_calls.map(|l| l.saturating_sub(spent.tool_calls))
    }

    /// A limit to offer when `reached` were reached: each of them doubled from what
    /// was spent (at least one more unit), the others as they are.
    pub fn suggested(&self, spent: &Spend, reached: &[&str]) -> Self {
        let mut s = *self;
        for r in reached {
            match *r {
                "tokens" => s.tokens = Some(spent.tokens.saturating_mul(2).max(spent.tokens + 1)),
                "cost" => s.cost = Some((spent.cost * 2.0).max(spent.cost + 0.01)),
                "tool_calls" => {
                    s.tool_calls =
                        Some(spent.tool_calls.saturating_mul(2).max(spent.tool_calls + 1));
                }
                "wall_secs" => {
                    let secs = spent.wall_ms / 1_000;
                    s.wall_secs = Some(secs.saturating_mul(2).max(secs + 1));
                }
                _ => {}
            }
        }
        s
    }

    /// This limit with the fields `change` sets replaced (a JSON object of [`Budget`]
    /// fields); refused with a reason when it is not one, a value is negative or not a
    /// number, or a field is unknown.
    pub fn merged(&self, change: &Value) -> Result<Self> {
        let Value::Object(fields) = change else {
            return Err(InvalidBudget {
                reason: format!(
                    "a new limit is a JSON object of tokens, cost, tool_calls, wall_secs; got {change}"
                ),
            });
        };
        let mut out = serde_json::to_value(self).map_err(|e| InvalidBudget {
            reason: e.to_string(),
        })?;
        if let Value::Object(o) = &mut out {
            for (k, v) in fields {
                o.insert(k.clone(), whole(k, v));
            }
        }
        let limit: Self = serde_json::from_value(out).map_err(|e| InvalidBudget {
            reason: format!(
                "{e} (limits are whole numbers of at least 0, cost a number of at least 0)"
            ),
        })?;
        limit.validate()?;
        Ok(limit)
    }

    /// Refuses a new limit (`self`) that would not let the run go on: every limit that
    /// was `reached` must now be above what was spent, and no limit may be lowered to
    /// what was spent or below it.
    pub(crate) fn check_extension(
        &self,
        old: &Budget,
        spent: &Spend,
        reached: &[String],
    ) -> Result<()> {
        for r in self.reached(spent, true) {
            let lowered = match r {
                "tokens" => self.tokens < old.tokens || old.tokens.is_none(),
                "cost" => self.cost < old.cost || old.cost.is_none(),
                "tool_calls" => self.tool_calls < old.tool_calls || old.tool_calls.is_none(),
                _ => self.wall_secs < old.wall_secs || old.wall_secs.is_none(),
            };
            if lowered || reached.iter().any(|x| x == r) {
                return Err(InvalidBudget {
                    reason: format!(
                        "the new limit on {r} ({}) is not above what was spent ({}); a budget is \
                         extended with a higher limit",
                        limit_of(self, r),
                        spent.of(r)
                    ),
                });
            }
        }
        Ok(())
    }
}

/// A whole number written as a float (`2.0`: JSON from protobuf's `Struct`, as A2A
/// data parts carry it) as the integer it is, for the integer limits; anything else as
/// it is (and refused when it is no whole number).
fn whole(field: &str, v: &Value) -> Value {
    match v.as_f64() {
        Some(f)
            if field != "cost" && v.is_f64() && f.fract() == 0.0 && (0.0..=9.0e15).contains(&f) =>
        {
            // Exact: a whole number below 2^53.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Value::from(f as u64)
        }
        _ => v.clone(),
    }
}

/// What a session has spent while a budget was in force.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    /// Model tokens (input and output).
    #[serde(default)]
    pub tokens: u64,
    /// Cost, from the price table (0 for a model without a price).
    #[serde(default)]
    pub cost: f64,
    /// Tool calls started.
    #[serde(default)]
    pub tool_calls: u64,
    /// Active time, in milliseconds.
    #[serde(default)]
    pub wall_ms: u64,
}

impl Spend {
    /// The spend on one limit, as text (`tokens` → "1520").
    pub fn of(&self, limit: &str) -> String {
        match limit {
            "tokens" => self.tokens.to_string(),
            "cost" => format!("{:.4}", self.cost),
            "tool_calls" => self.tool_calls.to_string(),
            "wall_secs" => format!("{:.1}s", self.wall_ms as f64 / 1_000.0),
            _ => String::new(),
        }
    }

    /// Counts a model call's usage at `price`.
    pub(crate) fn add_usage(&mut self, usage: &Usage, price: Option<&Price>) {
        self.tokens = self
            .tokens
            .saturating_add(usage.input_tokens)
            .saturating_add(usage.output_tokens);
        if let Some(p) = price {
            self.cost += p.cost(usage);
        }
    }
}

/// What a model's tokens cost, per million.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Per million input tokens.
    pub input_per_million: f64,
    /// Per million output tokens.
    pub output_per_million: f64,
}

impl Price {
    /// A price per million input and output tokens.
    pub fn per_million(input: f64, output: f64) -> Self {
        Self {
            input_per_million: input,
            output_per_million: output,
        }
    }

    /// What `usage` costs.
    pub fn cost(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input_per_million
            + usage.output_tokens as f64 * self.output_per_million)
            / 1_000_000.0
    }

    fn validate(&self, model: &str) -> Result<()> {
        for v in [self.input_per_million, self.output_per_million] {
            if !v.is_finite() || v < 0.0 {
                return Err(InvalidBudget {
                    reason: format!("the price of `{model}` must be numbers of at least 0"),
                });
            }
        }
        Ok(())
    }
}

/// A price per model name (the name a model reports, `ChatModel::model_name`).
pub type PriceTable = BTreeMap<String, Price>;

/// An agent's budget: the default limit of its sessions and the price of its model.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetRules {
    /// The limit of a session that has none of its own.
    pub limit: Budget,
    /// The price of the agent's model (`None`: its tokens cost nothing).
    pub price: Option<Price>,
}

impl BudgetRules {
    /// The rules for an agent whose model is `model`, checked: a cost limit needs a
    /// price for the model.
    pub(crate) fn new(limit: Budget, prices: &PriceTable, model: &str) -> Result<Self> {
        limit.validate()?;
        for (m, p) in prices {
            p.validate(m)?;
        }
        let price = prices.get(model).copied();
        if limit.cost.is_some() && price.is_none() {
            let known: Vec<&str> = prices.keys().map(String::as_str).collect();
            return Err(InvalidBudget {
                reason: format!(
                    "a cost limit needs a price for the model `{model}`; the price table has: {}",
                    if known.is_empty() {
                        "nothing".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            });
        }
        Ok(Self { limit, price })
    }
}

/// What a budget requirement shows: what was spent, the limit, which limits were
/// reached, and a limit a person can accept as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetAsk {
    /// What the session spent.
    pub spent: Spend,
    /// The limit in force.
    pub limit: Budget,
    /// The limits reached (`tokens`, `cost`, `tool_calls`, `wall_secs`).
    pub reached: Vec<String>,
    /// The limit an approval without a new one extends to.
    pub suggested: Budget,
    /// What the run was about to start: `model_call` or `tool_call`.
    pub before: String,
}

impl Budget {
    /// The limits of `self` above `cap`'s (`tokens`, `cost`, `tool_calls`,
    /// `wall_secs`): set higher, or left unset (no limit) where `cap` has one. A limit
    /// `cap` leaves unset is never exceeded.
    ///
    /// ```
    /// use reins_agent::budget::Budget;
    ///
    /// let default = Budget::new().tokens(100).tool_calls(3);
    /// assert_eq!(Budget::new().tokens(500).tool_calls(3).cost(9.0).exceeds(&default), ["tokens"]);
    /// assert!(Budget::new().tokens(100).tool_calls(2).exceeds(&default).is_empty());
    /// ```
    pub fn exceeds(&self, cap: &Budget) -> Vec<&'static str> {
        fn above<T: PartialOrd>(asked: Option<T>, cap: Option<T>) -> bool {
            match (asked, cap) {
                (Some(a), Some(c)) => a > c,
                (None, Some(_)) => true,
                (_, None) => false,
            }
        }
        [
            ("tokens", above(self.tokens, cap.tokens)),
            ("cost", above(self.cost, cap.cost)),
            ("tool_calls", above(self.tool_calls, cap.tool_calls)),
            ("wall_secs", above(self.wall_secs, cap.wall_secs)),
        ]
        .into_iter()
        .filter_map(|(name, over)| over.then_some(name))
        .collect()
    }
}

impl Budget {
    /// The limits of this budget above `cap`, worded for a person ("tokens: 500 (the
    /// agent's default is 100)"); empty when none is.
    pub fn above(&self, cap: &Budget) -> Vec<String> {
        self.exceeds(cap)
            .into_iter()
            .map(|name| {
                let show = |b: &Budget| match name {
                    "tokens" => b.tokens.map(|v| v.to_string()),
                    "cost" => b.cost.map(|v| v.to_string()),
                    "tool_calls" => b.tool_calls.map(|v| v.to_string()),
                    _ => b.wall_secs.map(|v| v.to_string()),
                };
                format!(
                    "{name}: {} (the agent's default is {})",
                    show(self).unwrap_or_else(|| "no limit".to_owned()),
                    show(cap).unwrap_or_default()
                )
            })
            .collect()
    }
}

/// The final message of a run a person ended at its budget.
pub(crate) fn ended_message(ask: &BudgetAsk, note: Option<&str>) -> String {
    let reached: Vec<String> = ask
        .reached
        .iter()
        .map(|r| format!("{r} {} of {}", ask.spent.of(r), limit_of(&ask.limit, r)))
        .collect();
    let mut s = format!(
        "I stopped here: the budget for this session was reached ({}) and a person ended the \
         run instead of extending it. What was done before is kept; nothing else was started.",
        reached.join(", ")
    );
    if let Some(n) = note.filter(|n| !n.is_empty()) {
        s.push_str(" Note: ");
        s.push_str(n);
    }
    s
}

/// One limit, as text.
pub(crate) fn limit_of(limit: &Budget, name: &str) -> String {
    match name {
        "tokens" => limit.tokens.map(|v| v.to_string()),
        "cost" => limit.cost.map(|v| format!("{v:.4}")),
        "tool_calls" => limit.tool_calls.map(|v| v.to_string()),
        "wall_secs" => limit.wall_secs.map(|v| format!("{v}s")),
        _ => None,
    }
    .unwrap_or_else(|| "no limit".to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn merged_limits_refuse_negative_and_unknown_values() {
        let b = Budget::new().tokens(100);
        assert_eq!(b.merged(&json!({"tokens": 200})).unwrap().tokens, Some(200));
        // A2A's data parts (protobuf `Struct`) carry every number as a float.
        assert_eq!(
            b.merged(&json!({"tool_calls": 2.0})).unwrap().tool_calls,
            Some(2)
        );
        for bad in [
            json!({"tokens": -5}),
            json!({"cost": -1.0}),
            json!({"tokenz": 5}),
            json!(7),
            json!({"tool_calls": 1.5}),
            json!({"tool_calls": -2.0}),
        ] {
            assert!(matches!(b.merged(&bad), Err(InvalidBudget { .. })), "{bad}");
        }
    }

    #[test]
    fn an_extension_must_rise_above_what_was_spent() {
        let spent = Spend {
            tokens: 150,
            ..Spend::default()
        };
        let old = Budget::new().tokens(100);
        let reached = vec!["tokens".to_owned()];
        assert!(
            Budget::new()
                .tokens(150)
                .check_extension(&old, &spent, &reached)
                .is_err()
        );
        assert!(
            Budget::new()
                .tokens(151)
                .check_extension(&old, &spent, &reached)
                .is_ok()
        );
        // Lowering a limit that was not reached below what was spent is refused too.
        let old = Budget::new().tokens(100).tool_calls(10);
        let spent = Spend {
            tokens: 150,
            tool_calls: 4,
            ..Spend::default()
        };
        let lower = Budget::new().tokens(500).tool_calls(3);
        assert!(lower.check_extension(&old, &spent, &reached).is_err());
        let s = Budget::new().tokens(100).suggested(&spent, &["tokens"]);
        assert_eq!(s.tokens, Some(300));
    }

    #[test]
    fn a_cost_limit_needs_a_price_for_the_model() {
        let mut prices = PriceTable::new();
        assert!(BudgetRules::new(Budget::new().cost(1.0), &prices, "m").is_err());
        prices.insert("m".into(), Price::per_million(1.0, 2.0));
        assert!(BudgetRules::new(Budget::new().cost(1.0), &prices, "m").is_ok());
        prices.insert("n".into(), Price::per_million(-1.0, 2.0));
        assert!(BudgetRules::new(Budget::new(), &prices, "m").is_err());
    }
}
