//! Command-line flags of the demo.

use std::path::PathBuf;

/// Where the demo's model comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// The built-in offline model (no network).
    Offline,
    /// Alibaba Cloud DashScope, OpenAI-compatible mode (`DASHSCOPE_API_KEY`).
    DashScope,
    /// OpenAI or any compatible server (`OPENAI_API_KEY`, `OPENAI_BASE_URL`).
    OpenAi,
    /// Anthropic Messages API (`ANTHROPIC_API_KEY`).
    Anthropic,
    /// OpenAI's Responses API (`OPENAI_API_KEY`), or Azure OpenAI's
    /// (`AZURE_OPENAI_ENDPOINT`, `AZURE_OPENAI_API_KEY`, `AZURE_OPENAI_DEPLOYMENT`).
    Responses,
    /// Google's Gemini API (`GEMINI_API_KEY`), or Vertex AI
    /// (`GOOGLE_CLOUD_PROJECT`, `GOOGLE_CLOUD_LOCATION`, `VERTEX_ACCESS_TOKEN`).
    Gemini,
    /// Amazon Bedrock's Converse API (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`, `AWS_REGION`).
    Bedrock,
}

impl Provider {
    /// The provider named `s` (as `--provider` and `REINS_PROVIDER` take it).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "offline" | "scripted" => Ok(Self::Offline),
            "dashscope" | "qwen" => Ok(Self::DashScope),
            "openai" => Ok(Self::OpenAi),
            "anthropic" | "claude" => Ok(Self::Anthropic),
            "responses" | "openai-responses" | "azure" => Ok(Self::Responses),
            "gemini" | "google" | "vertex" => Ok(Self::Gemini),
            "bedrock" | "aws" => Ok(Self::Bedrock),
            other => Err(format!(
                "unknown provider `{other}`; choose one of: offline, dashscope, openai, anthropic, responses, gemini, bedrock"
            )),
        }
    }
}

/// Which script `--script` replays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptSource {
    /// The script compiled into the binary (`crates/reins-demo/scripts/builtin.txt`).
    Builtin,
    /// A script file.
    File(PathBuf),
}

/// Parsed flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub data_dir: PathBuf,
    pub session: Option<String>,
    pub fresh: bool,
    pub resume: bool,
    pub script: Option<ScriptSource>,
    pub check: bool,
    pub provider: Option<Provider>,
    pub model: Option<String>,
    /// MCP servers whose tools are added (`--mcp "CMD ARGS"`, repeatable).
    pub mcp: Vec<String>,
    pub help: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from(".reins-demo"),
            session: None,
            fresh: false,
            resume: false,
            script: None,
            check: false,
            provider: None,
            model: None,
            mcp: Vec::new(),
            help: false,
        }
    }
}

pub const USAGE: &str = "\
SafeAgent — the reins demo: an agent whose risky tools wait for your approval.

usage: cargo xtask demo [OPTIONS]
   or: cargo run -p reins-demo --bin demo -- [OPTIONS]

options:
  --data-dir DIR      where sessions.db and the sandboxes live (default ./.reins-demo)
  --session ID        the session to open (default `demo`; `script` in script mode)
  --fresh             start the session over: forget it and re-seed its sandbox
  --resume            continue a paused session: show the pending call again and ask
  --script FILE       replay a scripted session without a terminal (`builtin` for the
                      built-in one; see crates/reins-demo/scripts/README.md)
  --check             with --script: every `expect…` line is an assertion; exit 1 on
                      the first mismatch
  --provider NAME     offline | dashscope | openai | anthropic | responses | gemini |
                      bedrock
  --model NAME        the model name for the chosen provider
  --offline           same as --provider offline
  --mcp 'CMD ARGS'    add the tools of an MCP server started with this command line
                      (stdio; split on spaces; `{sandbox}` becomes the sandbox path).
                      Repeatable. Their policies come from the server's annotations:
                      e.g. server-filesystem's write_file waits for your approval
  -h, --help          this text

Without --provider the model is chosen from the environment: REINS_PROVIDER names one
(as --provider does); else DASHSCOPE_API_KEY (qwen-plus), else OPENAI_API_KEY
(gpt-4o-mini; OPENAI_BASE_URL for Ollama, vLLM, ...), else ANTHROPIC_API_KEY
(claude-sonnet-4-5), else AZURE_OPENAI_ENDPOINT with AZURE_OPENAI_API_KEY (the
Responses API on the deployment AZURE_OPENAI_DEPLOYMENT), else GEMINI_API_KEY
(gemini-2.5-flash; Vertex AI when GOOGLE_CLOUD_PROJECT and VERTEX_ACCESS_TOKEN are
set), else AWS_ACCESS_KEY_ID with AWS_SECRET_ACCESS_KEY (Amazon Bedrock,
amazon.nova-lite-v1:0 in AWS_REGION), else the built-in offline model. `responses` is OpenAI's Responses API (OPENAI_API_KEY; gpt-5-mini), or Azure's
when AZURE_OPENAI_ENDPOINT is set. Script mode always uses the offline model unless
--provider is given.

When stdin is not a terminal and no --script is given, the built-in script is replayed.
In the chat: ESC interrupts the agent, Ctrl-C quits, /help lists the commands.";

/// Parses the arguments (without the program name).
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
    let mut o = Options::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            match inline.clone().or_else(|| it.next()) {
                Some(v) if !v.is_empty() => Ok(v),
                _ => Err(format!("`{name}` needs a value")),
            }
        };
        match flag.as_str() {
            "--data-dir" => o.data_dir = PathBuf::from(value("--data-dir")?),
            "--session" => {
                let s = value("--session")?;
                if s.trim().is_empty() {
                    return Err("`--session` cannot be empty".to_owned());
                }
                o.session = Some(s);
            }
            "--fresh" => o.fresh = true,
            "--resume" => o.resume = true,
            "--script" => {
                let v = value("--script")?;
                o.script = Some(if v == "builtin" {
                    ScriptSource::Builtin
                } else {
                    ScriptSource::File(PathBuf::from(v))
                });
            }
            "--check" => o.check = true,
            "--provider" => o.provider = Some(Provider::parse(&value("--provider")?)?),
            "--model" => o.model = Some(value("--model")?),
            "--offline" => o.provider = Some(Provider::Offline),
            "--mcp" => o.mcp.push(value("--mcp")?),
            "-h" | "--help" | "help" => o.help = true,
            other => return Err(format!("unknown argument `{other}` (see --help)")),
        }
    }
    if o.fresh && o.resume {
        return Err("`--fresh` and `--resume` contradict each other: pick one".to_owned());
    }
    if o.check && o.script.is_none() {
        // `--check` alone means: check the built-in script (as CI does).
        o.script = Some(ScriptSource::Builtin);
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Options, String> {
        parse(args.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn parses_flags_and_values() {
        let o = p(&[
            "--script",
            "builtin",
            "--check",
            "--fresh",
            "--data-dir=/tmp/x",
        ])
        .unwrap();
        assert_eq!(o.script, Some(ScriptSource::Builtin));
        assert!(o.check && o.fresh);
        assert_eq!(o.data_dir, PathBuf::from("/tmp/x"));
        let o = p(&["--provider", "claude", "--model", "m"]).unwrap();
        assert_eq!(o.provider, Some(Provider::Anthropic));
        assert_eq!(o.model.as_deref(), Some("m"));
        let o = p(&["--mcp", "npx -y server {sandbox}", "--mcp=other"]).unwrap();
        assert_eq!(o.mcp, ["npx -y server {sandbox}", "other"]);
    }

    #[test]
    fn refuses_bad_input_with_a_reason() {
        assert!(p(&["--nope"]).unwrap_err().contains("--nope"));
        assert!(p(&["--session"]).unwrap_err().contains("needs a value"));
        assert!(p(&["--provider", "x"]).unwrap_err().contains("offline"));
        let o = p(&["--provider", "responses"]).unwrap();
        assert_eq!(o.provider, Some(Provider::Responses));
        assert_eq!(Provider::parse("azure"), Ok(Provider::Responses));
        assert_eq!(Provider::parse("gemini"), Ok(Provider::Gemini));
        assert_eq!(Provider::parse("bedrock"), Ok(Provider::Bedrock));
        assert!(p(&["--fresh", "--resume"]).is_err());
    }
}
