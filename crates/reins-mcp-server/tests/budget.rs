//! A reached budget through the real TypeScript MCP SDK client
//! (`@modelcontextprotocol/sdk`, `elicitation/create`; `tests/client/budget.mjs`): the
//! run pauses before the tool starts, the client's form extends the budget with a limit
//! of its own (a limit below the spend is refused and the form asked again), and on
//! another call ends the run with a note, nothing run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::time::Duration;

use reins_agent::Agent;
use reins_agent::budget::Budget;
use reins_model::ScriptedModel;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_sdk_client_extends_and_ends_a_budget() {
    if !have_node("the_real_sdk_client_extends_and_ends_a_budget") {
        return;
    }
    let (_dir, store) = sqlite_store().await;
    let ran = Ran::default();
    // The model's tool call costs about four tokens: the limit is reached before the
    // tool starts.
    let agent = Agent::builder()
        .name("files")
        .model(ScriptedModel::from_fn(respond))
        .toolkit(toolkit(&ran))
        .store_arc(store)
        .session_lease(Duration::from_secs(3))
        .tool_lease(Duration::from_secs(3))
        .budget(Budget::new().tokens(3))
        .build()
        .unwrap();
    let http = serve_http(server(agent)).await;
    let out = run_client("budget.mjs", &["http", &http.url], &[]).await;

    let asked = out["asked"].as_array().unwrap();
    let budgets: Vec<&serde_json::Value> = asked.iter().filter(|a| a["kind"] == "budget").collect();
    // Asked three times: the refused low limit, the extension, the end.
    assert_eq!(budgets.len(), 3, "{out}");
    let form = &budgets[0];
    assert_eq!(
        form["schema"]["properties"]["decision"]["enum"],
        serde_json::json!(["extend", "end"]),
        "{out}"
    );
    let message = form["message"].as_str().unwrap();
    assert!(
        message.contains("has reached its budget") && message.contains("of 3"),
        "{message}"
    );
    assert!(message.contains("tokens"), "{message}");
    assert!(
        out["extended"]["text"]
            .as_str()
            .unwrap()
            .contains("deleted a.txt"),
        "{out}"
    );
    let ended = out["ended"]["text"].as_str().unwrap();
    assert!(ended.contains("budget"), "{ended}");
    assert!(ended.contains("enough for today"), "{ended}");
    assert_eq!(ran.all(), ["delete:a.txt"], "b.txt was not deleted");
}
