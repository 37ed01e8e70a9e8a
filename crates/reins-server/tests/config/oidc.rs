//! Every `[auth.oidc]` key, each set to other than its default and shown on what the
//! server answers a token of the provider served here (and on how often the server
//! fetched the provider's keys).

use super::*;

/// A server set up by a file whose `[auth.oidc]` is `oidc` (the issuer, audience and
/// keys given) and whose `ops` is admin.
async fn oidc_server(provider: &Provider, oidc: &str) -> TestServer {
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"

[store]
sqlite = "reins.db"

[auth.oidc]
issuer = "{ISSUER}"
audience = ["reins", "reins-dev"]
jwks_uri = "{jwks}"
{oidc}
"#,
        jwks = provider.url,
    );
    serve_config(&text, tempfile::tempdir().unwrap(), &[]).await
}

/// Claims for `name`, valid for five minutes, with `extra` merged in.
fn claims(extra: Value) -> Value {
    let now = chrono::Utc::now().timestamp();
    let mut c = json!({
        "iss": ISSUER, "aud": "reins", "sub": "sub-olga",
        "email": "olga@corp.test",
        "groups": {"reins": ["reins-admins"]},
        "iat": now, "exp": now + 300,
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// The status and body of `GET /v1/me` with `token`.
async fn me(s: &TestServer, token: &str) -> (u16, Value) {
    let res = s
        .client
        .get(s.url("/v1/me"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// `principal_claim`, `roles_claim` (a dotted path), `role_map`, `leeway_seconds`,
/// `min_refresh_seconds`, `max_age_seconds` and `algorithms` from the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_oidc_key_from_the_file_takes_effect() {
    let provider = Provider::start().await;
    let now = chrono::Utc::now().timestamp();
    let s = oidc_server(
        &provider,
        r#"principal_claim = "email"
roles_claim = "groups.reins"
role_map = { "reins-admins" = "admin" }
leeway_seconds = 600
min_refresh_seconds = 0"#,
    )
    .await;
    // The principal is named by `email`; its roles come from `groups.reins`, mapped.
    let token = provider.sign("k1", &claims(json!({})));
    let (st, who) = me(&s, &token).await;
    assert_eq!(st, 200, "{who}");
    assert_eq!(who["principal"]["name"], "olga@corp.test", "{who}");
    assert_eq!(who["principal"]["roles"], json!(["admin"]), "{who}");
    let (st, _) = s.get(&token, "/v1/webhooks").await;
    assert_eq!(st, 200, "the mapped role is admin");
    // Ten minutes of leeway: expired five minutes ago passes; fifteen does not.
    let late = provider.sign("k1", &claims(json!({"exp": now - 300})));
    assert_eq!(me(&s, &late).await.0, 200);
    let (st, why) = me(&s, &provider.sign("k1", &claims(json!({"exp": now - 900})))).await;
    assert_eq!(st, 401, "{why}");
    // No least time between fetches: each unknown key id fetches the keys again (the
    // default, 30 s, would fetch once for both).
    let before = provider.fetches();
    for _ in 0..2 {
        let (st, why) = me(&s, &provider.sign("k9", &claims(json!({})))).await;
        assert_eq!(st, 401, "{why}");
    }
    assert_eq!(provider.fetches(), before + 2);
    drop(s);

    // `max_age_seconds = 0`: the keys are never fresh; each token fetches them (the
    // default, an hour, would fetch once).
    let s = oidc_server(&provider, "max_age_seconds = 0").await;
    let before = provider.fetches();
    let token = provider.sign("k1", &claims(json!({"sub": "olga"})));
    for _ in 0..2 {
        let (st, who) = me(&s, &token).await;
        assert_eq!(st, 200, "{who}");
    }
    assert_eq!(provider.fetches(), before + 2);
    // By default the principal is `sub`, and unknown role names give no role.
    let (_, who) = me(&s, &token).await;
    assert_eq!(who["principal"]["name"], "olga", "{who}");
    drop(s);

    // `algorithms`: ES256 (a default) is not among those the file accepts.
    let s = oidc_server(&provider, r#"algorithms = ["ES384"]"#).await;
    let (st, why) = me(&s, &token).await;
    assert_eq!(st, 401, "{why}");
    assert!(why.to_string().contains("algorithm"), "{why}");
}
