use super::*;
use reins_message::ContentBlock;
use serde_json::json;

fn use_(id: &str) -> ContentBlock {
    ContentBlock::ToolUse(ToolUse::new(id, "t", json!({})))
}
fn ok(id: &str) -> ToolResult {
    ToolResult::success(id, "t", "done")
}

#[test]
fn turn_start_and_pending() {
    let msgs = vec![
        Msg::user("a"),
        Msg::assistant("").with_block(use_("old")),
        Msg::user("b"),
        Msg::assistant("")
            .with_block(use_("x"))
            .with_block(use_("y")),
        Msg::tool_results([ok("x")]),
    ];
    assert_eq!(current_turn_start(&msgs), 2);
    assert_eq!(current_turn_start(&[]), 0);
    let pending: Vec<&str> = pending_tool_uses(&msgs)
        .iter()
        .map(|u| u.id.as_str())
        .collect();
    assert_eq!(pending, vec!["y"]);
}

#[test]
fn valid_transcript_is_unchanged() {
    let msgs = vec![
        Msg::user("a"),
        Msg::assistant("").with_block(use_("x")),
        Msg::tool_results([ok("x")]),
        Msg::assistant("done"),
    ];
    let (out, report) = sanitize_for_request(&msgs);
    assert_eq!(out, msgs);
    assert!(report.is_empty());
    assert!(is_provider_valid(&out));
}

#[test]
fn duplicates_prefer_a_result_of_a_tool_that_ran() {
    let msgs = vec![
        Msg::user("a"),
        Msg::assistant("").with_block(use_("x")),
        Msg::tool_results([ToolResult::cancelled("x", "t", "no")]),
        Msg::tool_results([ok("x"), ok("x")]),
    ];
    let (out, report) = sanitize_for_request(&msgs);
    assert!(is_provider_valid(&out));
    assert_eq!(out.len(), 3);
    assert_eq!(out[2].tool_results_iter().count(), 1);
    assert_eq!(report.removed_messages, vec![msgs[2].id.clone()]);
    assert_eq!(report.rewritten_messages, vec![msgs[3].id.clone()]);
    assert!(
        report
            .removed_results
            .iter()
            .all(|r| r.reason == RemovalReason::Duplicate)
    );
}

#[test]
fn misplaced_and_orphan_results_are_reported() {
    let msgs = vec![
        Msg::tool_results([ok("ghost")]),
        Msg::user("a"),
        Msg::assistant("hi").with_block(ContentBlock::ToolResult(ok("z"))),
    ];
    let (out, report) = sanitize_for_request(&msgs);
    assert!(is_provider_valid(&out));
    let reasons: Vec<_> = report.removed_results.iter().map(|r| r.reason).collect();
    assert_eq!(
        reasons,
        vec![RemovalReason::Orphan, RemovalReason::Misplaced]
    );
    assert_eq!(out.len(), 2);
}

#[test]
fn synthesized_ids_do_not_collide() {
    let a = Msg::assistant("").with_block(use_("x")).with_id("a");
    let msgs = vec![Msg::user("q").with_id("a.repair"), a];
    let (out, _) = sanitize_for_request(&msgs);
    assert_eq!(out[2].id, "a.repair2");
}

#[test]
fn violations_name_the_problem() {
    let msgs = vec![
        Msg::assistant("")
            .with_block(use_("x"))
            .with_block(use_("y")),
        Msg::tool_results([ok("x"), ok("x"), ok("q")]),
    ];
    let v = violations(&msgs);
    assert!(v.contains(&Violation::DuplicateResult {
        tool_use_id: "x".into()
    }));
    assert!(v.contains(&Violation::MissingResult {
        tool_use_id: "y".into()
    }));
    assert!(
        v.iter().any(
            |v| matches!(v, Violation::OrphanResult { tool_use_id, .. } if tool_use_id == "q")
        )
    );
}
