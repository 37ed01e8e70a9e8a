//! OpenID Connect bearer tokens over real HTTP: tokens minted here with the
//! `jsonwebtoken` crate, signed with EC keys generated here, verified against a JWKS
//! served on loopback. Expired, wrong audience, wrong issuer, unknown key id,
//! `alg: none`, a bad signature and a rotated-out key are refused (401, with the
//! reason); a rotated-in key is fetched once; a valid token's subject and issuer are
//! in the audit trail; static tokens keep working beside them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use p256::pkcs8::EncodePrivateKey;
use reins_server::{Oidc, OidcConfig};
use serde_json::{Value, json};
use support::*;

/// An EC (P-256) key pair made here: its signing key (PKCS#8) and its public JWK.
struct Key {
    kid: String,
    signing: EncodingKey,
    jwk: Value,
}

impl Key {
    fn new(kid: &str) -> Self {
        let secret = loop {
            let mut bytes = [0u8; 32];
            bytes[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
            bytes[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
            if let Ok(s) = p256::SecretKey::from_slice(&bytes) {
                break s;
            }
        };
        let der = secret.to_pkcs8_der().unwrap();
        let mut jwk: Value = serde_json::from_str(&secret.public_key().to_jwk_string()).unwrap();
        jwk["kid"] = json!(kid);
        jwk["alg"] = json!("ES256");
        jwk["use"] = json!("sig");
        Self {
            kid: kid.to_owned(),
            signing: EncodingKey::from_ec_der(der.as_bytes()),
            jwk,
        }
    }

    fn sign(&self, claims: &Value) -> String {
        let mut h = Header::new(Algorithm::ES256);
        h.kid = Some(self.kid.clone());
        encode(&h, claims, &self.signing).unwrap()
    }
}

/// The identity provider's JWKS on a loopback port, with a count of fetches.
struct Provider {
    url: String,
    keys: Arc<Mutex<Vec<Value>>>,
    fetches: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Provider {
    async fn start(keys: &[&Key]) -> Self {
        let set = Arc::new(Mutex::new(
            keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>(),
        ));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (s, f) = (Arc::clone(&set), Arc::clone(&fetches));
        let app = axum::Router::new().route(
            "/certs",
            axum::routing::get(move || {
                let (s, f) = (Arc::clone(&s), Arc::clone(&f));
                async move {
                    f.fetch_add(1, Ordering::SeqCst);
                    axum::Json(json!({"keys": *s.lock().unwrap()}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{addr}/certs"),
            keys: set,
            fetches,
            task,
        }
    }

    fn publish(&self, keys: &[&Key]) {
        *self.keys.lock().unwrap() = keys.iter().map(|k| k.jwk.clone()).collect();
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

const ISSUER: &str = "https://login.example.test/realms/ops";

fn oidc(provider: &Provider) -> Oidc {
    // Read as the auth file's `oidc` section is.
    let config: OidcConfig = serde_json::from_value(json!({
        "issuer": ISSUER,
        "audience": ["reins", "reins-dev"],
        "jwks_uri": provider.url,
        "leeway_seconds": 30,
        "principal_claim": "preferred_username",
        "roles_claim": "realm_access.roles",
        "role_map": {"reins-approvers": "approver"},
        "min_refresh_seconds": 60
    }))
    .unwrap();
    Oidc::new(config).unwrap()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn claims() -> Value {
    json!({
        "iss": ISSUER,
        "aud": "reins",
        "sub": "4f1c-olga",
        "preferred_username": "olga",
        "realm_access": {"roles": ["reins-approvers", "offline_access"]},
        "iat": now(),
        "exp": now() + 300,
    })
}

/// Base64url without padding (RFC 4648, section 5), for the hand-made `alg: none` token.
fn b64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

/// GET the inbox with `token`: the status, the reason and the challenge.
async fn inbox(s: &TestServer, token: &str) -> (u16, String, String) {
    let res = s
        .client
        .get(s.url("/v1/requirements?status=pending"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let challenge = res
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    (
        status,
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        challenge,
    )
}

#[tokio::test]
async fn a_valid_tokens_subject_and_issuer_are_in_the_audit_trail() {
    let k1 = Key::new("k1");
    let idp = Provider::start(&[&k1]).await;
    let s = start_with(|srv| srv.auth(auth().oidc(oidc(&idp)))).await;
    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fo1/runs",
            json!({"message": "delete a.txt"}),
        )
        .await;
    assert_eq!((st, out["status"].as_str()), (200, Some("paused")), "{out}");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let token = k1.sign(&claims());
    let (st, out) = s
        .post(
            &token,
            "/v1/sessions/alice%2Fo1/decisions",
            json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(s.ran(), ["delete:a.txt"]);
    let (st, list) = s.get(ADMIN, "/v1/sessions/alice%2Fo1/decisions").await;
    assert_eq!(st, 200, "{list}");
    let actor = &list["decisions"][0]["actor"];
    assert_eq!(actor["principal"], "olga", "{list}");
    assert_eq!(actor["metadata"]["subject"], "4f1c-olga", "{list}");
    assert_eq!(actor["metadata"]["issuer"], ISSUER, "{list}");
    assert_eq!(actor["metadata"]["roles"], json!(["approver"]), "{list}");
    assert_eq!(idp.fetches(), 1);
}

#[tokio::test]
async fn refused_tokens_get_401_with_the_reason() {
    let k1 = Key::new("k1");
    let stranger = Key::new("k1");
    let other = Key::new("k9");
    let idp = Provider::start(&[&k1]).await;
    let s = start_with(|srv| srv.auth(auth().oidc(oidc(&idp)))).await;

    let (st, why, _) = inbox(&s, &k1.sign(&claims())).await;
    assert_eq!(st, 200, "{why}");
    // Within the clock skew (30 s), an expired token still passes; past it, it does not.
    let (st, why, _) = inbox(&s, &k1.sign(&with(claims(), "exp", json!(now() - 10)))).await;
    assert_eq!(st, 200, "{why}");
    // The other audience listed is accepted.
    let (st, why, _) = inbox(&s, &k1.sign(&with(claims(), "aud", json!("reins-dev")))).await;
    assert_eq!(st, 200, "{why}");

    let none = format!(
        "{}.{}.",
        b64url(
            json!({"alg": "none", "typ": "JWT", "kid": "k1"})
                .to_string()
                .as_bytes()
        ),
        b64url(claims().to_string().as_bytes())
    );
    let cases = [
        (
            k1.sign(&with(claims(), "exp", json!(now() - 120))),
            "has expired",
        ),
        (
            k1.sign(&with(claims(), "aud", json!("billing"))),
            "not meant for this server",
        ),
        (
            k1.sign(&with(claims(), "iss", json!("https://evil.example.test"))),
            "issuer is not",
        ),
        (other.sign(&claims()), "unknown key id `k9`"),
        (none, "header"),
        (stranger.sign(&claims()), "signature does not verify"),
        (
            k1.sign(&with(claims(), "nbf", json!(now() + 600))),
            "not valid yet",
        ),
    ];
    for (token, reason) in cases {
        let (st, why, challenge) = inbox(&s, &token).await;
        assert_eq!(st, 401, "expected a refusal ({reason}), got {st}: {why}");
        assert!(
            why.contains(reason),
            "the reason must say `{reason}`: {why}"
        );
        assert!(
            challenge.contains(r#"error="invalid_token""#),
            "{challenge}"
        );
        assert!(
            challenge.contains(reason.split('`').next().unwrap()),
            "{challenge}"
        );
    }
    // A missing `sub` is refused too.
    let mut no_sub = claims();
    no_sub.as_object_mut().unwrap().remove("sub");
    let (st, why, _) = inbox(&s, &k1.sign(&no_sub)).await;
    assert_eq!((st, why.contains("`sub`")), (401, true), "{why}");
    // Static tokens keep working beside the provider's.
    assert_eq!(inbox(&s, ANA).await.0, 200);
    assert_eq!(inbox(&s, "not-a-token").await.0, 401);
    // One unknown key id caused one fetch beyond the first; the rest were rate-limited.
    assert_eq!(idp.fetches(), 2);
}

#[tokio::test]
async fn a_rotated_key_is_fetched_once_and_a_retired_one_is_refused() {
    let k1 = Key::new("k1");
    let k2 = Key::new("k2");
    let idp = Provider::start(&[&k1]).await;
    let s = start_with(|srv| srv.auth(auth().oidc(oidc(&idp)))).await;
    assert_eq!(inbox(&s, &k1.sign(&claims())).await.0, 200);
    assert_eq!(idp.fetches(), 1);

    // The provider rotates: k2 in, k1 out. Many callers at once with the new key: one
    // fetch.
    idp.publish(&[&k2]);
    let token = k2.sign(&claims());
    let answers = futures::future::join_all((0..8).map(|_| inbox(&s, &token))).await;
    for (st, why, _) in &answers {
        assert_eq!(*st, 200, "{why}");
    }
    assert_eq!(
        idp.fetches(),
        2,
        "the rotation must cause exactly one fetch"
    );
    // The retired key is refused, without another fetch (rate-limited).
    let (st, why, _) = inbox(&s, &k1.sign(&claims())).await;
    assert_eq!(
        (st, why.contains("unknown key id `k1`")),
        (401, true),
        "{why}"
    );
    assert_eq!(idp.fetches(), 2);
}
