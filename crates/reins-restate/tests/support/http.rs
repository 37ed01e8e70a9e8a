//! reins-server on loopback for the tests that put it in front of a Restate
//! deployment: the server with the tests' tokens, requests, and SSE listeners.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use reins_server::{AccessRole, Auth, Principal, Server};
use serde_json::Value;

/// reins-server on a free loopback port; stops when the task is dropped.
pub struct Http {
    pub base: String,
    pub client: reqwest::Client,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Drop for Http {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Http {
    pub async fn start(server: Server) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(server, listener)
    }

    /// On a listener bound beforehand (the service is told its address first).
    pub fn start_on(server: Server, listener: tokio::net::TcpListener) -> Self {
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

    pub async fn call(
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

    pub async fn post(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, token, path, Some(body))
            .await
    }

    pub async fn get(&self, token: &str, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, token, path, None).await
    }
}

pub fn code(v: &Value) -> String {
    v["error"]["code"].as_str().unwrap_or("").to_owned()
}

/// Requests to a server another [`Http`] runs (for a task of its own).
pub struct HttpClient {
    pub base: String,
    pub client: reqwest::Client,
}

impl HttpClient {
    pub async fn post(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
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

/// One SSE event: its name and its JSON data.
#[derive(Debug, Clone)]
pub struct Sse {
    pub event: String,
    pub data: Value,
}

/// Reads an SSE response as it arrives, event by event, in a task of its own.
pub struct Listener {
    rx: tokio::sync::mpsc::UnboundedReceiver<Sse>,
    task: tokio::task::JoinHandle<()>,
    pub seen: Vec<Sse>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    pub fn of(resp: reqwest::Response) -> Self {
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
    pub async fn until(&mut self, what: &str, until: impl Fn(&Sse) -> bool) -> &[Sse] {
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

    pub fn texts(&self) -> Vec<String> {
        self.seen
            .iter()
            .filter(|e| e.event == "text_delta")
            .map(|e| e.data["text"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// The stored answer: an assistant message with text (not one that only calls tools).
impl Http {
    /// A second handle on the same server (the server stays up while the first lives).
    pub fn clone_client(&self) -> HttpClient {
        HttpClient {
            base: self.base.clone(),
            client: self.client.clone(),
        }
    }

    pub async fn listen(&self, token: &str, path: &str, body: Option<Value>) -> Listener {
        let req = match body {
            Some(b) => self.client.post(format!("{}{path}", self.base)).json(&b),
            None => self.client.get(format!("{}{path}", self.base)),
        };
        Listener::of(req.bearer_auth(token).send().await.unwrap())
    }
}
