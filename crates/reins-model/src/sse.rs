//! Server-sent events: an incremental parser ([`SseParser`]) and the stream adapter
//! providers build their [`ChatStream`](crate::ChatStream)s with ([`SseChunkStream`]).
//!
//! The parser follows the WHATWG event-stream rules: lines end in `\n`, `\r\n` or
//! `\r`; `data:` lines are joined with `\n`; a blank line ends an event; lines
//! starting with `:` are comments; an unfinished event at the end is dropped. It
//! takes bytes in any split, never panics, and replaces invalid UTF-8.
//!
//! ```
//! use reins_model::sse::SseParser;
//!
//! let mut p = SseParser::new();
//! assert!(p.push(b"event: ping\ndata: {\"a\"").is_empty());
//! let events = p.push(b":1}\r\n\r\n: a comment\n");
//! assert_eq!(events.len(), 1);
//! assert_eq!(events[0].event, "ping");
//! assert_eq!(events[0].data, "{\"a\":1}");
//! ```

use std::collections::VecDeque;
use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};

use crate::{ChatChunk, ModelError, Result};

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field; empty when the event named no type.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The `id:` field, when there was one.
    pub id: Option<String>,
}

/// An incremental server-sent-events parser: bytes in, events out.
#[derive(Debug, Default, Clone)]
pub struct SseParser {
    line: Vec<u8>,
    after_cr: bool,
    started: bool,
    event: String,
    data: String,
    has_data: bool,
    id: Option<String>,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the events they completed.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.push_with(bytes, |e| out.push(e));
        out
    }

    /// Feeds bytes, calling `on_event` for each event they complete (no allocation
    /// beyond the events themselves).
    pub fn push_with(&mut self, mut bytes: &[u8], mut on_event: impl FnMut(SseEvent)) {
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[0] == b'\n' {
                    bytes = &bytes[1..];
                    continue;
                }
            }
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(pos) => {
                    self.after_cr = bytes[pos] == b'\r';
                    if self.line.is_empty() {
                        self.process_line(&bytes[..pos], &mut on_event);
                    } else {
                        self.line.extend_from_slice(&bytes[..pos]);
                        let line = std::mem::take(&mut self.line);
                        self.process_line(&line, &mut on_event);
                        self.line = line;
                        self.line.clear();
                    }
                    bytes = &bytes[pos + 1..];
                }
                None => {
                    self.line.extend_from_slice(bytes);
                    bytes = &[];
                }
            }
        }
    }

    fn process_line(&mut self, mut line: &[u8], on_event: &mut impl FnMut(SseEvent)) {
        if !self.started {
            self.started = true;
            if let Some(rest) = line.strip_prefix(b"\xEF\xBB\xBF") {
                line = rest;
            }
        }
        if line.is_empty() {
            self.dispatch(on_event);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.has_data = true;
                push_lossy(&mut self.data, value);
            }
            b"event" => {
                self.event.clear();
                push_lossy(&mut self.event, value);
            }
            b"id" if !value.contains(&0) => {
                let mut id = String::new();
                push_lossy(&mut id, value);
                self.id = Some(id);
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, on_event: &mut impl FnMut(SseEvent)) {
        if !self.has_data {
            self.event.clear();
            return;
        }
        self.has_data = false;
        on_event(SseEvent {
            event: std::mem::take(&mut self.event),
            data: std::mem::take(&mut self.data),
            id: self.id.clone(),
        });
    }
}

fn push_lossy(out: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => out.push_str(s),
        Err(_) => out.push_str(&String::from_utf8_lossy(bytes)),
    }
}

/// Turns a provider's events into [`ChatChunk`]s; plugged into [`SseChunkStream`].
pub trait SseDecoder: Send {
    /// Handles one event, pushing any chunks it yields onto `out`. Returns
    /// `Ok(true)` when the response is complete (the rest of the body is ignored),
    /// and an error for an error event or an event that cannot be understood (the
    /// stream yields the chunks already pushed, then the error, then ends).
    fn decode(&mut self, event: &SseEvent, out: &mut VecDeque<ChatChunk>) -> Result<bool>;

    /// Called when the body ends before [`decode`](Self::decode) reported completion:
    /// returns `Ok` when what arrived is a whole response, or the error to yield
    /// (usually [`ModelError::MalformedStream`]).
    fn end(&mut self, out: &mut VecDeque<ChatChunk>) -> Result<()>;
}

/// A [`ChatChunk`] stream over a byte stream of server-sent events.
///
/// Yields the decoder's chunks in order; after an error item it ends. Optionally
/// fails with [`ModelError::Timeout`] when the body stays silent longer than an idle
/// timeout (needs a Tokio runtime with timers).
pub struct SseChunkStream<S, D> {
    body: S,
    parser: SseParser,
    decoder: D,
    pending: VecDeque<ChatChunk>,
    terminal: Option<ModelError>,
    finished: bool,
    idle: Option<(Duration, Pin<Box<tokio::time::Sleep>>)>,
}

impl<S, D> std::fmt::Debug for SseChunkStream<S, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseChunkStream")
            .field("pending", &self.pending.len())
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl<S, B, D> SseChunkStream<S, D>
where
    S: Stream<Item = Result<B>> + Unpin + Send,
    B: AsRef<[u8]>,
    D: SseDecoder + Unpin,
{
    /// A stream decoding `body` with `decoder`.
    pub fn new(body: S, decoder: D) -> Self {
        Self {
            body,
            parser: SseParser::new(),
            decoder,
            pending: VecDeque::new(),
            terminal: None,
            finished: false,
            idle: None,
        }
    }

    /// Fails the stream with [`ModelError::Timeout`] when no bytes arrive for `d`.
    #[must_use]
    pub fn with_idle_timeout(mut self, d: Duration) -> Self {
        self.idle = Some((d, Box::pin(tokio::time::sleep(d))));
        self
    }

    /// Waits for the first chunk of output (text, thinking, a tool call or the
    /// finish; usage reports alone do not count). An error before it is returned
    /// here, so the caller can retry the request; otherwise the stream, with
    /// everything read so far still in it.
    ///
    /// # Errors
    /// The first error, when it comes before any output.
    pub async fn ready(mut self) -> Result<Self> {
        let mut held = Vec::new();
        loop {
            match self.next().await {
                Some(Ok(ChatChunk::Usage(u))) => held.push(ChatChunk::Usage(u)),
                Some(Ok(chunk)) => {
                    held.push(chunk);
                    break;
                }
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        for chunk in held.into_iter().rev() {
            self.pending.push_front(chunk);
        }
        Ok(self)
    }

    fn feed(&mut self, bytes: &[u8]) {
        let Self {
            parser,
            decoder,
            pending,
            terminal,
            finished,
            ..
        } = self;
        parser.push_with(bytes, |event| {
            if *finished || terminal.is_some() {
                return;
            }
            match decoder.decode(&event, pending) {
                Ok(true) => *finished = true,
                Ok(false) => {}
                Err(e) => *terminal = Some(e),
            }
        });
    }
}

impl<S, B, D> Stream for SseChunkStream<S, D>
where
    S: Stream<Item = Result<B>> + Unpin + Send,
    B: AsRef<[u8]>,
    D: SseDecoder + Unpin,
{
    type Item = Result<ChatChunk>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(chunk) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(chunk)));
            }
            if let Some(e) = this.terminal.take() {
                this.finished = true;
                this.idle = None;
                return Poll::Ready(Some(Err(e)));
            }
            if this.finished {
                this.idle = None;
                return Poll::Ready(None);
            }
            match this.body.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(bytes))) => {
                    if let Some((d, sleep)) = &mut this.idle {
                        sleep.as_mut().reset(tokio::time::Instant::now() + *d);
                    }
                    this.feed(bytes.as_ref());
                }
                Poll::Ready(Some(Err(e))) => this.terminal = Some(e),
                Poll::Ready(None) => {
                    if let Err(e) = this.decoder.end(&mut this.pending) {
                        this.terminal = Some(e);
                    }
                    this.finished = true;
                }
                Poll::Pending => {
                    if let Some((d, sleep)) = &mut this.idle {
                        if sleep.as_mut().poll(cx).is_ready() {
                            this.terminal = Some(ModelError::Timeout(format!(
                                "no data from the provider for {:.1}s",
                                d.as_secs_f64()
                            )));
                            continue;
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        chunks.iter().flat_map(|c| p.push(c)).collect()
    }

    #[test]
    fn parses_fields_line_endings_and_comments() {
        let evs = all(&[b"\xEF\xBB\xBFdata: a\rdata:b\r\n\r\n:c\n\nevent:x\nid: 7\ndata\n\n"]);
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].data, "a\nb");
        assert_eq!(evs[0].event, "");
        assert_eq!(evs[1].event, "x");
        assert_eq!(evs[1].data, "");
        assert_eq!(evs[1].id.as_deref(), Some("7"));
    }

    #[test]
    fn any_split_gives_the_same_events() {
        let input: &[u8] = b"event: a\r\ndata: {\"x\": \"\xC3\xA9\"}\r\n\r\ndata: [DONE]\n\n";
        let whole = all(&[input]);
        assert_eq!(whole.len(), 2);
        for i in 0..input.len() {
            for j in i..input.len() {
                assert_eq!(all(&[&input[..i], &input[i..j], &input[j..]]), whole);
            }
        }
    }

    #[test]
    fn unfinished_events_are_dropped_and_bad_utf8_is_replaced() {
        let evs = all(&[b"data: \xFF\n\ndata: cut"]);
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].data, "\u{FFFD}");
    }

    /// Each event's data is a chunk as JSON; `err` fails the stream.
    struct JsonChunks;

    impl SseDecoder for JsonChunks {
        fn decode(&mut self, e: &SseEvent, out: &mut VecDeque<ChatChunk>) -> Result<bool> {
            if e.data == "err" {
                return Err(ModelError::Server {
                    status: 0,
                    message: "boom".into(),
                });
            }
            out.push_back(
                serde_json::from_str(&e.data)
                    .map_err(|e| ModelError::MalformedStream(e.to_string()))?,
            );
            Ok(false)
        }
        fn end(&mut self, _: &mut VecDeque<ChatChunk>) -> Result<()> {
            Ok(())
        }
    }

    fn body(s: &'static str) -> impl Stream<Item = Result<&'static [u8]>> + Unpin + Send {
        futures::stream::iter([Ok(s.as_bytes())])
    }

    #[tokio::test]
    async fn ready_holds_usage_and_returns_an_error_before_output() {
        let usage = "data: {\"type\":\"usage\",\"input_tokens\":3}\n\n";
        let text = "data: {\"type\":\"text_delta\",\"text\":\"hi\"}\n\n";
        let s = SseChunkStream::new(body(usage), JsonChunks)
            .ready()
            .await
            .unwrap();
        assert_eq!(s.collect::<Vec<_>>().await.len(), 1);

        let both: &'static str = Box::leak(format!("{usage}{text}data: err\n\n").into_boxed_str());
        let s = SseChunkStream::new(body(both), JsonChunks)
            .ready()
            .await
            .unwrap();
        let items: Vec<_> = s.collect().await;
        assert_eq!(items.len(), 3);
        assert!(matches!(items[0], Ok(ChatChunk::Usage(_))));
        assert!(items[2].is_err());

        let early: &'static str = Box::leak(format!("{usage}data: err\n\n{text}").into_boxed_str());
        let err = SseChunkStream::new(body(early), JsonChunks)
            .ready()
            .await
            .unwrap_err();
        assert!(matches!(err, ModelError::Server { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn silence_longer_than_the_idle_timeout_fails_the_stream() {
        let silent = futures::stream::pending::<Result<&'static [u8]>>();
        let mut s =
            SseChunkStream::new(silent, JsonChunks).with_idle_timeout(Duration::from_secs(5));
        assert!(matches!(s.next().await, Some(Err(ModelError::Timeout(_)))));
        assert!(s.next().await.is_none());
    }
}
