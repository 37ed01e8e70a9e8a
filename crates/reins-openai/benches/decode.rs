//! Parse + accumulate a 10,000-chunk Chat Completions stream from bytes.
#![allow(missing_docs, clippy::unwrap_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use reins_model::{MessageAccumulator, Result};

const CHUNKS: usize = 10_000;

/// 10,000 events: text deltas, then a tool call whose arguments stream in pieces.
fn body() -> Vec<u8> {
    let mut s = String::new();
    let ev = |s: &mut String, json: &str| {
        s.push_str("data: ");
        s.push_str(json);
        s.push_str("\n\n");
    };
    for i in 0..CHUNKS / 2 {
        ev(
            &mut s,
            &format!(
                r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"content":"word{i} "}},"finish_reason":null}}]}}"#
            ),
        );
    }
    ev(
        &mut s,
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"write","arguments":"{\"text\":\""}}]},"finish_reason":null}]}"#,
    );
    for _ in 0..CHUNKS / 2 - 3 {
        ev(
            &mut s,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"abc "}}]},"finish_reason":null}]}"#,
        );
    }
    ev(
        &mut s,
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]},"finish_reason":"tool_calls"}]}"#,
    );
    ev(
        &mut s,
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":10000}}"#,
    );
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

fn bench(c: &mut Criterion) {
    let bytes = body();
    // Network-sized pieces that cut events anywhere.
    let pieces: Vec<&[u8]> = bytes.chunks(1400).collect();
    let mut g = c.benchmark_group("openai");
    g.throughput(Throughput::Elements(CHUNKS as u64));
    g.bench_function("parse_accumulate_10k_chunks", |b| {
        b.iter(|| {
            futures::executor::block_on(async {
                let body = futures::stream::iter(pieces.iter().map(|p| Result::Ok(*p)));
                let mut s = reins_openai::decode::chunk_stream(body);
                let mut acc = MessageAccumulator::new();
                while let Some(ch) = s.next().await {
                    acc.push(&ch.unwrap()).unwrap();
                }
                let done = acc.finish();
                assert_eq!(done.message.tool_uses().count(), 1);
                done
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
