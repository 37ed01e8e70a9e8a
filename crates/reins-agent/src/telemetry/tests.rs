#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use super::*;
use crate::requirement::{Requirement, RequirementKind};
use crate::view::{Actor, DecisionRecord, Verdict};
use chrono::{DateTime, Utc};
use reins_message::ToolUse;

fn requirement(id: &str, tool: &str) -> Requirement {
    Requirement {
        id: id.into(),
        tool_use: ToolUse::new(id, tool, serde_json::json!({"path": "a.txt"})),
        kind: RequirementKind::Confirmation,
        reason: format!("`{tool}` needs confirmation"),
        created_at: DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap_or_default(),
        expires_at: None,
        path: Vec::new(),
        agent: None,
        quorum: None,
    }
}

fn approval(req: &Requirement, by: &str) -> DecisionRecord {
    DecisionRecord {
        seq: 0,
        at: req.created_at + chrono::Duration::seconds(90),
        requirement_id: req.id.clone(),
        tool_name: req.tool_use.name.clone(),
        kind: "confirmation".into(),
        decision: "approve".into(),
        via: "resolve".into(),
        verdict: Verdict::Applied,
        actor: Some(Actor::new(by)),
        shown_input: req.tool_use.input.clone(),
        executed_input: None,
        note: None,
        view: None,
        shown_fingerprint: Some(req.fingerprint()),
        executed_fingerprint: None,
        grant_id: None,
        policy_hash: None,
        quorum: None,
    }
}

/// 10,000 sessions, each with a paused call, an approval and a finished tool call, add
/// no label values: the registry's series are the same as after the first session.
#[test]
fn ten_thousand_sessions_add_no_label_values() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let series = |text: &str| -> BTreeSet<String> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| l.rsplit_once(' ').map(|(s, _)| s.to_owned()))
            .collect()
    };
    metrics::with_local_recorder(&recorder, || {
        let one = |i: usize| {
            let session = format!("tenant-{i}/session-{i}");
            let model = ModelId {
                model: "offline",
                provider: Some("offline"),
            };
            let span = invoke_agent("safe", &session, model, i.is_multiple_of(2));
            let tool = ToolSpan::start("delete_file", &format!("call-{i}"));
            tool.record("success", None);
            chat_ended(
                &chat(model),
                "offline",
                Duration::from_millis(3),
                Some(&Usage::default()),
                Some(&FinishReason::ToolUse),
            );
            store_call("commit", Duration::from_micros(i as u64));
            let req = requirement(&format!("call-{i}"), "delete_file");
            requirement_pending(&req);
            let mut record = approval(&req, &format!("person-{i}"));
            record.actor.as_mut().unwrap().metadata =
                Some(serde_json::json!({"via": "ag-ui", "run_id": session}));
            decided(&record, Some(req.created_at), true);
            interrupted(&session);
            run_ended(&span, Ok(RunStatus::Paused));
        };
        one(0);
        let first = series(&handle.render());
        assert!(
            first
                .iter()
                .any(|s| s.starts_with(metric::REQUIREMENTS_PENDING)),
            "{first:?}"
        );
        assert!(
            first.iter().any(|s| s.starts_with(metric::APPROVAL_WAIT)),
            "{first:?}"
        );
        for i in 1..10_000 {
            one(i);
        }
        let after = series(&handle.render());
        assert_eq!(first, after);
        assert!(
            !after
                .iter()
                .any(|s| s.contains("session") || s.contains("person") || s.contains("call-")),
            "{after:?}"
        );
    });
}

#[test]
fn doors_are_a_fixed_set() {
    let req = requirement("c1", "delete_file");
    let mut record = approval(&req, "ann");
    assert_eq!(door_of(&record), "api");
    for (via, door) in [
        ("ag-ui", "ag-ui"),
        ("a2a", "a2a"),
        ("acp", "acp"),
        ("mcp", "mcp"),
        ("made-up-42", "other"),
    ] {
        record.actor.as_mut().unwrap().metadata = Some(serde_json::json!({ "via": via }));
        assert_eq!(door_of(&record), door);
    }
}

#[test]
fn a_malformed_traceparent_links_nothing() {
    let span = tracing::Span::none();
    for bad in [
        "",
        "00-zz-yy-01",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    ] {
        assert!(!link_to_traceparent(&span, bad), "{bad}");
    }
}
