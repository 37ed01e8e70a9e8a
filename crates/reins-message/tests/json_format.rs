//! The stored JSON format of messages: snapshots of every block type and of a full
//! conversation with a tool round trip. This JSON is what sessions and snapshots keep;
//! a change here needs a migration note in docs/persistence.md.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use chrono::{TimeZone, Utc};
use reins_message::{ContentBlock, MediaSource, Msg, Role, ToolOutcome, ToolResult, ToolUse};
use serde_json::json;

fn fixed(mut m: Msg, id: &str) -> Msg {
    m.id = id.to_owned();
    m.created_at = Utc.with_ymd_and_hms(2026, 11, 22, 9, 30, 0).unwrap();
    m
}

#[test]
fn every_block_type() {
    let blocks = vec![
        ContentBlock::text("hello"),
        ContentBlock::Thinking {
            thinking: "the user wants a file gone".into(),
            signature: Some("sig-abc".into()),
        },
        ContentBlock::thinking("unsigned reasoning"),
        ContentBlock::ToolUse(ToolUse::new(
            "call_1",
            "delete_file",
            json!({"path": "temp.txt"}),
        )),
        ContentBlock::ToolUse(ToolUse {
            id: "call_2".into(),
            name: "search_web".into(),
            input: serde_json::Value::Null,
            raw_input: Some("{\"query\": \"rust".into()),
        }),
        ContentBlock::ToolResult(ToolResult::success(
            "call_1",
            "delete_file",
            "deleted temp.txt",
        )),
        ContentBlock::ToolResult(ToolResult::error(
            "call_2",
            "search_web",
            "arguments are not JSON",
        )),
        ContentBlock::ToolResult(ToolResult::rejected(
            "call_3",
            "send_email",
            Some("not to the boss".into()),
        )),
        ContentBlock::ToolResult(ToolResult::rejected("call_4", "send_email", None)),
        ContentBlock::ToolResult(ToolResult::cancelled(
            "call_5",
            "delete_file",
            "not run: interrupted",
        )),
        ContentBlock::ToolResult(ToolResult::interrupted("call_6", "slow", "stopped mid-run")),
        ContentBlock::ToolResult(
            ToolResult::unknown("call_7", "send_email", "the process died while it ran")
                .with_metadata("executed_input", json!({"to": "a@b.c"})),
        ),
        ContentBlock::Image {
            source: MediaSource::url("https://example.com/cat.png"),
        },
        ContentBlock::Audio {
            source: MediaSource::base64("audio/wav", "UklGRg=="),
        },
    ];
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!(blocks);
}

#[test]
fn conversation_with_tool_round_trip() {
    let call = ToolUse::new("call_1", "delete_file", json!({"path": "temp.txt"}));
    let conv = vec![
        fixed(Msg::system("You are a careful assistant."), "m0"),
        fixed(Msg::user("delete temp.txt").with_name("ana"), "m1"),
        fixed(
            Msg::new(
                Role::Assistant,
                vec![
                    ContentBlock::text("Deleting it."),
                    ContentBlock::ToolUse(call.clone()),
                ],
            )
            .with_name("SafeAgent"),
            "m2",
        ),
        fixed(
            Msg::tool_results([ToolResult::for_use(&call, ToolOutcome::Success, "deleted")]),
            "m3",
        ),
        fixed(
            Msg::assistant("Done: temp.txt is gone.").with_metadata("turn", json!(1)),
            "m4",
        ),
    ];
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!(conv);

    // And it reads back identically.
    let json = serde_json::to_string(&conv).unwrap();
    assert_eq!(Msg::list_from_json(&json).unwrap(), conv);
}

#[test]
fn broken_json_names_the_field() {
    let cases = [
        (
            r#"{"id":"1","role":"user","content":[{"type":"txt","text":"x"}],"created_at":"2026-01-01T00:00:00Z"}"#,
            "content[0]",
        ),
        (
            r#"{"id":"1","content":[],"created_at":"2026-01-01T00:00:00Z"}"#,
            "role",
        ),
        (
            r#"{"id":"1","role":"user","content":[{"type":"tool_use","name":"x"}],"created_at":"2026-01-01T00:00:00Z"}"#,
            "content[0]",
        ),
        (
            r#"{"id":"1","role":"user","content":[],"created_at":"yesterday"}"#,
            "created_at",
        ),
        (r#"[1,2"#, "invalid message JSON"),
    ];
    for (json, field) in cases {
        let err = Msg::from_json(json).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(field) || text.contains("missing field"),
            "{json}: {text}"
        );
    }
}

/// Snapshots with object keys sorted: they pin the content, not the order serde_json
/// keeps keys in (insertion order when a dependency turns on `preserve_order`).
fn sorted_maps() -> insta::internals::SettingsBindDropGuard {
    let mut settings = insta::Settings::clone_current();
    settings.set_sort_maps(true);
    settings.bind_to_scope()
}
