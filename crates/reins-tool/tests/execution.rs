#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! Execution paths: success, bad input, groups, failures, panics, timeouts,
//! cancellation, suspension, partial output and batches.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_message::{ContentBlock, ToolOutcome, ToolUse};
use reins_tool::{
    Concurrency, DynamicTool, ExecOptions, NoArgs, Tool, ToolCallOutcome, ToolContext, ToolError,
    ToolOutput, ToolPolicy, Toolkit,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use support::{call, result, run};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Deserialize, JsonSchema)]
struct WriteArgs {
    /// The file to write.
    filename: String,
    /// How many times to write it.
    #[serde(default)]
    times: Option<u32>,
}

/// Counts how often the tool body actually ran.
fn write_tool(ran: Arc<AtomicUsize>) -> reins_tool::FunctionTool {
    Toolkit::function("write_file", "Write a file", move |a: WriteArgs, _ctx| {
        let ran = ran.clone();
        async move {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>(format!("wrote {} x{}", a.filename, a.times.unwrap_or(1)))
        }
    })
}

fn kit_with_write() -> (Toolkit, Arc<AtomicUsize>) {
    let ran = Arc::new(AtomicUsize::new(0));
    let mut tk = Toolkit::new();
    tk.add(write_tool(ran.clone())).unwrap();
    tk.add(Toolkit::function(
        "noop",
        "Nothing",
        |_: NoArgs, _ctx| async { Ok::<_, ToolError>(()) },
    ))
    .unwrap();
    (tk, ran)
}

#[tokio::test]
async fn success_returns_the_converted_output() {
    let (tk, ran) = kit_with_write();
    let r = result(
        &tk,
        &call("write_file", json!({ "filename": "a.txt", "times": 2 })),
    )
    .await;
    assert_eq!(r.outcome, ToolOutcome::Success);
    assert_eq!(r.id, "call_1");
    assert_eq!(r.name, "write_file");
    assert_eq!(r.text(), "wrote a.txt x2");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn null_arguments_count_as_an_empty_object() {
    let (tk, _) = kit_with_write();
    let r = result(&tk, &call("noop", serde_json::Value::Null)).await;
    assert_eq!(
        (r.outcome.clone(), r.text()),
        (ToolOutcome::Success, "ok".to_owned())
    );
}

#[tokio::test]
async fn unknown_tool_lists_the_registered_ones() {
    let (tk, ran) = kit_with_write();
    let r = result(&tk, &call("delete_file", json!({}))).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    assert_eq!(
        r.text(),
        "tool `delete_file` is not registered; registered: write_file, noop"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn arguments_that_are_not_json_quote_the_parse_problem() {
    let (tk, ran) = kit_with_write();
    let mut u = call("write_file", serde_json::Value::Null);
    u.raw_input = Some(r#"{"filename": "a.txt""#.into());
    let r = result(&tk, &u).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    let text = r.text();
    assert!(text.contains("not valid JSON"), "{text}");
    assert!(text.contains("EOF while parsing an object"), "{text}");
    assert!(text.contains(r#"You sent: {"filename": "a.txt""#), "{text}");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn schema_failures_carry_serdes_message_and_never_reach_the_tool() {
    let (tk, ran) = kit_with_write();
    let r = result(&tk, &call("write_file", json!({ "file": "a.txt" }))).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    assert_eq!(
        r.text(),
        "invalid arguments for `write_file`: missing field `filename`. Fix the arguments and call the tool again."
    );
    let r = result(
        &tk,
        &call("write_file", json!({ "filename": "a", "times": "two" })),
    )
    .await;
    assert!(
        r.text()
            .contains("times: invalid type: string \"two\", expected u32"),
        "{}",
        r.text()
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn dynamic_tools_validate_against_their_schema() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let mut tk = Toolkit::new();
    tk.add_dynamic(
        DynamicTool::new(
            "lookup",
            "Look something up",
            json!({
                "type": "object",
                "properties": {
                    "query": { "type": "string" },
                    "kind": { "enum": ["web", "news"] },
                    "filters": { "type": "array", "items": { "type": "object", "properties": { "k": { "type": "string" } }, "required": ["k"] } }
                },
                "required": ["query"]
            }),
            move |args, _ctx| {
                let seen = seen2.clone();
                async move {
                    seen.lock().unwrap().push(args.clone());
                    Ok(ToolOutput::text(format!("found {}", args["query"])))
                }
            },
        )
        .policy(ToolPolicy::auto().idempotent(true)),
    )
    .unwrap();

    let r = result(
        &tk,
        &call("lookup", json!({ "query": "rust", "kind": "web" })),
    )
    .await;
    assert_eq!(r.text(), r#"found "rust""#);

    let r = result(
        &tk,
        &call(
            "lookup",
            json!({ "kind": "blogs", "filters": [{ "k": "a" }, {}] }),
        ),
    )
    .await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    assert_eq!(
        r.text(),
        "invalid arguments for `lookup`: missing field `query`; filters[1]: missing field `k`; \
         kind: \"blogs\" is not one of \"web\", \"news\". Fix the arguments and call the tool again."
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert!(tk.is_idempotent("lookup"));
}

#[tokio::test]
async fn inactive_group_gives_an_error_and_does_not_run() {
    let ran = Arc::new(AtomicUsize::new(0));
    let mut tk = Toolkit::new();
    tk.create_group("files", "File tools", false).unwrap();
    tk.add_in_group("files", write_tool(ran.clone())).unwrap();
    let u = call("write_file", json!({ "filename": "a" }));
    let r = result(&tk, &u).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    assert!(
        r.text().contains("group `files` is not active"),
        "{}",
        r.text()
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);

    tk.set_group_active("files", true).unwrap();
    assert_eq!(result(&tk, &u).await.outcome, ToolOutcome::Success);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn tool_errors_map_to_results() {
    let mut tk = Toolkit::new();
    tk.add(Toolkit::function(
        "fail",
        "Fails",
        |_: NoArgs, _ctx| async {
            Err::<(), _>(ToolError::failed("disk full; try a smaller file"))
        },
    ))
    .unwrap();
    tk.add(Toolkit::function(
        "picky",
        "Rejects",
        |_: NoArgs, _ctx| async {
            Err::<(), _>(ToolError::invalid_args("`path` must be absolute"))
        },
    ))
    .unwrap();
    tk.add(Toolkit::function(
        "io",
        "IO error",
        |_: NoArgs, _ctx| async {
            std::fs::read("/definitely/not/here/reins")?;
            Ok::<_, ToolError>(())
        },
    ))
    .unwrap();

    let r = result(&tk, &call("fail", json!({}))).await;
    assert_eq!(
        (r.outcome.clone(), r.text()),
        (
            ToolOutcome::Error,
            "disk full; try a smaller file".to_owned()
        )
    );
    let r = result(&tk, &call("picky", json!({}))).await;
    assert_eq!(
        r.text(),
        "invalid arguments for `picky`: `path` must be absolute"
    );
    let r = result(&tk, &call("io", json!({}))).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    assert!(r.text().contains("No such file"), "{}", r.text());
}

#[tokio::test]
async fn a_panicking_tool_becomes_an_error_result() {
    let mut tk = Toolkit::new();
    tk.add(Toolkit::function(
        "boom",
        "Panics",
        |_: NoArgs, _ctx| async {
            if true {
                panic!("index out of range");
            }
            Ok::<_, ToolError>(())
        },
    ))
    .unwrap();
    let r = result(&tk, &call("boom", json!({}))).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    assert_eq!(
        r.text(),
        "tool `boom` crashed while running: index out of range"
    );
    // The process and the toolkit are fine.
    let r = result(&tk, &call("boom", json!({}))).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
}

#[tokio::test]
async fn a_tool_can_suspend_itself() {
    let mut tk = Toolkit::new();
    tk.add(Toolkit::function(
        "deploy",
        "Deploys",
        |_: NoArgs, _ctx| async {
            Err::<(), _>(ToolError::suspend("needs the release manager's machine"))
        },
    ))
    .unwrap();
    let u = call("deploy", json!({}));
    match run(&tk, &u).await {
        ToolCallOutcome::Suspended { tool_use, reason } => {
            assert_eq!(tool_use, u);
            assert_eq!(reason, "needs the release manager's machine");
        }
        other => panic!("expected a suspension, got {other:?}"),
    }
}

/// A tool that never returns and notes when its future is dropped (aborted).
fn never_returns(dropped: Arc<AtomicBool>, policy: ToolPolicy) -> reins_tool::FunctionTool {
    struct Guard(Arc<AtomicBool>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    Toolkit::function("hang", "Never returns", move |_: NoArgs, _ctx| {
        let guard = Guard(dropped.clone());
        async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            Ok::<_, ToolError>(())
        }
    })
    .policy(policy)
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_never_returns_times_out() {
    let dropped = Arc::new(AtomicBool::new(false));
    let mut tk = Toolkit::new();
    tk.add(never_returns(
        dropped.clone(),
        ToolPolicy::auto().timeout(Duration::from_secs(5)),
    ))
    .unwrap();
    let r = result(&tk, &call("hang", json!({}))).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    assert_eq!(r.text(), "tool `hang` timed out after 5 s and was stopped");
    tokio::task::yield_now().await;
    assert!(
        dropped.load(Ordering::SeqCst),
        "the timed-out call was not aborted"
    );
}

#[tokio::test(start_paused = true)]
async fn the_default_timeout_applies_when_the_policy_has_none() {
    let mut tk = Toolkit::new();
    tk.add(never_returns(Arc::default(), ToolPolicy::auto()))
        .unwrap();
    let u = call("hang", json!({}));
    let opts = ExecOptions::default().default_timeout(Duration::from_millis(1500));
    let out = tk.execute(&u, ToolContext::new("s", "call_1"), &opts).await;
    assert_eq!(
        out.result().unwrap().text(),
        "tool `hang` timed out after 1.5 s and was stopped"
    );
}

#[tokio::test]
async fn already_cancelled_calls_do_not_run() {
    let (tk, ran) = kit_with_write();
    let token = CancellationToken::new();
    token.cancel();
    let u = call("write_file", json!({ "filename": "a" }));
    let out = tk
        .execute(
            &u,
            ToolContext::new("s", "call_1").with_cancel(token),
            &ExecOptions::default(),
        )
        .await;
    let r = out.into_result().unwrap();
    assert_eq!(r.outcome, ToolOutcome::Cancelled);
    assert_eq!(r.text(), "not run: interrupted");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_cooperative_tool_stops_within_the_grace_period() {
    let mut tk = Toolkit::new();
    tk.add(Toolkit::function(
        "crawl",
        "Crawls",
        |_: NoArgs, ctx: ToolContext| async move {
            ctx.emit(ContentBlock::text("page 1"));
            ctx.cancelled().await;
            // Cleaning up takes a moment, well inside the grace period.
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok::<_, ToolError>("crawled 1 page before stopping")
        },
    ))
    .unwrap();
    let token = CancellationToken::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let u = call("crawl", json!({}));
    let ctx = ToolContext::new("s", "call_1")
        .with_cancel(token.clone())
        .with_chunk_sender(tx);
    let exec = tokio::spawn({
        let tk = tk.clone();
        let u = u.clone();
        async move { tk.execute(&u, ctx, &ExecOptions::default()).await }
    });
    let chunk = rx.recv().await.unwrap();
    assert_eq!(chunk.tool_use_id, "call_1");
    assert_eq!(chunk.block, ContentBlock::text("page 1"));
    token.cancel();
    let r = exec.await.unwrap().into_result().unwrap();
    assert_eq!(r.outcome, ToolOutcome::Interrupted);
    assert!(
        r.text().contains("stopped because the run was interrupted"),
        "{}",
        r.text()
    );
    assert!(
        r.text().contains("crawled 1 page before stopping"),
        "{}",
        r.text()
    );
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_ignores_cancellation_is_aborted_after_the_grace_period() {
    let dropped = Arc::new(AtomicBool::new(false));
    let mut tk = Toolkit::new();
    tk.add(never_returns(dropped.clone(), ToolPolicy::auto()))
        .unwrap();
    let token = CancellationToken::new();
    let u = call("hang", json!({}));
    let ctx = ToolContext::new("s", "call_1").with_cancel(token.clone());
    let opts = ExecOptions::default().grace(Duration::from_secs(3));
    let exec = tokio::spawn({
        let tk = tk.clone();
        async move { tk.execute(&u, ctx, &opts).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!dropped.load(Ordering::SeqCst));
    token.cancel();
    let r = exec.await.unwrap().into_result().unwrap();
    assert_eq!(r.outcome, ToolOutcome::Interrupted);
    assert!(
        r.text().contains("did not stop within 3 s and was aborted"),
        "{}",
        r.text()
    );
    tokio::task::yield_now().await;
    assert!(dropped.load(Ordering::SeqCst), "the call was not aborted");
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_returns_cancelled_is_interrupted() {
    let mut tk = Toolkit::new();
    tk.add(Toolkit::function(
        "wait",
        "Waits",
        |_: NoArgs, ctx: ToolContext| async move {
            ctx.cancelled().await;
            Err::<(), _>(ToolError::Cancelled)
        },
    ))
    .unwrap();
    let token = CancellationToken::new();
    let ctx = ToolContext::new("s", "call_1").with_cancel(token.clone());
    let u = call("wait", json!({}));
    let exec = tokio::spawn({
        let tk = tk.clone();
        async move { tk.execute(&u, ctx, &ExecOptions::default()).await }
    });
    tokio::task::yield_now().await;
    token.cancel();
    let r = exec.await.unwrap().into_result().unwrap();
    assert_eq!(r.outcome, ToolOutcome::Interrupted);
    assert_eq!(
        r.text(),
        "interrupted: `wait` was stopped because the run was interrupted"
    );
}

#[tokio::test]
async fn dropping_execute_aborts_the_tool() {
    let dropped = Arc::new(AtomicBool::new(false));
    let mut tk = Toolkit::new();
    tk.add(never_returns(dropped.clone(), ToolPolicy::auto()))
        .unwrap();
    let u = call("hang", json!({}));
    let ctx = ToolContext::new("s", "call_1");
    let opts = ExecOptions::default();
    let fut = tk.execute(&u, ctx, &opts);
    // Poll once so the tool starts, then drop the caller.
    let _ = tokio::time::timeout(Duration::from_millis(1), fut).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(dropped.load(Ordering::SeqCst));
}

/// Tools that record when they start and end, and wait on a shared barrier.
fn batch_kit(log: Arc<Mutex<Vec<String>>>, barrier: Option<Arc<tokio::sync::Barrier>>) -> Toolkit {
    #[derive(Deserialize, JsonSchema)]
    struct Step {
        label: String,
        delay_ms: u64,
    }
    let mut tk = Toolkit::new();
    tk.add(
        Toolkit::function("step", "A step", move |s: Step, _ctx| {
            let log = log.clone();
            let barrier = barrier.clone();
            async move {
                log.lock().unwrap().push(format!("start {}", s.label));
                if let Some(b) = barrier {
                    b.wait().await;
                }
                tokio::time::sleep(Duration::from_millis(s.delay_ms)).await;
                log.lock().unwrap().push(format!("end {}", s.label));
                Ok::<_, ToolError>(s.label)
            }
        })
        .policy(ToolPolicy::auto().timeout(Duration::from_secs(60))),
    )
    .unwrap();
    tk
}

fn steps() -> Vec<ToolUse> {
    vec![
        ToolUse::new("a", "step", json!({ "label": "a", "delay_ms": 300 })),
        ToolUse::new("b", "step", json!({ "label": "b", "delay_ms": 10 })),
        ToolUse::new("c", "nope", json!({})),
    ]
}

#[tokio::test(start_paused = true)]
async fn parallel_batches_run_together_and_keep_the_models_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    // Both steps must be running at once to pass the barrier (else the 60 s timeout fires).
    let tk = batch_kit(log.clone(), Some(Arc::new(tokio::sync::Barrier::new(2))));
    let out = tk
        .execute_batch(
            &steps(),
            |u| ToolContext::new("s", &u.id),
            &ExecOptions::default(),
        )
        .await;
    let texts: Vec<(String, String)> = out
        .into_iter()
        .map(|o| {
            let r = o.into_result().unwrap();
            (r.id.clone(), r.text())
        })
        .collect();
    assert_eq!(texts[0], ("a".into(), "a".into()));
    assert_eq!(texts[1], ("b".into(), "b".into()));
    assert_eq!(texts[2].0, "c");
    assert!(texts[2].1.starts_with("tool `nope` is not registered"));
    // b finished first, yet results are in the model's order.
    assert_eq!(log.lock().unwrap().last().unwrap(), "end a");
}

#[tokio::test(start_paused = true)]
async fn sequential_batches_run_one_after_another() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let tk = batch_kit(log.clone(), None);
    let opts = ExecOptions::default().concurrency(Concurrency::Sequential);
    let out = tk
        .execute_batch(&steps(), |u| ToolContext::new("s", &u.id), &opts)
        .await;
    assert_eq!(out.len(), 3);
    assert_eq!(
        *log.lock().unwrap(),
        ["start a", "end a", "start b", "end b"]
    );
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_sequential_batch_leaves_later_calls_not_run() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let tk = batch_kit(log.clone(), None);
    let token = CancellationToken::new();
    let opts = ExecOptions::default()
        .concurrency(Concurrency::Sequential)
        .grace(Duration::from_millis(50));
    let uses = steps();
    let exec = tokio::spawn({
        let token = token.clone();
        async move {
            tk.execute_batch(
                &uses,
                |u| ToolContext::new("s", &u.id).with_cancel(token.clone()),
                &opts,
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    token.cancel();
    let out = exec.await.unwrap();
    let outcomes: Vec<ToolOutcome> = out
        .into_iter()
        .map(|o| o.into_result().unwrap().outcome)
        .collect();
    // a was running (and ignores cancellation), so it is aborted; b never started;
    // c is unknown, which is reported before anything else.
    assert_eq!(
        outcomes,
        [
            ToolOutcome::Interrupted,
            ToolOutcome::Cancelled,
            ToolOutcome::Error
        ]
    );
    assert_eq!(*log.lock().unwrap(), ["start a"]);
}

/// A hand-written typed tool.
struct Greet;

#[derive(Deserialize, JsonSchema)]
struct GreetArgs {
    /// Who to greet.
    name: String,
}

#[async_trait::async_trait]
impl Tool for Greet {
    const NAME: &'static str = "greet";
    type Args = GreetArgs;
    type Output = reins_tool::Json<serde_json::Value>;

    fn description(&self) -> String {
        "Greet someone".into()
    }

    fn policy(&self) -> ToolPolicy {
        ToolPolicy::confirm().idempotent(true)
    }

    async fn call(&self, args: GreetArgs, ctx: ToolContext) -> Result<Self::Output, ToolError> {
        Ok(reins_tool::Json(
            json!({ "greeting": format!("hello {}", args.name), "session": ctx.session_id }),
        ))
    }
}

#[tokio::test]
async fn typed_tools_register_and_run() {
    let tk = Toolkit::new().with(Greet).unwrap();
    assert!(matches!(
        tk.clone().with(Greet),
        Err(reins_tool::Error::DuplicateTool { name }) if name == "greet"
    ));
    assert!(tk.is_idempotent("greet"));
    assert!(matches!(
        tk.gate(&call("greet", json!({ "name": "ann" }))),
        reins_tool::GateDecision::Confirm { .. }
    ));
    let r = result(&tk, &call("greet", json!({ "name": "ann" }))).await;
    assert_eq!(r.text(), r#"{"greeting":"hello ann","session":"s1"}"#);
}

#[tokio::test]
async fn a_tool_that_cannot_tell_whether_it_acted_reports_unknown() {
    let mut tk = Toolkit::new();
    tk.add_dynamic(DynamicTool::new(
        "remote_write",
        "Writes through another process",
        json!({ "type": "object", "properties": {} }),
        |_, _| async { Err(ToolError::Unknown("the server died mid-call".into())) },
    ))
    .unwrap();
    let r = result(&tk, &call("remote_write", json!({}))).await;
    assert_eq!(r.outcome, ToolOutcome::Unknown);
    assert_eq!(r.text(), "the server died mid-call");
}
