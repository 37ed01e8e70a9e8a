//! `reins.toml` (reins_server::config): bad files refused with the key and the line and
//! nothing started; secrets redacted and overrides applied; and a file alone setting up
//! a server — static tokens, OIDC against a JWKS served here, Cedar with a shadow set
//! reloaded on file change (a bad edit kept out, shown at `GET /v1/policy`), a default
//! budget, and a webhook subscriber checked by the Standard Webhooks reference verifier
//! (reins-notify's tests/webhooks/receiver.py) — through which a run pauses, is
//! announced, approved, and its tool runs once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use p256::pkcs8::EncodePrivateKey;
use reins_server::config::{Config, ConfigError};
use serde_json::{Value, json};
use support::*;

/// Bad files, overrides and secrets: what the file says, checked before anything starts.
mod refusals;

/// The request timeout, a hashed token, PostgreSQL, and the cost and wall-time
/// budgets.
mod basics;

/// A webhook's filters; email's link life, base URL and SMTP login; Slack's inbox URL.
#[cfg(all(feature = "email", feature = "slack"))]
mod channels;

/// `[policies]`' reload triggers: watching, its interval, SIGHUP.
mod policies;

/// `notifications.sweep_interval`, on a paused clock.
mod waiting;

/// Every `[auth.oidc]` key.
#[cfg(feature = "oidc")]
mod oidc;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The receiver process (Standard Webhooks' own verifier); killed when dropped.
struct Receiver {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    fn start(test: &str) -> Option<Self> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-notify/tests/webhooks");
        let python = dir.join(".venv/bin/python");
        if !python.exists() {
            let why = "the webhook verifier is not installed (python3 -m venv crates/reins-notify/tests/webhooks/.venv && \
                       crates/reins-notify/tests/webhooks/.venv/bin/pip install -r crates/reins-notify/tests/webhooks/requirements.txt)";
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{test}: {why}; CI must run this test");
            }
            eprintln!("SKIPPED {test}: {why}");
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("received.jsonl");
        let mut child = Command::new(python)
            .arg(dir.join("receiver.py"))
            .args(["--secret", SECRET, "--log"])
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut port = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut port)
            .unwrap();
        Some(Self {
            child,
            url: format!("http://127.0.0.1:{}/hook", port.trim()),
            log,
            _dir: tmp,
        })
    }

    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits until a verified request of `kind` about `session` arrived (at most
    /// 20 s); returns it.
    async fn wait_for(&self, kind: &str, session: &str) -> Value {
        for _ in 0..200 {
            if let Some(l) = self.lines().into_iter().find(|l| {
                l["type"] == kind && l["verified"] == true && l["data"]["session"] == session
            }) {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "no verified `{kind}` of {session}; the receiver got {:?}",
            self.lines()
        );
    }
}

/// An EC (P-256) key pair made here, and a JWKS with it served on loopback.
struct Provider {
    kid: String,
    signing: EncodingKey,
    url: String,
    task: tokio::task::JoinHandle<()>,
    /// How many times the JWKS was fetched.
    fetches: Arc<AtomicUsize>,
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Provider {
    async fn start() -> Self {
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
        jwk["kid"] = json!("k1");
        jwk["alg"] = json!("ES256");
        let fetches = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&fetches);
        let app = axum::Router::new().route(
            "/certs",
            axum::routing::get(move || {
                let jwk = jwk.clone();
                counted.fetch_add(1, Ordering::SeqCst);
                async move { axum::Json(json!({"keys": [jwk]})) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            kid: "k1".to_owned(),
            signing: EncodingKey::from_ec_der(der.as_bytes()),
            url: format!("http://{addr}/certs"),
            task,
            fetches,
        }
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    /// `claims` signed with ES256 by the provider's key, named `kid` in the header.
    fn sign(&self, kid: &str, claims: &Value) -> String {
        let mut h = Header::new(Algorithm::ES256);
        h.kid = Some(kid.to_owned());
        encode(&h, claims, &self.signing).unwrap()
    }

    fn token(&self, name: &str, roles: &[&str]) -> String {
        let now = chrono::Utc::now().timestamp();
        let mut h = Header::new(Algorithm::ES256);
        h.kid = Some(self.kid.clone());
        let claims = json!({
            "iss": ISSUER, "aud": "reins", "sub": format!("sub-{name}"),
            "preferred_username": name,
            "realm_access": {"roles": roles},
            "iat": now, "exp": now + 300,
        });
        encode(&h, &claims, &self.signing).unwrap()
    }
}

const ISSUER: &str = "https://login.example.test/realms/ops";

const DELETES: &str = r#"@id("tmp-deletes")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "tmp/*" };
"#;

const DECIDERS: &str = r#"@id("approvers-decide")
permit (principal in Reins::Role::"approver", action == Reins::Action::"decide", resource);
"#;

/// The shadow set would also let `scratch/*` deletes run.
const SHADOW_DELETES: &str = r#"@id("scratch-deletes")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "scratch/*" };
"#;

/// A server set up by `text` alone, over the test agent (model and tools are code).
async fn serve_config(text: &str, dir: tempfile::TempDir, env: &[(&str, &str)]) -> TestServer {
    let config = Config::from_str_with_env(text, dir.path(), vars(env)).unwrap();
    let setup = config.setup().await.unwrap();
    let ran = Ran::default();
    let store = setup.store().cloned().expect("the file names a store");
    let agent = agent_with(store, &ran, |b| setup.agent(b));
    let server = setup.server(agent.clone()).await.unwrap();
    let listener = setup.listener().await.unwrap();
    serve_on(listener, server, agent, ran, Some(dir))
}

async fn run(s: &TestServer, token: &str, session: &str, message: &str) -> Value {
    let (st, out) = s
        .post(
            token,
            &format!("/v1/sessions/{}/runs", enc(session)),
            json!({"message": message}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    out
}

/// Waits (at most 20 s) until `GET /v1/policy` satisfies `done`; returns it.
async fn policy_until(s: &TestServer, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..200 {
        let (st, status) = s.get(ADMIN, "/v1/policy").await;
        assert_eq!(st, 200, "{status}");
        if done(&status) {
            return status;
        }
        last = status;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the policy status never got there: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_alone_sets_up_auth_policies_budget_and_webhooks() {
    let Some(receiver) =
        Receiver::start("a_config_file_alone_sets_up_auth_policies_budget_and_webhooks")
    else {
        return;
    };
    let provider = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    for d in ["policies", "policies-next"] {
        std::fs::create_dir(root.join(d)).unwrap();
        std::fs::write(root.join(d).join("deciders.cedar"), DECIDERS).unwrap();
    }
    std::fs::write(root.join("policies/deletes.cedar"), DELETES).unwrap();
    std::fs::write(root.join("policies-next/deletes.cedar"), SHADOW_DELETES).unwrap();
    std::fs::write(root.join("admin.token"), format!("{ADMIN}\n")).unwrap();
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"

[store]
sqlite = "reins.db"

[auth.tokens.ops]
roles = ["admin"]
token = {{ file = "admin.token" }}

[auth.tokens.alice]
roles = ["user"]
token = {{ env = "ALICE" }}

[auth.oidc]
issuer = "{ISSUER}"
audience = "reins"
jwks_uri = "{jwks}"
principal_claim = "preferred_username"
roles_claim = "realm_access.roles"
role_map = {{ "reins-approvers" = "approver" }}

[policies]
dir = "policies"
shadow_dir = "policies-next"
reload_on_sighup = false
watch_interval = "100ms"

[budgets.default]
tool_calls = 1

[notifications.webhooks.ops]
url = "{hook}"
secret = {{ env = "HOOK" }}
event_types = ["requirement.waiting", "requirement.decided"]
tools = ["delete_file"]
"#,
        jwks = provider.url,
        hook = receiver.url,
    );
    let s = serve_config(&text, dir, &[("ALICE", ALICE), ("HOOK", SECRET)]).await;

    // The policies answer: a delete under tmp/ runs without asking, once...
    let out = run(&s, ALICE, "alice/p-1", "delete tmp/x").await;
    assert_eq!(out["status"], "completed", "{out}");
    assert_eq!(s.ran(), ["delete:tmp/x"]);

    // ...and the default budget (one tool call) pauses the next session's second call
    // only; its first call (not covered by the policies) waits for a person.
    let out = run(&s, ALICE, "alice/p-2", "delete a.txt").await;
    assert_eq!(out["status"], "paused", "{out}");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let waiting = receiver.wait_for("requirement.waiting", "alice/p-2").await;
    assert_eq!(waiting["data"]["tool"], "delete_file", "{waiting}");
    assert_eq!(waiting["data"]["requirement"], rid.as_str(), "{waiting}");

    // The shadow set would have let `scratch/` run; the active one asked.
    let out = run(&s, ALICE, "alice/p-3", "delete scratch/y").await;
    assert_eq!(out["status"], "paused", "{out}");
    let (st, shadow) = s.get(ADMIN, "/v1/policy/shadow?session=alice%2Fp-3").await;
    assert_eq!(st, 200, "{shadow}");
    assert_eq!(
        shadow["differences"][0]["shadow"]["policies"],
        json!(["scratch-deletes"]),
        "{shadow}"
    );

    // An approver of the identity provider decides (Cedar makes approvers eligible);
    // the tool runs once, and the webhook hears the decision.
    let olga = provider.token("olga", &["reins-approvers"]);
    let (st, out) = s
        .post(
            &olga,
            "/v1/sessions/alice%2Fp-2/decisions",
            json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(s.ran(), ["delete:tmp/x", "delete:a.txt"]);
    receiver.wait_for("requirement.decided", "alice/p-2").await;
    let (st, out) = s
        .post(
            &olga,
            "/v1/sessions/alice%2Fp-2/decisions",
            json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 409, "{out}");
    assert_eq!(s.ran(), ["delete:tmp/x", "delete:a.txt"]);
    // A token of the provider is refused what its roles do not give.
    let (st, _) = s
        .get(&provider.token("ivan", &["offline_access"]), "/v1/policy")
        .await;
    assert_eq!(st, 403);
    let (st, _) = s.get(&olga, "/v1/policy").await;
    assert_eq!(st, 403);

    // The budget: a second call in alice/p-2 pauses with a budget requirement.
    let out = run(&s, ALICE, "alice/p-2", "delete tmp/z").await;
    assert_eq!(out["status"], "paused", "{out}");
    assert_eq!(out["requirements"][0]["kind"], "budget", "{out}");
    assert_eq!(s.ran(), ["delete:tmp/x", "delete:a.txt"]);

    // Live reload on file change: a new file in the active directory is picked up.
    let before = policy_until(&s, |p| p["state"] == "ok").await;
    assert_eq!(
        before["active"]["policies"],
        json!(["approvers-decide", "tmp-deletes"])
    );
    assert_eq!(
        before["shadow"]["policies"],
        json!(["approvers-decide", "scratch-deletes"])
    );
    let first_hash = before["active"]["sha256"].as_str().unwrap().to_owned();
    let policies = s_root(&before);
    std::fs::write(policies.join("scratch.cedar"), SHADOW_DELETES).unwrap();
    let after = policy_until(&s, |p| p["reloads"] == 1).await;
    assert_eq!(after["state"], "ok");
    assert_ne!(after["active"]["sha256"], first_hash.as_str());
    assert_eq!(
        after["active"]["policies"],
        json!(["approvers-decide", "tmp-deletes", "scratch-deletes"])
    );
    let out = run(&s, ALICE, "alice/p-4", "delete scratch/w").await;
    assert_eq!(out["status"], "completed", "{out}");
    assert_eq!(s.ran().last().unwrap(), "delete:scratch/w");
    // The call the new set allowed names that set in its audit record, as the status
    // shows it.
    assert_ne!(
        after["active"]["policy_hash"],
        before["active"]["policy_hash"]
    );
    let (_, trail) = s.get(ADMIN, "/v1/sessions/alice%2Fp-4/decisions").await;
    assert_eq!(
        trail["decisions"][0]["policy_hash"], after["active"]["policy_hash"],
        "{trail}"
    );

    // A bad edit is refused: the status says why, the sets in use stay.
    std::fs::write(policies.join("scratch.cedar"), "permit (\n  principal,\n").unwrap();
    let broken = policy_until(&s, |p| p["state"] == "error").await;
    let message = broken["last_error"]["message"].as_str().unwrap();
    assert!(message.contains("scratch.cedar:"), "{broken}");
    assert_eq!(broken["last_error"]["trigger"], "file change");
    assert_eq!(broken["active"], after["active"], "{broken}");
    let out = run(&s, ALICE, "alice/p-5", "delete scratch/v").await;
    assert_eq!(out["status"], "completed", "{out}");
    // The endpoint says the same, and changes nothing.
    let (st, refused) = s.post(ADMIN, "/v1/policy/reload", json!({})).await;
    assert_eq!(
        (st, refused["error"]["code"].as_str()),
        (422, Some("policy_refused")),
        "{refused}"
    );
    let (st, _) = s.post(ALICE, "/v1/policy/reload", json!({})).await;
    assert_eq!(st, 403);
    // Fixed: the next look reloads, and the error is gone.
    std::fs::remove_file(policies.join("scratch.cedar")).unwrap();
    let fixed = policy_until(&s, |p| p["state"] == "ok" && p["reloads"] == 2).await;
    assert_eq!(fixed["active"]["sha256"], first_hash.as_str());
    assert!(fixed.get("last_error").is_none(), "{fixed}");
}

/// The active directory, from the status.
fn s_root(status: &Value) -> PathBuf {
    PathBuf::from(status["active"]["directory"].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_of_the_file_replace_and_remove_their_stored_copies() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    let text = |hooks: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nsqlite = \"r.db\"\n\
             [auth.tokens.ops]\nroles = [\"admin\"]\ntoken = {{ env = \"OPS\" }}\n{hooks}"
        )
    };
    let env = vars(&[("OPS", ADMIN), ("HOOK", SECRET)]);
    let two = "[notifications.webhooks.a]\nurl = \"http://127.0.0.1:1/a\"\nsecret = { env = \"HOOK\" }\n\
               [notifications.webhooks.b]\nurl = \"http://127.0.0.1:1/b\"\nsecret = { env = \"HOOK\" }\n";
    let one = "[notifications.webhooks.a]\nurl = \"http://127.0.0.1:1/a2\"\nsecret = { env = \"HOOK\" }\n";
    let mut urls = Vec::new();
    for hooks in [two, two, one] {
        let config = Config::from_str_with_env(&text(hooks), &root, env.clone()).unwrap();
        let setup = config.setup().await.unwrap();
        let ran = Ran::default();
        let agent = agent_with(setup.store().cloned().unwrap(), &ran, |b| setup.agent(b));
        let server = setup.server(agent.clone()).await.unwrap();
        let s = serve_on(setup.listener().await.unwrap(), server, agent, ran, None);
        let (st, list) = s.get(ADMIN, "/v1/webhooks").await;
        assert_eq!(st, 200, "{list}");
        let mut got: Vec<(String, String)> = list["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    w["id"].as_str().unwrap().to_owned(),
                    w["url"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        got.sort();
        urls.push(got);
    }
    let pair = |id: &str, url: &str| (id.to_owned(), url.to_owned());
    assert_eq!(
        urls[0],
        [
            pair("wh_config_a", "http://127.0.0.1:1/a"),
            pair("wh_config_b", "http://127.0.0.1:1/b")
        ]
    );
    assert_eq!(
        urls[1], urls[0],
        "a restart writes the same subscribers once"
    );
    assert_eq!(urls[2], [pair("wh_config_a", "http://127.0.0.1:1/a2")]);
}

/// `[notifications.waiting.<tool>]` and `sweep_interval` from the file: a waiting
/// delete is escalated to the group named (the webhook receives a verified
/// `requirement.escalated` naming it), then rejected by expiry with the file's note,
/// audited `via: expiry`; nothing runs. Real time, short durations: the test waits on
/// the notices, not on the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalation_and_expiry_from_the_file() {
    let Some(receiver) = Receiver::start("escalation_and_expiry_from_the_file") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"

[store]
sqlite = "reins.db"

[auth.tokens.ops]
roles = ["admin"]
token = {{ env = "OPS" }}

[auth.tokens.alice]
roles = ["user"]
token = {{ env = "ALICE" }}

[telemetry]
metrics = false

[notifications]
sweep_interval = "100ms"

[notifications.waiting.delete_file]
escalate_after = "200ms"
escalate_to = ["ops"]
expire_after = "1s"
on_expiry = "reject"
expiry_note = "nobody decided within a second"

[notifications.webhooks.ops]
url = "{hook}"
secret = {{ env = "HOOK" }}
event_types = ["requirement.escalated", "requirement.expired"]
"#,
        hook = receiver.url,
    );
    let s = serve_config(
        &text,
        dir,
        &[("OPS", ADMIN), ("ALICE", ALICE), ("HOOK", SECRET)],
    )
    .await;
    let out = run(&s, ALICE, "alice/w-1", "delete a.txt").await;
    assert_eq!(out["status"], "paused", "{out}");
    let escalated = receiver
        .wait_for("requirement.escalated", "alice/w-1")
        .await;
    assert_eq!(
        escalated["data"]["principals"],
        json!(["ops"]),
        "{escalated}"
    );
    receiver.wait_for("requirement.expired", "alice/w-1").await;
    let mut trail = Value::Null;
    for _ in 0..200 {
        let (_, t) = s.get(ADMIN, "/v1/sessions/alice%2Fw-1/decisions").await;
        if t["decisions"].as_array().is_some_and(|d| !d.is_empty()) {
            trail = t;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rec = &trail["decisions"][0];
    assert_eq!(rec["decision"], "reject", "{trail}");
    assert_eq!(rec["actor"]["metadata"]["via"], "expiry", "{trail}");
    assert_eq!(rec["note"], "nobody decided within a second", "{trail}");
    assert!(s.ran().is_empty());
    // `metrics = false`: no /metrics.
    let (st, _) = s.get(ADMIN, "/metrics").await;
    assert_eq!(st, 404);
}

/// `server.body_limit`, a principal's `session_prefix` and `tools`, and the shadow
/// log file, from the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_principals_and_the_shadow_log_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    for d in ["policies", "policies-next"] {
        std::fs::create_dir(root.join(d)).unwrap();
        std::fs::write(root.join(d).join("deciders.cedar"), DECIDERS).unwrap();
    }
    std::fs::write(root.join("policies-next/deletes.cedar"), SHADOW_DELETES).unwrap();
    let text = r#"
[server]
listen = "127.0.0.1:0"
body_limit = 512

[store]
sqlite = "reins.db"

[auth.tokens.ops]
roles = ["admin"]
token = { env = "OPS" }

[auth.tokens.team]
roles = ["user"]
session_prefix = "team/"
token = { env = "TEAM" }

[auth.tokens.rita]
roles = ["approver"]
tools = ["send_email"]
token = { env = "RITA" }

[policies]
dir = "policies"
shadow_dir = "policies-next"
shadow_log = "shadow.jsonl"
"#;
    let s = serve_config(
        text,
        dir,
        &[("OPS", ADMIN), ("TEAM", "team-token"), ("RITA", RITA)],
    )
    .await;
    // The body limit.
    let (st, _) = s
        .post(
            "team-token",
            "/v1/sessions/team%2F0/runs",
            json!({"message": "x".repeat(600)}),
        )
        .await;
    assert_eq!(st, 413);
    // The session prefix: team owns team/..., nothing else.
    let (st, _) = s
        .post(
            "team-token",
            "/v1/sessions/other%2F1/runs",
            json!({"message": "hi"}),
        )
        .await;
    assert_eq!(st, 403);
    let out = run(&s, "team-token", "team/1", "delete scratch/a").await;
    assert_eq!(out["status"], "paused", "{out}");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    // rita decides on send_email only.
    let (st, out) = s
        .post(
            RITA,
            "/v1/sessions/team%2F1/decisions",
            json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 403, "{out}");
    assert!(s.ran().is_empty());
    // The shadow set would have allowed the delete: the difference is in the file.
    let log = root.join("shadow.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("scratch-deletes") && text.contains("team/1"),
        "{text}"
    );
}
