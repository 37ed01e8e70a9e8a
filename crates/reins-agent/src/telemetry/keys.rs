//! Metric keys made once and reused. The `metrics` macros build a key — its label
//! list, and a copy of every label value that is not `'static` — on every call, whether
//! or not a recorder is installed; a run records a few metrics per model call, tool
//! call and commit, so that was ten allocations of a single text turn. The keys here
//! are made once (per status, per store call, per model or tool name) and handed to
//! whatever recorder is installed when the metric is recorded, as the macros do.

use std::collections::BTreeMap;
use std::sync::{LazyLock, RwLock};

use metrics::{Key, Label, Level, Metadata};

use super::metric;

/// What the macros would say of these metrics.
static META: Metadata<'static> = Metadata::new(
    "reins_agent::telemetry",
    Level::INFO,
    Some("reins_agent::telemetry"),
);

/// Adds `n` to a counter.
pub(super) fn count(key: &Key, n: u64) {
    metrics::with_recorder(|r| r.register_counter(key, &META).increment(n));
}

/// Records a value in a histogram.
pub(super) fn observe(key: &Key, value: f64) {
    metrics::with_recorder(|r| r.register_histogram(key, &META).record(value));
}

/// Keys for each label value of a bounded set of names (the agent's model, its
/// tools), made on the first use of a name. Names beyond [`PerName::LIMIT`] get keys
/// made for the call (a model can name a tool the agent does not have).
pub(super) struct PerName<K: 'static> {
    map: RwLock<BTreeMap<String, K>>,
    make: fn(&str) -> K,
}

impl<K> PerName<K> {
    const LIMIT: usize = 256;

    pub(super) const fn new(make: fn(&str) -> K) -> Self {
        Self {
            map: RwLock::new(BTreeMap::new()),
            make,
        }
    }

    /// `f` with the keys of `name`.
    pub(super) fn with<R>(&self, name: &str, f: impl FnOnce(&K) -> R) -> R {
        if let Ok(map) = self.map.read()
            && let Some(keys) = map.get(name)
        {
            return f(keys);
        }
        let keys = (self.make)(name);
        let out = f(&keys);
        if let Ok(mut map) = self.map.write()
            && map.len() < Self::LIMIT
        {
            map.entry(name.to_owned()).or_insert(keys);
        }
        out
    }
}

/// The metrics of one model call, for one model.
pub(super) struct ChatKeys {
    pub(super) duration: Key,
    pub(super) input_tokens: Key,
    pub(super) output_tokens: Key,
}

pub(super) static CHAT: PerName<ChatKeys> = PerName::new(|model| ChatKeys {
    duration: Key::from_parts(
        metric::MODEL_CALL_DURATION,
        vec![Label::new("model", model.to_owned())],
    ),
    input_tokens: Key::from_parts(
        metric::MODEL_TOKENS,
        vec![
            Label::new("model", model.to_owned()),
            Label::from_static_parts("type", "input"),
        ],
    ),
    output_tokens: Key::from_parts(
        metric::MODEL_TOKENS,
        vec![
            Label::new("model", model.to_owned()),
            Label::from_static_parts("type", "output"),
        ],
    ),
});

/// The tool outcomes a call is counted by (`ExecOutcome::label`, and `failed`).
const OUTCOMES: [&str; 10] = [
    "success",
    "error",
    "rejected",
    "cancelled",
    "interrupted",
    "unknown",
    "suspended",
    "asking",
    "delegated",
    "failed",
];

/// The metrics of one tool call, for one tool.
pub(super) struct ToolKeys {
    pub(super) duration: Key,
    /// The calls counter, per outcome of [`OUTCOMES`].
    calls: Vec<Key>,
    tool: String,
}

impl ToolKeys {
    /// The calls counter's key for `outcome` (made for the call when it is not one
    /// of the known outcomes).
    pub(super) fn calls(&self, outcome: &'static str, f: impl FnOnce(&Key)) {
        match OUTCOMES.iter().position(|o| *o == outcome) {
            Some(i) => f(&self.calls[i]),
            None => f(&calls_key(&self.tool, outcome)),
        }
    }
}

fn calls_key(tool: &str, outcome: &'static str) -> Key {
    Key::from_parts(
        metric::TOOL_CALLS,
        vec![
            Label::new("tool", tool.to_owned()),
            Label::from_static_parts("outcome", outcome),
        ],
    )
}

pub(super) static TOOL: PerName<ToolKeys> = PerName::new(|tool| ToolKeys {
    duration: Key::from_parts(
        metric::TOOL_CALL_DURATION,
        vec![Label::new("tool", tool.to_owned())],
    ),
    calls: OUTCOMES.iter().map(|o| calls_key(tool, o)).collect(),
    tool: tool.to_owned(),
});

/// The runs counter, per status label.
pub(super) static RUNS: LazyLock<BTreeMap<&'static str, Key>> = LazyLock::new(|| {
    [
        "completed",
        "paused",
        "cancelled",
        "max_iterations",
        "failed",
    ]
    .into_iter()
    .map(|s| {
        let labels = vec![Label::from_static_parts("status", s)];
        (s, Key::from_parts(metric::RUNS, labels))
    })
    .collect()
});

/// The store call histogram, per operation.
pub(super) static STORE_CALLS: LazyLock<BTreeMap<&'static str, Key>> = LazyLock::new(|| {
    ["commit", "claim", "finish"]
        .into_iter()
        .map(|op| {
            let labels = vec![Label::from_static_parts("op", op)];
            (op, Key::from_parts(metric::STORE_CALL_DURATION, labels))
        })
        .collect()
});
