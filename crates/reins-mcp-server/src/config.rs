//! [`McpAgentServer`] and its builder.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_agent::Interrupter;
use reins_agent::port::Sessions;

use crate::error::{Error, Result};
use crate::state::Sealer;

/// Finds the principal of an HTTP request (from its headers, e.g. a bearer token);
/// `None` refuses the request.
#[cfg(feature = "http")]
pub type Authenticate = Arc<dyn Fn(&http::request::Parts) -> Option<String> + Send + Sync>;

/// A reins agent as an MCP server: one tool that runs the agent, through the session
/// port ([`Sessions`]) whichever driver runs the sessions. Cheap to clone; every clone
/// serves the same sessions (see the [crate docs](crate)).
#[derive(Clone)]
pub struct McpAgentServer {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The session port: every read, run, decision and interrupt goes through it.
    pub(crate) sessions: Arc<dyn Sessions>,
    pub(crate) tool_name: String,
    pub(crate) description: String,
    pub(crate) destructive: bool,
    pub(crate) idempotent: bool,
    pub(crate) sealer: Sealer,
    pub(crate) tasks: bool,
    pub(crate) poll_interval: Duration,
    pub(crate) task_ttl: Option<Duration>,
    pub(crate) principal: String,
    #[cfg(feature = "http")]
    pub(crate) authenticate: Option<Authenticate>,
    /// Browser origins allowed besides the served hosts' own.
    #[cfg(feature = "http")]
    pub(crate) allowed_origins: Vec<String>,
    /// Where a paused call tells a client that cannot answer to decide.
    pub(crate) inbox_url: Option<String>,
    /// The runs this server started and follows (their handles' interrupters), by
    /// session id: wherever the driver executes them, they are "running here" until
    /// their handle ends.
    pub(crate) running: Mutex<HashMap<String, Interrupter>>,
}

impl Inner {
    pub(crate) fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Interrupter>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl McpAgentServer {
    /// Starts configuring a server over `sessions`: an `Arc<dyn Sessions>` (the
    /// session port of any driver: `reins_agent::port::Relayed` over a Restate
    /// deployment, say), or an `Agent` itself, which is the local driver.
    pub fn builder(sessions: impl Sessions + 'static) -> McpAgentServerBuilder {
        McpAgentServerBuilder {
            sessions: Arc::new(sessions),
            tool_name: None,
            description: None,
            destructive: None,
            idempotent: None,
            signing_key: None,
            state_ttl: Duration::from_secs(600),
            tasks: true,
            poll_interval: Duration::from_millis(500),
            task_ttl: None,
            principal: "local".to_owned(),
            #[cfg(feature = "http")]
            authenticate: None,
            #[cfg(feature = "http")]
            allowed_origins: Vec::new(),
            inbox_url: None,
        }
    }

    /// The session port the server runs the agent through.
    pub fn sessions(&self) -> &Arc<dyn Sessions> {
        &self.inner.sessions
    }

    /// The exposed tool's name.
    pub fn tool_name(&self) -> &str {
        &self.inner.tool_name
    }

    /// The exposed tool's description.
    pub fn description(&self) -> &str {
        &self.inner.description
    }

    /// The exposed tool's annotations: `(destructiveHint, idempotentHint)`.
    pub fn annotations(&self) -> (bool, bool) {
        (self.inner.destructive, self.inner.idempotent)
    }
}

/// Configures an [`McpAgentServer`]; [`build`](Self::build) checks it.
#[must_use]
pub struct McpAgentServerBuilder {
    sessions: Arc<dyn Sessions>,
    tool_name: Option<String>,
    description: Option<String>,
    destructive: Option<bool>,
    idempotent: Option<bool>,
    signing_key: Option<Vec<u8>>,
    state_ttl: Duration,
    tasks: bool,
    poll_interval: Duration,
    task_ttl: Option<Duration>,
    principal: String,
    #[cfg(feature = "http")]
    authenticate: Option<Authenticate>,
    #[cfg(feature = "http")]
    allowed_origins: Vec<String>,
    inbox_url: Option<String>,
}

impl McpAgentServerBuilder {
    /// The exposed tool's name (default: the agent's name, with characters MCP
    /// refuses replaced by `_`).
    pub fn tool_name(mut self, name: impl Into<String>) -> Self {
        self.tool_name = Some(name.into());
        self
    }

    /// The exposed tool's description (default: says what the agent is and which
    /// tools it can use).
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// Overrides `destructiveHint` (default: true unless every tool of the agent is
    /// idempotent).
    pub fn destructive(mut self, destructive: bool) -> Self {
        self.destructive = Some(destructive);
        self
    }

    /// Overrides `idempotentHint` (default: true when every tool of the agent is
    /// idempotent).
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = Some(idempotent);
        self
    }

    /// The HMAC key that seals `requestState` (at least 32 bytes; required). Servers
    /// that share a store must share the key, so a state issued by one opens on another.
    pub fn signing_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.signing_key = Some(key.into());
        self
    }

    /// How long a `requestState` stays valid (default 10 minutes).
    pub fn state_ttl(mut self, ttl: Duration) -> Self {
        self.state_ttl = ttl;
        self
    }

    /// Whether calls from clients that declare the Tasks extension become tasks
    /// (default: yes).
    pub fn tasks(mut self, on: bool) -> Self {
        self.tasks = on;
        self
    }

    /// The `pollIntervalMs` suggested to task clients (default 500 ms).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// The `ttlMs` announced for tasks (default: none, the session is kept).
    pub fn task_ttl(mut self, ttl: Duration) -> Self {
        self.task_ttl = Some(ttl);
        self
    }

    /// The principal of requests that carry no HTTP request (stdio), and of HTTP
    /// requests when no [`authenticate`](Self::authenticate) is set (default `local`).
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = principal.into();
        self
    }

    /// Finds the principal of each HTTP request; a request it returns `None` for is
    /// refused, and nothing runs.
    #[cfg(feature = "http")]
    pub fn authenticate(
        mut self,
        f: impl Fn(&http::request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.authenticate = Some(Arc::new(f));
        self
    }

    /// Browser origins allowed to call the HTTP endpoint besides the served hosts' own
    /// (`scheme://host[:port]`, `:*` for any port; `null` for `Origin: null`). A request
    /// whose `Origin` header names any other origin is refused with 403 before anything
    /// runs (the transport's defence against DNS rebinding); requests without `Origin`
    /// (programs, not browsers) are not affected. Adding none keeps the check on.
    #[cfg(feature = "http")]
    pub fn allowed_origins(mut self, origins: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_origins
            .extend(origins.into_iter().map(Into::into));
        self
    }

    /// Where a person decides the requirements of a paused call when the MCP client
    /// cannot be asked (no `elicitation` capability, or it dismissed the question): the
    /// URL of reins-server's approval inbox, e.g. `http://127.0.0.1:8080/`. The paused
    /// result then links the session there (`<url>?session=<id>`) and carries the link
    /// as `structuredContent.decide_at`.
    pub fn inbox_url(mut self, url: impl Into<String>) -> Self {
        self.inbox_url = Some(url.into());
        self
    }

    /// Checks the configuration.
    pub fn build(self) -> Result<McpAgentServer> {
        let key = self.signing_key.ok_or_else(|| {
            Error::Config(
                "a signing key is required to seal requestState (signing_key(..), at least 32 random bytes; \
                 servers sharing a store need the same key)"
                    .into(),
            )
        })?;
        let sealer = Sealer::new(key, self.state_ttl).map_err(|e| Error::Config(e.to_string()))?;
        let sessions = self.sessions;
        let card = sessions.card();
        let tool_name = match self.tool_name {
            Some(n) => n,
            None => tool_name_for(&card.name),
        };
        if tool_name.is_empty()
            || tool_name.len() > 128
            || !tool_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(Error::Config(format!(
                "`{tool_name}` is not a valid MCP tool name (1-128 of A-Z a-z 0-9 _ - .)"
            )));
        }
        if let Some(url) = &self.inbox_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(Error::Config(format!(
                "inbox_url `{url}` must be an http:// or https:// URL (reins-server's inbox page)"
            )));
        }
        if self.principal.is_empty() || self.principal.contains('/') {
            return Err(Error::Config(format!(
                "principal `{}` must be non-empty and contain no `/`",
                self.principal
            )));
        }
        let names = card.tool_names();
        let all_idempotent = card.all_idempotent();
        let description = self.description.unwrap_or_else(|| {
            let tools = if names.is_empty() {
                "no tools".to_owned()
            } else {
                format!("the tools {}", names.join(", "))
            };
            format!(
                "Ask the `{}` agent (reins): send a message, get its answer. It can use {tools}. \
                 Calls that need a person's approval or input come back as questions; \
                 pass `session` from a previous result to continue that conversation.",
                card.name
            )
        });
        Ok(McpAgentServer {
            inner: Arc::new(Inner {
                tool_name,
                description,
                destructive: self.destructive.unwrap_or(!all_idempotent),
                idempotent: self.idempotent.unwrap_or(all_idempotent),
                sealer,
                tasks: self.tasks,
                poll_interval: self.poll_interval,
                task_ttl: self.task_ttl,
                principal: self.principal,
                #[cfg(feature = "http")]
                authenticate: self.authenticate,
                #[cfg(feature = "http")]
                allowed_origins: self.allowed_origins,
                inbox_url: self.inbox_url,
                running: Mutex::new(HashMap::new()),
                sessions,
            }),
        })
    }
}

fn tool_name_for(agent: &str) -> String {
    let name: String = agent
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(128)
        .collect();
    if name.is_empty() {
        "agent".to_owned()
    } else {
        name
    }
}
