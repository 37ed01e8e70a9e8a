//! The `application/vnd.amazon.eventstream` framing that ConverseStream answers in.
//!
//! Each message is binary: a 12-byte prelude (total length, headers length, both
//! big-endian `u32`, then the CRC32 of those 8 bytes), the headers (name length
//! `u8`, name, value type `u8`, value), the payload (JSON for Converse), and the
//! CRC32 of everything before it. The headers that matter here are
//! `:message-type` (`event`, `exception` or `error`), `:event-type`,
//! `:exception-type`, `:error-code` and `:error-message`.
//!
//! Why a small hand-written decoder rather than `aws-smithy-eventstream`: the
//! framing is a page of specification, the decoder below is ~150 lines with both
//! CRCs checked and every length bounded, and it keeps the smithy runtime types out
//! of the provider's API; it is fuzzed (`fuzz/fuzz_targets/bedrock_eventstream.rs`)
//! and tested against frames built by [`encode`].

use std::collections::VecDeque;

/// The largest message accepted (the framing allows 16 MiB).
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// The largest headers section accepted (the framing allows 128 KiB).
pub const MAX_HEADERS: usize = 128 * 1024;

const PRELUDE: usize = 12;
const MIN_MESSAGE: usize = PRELUDE + 4;

/// A header value (the framing's ten types).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValue {
    /// Types 0 and 1.
    Bool(bool),
    /// Type 2.
    Byte(i8),
    /// Type 3.
    Short(i16),
    /// Type 4.
    Int(i32),
    /// Type 5.
    Long(i64),
    /// Type 6.
    Bytes(Vec<u8>),
    /// Type 7.
    String(String),
    /// Type 8 (milliseconds since the epoch).
    Timestamp(i64),
    /// Type 9.
    Uuid([u8; 16]),
}

/// One decoded message: its headers and payload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    /// The headers, in order.
    pub headers: Vec<(String, HeaderValue)>,
    /// The payload bytes.
    pub payload: Vec<u8>,
}

impl Message {
    /// The value of a string header.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.headers.iter().find_map(|(n, v)| match v {
            HeaderValue::String(s) if n == name => Some(s.as_str()),
            _ => None,
        })
    }
}

/// Why bytes are not an event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError(pub String);

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An incremental decoder: push bytes as they arrive, take whole messages out.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    failed: bool,
}

impl FrameDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes` and decodes every message now complete onto `out`.
    ///
    /// # Errors
    /// A bad prelude CRC, a bad message CRC, a length out of bounds or malformed
    /// headers; the decoder then stays failed.
    pub fn push(&mut self, bytes: &[u8], out: &mut VecDeque<Message>) -> Result<(), FrameError> {
        if self.failed {
            return Err(FrameError("the event stream already failed".into()));
        }
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        let result = loop {
            let rest = &self.buf[start..];
            match decode_one(rest) {
                Ok(Some((message, used))) => {
                    out.push_back(message);
                    start += used;
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.buf.drain(..start);
        if result.is_err() {
            self.failed = true;
            self.buf.clear();
        }
        result
    }

    /// Bytes received that do not yet make a whole message.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

fn be32(b: &[u8]) -> usize {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
}

/// One message from the front of `b`, with the bytes it used; `None` when `b`
/// holds only part of one.
fn decode_one(b: &[u8]) -> Result<Option<(Message, usize)>, FrameError> {
    if b.len() < PRELUDE {
        return Ok(None);
    }
    let total = be32(&b[0..4]);
    let headers_len = be32(&b[4..8]);
    let prelude_crc = be32(&b[8..12]);
    if crc32fast::hash(&b[0..8]) as usize != prelude_crc {
        return Err(FrameError("event stream prelude CRC mismatch".into()));
    }
    if !(MIN_MESSAGE..=MAX_MESSAGE).contains(&total) {
        return Err(FrameError(format!(
            "event stream message length {total} out of bounds"
        )));
    }
    if headers_len > MAX_HEADERS || headers_len > total - MIN_MESSAGE {
        return Err(FrameError(format!(
            "event stream headers length {headers_len} out of bounds"
        )));
    }
    if b.len() < total {
        return Ok(None);
    }
    let message_crc = be32(&b[total - 4..total]);
    if crc32fast::hash(&b[..total - 4]) as usize != message_crc {
        return Err(FrameError("event stream message CRC mismatch".into()));
    }
    let headers = decode_headers(&b[PRELUDE..PRELUDE + headers_len])?;
    let payload = b[PRELUDE + headers_len..total - 4].to_vec();
    Ok(Some((Message { headers, payload }, total)))
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], FrameError> {
    if b.len() < n {
        return Err(FrameError("event stream header cut short".into()));
    }
    let (head, tail) = b.split_at(n);
    *b = tail;
    Ok(head)
}

fn fixed<const N: usize>(b: &mut &[u8]) -> Result<[u8; N], FrameError> {
    let mut out = [0u8; N];
    out.copy_from_slice(take(b, N)?);
    Ok(out)
}

fn decode_headers(mut b: &[u8]) -> Result<Vec<(String, HeaderValue)>, FrameError> {
    let mut headers = Vec::new();
    while !b.is_empty() {
        let name_len = take(&mut b, 1)?[0] as usize;
        let name = String::from_utf8(take(&mut b, name_len)?.to_vec())
            .map_err(|_| FrameError("event stream header name is not UTF-8".into()))?;
        let kind = take(&mut b, 1)?[0];
        let value = match kind {
            0 => HeaderValue::Bool(true),
            1 => HeaderValue::Bool(false),
            2 => HeaderValue::Byte(i8::from_be_bytes(fixed(&mut b)?)),
            3 => HeaderValue::Short(i16::from_be_bytes(fixed(&mut b)?)),
            4 => HeaderValue::Int(i32::from_be_bytes(fixed(&mut b)?)),
            5 => HeaderValue::Long(i64::from_be_bytes(fixed(&mut b)?)),
            6 | 7 => {
                let len = u16::from_be_bytes(fixed(&mut b)?) as usize;
                let data = take(&mut b, len)?.to_vec();
                if kind == 6 {
                    HeaderValue::Bytes(data)
                } else {
                    HeaderValue::String(String::from_utf8(data).map_err(|_| {
                        FrameError(format!("event stream header `{name}` is not UTF-8"))
                    })?)
                }
            }
            8 => HeaderValue::Timestamp(i64::from_be_bytes(fixed(&mut b)?)),
            9 => HeaderValue::Uuid(fixed(&mut b)?),
            other => {
                return Err(FrameError(format!(
                    "event stream header `{name}` has unknown type {other}"
                )));
            }
        };
        headers.push((name, value));
    }
    Ok(headers)
}

/// Encodes a message with string headers (for tests, fixtures and fuzzing seeds).
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (name, value) in headers {
        h.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        h.extend_from_slice(&name.as_bytes()[..name.len().min(255)]);
        h.push(7);
        let len = u16::try_from(value.len()).unwrap_or(u16::MAX);
        h.extend_from_slice(&len.to_be_bytes());
        h.extend_from_slice(&value.as_bytes()[..usize::from(len)]);
    }
    let total = PRELUDE + h.len() + payload.len() + 4;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&u32::try_from(total).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&u32::try_from(h.len()).unwrap_or(u32::MAX).to_be_bytes());
    let prelude_crc = crc32fast::hash(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// An `event` message of this `:event-type` with a JSON payload.
pub fn encode_event(event_type: &str, payload: &serde_json::Value) -> Vec<u8> {
    encode(
        &[
            (":event-type", event_type),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

/// An `exception` message of this `:exception-type` with a JSON payload.
pub fn encode_exception(exception_type: &str, message: &str) -> Vec<u8> {
    encode(
        &[
            (":exception-type", exception_type),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        serde_json::json!({ "message": message })
            .to_string()
            .as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_trips_in_any_split() {
        let a = encode_event("messageStart", &serde_json::json!({"role": "assistant"}));
        let b = encode_exception("throttlingException", "slow down");
        let all = [a.clone(), b].concat();
        for cut in 0..all.len() {
            let mut d = FrameDecoder::new();
            let mut out = VecDeque::new();
            d.push(&all[..cut], &mut out).unwrap();
            d.push(&all[cut..], &mut out).unwrap();
            assert_eq!(out.len(), 2, "cut at {cut}");
            assert_eq!(out[0].header_str(":event-type"), Some("messageStart"));
            assert_eq!(out[1].header_str(":message-type"), Some("exception"));
            assert_eq!(d.pending(), 0);
        }
    }

    #[test]
    fn every_flipped_byte_is_caught() {
        let a = encode_event(
            "messageStop",
            &serde_json::json!({"stopReason": "end_turn"}),
        );
        for i in 0..a.len() {
            let mut bad = a.clone();
            bad[i] ^= 0x20;
            let mut out = VecDeque::new();
            let r = FrameDecoder::new().push(&bad, &mut out);
            assert!(
                r.is_err() || out.is_empty(),
                "byte {i} flipped went unnoticed"
            );
        }
    }

    #[test]
    fn all_header_types_decode() {
        let mut h = Vec::new();
        for (kind, value) in [
            (0u8, vec![]),
            (1, vec![]),
            (2, vec![1]),
            (3, vec![0, 2]),
            (4, vec![0, 0, 0, 3]),
            (5, vec![0; 8]),
            (6, vec![0, 1, 9]),
            (8, vec![0; 8]),
            (9, vec![7; 16]),
        ] {
            h.extend_from_slice(&[1, b'x', kind]);
            h.extend_from_slice(&value);
        }
        let headers = decode_headers(&h).unwrap();
        assert_eq!(headers.len(), 9);
        assert_eq!(headers[2].1, HeaderValue::Byte(1));
        assert_eq!(headers[6].1, HeaderValue::Bytes(vec![9]));
        assert!(decode_headers(&[1, b'x', 10]).is_err());
        assert!(decode_headers(&[5, b'x']).is_err());
    }
}
