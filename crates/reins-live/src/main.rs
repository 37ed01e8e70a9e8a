//! The live conformance run: `cargo xtask live --base-url URL --model NAME`.
//!
//! Runs a fixed set of scenarios (plain and streamed chat, forced tool calls
//! streamed and not, a tool round trip, two tools in parallel, an agent that pauses
//! and is approved or rejected, an interrupt mid-stream, usage) against any
//! OpenAI-compatible or Anthropic endpoint and prints a Markdown table: scenario,
//! pass/fail, latency, and the exact error. See docs/providers.md.
//!
//! ```text
//! cargo run -p reins-live -- --base-url http://127.0.0.1:8000/v1 --model local
//! cargo run -p reins-live -- --provider anthropic \
//!     --base-url https://api.anthropic.com --model claude-sonnet-4-5
//! cargo run -p reins-live -- --list
//! cargo xtask live --local    # a llama.cpp server from PyPI on loopback first
//! ```
//!
//! The command line and the table are here; the scenarios are in [`scenarios`].

mod scenarios;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reins::anthropic::AnthropicChat;
use reins::bedrock::BedrockChat;
use reins::gemini::GeminiChat;
use reins::model::ChatModel;
use reins::model::RetryPolicy;
use reins::model::http::HttpSettings;
use reins::openai::{OpenAiChat, OpenAiResponses};

const HELP: &str =
    "usage: live --base-url URL --model NAME [--api-key-env VAR] [--provider openai|anthropic|responses|gemini|bedrock]
            [--timeout SECS] [--only NAME[,NAME..]] [--list]

Runs a fixed set of scenarios against a real model server and prints a table
(scenario, pass/fail, latency, the exact error).

  --base-url URL      the server: for openai the part before /chat/completions
                      (e.g. http://127.0.0.1:8000/v1), for anthropic the part
                      before /v1/messages (e.g. https://api.anthropic.com), for
                      responses the part before /responses (default
                      $OPENAI_BASE_URL, else https://api.openai.com/v1), for
                      gemini the part before /models/.. (default
                      $GEMINI_BASE_URL, else the Gemini API's /v1beta), for
                      bedrock the part before /model/.. (default
                      $BEDROCK_BASE_URL, else bedrock-runtime in $AWS_REGION)
  --model NAME        the model name to send (defaults: gpt-5-mini for
                      responses, gemini-2.5-flash for gemini,
                      amazon.nova-lite-v1:0 for bedrock)
  --api-key-env VAR   read the API key from this environment variable (default:
                      none for openai, ANTHROPIC_API_KEY for anthropic,
                      OPENAI_API_KEY for responses, GEMINI_API_KEY for gemini,
                      AWS_SECRET_ACCESS_KEY for bedrock, which also reads
                      AWS_ACCESS_KEY_ID, AWS_SESSION_TOKEN and AWS_REGION)
  --provider P        openai (default; any Chat Completions server), anthropic,
                      responses (OpenAI's Responses API), gemini or bedrock. For
                      responses, gemini and bedrock missing credentials skip
                      every scenario, saying so, and exit 0
  --timeout SECS      per request: time to the first chunk and longest silence
                      (default 300: small CPU models are slow)
  --only NAMES        run only these scenarios (comma-separated ids, see --list)
  --list              list the scenarios and exit

Exit status: 0 when every scenario passed, 1 when one failed, 2 on bad arguments.
Through xtask, `cargo xtask live --local` first sets up and starts a local llama.cpp
server and fills in --base-url and --model.";

/// Which wire format the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Provider {
    /// OpenAI Chat Completions (and every compatible server).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Responses.
    Responses,
    /// Google Gemini.
    Gemini,
    /// Amazon Bedrock (Converse).
    Bedrock,
}

impl Provider {
    /// The name on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Responses => "responses",
            Self::Gemini => "gemini",
            Self::Bedrock => "bedrock",
        }
    }

    /// The key variable used when `--api-key-env` is not given.
    fn default_key_env(self) -> Option<&'static str> {
        match self {
            Self::OpenAi => None,
            Self::Anthropic => Some("ANTHROPIC_API_KEY"),
            Self::Responses => Some("OPENAI_API_KEY"),
            Self::Gemini => Some("GEMINI_API_KEY"),
            Self::Bedrock => Some("AWS_SECRET_ACCESS_KEY"),
        }
    }

    /// The base URL used when `--base-url` is not given (hosted APIs only).
    fn default_base_url(self) -> Option<String> {
        match self {
            Self::OpenAi | Self::Anthropic => None,
            Self::Responses => Some(
                std::env::var("OPENAI_BASE_URL")
                    .ok()
                    .filter(|v| !v.trim().is_empty())
                    .unwrap_or_else(|| "https://api.openai.com/v1".to_owned()),
            ),
            Self::Gemini => Some(
                std::env::var("GEMINI_BASE_URL")
                    .ok()
                    .filter(|v| !v.trim().is_empty())
                    .unwrap_or_else(|| reins::gemini::GEMINI_BASE_URL.to_owned()),
            ),
            Self::Bedrock => Some(
                std::env::var("BEDROCK_BASE_URL")
                    .ok()
                    .filter(|v| !v.trim().is_empty())
                    .unwrap_or_else(|| reins::bedrock::endpoint_for(&aws_region())),
            ),
        }
    }

    /// The model used when `--model` is not given (hosted APIs only).
    fn default_model(self) -> Option<&'static str> {
        match self {
            Self::OpenAi | Self::Anthropic => None,
            Self::Responses => Some("gpt-5-mini"),
            Self::Gemini => Some("gemini-2.5-flash"),
            Self::Bedrock => Some("amazon.nova-lite-v1:0"),
        }
    }
}

/// The region Bedrock requests are signed for: `AWS_REGION`, else
/// `AWS_DEFAULT_REGION`, else `us-east-1`.
pub(crate) fn aws_region() -> String {
    ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|r| !r.trim().is_empty()))
        .unwrap_or_else(|| "us-east-1".to_owned())
}

fn env_value(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// The parsed command line.
#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) base_url: String,
    pub(crate) model: String,
    pub(crate) api_key_env: Option<String>,
    pub(crate) provider: Provider,
    pub(crate) timeout: Duration,
    pub(crate) only: Vec<String>,
}

enum Parsed {
    Run(Args),
    List,
    Help,
}

fn parse(args: &[String]) -> Result<Parsed, String> {
    let mut base_url = None;
    let mut model = None;
    let mut api_key_env = None;
    let mut provider = Provider::OpenAi;
    let mut timeout = Duration::from_secs(300);
    let mut only = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--base-url" => base_url = Some(value("--base-url")?),
            "--model" => model = Some(value("--model")?),
            "--api-key-env" => api_key_env = Some(value("--api-key-env")?),
            "--provider" => {
                provider = match value("--provider")?.as_str() {
                    "openai" => Provider::OpenAi,
                    "anthropic" => Provider::Anthropic,
                    "responses" => Provider::Responses,
                    "gemini" => Provider::Gemini,
                    "bedrock" => Provider::Bedrock,
                    other => {
                        return Err(format!(
                            "unknown provider `{other}`: use openai, anthropic, responses, gemini or bedrock"
                        ));
                    }
                }
            }
            "--timeout" => {
                let v = value("--timeout")?;
                let secs: u64 = v
                    .parse()
                    .map_err(|_| format!("--timeout takes whole seconds, not `{v}`"))?;
                timeout = Duration::from_secs(secs.max(1));
            }
            "--only" => {
                only = value("--only")?
                    .split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect();
            }
            "--list" => return Ok(Parsed::List),
            "--help" | "-h" => return Ok(Parsed::Help),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let base_url = base_url
        .or_else(|| provider.default_base_url())
        .ok_or("--base-url is required")?;
    let model = model
        .or_else(|| provider.default_model().map(str::to_owned))
        .ok_or("--model is required")?;
    for name in &only {
        if !scenarios::ALL.iter().any(|s| s.id == name) {
            return Err(format!(
                "unknown scenario `{name}`; known: {}",
                scenarios::ALL
                    .iter()
                    .map(|s| s.id)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    Ok(Parsed::Run(Args {
        base_url,
        model,
        api_key_env,
        provider,
        timeout,
        only,
    }))
}

/// The endpoint under test: the model, and what a raw (non-streamed) request needs.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) args: Args,
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) openai: Option<OpenAiChat>,
    pub(crate) anthropic: Option<AnthropicChat>,
    pub(crate) responses: Option<OpenAiResponses>,
    pub(crate) gemini: Option<GeminiChat>,
    pub(crate) bedrock: Option<BedrockChat>,
    pub(crate) http: HttpSettings,
}

/// The key variable this run reads, when it reads one.
fn key_env(args: &Args) -> Option<String> {
    args.api_key_env
        .clone()
        .or_else(|| args.provider.default_key_env().map(str::to_owned))
}

fn target(args: Args) -> Result<Target, String> {
    let key_var = key_env(&args);
    let key = match &key_var {
        Some(var) => Some(
            std::env::var(var)
                .ok()
                .filter(|k| !k.trim().is_empty())
                .ok_or_else(|| format!("{var} is not set (named by --api-key-env)"))?,
        ),
        None => None,
    };
    // No retries: the table shows what the server did the first time.
    let mut http = HttpSettings::new(
        match args.provider {
            Provider::OpenAi => "openai-compatible",
            Provider::Anthropic => "anthropic",
            Provider::Responses => "openai",
            Provider::Gemini => "gemini",
            Provider::Bedrock => "bedrock",
        },
        args.base_url.clone(),
    )
    .with_retry(RetryPolicy::none())
    .with_timeout(args.timeout);
    if let Some(key) = key {
        http = http.with_api_key(key.trim());
    }
    Ok(match args.provider {
        Provider::OpenAi => {
            let m = OpenAiChat::from_settings(http.clone(), &args.model);
            Target {
                model: Arc::new(m.clone()),
                openai: Some(m),
                anthropic: None,
                responses: None,
                gemini: None,
                bedrock: None,
                http,
                args,
            }
        }
        Provider::Responses => {
            let m = OpenAiResponses::from_settings(http.clone(), &args.model);
            Target {
                model: Arc::new(m.clone()),
                openai: None,
                anthropic: None,
                responses: Some(m),
                gemini: None,
                bedrock: None,
                http,
                args,
            }
        }
        Provider::Gemini => {
            let m = GeminiChat::from_settings(http.clone(), &args.model);
            Target {
                model: Arc::new(m.clone()),
                openai: None,
                anthropic: None,
                responses: None,
                gemini: Some(m),
                bedrock: None,
                http,
                args,
            }
        }
        Provider::Bedrock => {
            let secret = http.api_key().ok().flatten().unwrap_or_default().to_owned();
            let m = BedrockChat::from_settings(
                http.clone(),
                aws_region(),
                env_value("AWS_ACCESS_KEY_ID").unwrap_or_default(),
                secret.clone(),
                &args.model,
            )
            .with_credentials(
                env_value("AWS_ACCESS_KEY_ID").unwrap_or_default(),
                secret,
                env_value("AWS_SESSION_TOKEN"),
            );
            Target {
                model: Arc::new(m.clone()),
                openai: None,
                anthropic: None,
                responses: None,
                gemini: None,
                bedrock: Some(m),
                http,
                args,
            }
        }
        Provider::Anthropic => {
            let m = AnthropicChat::from_settings(http.clone(), &args.model).with_max_tokens(512);
            Target {
                model: Arc::new(m.clone()),
                openai: None,
                anthropic: Some(m),
                responses: None,
                gemini: None,
                bedrock: None,
                http,
                args,
            }
        }
    })
}

/// One row of the table.
pub(crate) struct Row {
    pub(crate) id: &'static str,
    pub(crate) title: &'static str,
    pub(crate) outcome: Result<String, String>,
    pub(crate) latency: Duration,
}

/// Runs the scenarios (all, or those named) and returns one row each.
pub(crate) async fn run(target: &Target) -> Vec<Row> {
    let mut rows = Vec::new();
    for s in scenarios::ALL {
        if !target.args.only.is_empty() && !target.args.only.iter().any(|n| n == s.id) {
            continue;
        }
        eprintln!("… {}", s.title);
        let started = Instant::now();
        // Each scenario gets a connection pool of its own, so a connection a server
        // broke in one scenario cannot fail the next, and a bound of its own, so a
        // hung one cannot stall the run.
        let fresh = match self::target(target.args.clone()) {
            Ok(t) => t,
            Err(e) => {
                rows.push(Row {
                    id: s.id,
                    title: s.title,
                    outcome: Err(e),
                    latency: started.elapsed(),
                });
                continue;
            }
        };
        let bound = target.args.timeout * 4;
        let outcome = match tokio::time::timeout(bound, (s.run)(fresh)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "no result within {}s (4 × --timeout)",
                bound.as_secs()
            )),
        };
        rows.push(Row {
            id: s.id,
            title: s.title,
            outcome,
            latency: started.elapsed(),
        });
    }
    rows
}

/// The table as Markdown (it goes straight into docs/providers.md).
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out = String::from("| scenario | result | latency | detail or exact error |\n");
    out.push_str("|---|---|---|---|\n");
    for r in rows {
        let (result, detail) = match &r.outcome {
            Ok(d) => ("pass", d.as_str()),
            Err(e) => ("FAIL", e.as_str()),
        };
        let detail = detail.replace('|', "\\|").replace('\n', " ");
        out.push_str(&format!(
            "| {} (`{}`) | {} | {:.1} s | {} |\n",
            r.title,
            r.id,
            result,
            r.latency.as_secs_f64(),
            detail
        ));
    }
    let failed = rows.iter().filter(|r| r.outcome.is_err()).count();
    out.push_str(&format!(
        "\n{} passed, {} failed\n",
        rows.len() - failed,
        failed
    ));
    out
}

/// Prints `text` and a newline on stdout, dropping it when stdout is closed
/// (`live --help | head -1`): `println!` would panic there.
fn say(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&args) {
        Ok(Parsed::Run(a)) => a,
        Ok(Parsed::List) => {
            let list: Vec<String> = scenarios::ALL
                .iter()
                .map(|s| format!("{:<16} {}", s.id, s.title))
                .collect();
            say(&list.join("\n"));
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Help) => {
            say(HELP);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("live: {e}\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    // A hosted API without its key: every scenario is skipped, and the run says so.
    if args.provider.default_base_url().is_some() {
        let mut needed: Vec<String> = key_env(&args).into_iter().collect();
        if args.provider == Provider::Bedrock {
            needed.push("AWS_ACCESS_KEY_ID".to_owned());
        }
        let missing: Vec<String> = needed
            .into_iter()
            .filter(|var| std::env::var(var).map_or(true, |v| v.trim().is_empty()))
            .collect();
        if !missing.is_empty() {
            let ids: Vec<&str> = scenarios::ALL
                .iter()
                .map(|s| s.id)
                .filter(|id| args.only.is_empty() || args.only.iter().any(|o| o == id))
                .collect();
            println!(
                "live conformance: {} skipped: {} {} not set (export it, or name another \
                 variable with --api-key-env).\nSkipped scenarios: {}",
                args.provider.name(),
                missing.join(" and "),
                if missing.len() > 1 { "are" } else { "is" },
                ids.join(", ")
            );
            return ExitCode::SUCCESS;
        }
    }
    let target = match target(args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("live: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("live: could not start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "live conformance: {} `{}` at {}\n",
        match target.args.provider {
            Provider::OpenAi => "openai-compatible",
            Provider::Anthropic => "anthropic",
            Provider::Responses => "openai responses",
            Provider::Gemini => "gemini",
            Provider::Bedrock => "bedrock",
        },
        target.args.model,
        target.args.base_url
    );
    let rows = rt.block_on(run(&target));
    print!("{}", table(&rows));
    if rows.iter().any(|r| r.outcome.is_err()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
