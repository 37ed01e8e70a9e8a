//! From a [`Config`] to what runs: the store, the policies, the agent's budget and
//! policies, and the server with its auth, notifications and reload triggers. Each
//! channel is built by its own function, so that each can sit behind its own feature.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reins_agent::AgentBuilder;
use reins_agent::budget::{Budget, Price};
use reins_agent::port::Sessions;
use reins_memory::{MemoryStore, NoticeKind, Subscription};
use reins_notify::webhook::{KIND, Secret as WebhookSecret, Webhook, secret_key};
use reins_policy::{PolicyDir, ShadowLog};

#[cfg(feature = "email")]
use super::SmtpTls;
use super::{Config, ConfigError, DriverKind, OnExpiry};
use crate::Server;
#[cfg(feature = "email")]
use crate::approvals::EmailApprovals;
#[cfg(feature = "slack")]
use crate::approvals::SlackApprovals;
use crate::approvals::{ExpiryAction, WaitPolicy, Waiting};
use crate::auth::{Auth, Principal};
#[cfg(feature = "oidc")]
use crate::oidc::Oidc;

/// The id prefix of webhook subscribers from the configuration.
pub(crate) const WEBHOOK_ID_PREFIX: &str = "wh_config_";

/// Everything a configuration builds before anything is served: checked, the
/// policies loaded and the store opened. [`Setup::agent`] gives the agent its store,
/// budget and policies; [`Setup::server`] builds the server.
pub struct Setup {
    config: Config,
    parts: Parts,
    store: Option<Arc<dyn MemoryStore>>,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("config", &self.config)
            .field("auth", &self.parts.auth)
            .field("policies", &self.parts.policies)
            .finish_non_exhaustive()
    }
}

/// The prices by model.
type Prices = Vec<(String, Price)>;

/// What [`Config::check`] builds.
struct Parts {
    auth: Auth,
    policies: Option<Arc<PolicyDir>>,
    budget: Option<Budget>,
    prices: Prices,
    webhooks: Vec<(String, Webhook)>,
    #[cfg(feature = "email")]
    email: Option<EmailApprovals>,
    #[cfg(feature = "slack")]
    slack: Option<SlackApprovals>,
    waiting: Waiting,
    notify: crate::notify::NotifyOptions,
}

impl Config {
    /// Checks everything that needs neither the network nor the store: the policies
    /// load, the tokens and the identity provider's settings, the channels' settings,
    /// the budgets. Nothing is started.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the key and line of what is wrong.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.parts().map(|_| ())
    }

    /// Checks the configuration ([`Config::check`]) and opens the store.
    ///
    /// # Errors
    ///
    /// As [`Config::check`]; the store's error (at `store.sqlite` / `store.postgres`)
    /// when it cannot be opened.
    pub async fn setup(&self) -> Result<Setup, ConfigError> {
        let parts = self.parts()?;
        let store = self.open_store().await?;
        Ok(Setup {
            config: self.clone(),
            parts,
            store,
        })
    }

    fn parts(&self) -> Result<Parts, ConfigError> {
        if self.driver.kind == DriverKind::Local && self.driver.ingress.is_some() {
            return Err(self.error(
                "driver.ingress",
                "an ingress URL needs `kind = \"restate\"`",
            ));
        }
        if self.store.sqlite.is_some() && self.store.postgres.is_some() {
            return Err(self.error(
                "store.postgres",
                "give either `sqlite` or `postgres`, not both",
            ));
        }
        if let Some(url) = &self.server.public_url {
            self.http_url("server.public_url", url)?;
        }
        let (budget, prices) = self.budgets()?;
        // A section whose layer this build left out is refused, naming the feature.
        let off = |key: &str, feature: &str, given: bool| {
            if given {
                Err(self.error(
                    key,
                    format!("this reins-server was built without the `{feature}` feature"),
                ))
            } else {
                Ok(())
            }
        };
        #[cfg(not(feature = "email"))]
        off(
            "notifications.email",
            "email",
            self.notifications.email.is_some(),
        )?;
        #[cfg(not(feature = "slack"))]
        off(
            "notifications.slack",
            "slack",
            self.notifications.slack.is_some(),
        )?;
        #[cfg(not(feature = "oidc"))]
        off("auth.oidc", "oidc", self.auth.oidc.is_some())?;
        let _ = off;
        Ok(Parts {
            auth: self.auth()?,
            policies: self.policies()?,
            budget,
            prices,
            webhooks: self.webhooks()?,
            #[cfg(feature = "email")]
            email: self.email()?,
            #[cfg(feature = "slack")]
            slack: self.slack()?,
            waiting: self.waiting()?,
            notify: self.notify_options()?,
        })
    }

    fn http_url(&self, key: &str, url: &str) -> Result<(), ConfigError> {
        match reqwest::Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Ok(()),
            _ => Err(self.error(
                key,
                format!("`{url}` is not an http:// or https:// URL with a host"),
            )),
        }
    }

    fn auth(&self) -> Result<Auth, ConfigError> {
        let mut auth = Auth::new();
        for (name, t) in &self.auth.tokens {
            let key = format!("auth.tokens.{name}");
            if t.roles.is_empty() {
                return Err(self.error(&format!("{key}.roles"), "a principal needs a role"));
            }
            let mut p = Principal::new(name.clone(), t.roles.iter().copied());
            p.session_prefix.clone_from(&t.session_prefix);
            p.tools.clone_from(&t.tools);
            auth = match (&t.token, &t.token_sha256) {
                (Some(token), None) => auth.token(token.expose(), p),
                (None, Some(digest)) => auth
                    .token_sha256(digest, p)
                    .map_err(|e| self.error(&format!("{key}.token_sha256"), e.to_string()))?,
                _ => {
                    return Err(
                        self.error(&key, "give the principal either `token` or `token_sha256`")
                    );
                }
            };
        }
        #[cfg(feature = "oidc")]
        if let Some(oidc) = &self.auth.oidc {
            auth = auth.oidc(self.oidc(oidc)?);
        }
        Ok(auth)
    }

    #[cfg(feature = "oidc")]
    fn oidc(&self, oidc: &crate::oidc::OidcConfig) -> Result<Oidc, ConfigError> {
        self.http_url("auth.oidc.jwks_uri", &oidc.jwks_uri)?;
        Oidc::new(oidc.clone()).map_err(|e| self.error("auth.oidc", e.to_string()))
    }

    fn policies(&self) -> Result<Option<Arc<PolicyDir>>, ConfigError> {
        let Some(p) = &self.policies else {
            return Ok(None);
        };
        let log = match &p.shadow_log {
            Some(file) => ShadowLog::open(self.path(file))
                .map_err(|e| self.error("policies.shadow_log", e.to_string()))?,
            None => ShadowLog::default(),
        };
        // Each directory alone first, so that an error names its key.
        let shadow = p.shadow_dir.as_deref().map(|d| self.path(d));
        if let Some(dir) = &shadow {
            PolicyDir::open(dir, None, ShadowLog::default())
                .map_err(|e| self.error("policies.shadow_dir", e.to_string()))?;
        }
        let dir = PolicyDir::open(self.path(&p.dir), shadow, log)
            .map_err(|e| self.error("policies.dir", e.to_string()))?;
        Ok(Some(Arc::new(dir)))
    }

    fn budgets(&self) -> Result<(Option<Budget>, Prices), ConfigError> {
        let budget = match &self.budgets.default {
            Some(b) => {
                let mut limit = Budget::new();
                limit.tokens = b.tokens;
                limit.cost = b.cost;
                limit.tool_calls = b.tool_calls;
                if let Some(d) = b.wall_time.filter(|d| d.subsec_nanos() != 0) {
                    // The limit counts whole seconds: "500ms" would be no time at all.
                    return Err(self.error(
                        "budgets.default.wall_time",
                        format!(
                            "the wall-time limit counts whole seconds; `{}` is not",
                            super::duration::format(d)
                        ),
                    ));
                }
                limit.wall_secs = b.wall_time.map(|d| d.as_secs());
                limit
                    .validate()
                    .map_err(|e| self.error("budgets.default", e.to_string()))?;
                Some(limit)
            }
            None => None,
        };
        let mut prices = Vec::new();
        for (model, p) in &self.budgets.prices {
            for (field, v) in [
                ("input_per_million", p.input_per_million),
                ("output_per_million", p.output_per_million),
            ] {
                if !v.is_finite() || v < 0.0 {
                    return Err(self.error(
                        &format!("budgets.prices.{model}.{field}"),
                        "a price is a number of at least 0",
                    ));
                }
            }
            prices.push((
                model.clone(),
                Price::per_million(p.input_per_million, p.output_per_million),
            ));
        }
        Ok((budget, prices))
    }

    fn webhooks(&self) -> Result<Vec<(String, Webhook)>, ConfigError> {
        let mut out = Vec::new();
        for (name, w) in &self.notifications.webhooks {
            let key = format!("notifications.webhooks.{name}");
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(self.error(&key, "a webhook's name is letters, digits, `_` and `-`"));
            }
            self.http_url(&format!("{key}.url"), &w.url)?;
            if secret_key(w.secret.expose()).is_none() {
                return Err(self.error(
                    &format!("{key}.secret"),
                    "the secret must be `whsec_` followed by 24 to 64 bytes in base64",
                ));
            }
            let mut event_types = Vec::new();
            for t in &w.event_types {
                let kind = NoticeKind::parse(t).ok_or_else(|| {
                    let known: Vec<&str> = NoticeKind::ALL.iter().map(NoticeKind::as_str).collect();
                    self.error(
                        &format!("{key}.event_types"),
                        format!("unknown event type `{t}`; known: {}", known.join(", ")),
                    )
                })?;
                event_types.push(kind);
            }
            let mut hook = Webhook::new(w.url.clone(), w.secret.expose().to_owned());
            hook.secrets = vec![WebhookSecret {
                secret: w.secret.expose().to_owned(),
                expires_at: None,
            }];
            hook.event_types = event_types;
            hook.tools.clone_from(&w.tools);
            hook.session_prefix = w.session_prefix.clone().filter(|p| !p.is_empty());
            hook.description.clone_from(&w.description);
            hook.created_by = Some("reins.toml".to_owned());
            out.push((format!("{WEBHOOK_ID_PREFIX}{name}"), hook));
        }
        Ok(out)
    }

    /// The SMTP URL lettre reads, from `[notifications.email.smtp]`.
    #[cfg(feature = "email")]
    fn smtp_url(&self, smtp: &super::SmtpSection) -> Result<String, ConfigError> {
        let (scheme, port, query) = match smtp.tls {
            SmtpTls::Tls => ("smtps", 465, ""),
            SmtpTls::Starttls => ("smtp", 587, "?tls=required"),
            SmtpTls::Opportunistic => ("smtp", 587, "?tls=opportunistic"),
            SmtpTls::None => ("smtp", 25, ""),
        };
        let port = smtp.port.unwrap_or(port);
        let mut url = reqwest::Url::parse(&format!("{scheme}://{}:{port}{query}", smtp.host))
            .map_err(|e| {
                self.error(
                    "notifications.email.smtp.host",
                    format!("`{}` is not a host name: {e}", smtp.host),
                )
            })?;
        if smtp.username.is_some() != smtp.password.is_some() {
            // lettre logs in only with both; one alone would be dropped unseen.
            let (key, missing) = match smtp.username {
                Some(_) => ("notifications.email.smtp.username", "password"),
                None => ("notifications.email.smtp.password", "username"),
            };
            return Err(self.error(
                key,
                format!("an SMTP login needs `username` and `password`; `{missing}` is missing"),
            ));
        }
        let bad_credentials = || {
            self.error(
                "notifications.email.smtp.username",
                "cannot be put in an SMTP URL",
            )
        };
        if let Some(user) = &smtp.username {
            url.set_username(user).map_err(|()| bad_credentials())?;
        }
        if let Some(password) = &smtp.password {
            url.set_password(Some(password.expose()))
                .map_err(|()| bad_credentials())?;
        }
        Ok(url.to_string())
    }

    #[cfg(feature = "email")]
    fn email(&self) -> Result<Option<EmailApprovals>, ConfigError> {
        let Some(e) = &self.notifications.email else {
            return Ok(None);
        };
        let base_url = e
            .base_url
            .clone()
            .or_else(|| self.server.public_url.clone())
            .ok_or_else(|| {
                self.error(
                    "notifications.email.base_url",
                    "email links need `base_url` (or `server.public_url`)",
                )
            })?;
        let mut b = EmailApprovals::builder()
            .smtp_url(self.smtp_url(&e.smtp)?)
            .from(e.from.clone())
            .base_url(base_url)
            .secret(e.link_secret.expose());
        if let Some(ttl) = e.link_ttl {
            b = b.link_ttl(ttl);
        }
        for (principal, address) in &e.approvers {
            b = b.approver(principal.clone(), address.clone());
        }
        b.build().map(Some).map_err(|err| {
            // Never echo the password, whatever the mailer's message holds.
            let mut message = err.to_string();
            if let Some(p) = &e.smtp.password {
                message = message.replace(p.expose(), "<redacted>");
            }
            self.error("notifications.email", message)
        })
    }

    #[cfg(feature = "slack")]
    fn slack(&self) -> Result<Option<SlackApprovals>, ConfigError> {
        let Some(s) = &self.notifications.slack else {
            return Ok(None);
        };
        let mut b = SlackApprovals::builder()
            .bot_token(s.bot_token.expose())
            .signing_secret(s.signing_secret.expose())
            .channel(s.channel.clone());
        if let Some(api) = &s.api_base {
            b = b.api_base(api.clone());
        }
        if let Some(inbox) = s.inbox_url.as_ref().or(self.server.public_url.as_ref()) {
            b = b.inbox_url(inbox.clone());
        }
        for (user, principal) in &s.users {
            b = b.user(user.clone(), principal.clone());
        }
        b.build()
            .map(Some)
            .map_err(|e| self.error("notifications.slack", e.to_string()))
    }

    /// The dispatcher's options of `[notifications.delivery]`, checked.
    pub(crate) fn notify_options(&self) -> Result<crate::notify::NotifyOptions, ConfigError> {
        let d = &self.notifications.delivery;
        let key = |k: &str| format!("notifications.delivery.{k}");
        if d.max_attempts == 0 {
            return Err(self.error(
                &key("max_attempts"),
                "a delivery needs at least one attempt",
            ));
        }
        for (name, value) in [("lease", d.lease), ("poll_interval", d.poll_interval)] {
            if value.is_zero() {
                return Err(self.error(&key(name), "needs a duration above zero"));
            }
        }
        if d.max_backoff < d.backoff {
            return Err(self.error(
                &key("max_backoff"),
                format!(
                    "the longest delay is below the first (`backoff` = {})",
                    super::duration::format(d.backoff)
                ),
            ));
        }
        Ok(crate::notify::NotifyOptions::default()
            .max_attempts(d.max_attempts)
            .backoff(d.backoff, d.max_backoff)
            .lease(d.lease)
            .poll_interval(d.poll_interval)
            .batch(d.batch))
    }

    fn waiting(&self) -> Result<Waiting, ConfigError> {
        let n = &self.notifications;
        if n.sweep_interval.is_zero() {
            return Err(self.error(
                "notifications.sweep_interval",
                "the sweep needs an interval above zero",
            ));
        }
        let mut waiting = Waiting::new().every(n.sweep_interval);
        for (tool, w) in &n.waiting {
            let key = format!("notifications.waiting.{tool}");
            let mut policy = WaitPolicy::new();
            match (w.escalate_after, w.escalate_to.is_empty()) {
                (Some(after), false) => {
                    policy = policy.escalate_after(after, w.escalate_to.clone())
                }
                (None, true) => {}
                (Some(_), true) => {
                    return Err(self.error(
                        &format!("{key}.escalate_to"),
                        "an escalation needs the principals to tell",
                    ));
                }
                (None, false) => {
                    return Err(self.error(
                        &format!("{key}.escalate_after"),
                        "an escalation needs the time after which it happens",
                    ));
                }
            }
            if let Some(ttl) = w.expire_after {
                let action = match w.on_expiry {
                    OnExpiry::Reject => ExpiryAction::reject(
                        w.expiry_note
                            .clone()
                            .unwrap_or_else(|| "nobody decided in time".to_owned()),
                    ),
                    OnExpiry::LeaveWaiting => ExpiryAction::LeaveWaiting,
                };
                policy = policy.expire_after(ttl, action);
            }
            waiting = waiting.tool(tool.clone(), policy);
        }
        Ok(waiting)
    }

    async fn open_store(&self) -> Result<Option<Arc<dyn MemoryStore>>, ConfigError> {
        if let Some(path) = &self.store.sqlite {
            return open_sqlite(self, &self.path(path)).await.map(Some);
        }
        if let Some(url) = &self.store.postgres {
            return open_postgres(self, url.expose()).await.map(Some);
        }
        Ok(None)
    }
}

#[cfg(feature = "sqlite")]
async fn open_sqlite(
    config: &Config,
    path: &std::path::Path,
) -> Result<Arc<dyn MemoryStore>, ConfigError> {
    let store = reins_memory::SqliteStore::open(path).await.map_err(|e| {
        config.error(
            "store.sqlite",
            format!("cannot open {}: {e}", path.display()),
        )
    })?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "sqlite"))]
async fn open_sqlite(
    config: &Config,
    _: &std::path::Path,
) -> Result<Arc<dyn MemoryStore>, ConfigError> {
    Err(config.error(
        "store.sqlite",
        "this build has no SQLite store (reins-server's `sqlite` feature)",
    ))
}

#[cfg(feature = "postgres")]
async fn open_postgres(config: &Config, url: &str) -> Result<Arc<dyn MemoryStore>, ConfigError> {
    let store = reins_memory::PostgresStore::connect(url)
        .await
        .map_err(|e| {
            // The URL holds a password: the error never repeats it.
            config.error(
                "store.postgres",
                format!(
                    "cannot connect to PostgreSQL: {}",
                    e.to_string().replace(url, "<redacted>")
                ),
            )
        })?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(config: &Config, _: &str) -> Result<Arc<dyn MemoryStore>, ConfigError> {
    Err(config.error(
        "store.postgres",
        "this build has no PostgreSQL store (reins-server's `postgres` feature)",
    ))
}

impl Setup {
    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store of `[store]` (`None`: the file names none; the agent keeps its own).
    pub fn store(&self) -> Option<&Arc<dyn MemoryStore>> {
        self.store.as_ref()
    }

    /// The Cedar policies of `[policies]`.
    pub fn policies(&self) -> Option<&Arc<PolicyDir>> {
        self.parts.policies.as_ref()
    }

    /// The tokens and identity provider of `[auth]`.
    pub fn auth(&self) -> &Auth {
        &self.parts.auth
    }

    /// Gives the agent what the file sets: the store, the default budget and the
    /// prices, and the Cedar policies as its approval and eligibility policy.
    pub fn agent(&self, mut builder: AgentBuilder) -> AgentBuilder {
        if let Some(store) = &self.store {
            builder = builder.store_arc(Arc::clone(store));
        }
        if let Some(b) = self.parts.budget {
            builder = builder.budget(b);
        }
        for (model, price) in &self.parts.prices {
            builder = builder.price(model.clone(), *price);
        }
        if let Some(p) = &self.parts.policies {
            builder = builder
                .approval_policy(p.policy().clone())
                .eligibility_policy(p.policy().clone());
        }
        builder
    }

    /// The server over `sessions` as the file configures it; see
    /// [`Server::from_config`].
    ///
    /// # Errors
    ///
    /// As [`Server::from_config`].
    pub async fn server(&self, sessions: impl Sessions + 'static) -> Result<Server, ConfigError> {
        Server::from_config(sessions, self).await
    }

    /// Listens on `server.listen` (default `127.0.0.1:8080`).
    ///
    /// # Errors
    ///
    /// At `server.listen`, when the address cannot be bound.
    pub async fn listener(&self) -> Result<tokio::net::TcpListener, ConfigError> {
        let addr = self
            .config
            .server
            .listen
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8080)));
        tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            self.config
                .error("server.listen", format!("cannot listen on {addr}: {e}"))
        })
    }

    /// Writes the webhook subscribers of the file into `store` (ids `wh_config_<name>`,
    /// replacing the stored ones) and removes those the file no longer names.
    async fn install_webhooks(&self, store: &Arc<dyn MemoryStore>) -> Result<(), ConfigError> {
        let failed = |e: reins_memory::Error| {
            self.config.error(
                "notifications.webhooks",
                format!("cannot store the subscribers: {e}"),
            )
        };
        let stored = store.subscriptions(KIND).await.map_err(failed)?;
        for s in stored {
            if s.id.starts_with(WEBHOOK_ID_PREFIX)
                && !self.parts.webhooks.iter().any(|(id, _)| *id == s.id)
            {
                store.delete_subscription(&s.id).await.map_err(failed)?;
            }
        }
        for (id, hook) in &self.parts.webhooks {
            let body = serde_json::to_value(hook).map_err(|e| {
                self.config.error(
                    "notifications.webhooks",
                    format!("cannot encode a subscriber: {e}"),
                )
            })?;
            store
                .put_subscription(&Subscription {
                    id: id.clone(),
                    kind: KIND.to_owned(),
                    body,
                    created_at: chrono::Utc::now(),
                })
                .await
                .map_err(failed)?;
        }
        Ok(())
    }
}

impl Server {
    /// The server over `sessions` — the agent made with [`Setup::agent`], or
    /// [`Relayed`](reins_agent::Relayed) over a backend with that agent — as the
    /// configuration sets it: `[auth]`, `[server]`'s limits, the webhook subscribers
    /// (written into the port's store, [`Sessions::record`]), email and Slack
    /// approvals, escalation and expiry, the Cedar policies with their reload
    /// triggers (SIGHUP, file changes, `POST /v1/policy/reload`) and status
    /// (`GET /v1/policy`), and `/metrics`.
    ///
    /// # Errors
    ///
    /// At `notifications.webhooks` when the subscribers cannot be stored.
    pub async fn from_config(
        sessions: impl Sessions + 'static,
        setup: &Setup,
    ) -> Result<Self, ConfigError> {
        setup.install_webhooks(sessions.record()).await?;
        let config = &setup.config;
        let mut server = Server::new(sessions)
            .auth(setup.parts.auth.clone())
            .waiting(setup.parts.waiting.clone())
            .notify_options(setup.parts.notify.clone())
            .metrics(config.telemetry.metrics);
        if let Some(t) = config.server.request_timeout {
            server = server.request_timeout(t);
        }
        if let Some(b) = config.server.body_limit {
            server = server.body_limit(b);
        }
        #[cfg(feature = "email")]
        if let Some(email) = &setup.parts.email {
            server = server.email_approvals(email.clone());
        }
        #[cfg(feature = "slack")]
        if let Some(slack) = &setup.parts.slack {
            server = server.slack_approvals(slack.clone());
        }
        if let (Some(dir), Some(p)) = (&setup.parts.policies, &config.policies) {
            server = server.policy_dir(
                Arc::clone(dir),
                crate::policy::Reloads {
                    on_sighup: p.reload_on_sighup,
                    watch: p
                        .watch
                        .then_some(p.watch_interval.max(Duration::from_millis(50))),
                },
            );
        }
        Ok(server)
    }
}

#[cfg(all(test, feature = "email"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn smtp(tls: &str, port: &str) -> String {
        let text = format!(
            "[notifications.email]\nfrom = \"reins <a@example.com>\"\nlink_secret = {{ env = \"L\" }}\n\
             base_url = \"https://reins.example.com\"\n\
             [notifications.email.smtp]\nhost = \"smtp.example.com\"\ntls = \"{tls}\"\n{port}\
             username = \"re ins@x\"\npassword = {{ env = \"P\" }}\n"
        );
        let vars = [
            (
                "L".to_owned(),
                "a link secret of at least thirty-two bytes".to_owned(),
            ),
            ("P".to_owned(), "p@ss w/rd".to_owned()),
        ];
        let c = Config::from_str_with_env(&text, "", vars).unwrap();
        c.check().unwrap();
        c.smtp_url(&c.notifications.email.as_ref().unwrap().smtp)
            .unwrap()
    }

    #[test]
    fn each_tls_mode_makes_its_smtp_url() {
        let creds = "re%20ins%40x:p%40ss%20w%2Frd@smtp.example.com";
        assert_eq!(smtp("tls", ""), format!("smtps://{creds}:465"));
        assert_eq!(
            smtp("starttls", ""),
            format!("smtp://{creds}:587?tls=required")
        );
        assert_eq!(
            smtp("opportunistic", "port = 2525\n"),
            format!("smtp://{creds}:2525?tls=opportunistic")
        );
        assert_eq!(smtp("none", ""), format!("smtp://{creds}:25"));
    }

    #[test]
    fn a_login_needs_both_name_and_password() {
        let text = |login: &str| {
            format!(
                "[notifications.email]\nfrom = \"reins <a@example.com>\"\nlink_secret = {{ env = \"L\" }}\n\
                 base_url = \"https://reins.example.com\"\n\
                 [notifications.email.smtp]\nhost = \"smtp.example.com\"\n{login}"
            )
        };
        let vars = || {
            [
                (
                    "L".to_owned(),
                    "a link secret of at least thirty-two bytes".to_owned(),
                ),
                ("P".to_owned(), "pw".to_owned()),
            ]
        };
        for (login, key, line) in [
            (
                "username = \"reins\"\n",
                "notifications.email.smtp.username",
                7,
            ),
            (
                "password = { env = \"P\" }\n",
                "notifications.email.smtp.password",
                7,
            ),
        ] {
            let c = Config::from_str_with_env(&text(login), "", vars()).unwrap();
            let e = c.check().unwrap_err();
            assert_eq!(e.key(), Some(key), "{e}");
            assert_eq!(e.line(), Some(line), "{e}");
            assert!(
                e.to_string().contains("needs `username` and `password`"),
                "{e}"
            );
        }
    }
}
