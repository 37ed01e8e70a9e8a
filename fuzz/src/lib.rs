//! The bodies of reins' fuzz targets, as plain functions, so they run under
//! cargo-fuzz (libFuzzer, nightly) and under the stable smoke runner
//! (`src/bin/smoke.rs`) alike. Each takes arbitrary bytes, must never panic or hang,
//! and checks a property where there is one:
//!
//! | target             | entry point                                   | property checked |
//! |--------------------|-----------------------------------------------|------------------|
//! | `msg_json`         | `Msg::from_json`                              | accepted messages round-trip through `to_json` |
//! | `sse_parser`       | `reins_model::sse::SseParser`                 | the events do not depend on how the bytes are split |
//! | `openai_stream`    | `reins_openai::decode::chunk_stream`          | any body yields chunks then at most one error; the accumulator takes them |
//! | `anthropic_stream` | `reins_anthropic::decode::chunk_stream`       | the same |
//! | `responses_stream` | `reins_openai::responses::decode::chunk_stream` | the same |
//! | `gemini_stream`    | `reins_gemini::decode::chunk_stream`          | the same |
//! | `bedrock_eventstream` | `reins_bedrock::eventstream::FrameDecoder`, `reins_bedrock::decode::chunk_stream` | the frames do not depend on how the bytes are split; the chunk stream as above |
//! | `repair`           | `sanitize_for_request`, `sanitize_after_interrupt` | with unique tool use ids, the output is provider-valid, and repairing it again changes nothing |
//! | `snapshot`         | `SessionSnapshot::from_json`                  | accepted snapshots round-trip |
#![forbid(unsafe_code)]

use futures::StreamExt;
use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolUse};
use reins_model::sse::SseParser;
use reins_model::{ChatChunk, MessageAccumulator, ModelError};

/// `Msg::from_json` on the bytes (as UTF-8); an accepted message round-trips.
pub fn msg_json(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(m) = Msg::from_json(s) {
        let again = m.to_json().expect("an accepted Msg serializes");
        let back = Msg::from_json(&again).expect("a serialized Msg parses");
        assert_eq!(back, m, "Msg JSON does not round-trip");
    }
}

/// Splits `data` into pieces at positions chosen by its own bytes.
fn pieces(data: &[u8]) -> Vec<&[u8]> {
    let Some((&seed, rest)) = data.split_first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut rest = rest;
    let mut step = usize::from(seed % 17) + 1;
    while !rest.is_empty() {
        let n = step.min(rest.len());
        out.push(&rest[..n]);
        rest = &rest[n..];
        step = (step * 7 + 3) % 23 + 1;
    }
    out
}

/// The SSE parser: fed whole, byte by byte, or in pieces, it yields the same events.
pub fn sse_parser(data: &[u8]) {
    let body = data.get(1..).unwrap_or_default();
    let whole = SseParser::new().push(body);
    let mut p = SseParser::new();
    let mut split = Vec::new();
    for piece in pieces(data) {
        split.extend(p.push(piece));
    }
    assert_eq!(whole, split, "events depend on how the bytes were split");
    let mut p = SseParser::new();
    let mut bytewise = Vec::new();
    for b in body {
        bytewise.extend(p.push(std::slice::from_ref(b)));
    }
    assert_eq!(whole, bytewise, "events differ when fed byte by byte");
}

/// Drives a provider's chunk stream over `data` (split into pieces) and feeds every
/// chunk to the accumulator. After an error the stream must end.
fn drive<S>(stream: S)
where
    S: futures::Stream<Item = Result<ChatChunk, ModelError>> + Unpin,
{
    futures::executor::block_on(async move {
        let mut stream = stream;
        let mut acc = MessageAccumulator::new();
        let mut failed = false;
        while let Some(item) = stream.next().await {
            assert!(!failed, "the stream went on after an error");
            match item {
                Ok(chunk) => {
                    if acc.push(&chunk).is_err() {
                        failed = true;
                    }
                }
                Err(_) => failed = true,
            }
        }
        let done = acc.finish();
        // Whatever came out is a message whose tool uses have ids and names.
        for u in done.message.tool_uses() {
            let _ = (&u.id, &u.name, &u.input, &u.raw_input);
        }
    });
}

fn body(data: &[u8]) -> futures::stream::Iter<std::vec::IntoIter<reins_model::Result<Vec<u8>>>> {
    let chunks: Vec<reins_model::Result<Vec<u8>>> =
        pieces(data).into_iter().map(|p| Ok(p.to_vec())).collect();
    futures::stream::iter(chunks)
}

/// The OpenAI-compatible stream decoder over arbitrary bytes.
pub fn openai_stream(data: &[u8]) {
    drive(reins_openai::decode::chunk_stream(body(data)));
}

/// The Anthropic stream decoder over arbitrary bytes.
pub fn anthropic_stream(data: &[u8]) {
    drive(reins_anthropic::decode::chunk_stream(body(data)));
}

/// The OpenAI Responses API stream decoder over arbitrary bytes.
pub fn responses_stream(data: &[u8]) {
    drive(reins_openai::responses::decode::chunk_stream(body(data)));
}

/// The Gemini stream decoder over arbitrary bytes.
pub fn gemini_stream(data: &[u8]) {
    drive(reins_gemini::decode::chunk_stream(body(data)));
}

/// The Bedrock event-stream frame decoder and ConverseStream decoder over
/// arbitrary bytes: the frames (or the error) do not depend on how the bytes are
/// split, and the chunk stream behaves as every provider's.
pub fn bedrock_eventstream(data: &[u8]) {
    use reins_bedrock::eventstream::FrameDecoder;
    let rest = data.get(1..).unwrap_or_default();
    let decode = |parts: Vec<&[u8]>| {
        let mut d = FrameDecoder::new();
        let mut out = std::collections::VecDeque::new();
        for p in parts {
            if d.push(p, &mut out).is_err() {
                return (out, true);
            }
        }
        (out, false)
    };
    let whole = decode(vec![rest]);
    let split = decode(pieces(data));
    assert_eq!(whole, split, "frames depend on how the bytes were split");
    let chunks: Vec<reins_model::Result<bytes::Bytes>> = pieces(data)
        .into_iter()
        .map(|p| Ok(bytes::Bytes::copy_from_slice(p)))
        .collect();
    drive(reins_bedrock::decode::chunk_stream(futures::stream::iter(chunks)));
}

/// Builds a transcript from bytes: each pair of bytes picks a message shape. Tool
/// uses get fresh ids (as the agent guarantees); results name earlier ids, later ids
/// or unknown ones, so orphans, duplicates, misplaced and missing results are common.
pub fn transcript(data: &[u8]) -> Vec<Msg> {
    let mut msgs = Vec::new();
    let mut next = 0u32;
    let mut bytes = data.iter().copied();
    while let Some(op) = bytes.next() {
        let arg = bytes.next().unwrap_or(0);
        // An id a result may name: one of the last few uses, or one never used.
        let pick = |k: u8, next: u32| -> String {
            let back = u32::from(k % 5);
            if back == 4 || next == 0 {
                format!("x{k}")
            } else {
                format!("u{}", next.saturating_sub(back + 1))
            }
        };
        let m = match op % 8 {
            0 => Msg::user(format!("u{arg}")),
            1 => Msg::assistant(format!("t{arg}")),
            2 | 3 => {
                let mut m = Msg::assistant(if arg & 1 == 0 { "" } else { "calling" });
                for k in 0..(arg % 4) {
                    m = m.with_block(ContentBlock::ToolUse(ToolUse::new(
                        format!("u{next}"),
                        "tool",
                        serde_json::json!({ "k": k }),
                    )));
                    next += 1;
                }
                m
            }
            4 | 5 => Msg::tool_results(
                (0..(arg % 3) + 1)
                    .map(|k| ToolResult::success(pick(arg.wrapping_add(k), next), "tool", "ok"))
                    .collect::<Vec<_>>(),
            ),
            6 => Msg::system(format!("s{arg}")),
            _ => Msg::user("with a stray result").with_block(ContentBlock::ToolResult(
                ToolResult::success(pick(arg, next), "tool", "stray"),
            )),
        };
        msgs.push(m);
    }
    msgs
}

/// Whether the transcript's tool use ids are non-empty and unique (the agent renames
/// a model's reused ids before storing; repair assumes it).
pub fn unique_use_ids(messages: &[Msg]) -> bool {
    let mut seen = std::collections::HashSet::new();
    messages
        .iter()
        .flat_map(|m| m.tool_uses())
        .all(|u| !u.id.is_empty() && seen.insert(u.id.as_str()))
}

/// Whether every tool use has exactly one result after it and before the next
/// assistant message, and no result lacks its use.
pub fn provider_valid(messages: &[Msg]) -> bool {
    let mut open: Vec<&str> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for m in messages {
        if m.role == Role::Assistant {
            if !open.is_empty() {
                return false;
            }
            for u in m.tool_uses() {
                if !seen.insert(u.id.as_str()) {
                    return false;
                }
                open.push(&u.id);
            }
        } else {
            if m.role != Role::Tool && m.has_tool_results() {
                return false;
            }
            for r in m.tool_results_iter() {
                match open.iter().position(|id| *id == r.id) {
                    Some(p) => {
                        open.remove(p);
                    }
                    None => return false,
                }
            }
            if m.role == Role::User && !open.is_empty() {
                return false;
            }
        }
    }
    true
}

/// Transcript repair on any transcript: provider-valid output, and idempotent.
pub fn repair(data: &[u8]) {
    let msgs = match std::str::from_utf8(data)
        .ok()
        .and_then(|s| serde_json::from_str::<Vec<Msg>>(s).ok())
    {
        Some(m) => m,
        None => transcript(data),
    };
    let (fixed, _) = reins_memory::sanitize_for_request(&msgs);
    if !unique_use_ids(&msgs) {
        // Outside repair's contract (see `unique_use_ids`): it must only not panic.
        let _ = reins_memory::sanitize_after_interrupt(&msgs);
        return;
    }
    assert!(
        provider_valid(&fixed),
        "sanitize_for_request left an invalid transcript: {fixed:#?}"
    );
    let (again, report) = reins_memory::sanitize_for_request(&fixed);
    assert!(
        report.is_empty(),
        "a second repair changed things: {report:?}"
    );
    assert_eq!(again, fixed);
    let (after, _) = reins_memory::sanitize_after_interrupt(&msgs);
    let (again, report) = reins_memory::sanitize_after_interrupt(&after);
    assert!(
        report.is_empty(),
        "a second interrupt repair changed things: {report:?}"
    );
    assert_eq!(again, after);
}

/// The session snapshot loader; accepted snapshots round-trip.
pub fn snapshot(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(snap) = reins_agent::SessionSnapshot::from_json(s) {
        let json = snap.to_json().expect("an accepted snapshot serializes");
        let back =
            reins_agent::SessionSnapshot::from_json(&json).expect("a serialized snapshot loads");
        assert_eq!(
            back.to_json().expect("serializes"),
            json,
            "snapshots do not round-trip"
        );
    }
}

/// A target's body.
pub type Target = fn(&[u8]);

/// Every target by name, for the smoke runner.
pub const TARGETS: [(&str, Target); 9] = [
    ("msg_json", msg_json),
    ("sse_parser", sse_parser),
    ("openai_stream", openai_stream),
    ("anthropic_stream", anthropic_stream),
    ("responses_stream", responses_stream),
    ("gemini_stream", gemini_stream),
    ("bedrock_eventstream", bedrock_eventstream),
    ("repair", repair),
    ("snapshot", snapshot),
];
