//! # exactly_once — idempotency keys, and reconciling a call cut off by a crash
//!
//! `send_email` hands its message to an outbox that dedupes by idempotency key (one
//! file per key, created only if it does not exist yet), the way a mail or payment
//! API keeps the `Idempotency-Key` of every request it served. Every call gets its key
//! from `ctx.idempotency_key()`: the same in every process for the same call.
//!
//! The example starts itself as a child process that runs the call and dies in the
//! middle of it (`std::process::abort`) — in one session after the outbox took the
//! message, in another before. Back in this process, each session is resumed: reins
//! finds the call the ledger shows started and never finished and, instead of
//! reporting it `Unknown`, asks the tool (`reconcile`), which looks the key up in the
//! outbox. Found: the call is recorded as a success and not sent again. Not found: it
//! runs again, with the same key. One email per session either way; the verdicts are
//! `RunEvent::Reconciled` events and entries in each session's audit trail.
//!
//! Offline (a rule-based scripted model). Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example exactly_once
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reins::agent::RunEvent;
use reins::prelude::*;
use reins::tool::{Reconciliation, ToolOutput};
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EmailArgs {
    /// The recipient.
    to: String,
}

/// Where a child process dies: `after` the outbox took the message, or `before`.
const DIE: &str = "EXACTLY_ONCE_DIE";
const LEASE: Duration = Duration::from_millis(300);

/// Hands a message to the outbox: one file per idempotency key; a repeated key
/// delivers nothing new.
fn deliver(outbox: &Path, key: &str, to: &str) -> std::io::Result<&'static str> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(outbox.join(key))
    {
        Ok(mut f) => {
            writeln!(f, "to: {to}")?;
            f.sync_all()?;
            Ok("sent")
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok("already sent"),
        Err(e) => Err(e),
    }
}

fn build_agent(sandbox: &Path, store: SqliteStore) -> Result<Agent, Box<dyn std::error::Error>> {
    let outbox = sandbox.join("outbox");
    std::fs::create_dir_all(&outbox)?;
    let lookup = outbox.clone();
    let mut tools = Toolkit::new();
    tools.add(
        Toolkit::function(
            "send_email",
            "Send an email",
            move |a: EmailArgs, ctx: ToolContext| {
                let outbox = outbox.clone();
                async move {
                    let key = ctx.idempotency_key().unwrap_or_default().to_owned();
                    let die = std::env::var(DIE).ok();
                    if die.as_deref() == Some("before") {
                        std::process::abort();
                    }
                    let said = deliver(&outbox, &key, &a.to)?;
                    if die.as_deref() == Some("after") {
                        std::process::abort();
                    }
                    Ok::<_, ToolError>(format!("{said} to {} (key {key})", a.to))
                }
            },
        )
        // Asked only about a call cut off mid-run: is its key in the outbox?
        .reconcile(move |ctx: ToolContext| {
            let outbox = lookup.clone();
            async move {
                let key = ctx.idempotency_key().unwrap_or_default();
                Ok(if outbox.join(key).exists() {
                    Reconciliation::Happened(ToolOutput::text(format!(
                        "sent (found key {key} in the outbox)"
                    )))
                } else {
                    Reconciliation::NotRun
                })
            }
        }),
    )?;
    let model = ScriptedModel::from_fn(|req| {
        if req.messages.last().is_some_and(Msg::has_tool_results) {
            ScriptedResponse::text("The email to ana is sent.")
        } else {
            ScriptedResponse::tool_call_with_id(
                "mail-1",
                "send_email",
                json!({"to": "ana@example.com"}),
            )
        }
    });
    Ok(Agent::builder()
        .name("Mailer")
        .model(model)
        .toolkit(tools)
        .store(store)
        // Short leases, so that this example does not wait long for a dead process's.
        .session_lease(LEASE)
        .tool_lease(LEASE)
        .build()?)
}

/// The child: runs the call and dies in the middle of it.
async fn child(sandbox: &Path, session: &str) -> Result<(), Box<dyn std::error::Error>> {
    let store = SqliteStore::open(sandbox.join("sessions.db")).await?;
    let agent = build_agent(sandbox, store)?;
    agent
        .session(session)
        .await?
        .send(Msg::user("email ana"))
        .await?;
    unreachable!("the tool aborts the process");
}

fn outbox_files(sandbox: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(sandbox.join("outbox"))
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, cmd, dir, session] = args.as_slice() {
        if cmd == "child" {
            return child(Path::new(dir), session).await;
        }
    }

    let sandbox = tempfile::tempdir()?;
    let dir = sandbox.path();
    for (session, die) in [("mail-after", "after"), ("mail-before", "before")] {
        let status = std::process::Command::new(std::env::current_exe()?)
            .args(["child", &dir.display().to_string(), session])
            .env(DIE, die)
            .stderr(std::process::Stdio::null())
            .status()?;
        assert!(!status.success(), "the child was meant to die");
        println!(
            "[{session}] a process died mid-call ({die} the outbox took the message); \
             the outbox holds {} message(s) in all",
            outbox_files(dir).len()
        );

        // The dead process's session lock and tool lease run out; then resume here.
        tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
        let store = SqliteStore::open(dir.join("sessions.db")).await?;
        let agent = build_agent(dir, store)?;
        let s = agent.session(session).await?;
        let mut run = s.resume().start().await?;
        while let Some(event) = run.next_event().await {
            match event {
                RunEvent::Reconciled {
                    id,
                    verdict,
                    idempotency_key,
                    ..
                } => println!("[{session}] reconciled {id}: {verdict} (key {idempotency_key})"),
                RunEvent::ToolExecutionStarted { id, .. } => {
                    println!("[{session}] {id} runs again");
                }
                RunEvent::ToolExecutionFinished { result } => {
                    println!(
                        "[{session}] {} {:?}: {}",
                        result.id,
                        result.outcome,
                        result.text()
                    );
                }
                _ => {}
            }
        }
        let out = run.wait().await?;
        assert_eq!(out.status, RunStatus::Completed);
        let trail = s.decisions().await?;
        let entry = trail
            .iter()
            .find(|r| r.kind == "reconcile")
            .ok_or("no reconcile entry in the audit trail")?;
        println!(
            "[{session}] audit: {} {} via {}; agent: {}",
            entry.kind,
            entry.decision,
            entry.via,
            out.message.text()
        );
        let expected = if die == "after" {
            "happened"
        } else {
            "not_run"
        };
        assert_eq!(entry.decision, expected);
    }
    let files = outbox_files(dir);
    assert_eq!(files.len(), 2, "one email per session: {files:?}");
    println!("2 sessions, 2 emails in the outbox, none sent twice");
    Ok(())
}
