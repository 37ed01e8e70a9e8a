//! The wire formats byte for byte, snapshotted: the OpenAPI document, a streamed run
//! and a streamed decision (SSE event names, ids and payloads), and the JSON bodies of
//! a session, the inbox and the audit trail. Values that differ per run (ids, run ids,
//! timestamps, view tokens, the instance) are replaced by numbered placeholders in the
//! raw text; everything else is the bytes the server sent.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use reins_server::Server;
use serde_json::{Value, json};
use support::*;

/// Keys whose string values differ from run to run.
const VOLATILE: &[&str] = &["id", "run_id", "requirement_id", "view_token", "view"];
/// Keys of timestamps: all shown as `<time>` (two of them may be equal or not).
const TIMES: &[&str] = &["created_at", "updated_at", "expires_at", "at"];

/// Replaces, in the raw text, each volatile value (found by parsing its JSON) and the
/// SSE ids' instance by a placeholder numbered in order of first appearance, and each
/// timestamp by `<time>`.
struct Normalizer {
    seen: Vec<(String, String)>,
    times: Vec<String>,
}

impl Normalizer {
    fn new() -> Self {
        Self {
            seen: Vec::new(),
            times: Vec::new(),
        }
    }

    fn collect(&mut self, v: &Value) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    match v {
                        Value::String(s) if VOLATILE.contains(&k.as_str()) && !s.is_empty() => {
                            self.remember(k, s);
                        }
                        Value::String(s) if TIMES.contains(&k.as_str()) => {
                            self.times.push(s.clone());
                        }
                        _ => self.collect(v),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| self.collect(v)),
            _ => {}
        }
    }

    fn remember(&mut self, kind: &str, value: &str) {
        if !self.seen.iter().any(|(v, _)| v == value) {
            let n = self.seen.len() + 1;
            self.seen.push((value.to_owned(), format!("<{kind}#{n}>")));
        }
    }

    /// The raw SSE text with its data lines' volatile values and the ids' instance
    /// replaced.
    fn sse(&mut self, raw: &str) -> String {
        for line in raw.lines() {
            if let Some(data) = line.strip_prefix("data: ")
                && let Ok(v) = serde_json::from_str::<Value>(data)
            {
                self.collect(&sorted(v));
            } else if let Some(id) = line.strip_prefix("id: ")
                && let Some((instance, _)) = id.split_once('-')
            {
                self.remember("instance", instance);
            }
        }
        self.apply(raw)
    }

    fn json(&mut self, raw: &str) -> String {
        self.collect(&sorted(serde_json::from_str::<Value>(raw).unwrap()));
        self.apply(raw)
    }

    fn apply(&self, raw: &str) -> String {
        let raw = canonical(raw);
        // Longest first, so that a value inside another is not replaced first.
        let mut seen = self.seen.clone();
        seen.extend(self.times.iter().map(|t| (t.clone(), "<time>".to_owned())));
        seen.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        seen.iter()
            .fold(raw, |text, (v, p)| text.replace(v.as_str(), p))
    }
}

async fn raw_post(s: &TestServer, token: &str, path: &str, body: Value) -> (u16, String) {
    let res = s
        .client
        .post(s.url(path))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

async fn raw_get(s: &TestServer, token: &str, path: &str) -> (u16, String) {
    let res = s
        .client
        .get(s.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

#[tokio::test]
async fn the_openapi_document() {
    let s = start().await;
    let (st, raw) = raw_get(&s, "", "/v1/openapi.json").await;
    assert_eq!(st, 200);
    assert_eq!(raw, Server::openapi().to_json().unwrap());
    // A path parameter is one the path names; every other parameter is in the query.
    let parsed: Value = serde_json::from_str(&raw).unwrap();
    for (path, item) in parsed["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap();
                let named = path.contains(&format!("{{{name}}}"));
                let want = if named {
                    "path"
                } else if p["in"] == "header" {
                    "header"
                } else {
                    "query"
                };
                assert_eq!(p["in"], want, "{method} {path}: parameter `{name}`");
            }
        }
    }
    // The crate version moves with releases; the rest is the API.
    let mut doc = Server::openapi();
    doc.info.version = "<version>".to_owned();
    insta::assert_snapshot!(doc.to_pretty_json().unwrap());
}

#[tokio::test]
async fn a_streamed_run_a_streamed_decision_and_the_bodies_between() {
    let s = start().await;
    let mut n = Normalizer::new();

    let (st, run) = raw_post(
        &s,
        ALICE,
        "/v1/sessions/alice%2Fwire/runs?stream=true",
        json!({"message": "delete a.txt"}),
    )
    .await;
    assert_eq!(st, 200);
    insta::assert_snapshot!("run_stream", n.sse(&run));

    let (st, session) = raw_get(&s, ALICE, "/v1/sessions/alice%2Fwire").await;
    assert_eq!(st, 200);
    let view: Value = serde_json::from_str(&session).unwrap();
    insta::assert_snapshot!("session", n.json(&session));

    let (st, inbox) = raw_get(&s, ANA, "/v1/requirements").await;
    assert_eq!(st, 200);
    insta::assert_snapshot!("inbox", n.json(&inbox));

    let id = view["requirements"][0]["id"].as_str().unwrap();
    let (st, decided) = raw_post(
        &s,
        ANA,
        "/v1/sessions/alice%2Fwire/decisions?stream=true",
        json!({
            "view_token": view["view_token"],
            "decisions": [{"requirement_id": id, "action": "approve"}],
        }),
    )
    .await;
    assert_eq!(st, 200);
    insta::assert_snapshot!("decision_stream", n.sse(&decided));

    let (st, trail) = raw_get(&s, ALICE, "/v1/sessions/alice%2Fwire/decisions").await;
    assert_eq!(st, 200);
    insta::assert_snapshot!("decisions", n.json(&trail));

    // Refusals: a stale decision, an unknown session, a bad cursor.
    let (st, stale) = raw_post(
        &s,
        ANA,
        "/v1/sessions/alice%2Fwire/decisions",
        json!({"decisions": [{"requirement_id": id, "action": "approve"}]}),
    )
    .await;
    let (st2, unknown) = raw_get(&s, ALICE, "/v1/sessions/alice%2Fnone").await;
    let (st3, cursor) = raw_get(&s, ANA, "/v1/requirements?cursor=zz").await;
    insta::assert_snapshot!(
        "refusals",
        format!(
            "{st} {}\n{st2} {}\n{st3} {}",
            n.json(&stale),
            n.json(&unknown),
            n.json(&cursor)
        )
    );
}

/// `raw` with every JSON document in it (the whole body, or each SSE `data:` line)
/// written with its object keys sorted: the snapshots pin the wire's content, not the
/// order serde_json keeps keys in (it keeps insertion order when a dependency turns on
/// its `preserve_order` feature).
fn canonical(raw: &str) -> String {
    let write = |text: &str| -> Option<String> {
        serde_json::from_str::<Value>(text)
            .ok()
            .map(|v| sorted(v).to_string())
    };
    if let Some(whole) = write(raw) {
        return whole;
    }
    let mut out: Vec<String> = Vec::new();
    for line in raw.split('\n') {
        match line.strip_prefix("data: ").and_then(&write) {
            Some(d) => out.push(format!("data: {d}")),
            None => out.push(line.to_owned()),
        }
    }
    out.join("\n")
}

/// `v` with its object keys in sorted order at every level (the order placeholders are
/// numbered in, and the order the snapshots are written in).
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}
