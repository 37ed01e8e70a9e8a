#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! For any split of the same stream into chunks, `MessageAccumulator` builds the
//! same message.

use proptest::prelude::*;
use reins_message::{Msg, Usage};
use reins_model::{ChatChunk, FinishReason, MessageAccumulator};

/// A logical stream event, before it is cut into chunks.
#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Thinking(String),
    Signature(String),
    Start(usize),
    Args(usize, String),
    Usage(u64, u64),
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        "[a-zé😀 {}\":,]{1,12}".prop_map(Piece::Text),
        "[a-z ]{1,12}".prop_map(Piece::Thinking),
        "[A-Za-z0-9]{1,8}".prop_map(Piece::Signature),
        (0usize..4).prop_map(Piece::Start),
        ((0usize..4), "[a-z0-9{}\":,\\[\\] ]{0,10}").prop_map(|(i, s)| Piece::Args(i, s)),
        ((0u64..100), (0u64..100)).prop_map(|(a, b)| Piece::Usage(a, b)),
    ]
}

/// Cuts each piece into chunks at the given (char) cut points.
fn chunked(pieces: &[Piece], cuts: &[usize]) -> Vec<ChatChunk> {
    let mut out = Vec::new();
    let mut started = [false; 4];
    let mut k = 0;
    let mut cut = |s: &str, mk: &mut dyn FnMut(String)| {
        let chars: Vec<char> = s.chars().collect();
        let n = cuts.get(k).copied().unwrap_or(1).max(1);
        k += 1;
        if chars.is_empty() {
            mk(String::new());
        }
        for c in chars.chunks(n) {
            mk(c.iter().collect());
        }
    };
    for p in pieces {
        match p {
            Piece::Text(t) => cut(t, &mut |text| out.push(ChatChunk::TextDelta { text })),
            Piece::Thinking(t) => cut(t, &mut |text| out.push(ChatChunk::ThinkingDelta { text })),
            Piece::Signature(t) => cut(t, &mut |signature| {
                out.push(ChatChunk::ThinkingSignature { signature })
            }),
            Piece::Start(i) => {
                if !started[*i] {
                    started[*i] = true;
                    out.push(ChatChunk::ToolCallStart {
                        index: *i,
                        id: format!("call_{i}"),
                        name: format!("tool_{i}"),
                    });
                }
            }
            Piece::Args(i, s) => {
                if started[*i] {
                    cut(s, &mut |fragment| {
                        out.push(ChatChunk::ToolArgsDelta {
                            index: *i,
                            fragment,
                        })
                    });
                }
            }
            Piece::Usage(a, b) => out.push(ChatChunk::Usage(Usage {
                input_tokens: *a,
                output_tokens: *b,
                ..Usage::default()
            })),
        }
    }
    out.push(ChatChunk::Finish {
        reason: FinishReason::Stop,
    });
    out
}

fn accumulate(chunks: &[ChatChunk]) -> (Msg, Usage) {
    let mut acc = MessageAccumulator::new();
    for c in chunks {
        acc.push(c).unwrap();
    }
    let done = acc.finish();
    let mut m = done.message;
    m.id = "normalized".into();
    m.created_at = chrono_epoch();
    (m, done.usage)
}

fn chrono_epoch() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::<chrono::Utc>::UNIX_EPOCH
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_chunking_gives_the_same_message(
        pieces in prop::collection::vec(piece(), 0..40),
        cuts_a in prop::collection::vec(1usize..6, 40),
        cuts_b in prop::collection::vec(1usize..6, 40),
    ) {
        let whole = accumulate(&chunked(&pieces, &[usize::MAX; 40]));
        prop_assert_eq!(&accumulate(&chunked(&pieces, &cuts_a)), &whole);
        prop_assert_eq!(&accumulate(&chunked(&pieces, &cuts_b)), &whole);
    }

    #[test]
    fn accumulator_never_panics_on_arbitrary_chunks(
        pieces in prop::collection::vec(piece(), 0..40),
    ) {
        let mut acc = MessageAccumulator::new();
        for p in pieces {
            let c = match p {
                Piece::Text(text) => ChatChunk::TextDelta { text },
                Piece::Thinking(text) => ChatChunk::ThinkingDelta { text },
                Piece::Signature(signature) => ChatChunk::ThinkingSignature { signature },
                Piece::Start(index) => ChatChunk::ToolCallStart { index, id: "x".into(), name: "y".into() },
                Piece::Args(index, fragment) => ChatChunk::ToolArgsDelta { index, fragment },
                Piece::Usage(a, _) => ChatChunk::Usage(Usage { input_tokens: a, ..Usage::default() }),
            };
            let _ = acc.push(&c);
        }
        let m = acc.finish().message;
        for u in m.tool_uses() {
            if u.raw_input.is_some() {
                prop_assert!(u.input.is_null());
            }
        }
    }
}

proptest! {
    #[test]
    fn sse_parser_any_split_same_events(input in prop::collection::vec(prop::sample::select(b"data:event: id\r\n\xC3\xA9\xFFx".to_vec()), 0..300), cut in 0usize..300) {
        use reins_model::sse::SseParser;
        let mut whole = SseParser::new();
        let a = whole.push(&input);
        let cut = cut.min(input.len());
        let mut split = SseParser::new();
        let mut b = split.push(&input[..cut]);
        b.extend(split.push(&input[cut..]));
        prop_assert_eq!(a, b);
    }
}
