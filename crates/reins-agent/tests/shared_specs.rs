//! Tool specs are shared between requests (one `Arc`, no copy per request) and still
//! follow the toolkit: switching a group on shows its tools in the next request.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use reins_agent::{Agent, RunStatus};
use reins_message::{Msg, Role};
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_tool::{NoArgs, ToolError, Toolkit};
use serde_json::json;

fn toolkit() -> Toolkit {
    let mut tk = Toolkit::new();
    tk.add(Toolkit::function(
        "now",
        "The time.",
        |_: NoArgs, _ctx| async { Ok::<_, ToolError>("12:00") },
    ))
    .unwrap();
    tk.create_group("web", "Browse", false).unwrap();
    tk.add_in_group(
        "web",
        Toolkit::function("open_page", "Open a page.", |_: NoArgs, _ctx| async {
            Ok::<_, ToolError>("<html/>")
        }),
    )
    .unwrap();
    tk
}

#[tokio::test]
async fn every_request_shares_one_copy_until_a_group_switches() {
    let model = ScriptedModel::from_fn(|req| {
        if req.messages.last().is_some_and(|m| m.role == Role::Tool) {
            ScriptedResponse::text("done")
        } else {
            ScriptedResponse::tool_call("now", json!({}))
        }
    });
    let agent = Agent::builder()
        .model(model.clone())
        .toolkit(toolkit())
        .build()
        .unwrap();
    for id in ["a", "b"] {
        let out = agent
            .session(id)
            .await
            .unwrap()
            .send(Msg::user("time?"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed);
    }
    let reqs = model.requests();
    assert_eq!(reqs.len(), 4);
    for r in &reqs[1..] {
        assert!(
            r.tools.shares_with(&reqs[0].tools),
            "a request copied the specs"
        );
    }
    let names = |i: usize| {
        model.requests()[i]
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(0), ["now"]);

    agent.toolkit().set_group_active("web", true).unwrap();
    agent
        .session("c")
        .await
        .unwrap()
        .send(Msg::user("time?"))
        .await
        .unwrap();
    assert_eq!(names(4), ["now", "open_page"]);
    assert!(!model.requests()[4].tools.shares_with(&reqs[0].tools));
}
