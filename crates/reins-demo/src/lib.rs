//! The SafeAgent demo: an agent with `delete_file`, `send_email` (both wait for a
//! person's approval) and `search_web` (runs at once), acting on a sandbox directory
//! the demo creates under its data directory (`./.reins-demo/` unless `--data-dir`).
//!
//! Two programs share it:
//!
//! - `demo` ([`demo`]): the terminal chat, interactive in a terminal or replaying a
//!   script (`scripts/`, the format in `scripts/README.md`). Sessions live in SQLite,
//!   so a pause survives quitting.
//! - `serve` ([`serve()`]): the same agent as an HTTP service with reins-server's API
//!   and approval inbox; with `--mcp stdio|http`, also as an MCP server ([`mcp`]).
//!
//! ```text
//! cargo xtask demo                    # chat (offline model unless an API key is set)
//! cargo xtask demo --resume           # answer the call a previous run left pending
//! cargo xtask demo --script builtin   # replay the built-in script (what CI checks)
//! cargo xtask demo --help             # every flag
//! cargo xtask serve                   # http://127.0.0.1:8080
//! cargo xtask serve --mcp http        # + MCP at http://127.0.0.1:8080/mcp
//! cargo xtask serve --mcp stdio       # MCP on stdin/stdout (inbox on a free port)
//! ```
//!
//! This module holds the set-up both modes of the chat share, and its entry point.

mod cli;
mod intent;
mod interactive;
pub mod mcp;
mod offline;
mod out;
mod provider;
mod render;
mod sandbox;
mod script;
mod serve;

pub use serve::serve;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use reins::prelude::*;

use cli::{Options, ScriptSource};
use sandbox::Sandbox;

/// The agent's name.
const AGENT: &str = "SafeAgent";

/// The built-in script (`--script builtin`).
const BUILTIN_SCRIPT: &str = include_str!("../scripts/builtin.txt");

/// Exit code for bad usage: unknown flags, a missing or malformed script.
const USAGE_ERROR: u8 = 2;

/// Everything needed to (re)open the agent: kept so that a script's `restart` can drop
/// the agent and open the store again, as a new process would.
struct Setup {
    pub data_dir: PathBuf,
    pub session_id: String,
    pub sandbox: Sandbox,
    pub model: Arc<dyn ChatModel>,
    pub model_label: String,
    pub offline: bool,
    /// Connected MCP servers (`--mcp`), whose tools join the sandbox's.
    pub mcp: Vec<reins::mcp::McpToolset>,
}

impl Setup {
    /// The SQLite file sessions live in.
    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("sessions.db")
    }

    /// Opens the store and builds the agent; returns it with the session.
    pub async fn open(&self) -> Result<(Agent, Session), String> {
        let store = SqliteStore::open(self.db_path()).await.map_err(|e| {
            format!(
                "could not open the session store {}: {e}",
                self.db_path().display()
            )
        })?;
        let mut tools = sandbox::toolkit(&self.sandbox).map_err(|e| e.to_string())?;
        reins::mcp::add_all(&self.mcp, &mut tools).map_err(|e| e.to_string())?;
        let agent = Agent::builder()
            .name(AGENT)
            .system_prompt(system_prompt(&self.sandbox))
            .model_arc(self.model.clone())
            .toolkit(tools)
            .store(store)
            .max_iters(6)
            .interrupt_grace(Duration::from_secs(1))
            .build()
            .map_err(|e| e.to_string())?;
        let session = agent
            .session(&self.session_id)
            .await
            .map_err(|e| format!("could not open session `{}`: {e}", self.session_id))?;
        Ok((agent, session))
    }

    /// Forgets the session and re-seeds its sandbox.
    pub async fn reset(&self) -> Result<(), String> {
        let store = SqliteStore::open(self.db_path())
            .await
            .map_err(|e| format!("could not open {}: {e}", self.db_path().display()))?;
        store
            .delete_session(&self.session_id)
            .await
            .map_err(|e| format!("could not delete session `{}`: {e}", self.session_id))?;
        self.sandbox
            .reset()
            .map_err(|e| format!("could not reset the sandbox: {e}"))
    }

    /// The banner lines.
    pub fn banner(&self) -> Vec<String> {
        let mut lines = vec![
            format!("{AGENT} — a reins agent whose risky tools wait for your approval"),
            format!("model:   {}", self.model_label),
        ];
        if self.offline {
            lines.push(
                "         (set DASHSCOPE_API_KEY, OPENAI_API_KEY or ANTHROPIC_API_KEY for a real model)"
                    .to_owned(),
            );
        }
        lines.extend([
            format!(
                "session: `{}` in {}",
                self.session_id,
                self.db_path().display()
            ),
            format!(
                "sandbox: {} (the tools touch nothing else)",
                self.sandbox.root().display()
            ),
        ]);
        lines
    }
}

/// The agent's system prompt for a sandbox.
fn system_prompt(sb: &Sandbox) -> String {
    let files: Vec<String> = sb.list().into_iter().map(|(n, _)| n).collect();
    format!(
        "You are {AGENT}, a careful assistant in a terminal demo of the reins framework. \
         You can delete files in the user's sandbox directory (paths are relative to it; \
         it holds: {}), send emails (they are written to the sandbox's outbox/, never \
         really sent) and search the web (canned offline results). delete_file and \
         send_email wait for the user's approval: when a call is rejected, respect the \
         decision and do not retry it. Report tool outcomes truthfully, including \
         rejected, cancelled and interrupted calls. Be brief.",
        if files.is_empty() {
            "nothing".to_owned()
        } else {
            files.join(", ")
        }
    )
}

/// A file-system friendly version of a session id.
fn dir_name(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The terminal chat's entry point (the `demo` binary): parses the command line,
/// then chats in a terminal or replays a script; the exit code says how it went
/// (2 for bad usage, 1 when a scripted check failed).
pub fn demo() -> ExitCode {
    let opts = match cli::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("demo: {e}\n(run with --help for the options)");
            return ExitCode::from(USAGE_ERROR);
        }
    };
    if opts.help {
        out::say!("{}", cli::USAGE);
        return ExitCode::SUCCESS;
    }
    let interactive = opts.script.is_none() && std::io::stdin().is_terminal();
    // Script mode: read and parse the script before touching anything.
    let script = if interactive {
        None
    } else {
        let source = opts.script.clone().unwrap_or(ScriptSource::Builtin);
        let (name, text) = match &source {
            ScriptSource::Builtin => ("builtin".to_owned(), BUILTIN_SCRIPT.to_owned()),
            ScriptSource::File(p) => match std::fs::read_to_string(p) {
                Ok(t) => (p.display().to_string(), t),
                Err(e) => {
                    eprintln!("demo: cannot read the script {}: {e}", p.display());
                    return ExitCode::from(USAGE_ERROR);
                }
            },
        };
        match script::parse(&text) {
            Ok(lines) => Some((name, source == ScriptSource::Builtin, lines)),
            Err(e) => {
                eprintln!("demo: the script {name} is not valid: {e}");
                eprintln!("(the format is described in crates/reins-demo/scripts/README.md)");
                return ExitCode::from(USAGE_ERROR);
            }
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("demo: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async move {
        let setup = match prepare(
            &opts,
            script.is_some(),
            script.as_ref().is_some_and(|s| s.1),
        )
        .await
        {
            Ok(s) => s,
            Err(e) => {
                eprintln!("demo: {e}");
                return ExitCode::from(USAGE_ERROR);
            }
        };
        match script {
            Some((name, _, lines)) => script::replay(&setup, &name, &lines, opts.check).await,
            None => interactive::run(&setup, opts.resume).await,
        }
    });
    // Tools that ignore cancellation must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// Creates the data directory, picks the model, opens (or resets) the sandbox.
async fn prepare(opts: &Options, script_mode: bool, builtin: bool) -> Result<Setup, String> {
    let (think, chunk) = if script_mode {
        (Duration::ZERO, Duration::from_millis(2))
    } else {
        (Duration::from_millis(350), Duration::from_millis(25))
    };
    let choice = provider::choose(
        opts.provider,
        opts.model.as_deref(),
        script_mode,
        think,
        chunk,
    )?;
    std::fs::create_dir_all(&opts.data_dir).map_err(|e| {
        format!(
            "cannot create the data directory {}: {e}",
            opts.data_dir.display()
        )
    })?;
    let session_id = opts.session.clone().unwrap_or_else(|| {
        if script_mode {
            "script".to_owned()
        } else {
            "demo".to_owned()
        }
    });
    let sandbox_dir = opts.data_dir.join("sandboxes").join(dir_name(&session_id));
    let sandbox =
        Sandbox::open(sandbox_dir).map_err(|e| format!("cannot create the sandbox: {e}"))?;
    let setup = Setup {
        data_dir: opts.data_dir.clone(),
        session_id,
        sandbox,
        model: choice.model,
        model_label: choice.label,
        offline: choice.offline,
        mcp: Vec::new(),
    };
    let mut setup = setup;
    for (i, line) in opts.mcp.iter().enumerate() {
        let root = setup.sandbox.root().display().to_string();
        let mut words = line
            .split_whitespace()
            .map(|w| w.replace("{sandbox}", &root));
        let program = words
            .next()
            .ok_or_else(|| "`--mcp` needs a command line".to_owned())?;
        let name = if i == 0 {
            "mcp".to_owned()
        } else {
            format!("mcp{}", i + 1)
        };
        let server = reins::mcp::McpServer::stdio(name, program, words);
        let toolset = reins::mcp::McpToolset::connect(server)
            .await
            .map_err(|e| e.to_string())?;
        for t in toolset.tools() {
            eprintln!(
                "demo: MCP tool {} (policy from {:?})",
                t.name, t.policy_source
            );
        }
        setup.mcp.push(toolset);
    }
    // The built-in script's checks assume a fresh start, so it always gets one.
    if opts.fresh || builtin {
        setup.reset().await?;
    }
    Ok(setup)
}
