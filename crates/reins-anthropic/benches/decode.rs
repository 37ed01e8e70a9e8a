//! Parse + accumulate a 10,000-chunk Messages API stream from bytes.
#![allow(missing_docs, clippy::unwrap_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use reins_model::{MessageAccumulator, Result};

const CHUNKS: usize = 10_000;

/// 10,000 deltas: text, then a tool call whose arguments stream in pieces.
fn body() -> Vec<u8> {
    let mut s = String::new();
    let mut ev = |kind: &str, json: &str| {
        s.push_str("event: ");
        s.push_str(kind);
        s.push_str("\ndata: ");
        s.push_str(json);
        s.push_str("\n\n");
    };
    ev(
        "message_start",
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}"#,
    );
    ev(
        "content_block_start",
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    );
    for i in 0..CHUNKS / 2 {
        ev(
            "content_block_delta",
            &format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"word{i} "}}}}"#
            ),
        );
    }
    ev(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    );
    ev(
        "content_block_start",
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"write","input":{}}}"#,
    );
    ev(
        "content_block_delta",
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"text\":\""}}"#,
    );
    for _ in 0..CHUNKS / 2 - 2 {
        ev(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"abc "}}"#,
        );
    }
    ev(
        "content_block_delta",
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"}"}}"#,
    );
    ev(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":1}"#,
    );
    ev(
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":10000}}"#,
    );
    ev("message_stop", r#"{"type":"message_stop"}"#);
    s.into_bytes()
}

fn bench(c: &mut Criterion) {
    let bytes = body();
    // Network-sized pieces that cut events anywhere.
    let pieces: Vec<&[u8]> = bytes.chunks(1400).collect();
    let mut g = c.benchmark_group("anthropic");
    g.throughput(Throughput::Elements(CHUNKS as u64));
    g.bench_function("parse_accumulate_10k_chunks", |b| {
        b.iter(|| {
            futures::executor::block_on(async {
                let body = futures::stream::iter(pieces.iter().map(|p| Result::Ok(*p)));
                let mut s = reins_anthropic::decode::chunk_stream(body);
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
