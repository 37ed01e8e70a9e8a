//! `[server]`'s request timeout, a principal's `token_sha256`, `[store] postgres`, and
//! `[budgets]`' cost, prices and wall time, each shown to take effect on a server the
//! file sets up.

use reins_agent::Agent;
use reins_memory::MemoryStore;
use reins_model::{ScriptedModel, ScriptedResponse};

use super::*;

/// `server.request_timeout`: a run answered without streaming that outlasts it gets
/// 408 `timeout` (the slow search takes about 20 s); a short request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeout_from_the_file_answers_408() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
[server]
listen = "127.0.0.1:0"
request_timeout = "500ms"

[store]
sqlite = "reins.db"

[auth.tokens.alice]
roles = ["user"]
token = { env = "ALICE" }
"#;
    let s = serve_config(text, dir, &[("ALICE", ALICE)]).await;
    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fslow-1/runs",
            json!({"message": "slow cats"}),
        )
        .await;
    assert_eq!(st, 408, "{out}");
    assert_eq!(out["error"]["code"], "timeout", "{out}");
    let (st, me) = s.get(ALICE, "/v1/me").await;
    assert_eq!(st, 200, "{me}");
    // The run itself goes on until it is interrupted.
    let (st, out) = s
        .post(ALICE, "/v1/sessions/alice%2Fslow-1/interrupt", json!({}))
        .await;
    assert_eq!(st, 202, "{out}");
}

/// `auth.tokens.<name>.token_sha256`: the file holds only the token's digest; the
/// token itself is accepted, as that principal, and nothing else is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hashed_token_from_the_file_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nsqlite = \"reins.db\"\n\
         [auth.tokens.ops]\nroles = [\"admin\"]\ntoken_sha256 = \"{}\"\n",
        reins_server::hash_token("the-ops-token")
    );
    assert!(!text.contains("the-ops-token"));
    let s = serve_config(&text, dir, &[]).await;
    let (st, me) = s.get("the-ops-token", "/v1/me").await;
    assert_eq!(st, 200, "{me}");
    assert_eq!(me["principal"]["name"], "ops", "{me}");
    let (st, _) = s.get("the-ops-token", "/v1/webhooks").await;
    assert_eq!(st, 200, "an admin");
    // `telemetry.metrics` is true unless the file says otherwise.
    let (st, _) = s.get("the-ops-token", "/metrics").await;
    assert_eq!(st, 200);
    let digest = reins_server::hash_token("the-ops-token");
    let (st, _) = s.get(&digest, "/v1/me").await;
    assert_eq!(st, 401, "the digest is not a token");
}

/// The PostgreSQL URL of the test cluster (`cargo xtask test` starts one), or `None`:
/// the test is skipped, loudly; under `CI=true` it fails.
fn postgres_or_skip(test: &str) -> Option<String> {
    if let Ok(url) = std::env::var("REINS_TEST_POSTGRES_URL") {
        return Some(url);
    }
    let why = "REINS_TEST_POSTGRES_URL is not set (run it through `cargo xtask test`, which starts a throwaway PostgreSQL)";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}; CI must run this test");
    }
    eprintln!("\n!!! SKIPPED {test}: {why}\n");
    None
}

/// `store.postgres`: two servers set up by the same file (the URL a secret) share the
/// store — a session run on one is read on the other — and the session is in
/// PostgreSQL itself; the URL never shows in what `--check` prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_from_the_file_is_shared_by_two_instances() {
    let Some(url) = postgres_or_skip("a_postgres_store_from_the_file_is_shared_by_two_instances")
    else {
        return;
    };
    let text = r#"
[server]
listen = "127.0.0.1:0"

[store]
postgres = { env = "PG" }

[auth.tokens.alice]
roles = ["user"]
token = { env = "ALICE" }
"#;
    let env = [("ALICE", ALICE), ("PG", url.as_str())];
    let config = Config::from_str_with_env(text, "", vars(&env)).unwrap();
    assert!(!config.redacted().contains(&url), "{}", config.redacted());
    let a = serve_config(text, tempfile::tempdir().unwrap(), &env).await;
    let b = serve_config(text, tempfile::tempdir().unwrap(), &env).await;
    let session = format!("alice/pg-{}", uuid::Uuid::new_v4());
    let out = run(&a, ALICE, &session, "hello postgres").await;
    assert_eq!(out["status"], "completed", "{out}");
    let (st, read) = b
        .get(ALICE, &format!("/v1/sessions/{}", enc(&session)))
        .await;
    assert_eq!(st, 200, "{read}");
    assert!(read.to_string().contains("echo: hello postgres"), "{read}");
    let pg = reins_memory::PostgresStore::connect(&url).await.unwrap();
    assert!(
        pg.session_version(&session).await.unwrap().is_some(),
        "the session is not in PostgreSQL"
    );
}

/// A model named `priced-model` whose every answer reports a million input and a
/// million output tokens.
fn priced_agent(setup: &reins_server::config::Setup, name: &str) -> Result<Agent, String> {
    let usage = reins_message::Usage {
        input_tokens: 1_000_000,
        output_tokens: 1_000_000,
        ..Default::default()
    };
    let model = ScriptedModel::from_fn(move |_| ScriptedResponse::text("priced").with_usage(usage))
        .with_name(name);
    setup
        .agent(Agent::builder().name("Priced").model(model))
        .build()
        .map_err(|e| e.to_string())
}

/// `budgets.default.cost` with `budgets.prices.<model>`: one answer costs 0.25 (input)
/// + 0.5 (output) by the file's prices; the limit of 0.5 is reached, and the next run
/// pauses with a `budget` requirement before its model call. A model the file has no
/// price for cannot have a cost limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_limit_and_prices_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
[server]
listen = "127.0.0.1:0"

[store]
sqlite = "reins.db"

[auth.tokens.alice]
roles = ["user"]
token = { env = "ALICE" }

[budgets.default]
cost = 0.5

[budgets.prices."priced-model"]
input_per_million = 0.25
output_per_million = 0.5
"#;
    let config = Config::from_str_with_env(text, dir.path(), vars(&[("ALICE", ALICE)])).unwrap();
    let setup = config.setup().await.unwrap();
    let refused = priced_agent(&setup, "unpriced-model").unwrap_err();
    assert!(refused.contains("price"), "{refused}");
    let agent = priced_agent(&setup, "priced-model").unwrap();
    let server = setup.server(agent.clone()).await.unwrap();
    let s = serve_on(
        setup.listener().await.unwrap(),
        server,
        agent,
        Ran::default(),
        Some(dir),
    );
    let out = run(&s, ALICE, "alice/cost-1", "hello").await;
    assert_eq!(out["status"], "completed", "{out}");
    let out = run(&s, ALICE, "alice/cost-1", "again").await;
    assert_eq!(out["status"], "paused", "{out}");
    let req = &out["requirements"][0];
    assert_eq!(req["kind"], "budget", "{out}");
    assert_eq!(req["budget"]["before"], "model_call", "{out}");
    assert_eq!(req["budget"]["reached"], json!(["cost"]), "{out}");
    assert_eq!(req["budget"]["limit"]["cost"], 0.5, "{out}");
    assert_eq!(req["budget"]["spent"]["cost"], 0.75, "{out}");
}

/// `budgets.default.tokens`: the first answer (about six tokens) spends the file's
/// five; the next run pauses with a `budget` requirement before its model call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_limit_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
[server]
listen = "127.0.0.1:0"

[store]
sqlite = "reins.db"

[auth.tokens.alice]
roles = ["user"]
token = { env = "ALICE" }

[budgets.default]
tokens = 5
"#;
    let s = serve_config(text, dir, &[("ALICE", ALICE)]).await;
    let out = run(&s, ALICE, "alice/tokens-1", "hello there friend").await;
    assert_eq!(out["status"], "completed", "{out}");
    let out = run(&s, ALICE, "alice/tokens-1", "again").await;
    assert_eq!(out["status"], "paused", "{out}");
    let req = &out["requirements"][0];
    assert_eq!(req["kind"], "budget", "{out}");
    assert_eq!(req["budget"]["reached"], json!(["tokens"]), "{out}");
    assert_eq!(req["budget"]["limit"]["tokens"], 5, "{out}");
}

/// `budgets.default.wall_time`: a session whose run was active for more than the
/// file's second (a slow search, interrupted once a second has certainly passed)
/// pauses with a `budget` requirement before its next model call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_time_limit_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
[server]
listen = "127.0.0.1:0"

[store]
sqlite = "reins.db"

[auth.tokens.alice]
roles = ["user"]
token = { env = "ALICE" }

[budgets.default]
wall_time = "1s"
"#;
    let s = Arc::new(serve_config(text, dir, &[("ALICE", ALICE)]).await);
    let slow = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { run(&s, ALICE, "alice/wall-1", "slow dogs").await })
    };
    for _ in 0..200 {
        if s.ran().iter().any(|r| r == "search-start:dogs") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.ran(), ["search-start:dogs"]);
    // Not a wait for something to happen: the run must have been active this long.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (st, out) = s
        .post(ALICE, "/v1/sessions/alice%2Fwall-1/interrupt", json!({}))
        .await;
    assert_eq!(st, 202, "{out}");
    let out = slow.await.unwrap();
    assert_ne!(out["status"], "completed", "{out}");
    let out = run(&s, ALICE, "alice/wall-1", "hello").await;
    assert_eq!(out["status"], "paused", "{out}");
    let req = &out["requirements"][0];
    assert_eq!(req["kind"], "budget", "{out}");
    assert_eq!(req["budget"]["reached"], json!(["wall_secs"]), "{out}");
    assert_eq!(req["budget"]["limit"]["wall_secs"], 1, "{out}");
    let (_, session) = s.get(ALICE, "/v1/sessions/alice%2Fwall-1").await;
    assert!(!session.to_string().contains("echo: hello"), "{session}");
}
