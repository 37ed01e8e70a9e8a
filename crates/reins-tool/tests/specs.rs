#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    dead_code
)]
//! Snapshots of the tool specs (JSON Schemas) generated from argument structs.

use reins_tool::{NoArgs, ToolError, Toolkit};
use schemars::JsonSchema;
use serde::Deserialize;

/// How results are ordered.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum SortOrder {
    /// Most relevant first.
    Relevance,
    /// Newest first.
    Newest,
}

/// A date range.
#[derive(Deserialize, JsonSchema)]
struct DateRange {
    /// First day, as YYYY-MM-DD.
    from: String,
    /// Last day, as YYYY-MM-DD; today when left out.
    to: Option<String>,
}

/// Search the web.
#[derive(Deserialize, JsonSchema)]
struct SearchArgs {
    /// What to search for.
    query: String,
    /// How many results to return (1-20).
    #[schemars(range(min = 1, max = 20))]
    limit: Option<u8>,
    /// How to order the results.
    #[serde(default = "relevance")]
    order: SortOrder,
    /// Only pages published in this range.
    published: Option<DateRange>,
    /// Sites to leave out.
    #[serde(default)]
    exclude_sites: Vec<String>,
}

fn relevance() -> SortOrder {
    SortOrder::Relevance
}

/// Where a message goes.
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Recipient {
    /// An email address.
    Email {
        /// The address.
        address: String,
    },
    /// A chat channel.
    Channel {
        /// The channel's name, without `#`.
        name: String,
        /// Whether to notify everyone.
        #[serde(default)]
        notify: bool,
    },
}

#[derive(Deserialize, JsonSchema)]
struct SendArgs {
    /// Who receives the message.
    to: Recipient,
    /// The message.
    body: String,
}

#[test]
fn generated_specs() {
    let mut tk = Toolkit::new();
    tk.add(Toolkit::function(
        "search_web",
        "Search the web",
        |_: SearchArgs, _ctx| async { Ok::<_, ToolError>(()) },
    ))
    .unwrap();
    tk.add(Toolkit::function(
        "send_message",
        "Send a message",
        |_: SendArgs, _ctx| async { Ok::<_, ToolError>(()) },
    ))
    .unwrap();
    tk.add(Toolkit::function(
        "now",
        "The current time",
        |_: NoArgs, _ctx| async { Ok::<_, ToolError>(()) },
    ))
    .unwrap();
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!(tk.specs());
}

/// Snapshots with object keys sorted: they pin the content, not the order serde_json
/// keeps keys in (insertion order when a dependency turns on `preserve_order`).
fn sorted_maps() -> insta::internals::SettingsBindDropGuard {
    let mut settings = insta::Settings::clone_current();
    settings.set_sort_maps(true);
    settings.bind_to_scope()
}
