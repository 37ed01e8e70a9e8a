//! A call a Cedar policy decides carries the policy set's hash into the audit trail and
//! into the decision's signed receipt (docs/evidence.md); a call a person decides
//! carries none; a replaced set's decisions carry the new set's hash.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use reins_agent::{Agent, Decision, RunStatus};
use reins_evidence::{Keyring, Signer, verify};
use reins_message::Msg;
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_policy::{CedarPolicy, PolicySet};
use serde_json::{Value, json};

const TMP: &str = r#"@id("tmp-deletes")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "/tmp/*" };

@id("etc-deletes")
@reason("system files are not deleted by agents")
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "/etc/*" };
"#;

fn agent(policy: &CedarPolicy, paths: &[&str]) -> Agent {
    let mut script = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        script.push(ScriptedResponse::tool_call_with_id(
            format!("c{i}"),
            "delete_file",
            json!({ "path": p }),
        ));
        script.push(ScriptedResponse::text("done"));
    }
    let mut tools = reins_tool::Toolkit::new();
    tools
        .add_dynamic(
            reins_tool::DynamicTool::new(
                "delete_file",
                "Delete a file",
                json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                |_, _| async { Ok(reins_tool::ToolOutput::text("deleted")) },
            )
            .policy(reins_tool::ToolPolicy::confirm()),
        )
        .unwrap();
    Agent::builder()
        .model(ScriptedModel::new(script))
        .toolkit(tools)
        .approval_policy(policy.clone())
        .evidence_signer(Signer::from_seed("k1", [4; 32]), Keyring::new())
        .build()
        .unwrap()
}

/// The approval receipts of the bundle, oldest first.
fn approvals(bundle: &str) -> Vec<Value> {
    bundle
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "entry" && v["entry"]["body"]["receipt"]["kind"] == "approval")
        .map(|v| v["entry"]["body"]["receipt"].clone())
        .collect()
}

#[tokio::test]
async fn a_policy_decision_signs_the_policy_sets_hash_into_its_receipt() {
    let policy = CedarPolicy::new(PolicySet::from_source("deletes.cedar", TMP).unwrap());
    let first = policy.active().hash().to_owned();
    let agent = agent(&policy, &["/tmp/a", "/etc/passwd", "/home/b", "/tmp/c"]);
    let s = agent.session("ev").await.unwrap();

    // Allowed by `tmp-deletes`, rejected by `etc-deletes`: no one asked.
    let out = s.send(Msg::user("go")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let out = s.send(Msg::user("go")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    // A person decides what the policies leave open.
    let out = s.send(Msg::user("go")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let out = s.resolve(vec![Decision::approve("c2")]).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    // Another set, with another text: its decisions name it.
    policy
        .replace(PolicySet::from_source("deletes.cedar", &TMP.replace("/etc/", "/usr/")).unwrap());
    let second = policy.active().hash().to_owned();
    assert_ne!(first, second);
    let out = s.send(Msg::user("go")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);

    let trail = s.decisions().await.unwrap();
    let hashes: Vec<(String, Option<String>)> = trail
        .iter()
        .map(|r| (r.via.clone(), r.policy_hash.clone()))
        .collect();
    assert_eq!(
        hashes,
        [
            ("policy".to_owned(), Some(first.clone())),
            ("policy".to_owned(), Some(first.clone())),
            ("resolve".to_owned(), None),
            ("policy".to_owned(), Some(second.clone())),
        ]
    );

    let bundle = agent.evidence("ev").await.unwrap().to_jsonl().unwrap();
    verify(&bundle).unwrap();
    let receipts = approvals(&bundle);
    let signed: Vec<(&str, &str, &Value)> = receipts
        .iter()
        .map(|r| {
            (
                r["call_id"].as_str().unwrap(),
                r["decision"].as_str().unwrap(),
                &r["policy_hash"],
            )
        })
        .collect();
    assert_eq!(
        signed,
        [
            ("c0", "approve", &json!(first)),
            ("c1", "reject", &json!(first)),
            ("c2", "approve", &Value::Null),
            ("c3", "approve", &json!(second)),
        ],
        "{bundle}"
    );
}
