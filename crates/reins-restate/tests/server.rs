//! reins-server fronting a Restate deployment (`Server::backend` with a
//! `RestateClient`): a real restate-server, the reins demo service as a real child
//! process, and reins-server on loopback in front of them, reading the same SQLite
//! store. The same HTTP script runs against reins-server on the local driver: runs
//! pause, the inbox lists what waits, decisions go through the decide route and the
//! tool runs once, and bad input gets the same statuses and codes from both.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use reins_agent::{Agent, SessionBackend, ViewToken};
use reins_memory::SqliteStore;
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_server::{AccessRole, Auth, Principal, Server};
use reins_tool::{ToolError, ToolPolicy, Toolkit};
use serde_json::{Value, json};

/// reins-server on a free loopback port; stops when the task is dropped.
struct Http {
    base: String,
    client: reqwest::Client,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Drop for Http {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Http {
    async fn start(server: Server) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(server, listener)
    }

    /// On a listener bound beforehand (the service is told its address first).
    fn start_on(server: Server, listener: tokio::net::TcpListener) -> Self {
        let auth = Auth::new()
            .token("alice-token", Principal::new("alice", [AccessRole::User]))
            .token("bob-token", Principal::new("bob", [AccessRole::Approver]))
            .token(
                "carol-token",
                Principal::new("carol", [AccessRole::User, AccessRole::Approver]),
            )
            // The Restate service's live relay.
            .token("relay-token", Principal::new("relay", [AccessRole::Admin]));
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(
            server
                .auth(auth)
                .request_timeout(std::time::Duration::from_secs(30))
                .serve(listener),
        );
        Self {
            base,
            client: reqwest::Client::new(),
            task,
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        token: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn post(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, token, path, Some(body))
            .await
    }

    async fn get(&self, token: &str, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, token, path, None).await
    }
}

fn code(v: &Value) -> String {
    v["error"]["code"].as_str().unwrap_or("").to_owned()
}

/// The script: a run that pauses, the inbox, refused decisions, the approval, a late
/// second decision, a decision on an idle session, an interrupt with nothing running.
/// Returns each refusal as `(what, status, code)`; asserts the rest.
async fn script(http: &Http, tag: &str, runs: impl Fn() -> usize) -> Vec<(String, u16, String)> {
    let sid = format!("alice/{tag}");
    let path = format!("/v1/sessions/alice%2F{tag}");
    let mut refusals = Vec::new();
    let mut refused = |what: &str, (status, body): (u16, Value)| {
        assert!(status >= 400, "{what}: {status} {body}");
        refusals.push((what.to_owned(), status, code(&body)));
    };

    let (status, out) = http
        .post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "delete a.txt"}),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["status"], "paused", "{out}");
    assert_eq!(out["requirements"][0]["tool_use"]["name"], "delete_file");
    let req_id = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(runs(), 0);

    // The inbox lists it (read from the store), with the view token to decide on.
    let (status, page) = http
        .get("bob-token", "/v1/requirements?status=pending")
        .await;
    assert_eq!(status, 200, "{page}");
    let item = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["session_id"] == sid.as_str())
        .unwrap_or_else(|| panic!("not in the inbox: {page}"))
        .clone();
    assert_eq!(item["requirement_id"], req_id.as_str());
    let token = item["view_token"].as_str().unwrap().to_owned();
    let (status, detail) = http.get("bob-token", &path).await;
    assert_eq!((status, detail["status"].as_str()), (200, Some("paused")));

    // Refused, and nothing runs.
    refused(
        "read an unknown session",
        http.get("bob-token", "/v1/sessions/alice%2Fnobody").await,
    );
    let approve = |id: &str, token: Option<&str>| {
        let mut b = json!({"decisions": [{"requirement_id": id, "action": "approve"}]});
        if let Some(t) = token {
            b["view_token"] = json!(t);
        }
        b
    };
    refused(
        "decide on an unknown session",
        http.post(
            "bob-token",
            "/v1/sessions/alice%2Fnobody/decisions",
            approve("call_1", None),
        )
        .await,
    );
    let stale = ViewToken::new(true, ["call_other"]).to_string();
    refused(
        "decide on a stale view",
        http.post(
            "bob-token",
            &format!("{path}/decisions"),
            approve(&req_id, Some(&stale)),
        )
        .await,
    );
    refused(
        "decide on a requirement never pending",
        http.post(
            "bob-token",
            &format!("{path}/decisions"),
            approve("call_nope", Some(&token)),
        )
        .await,
    );
    refused(
        "decide without the approver role",
        http.post(
            "alice-token",
            &format!("{path}/decisions"),
            approve(&req_id, Some(&token)),
        )
        .await,
    );
    assert_eq!(runs(), 0);

    // The approval, through the decide route: the tool runs once.
    let (status, out) = http
        .post(
            "bob-token",
            &format!("{path}/decisions"),
            approve(&req_id, Some(&token)),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["status"], "completed", "{out}");
    assert_eq!(runs(), 1);

    // A late second approver: already decided, by whom.
    let (status, body) = http
        .post(
            "bob-token",
            &format!("{path}/decisions"),
            approve(&req_id, Some(&token)),
        )
        .await;
    assert_eq!(body["error"]["decided"]["by"], "bob", "{body}");
    refused("decide again", (status, body));

    // An idle session: a decision for nothing pending, an interrupt with nothing running.
    let idle = format!("/v1/sessions/alice%2F{tag}-idle");
    let (status, out) = http
        .post(
            "alice-token",
            &format!("{idle}/runs"),
            json!({"message": "hello"}),
        )
        .await;
    assert_eq!(
        (status, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    refused(
        "decide with nothing pending",
        http.post(
            "bob-token",
            &format!("{idle}/decisions"),
            approve("call_1", None),
        )
        .await,
    );
    refused(
        "interrupt with nothing running",
        http.post("alice-token", &format!("{idle}/interrupt"), json!({}))
            .await,
    );
    refused(
        "an empty message",
        http.post(
            "alice-token",
            &format!("{idle}/runs"),
            json!({"message": " "}),
        )
        .await,
    );
    assert_eq!(runs(), 1);
    refusals
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct DeleteArgs {
    /// The file.
    #[allow(dead_code)]
    path: String,
}

/// The same script on reins-server's local driver.
async fn on_the_local_driver() -> Vec<(String, u16, String)> {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&runs);
    let mut tools = Toolkit::new();
    tools
        .add(
            Toolkit::function(
                "delete_file",
                "Delete a file",
                move |_a: DeleteArgs, _ctx| {
                    let r = Arc::clone(&r);
                    async move {
                        r.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, ToolError>("deleted")
                    }
                },
            )
            .policy(ToolPolicy::confirm()),
        )
        .unwrap();
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("call_1", "delete_file", json!({"path": "a.txt"})),
        ScriptedResponse::text("done"),
        ScriptedResponse::text("ok"),
    ]);
    let agent = Agent::builder()
        .model(model)
        .toolkit(tools)
        .build()
        .unwrap();
    let http = Http::start(Server::new(agent)).await;
    script(&http, "local", || runs.load(Ordering::SeqCst)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reins_server_fronts_a_restate_deployment_with_the_local_drivers_answers() {
    let Some(h) = support::Harness::start(&[]).await else {
        return;
    };
    // The server reads the store the service records in; its model is never called.
    let store = SqliteStore::open(h.dir.path().join("reins.sqlite"))
        .await
        .unwrap();
    let agent = Agent::builder()
        .model(ScriptedModel::new(Vec::<ScriptedResponse>::new()))
        .store(store)
        .build()
        .unwrap();
    let backend: Arc<dyn SessionBackend> = Arc::new(h.client.clone());
    let http = Http::start(Server::new(agent).backend(backend)).await;
    let on_restate = script(&http, "restate", || h.count("delete_file start")).await;

    // The audit trail (from the store) names the approver.
    let (status, trail) = http
        .get("bob-token", "/v1/sessions/alice%2Frestate/decisions")
        .await;
    assert_eq!(status, 200);
    assert!(
        trail["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["actor"]["principal"] == "bob" && d["verdict"] == "applied"),
        "{trail}"
    );
    // A2A runs the local driver: not served in front of a backend.
    let (status, body) = http.post("alice-token", "/a2a", json!({})).await;
    assert_eq!((status, code(&body).as_str()), (501, "not_supported"));

    let on_local = on_the_local_driver().await;
    assert_eq!(on_restate, on_local);
    assert_eq!(h.count("delete_file start"), 1, "{:?}", h.outbox());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_restate_streams_its_stored_steps_through_reins_server() {
    let Some(h) = support::Harness::start(&[]).await else {
        return;
    };
    let store = SqliteStore::open(h.dir.path().join("reins.sqlite"))
        .await
        .unwrap();
    let agent = Agent::builder()
        .model(ScriptedModel::new(Vec::<ScriptedResponse>::new()))
        .store(store)
        .build()
        .unwrap();
    let http = Http::start(Server::new(agent).backend(Arc::new(h.client.clone()))).await;
    let resp = http
        .client
        .post(format!(
            "{}/v1/sessions/alice%2Fs1/runs?stream=true",
            http.base
        ))
        .bearer_auth("alice-token")
        .header("idempotency-key", "start-s1")
        .json(&json!({"message": "work 10"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(events.last(), Some(&"output"), "{text}");
    assert!(
        events.contains(&"message") && events.contains(&"state"),
        "{text}"
    );
    let output = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap();
    let output: Value = serde_json::from_str(output).unwrap();
    assert_eq!(output["output"]["status"], "completed", "{output}");
    assert!(
        output["output"]["message"].to_string().contains("done: "),
        "{output}"
    );
    assert_eq!(h.count("work start"), 1);
}

/// Requests to a server another [`Http`] runs (for a task of its own).
struct HttpClient {
    base: String,
    client: reqwest::Client,
}

impl HttpClient {
    async fn post(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

/// reins-server on the local driver (no backend).
async fn on_the_local_server() -> Http {
    let agent = Agent::builder()
        .model(ScriptedModel::new(Vec::<ScriptedResponse>::new()))
        .build()
        .unwrap();
    Http::start(Server::new(agent)).await
}

/// One SSE event: its name and its JSON data.
#[derive(Debug, Clone)]
struct Sse {
    event: String,
    data: Value,
}

/// Reads an SSE response as it arrives, event by event, in a task of its own.
struct Listener {
    rx: tokio::sync::mpsc::UnboundedReceiver<Sse>,
    task: tokio::task::JoinHandle<()>,
    seen: Vec<Sse>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    fn of(resp: reqwest::Response) -> Self {
        use futures::StreamExt;
        assert_eq!(resp.status().as_u16(), 200);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut body = resp.bytes_stream();
            let (mut buf, mut event, mut data) = (String::new(), String::new(), String::new());
            while let Some(Ok(bytes)) = body.next().await {
                buf.push_str(&String::from_utf8_lossy(&bytes));
                while let Some(end) = buf.find('\n') {
                    let line = buf[..end].trim_end_matches('\r').to_owned();
                    buf.drain(..=end);
                    if line.is_empty() {
                        if !event.is_empty() || !data.is_empty() {
                            let data =
                                serde_json::from_str(&data).unwrap_or(Value::String(data.clone()));
                            let _ = tx.send(Sse {
                                event: std::mem::take(&mut event),
                                data,
                            });
                        }
                        data.clear();
                    } else if let Some(e) = line.strip_prefix("event:") {
                        event = e.trim().to_owned();
                    } else if let Some(d) = line.strip_prefix("data:") {
                        data.push_str(d.trim_start());
                    }
                }
            }
        });
        Self {
            rx,
            task,
            seen: Vec::new(),
        }
    }

    /// Reads until an event satisfies `until` (returned with it), at most 20 s.
    async fn until(&mut self, what: &str, until: impl Fn(&Sse) -> bool) -> &[Sse] {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if self.seen.last().is_some_and(&until) {
                return &self.seen;
            }
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(ev)) => self.seen.push(ev),
                _ => panic!("no {what}; got {:#?}", self.seen),
            }
        }
    }

    fn texts(&self) -> Vec<String> {
        self.seen
            .iter()
            .filter(|e| e.event == "text_delta")
            .map(|e| e.data["text"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// The stored answer: an assistant message with text (not one that only calls tools).
fn is_answer(e: &Sse) -> bool {
    e.event == "message"
        && e.data["message"]["role"] == "assistant"
        && e.data["message"]["content"]
            .as_array()
            .is_some_and(|c| c.iter().any(|b| b["text"].is_string()))
}

/// Two reins-server instances fronting one deployment (and the same store), each listed
/// in the service's live relay: a reins-server on a free port, bound before the service
/// starts.
async fn two_fronts() -> Option<(support::Harness, Http, Http)> {
    let (h, listeners) = support::Harness::start_with_listeners(2, |urls| {
        vec![
            "--live".to_owned(),
            urls[0].clone(),
            "--live".to_owned(),
            urls[1].clone(),
            "--live-token".to_owned(),
            "relay-token".to_owned(),
        ]
    })
    .await?;
    let mut fronts = Vec::new();
    for listener in listeners {
        let store = SqliteStore::open(h.dir.path().join("reins.sqlite"))
            .await
            .unwrap();
        let agent = Agent::builder()
            .model(ScriptedModel::new(Vec::<ScriptedResponse>::new()))
            .store(store)
            .build()
            .unwrap();
        let server = Server::new(agent)
            .backend(Arc::new(h.client.clone()))
            .poll_interval(std::time::Duration::from_millis(200));
        fronts.push(Http::start_on(server, listener));
    }
    let b = fronts.pop().unwrap();
    let a = fronts.pop().unwrap();
    Some((h, a, b))
}

impl Http {
    /// A second handle on the same server (the server stays up while the first lives).
    fn clone_client(&self) -> HttpClient {
        HttpClient {
            base: self.base.clone(),
            client: self.client.clone(),
        }
    }

    async fn listen(&self, token: &str, path: &str, body: Option<Value>) -> Listener {
        let req = match body {
            Some(b) => self.client.post(format!("{}{path}", self.base)).json(&b),
            None => self.client.get(format!("{}{path}", self.base)),
        };
        Listener::of(req.bearer_auth(token).send().await.unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restate_turns_text_deltas_reach_listeners_on_every_instance_before_its_message() {
    let Some((h, a, b)) = two_fronts().await else {
        return;
    };
    let path = "/v1/sessions/alice%2Flive";
    let (status, out) = a
        .post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "hello"}),
        )
        .await;
    assert_eq!(
        (status, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );

    // A listener on instance A from the start, the run's own stream on A, and a
    // listener on instance B that joins mid-turn.
    let mut on_a = a
        .listen("alice-token", &format!("{path}/events"), None)
        .await;
    on_a.until("the first state", |e| e.event == "state").await;
    let mut run = a
        .listen(
            "alice-token",
            &format!("{path}/runs?stream=true"),
            Some(json!({"message": "stream 8"})),
        )
        .await;
    on_a.until("two deltas", |e| {
        e.event == "text_delta" && e.data["text"] == "part 1. "
    })
    .await;
    let mut on_b = b.listen("bob-token", &format!("{path}/events"), None).await;

    let parts: Vec<String> = (0..8).map(|i| format!("part {i}. ")).collect();
    let whole = parts.concat();
    let events = run
        .until("the output", |e| e.event == "output")
        .await
        .to_vec();
    assert_eq!(run.texts(), parts, "{events:#?}");
    let output = &events.last().unwrap().data["output"];
    assert_eq!(output["status"], "completed");
    assert_eq!(
        output["message"]["content"][0]["text"],
        whole.as_str(),
        "{output}"
    );
    // Deltas, then the stored answer; the live events name the Restate turn and one
    // attempt of the model step, which began with `reasoning_started`.
    let answer = events
        .iter()
        .position(is_answer)
        .expect("the stored answer");
    let last_delta = events
        .iter()
        .rposition(|e| e.event == "text_delta")
        .unwrap();
    assert!(last_delta < answer, "{events:#?}");
    let live: Vec<&Sse> = events
        .iter()
        .filter(|e| e.data.get("attempt").is_some())
        .collect();
    assert_eq!(live[0].event, "reasoning_started", "{events:#?}");
    assert!(live.iter().all(|e| {
        e.data["attempt"] == live[0].data["attempt"]
            && e.data["run_id"] == live[0].data["run_id"]
            && e.data["run_id"]
                .as_str()
                .is_some_and(|r| r.starts_with("inv_"))
    }));

    for (name, listener) in [("A", &mut on_a), ("B", &mut on_b)] {
        let seen = listener
            .until("the stored answer", is_answer)
            .await
            .to_vec();
        let texts = listener.texts();
        assert!(
            !texts.is_empty() && parts.ends_with(&texts),
            "{name}: the rest of the deltas, in order: {texts:?}"
        );
        let last_delta = seen.iter().rposition(|e| e.event == "text_delta").unwrap();
        assert!(last_delta < seen.len() - 1, "{name}: {seen:#?}");
        assert_eq!(
            seen.last().unwrap().data["message"]["content"][0]["text"],
            whole.as_str()
        );
    }
    assert_eq!(on_a.texts(), parts, "A listened from the start");
    assert!(
        on_b.texts().len() < parts.len(),
        "B joined mid-turn: {:?}",
        on_b.texts()
    );
    assert_eq!(h.count("model"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_mid_stream_on_restate_reaches_the_listeners() {
    let Some((h, a, b)) = two_fronts().await else {
        return;
    };
    let path = "/v1/sessions/alice%2Fcut";
    let (status, _) = a
        .post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "hello"}),
        )
        .await;
    assert_eq!(status, 200);
    let mut on_b = b.listen("bob-token", &format!("{path}/events"), None).await;
    on_b.until("the first state", |e| e.event == "state").await;
    let mut run = a
        .listen(
            "alice-token",
            &format!("{path}/runs?stream=true"),
            Some(json!({"message": "stream 50"})),
        )
        .await;
    on_b.until("three deltas", |e| {
        e.event == "text_delta" && e.data["text"] == "part 2. "
    })
    .await;
    // Interrupted through the other instance.
    let (status, body) = b
        .post("alice-token", &format!("{path}/interrupt"), json!({}))
        .await;
    assert_eq!(
        (status, body["delivered"].as_str()),
        (202, Some("backend")),
        "{body}"
    );

    let events = run
        .until("the output", |e| e.event == "output")
        .await
        .to_vec();
    assert_eq!(
        events.last().unwrap().data["output"]["status"],
        "cancelled",
        "{events:#?}"
    );
    assert!(!events.iter().any(is_answer), "{events:#?}");
    let heard = run.texts().len();
    assert!((3..50).contains(&heard), "{heard} deltas");
    // B hears the deltas stop and the session settle (idle), with no answer stored.
    let seen = on_b
        .until("the settled state", |e| {
            e.event == "state" && e.data["status"] == "idle"
        })
        .await
        .to_vec();
    assert!(!seen.iter().any(is_answer), "{seen:#?}");
    assert!(on_b.texts().len() < 50);
    // Sanitized: the partial answer was never stored.
    let stored = h.stored("alice/cut").await;
    // The live route takes live events only, from a backend's process only; a refused
    // batch publishes nothing.
    let live = format!("{path}/live");
    let delta = json!({"event": "text_delta", "text": "forged"});
    let (status, body) = b
        .post("alice-token", &live, json!({"events": [delta]}))
        .await;
    assert_eq!((status, code(&body).as_str()), (403, "forbidden"), "{body}");
    for bad in [
        json!({"event": "completed", "status": "completed", "message": stored.messages[2]}),
        json!({"event": "no_such_event"}),
        json!("text"),
    ] {
        let (status, body) = b
            .post("relay-token", &live, json!({"events": [delta, bad]}))
            .await;
        assert_eq!(
            (status, code(&body).as_str()),
            (422, "invalid_input"),
            "{body}"
        );
    }
    let (status, body) = b
        .post("relay-token", &live, json!({"event": [delta]}))
        .await;
    assert!(status == 400 || status == 422, "{status} {body}");
    assert!(on_b.texts().iter().all(|t| t != "forged"));
    // A server that fronts no backend has no such route.
    let (status, _) = on_the_local_server()
        .await
        .post(
            "relay-token",
            "/v1/sessions/alice%2Fcut/live",
            json!({"events": []}),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(stored.messages.len(), 3, "{:?}", stored.messages);
    assert_eq!(stored.messages[2].role, reins_message::Role::User);
}

/// The live events of `seen`, grouped by the attempt of the step that sent them, in
/// order of their first event.
fn attempts(seen: &[Sse]) -> Vec<(String, Vec<Sse>)> {
    let mut out: Vec<(String, Vec<Sse>)> = Vec::new();
    for e in seen {
        let Some(a) = e.data.get("attempt").and_then(Value::as_str) else {
            continue;
        };
        match out.iter_mut().find(|(k, _)| k == a) {
            Some((_, v)) => v.push(e.clone()),
            None => out.push((a.to_owned(), vec![e.clone()])),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_live_events_are_marked_by_attempt_and_a_journaled_step_sends_none_again() {
    let Some((mut h, a, _b)) = two_fronts().await else {
        return;
    };
    let path = "/v1/sessions/alice%2Fcrash";
    let (status, _) = a
        .post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "hello"}),
        )
        .await;
    assert_eq!(status, 200);
    let mut on_a = a
        .listen("alice-token", &format!("{path}/events"), None)
        .await;
    on_a.until("the first state", |e| e.event == "state").await;

    // kill -9 mid-stream: Restate runs the model step again on the restarted service, a
    // new model call under a new attempt id; the first attempt's text is void.
    let runs = a.clone_client();
    let started = tokio::spawn(async move {
        runs.post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "stream 10"}),
        )
        .await
    });
    on_a.until("four deltas", |e| e.data["text"] == "part 3. ")
        .await;
    h.service.restart().await;
    let seen = on_a.until("the stored answer", is_answer).await.to_vec();
    let (status, out) = started.await.unwrap();
    assert_eq!(
        (status, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    let parts: Vec<String> = (0..10).map(|i| format!("part {i}. ")).collect();
    let texts = |events: &[Sse]| -> Vec<String> {
        events
            .iter()
            .filter(|e| e.event == "text_delta")
            .map(|e| e.data["text"].as_str().unwrap().to_owned())
            .collect()
    };
    let tries = attempts(&seen);
    assert_eq!(tries.len(), 2, "{seen:#?}");
    for (_, events) in &tries {
        assert_eq!(events[0].event, "reasoning_started");
        assert_eq!(events[0].data["iteration"], 1);
    }
    let first = texts(&tries[0].1);
    assert!(first.len() >= 4 && parts.starts_with(&first), "{first:?}");
    assert_eq!(texts(&tries[1].1), parts);
    assert_eq!(
        seen.last().unwrap().data["message"]["content"][0]["text"],
        parts.concat().as_str()
    );
    assert_eq!(h.count("model"), 3);

    // kill -9 mid-tool, after the model step was journaled: the replay takes the model's
    // answer from the journal and sends nothing for it again; the tool, cut off, is
    // `Unknown` and does not run (nor announce itself) again.
    let from = on_a.seen.len();
    let runs = a.clone_client();
    let started = tokio::spawn(async move {
        runs.post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "work 1500"}),
        )
        .await
    });
    on_a.until("the tool starting", |e| e.event == "tool_execution_started")
        .await;
    h.wait_for_line("work start").await;
    h.service.restart().await;
    let (status, out) = started.await.unwrap();
    assert_eq!(
        (status, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    let seen = on_a.until("the stored answer", is_answer).await[from..].to_vec();
    let named = |name: &str| seen.iter().filter(|e| e.event == name).count();
    let reasoning: Vec<&Value> = seen
        .iter()
        .filter(|e| e.event == "reasoning_started")
        .map(|e| &e.data["iteration"])
        .collect();
    assert_eq!(reasoning, [&json!(1), &json!(2)], "{seen:#?}");
    assert_eq!(named("tool_call_ready"), 1, "{seen:#?}");
    assert_eq!(named("tool_execution_started"), 1, "{seen:#?}");
    assert_eq!(named("tool_execution_finished"), 0, "{seen:#?}");
    assert_eq!(h.count("work start"), 1);
    assert_eq!(h.count("work end"), 0);
}

/// reins-server's AG-UI test folder: the pinned `@ag-ui/client` and `@ag-ui/core`
/// (installed by `.ci/run`), and the script this test runs with them.
fn agui_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-server/tests/agui")
}

/// Whether Node.js and the pinned AG-UI client are installed; under CI their absence
/// fails the test, elsewhere it is reported as skipped.
fn agui_client_available() -> bool {
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let installed = agui_dir()
        .join("node_modules/@ag-ui/client/package.json")
        .exists();
    if node && installed {
        return true;
    }
    let why = if node {
        "the AG-UI client is not installed (run `npm ci --prefix crates/reins-server/tests/agui`)"
    } else {
        "Node.js is not installed"
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}; CI must run this test"
    );
    eprintln!("SKIPPED: {why}");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agui_client_streams_restate_turns_through_reins_server() {
    if !agui_client_available() {
        return;
    }
    let Some((h, a, _b)) = two_fronts().await else {
        return;
    };
    let child = tokio::process::Command::new("node")
        .arg(agui_dir().join("restate.mjs"))
        .arg(&a.base)
        .env("AGUI_CAROL", "carol-token")
        .current_dir(agui_dir())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(60), child)
        .await
        .expect("the AG-UI client did not finish within 60 s")
        .expect("node could not be started");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the AG-UI client failed:\n{stderr}\n{stdout}\nservice log:\n{}",
        h.service_log()
    );
    let facts: Value = serde_json::from_str(stdout.trim()).unwrap();

    // Streamed: one TEXT_MESSAGE_CONTENT per chunk the model streamed, in order, then
    // the stored transcript and the end.
    let parts: Vec<String> = (0..5).map(|i| format!("part {i}. ")).collect();
    assert_eq!(facts["stream_deltas"], json!(parts), "{facts}");
    let types: Vec<&str> = facts["stream_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(types.first(), Some(&"RUN_STARTED"));
    assert_eq!(
        &types[types.len() - 2..],
        ["MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    );
    let last_content = types
        .iter()
        .rposition(|t| *t == "TEXT_MESSAGE_CONTENT")
        .unwrap();
    assert!(types[last_content + 1] == "TEXT_MESSAGE_END", "{types:?}");
    assert_eq!(
        facts["stream_last_message"]["content"],
        parts.concat().as_str()
    );

    // A pause as an interrupt; the resume runs the tool once, its result streamed.
    assert_eq!(facts["approve_result"], "deleted a.txt", "{facts}");
    assert!(
        facts["approve_text"]
            .as_str()
            .unwrap()
            .starts_with("done: deleted a.txt"),
        "{facts}"
    );
    let first: Vec<&str> = facts["approve_types"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        first.contains(&"TOOL_CALL_START") && first.contains(&"TOOL_CALL_END"),
        "{first:?}"
    );
    assert_eq!(h.count("delete_file start"), 1);
    let trail = h.decisions("carol/agui-approve").await;
    assert_eq!(trail.len(), 1);
    assert_eq!(trail[0].record["actor"]["principal"], "carol");
    assert_eq!(trail[0].record["actor"]["metadata"]["via"], "ag-ui");

    // Client-side tools: refused in AG-UI's own form, nothing stored.
    assert_eq!(facts["tools_error"]["code"], "not_supported", "{facts}");
    assert!(
        h.client
            .view("carol/agui-tools")
            .await
            .is_err_and(|e| e.refused().is_some_and(|r| r.code == "not_found"))
    );
}
