//! # custom_provider — a ChatModel in forty lines
//!
//! Any model plugs into reins by implementing `ChatModel`: a name, and `stream`,
//! which turns a `ChatRequest` into a stream of `ChatChunk`s (text deltas, tool call
//! starts and argument deltas, usage, a finish reason). reins folds the chunks into
//! the final message itself, so a provider only translates.
//!
//! `RuleModel` below is a tiny rule-based "model": asked about the weather it calls
//! the `get_weather` tool; given a tool result it reports it; anything else it echoes,
//! one word per chunk. Wrapping a real HTTP API looks the same, with the chunks
//! parsed from the provider's stream (see `reins::openai` and `reins::anthropic`).
//!
//! Offline. Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example custom_provider
//! ```

// Everything comes from the facade: no `async-trait` or `futures` versions to match.
use reins::futures::stream;
use reins::model::{ChatChunk, ChatRequest, ChatStream, FinishReason};
use reins::prelude::*;

/// Rules instead of weights.
struct RuleModel;

#[async_trait]
impl ChatModel for RuleModel {
    fn model_name(&self) -> &str {
        "rule-model-1"
    }

    async fn stream(&self, request: ChatRequest) -> reins::model::Result<ChatStream> {
        let last = request
            .messages
            .last()
            .cloned()
            .unwrap_or_else(|| Msg::user(""));
        let mut chunks = Vec::new();
        let wants_weather = last.text().to_lowercase().contains("weather");
        let has_tool = request.tools.iter().any(|t| t.name == "get_weather");
        if let Some(result) = last.tool_results_iter().next() {
            let text = format!("The forecast says: {}.", result.text());
            chunks.push(ChatChunk::TextDelta { text });
            chunks.push(ChatChunk::Finish {
                reason: FinishReason::Stop,
            });
        } else if wants_weather && has_tool {
            let city = last
                .text()
                .split_whitespace()
                .last()
                .unwrap_or("Paris")
                .trim_matches('?')
                .to_owned();
            let id = format!("weather-{}", request.messages.len());
            chunks.push(ChatChunk::ToolCallStart {
                index: 0,
                id,
                name: "get_weather".into(),
            });
            let fragment = serde_json::json!({ "city": city }).to_string();
            chunks.push(ChatChunk::ToolArgsDelta { index: 0, fragment });
            chunks.push(ChatChunk::Finish {
                reason: FinishReason::ToolUse,
            });
        } else {
            for word in format!("You said: {}", last.text()).split_inclusive(' ') {
                chunks.push(ChatChunk::TextDelta {
                    text: word.to_owned(),
                });
            }
            chunks.push(ChatChunk::Finish {
                reason: FinishReason::Stop,
            });
        }
        Ok(Box::pin(stream::iter(chunks.into_iter().map(Ok))))
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WeatherArgs {
    /// The city.
    city: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut tools = Toolkit::new();
    tools.add(Toolkit::function(
        "get_weather",
        "Today's weather",
        |a: WeatherArgs, _ctx| async move {
            Ok::<_, ToolError>(format!("sunny and 21°C in {}", a.city))
        },
    ))?;
    let agent = Agent::builder()
        .name("Forecaster")
        .model(RuleModel)
        .toolkit(tools)
        .build()?;
    let session = agent.session("weather").await?;

    let out = session.send(Msg::user("hello there")).await?;
    println!("user: hello there\nagent: {}", out.message.text());
    assert_eq!(out.message.text(), "You said: hello there");

    let out = session
        .send(Msg::user("what is the weather in Lisbon?"))
        .await?;
    println!(
        "user: what is the weather in Lisbon?\nagent: {}",
        out.message.text()
    );
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(
        out.message.text(),
        "The forecast says: sunny and 21°C in Lisbon."
    );
    println!("({} model calls in the last run)", out.iterations);
    assert_eq!(out.iterations, 2);
    Ok(())
}
