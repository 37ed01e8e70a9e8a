//! Throughput of `MessageAccumulator` and of a `ScriptedModel` turn.
#![allow(missing_docs, clippy::unwrap_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use reins_message::Msg;
use reins_model::{
    ChatChunk, ChatModel, ChatRequest, FinishReason, MessageAccumulator, ScriptedModel,
    ScriptedResponse,
};
use serde_json::json;

fn chunks(n: usize) -> Vec<ChatChunk> {
    let mut v = Vec::with_capacity(n);
    v.push(ChatChunk::ToolCallStart {
        index: 0,
        id: "call_1".into(),
        name: "write".into(),
    });
    v.push(ChatChunk::ToolArgsDelta {
        index: 0,
        fragment: "{\"text\":\"".into(),
    });
    for i in 0..n - 4 {
        if i % 2 == 0 {
            v.push(ChatChunk::TextDelta {
                text: "word ".into(),
            });
        } else {
            v.push(ChatChunk::ToolArgsDelta {
                index: 0,
                fragment: "abc ".into(),
            });
        }
    }
    v.push(ChatChunk::ToolArgsDelta {
        index: 0,
        fragment: "\"}".into(),
    });
    v.push(ChatChunk::Finish {
        reason: FinishReason::ToolUse,
    });
    v
}

fn bench(c: &mut Criterion) {
    let input = chunks(10_000);
    let mut g = c.benchmark_group("accumulate");
    g.throughput(Throughput::Elements(input.len() as u64));
    g.bench_function("10k_chunks", |b| {
        b.iter(|| {
            let mut acc = MessageAccumulator::new();
            for ch in &input {
                acc.push(ch).unwrap();
            }
            acc.finish()
        })
    });
    g.finish();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let model = ScriptedModel::from_fn(|_| {
        ScriptedResponse::text("Looking that up for you.")
            .then_tool_call("search", json!({"query": "rust agents"}))
    })
    .with_recording(false);
    let req = ChatRequest::new(vec![Msg::user("find it")]);
    let mut g = c.benchmark_group("scripted_model");
    g.throughput(Throughput::Elements(1));
    g.bench_function("turn", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut s = model.stream(req.clone()).await.unwrap();
                let mut acc = MessageAccumulator::new();
                while let Some(ch) = s.next().await {
                    acc.push(&ch.unwrap()).unwrap();
                }
                acc.finish()
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
