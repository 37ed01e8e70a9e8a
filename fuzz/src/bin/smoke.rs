//! A stable-toolchain fuzz smoke run: feeds every target random bytes and mutated
//! seeds (bit flips, inserted/deleted bytes, splices, truncations, dictionary words)
//! for a bounded time. No coverage guidance: it is the short CI version; the real
//! fuzzing is `cargo +nightly fuzz run <target>` (see docs/reliability.md).
//!
//! ```text
//! cargo run --release --manifest-path fuzz/Cargo.toml --bin smoke -- [SECONDS] [--write-corpus]
//! ```
//! `SECONDS` (default 10) is the total budget, shared by the targets. `REINS_FUZZ_SEED`
//! fixes the random seed. A panic saves the input under `fuzz/artifacts/` and exits 1;
//! an input that takes over a second is reported as a hang and exits 1.
//! `--write-corpus` writes the seeds to `fuzz/corpus/<target>/` for cargo-fuzz.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use reins_message::{ContentBlock, Msg, ToolResult, ToolUse};

/// xorshift64*: small, fast, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const DICT: &[&str] = &[
    "data: ",
    "event: ",
    "\n\n",
    "\r\n",
    "\r",
    ": ping\n",
    "[DONE]",
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    ":",
    "null",
    "true",
    "-1",
    "1e999",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\u{feff}",
    "\"tool_calls\"",
    "\"index\":0",
    "\"index\":4294967296",
    "\"arguments\":\"{\"",
    "\"content_block_delta\"",
    "\"input_json_delta\"",
    "\"partial_json\":\"{\\\"a\"",
    "\"content_block_start\"",
    "\"message_stop\"",
    "\"tool_use\"",
    "\"role\":\"tool\"",
    "\"schema_version\":",
    "\"tool_result\"",
    "\"id\":\"a\"",
    "\"type\":\"error\"",
    "\"response.output_item.added\"",
    "\"response.function_call_arguments.delta\"",
    "\"output_index\":1",
    "\"function_call\"",
    "\"reasoning\"",
    "\"response.completed\"",
    "\"functionCall\"",
    "\"thoughtSignature\"",
    "\"finishReason\":\"STOP\"",
    "\"candidates\"",
];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut v = if seeds.is_empty() || rng.below(8) == 0 {
        (0..rng.below(256)).map(|_| rng.next() as u8).collect()
    } else {
        seeds[rng.below(seeds.len())].clone()
    };
    for _ in 0..=rng.below(6) {
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(v.len() + 1);
                v.insert(i, rng.next() as u8);
            }
            2 if !v.is_empty() => {
                let i = rng.below(v.len());
                let n = rng.below(v.len() - i).min(16) + 1;
                v.drain(i..(i + n).min(v.len()));
            }
            3 if !seeds.is_empty() => {
                let other = &seeds[rng.below(seeds.len())];
                let cut = rng.below(v.len() + 1);
                let from = rng.below(other.len() + 1);
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            4 => {
                let cut = rng.below(v.len() + 1);
                v.truncate(cut);
            }
            5 => {
                let i = rng.below(v.len() + 1);
                let w = DICT[rng.below(DICT.len())].as_bytes();
                v.splice(i..i, w.iter().copied());
            }
            _ if !v.is_empty() => {
                // Duplicate a slice (repeated events, nested structures).
                let i = rng.below(v.len());
                let n = rng.below(v.len() - i).min(64) + 1;
                let part = v[i..i + n].to_vec();
                let at = rng.below(v.len() + 1);
                v.splice(at..at, part);
            }
            _ => {}
        }
    }
    v
}

fn sse_openai() -> Vec<Vec<u8>> {
    let ev = |e: &str| format!("data: {e}\n\n");
    let tool = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get","arguments":""}}]},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}},{"index":1,"id":"call_2","function":{"name":"b","arguments":"{}"}}]},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#,
    ];
    let text = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"hm"},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
    ];
    let err = r#"{"error":{"message":"overloaded","type":"server_error","code":"503"}}"#;
    vec![
        [
            vec![7u8],
            tool.iter().map(|e| ev(e)).collect::<String>().into_bytes(),
            b"data: [DONE]\n\n".to_vec(),
        ]
        .concat(),
        [
            vec![1u8],
            text.iter().map(|e| ev(e)).collect::<String>().into_bytes(),
        ]
        .concat(),
        [vec![3u8], ev(text[1]).into_bytes(), ev(err).into_bytes()].concat(),
    ]
}

fn sse_anthropic() -> Vec<Vec<u8>> {
    let ev = |e: &str| {
        let kind = serde_json::from_str::<serde_json::Value>(e)
            .ok()
            .and_then(|v| v["type"].as_str().map(str::to_owned))
            .unwrap_or_default();
        format!("event: {kind}\ndata: {e}\n\n")
    };
    let events = [
        r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"model":"c","usage":{"input_tokens":3,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#,
        r#"{"type":"content_block_stop","index":1}"#,
        r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"get","input":{}}}"#,
        r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\": 1}"}}"#,
        r#"{"type":"content_block_stop","index":2}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
        r#"{"type":"message_stop"}"#,
    ];
    let err = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    vec![
        [
            vec![5u8],
            events
                .iter()
                .map(|e| ev(e))
                .collect::<String>()
                .into_bytes(),
        ]
        .concat(),
        [
            vec![0u8],
            ev(events[0]).into_bytes(),
            b"event: ping\ndata: {\"type\": \"ping\"}\n\n".to_vec(),
            ev(err).into_bytes(),
        ]
        .concat(),
    ]
}

fn sse_responses() -> Vec<Vec<u8>> {
    let ev = |e: &str| {
        let kind = serde_json::from_str::<serde_json::Value>(e)
            .ok()
            .and_then(|v| v["type"].as_str().map(str::to_owned))
            .unwrap_or_default();
        format!("event: {kind}\ndata: {e}\n\n")
    };
    let events = [
        r#"{"type":"response.created","response":{"id":"r","status":"in_progress","output":[]}}"#,
        r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}"#,
        r#"{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"hm"}"#,
        r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"enc"}}"#,
        r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"m","type":"message","role":"assistant","content":[]}}"#,
        r#"{"type":"response.output_text.delta","item_id":"m","output_index":1,"content_index":0,"delta":"Hi"}"#,
        r#"{"type":"response.output_item.added","output_index":2,"item":{"id":"fc","type":"function_call","call_id":"c1","name":"get","arguments":""}}"#,
        r#"{"type":"response.function_call_arguments.delta","item_id":"fc","output_index":2,"delta":"{\"a\": 1}"}"#,
        r#"{"type":"response.output_item.done","output_index":2,"item":{"id":"fc","type":"function_call","call_id":"c1","name":"get","arguments":"{\"a\": 1}"}}"#,
        r#"{"type":"response.completed","response":{"id":"r","status":"completed","usage":{"input_tokens":3,"output_tokens":9,"output_tokens_details":{"reasoning_tokens":4}}}}"#,
    ];
    let err = r#"{"type":"error","code":"server_error","message":"boom","param":null}"#;
    vec![
        [
            vec![6u8],
            events.iter().map(|e| ev(e)).collect::<String>().into_bytes(),
        ]
        .concat(),
        [vec![2u8], ev(events[0]).into_bytes(), ev(err).into_bytes()].concat(),
    ]
}

fn sse_gemini() -> Vec<Vec<u8>> {
    let ev = |e: &str| format!("data: {e}\n\n");
    let events = [
        r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"hm","thought":true}]}}]}"#,
        r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hi","thoughtSignature":"c2ln"}]}}]}"#,
        r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"get","args":{"a":1}},"thoughtSignature":"c2ln"},{"functionCall":{"id":"c2","name":"b","args":{}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":9,"thoughtsTokenCount":4}}"#,
    ];
    let blocked = r#"{"promptFeedback":{"blockReason":"SAFETY"}}"#;
    let err = r#"{"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}"#;
    vec![
        [
            vec![4u8],
            events.iter().map(|e| ev(e)).collect::<String>().into_bytes(),
        ]
        .concat(),
        [vec![9u8], ev(blocked).into_bytes()].concat(),
        [vec![1u8], ev(events[0]).into_bytes(), ev(err).into_bytes()].concat(),
    ]
}

fn frames_bedrock() -> Vec<Vec<u8>> {
    use reins_bedrock::eventstream::{encode_event, encode_exception};
    use serde_json::json;
    let events = [
        encode_event("messageStart", &json!({"role": "assistant"})),
        encode_event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "hm"}}}),
        ),
        encode_event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "c2ln"}}}),
        ),
        encode_event("contentBlockStop", &json!({"contentBlockIndex": 0})),
        encode_event(
            "contentBlockStart",
            &json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "get"}}}),
        ),
        encode_event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"a\": 1}"}}}),
        ),
        encode_event("contentBlockStop", &json!({"contentBlockIndex": 1})),
        encode_event("messageStop", &json!({"stopReason": "tool_use"})),
        encode_event(
            "metadata",
            &json!({"usage": {"inputTokens": 3, "outputTokens": 9, "totalTokens": 12}}),
        ),
    ];
    vec![
        [vec![5u8], events.concat()].concat(),
        [
            vec![3u8],
            events[0].clone(),
            encode_exception("throttlingException", "slow down"),
        ]
        .concat(),
    ]
}

fn msgs() -> Vec<Msg> {
    vec![
        Msg::user("delete temp.txt"),
        Msg::assistant("on it").with_block(ContentBlock::ToolUse(ToolUse::new(
            "a",
            "delete_file",
            serde_json::json!({"path": "temp.txt"}),
        ))),
        Msg::tool_results([ToolResult::success("a", "delete_file", "deleted")]),
        Msg::assistant("done"),
    ]
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut out: Vec<Vec<u8>> = match target {
        "msg_json" => msgs()
            .iter()
            .map(|m| m.to_json().unwrap_or_default().into_bytes())
            .collect(),
        "sse_parser" | "openai_stream" => sse_openai(),
        "anthropic_stream" => sse_anthropic(),
        "responses_stream" => sse_responses(),
        "gemini_stream" => sse_gemini(),
        "bedrock_eventstream" => frames_bedrock(),
        "repair" => vec![
            serde_json::to_vec(&msgs()).unwrap_or_default(),
            serde_json::to_vec(&msgs()[..2]).unwrap_or_default(),
            vec![0, 1, 2, 3, 4, 5, 7, 2, 2, 9, 0, 0, 4, 1, 3, 2],
        ],
        "snapshot" => std::fs::read(root.join("../crates/reins-agent/tests/golden/paused_v1.json"))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    };
    if let Ok(dir) = std::fs::read_dir(root.join("corpus").join(target)) {
        out.extend(dir.flatten().filter_map(|e| std::fs::read(e.path()).ok()));
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if args.iter().any(|a| a == "--write-corpus") {
        for (name, _) in reins_fuzz::TARGETS {
            let dir = root.join("corpus").join(name);
            std::fs::create_dir_all(&dir).expect("create the corpus directory");
            for (i, s) in seeds(name).iter().enumerate() {
                std::fs::write(dir.join(format!("seed-{i}")), s).expect("write a seed");
            }
        }
        println!("seeds written to {}", root.join("corpus").display());
        return;
    }
    let secs: f64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(10.0);
    let seed = std::env::var("REINS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    println!("fuzz smoke: {secs} s in all, REINS_FUZZ_SEED={seed}");
    std::panic::set_hook(Box::new(|_| {}));
    let per = Duration::from_secs_f64(secs / reins_fuzz::TARGETS.len() as f64);
    let mut rng = Rng(seed);
    let mut total = 0u64;
    for (name, body) in reins_fuzz::TARGETS {
        let seeds = seeds(name);
        let start = Instant::now();
        let mut execs = 0u64;
        // Every seed as is first, then mutations until the time is up.
        let mut queue: Vec<Vec<u8>> = seeds.clone();
        while start.elapsed() < per || !queue.is_empty() {
            let input = queue.pop().unwrap_or_else(|| mutate(&mut rng, &seeds));
            let t = Instant::now();
            let r = std::panic::catch_unwind(|| body(&input));
            execs += 1;
            let took = t.elapsed();
            if r.is_err() || took > Duration::from_secs(1) {
                let dir = root.join("artifacts").join(name);
                let _ = std::fs::create_dir_all(&dir);
                let file = dir.join(format!("smoke-{seed}-{execs}"));
                let _ = std::fs::write(&file, &input);
                let what = if r.is_err() {
                    "panicked"
                } else {
                    "hung (over 1 s)"
                };
                eprintln!(
                    "fuzz smoke: {name} {what} on input saved to {} ({} bytes); rerun: \
                     REINS_FUZZ_SEED={seed}",
                    file.display(),
                    input.len()
                );
                if let Err(p) = r {
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                        .unwrap_or_default();
                    eprintln!("panic: {msg}");
                }
                std::process::exit(1);
            }
        }
        println!("fuzz smoke: {name}: {execs} executions, no panic, no hang");
        total += execs;
    }
    println!("fuzz smoke: {total} executions in all");
}
