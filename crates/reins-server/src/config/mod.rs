//! `reins.toml`: one file for everything an operator sets — the store, the driver, the
//! listen address, who may call (static tokens, OpenID Connect), the Cedar policies
//! (with a shadow set, reloaded on SIGHUP, on file change and at
//! `POST /v1/policy/reload`), budgets and prices, notifications (webhooks, email,
//! Slack, escalation and expiry) and telemetry. The agent itself — its model and tools
//! — stays code.
//!
//! ```no_run
//! # async fn run(model: reins_model::ScriptedModel) -> Result<(), Box<dyn std::error::Error>> {
//! use reins_agent::Agent;
//! use reins_server::config::Config;
//!
//! let config = Config::from_path("reins.toml")?; // every value checked, secrets read
//! let setup = config.setup().await?; // the store opened, the policies loaded
//! let agent = setup.agent(Agent::builder().model(model)).build()?;
//! let server = setup.server(agent).await?; // = Server::from_config
//! server.serve(setup.listener().await?).await?;
//! # Ok(()) }
//! ```
//!
//! Every key can be set by an environment variable, which wins over the file:
//! `REINS_` and the dotted key's parts in capitals joined by `__`
//! (`notifications.email.smtp.host` is `REINS_NOTIFICATIONS__EMAIL__SMTP__HOST`). Its
//! value is read as a TOML value when it is one (`8080`, `true`, `["a", "b"]`,
//! `{ tokens = 1000 }`) and as a string otherwise. Secrets are never written in the
//! file: `{ env = "VAR" }`, `{ file = "path" }` or the key's own variable; they never
//! appear in `Debug`, logs, errors or [`Config::redacted`]. Unknown keys are refused;
//! every error names the key and its line (or variable). Relative paths are read from
//! the file's directory. docs/configuration.md lists every key.

mod build;
pub(crate) mod duration;
mod load;
mod secret;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use build::Setup;
pub use load::{ConfigError, ENV_PREFIX, ENV_SEPARATOR, Place};
pub use secret::{Secret, SecretSource};

use crate::auth::AccessRole;
#[cfg(feature = "oidc")]
use crate::oidc::OidcConfig;

/// A whole `reins.toml` (see the [module docs](self)); every section is optional.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[server]`: where to listen, the public URL, limits.
    #[serde(default)]
    pub server: ServerSection,
    /// `[store]`: SQLite or PostgreSQL.
    #[serde(default)]
    pub store: StoreSection,
    /// `[driver]`: what runs the sessions.
    #[serde(default)]
    pub driver: DriverSection,
    /// `[auth]`: static tokens and OpenID Connect.
    #[serde(default)]
    pub auth: AuthSection,
    /// `[policies]`: Cedar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policies: Option<PoliciesSection>,
    /// `[budgets]`: the default limits and the model prices.
    #[serde(default)]
    pub budgets: BudgetsSection,
    /// `[notifications]`: webhooks, email, Slack, escalation and expiry.
    #[serde(default)]
    pub notifications: NotificationsSection,
    /// `[telemetry]`: OTLP and metrics.
    #[serde(default)]
    pub telemetry: TelemetrySection,
    #[serde(skip)]
    pub(crate) places: load::Places,
    #[serde(skip)]
    pub(crate) base: PathBuf,
}

/// `[server]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// The address to listen on (`"127.0.0.1:8080"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// Where people reach the server (`"https://reins.example.com"`): email links and
    /// Slack's "open in the inbox" start with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// How long a request may take (default 300 s).
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub request_timeout: Option<Duration>,
    /// The largest request body, in bytes (default 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_limit: Option<usize>,
}

/// `[store]`: at most one of `sqlite` and `postgres` (neither: the program's default).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// The SQLite file (created when missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqlite: Option<PathBuf>,
    /// The PostgreSQL URL (a secret: it usually holds a password).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<Secret>,
}

/// What runs the sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverKind {
    /// This process (the local driver).
    #[default]
    Local,
    /// A Restate deployment.
    Restate,
}

/// `[driver]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DriverSection {
    /// `local` (default) or `restate`.
    #[serde(default)]
    pub kind: DriverKind,
    /// `restate`: the Restate ingress URL of a deployment run elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<String>,
    /// `restate` in `cargo xtask serve`: the first of the four ports of the local
    /// restate-server it starts (default 9080).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restate_ports: Option<u16>,
}

/// `[auth]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// Static tokens by principal name (`[auth.tokens.ana]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tokens: BTreeMap<String, TokenEntry>,
    /// An OpenID Connect provider whose JWTs are accepted (see `reins_server::oidc`).
    #[cfg(feature = "oidc")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<OidcConfig>,
    /// Without the `oidc` feature the section still parses, and is refused by
    /// [`Config::check`] naming the feature.
    #[cfg(not(feature = "oidc"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<toml::Value>,
}

/// `[auth.tokens.<name>]`: one principal and its token (exactly one of `token` and
/// `token_sha256`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    /// Its roles (`user`, `approver`, `admin`).
    pub roles: BTreeSet<AccessRole>,
    /// The token (a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// The token's SHA-256 digest (64 hex digits; [`crate::hash_token`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_sha256: Option<String>,
    /// For `user`: the session prefix it owns (default `<name>/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_prefix: Option<String>,
    /// For `approver`: the tools it may decide on (absent: every tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<BTreeSet<String>>,
}

fn yes() -> bool {
    true
}

fn two_seconds() -> Duration {
    Duration::from_secs(2)
}

/// `[policies]`: Cedar policies from a directory (see docs/policy.md).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoliciesSection {
    /// The directory of the active set (every `*.cedar` file in it).
    pub dir: PathBuf,
    /// The directory of the shadow set, evaluated beside the active one and never
    /// acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_dir: Option<PathBuf>,
    /// A JSON-lines file that keeps the shadow differences across restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_log: Option<PathBuf>,
    /// Reload when the process gets SIGHUP (default true; Unix).
    #[serde(default = "yes")]
    pub reload_on_sighup: bool,
    /// Reload when a file in the directories changes, is added or removed (default
    /// true).
    #[serde(default = "yes")]
    pub watch: bool,
    /// How often the directories are looked at for changes (default 2 s).
    #[serde(default = "two_seconds", with = "duration")]
    pub watch_interval: Duration,
}

/// `[budgets]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetsSection {
    /// The limits of a session that has none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<BudgetLimits>,
    /// Prices per model name (as the model reports it), for cost limits.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, PriceEntry>,
}

/// `[budgets.default]`: limits left out do not apply.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetLimits {
    /// Model tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Cost, in the prices' unit (needs a price for the agent's model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Tool calls started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// Time the session's runs were active, in whole seconds (`"1500ms"` is refused).
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub wall_time: Option<Duration>,
}

/// `[budgets.prices."<model>"]`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PriceEntry {
    /// Per million input tokens.
    pub input_per_million: f64,
    /// Per million output tokens.
    pub output_per_million: f64,
}

fn fifteen_seconds() -> Duration {
    Duration::from_secs(15)
}

/// `[notifications]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationsSection {
    /// How often waiting calls are looked at for escalation and expiry (default 15 s).
    #[serde(default = "fifteen_seconds", with = "duration")]
    pub sweep_interval: Duration,
    /// Webhook subscribers by name (`[notifications.webhooks.ops]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub webhooks: BTreeMap<String, WebhookEntry>,
    /// Approvals by email.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<EmailSection>,
    /// Approvals in Slack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackSection>,
    /// Escalation and expiry per tool (`[notifications.waiting.delete_file]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub waiting: BTreeMap<String, WaitEntry>,
    /// How notices are delivered: attempts, back-off, leases (`[notifications.delivery]`).
    #[serde(default)]
    pub delivery: DeliverySection,
}

impl Default for NotificationsSection {
    fn default() -> Self {
        Self {
            sweep_interval: fifteen_seconds(),
            webhooks: BTreeMap::new(),
            email: None,
            slack: None,
            waiting: BTreeMap::new(),
            delivery: DeliverySection::default(),
        }
    }
}

/// `[notifications.delivery]`: how this instance delivers notices to webhooks, email,
/// Slack and A2A push subscribers ([`NotifyOptions`](crate::notify::NotifyOptions); the
/// defaults are its defaults).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeliverySection {
    /// Attempts before a delivery is dead (default 8; at least 1).
    pub max_attempts: u32,
    /// The delay before the second attempt, doubled for each later one (default 1 s).
    #[serde(with = "duration")]
    pub backoff: Duration,
    /// The longest delay between attempts (default 10 min; not below `backoff`).
    #[serde(with = "duration")]
    pub max_backoff: Duration,
    /// How long a claimed attempt is this instance's alone (default 60 s).
    #[serde(with = "duration")]
    pub lease: Duration,
    /// How often the outbox is looked at when no change wakes the dispatcher (default 1 s).
    #[serde(with = "duration")]
    pub poll_interval: Duration,
    /// How many deliveries this instance attempts at a time (default 16); 0: it writes
    /// and routes notices and leaves the delivering to the other instances.
    pub batch: usize,
}

impl Default for DeliverySection {
    fn default() -> Self {
        let o = crate::notify::NotifyOptions::default();
        Self {
            max_attempts: o.max_attempts,
            backoff: o.base_backoff,
            max_backoff: o.max_backoff,
            lease: o.lease,
            poll_interval: o.poll_interval,
            batch: o.batch,
        }
    }
}

/// `[notifications.webhooks.<name>]`: a subscriber, signed with the Standard Webhooks
/// scheme (see docs/notifications.md). Stored with the id `wh_config_<name>`, written
/// again at every start; one removed from the file is removed from the store.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookEntry {
    /// Where notices are POSTed (`http://` or `https://`).
    pub url: String,
    /// The signing secret, `whsec_` and base64 (a secret).
    pub secret: Secret,
    /// The event types it wants (`requirement.created`, ...; empty: all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event_types: Vec<String>,
    /// The tools it wants (empty: all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Only sessions whose id starts with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_prefix: Option<String>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// How the SMTP connection is protected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SmtpTls {
    /// TLS from the first byte (`smtps`, port 465 by default).
    Tls,
    /// STARTTLS, required (port 587 by default).
    #[default]
    Starttls,
    /// STARTTLS when the server offers it, plain otherwise (port 587 by default).
    Opportunistic,
    /// No TLS (a relay on the same host; port 25 by default).
    None,
}

/// `[notifications.email.smtp]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpSection {
    /// The host.
    pub host: String,
    /// The port (default by `tls`: 465, 587, 587, 25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// `tls`, `starttls` (default), `opportunistic` or `none`.
    #[serde(default)]
    pub tls: SmtpTls,
    /// The user name, when the server wants a login (with `password`; one alone is
    /// refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The password (a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<Secret>,
}

/// `[notifications.email]`: approvals by email (see docs/notifications.md).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSection {
    /// The SMTP server.
    pub smtp: SmtpSection,
    /// The sender (`"reins <approvals@example.com>"`).
    pub from: String,
    /// Where the links point (default `server.public_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The key links are signed with (a secret, at least 32 bytes; the same on every
    /// instance).
    pub link_secret: Secret,
    /// How long a link works when its call has no expiry of its own (default 24 h).
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub link_ttl: Option<Duration>,
    /// Principal name → address of the approvers to mail.
    #[serde(default)]
    pub approvers: BTreeMap<String, String>,
}

/// `[notifications.slack]`: approvals in Slack (see docs/notifications.md).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SlackSection {
    /// The bot token, `xoxb-...` (a secret).
    pub bot_token: Secret,
    /// The app's signing secret (a secret).
    pub signing_secret: Secret,
    /// The channel messages go to (`C0123456789`).
    pub channel: String,
    /// The Web API's base (default `https://slack.com/api`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_base: Option<String>,
    /// Where Edit opens the inbox (default `server.public_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox_url: Option<String>,
    /// Slack user id → principal name.
    #[serde(default)]
    pub users: BTreeMap<String, String>,
}

/// What happens to a call whose time to live passed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExpiry {
    /// Rejected with `expiry_note` (audited `via: expiry`).
    #[default]
    Reject,
    /// Left waiting; a `requirement.expired` notice says it is overdue.
    LeaveWaiting,
}

/// `[notifications.waiting.<tool>]`: how long that tool's calls may wait.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WaitEntry {
    /// After waiting this long, `escalate_to` is told.
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub escalate_after: Option<Duration>,
    /// The principals told on escalation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalate_to: Vec<String>,
    /// After waiting this long, `on_expiry` applies.
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub expire_after: Option<Duration>,
    /// `reject` (default) or `leave_waiting`.
    #[serde(default)]
    pub on_expiry: OnExpiry,
    /// The note a rejected call's model reads (default "nobody decided in time").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry_note: Option<String>,
}

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OtlpTransport {
    /// OTLP/HTTP (port 4318).
    #[default]
    Http,
    /// OTLP/gRPC (port 4317).
    Grpc,
}

/// `[telemetry]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// Where spans go over OTLP (`http://127.0.0.1:4318`); absent: nowhere. Read by
    /// the program that sets up tracing (`cargo xtask serve`; reins-server's `otel`
    /// feature).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// `http` (default) or `grpc`.
    #[serde(default)]
    pub otlp_protocol: OtlpTransport,
    /// The service name the spans carry (default the program's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Serve `GET /metrics` (Prometheus; default true).
    #[serde(default = "yes")]
    pub metrics: bool,
}

impl Default for TelemetrySection {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            otlp_protocol: OtlpTransport::Http,
            service_name: None,
            metrics: true,
        }
    }
}

impl Config {
    /// Reads the file, with the process's `REINS_...` overrides and environment.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Io`] when it cannot be read; [`ConfigError::Invalid`] naming the
    /// key and line of an unknown key, a value of the wrong type, a missing value or
    /// secret.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().map(Path::to_owned).unwrap_or_default();
        load::read(
            &text,
            &path.display().to_string(),
            &base,
            std::env::vars().collect(),
            Box::new(|v| std::env::var(v).ok()),
        )
    }

    /// Reads a configuration from text (relative paths start at the current
    /// directory), with the process's `REINS_...` overrides and environment.
    ///
    /// # Errors
    ///
    /// As [`Config::from_path`].
    #[allow(clippy::should_implement_trait)]
    pub fn from_str(text: &str) -> Result<Self, ConfigError> {
        load::read(
            text,
            "reins.toml",
            Path::new(""),
            std::env::vars().collect(),
            Box::new(|v| std::env::var(v).ok()),
        )
    }

    /// Reads a configuration from text with these variables as the whole environment
    /// (overrides and `{ env = "VAR" }` secrets alike); relative paths start at
    /// `base`. For tests and for programs that keep their environment elsewhere.
    ///
    /// # Errors
    ///
    /// As [`Config::from_path`].
    pub fn from_str_with_env(
        text: &str,
        base: impl AsRef<Path>,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let vars: Vec<(String, String)> = vars.into_iter().collect();
        let lookup = vars.clone();
        load::read(
            text,
            "reins.toml",
            base.as_ref(),
            vars,
            Box::new(move |name| {
                lookup
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
            }),
        )
    }

    /// The effective configuration as TOML, every secret replaced by where it comes
    /// from (`<redacted: env SMTP_PASSWORD>`): what `--check` prints.
    pub fn redacted(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot print the configuration: {e}\n"))
    }

    /// A path of the file, made absolute against the file's directory.
    pub(crate) fn path(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.base.join(p)
        }
    }

    /// An error about `key`, placed where it was written.
    pub(crate) fn error(&self, key: &str, message: impl Into<String>) -> ConfigError {
        self.places.error(key, message)
    }
}

impl std::str::FromStr for Config {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, ConfigError> {
        Config::from_str(text)
    }
}
