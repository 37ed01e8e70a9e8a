//! OpenID Connect / JWT bearer tokens: people of the identity provider as principals.
//!
//! A token is accepted when its header names an accepted algorithm and a key id
//! (`kid`) found in the provider's JWKS, its signature verifies with that key, and its
//! claims say the configured issuer (`iss`), one of the configured audiences (`aud`),
//! a subject (`sub`) and an expiry (`exp`) not passed, give or take the clock skew
//! (`leeway_seconds`; `nbf` too when present). The JWKS is fetched over HTTP on first
//! use and cached; a token signed with a key id the cache does not know makes it
//! fetch the JWKS again (key rotation) — concurrent callers share one fetch, and such
//! fetches happen at most once per `min_refresh_seconds` (as do retries after a failed
//! fetch); the cache is also renewed after `max_age_seconds`. Anything else is a 401
//! with the reason (`invalid_token`).
//!
//! The principal's name is the `principal_claim` (default `sub`); its roles come from
//! the `roles_claim` (default `roles`; a dotted path such as `realm_access.roles`
//! reaches into objects; an array of strings, or one string of space-separated
//! names), each mapped through `role_map` or read as `user` / `approver` / `admin`.
//! Decisions it makes are recorded with the subject and the issuer
//! ([`Principal::actor`]).
//!
//! ```json
//! {"principals": [],
//!  "oidc": {
//!    "issuer": "https://login.example.com/realms/ops",
//!    "audience": "reins",
//!    "jwks_uri": "https://login.example.com/realms/ops/protocol/openid-connect/certs",
//!    "leeway_seconds": 60,
//!    "principal_claim": "preferred_username",
//!    "roles_claim": "realm_access.roles",
//!    "role_map": {"reins-approvers": "approver", "reins-admins": "admin"}
//!  }}
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{AccessRole, AuthConfigError, Identity, Principal};

/// The `oidc` part of the auth configuration (see the [module docs](self)).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The issuer tokens must name (`iss`), exactly.
    pub issuer: String,
    /// The audiences accepted (`aud`): one string or a list.
    #[serde(deserialize_with = "one_or_many")]
    pub audience: Vec<String>,
    /// Where the provider publishes its keys (a JWKS document).
    pub jwks_uri: String,
    /// Clock skew allowed on `exp` and `nbf`, in seconds (default 60).
    #[serde(default = "default_leeway")]
    pub leeway_seconds: u64,
    /// The claim that names the principal (default `sub`).
    #[serde(default = "default_principal_claim")]
    pub principal_claim: String,
    /// The claim (dotted path) that lists the roles (default `roles`).
    #[serde(default = "default_roles_claim")]
    pub roles_claim: String,
    /// Role names of the provider mapped to reins roles.
    #[serde(default)]
    pub role_map: BTreeMap<String, AccessRole>,
    /// Accepted signature algorithms (default `RS256`, `ES256`).
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<Algorithm>,
    /// The least time between two JWKS fetches caused by unknown key ids, in seconds
    /// (default 30).
    #[serde(default = "default_min_refresh")]
    pub min_refresh_seconds: u64,
    /// How long fetched keys are used before the JWKS is fetched again, in seconds
    /// (default 3600).
    #[serde(default = "default_max_age")]
    pub max_age_seconds: u64,
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

fn default_leeway() -> u64 {
    60
}
fn default_principal_claim() -> String {
    "sub".to_owned()
}
fn default_roles_claim() -> String {
    "roles".to_owned()
}
fn default_algorithms() -> Vec<Algorithm> {
    vec![Algorithm::RS256, Algorithm::ES256]
}
fn default_min_refresh() -> u64 {
    30
}
fn default_max_age() -> u64 {
    3600
}

impl OidcConfig {
    /// A configuration with the defaults for everything but these.
    pub fn new(
        issuer: impl Into<String>,
        audience: impl Into<String>,
        jwks_uri: impl Into<String>,
    ) -> Self {
        Self {
            issuer: issuer.into(),
            audience: vec![audience.into()],
            jwks_uri: jwks_uri.into(),
            leeway_seconds: default_leeway(),
            principal_claim: default_principal_claim(),
            roles_claim: default_roles_claim(),
            role_map: BTreeMap::new(),
            algorithms: default_algorithms(),
            min_refresh_seconds: default_min_refresh(),
            max_age_seconds: default_max_age(),
        }
    }
}

/// The cached keys.
#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, (DecodingKey, Option<Algorithm>)>,
    /// The last successful fetch.
    fetched: Option<Instant>,
    /// The last fetch caused by an unknown key id.
    refetched: Option<Instant>,
    /// The last failed fetch.
    failed: Option<Instant>,
}

/// Verifies tokens of one identity provider (see the [module docs](self)).
pub struct Oidc {
    config: OidcConfig,
    client: reqwest::Client,
    keys: tokio::sync::RwLock<Keys>,
    /// Held while fetching, so concurrent unknown key ids cause one fetch.
    fetching: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.config.issuer)
            .field("audience", &self.config.audience)
            .field("jwks_uri", &self.config.jwks_uri)
            .finish_non_exhaustive()
    }
}

impl Oidc {
    /// A verifier for `config`.
    pub fn new(config: OidcConfig) -> Result<Self, AuthConfigError> {
        if config.issuer.trim().is_empty() || config.audience.is_empty() {
            return Err(AuthConfigError::Invalid(
                "oidc needs an issuer and at least one audience".to_owned(),
            ));
        }
        if config.algorithms.is_empty() {
            return Err(AuthConfigError::Invalid(
                "oidc accepts no algorithm: list at least one in `algorithms`".to_owned(),
            ));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| AuthConfigError::Invalid(format!("oidc HTTP client: {e}")))?;
        Ok(Self {
            config,
            client,
            keys: tokio::sync::RwLock::new(Keys::default()),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    /// The principal of a token, or why it is refused.
    pub(crate) async fn verify(&self, token: &str) -> Result<Principal, String> {
        let header = decode_header(token).map_err(|e| format!("the token's header: {e}"))?;
        if !self.config.algorithms.contains(&header.alg) {
            return Err(format!("the algorithm {:?} is not accepted", header.alg));
        }
        let kid = header
            .kid
            .ok_or_else(|| "the token names no key id (`kid`)".to_owned())?;
        let (key, key_alg) = self.key(&kid).await?;
        if key_alg.is_some_and(|a| a != header.alg) {
            return Err(format!("key `{kid}` is not for {:?}", header.alg));
        }
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[&self.config.issuer]);
        v.set_audience(&self.config.audience);
        v.leeway = self.config.leeway_seconds;
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = decode::<Map<String, Value>>(token, &key, &v).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            match e.kind() {
                K::ExpiredSignature => "the token has expired".to_owned(),
                K::ImmatureSignature => "the token is not valid yet (`nbf`)".to_owned(),
                K::InvalidIssuer => {
                    format!("the token's issuer is not `{}`", self.config.issuer)
                }
                K::InvalidAudience => "the token is not meant for this server (`aud`)".to_owned(),
                K::InvalidSignature => "the token's signature does not verify".to_owned(),
                K::MissingRequiredClaim(c) => format!("the token has no `{c}` claim"),
                _ => format!("the token is invalid: {e}"),
            }
        })?;
        self.principal(&data.claims)
    }

    fn principal(&self, claims: &Map<String, Value>) -> Result<Principal, String> {
        let c = &self.config;
        let name = claims
            .get(&c.principal_claim)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| {
                format!(
                    "the token has no `{}` claim to name its principal",
                    c.principal_claim
                )
            })?;
        let root = Value::Object(claims.clone());
        let mut at = Some(&root);
        for part in c.roles_claim.split('.') {
            at = at.and_then(|v| v.get(part));
        }
        let names: Vec<String> = match at {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        let roles: BTreeSet<AccessRole> = names
            .iter()
            .filter_map(|n| {
                c.role_map
                    .get(n)
                    .copied()
                    .or_else(|| serde_json::from_value::<AccessRole>(Value::String(n.clone())).ok())
            })
            .collect();
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut p = Principal::new(name, roles);
        p.identity = Some(Identity {
            issuer: c.issuer.clone(),
            subject: subject.to_owned(),
        });
        Ok(p)
    }

    /// The key `kid`: from the cache, or the JWKS fetched again when the cache is
    /// empty, too old, or (at most once per `min_refresh_seconds`) does not know it.
    async fn key(&self, kid: &str) -> Result<(DecodingKey, Option<Algorithm>), String> {
        let max_age = Duration::from_secs(self.config.max_age_seconds);
        let min_refresh = Duration::from_secs(self.config.min_refresh_seconds);
        let fresh = |k: &Keys| k.fetched.is_some_and(|t| t.elapsed() < max_age);
        {
            let keys = self.keys.read().await;
            if let (true, Some(k)) = (fresh(&keys), keys.by_kid.get(kid)) {
                return Ok(k.clone());
            }
        }
        let recent = |t: Option<Instant>| t.is_some_and(|t| t.elapsed() < min_refresh);
        let _one = self.fetching.lock().await;
        let unknown = {
            // Someone else may have fetched while this one waited.
            let keys = self.keys.read().await;
            if let (true, Some(k)) = (fresh(&keys), keys.by_kid.get(kid)) {
                return Ok(k.clone());
            }
            if recent(keys.failed) {
                return Err(
                    "the identity provider's keys are unavailable (a fetch failed moments ago)"
                        .to_owned(),
                );
            }
            // The keys are current and do not know it: a rotation, or a made-up id.
            let unknown = fresh(&keys);
            if unknown && recent(keys.refetched) {
                return Err(format!("unknown key id `{kid}`"));
            }
            unknown
        };
        let fetched = self.fetch().await;
        let mut keys = self.keys.write().await;
        match fetched {
            Ok(by_kid) => {
                keys.by_kid = by_kid;
                keys.fetched = Some(Instant::now());
                if unknown {
                    keys.refetched = keys.fetched;
                }
            }
            Err(e) => {
                tracing::warn!(jwks = %self.config.jwks_uri, error = %e, "could not fetch the identity provider's keys");
                // Rate-limited too; the keys fetched before stay.
                keys.failed = Some(Instant::now());
                return Err(format!("the identity provider's keys are unavailable: {e}"));
            }
        }
        keys.by_kid
            .get(kid)
            .cloned()
            .ok_or_else(|| format!("unknown key id `{kid}`"))
    }

    async fn fetch(&self) -> Result<HashMap<String, (DecodingKey, Option<Algorithm>)>, String> {
        let res = self
            .client
            .get(&self.config.jwks_uri)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !res.status().is_success() {
            return Err(format!("HTTP {}", res.status()));
        }
        let set: JwkSet = res.json().await.map_err(|e| format!("not a JWKS: {e}"))?;
        let mut out = HashMap::new();
        for jwk in &set.keys {
            let Some(kid) = jwk.common.key_id.clone() else {
                continue;
            };
            match DecodingKey::from_jwk(jwk) {
                Ok(k) => {
                    let alg = jwk
                        .common
                        .key_algorithm
                        .and_then(|a| a.to_string().parse::<Algorithm>().ok());
                    out.insert(kid, (k, alg));
                }
                Err(e) => {
                    tracing::warn!(kid = %kid, error = %e, "skipping an unusable key of the JWKS")
                }
            }
        }
        tracing::debug!(keys = out.len(), "fetched the identity provider's keys");
        Ok(out)
    }
}
