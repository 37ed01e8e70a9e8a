//! The live conformance run (`cargo xtask live`) against a local fake
//! OpenAI-compatible server that answers each scenario the way a well-behaved
//! server does — and, like llama-cpp-python, answers an explicit
//! `tool_choice: "auto"` with an empty body and an assistant `content: null` with
//! HTTP 500, so a regression of either fix fails here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let c = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    });
    format!("data: {c}\n\n")
}

fn tool_call(index: usize, id: &str, name: &str, args: &Value) -> Value {
    json!({"tool_calls": [{
        "index": index, "id": id, "type": "function",
        "function": {"name": name, "arguments": args.to_string()}
    }]})
}

fn last_user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|ms| ms.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned()
}

/// What the fake server answers: a status, the SSE events (or a JSON body), and a
/// pause between events.
enum Answer {
    Status(u16, String),
    Empty,
    Json(Value),
    Events(Vec<String>, Duration),
}

fn answer(body: &Value) -> Answer {
    let stream = body["stream"] == true;
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if body["tool_choice"] == "auto" {
        return Answer::Empty;
    }
    if messages
        .iter()
        .any(|m| m["role"] == "assistant" && m["content"].is_null())
    {
        return Answer::Status(
            500,
            r#"{"error":{"message":"content: field required"}}"#.into(),
        );
    }
    let paris = json!({"city": "Paris"});
    if !stream {
        let call = json!({"id": "call_p", "type": "function",
            "function": {"name": "get_weather", "arguments": paris.to_string()}});
        return Answer::Json(json!({
            "id": "chatcmpl-2", "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": null, "tool_calls": [call]}}]
        }));
    }
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let user = last_user_text(body);
    let mut events = Vec::new();
    let mut pause = Duration::ZERO;
    if let Some(name) = body["tool_choice"]["function"]["name"].as_str() {
        events.push(chunk(tool_call(0, "call_1", name, &paris), None));
        events.push(chunk(json!({}), Some("tool_calls")));
    } else if body["tool_choice"] == "required" {
        events.push(chunk(tool_call(0, "call_a", "get_weather", &paris), None));
        events.push(chunk(
            tool_call(1, "call_b", "get_weather", &json!({"city": "Tokyo"})),
            None,
        ));
        events.push(chunk(json!({}), Some("tool_calls")));
    } else if last["role"] == "tool" {
        events.push(chunk(json!({"content": "Done: "}), None));
        events.push(chunk(json!({"content": "18°C and sunny."}), Some("stop")));
    } else if user.starts_with("Delete") && body.get("tools").is_some() {
        events.push(chunk(
            tool_call(
                0,
                &format!("call_{}", messages.len()),
                "delete_file",
                &json!({"path": "temp.txt"}),
            ),
            None,
        ));
        events.push(chunk(json!({}), Some("tool_calls")));
    } else if user.starts_with("Count") {
        for i in 1..=40 {
            events.push(chunk(json!({"content": format!("{i}\n")}), None));
        }
        events.push(chunk(json!({}), Some("stop")));
        pause = Duration::from_millis(50);
    } else {
        events.push(chunk(json!({"role": "assistant", "content": ""}), None));
        events.push(chunk(json!({"content": "Paris is "}), None));
        events.push(chunk(json!({"content": "the capital."}), Some("stop")));
    }
    if body["stream_options"]["include_usage"] == true {
        events.push(format!(
            "data: {}\n\n",
            json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5}})
        ));
    }
    events.push("data: [DONE]\n\n".into());
    Answer::Events(events, pause)
}

async fn handle(mut sock: TcpStream) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let header_end = loop {
        let Ok(n) = sock.read(&mut tmp).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + len {
        let Ok(n) = sock.read(&mut tmp).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body: Value =
        serde_json::from_slice(&buf[header_end..header_end + len]).unwrap_or(Value::Null);
    let reply = |status: &str, ctype: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    match answer(&body) {
        Answer::Status(code, text) => {
            let _ = sock
                .write_all(reply(&format!("{code} Error"), "application/json", &text).as_bytes())
                .await;
        }
        Answer::Empty => {
            let _ = sock
                .write_all(reply("200 OK", "text/event-stream", "").as_bytes())
                .await;
        }
        Answer::Json(v) => {
            let _ = sock
                .write_all(reply("200 OK", "application/json", &v.to_string()).as_bytes())
                .await;
        }
        Answer::Events(events, pause) => {
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            if sock.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for e in events {
                if sock.write_all(e.as_bytes()).await.is_err() || sock.flush().await.is_err() {
                    return;
                }
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
    let _ = sock.shutdown().await;
}

/// Starts the fake server on a loopback port; it stops with the runtime.
fn start_server() -> (tokio::runtime::Runtime, u16) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(handle(sock));
        }
    });
    (rt, port)
}

#[test]
fn every_scenario_passes_against_a_conforming_server() {
    let (rt, port) = start_server();
    let out = Command::new(env!("CARGO_BIN_EXE_live"))
        .args([
            "--base-url",
            &format!("http://127.0.0.1:{port}/v1"),
            "--model",
            "fake",
            "--timeout",
            "30",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("10 passed, 0 failed"), "{stdout}");
    for title in [
        "plain chat",
        "forced tool call, not streamed",
        "agent: pause, approve, complete",
        "interrupt mid-stream",
    ] {
        assert!(stdout.contains(title), "{title} missing:\n{stdout}");
    }
    assert!(stdout.contains("reported: 12 in, 5 out"), "{stdout}");
    drop(rt);
}

#[test]
fn a_failing_scenario_shows_its_exact_error_and_fails_the_run() {
    // Nothing listens on this port: every scenario fails with the network error.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_live"))
        .args([
            "--base-url",
            &format!("http://127.0.0.1:{port}/v1"),
            "--model",
            "fake",
            "--only",
            "chat,usage",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("| FAIL |"), "{stdout}");
    assert!(stdout.contains("network error"), "{stdout}");
    assert!(stdout.contains("0 passed, 2 failed"), "{stdout}");
}

#[test]
fn bad_arguments_are_refused_with_a_reason() {
    let out = Command::new(env!("CARGO_BIN_EXE_live"))
        .args(["--model", "x", "--provider", "cohere"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown provider `cohere`"), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_live"))
        .args(["--base-url", "http://h", "--model", "x", "--only", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown scenario `nope`"));
}

#[test]
fn a_hosted_provider_without_its_key_skips_every_scenario_and_says_so() {
    let out = Command::new(env!("CARGO_BIN_EXE_live"))
        .args(["--provider", "responses", "--only", "chat,approve"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("responses skipped: OPENAI_API_KEY is not set"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Skipped scenarios: chat, approve"),
        "{stdout}"
    );
}

#[test]
fn bedrock_without_credentials_skips_every_scenario_and_names_what_is_missing() {
    let out = Command::new(env!("CARGO_BIN_EXE_live"))
        .args(["--provider", "bedrock", "--only", "chat,approve"])
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("BEDROCK_BASE_URL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("bedrock skipped: AWS_SECRET_ACCESS_KEY and AWS_ACCESS_KEY_ID are not set"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Skipped scenarios: chat, approve"),
        "{stdout}"
    );
}
