//! Transcript repair benchmarks on a 1,000-message transcript.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use reins_memory::{pending_tool_uses, sanitize_after_interrupt, sanitize_for_request};
use reins_message::{ContentBlock, Msg, ToolResult, ToolUse};
use serde_json::json;

/// 250 turns of 4 messages (person, tool use, result, answer); the last turn is cut
/// after the tool use, and one result elsewhere is duplicated, so both repairs work.
fn transcript() -> Vec<Msg> {
    let mut ms = Vec::with_capacity(1_000);
    for i in 0..250 {
        let id = format!("call_{i}");
        ms.push(Msg::user(format!("question {i}")));
        ms.push(
            Msg::assistant("Looking.").with_block(ContentBlock::ToolUse(ToolUse::new(
                &id,
                "search",
                json!({ "q": i }),
            ))),
        );
        ms.push(Msg::tool_results([ToolResult::success(
            &id, "search", "found it",
        )]));
        ms.push(Msg::assistant(format!("answer {i}")));
    }
    ms.truncate(998);
    ms.insert(
        500,
        Msg::tool_results([ToolResult::success("call_124", "search", "again")]),
    );
    ms.push(Msg::assistant("partial").with_metadata(reins_memory::PARTIAL_KEY, json!(true)));
    assert_eq!(ms.len(), 1_000);
    ms
}

fn repair(c: &mut Criterion) {
    let ms = transcript();
    let (valid, report) = sanitize_for_request(&ms);
    assert!(!report.is_empty());
    c.bench_function("repair_for_request_1000_needs_repair", |b| {
        b.iter(|| black_box(sanitize_for_request(black_box(&ms))))
    });
    c.bench_function("repair_for_request_1000_already_valid", |b| {
        b.iter(|| black_box(sanitize_for_request(black_box(&valid))))
    });
    c.bench_function("repair_after_interrupt_1000", |b| {
        b.iter(|| black_box(sanitize_after_interrupt(black_box(&ms))))
    });
    c.bench_function("pending_tool_uses_1000", |b| {
        b.iter(|| black_box(pending_tool_uses(black_box(&ms)).len()))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = repair
}
criterion_main!(benches);
