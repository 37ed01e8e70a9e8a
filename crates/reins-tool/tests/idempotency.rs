#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! Idempotency keys in the context of every execution, and reconciling a call whose
//! outcome is unknown: typed tools, closure tools, and every way a reconcile can fail.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_message::ToolUse;
use reins_tool::{
    DynamicTool, ExecOptions, NoArgs, Reconciliation, Tool, ToolContext, ToolError, ToolOutput,
    ToolPolicy, Toolkit, idempotency_key,
};
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct MailArgs {
    /// Who to write to.
    to: String,
}

/// Records the key each call saw.
fn key_recorder(seen: Arc<Mutex<Vec<Option<String>>>>) -> Toolkit {
    let mut tk = Toolkit::new();
    tk.add(Toolkit::function(
        "send_email",
        "Send an email",
        move |a: MailArgs, ctx: ToolContext| {
            let seen = seen.clone();
            async move {
                seen.lock()
                    .unwrap()
                    .push(ctx.idempotency_key().map(str::to_owned));
                Ok::<_, ToolError>(format!("sent to {}", a.to))
            }
        },
    ))
    .unwrap();
    tk
}

#[tokio::test]
async fn every_execution_gets_the_key_of_its_session_id_and_arguments() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let tk = key_recorder(seen.clone());
    let opts = ExecOptions::default();
    let a = ToolUse::new("c1", "send_email", json!({"to": "a@example.com"}));
    let edited = ToolUse::new("c1", "send_email", json!({"to": "b@example.com"}));
    for u in [&a, &a, &edited] {
        tk.execute(u, ToolContext::new("s1", &u.id), &opts).await;
    }
    // A key set by the caller (the agent sets the ledger's) is kept as it is.
    tk.execute(
        &a,
        ToolContext::new("s1", "c1").with_idempotency_key("from-the-caller"),
        &opts,
    )
    .await;
    let seen: Vec<String> = seen.lock().unwrap().iter().flatten().cloned().collect();
    let expected = idempotency_key("s1", "c1", &reins_message::fingerprint(&a.input));
    assert_eq!(seen[0], expected);
    assert_eq!(
        seen[1], expected,
        "the same call has the same key every time"
    );
    assert_ne!(seen[2], expected, "edited arguments make another key");
    assert_eq!(seen[3], "from-the-caller");
    let ctx = ToolContext::new("s1", "c1");
    assert_eq!(
        ctx.idempotency_key(),
        None,
        "a context made by hand has none"
    );
    assert_eq!(ctx.idempotency_header(), None);
}

/// A typed tool whose far end is a map of idempotency keys to message ids.
struct Mailer {
    sent: Arc<Mutex<Vec<(String, String)>>>,
}

#[async_trait::async_trait]
impl Tool for Mailer {
    const NAME: &'static str = "send_email";
    type Args = MailArgs;
    type Output = String;

    fn description(&self) -> String {
        "Send an email".into()
    }
    async fn call(&self, args: MailArgs, ctx: ToolContext) -> Result<String, ToolError> {
        let key = ctx.idempotency_key().unwrap_or_default().to_owned();
        self.sent.lock().unwrap().push((key, args.to));
        Ok("sent".into())
    }
    async fn reconcile(&self, ctx: ToolContext) -> Result<Reconciliation, ToolError> {
        let key = ctx
            .idempotency_key()
            .ok_or_else(|| ToolError::failed("no key"))?;
        let sent = self.sent.lock().unwrap();
        Ok(match sent.iter().position(|(k, _)| k == key) {
            Some(i) => Reconciliation::Happened(ToolOutput::text(format!("sent as message {i}"))),
            None => Reconciliation::NotRun,
        })
    }
}

struct Plain;

#[async_trait::async_trait]
impl Tool for Plain {
    const NAME: &'static str = "plain";
    type Args = NoArgs;
    type Output = ();

    fn description(&self) -> String {
        "Does something it cannot check".into()
    }
    async fn call(&self, _: NoArgs, _ctx: ToolContext) -> Result<(), ToolError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_typed_tool_looks_its_key_up() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let mut tk = Toolkit::new();
    tk.register(Mailer { sent: sent.clone() }).unwrap();
    tk.register(Plain).unwrap();
    let u = ToolUse::new("c1", "send_email", json!({"to": "a@example.com"}));
    assert_eq!(
        tk.reconcile(&u, ToolContext::new("s", "c1")).await,
        Reconciliation::NotRun
    );
    tk.execute(&u, ToolContext::new("s", "c1"), &ExecOptions::default())
        .await;
    assert_eq!(
        tk.reconcile(&u, ToolContext::new("s", "c1")).await,
        Reconciliation::Happened(ToolOutput::text("sent as message 0"))
    );
    // Another call's key is not found.
    let other = ToolUse::new("c2", "send_email", json!({"to": "a@example.com"}));
    assert_eq!(
        tk.reconcile(&other, ToolContext::new("s", "c2")).await,
        Reconciliation::NotRun
    );
    // The trait's default: cannot tell.
    let p = ToolUse::new("p1", "plain", json!({}));
    assert_eq!(
        tk.reconcile(&p, ToolContext::new("s", "p1")).await,
        Reconciliation::CannotTell(None)
    );
}

#[tokio::test]
async fn every_failure_to_reconcile_is_cannot_tell_with_the_reason() {
    let noop = |name: &str| {
        Toolkit::function(name, "x", |_: NoArgs, _ctx| async {
            Ok::<_, ToolError>(())
        })
    };
    let mut tk = Toolkit::new();
    tk.add(noop("silent")).unwrap();
    tk.add(
        noop("failing")
            .reconcile(|_ctx| async { Err(ToolError::failed("the mail API answered 503")) }),
    )
    .unwrap();
    tk.add(noop("panicking").reconcile(|_ctx| async { panic!("lookup table missing") }))
        .unwrap();
    tk.add(
        noop("slow")
            .policy(ToolPolicy::auto().timeout(Duration::from_millis(50)))
            .reconcile(|_ctx| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(Reconciliation::NotRun)
            }),
    )
    .unwrap();
    tk.add_dynamic(
        DynamicTool::new("dyn", "x", json!({"type": "object"}), |_, _| async {
            Ok(ToolOutput::text("x"))
        })
        .reconcile(|ctx: ToolContext| async move {
            Ok(Reconciliation::cannot_tell(format!(
                "no record of {}",
                ctx.idempotency_key().unwrap()
            )))
        }),
    )
    .unwrap();
    let ask = |name: &str| {
        let u = ToolUse::new("c", name, json!({}));
        let tk = tk.clone();
        async move { tk.reconcile(&u, ToolContext::new("s", "c")).await }
    };
    let reason = |r: Reconciliation| match r {
        Reconciliation::CannotTell(Some(why)) => why,
        other => panic!("{other:?}"),
    };
    assert_eq!(ask("silent").await, Reconciliation::CannotTell(None));
    assert!(reason(ask("failing").await).contains("503"));
    assert!(reason(ask("panicking").await).contains("lookup table missing"));
    assert!(reason(ask("slow").await).contains("did not answer within 50 ms"));
    let key = idempotency_key("s", "c", &reins_message::fingerprint(&json!({})));
    assert_eq!(reason(ask("dyn").await), format!("no record of {key}"));
    assert!(reason(ask("nope").await).contains("tool `nope` is not registered"));
}
