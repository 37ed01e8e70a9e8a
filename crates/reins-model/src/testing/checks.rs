//! Checks and request fixtures a provider's own tests share: the request body
//! sent for a snapshot, the error a reply turns into, the empty-answer and key
//! contracts, and the pieces of a realistic conversation.

// A failed check panics, as `assert!` does: that is how a test reports it.
#![allow(clippy::panic)]

use std::fmt::Debug;

use reins_message::{ContentBlock, MediaSource, Msg, Role, ToolResult, ToolSpec, ToolUse, Usage};
use serde_json::{Value, json};

use super::{ProviderFixture, Reply};
use crate::{Accumulated, ChatModel, ChatRequest, FinishReason, ModelError};

pub(crate) fn ok<T, E: Debug>(result: Result<T, E>) -> T {
    match result {
        Ok(v) => v,
        Err(e) => panic!("expected success, got {e:?}"),
    }
}

pub(crate) fn err<T, E>(result: Result<T, E>) -> E {
    match result {
        Ok(_) => panic!("expected an error, got success"),
        Err(e) => e,
    }
}

/// The request every check sends: one user message, "hi".
pub(crate) fn hi() -> ChatRequest {
    ChatRequest::new(vec![Msg::user("hi")])
}

/// Sends `request` with the provider's model (changed by `configure`) to a server
/// that answers "ok", checks that exactly one request arrived as
/// `content-type: application/json` and that the answer was read, and returns the
/// body that was sent: the thing to snapshot.
///
/// # Panics
/// When any of those checks fails.
pub async fn sent_body<P: ProviderFixture>(
    provider: &P,
    request: ChatRequest,
    configure: impl FnOnce(P::Model) -> P::Model,
) -> Value {
    let server = provider.serve(provider.stream_reply(provider.text_answer("ok")));
    let done = ok(configure(provider.model_at(&server))
        .complete(request)
        .await);
    assert_eq!(done.message.text(), "ok");
    let received = server.requests();
    assert_eq!(received.len(), 1, "one request");
    assert_eq!(received[0].header("content-type"), Some("application/json"));
    ok(received[0].json())
}

/// The error `model.stream` returns for "hi" (before any chunk).
///
/// # Panics
/// When `stream` succeeds.
pub async fn stream_error<M: ChatModel + ?Sized>(model: &M) -> ModelError {
    err(model.stream(hi()).await)
}

/// The error the provider's `stream` returns when a server answers every request
/// with `reply`, and how many requests that server received (the attempts made,
/// with the kit's [`fast_retry`](super::fast_retry)).
///
/// # Panics
/// When `stream` succeeds.
pub async fn error_for<P: ProviderFixture>(provider: &P, reply: Reply) -> (ModelError, usize) {
    let server = provider.serve(reply);
    let e = stream_error(&provider.model_at(&server)).await;
    (e, server.request_count())
}

/// Completes "hi" with `model` and checks that the answer is the text `text`,
/// finished with [`FinishReason::Stop`], with exactly this `usage`. Returns the
/// answer for further checks.
///
/// # Panics
/// When any of those checks fails.
pub async fn expect_text_answer<M: ChatModel + ?Sized>(
    model: &M,
    text: &str,
    usage: Usage,
) -> Accumulated {
    let done = ok(model.complete(hi()).await);
    assert_eq!(done.message.text(), text);
    assert_eq!(done.finish_reason, Some(FinishReason::Stop));
    assert_eq!(done.usage, usage);
    done
}

/// Completes "hi" with `model` and checks the contract for an answer with nothing
/// in it (docs/providers.md, "Empty answers"): no error, no content,
/// [`Accumulated::is_empty_answer`], finished with [`FinishReason::Stop`]. Returns
/// the answer for further checks.
///
/// # Panics
/// When any of those checks fails.
pub async fn expect_empty_answer<M: ChatModel + ?Sized>(model: &M) -> Accumulated {
    let done = ok(model.complete(hi()).await);
    assert!(done.is_empty_answer(), "{:?}", done.message);
    assert_eq!(done.finish_reason, Some(FinishReason::Stop));
    assert!(done.message.content.is_empty(), "{:?}", done.message);
    done
}

/// For a model whose key comes from the environment variable `var` and which
/// says whether it has one (`has_key`, e.g. the provider's `has_api_key()`):
/// `has_key` is true exactly when `var` is set and not blank, and when it is not,
/// `stream` fails with [`ModelError::Auth`] naming `var` (the model points at the
/// real API, so any other outcome means it tried to go there).
///
/// # Panics
/// When either does not hold.
pub async fn assert_key_from_env<M: ChatModel + ?Sized>(model: &M, var: &str, has_key: bool) {
    let set = std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
    assert_eq!(has_key, set, "has_key against whether {var} is set");
    if !set {
        let e = stream_error(model).await;
        assert!(
            matches!(&e, ModelError::Auth { message } if message.contains(var)),
            "{e:?}"
        );
    }
}

/// Asserts that the `Debug` output of `value` hides `key` and says `<redacted>` in
/// its place (as `http::HttpSettings` does).
///
/// # Panics
/// When it does not.
pub fn assert_key_redacted(value: &impl Debug, key: &str) {
    let debug = format!("{value:?}");
    assert!(!debug.contains(key), "{debug}");
    assert!(debug.contains("<redacted>"), "{debug}");
}

/// Two tools for request fixtures: `get_weather` (a required `city`) and
/// `delete_file` (a required `path`).
pub fn weather_and_delete_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "get_weather",
            "Current weather for a city",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        ),
        ToolSpec::new(
            "delete_file",
            "Delete a file",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        ),
    ]
}

/// A user message for request fixtures: "And what is in this picture?" with two
/// images, one by URL and one inline (base64 PNG).
pub fn picture_question() -> Msg {
    Msg::user("And what is in this picture?")
        .with_block(ContentBlock::Image {
            source: MediaSource::url("https://example.com/cat.png"),
        })
        .with_block(ContentBlock::Image {
            source: MediaSource::base64("image/png", "iVBORw0KGgo="),
        })
}

/// A history for request fixtures in which a tool call's arguments did not parse:
/// the user asks to "write it"; the assistant says `before` and calls `write`
/// (call id `id`) with the text `{"path": ` (kept as `raw_input`, `input` null, as
/// the accumulator stores such a call); the tool result is the error "arguments
/// were not valid JSON". Providers must send it as valid JSON.
pub fn unparsed_call_round_trip(id: &str, before: Vec<ContentBlock>) -> Vec<Msg> {
    let call = ToolUse {
        id: id.to_owned(),
        name: "write".to_owned(),
        input: Value::Null,
        raw_input: Some("{\"path\": ".to_owned()),
    };
    let mut blocks = before;
    blocks.push(ContentBlock::ToolUse(call));
    vec![
        Msg::user("write it"),
        Msg::new(Role::Assistant, blocks),
        Msg::tool_results([ToolResult::error(
            id,
            "write",
            "arguments were not valid JSON",
        )]),
    ]
}

/// The conversation request snapshots are made of: a system prompt; a question that
/// needs two tools; the assistant's turn calling both, made by `assistant` from the
/// two calls (`get_weather` for Paris with id `ids[0]`, `delete_file` of `/tmp/x`
/// with id `ids[1]`); their results (a success, and a rejection with a note); a
/// [`picture_question`]; both tools offered ([`weather_and_delete_tools`]); no
/// options.
pub fn sample_conversation(
    ids: [&str; 2],
    assistant: impl FnOnce(ToolUse, ToolUse) -> Msg,
) -> ChatRequest {
    let weather = ToolUse::new(ids[0], "get_weather", json!({"city": "Paris"}));
    let delete = ToolUse::new(ids[1], "delete_file", json!({"path": "/tmp/x"}));
    ChatRequest::new(vec![
        Msg::system("You are a careful assistant."),
        Msg::user("What's the weather in Paris? Also clean up /tmp/x."),
        assistant(weather, delete),
        Msg::tool_results([
            ToolResult::success(ids[0], "get_weather", "18°C, cloudy"),
            ToolResult::rejected(ids[1], "delete_file", Some("keep it".into())),
        ]),
        picture_question(),
    ])
    .with_tools(weather_and_delete_tools())
}
