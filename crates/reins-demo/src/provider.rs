//! Which model the demo talks to.

use std::sync::Arc;
use std::time::Duration;

use reins::anthropic::AnthropicChat;
use reins::bedrock::BedrockChat;
use reins::gemini::GeminiChat;
use reins::model::ChatModel;
use reins::openai::{OpenAiChat, OpenAiResponses};

use crate::cli::Provider;
use crate::offline::{self, OfflineModel};

/// The chosen model and how to describe it.
pub struct Choice {
    pub model: Arc<dyn ChatModel>,
    /// For the banner, e.g. `qwen-plus via DashScope`.
    pub label: String,
    pub offline: bool,
}

fn has_env(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.trim().is_empty())
}

/// Picks the model: `--provider` wins; script mode is offline unless told otherwise;
/// then the first API key found; then the offline model. `pace` sets how fast the
/// offline model streams (`think` before an answer, `chunk` between text pieces).
pub fn choose(
    provider: Option<Provider>,
    model: Option<&str>,
    script_mode: bool,
    think: Duration,
    chunk: Duration,
) -> Result<Choice, String> {
    let named = match std::env::var("REINS_PROVIDER") {
        Ok(v) if !v.trim().is_empty() && !script_mode => {
            Some(Provider::parse(v.trim()).map_err(|e| format!("REINS_PROVIDER: {e}"))?)
        }
        _ => None,
    };
    let provider = provider.or(named).unwrap_or(if script_mode {
        Provider::Offline
    } else if has_env("DASHSCOPE_API_KEY") {
        Provider::DashScope
    } else if has_env("OPENAI_API_KEY") {
        Provider::OpenAi
    } else if has_env("ANTHROPIC_API_KEY") {
        Provider::Anthropic
    } else if has_env("AZURE_OPENAI_ENDPOINT") && has_env("AZURE_OPENAI_API_KEY") {
        Provider::Responses
    } else if has_env("GEMINI_API_KEY")
        || (has_env("GOOGLE_CLOUD_PROJECT") && has_env("VERTEX_ACCESS_TOKEN"))
    {
        Provider::Gemini
    } else if has_env("AWS_ACCESS_KEY_ID") && has_env("AWS_SECRET_ACCESS_KEY") {
        Provider::Bedrock
    } else {
        Provider::Offline
    });
    let need = |var: &str| {
        if has_env(var) {
            Ok(())
        } else {
            Err(format!(
                "this provider needs {var} in the environment (or use --offline)"
            ))
        }
    };
    Ok(match provider {
        Provider::Offline => Choice {
            model: Arc::new(OfflineModel::new(think, chunk)),
            label: offline::NAME.to_owned(),
            offline: true,
        },
        Provider::DashScope => {
            need("DASHSCOPE_API_KEY")?;
            let m = OpenAiChat::dashscope(model.unwrap_or("qwen-plus"));
            Choice {
                label: format!("{} via DashScope ({})", m.model_name(), m.base_url()),
                model: Arc::new(m),
                offline: false,
            }
        }
        Provider::OpenAi => {
            need("OPENAI_API_KEY")?;
            let m = OpenAiChat::openai(model.unwrap_or("gpt-4o-mini"));
            Choice {
                label: format!(
                    "{} via OpenAI-compatible API ({})",
                    m.model_name(),
                    m.base_url()
                ),
                model: Arc::new(m),
                offline: false,
            }
        }
        Provider::Responses => {
            let name = model.unwrap_or("gpt-5-mini");
            let (m, via) = match OpenAiResponses::azure_from_env(name) {
                Some(m) => {
                    need("AZURE_OPENAI_API_KEY")?;
                    (m, "Azure OpenAI Responses API")
                }
                None => {
                    need("OPENAI_API_KEY")?;
                    (OpenAiResponses::openai(name), "OpenAI Responses API")
                }
            };
            Choice {
                label: format!("{} via {via} ({})", m.model_name(), m.base_url()),
                model: Arc::new(m),
                offline: false,
            }
        }
        Provider::Gemini => {
            let name = model.unwrap_or("gemini-2.5-flash");
            let (m, via) = match std::env::var("GOOGLE_CLOUD_PROJECT") {
                Ok(project) if !project.trim().is_empty() && has_env("VERTEX_ACCESS_TOKEN") => {
                    let location = std::env::var("GOOGLE_CLOUD_LOCATION")
                        .ok()
                        .filter(|l| !l.trim().is_empty())
                        .unwrap_or_else(|| "global".to_owned());
                    (
                        GeminiChat::vertex(project.trim(), location.trim(), name),
                        "Vertex AI",
                    )
                }
                _ => {
                    if !has_env("GEMINI_API_KEY") {
                        need("GOOGLE_API_KEY")
                            .map_err(|_| "this provider needs GEMINI_API_KEY in the environment (or GOOGLE_CLOUD_PROJECT with VERTEX_ACCESS_TOKEN; or use --offline)".to_owned())?;
                    }
                    (GeminiChat::new(name), "the Gemini API")
                }
            };
            Choice {
                label: format!("{} via {via} ({})", m.model_name(), m.base_url()),
                model: Arc::new(m),
                offline: false,
            }
        }
        Provider::Bedrock => {
            need("AWS_ACCESS_KEY_ID")?;
            need("AWS_SECRET_ACCESS_KEY")?;
            let m = BedrockChat::new(model.unwrap_or("amazon.nova-lite-v1:0"));
            Choice {
                label: format!(
                    "{} via Amazon Bedrock in {} ({})",
                    m.model_name(),
                    m.region(),
                    m.base_url()
                ),
                model: Arc::new(m),
                offline: false,
            }
        }
        Provider::Anthropic => {
            need("ANTHROPIC_API_KEY")?;
            let m = AnthropicChat::new(model.unwrap_or("claude-sonnet-4-5"));
            Choice {
                label: format!("{} via Anthropic ({})", m.model_name(), m.base_url()),
                model: Arc::new(m),
                offline: false,
            }
        }
    })
}
