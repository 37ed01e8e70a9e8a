//! [`McpServer`]: how to reach one MCP server and how its tools are gated.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use reins_tool::ToolPolicy;
use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream an MCP session runs over (read half, write half).
pub type ByteStream = (
    Box<dyn AsyncRead + Send + Unpin + 'static>,
    Box<dyn AsyncWrite + Send + Unpin + 'static>,
);

/// A future that opens a fresh [`ByteStream`].
pub type ByteStreamFuture = Pin<Box<dyn Future<Output = std::io::Result<ByteStream>> + Send>>;

type StreamFactory = Arc<dyn Fn() -> ByteStreamFuture + Send + Sync>;

/// A server's question to the user during a tool call (MCP `elicitation/create`, form
/// mode).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Elicitation {
    /// The server's name.
    pub server: String,
    /// What the server asks, for the person.
    pub message: String,
    /// A JSON Schema (a flat object of primitive fields) of the answer.
    pub requested_schema: serde_json::Value,
}

/// The person's answer to an [`Elicitation`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ElicitationAnswer {
    /// The values asked for (an object matching the requested schema).
    Accept(serde_json::Value),
    /// The person said no.
    Decline,
    /// The person dismissed the question without choosing.
    Cancel,
}

/// A future answering an [`Elicitation`].
pub type ElicitationFuture = Pin<Box<dyn Future<Output = ElicitationAnswer> + Send>>;

pub(crate) type ElicitationHandler = Arc<dyn Fn(Elicitation) -> ElicitationFuture + Send + Sync>;

/// How to reach a server.
#[derive(Clone)]
pub(crate) enum Endpoint {
    /// Spawn a child process and speak MCP over its stdin/stdout.
    Stdio {
        program: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP.
    Http {
        url: String,
        headers: Vec<(String, String)>,
        bearer: Option<String>,
    },
    /// Any byte stream, opened anew for every (re)connection.
    Stream(StreamFactory),
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdio {
                program, args, cwd, ..
            } => f
                .debug_struct("Stdio")
                .field("program", program)
                .field("args", args)
                .field("cwd", cwd)
                // Environment values often hold secrets: only the names are shown.
                .finish_non_exhaustive(),
            Self::Http { url, headers, .. } => {
                let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
                f.debug_struct("Http")
                    .field("url", url)
                    .field("header_names", &names)
                    .finish_non_exhaustive()
            }
            Self::Stream(_) => f.write_str("Stream(..)"),
        }
    }
}

impl Endpoint {
    /// A short description for error messages (no secrets).
    #[cfg_attr(not(feature = "stdio"), allow(dead_code))]
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Stdio { program, args, .. } => {
                let mut s = program.clone();
                for a in args {
                    s.push(' ');
                    s.push_str(a);
                }
                s
            }
            Self::Http { url, .. } => url.clone(),
            Self::Stream(_) => "custom byte stream".to_owned(),
        }
    }
}

/// How to reach one MCP server, what to call its tools, and how calls to them are
/// gated. Pass it to [`McpToolset::connect`](crate::McpToolset::connect).
///
/// ```
/// use std::time::Duration;
/// use reins_mcp::McpServer;
/// use reins_tool::ToolPolicy;
///
/// let fs = McpServer::stdio("fs", "npx", ["-y", "@modelcontextprotocol/server-filesystem", "/srv/sandbox"])
///     .tool_policy("write_file", ToolPolicy::confirm().reason("writes a file"))
///     .call_timeout(Duration::from_secs(30));
/// assert_eq!(fs.name(), "fs");
/// assert_eq!(fs.tool_name("write_file"), "fs__write_file");
/// ```
#[derive(Clone)]
#[must_use]
pub struct McpServer {
    pub(crate) name: String,
    pub(crate) endpoint: Endpoint,
    pub(crate) prefix: Option<String>,
    pub(crate) separator: String,
    pub(crate) trusted: bool,
    pub(crate) default_policy: Option<ToolPolicy>,
    pub(crate) overrides: HashMap<String, ToolPolicy>,
    pub(crate) include: Option<BTreeSet<String>>,
    pub(crate) exclude: BTreeSet<String>,
    pub(crate) call_timeout: Option<Duration>,
    pub(crate) connect_timeout: Duration,
    pub(crate) elicitation: Option<ElicitationHandler>,
    /// Whether questions without a callback go to the asking call's run.
    pub(crate) elicit_in_runs: bool,
    /// The one protocol revision to speak, instead of probing.
    pub(crate) protocol_version: Option<String>,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field("prefix", &self.prefix)
            .field("trusted", &self.trusted)
            .field("default_policy", &self.default_policy)
            .field("overrides", &self.overrides)
            .field("call_timeout", &self.call_timeout)
            .field("answers_elicitation", &self.elicitation.is_some())
            .field("elicitation_in_runs", &self.elicit_in_runs)
            .field("protocol_version", &self.protocol_version)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    fn with_endpoint(name: impl Into<String>, endpoint: Endpoint) -> Self {
        Self {
            name: name.into(),
            endpoint,
            prefix: None,
            separator: "__".to_owned(),
            trusted: false,
            default_policy: None,
            overrides: HashMap::new(),
            include: None,
            exclude: BTreeSet::new(),
            call_timeout: None,
            connect_timeout: Duration::from_secs(30),
            elicitation: None,
            elicit_in_runs: true,
            protocol_version: None,
        }
    }

    /// A server started as a child process (`program args..`), spoken to over its
    /// stdin and stdout. The child is killed when the toolset is dropped or closed,
    /// and started again when a call finds it gone.
    pub fn stdio<I, S>(name: impl Into<String>, program: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_endpoint(
            name,
            Endpoint::Stdio {
                program: program.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: BTreeMap::new(),
                cwd: None,
            },
        )
    }

    /// A server reached over MCP's streamable HTTP transport at `url`.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::with_endpoint(
            name,
            Endpoint::Http {
                url: url.into(),
                headers: Vec::new(),
                bearer: None,
            },
        )
    }

    /// A server reached over any byte stream: `open` is called for the first
    /// connection and for every reconnection (e.g. a Unix socket, or an in-process
    /// server in tests).
    pub fn stream<F, Fut>(name: impl Into<String>, open: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::io::Result<ByteStream>> + Send + 'static,
    {
        let factory: StreamFactory = Arc::new(move || Box::pin(open()));
        Self::with_endpoint(name, Endpoint::Stream(factory))
    }

    /// Sets an environment variable of the child process (stdio only).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let Endpoint::Stdio { env, .. } = &mut self.endpoint {
            env.insert(key.into(), value.into());
        }
        self
    }

    /// Sets the child's working directory (stdio only).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        if let Endpoint::Stdio { cwd, .. } = &mut self.endpoint {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Adds an HTTP header sent with every request (HTTP only).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Endpoint::Http { headers, .. } = &mut self.endpoint {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// Sends `Authorization: Bearer <token>` with every request (HTTP only). The token
    /// never appears in `Debug` output or errors.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        if let Endpoint::Http { bearer, .. } = &mut self.endpoint {
            *bearer = Some(token.into());
        }
        self
    }

    /// Names the server's tools `<prefix><separator><tool>` instead of
    /// `<server name><separator><tool>`. An empty prefix keeps the server's own names.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The text between prefix and tool name (default `__`; tool names may only use
    /// `a-z A-Z 0-9 _ -`, so `.` is not available).
    pub fn separator(mut self, separator: impl Into<String>) -> Self {
        self.separator = separator.into();
        self
    }

    /// Declares the server trusted: its tools without annotations run without
    /// confirmation (see the crate docs for how annotations set the default policy).
    pub fn trusted(mut self, trusted: bool) -> Self {
        self.trusted = trusted;
        self
    }

    /// The policy of every tool of this server that has no override. When set, the
    /// server's annotations are not consulted.
    pub fn default_policy(mut self, policy: ToolPolicy) -> Self {
        self.default_policy = Some(policy);
        self
    }

    /// The policy of one tool (by its MCP name). Always wins over annotations and the
    /// server's default policy.
    pub fn tool_policy(mut self, tool: impl Into<String>, policy: ToolPolicy) -> Self {
        self.overrides.insert(tool.into(), policy);
        self
    }

    /// Offers only these tools (by MCP name).
    pub fn include<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.include = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// Leaves these tools out (by MCP name).
    pub fn exclude<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.exclude.extend(tools.into_iter().map(Into::into));
        self
    }

    /// The timeout of tools whose policy sets none (default: the executor's).
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// How long starting the server and the MCP handshake may take (default 30 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Speaks only this protocol revision instead of probing: `2026-07-28` opens with
    /// `server/discover` and never falls back; `2025-11-25`, `2025-06-18`, `2025-03-26`
    /// or `2024-11-05` open with `initialize` announcing it. For a server whose
    /// revision is known (or a test suite that names one). Without it, a connection
    /// probes with `server/discover` for 2026-07-28 and falls back to `initialize` with
    /// 2025-11-25, the newest revision that has it. `connect` refuses a revision this
    /// crate does not know.
    pub fn protocol_version(mut self, version: impl Into<String>) -> Self {
        self.protocol_version = Some(version.into());
        self
    }

    /// Answers the server's questions to the user (`elicitation/create`, form mode)
    /// with `answer`, while the tool call that asked waits, instead of pausing the
    /// run. An accepted answer that does not match the requested schema is refused
    /// back to the server. The call's timeout keeps running while the person answers.
    ///
    /// Without a callback, a question goes to the run of the call that asked
    /// ([`reins_tool::ToolContext::ask`]): the run pauses with a user-input
    /// requirement (the requested schema as its fields) and `resolve` answers it; see
    /// the crate docs.
    pub fn on_elicitation<F, Fut>(mut self, answer: F) -> Self
    where
        F: Fn(Elicitation) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ElicitationAnswer> + Send + 'static,
    {
        self.elicitation = Some(Arc::new(move |e| Box::pin(answer(e))));
        self
    }

    /// Does not declare the elicitation capability at all, so servers do not ask
    /// (the default declares it: questions pause the asking call's run, or go to
    /// [`on_elicitation`](Self::on_elicitation)'s callback).
    pub fn no_elicitation(mut self) -> Self {
        self.elicitation = None;
        self.elicit_in_runs = false;
        self
    }

    /// The server's name (used in tool names, errors and logs).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The reins tool name an MCP tool of this server gets: the prefix, the separator,
    /// and the MCP name with every character a model provider refuses replaced by `_`,
    /// cut to 64 characters.
    pub fn tool_name(&self, mcp_name: &str) -> String {
        let prefix = self.prefix.as_deref().unwrap_or(&self.name);
        let raw = if prefix.is_empty() {
            mcp_name.to_owned()
        } else {
            format!("{prefix}{}{mcp_name}", self.separator)
        };
        raw.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect()
    }

    /// Whether a tool (by MCP name) is offered.
    pub(crate) fn offers(&self, mcp_name: &str) -> bool {
        !self.exclude.contains(mcp_name)
            && self
                .include
                .as_ref()
                .is_none_or(|only| only.contains(mcp_name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_sanitized() {
        let s = McpServer::stdio("everything", "node", ["x"]);
        assert_eq!(s.tool_name("echo"), "everything__echo");
        assert_eq!(s.tool_name("get.sum/v2"), "everything__get_sum_v2");
        let s = s.prefix("ev").separator("-");
        assert_eq!(s.tool_name("echo"), "ev-echo");
        let s = McpServer::http("h", "http://127.0.0.1:1/mcp").prefix("");
        assert_eq!(s.tool_name("echo"), "echo");
        assert_eq!(s.tool_name(&"x".repeat(80)).len(), 64);
    }

    #[test]
    fn filters_and_secrets() {
        let s = McpServer::stdio("a", "p", Vec::<String>::new())
            .env("API_KEY", "sk-secret")
            .include(["x", "y"])
            .exclude(["y"]);
        assert!(s.offers("x") && !s.offers("y") && !s.offers("z"));
        assert!(!format!("{s:?}").contains("sk-secret"));
        let h = McpServer::http("h", "http://127.0.0.1:1/mcp")
            .bearer_token("tok-secret")
            .header("X-Key", "hdr-secret");
        let dbg = format!("{h:?}");
        assert!(
            !dbg.contains("tok-secret") && !dbg.contains("hdr-secret"),
            "{dbg}"
        );
        assert!(dbg.contains("X-Key"));
    }
}
