//! Before/after snapshots of transcript repair for the named scenarios.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use reins_memory::repair::is_provider_valid;
use reins_memory::{RepairReport, sanitize_after_interrupt, sanitize_for_request};
use reins_message::{Msg, ToolResult};
use serde_json::json;
use support::*;

fn scenario(before: &[Msg], repaired: (Vec<Msg>, RepairReport)) -> serde_json::Value {
    let (after, report) = repaired;
    assert!(
        is_provider_valid(&after),
        "repair left the transcript invalid"
    );
    json!({ "before": before, "after": after, "report": report })
}

#[test]
fn esc_during_streaming() {
    let before = vec![
        user("u1", 0, "what is in temp.txt?"),
        assistant("a1", 1, "Reading it.", &[("call_1", "read_file")]),
        results(
            "r1",
            2,
            vec![ToolResult::success("call_1", "read_file", "hello")],
        ),
        partial(assistant("a2", 3, "The file says hel", &[])),
    ];
    let out = sanitize_after_interrupt(&before);
    assert_eq!(out.1.removed_messages, vec!["a2"]);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!(scenario(&before, out));
}

#[test]
fn esc_between_two_parallel_tools() {
    let before = vec![
        user("u1", 0, "clean up"),
        assistant(
            "a1",
            1,
            "",
            &[("call_1", "list_files"), ("call_2", "delete_file")],
        ),
        results(
            "r1",
            2,
            vec![ToolResult::success("call_1", "list_files", "temp.txt")],
        ),
    ];
    let out = sanitize_after_interrupt(&before);
    assert_eq!(out.1.synthesized, vec!["call_2"]);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!(scenario(&before, out));
}

#[test]
fn orphan_result() {
    let before = vec![
        user("u1", 0, "search"),
        assistant("a1", 1, "", &[("call_1", "search")]),
        results(
            "r1",
            2,
            vec![
                ToolResult::success("call_1", "search", "3 hits"),
                ToolResult::success("call_9", "search", "from nowhere"),
            ],
        ),
    ];
    let out = sanitize_for_request(&before);
    assert_eq!(out.1.rewritten_messages, vec!["r1"]);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!(scenario(&before, out));
}

#[test]
fn duplicate_result() {
    let before = vec![
        user("u1", 0, "search"),
        assistant("a1", 1, "", &[("call_1", "search")]),
        results(
            "r1",
            2,
            vec![ToolResult::success("call_1", "search", "3 hits")],
        ),
        results(
            "r2",
            3,
            vec![ToolResult::success("call_1", "search", "3 hits")],
        ),
    ];
    let out = sanitize_for_request(&before);
    assert_eq!(out.1.removed_messages, vec!["r2"]);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!(scenario(&before, out));
}

#[test]
fn new_user_message_while_tool_use_pending() {
    let before = vec![
        user("u1", 0, "delete temp.txt"),
        assistant("a1", 1, "", &[("call_1", "delete_file")]),
        user("u2", 2, "no, search instead"),
    ];
    let out = sanitize_for_request(&before);
    assert_eq!(out.1.synthesized, vec!["call_1"]);
    assert_eq!(out.0[2].id, "a1.repair");
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!(scenario(&before, out));
}

/// Snapshots with object keys sorted: they pin the content, not the order serde_json
/// keeps keys in (insertion order when a dependency turns on `preserve_order`).
fn sorted_maps() -> insta::internals::SettingsBindDropGuard {
    let mut settings = insta::Settings::clone_current();
    settings.set_sort_maps(true);
    settings.bind_to_scope()
}
