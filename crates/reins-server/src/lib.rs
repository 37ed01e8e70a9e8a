//! # reins-server
//!
//! reins agents as an HTTP service: sessions over JSON and Server-Sent Events, bearer
//! tokens mapped to principals with roles, an approval inbox in the browser, and any
//! number of instances sharing one PostgreSQL store.
//!
//! [`Server::new`] takes a session port ([`Sessions`]): an
//! [`Agent`](reins_agent::Agent), whose sessions run in this process, or
//! [`Relayed`](reins_agent::Relayed) over a [`SessionBackend`](reins_agent::SessionBackend)
//! whose own processes run them (a Restate deployment), behind the same API and
//! inbox. [`Server::serve`] serves it on a TCP listener (HTTP/1.1 with header, body
//! and request timeouts against slow clients), and [`Server::router`] gives an
//! [`axum::Router`] to mount in a larger application (serve that with [`serve()`] to
//! keep the header timeout).
//!
//! | endpoint | what it does |
//! |---|---|
//! | `POST /v1/sessions/{id}/runs` `{message}` | starts a run; its output, or SSE with `?stream=true` |
//! | `GET /v1/sessions?status=&principal=&tool=` | the sessions with their status, owner and pending tools, newest activity first, paginated |
//! | `GET /v1/sessions/{id}` | status, transcript, pending requirements, view token |
//! | `GET /v1/sessions/{id}/decisions` | the audit trail |
//! | `POST /v1/sessions/{id}/decisions` | approve / reject / input / external result; the run goes on |
//! | `POST /v1/sessions/{id}/interrupt` | stops the run wherever it executes |
//! | `GET /v1/sessions/{id}/evidence`, `GET /.well-known/jwks.json` | the session's evidence bundle (hash chain, signed receipts; JSON lines) and the receipts' keys; see `docs/evidence.md` |
//! | `GET /v1/sessions/{id}/events` | live events (SSE, `Last-Event-ID` to resume) |
//! | `GET /v1/requirements?status=pending` | the inbox across sessions, newest first, paginated |
//! | `GET /v1/events` | inbox changes (SSE) |
//! | `GET /v1/policy/shadow` | where the shadow policy set would have answered differently (admin; [`Server::policy`]) |
//! | `GET /v1/policy`, `POST /v1/policy/reload` | the policy sets in use, their digests and the last refused reload; reload now (admin; the configuration's `[policies]`, [`config`]) |
//! | `GET /v1/openapi.json`, `GET /healthz`, `GET /readyz`, `GET /` (the inbox page) | |
//! | `GET`/`POST /inbox/email/{token}` | an email approval link: the confirmation page, and its form that decides (`Server::email_approvals`, feature `email`) |
//! | `POST /v1/slack/interactions` | Slack's button presses, signature checked (`Server::slack_approvals`, feature `slack`) |
//! | `POST /agui` | AG-UI: a `RunAgentInput` in, the run as AG-UI events (SSE) out; see `docs/protocols.md` |
//! | `GET /.well-known/agent-card.json`, `POST /a2a` | A2A: the agent card, and JSON-RPC (tasks, SSE streaming); see `docs/protocols.md` |
//!
//! Errors are JSON, `{"error": {"code", "message"}}`, with the matching status (400,
//! 401, 403, 404, 409, 413, 422); a refused request changes nothing. See
//! `docs/server.md` for curl examples and for running several instances.
//!
//! Everything an operator sets can come from one file, `reins.toml` ([`config`]):
//! `Config::from_path(..)?.setup().await?` opens the store and loads the policies,
//! `Setup::agent` gives them to the agent, and [`Server::from_config`] builds the
//! server over its port (docs/configuration.md).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use reins_agent::Agent;
//! use reins_model::{ScriptedModel, ScriptedResponse};
//! use reins_server::{AccessRole, Auth, Principal, Server};
//!
//! let agent = Agent::builder()
//!     .model(ScriptedModel::new([ScriptedResponse::text("Hello!")]))
//!     .build()?;
//! let auth = Auth::new().token("alice-token", Principal::new("alice", [AccessRole::User]));
//! let server = Server::new(agent).auth(auth);
//!
//! // Serve it (here on a free loopback port), then talk to it over HTTP.
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?;
//! let server = tokio::spawn(server.serve(listener));
//!
//! let mut stream = tokio::net::TcpStream::connect(addr).await?;
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! let body = r#"{"message":"hi"}"#;
//! let request = format!(
//!     "POST /v1/sessions/alice%2Fchat-1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-token\r\n\
//!      Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
//!     body.len()
//! );
//! stream.write_all(request.as_bytes()).await?;
//! let mut answer = String::new();
//! stream.read_to_string(&mut answer).await?;
//! assert!(answer.starts_with("HTTP/1.1 200"));
//! assert!(answer.contains(r#""status":"completed""#));
//! server.abort();
//! # Ok(()) }
//! ```
//!
//! ## Features
//!
//! | feature    | default | what it adds |
//! |------------|---------|--------------|
//! | `sqlite`   | yes     | the SQLite store in reins-agent |
//! | `postgres` | no      | the PostgreSQL store in reins-agent (several instances on one database) |
//! | `email`    | yes     | approvals by email (`EmailApprovals`): SMTP (lettre), signed single-use links |
//! | `slack`    | yes     | approvals in Slack (`SlackApprovals`): buttons, the signed interactivity endpoint |
//! | `oidc`     | yes     | OpenID Connect bearer tokens (`reins_server::oidc`): JWTs checked against a JWKS (jsonwebtoken) |
//! | `otel`     | no      | OTLP export of spans over HTTP and gRPC (`reins_server::otel`) |
//!
//! A minimal server — `default-features = false, features = ["sqlite"]` — has static
//! tokens, webhooks and A2A push, and no SMTP, Slack-signing or JWT library in its tree.

// The resources, each with its routes: runs, reads, decisions, interrupts and live
// events of one session; the approval inbox across sessions; liveness and readiness.
// Beside them, the ecosystem's protocols: AG-UI for people's screens, A2A for other
// agents.
mod a2a;
mod agui;
pub mod approvals;
mod evidence;
mod grants;
mod health;
mod inbox;
#[cfg(feature = "otel")]
pub mod otel;
mod policy;
pub mod prometheus;
mod sessions;

pub mod notify;

pub mod auth;
pub mod config;
mod error;
mod extract;
mod hub;
#[cfg(feature = "oidc")]
pub use auth::oidc;
mod openapi;
pub mod serve;
mod sse;
mod state;
mod strict;
mod trace_context;
pub mod types;
mod view;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use reins_agent::port::Sessions;
use tower_http::compression::CompressionLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};
use tower_http::trace::TraceLayer;

#[cfg(feature = "email")]
pub use approvals::EmailApprovals;
#[cfg(feature = "slack")]
pub use approvals::SlackApprovals;
pub use approvals::{ApprovalConfigError, Clock, ExpiryAction, WaitPolicy, Waiting};
pub use auth::{
    AccessRole, Auth, AuthConfigError, Identity, Principal, generate_token, hash_token,
};
pub use error::{ErrorBody, ErrorDetail, Result, ServerError};
#[cfg(feature = "oidc")]
pub use oidc::{Oidc, OidcConfig};
pub use openapi::ApiDoc;
pub use serve::{ServeOptions, serve, serve_with_shutdown};

use crate::extract::BodyLimit;
use crate::hub::Hub;
use crate::state::{AppState, Limits};

/// Builds the service over a session port ([`Sessions`]); see the [crate docs](crate).
#[must_use]
pub struct Server {
    /// The session port every door holds.
    sessions: Arc<dyn Sessions>,
    auth: Auth,
    limits: Limits,
    poll_interval: Duration,
    serve: ServeOptions,
    approvals: approvals::Approvals,
    channels: Vec<Arc<dyn notify::Channel>>,
    notify: notify::NotifyOptions,
    policy: Option<reins_policy::CedarPolicy>,
    /// The policies kept in directories, and what reloads them.
    policy_dir: Option<(Arc<reins_policy::PolicyDir>, policy::Reloads)>,
    /// Whether `GET /metrics` is served.
    metrics: bool,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("agent", &self.sessions.card().name)
            .field("auth", &self.auth)
            .field("limits", &self.limits)
            .field("serve", &self.serve)
            .field("approvals", &self.approvals)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A server over `sessions`, the session port every door of the server holds and
    /// nothing else: an [`Agent`](reins_agent::Agent) (the local driver: its sessions
    /// run in this process), [`Relayed`](reins_agent::Relayed) over a
    /// [`SessionBackend`](reins_agent::SessionBackend) whose own processes run them (a
    /// Restate deployment: reins-restate's `RestateClient`), or a port of the
    /// application's own. Without [`auth`](Server::auth) every request is refused
    /// (401).
    ///
    /// Over [`Relayed`](reins_agent::Relayed), the agent it is given is configuration
    /// (name, tools, eligibility for grants) and the store the backend records its
    /// sessions in; its model is never called. Every door answers as over the local
    /// driver: runs, decisions (the one decision path, in the run), interrupts,
    /// forks, replays, AG-UI and A2A. A run in the backend's processes is followed
    /// through the port: the live events of its steps in progress (text deltas, tool
    /// calls starting and finishing) come from the backend's processes, which send
    /// them to `POST /v1/sessions/{id}/live` on each instance (a principal with the
    /// admin role; reins-restate's `LiveRelay`), and the store says when it paused or
    /// ended; its output — usage, iterations and structured answer included — is read
    /// back from the store. An `Idempotency-Key` header on a run or a decision is
    /// passed to the backend (Restate answers a repeated key with the first answer).
    /// See `docs/restate.md`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use reins_agent::{Agent, Relayed, SessionBackend};
    /// # use reins_model::{ScriptedModel, ScriptedResponse};
    /// # use reins_server::Server;
    /// # fn demo(backend: Arc<dyn SessionBackend>) -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::new(Vec::<ScriptedResponse>::new()))
    ///     .build()?;
    /// // The local driver…
    /// let here = Server::new(agent.clone());
    /// // …or a backend's processes (a Restate deployment) behind the same doors.
    /// let there = Server::new(Relayed::new(agent, backend));
    /// # let _ = (here, there);
    /// # Ok(()) }
    /// ```
    pub fn new(sessions: impl Sessions + 'static) -> Self {
        Self::with_sessions(Arc::new(sessions))
    }

    /// As [`Server::new`], with a port already shared (say, with the MCP and ACP
    /// doors of the same process).
    pub fn with_sessions(sessions: Arc<dyn Sessions>) -> Self {
        Self {
            sessions,
            auth: Auth::new(),
            limits: Limits {
                body_limit: 1024 * 1024,
                request_timeout: Duration::from_secs(300),
                body_timeout: Duration::from_secs(15),
                keep_alive: Duration::from_secs(15),
            },
            poll_interval: Duration::from_secs(2),
            serve: ServeOptions::default(),
            approvals: approvals::Approvals::default(),
            channels: Vec::new(),
            notify: notify::NotifyOptions::default(),
            policy: None,
            policy_dir: None,
            metrics: true,
        }
    }

    /// Takes decisions by email: each approver configured in `email` who may decide on
    /// a waiting call gets a mail with the call and a signed, single-use link to a
    /// confirmation page (`/inbox/email/{token}`), whose form decides as that approver
    /// (audited `via: email`). See `docs/notifications.md`. With the `email` feature.
    #[cfg(feature = "email")]
    pub fn email_approvals(mut self, email: EmailApprovals) -> Self {
        self.approvals.email = Some(email);
        self
    }

    /// Takes decisions from Slack: a message per waiting call with Approve / Reject /
    /// Edit buttons, and the interactivity endpoint `POST /v1/slack/interactions`
    /// (Slack's request signature checked; audited `via: slack`). See
    /// `docs/notifications.md`. With the `slack` feature.
    #[cfg(feature = "slack")]
    pub fn slack_approvals(mut self, slack: SlackApprovals) -> Self {
        self.approvals.slack = Some(slack);
        self
    }

    /// How long calls may wait, per tool: after a while the next group of approvers
    /// is told (a `requirement.escalated` notice), and once a call's time to live
    /// passed it is rejected with a note (audited `via: expiry`) or left waiting (a
    /// `requirement.expired` notice). A sweep on every instance applies the rules;
    /// see [`Waiting`].
    pub fn waiting(mut self, waiting: Waiting) -> Self {
        self.approvals.waiting = waiting;
        self
    }

    /// The tokens and their principals.
    pub fn auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    /// The largest request body accepted (default 1 MiB); larger ones get 413.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.limits.body_limit = bytes;
        self
    }

    /// How long a request may take before it gets 408 (default 300 s). A run answered
    /// without `stream=true` must end within it (the run itself goes on regardless).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.limits.request_timeout = timeout;
        self
    }

    /// How long a client has to send a whole request body (default 15 s), however it
    /// paces it: a body that stalls or trickles in slower gets 408 and nothing is done.
    /// Response bodies (SSE streams) are not affected.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.limits.body_timeout = timeout;
        self
    }

    /// How long a client has to send a request's line and headers (default 15 s); it
    /// also bounds idle keep-alive connections. It applies when the server serves
    /// itself ([`serve`](Server::serve)); a router nested elsewhere gets it from
    /// [`serve()`](crate::serve()) with [`ServeOptions`].
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.serve = self.serve.header_timeout(timeout);
        self
    }

    /// Other instances' writes are noticed through the store's change feed; this is
    /// how often all sessions' versions are also compared, as a safety net, while
    /// someone watches (default 2 s).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// How often idle SSE streams send a keep-alive comment (default 15 s).
    pub fn keep_alive(mut self, every: Duration) -> Self {
        self.limits.keep_alive = every;
        self
    }

    /// Registers a notification channel (see [`notify`]): the notices it
    /// [wants](notify::Channel::wants) are delivered to it from the store's outbox, with
    /// retries. A channel whose name another registered channel has replaces it.
    pub fn channel(mut self, channel: impl notify::Channel) -> Self {
        let channel: Arc<dyn notify::Channel> = Arc::new(channel);
        self.channels.retain(|c| c.name() != channel.name());
        self.channels.push(channel);
        self
    }

    /// How notices are retried and leased (see [`notify::NotifyOptions`]).
    pub fn notify_options(mut self, options: notify::NotifyOptions) -> Self {
        self.notify = options;
        self
    }

    /// The Cedar policies the agent asks (a clone of the
    /// [`CedarPolicy`](reins_policy::CedarPolicy) given to
    /// [`AgentBuilder::approval_policy`](reins_agent::AgentBuilder::approval_policy)):
    /// `GET /v1/policy/shadow` and the inbox's **Policy shadow** view (admins) list
    /// where its shadow set would have answered differently. The differences are the
    /// policy's [`ShadowLog`](reins_policy::ShadowLog): open it on a file
    /// ([`ShadowLog::open`](reins_policy::ShadowLog::open)) to keep them across
    /// restarts. See `docs/policy.md`.
    pub fn policy(mut self, policy: reins_policy::CedarPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// The Cedar policies kept in directories ([`reins_policy::PolicyDir`]; the agent
    /// asks a clone of its [`policy`](reins_policy::PolicyDir::policy)), as
    /// [`Server::policy`] does, and reloaded on SIGHUP (when `reloads` says so), on a
    /// change in the directories (looked at every `reloads.watch`) and at
    /// `POST /v1/policy/reload`; `GET /v1/policy` shows the sets in use, their
    /// digests and the last refused reload. The configuration file's `[policies]`
    /// sets this ([`Server::from_config`]).
    pub(crate) fn policy_dir(
        mut self,
        dir: Arc<reins_policy::PolicyDir>,
        reloads: policy::Reloads,
    ) -> Self {
        self.policy = Some(dir.policy().clone());
        self.policy_dir = Some((dir, reloads));
        self
    }

    /// Whether to serve `GET /metrics` (default true).
    pub fn metrics(mut self, on: bool) -> Self {
        self.metrics = on;
        self
    }

    /// The OpenAPI document of the API.
    pub fn openapi() -> utoipa::openapi::OpenApi {
        <ApiDoc as utoipa::OpenApi>::openapi()
    }

    /// Serves the [`router`](Server::router) on `listener` (HTTP/1.1, with the header
    /// timeout) until the process ends.
    ///
    /// # Errors
    ///
    /// See [`serve()`](crate::serve()).
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        let options = self.serve.clone();
        serve::serve(listener, self.router(), options).await
    }

    /// Like [`serve`](Server::serve), until `signal` completes (see
    /// [`serve_with_shutdown()`](crate::serve_with_shutdown())).
    ///
    /// # Errors
    ///
    /// See [`serve()`](crate::serve()).
    pub async fn serve_with_shutdown<F>(
        self,
        listener: tokio::net::TcpListener,
        signal: F,
    ) -> std::io::Result<()>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let options = self.serve.clone();
        serve::serve_with_shutdown(listener, self.router(), options, signal).await
    }

    /// The service, ready to serve or to nest in another router.
    pub fn router(self) -> Router {
        if self.auth.is_empty() {
            tracing::warn!("reins-server has no tokens configured: every request will get 401");
        }
        let limits = self.limits.clone();
        let sessions = self.sessions;
        let relayed = if sessions.runs_here() {
            Router::new()
        } else {
            sessions::live_router()
        };
        // The outbox records notices from now on (the dispatcher turns it on), and
        // this instance delivers them (with every other instance sharing the store).
        let store = Arc::clone(sessions.record());
        let webhooks = Arc::new(notify::webhook::Webhooks::new(Arc::clone(&store)));
        let pushes = Arc::new(a2a::push::Pushes::new(Arc::clone(&store)));
        let auth = Arc::new(self.auth);
        let mut dispatcher = notify::Dispatcher::new(store)
            .source(webhooks.clone())
            .source(pushes)
            .options(self.notify)
            .owner(format!("reins-server/{}", uuid::Uuid::new_v4()));
        for c in self.channels {
            dispatcher = dispatcher.channel_arc(c);
        }
        for c in self.approvals.channels(&sessions, &auth) {
            dispatcher = dispatcher.channel_arc(c);
        }
        let waiting = self.approvals.waiting.clone();
        let approval_channels = Arc::new(self.approvals);
        let reloading = self.policy_dir.as_ref().map(|(dir, reloads)| {
            Arc::new(policy::spawn_reloads(dir, *reloads)) as Arc<dyn std::any::Any + Send + Sync>
        });
        let mut state = AppState {
            policy_dir: self.policy_dir.map(|(dir, _)| dir),
            _reloading: reloading,
            _dispatching: dispatcher.spawn().map(Arc::new),
            webhooks,
            policy: self.policy,
            sessions,
            auth,
            hub: Arc::new(Hub::new(self.poll_interval)),
            limits: Arc::new(self.limits),
            approvals: approval_channels.clone(),
            _sweeping: None,
        };
        // The sweep's own state holds no handle to it: it stops with the router.
        state._sweeping = approvals::waiting::spawn(state.clone(), waiting).map(Arc::new);
        // A backend whose runs execute in its own processes relays their live events
        // here; AG-UI and A2A run through whatever runs the sessions.
        let protocols = relayed.merge(agui::router()).merge(a2a::router());
        Router::new()
            .merge(sessions::router())
            .merge(inbox::router())
            .merge(grants::router())
            .merge(evidence::router())
            .merge(approvals::router(approvals::ApprovalsState {
                app: state.clone(),
                approvals: approval_channels,
            }))
            .merge(notify::api::router())
            .merge(policy::router())
            .merge(health::router())
            .merge(if self.metrics {
                prometheus::router()
            } else {
                Router::new()
            })
            .merge(openapi::router())
            .merge(protocols)
            .fallback(error::not_found)
            .with_state(state)
            .layer(axum::Extension(BodyLimit(
                limits.body_limit,
                limits.body_timeout,
            )))
            .layer(RequestBodyLimitLayer::new(limits.body_limit))
            .layer(RequestBodyTimeoutLayer::new(limits.body_timeout))
            .layer(TimeoutLayer::with_status_code(
                StatusCode::REQUEST_TIMEOUT,
                limits.request_timeout,
            ))
            .layer(axum::middleware::map_response(error::json_errors))
            .layer(axum::middleware::from_fn(trace_context::keep))
            .layer(CompressionLayer::new())
            .layer(TraceLayer::new_for_http())
    }
}
