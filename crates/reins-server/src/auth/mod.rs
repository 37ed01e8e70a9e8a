//! Bearer-token authentication: tokens map to [`Principal`]s with roles.
//!
//! Tokens are kept only as SHA-256 digests and compared in constant time; a token
//! never appears in `Debug` output, logs or errors.
//!
//! | role       | may |
//! |------------|-----|
//! | `user`     | start runs on, read, watch and interrupt the sessions under its prefix (`<name>/` unless set) |
//! | `approver` | read every session, see the inbox, decide (optionally only for some tool names), interrupt |
//! | `admin`    | everything |
//!
//! The configuration is JSON, from a file ([`Auth::from_file`]) or an environment
//! variable ([`Auth::from_env`]):
//!
//! ```json
//! {"principals": [
//!   {"name": "alice", "token_sha256": "<64 hex digits>", "roles": ["user"]},
//!   {"name": "ana", "token_sha256": "<64 hex digits>", "roles": ["approver"], "tools": ["delete_file"]},
//!   {"name": "ops", "token_sha256": "<64 hex digits>", "roles": ["admin"]}
//! ]}
//! ```
//!
//! [`hash_token`] computes the digest to put in the file.

#[cfg(feature = "oidc")]
pub mod oidc;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use utoipa::ToSchema;

use crate::error::{Result, ServerError};

/// What a principal may do; see the [module docs](self).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[schema(as = Role)]
pub enum AccessRole {
    /// Runs and reads its own sessions (those under its prefix).
    User,
    /// Decides on requirements (optionally only for some tools); reads every session.
    Approver,
    /// Everything.
    Admin,
}

/// Who made a request: a name (recorded as the actor of its decisions) and roles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Principal {
    /// The name recorded in the audit trail (e.g. `ana`).
    pub name: String,
    /// Its roles.
    pub roles: BTreeSet<AccessRole>,
    /// For `user`: the session id prefix it owns (default `<name>/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_prefix: Option<String>,
    /// For `approver`: the tools it may decide on (absent: every tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<BTreeSet<String>>,
    /// Who the identity provider says it is, for a principal from an OpenID Connect
    /// token (absent for static tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
}

/// A principal's identity at its identity provider (see [`crate::oidc`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Identity {
    /// The token's issuer (`iss`).
    pub issuer: String,
    /// The token's subject (`sub`).
    pub subject: String,
}

impl Principal {
    /// The actor its decisions are recorded under: its name, with its roles in the
    /// metadata's `roles` array (`"approver"`, `"admin"`, `"user"`), which is what a
    /// [`Quorum`](reins_agent::Quorum) with roles checks, for a principal of the
    /// identity provider its `issuer` and `subject`, and for an approver limited to
    /// some tools its scope (`tools`: the run refuses its decisions on other tools'
    /// calls, [`reins_agent::Actor::decides_on`]).
    ///
    /// ```
    /// use reins_server::{AccessRole, Principal};
    ///
    /// let actor = Principal::new("ops", [AccessRole::Admin]).actor();
    /// assert_eq!((actor.principal.as_str(), actor.roles()), ("ops", vec!["admin".to_owned()]));
    /// ```
    pub fn actor(&self) -> reins_agent::Actor {
        let roles: Vec<serde_json::Value> = self
            .roles
            .iter()
            .filter_map(|r| serde_json::to_value(r).ok())
            .collect();
        let mut actor = reins_agent::Actor::new(self.name.clone());
        let mut metadata = serde_json::json!({ "roles": roles });
        if let Some(id) = &self.identity {
            metadata["issuer"] = serde_json::Value::String(id.issuer.clone());
            metadata["subject"] = serde_json::Value::String(id.subject.clone());
        }
        actor.metadata = Some(metadata);
        // An approver limited to some tools decides on those only: the run checks it
        // (`Actor::decides_on`), for every door and driver.
        match &self.tools {
            Some(tools) if !self.has(AccessRole::Admin) => actor.deciding_on(tools.iter().cloned()),
            _ => actor,
        }
    }

    /// A principal with these roles.
    pub fn new(name: impl Into<String>, roles: impl IntoIterator<Item = AccessRole>) -> Self {
        Self {
            name: name.into(),
            roles: roles.into_iter().collect(),
            session_prefix: None,
            tools: None,
            identity: None,
        }
    }

    /// Sets the session prefix a `user` owns.
    #[must_use]
    pub fn session_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.session_prefix = Some(prefix.into());
        self
    }

    /// Restricts an `approver` to these tools.
    #[must_use]
    pub fn tools<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        self.tools = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// Whether it has the role.
    pub fn has(&self, role: AccessRole) -> bool {
        self.roles.contains(&role)
    }

    /// The session prefix a `user` owns.
    pub fn prefix(&self) -> String {
        self.session_prefix
            .clone()
            .unwrap_or_else(|| format!("{}/", self.name))
    }

    /// Whether it owns the session (admin, or user under its prefix).
    pub fn owns(&self, session: &str) -> bool {
        self.has(AccessRole::Admin)
            || (self.has(AccessRole::User) && session.starts_with(&self.prefix()))
    }

    /// Whether it may read the session (owners, approvers, admins).
    pub fn may_read(&self, session: &str) -> bool {
        self.owns(session) || self.has(AccessRole::Approver)
    }

    /// The store filter that narrows the pending requirements to those it may see
    /// in the inbox (it may read the session, and decide on the tool or own the
    /// session), as far as a prefix or a set of tools can say it; the inbox checks
    /// every item exactly after. `None`: it sees none.
    pub(crate) fn pending_scope(&self) -> Option<reins_memory::PendingFilter> {
        let all = reins_memory::PendingFilter::default();
        if self.has(AccessRole::Admin) {
            return Some(all);
        }
        let user = self.has(AccessRole::User);
        if self.has(AccessRole::Approver) {
            return Some(match (&self.tools, user) {
                // Its tools anywhere, or anything of its own: no narrower filter.
                (None, _) | (Some(_), true) => all,
                (Some(tools), false) => reins_memory::PendingFilter {
                    tools: Some(tools.iter().cloned().collect()),
                    ..all
                },
            });
        }
        user.then(|| reins_memory::PendingFilter {
            session_prefix: Some(self.prefix()),
            ..all
        })
    }

    /// Whether it may decide on a call to `tool`.
    pub fn may_decide(&self, tool: &str) -> bool {
        self.has(AccessRole::Admin)
            || (self.has(AccessRole::Approver)
                && self.tools.as_ref().is_none_or(|t| t.contains(tool)))
    }

    pub(crate) fn require_owner(&self, session: &str) -> Result<()> {
        if self.owns(session) {
            Ok(())
        } else {
            Err(ServerError::Forbidden(format!(
                "`{}` may not act on session `{session}` (a user owns the sessions under `{}`)",
                self.name,
                self.prefix()
            )))
        }
    }

    /// Whether it may decide on requirements at all: the approver or the admin role
    /// (which tools, [`Principal::may_decide`] says).
    pub fn is_decider(&self) -> bool {
        self.has(AccessRole::Approver) || self.has(AccessRole::Admin)
    }

    /// Refuses (403) a principal that may not decide; `what` names the act ("decide",
    /// "answer interrupts").
    pub(crate) fn require_decider(&self, what: &str) -> Result<()> {
        if self.is_decider() {
            return Ok(());
        }
        Err(ServerError::Forbidden(format!(
            "`{}` may not {what}: that needs the approver or admin role",
            self.name
        )))
    }

    pub(crate) fn require_read(&self, session: &str) -> Result<()> {
        if self.may_read(session) {
            Ok(())
        } else {
            Err(ServerError::Forbidden(format!(
                "`{}` may not read session `{session}`",
                self.name
            )))
        }
    }
}

/// The SHA-256 digest of a token, as 64 lowercase hex digits (what the configuration
/// stores).
pub fn hash_token(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    let s = s.trim();
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A new random token (`reins_` + 64 hex digits from the OS's random source).
pub fn generate_token() -> String {
    format!(
        "reins_{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

#[derive(Clone)]
struct Entry {
    digest: [u8; 32],
    principal: Arc<Principal>,
}

/// The token table, and the identity provider whose tokens are accepted (see
/// `reins_server::oidc`). Without any entry or provider every request is refused (401).
#[derive(Clone, Default)]
pub struct Auth {
    entries: Vec<Entry>,
    #[cfg(feature = "oidc")]
    oidc: Option<Arc<crate::oidc::Oidc>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Auth");
        d.field(
            "principals",
            &self
                .entries
                .iter()
                .map(|e| e.principal.name.as_str())
                .collect::<Vec<_>>(),
        );
        #[cfg(feature = "oidc")]
        d.field("oidc", &self.oidc);
        d.finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    principals: Vec<ConfigEntry>,
    #[cfg(feature = "oidc")]
    #[serde(default)]
    oidc: Option<crate::oidc::OidcConfig>,
    /// Refused with a message that names the missing feature.
    #[cfg(not(feature = "oidc"))]
    #[serde(default)]
    oidc: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigEntry {
    name: String,
    token_sha256: String,
    roles: BTreeSet<AccessRole>,
    #[serde(default)]
    session_prefix: Option<String>,
    #[serde(default)]
    tools: Option<BTreeSet<String>>,
}

/// Why an auth configuration could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthConfigError {
    /// The file could not be read.
    #[error("cannot read the auth file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The environment variable is not set.
    #[error("the environment variable {0} is not set")]
    MissingEnv(String),
    /// The JSON is not a valid configuration.
    #[error("invalid auth configuration: {0}")]
    Invalid(String),
}

impl Auth {
    /// An empty table (refuses everything until tokens are added).
    pub fn new() -> Self {
        Self::default()
    }

    /// The principal with this name (the first, when several tokens share it): whom an
    /// approval channel (an email link, a Slack user) acts for.
    #[cfg_attr(not(any(feature = "email", feature = "slack")), allow(dead_code))]
    pub(crate) fn by_name(&self, name: &str) -> Option<Arc<Principal>> {
        self.entries
            .iter()
            .find(|e| e.principal.name == name)
            .map(|e| Arc::clone(&e.principal))
    }

    /// Adds a token (hashed at once; the plain token is not kept).
    #[must_use]
    pub fn token(mut self, token: &str, principal: Principal) -> Self {
        self.entries.push(Entry {
            digest: Sha256::digest(token.as_bytes()).into(),
            principal: Arc::new(principal),
        });
        self
    }

    /// Whether an identity provider's tokens are accepted.
    fn has_oidc(&self) -> bool {
        #[cfg(feature = "oidc")]
        return self.oidc.is_some();
        #[cfg(not(feature = "oidc"))]
        false
    }

    /// Also accepts the JWT bearer tokens of an OpenID Connect identity provider (see
    /// [`crate::oidc`]); static tokens keep working beside them. With the `oidc`
    /// feature.
    #[cfg(feature = "oidc")]
    #[must_use]
    pub fn oidc(mut self, oidc: crate::oidc::Oidc) -> Self {
        self.oidc = Some(Arc::new(oidc));
        self
    }

    /// Adds a token by its SHA-256 digest (64 hex digits, as [`hash_token`] makes).
    pub fn token_sha256(
        mut self,
        digest_hex: &str,
        principal: Principal,
    ) -> Result<Self, AuthConfigError> {
        let digest = unhex(digest_hex).ok_or_else(|| {
            AuthConfigError::Invalid(format!(
                "the token digest of `{}` is not 64 hex digits",
                principal.name
            ))
        })?;
        self.entries.push(Entry {
            digest,
            principal: Arc::new(principal),
        });
        Ok(self)
    }

    /// The principal a session belongs to: the `user` whose session prefix its id
    /// starts with (the longest prefix when several match), if any.
    pub(crate) fn owner_of(&self, session: &str) -> Option<&Principal> {
        self.entries
            .iter()
            .map(|e| &*e.principal)
            .filter(|p| p.has(AccessRole::User) && session.starts_with(&p.prefix()))
            .max_by_key(|p| p.prefix().len())
    }

    /// The session prefix of the user named `name`, when every user of that name owns
    /// the same one (`None` otherwise: no narrowing).
    pub(crate) fn user_prefix(&self, name: &str) -> Option<String> {
        let prefixes: BTreeSet<String> = self
            .entries
            .iter()
            .map(|e| &*e.principal)
            .filter(|p| p.has(AccessRole::User) && p.name == name)
            .map(Principal::prefix)
            .collect();
        match prefixes.len() {
            1 => prefixes.into_iter().next(),
            _ => None,
        }
    }

    /// The names of the principals with the `user` role (those that own sessions),
    /// sorted, without repeats.
    pub(crate) fn user_names(&self) -> Vec<String> {
        let names: BTreeSet<String> = self
            .entries
            .iter()
            .filter(|e| e.principal.has(AccessRole::User))
            .map(|e| e.principal.name.clone())
            .collect();
        names.into_iter().collect()
    }

    /// Reads the JSON configuration (see the [module docs](self)).
    pub fn from_json(json: &str) -> Result<Self, AuthConfigError> {
        let config: Config =
            serde_json::from_str(json).map_err(|e| AuthConfigError::Invalid(e.to_string()))?;
        let mut auth = Self::new();
        for e in config.principals {
            if e.name.trim().is_empty() {
                return Err(AuthConfigError::Invalid(
                    "a principal's name is empty".to_owned(),
                ));
            }
            if e.roles.is_empty() {
                return Err(AuthConfigError::Invalid(format!(
                    "principal `{}` has no roles",
                    e.name
                )));
            }
            let p = Principal {
                name: e.name,
                roles: e.roles,
                session_prefix: e.session_prefix,
                tools: e.tools,
                identity: None,
            };
            auth = auth.token_sha256(&e.token_sha256, p)?;
        }
        #[cfg(feature = "oidc")]
        if let Some(c) = config.oidc {
            auth = auth.oidc(crate::oidc::Oidc::new(c)?);
        }
        #[cfg(not(feature = "oidc"))]
        if config.oidc.is_some() {
            return Err(AuthConfigError::Invalid(
                "the configuration has an `oidc` section, but this reins-server was built \
                 without OpenID Connect (its `oidc` feature)"
                    .to_owned(),
            ));
        }
        Ok(auth)
    }

    /// Reads the JSON configuration from a file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, AuthConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| AuthConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text)
    }

    /// Reads the JSON configuration from an environment variable.
    pub fn from_env(var: &str) -> Result<Self, AuthConfigError> {
        let text = std::env::var(var).map_err(|_| AuthConfigError::MissingEnv(var.to_owned()))?;
        Self::from_json(&text)
    }

    /// How many tokens are known.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no token is known and no identity provider is set.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && !self.has_oidc()
    }

    /// The principal a token belongs to. Every entry is compared (in constant time),
    /// whichever matches.
    pub fn principal_for(&self, token: &str) -> Option<Arc<Principal>> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for e in &self.entries {
            if bool::from(e.digest.ct_eq(&digest)) && found.is_none() {
                found = Some(e.principal.clone());
            }
        }
        found
    }

    /// The principal of a request's `Authorization: Bearer` header: a static token, or
    /// (when an identity provider is set) a JWT it signed.
    pub(crate) async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Principal>> {
        let token = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or(ServerError::Unauthorized)?;
        if let Some(p) = self.principal_for(token) {
            return Ok(p);
        }
        #[cfg(feature = "oidc")]
        if let Some(oidc) = &self.oidc
            // A JWT: three base64url parts.
            && token.matches('.').count() == 2
        {
            return match oidc.verify(token).await {
                Ok(p) => Ok(Arc::new(p)),
                Err(reason) => {
                    tracing::info!(reason = %reason, "bearer token refused");
                    Err(ServerError::TokenRejected(reason))
                }
            };
        }
        Err(ServerError::InvalidToken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_belongs_to_the_user_with_the_longest_matching_prefix() {
        let auth = Auth::new()
            .token(
                "a",
                Principal::new("team", [AccessRole::User]).session_prefix("team/"),
            )
            .token(
                "b",
                Principal::new("lead", [AccessRole::User]).session_prefix("team/lead/"),
            )
            .token("c", Principal::new("ana", [AccessRole::Approver]))
            .token(
                "d",
                Principal::new("ops", [AccessRole::Admin, AccessRole::User]),
            )
            .token(
                "e",
                Principal::new("team", [AccessRole::User]).session_prefix("team/"),
            );
        let owner = |s: &str| auth.owner_of(s).map(|p| p.name.clone());
        assert_eq!(owner("team/x"), Some("team".to_owned()));
        assert_eq!(owner("team/lead/x"), Some("lead".to_owned()));
        assert_eq!(owner("ops/x"), Some("ops".to_owned()));
        // Approvers own nothing; an id under no prefix has no owner.
        assert_eq!(owner("ana/x"), None);
        assert_eq!(owner("elsewhere"), None);
        assert_eq!(auth.user_names(), ["lead", "ops", "team"]);
    }

    #[test]
    fn tokens_are_hashed_and_matched() {
        let auth = Auth::new().token("s3cret", Principal::new("ana", [AccessRole::Approver]));
        assert_eq!(
            auth.principal_for("s3cret").map(|p| p.name.clone()),
            Some("ana".to_owned())
        );
        assert!(auth.principal_for("s3cre").is_none());
        assert!(!format!("{auth:?}").contains("s3cret"));
    }

    #[test]
    fn config_reads_digests_and_refuses_bad_ones() {
        let json = format!(
            r#"{{"principals":[{{"name":"alice","token_sha256":"{}","roles":["user"]}}]}}"#,
            hash_token("t1")
        );
        let auth = Auth::from_json(&json).ok();
        let p = auth.and_then(|a| a.principal_for("t1"));
        assert!(p.is_some_and(|p| p.owns("alice/x") && !p.owns("bob/x")));
        assert!(
            Auth::from_json(
                r#"{"principals":[{"name":"a","token_sha256":"zz","roles":["user"]}]}"#
            )
            .is_err()
        );
    }

    #[test]
    fn roles_decide_what_is_allowed() {
        let ana = Principal::new("ana", [AccessRole::Approver]).tools(["delete_file"]);
        assert!(ana.may_decide("delete_file") && !ana.may_decide("send_email"));
        assert!(ana.may_read("bob/1") && !ana.owns("bob/1"));
        let admin = Principal::new("ops", [AccessRole::Admin]);
        assert!(admin.owns("x") && admin.may_decide("anything"));
    }
}
