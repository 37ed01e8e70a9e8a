//! SQLite store benchmarks: appending one step (2 messages) to sessions of growing
//! length (the cost must stay flat), and loading a 1,000-message session.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::cell::Cell;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use reins_memory::{Commit, Durability, MemoryStore, SqliteOptions, SqliteStore};
use reins_message::{ContentBlock, Msg, ToolResult, ToolUse};
use serde_json::json;

fn step(i: usize) -> [Msg; 2] {
    let call = ToolUse::new(
        format!("call_{i}"),
        "search",
        json!({ "query": format!("item {i}") }),
    );
    [
        Msg::assistant("Let me look that up.").with_block(ContentBlock::ToolUse(call)),
        Msg::tool_results([ToolResult::success(
            format!("call_{i}"),
            "search",
            "3 results: alpha, beta, gamma",
        )]),
    ]
}

/// Opens a fresh file database holding one session of `len` messages.
fn seeded(
    rt: &tokio::runtime::Runtime,
    durability: Durability,
    len: usize,
) -> (SqliteStore, u64, tempfile::TempDir) {
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_with(
            dir.path().join("bench.db"),
            SqliteOptions::default().durability(durability),
        )
        .await
        .unwrap();
        let mut version = store.open_session("s").await.unwrap().version;
        let mut made = 0;
        while made < len {
            let chunk = (len - made).min(10_000);
            let msgs: Vec<Msg> = (made..made + chunk)
                .step_by(2)
                .flat_map(step)
                .take(chunk)
                .collect();
            made += msgs.len();
            version = store
                .commit("s", Commit::at(version).append_all(msgs))
                .await
                .unwrap();
        }
        (store, version, dir)
    })
}

fn append_step(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("sqlite_append_step");
    for (durability, label) in [(Durability::Normal, "normal"), (Durability::Full, "full")] {
        for len in [10usize, 1_000, 100_000] {
            if durability == Durability::Full && len != 10 {
                continue;
            }
            let (store, version, _dir) = seeded(&rt, durability, len);
            let version = Cell::new(version);
            let n = Cell::new(len);
            group.bench_with_input(BenchmarkId::new(label, len), &len, |b, _| {
                b.iter(|| {
                    let i = n.get();
                    n.set(i + 2);
                    let commit = Commit::at(version.get()).append_all(step(i));
                    version.set(rt.block_on(store.commit("s", commit)).unwrap());
                });
            });
        }
    }
    group.finish();
}

fn load(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (store, _, _dir) = seeded(&rt, Durability::Normal, 1_000);
    c.bench_function("sqlite_load_1000_messages", |b| {
        b.iter(|| {
            let s = rt.block_on(store.load_session("s")).unwrap();
            black_box(s.messages.len())
        });
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = append_step, load
}
criterion_main!(benches);
