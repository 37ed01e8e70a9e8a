//! Cedar policies answering reins' three questions: allow / deny / ask per argument,
//! eligibility by role and by attribute, who may grant, refused sets, reloads under
//! load, shadow differences, and the same rules on the local driver through the
//! shared scenario.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use reins_agent::approval::{ApprovalPolicy, NewGrant, PolicyRequest, PolicyVerdict};
use reins_agent::eligibility::{DecideRequest, Eligibility, EligibilityPolicy};
use reins_agent::testing::{Scenario, rules};
use reins_agent::{Actor, Agent, AgentError};
use reins_memory::{InMemoryStore, MemoryStore, SqliteStore};
use reins_policy::{CedarPolicy, Error, PolicySet, Question, ShadowLog, Verdict};
use serde_json::{Value, json};

const DELETES: &str = r#"// Deleting files.
@id("tmp-deletes")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "/tmp/*" };

@id("etc-deletes")
@reason("system files are not deleted by agents")
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "/etc/*" };

@id("dot-dot")
@reason("paths with .. are not accepted")
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "*..*" };

@id("prod-deletes")
@ask
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { context.session like "prod/*" };
"#;

const DECIDERS: &str = r#"@id("sre-decides")
permit (principal in Reins::Role::"sre", action == Reins::Action::"decide", resource in Reins::Tool::"delete_file");

@id("security-decides")
permit (principal, action == Reins::Action::"decide", resource in Reins::Tool::"delete_file")
when { principal.hasTag("department") && principal.getTag("department") == "security" };

@id("no-approvals-at-night")
forbid (principal, action == Reins::Action::"decide", resource)
when { context.approve && context.hour >= 25 };

@id("admins-grant-short")
permit (principal in Reins::Role::"admin", action == Reins::Action::"grant", resource)
when { context.effect == "deny" || (context.ttl_seconds > 0 && context.ttl_seconds <= 86400) };
"#;

fn deletes() -> CedarPolicy {
    CedarPolicy::new(
        PolicySet::from_sources([
            ("deletes.cedar".to_owned(), DELETES.to_owned()),
            ("deciders.cedar".to_owned(), DECIDERS.to_owned()),
        ])
        .unwrap(),
    )
}

fn call(policy: &CedarPolicy, session: &str, tool: &str, args: &Value) -> reins_policy::Answer {
    policy.answer_call(&PolicyRequest::new(tool, args, "c1", session, "agent"))
}

#[test]
fn a_delete_under_tmp_runs_elsewhere_asks_and_in_etc_is_rejected() {
    let p = deletes();
    let tmp = call(&p, "dev/1", "delete_file", &json!({"path": "/tmp/x.log"}));
    assert_eq!(
        (tmp.verdict, tmp.policies.clone()),
        (Verdict::Allow, vec!["tmp-deletes".to_owned()])
    );
    let home = call(
        &p,
        "dev/1",
        "delete_file",
        &json!({"path": "/home/ana/notes"}),
    );
    assert_eq!((home.verdict, home.policies.len()), (Verdict::Ask, 0));
    let etc = call(&p, "dev/1", "delete_file", &json!({"path": "/etc/passwd"}));
    assert_eq!(etc.verdict, Verdict::Deny);
    assert_eq!(etc.policies, ["etc-deletes"]);
    assert_eq!(
        etc.note.as_deref(),
        Some("system files are not deleted by agents")
    );
    let sneaky = call(
        &p,
        "dev/1",
        "delete_file",
        &json!({"path": "/tmp/../etc/passwd"}),
    );
    assert_eq!(
        (sneaky.verdict, sneaky.policies),
        (Verdict::Deny, vec!["dot-dot".to_owned()])
    );
    // An `@ask` forbid asks even where a permit would run the call, and says why.
    let prod = call(&p, "prod/7", "delete_file", &json!({"path": "/tmp/x.log"}));
    assert_eq!(
        (prod.verdict, prod.policies),
        (Verdict::Ask, vec!["prod-deletes".to_owned()])
    );
    // No path at all: nothing applies, a person is asked.
    let none = call(&p, "dev/1", "delete_file", &json!({}));
    assert_eq!(none.verdict, Verdict::Ask);
}

#[tokio::test]
async fn the_verdicts_name_their_policies_for_the_audit_trail() {
    let p = deletes();
    let args = json!({"path": "/tmp/a"});
    let v = p
        .decide(PolicyRequest::new(
            "delete_file",
            &args,
            "c1",
            "dev/1",
            "agent",
        ))
        .await;
    assert_eq!(v, PolicyVerdict::allow("allowed by policy `tmp-deletes`"));
    let args = json!({"path": "/tmp/a"});
    let v = p
        .decide(PolicyRequest::new(
            "delete_file",
            &args,
            "c1",
            "prod/1",
            "agent",
        ))
        .await;
    assert_eq!(
        v,
        PolicyVerdict::ask_because("asked because policy `prod-deletes`")
    );
    let args = json!({"path": "/etc/hosts"});
    let v = p
        .decide(PolicyRequest::new(
            "delete_file",
            &args,
            "c1",
            "dev/1",
            "agent",
        ))
        .await;
    assert_eq!(
        v,
        PolicyVerdict::deny(
            "Rejected by policy `etc-deletes`: system files are not deleted by agents"
        )
    );
}

fn decide(p: &CedarPolicy, actor: Option<&Actor>, tool: &str) -> Eligibility {
    let args = json!({"path": "/home/x"});
    p.may_decide(DecideRequest::new("dev/1", "c1", tool, &args).actor(actor))
}

#[test]
fn eligibility_by_role_and_by_attribute() {
    let p = deletes();
    let sre = Actor::new("sam").with_metadata(json!({"roles": ["sre"]}));
    let sec = Actor::new("sid").with_metadata(json!({"roles": ["user"], "department": "security"}));
    let intern =
        Actor::new("ian").with_metadata(json!({"roles": ["intern"], "department": "sales"}));
    assert_eq!(decide(&p, Some(&sre), "delete_file"), Eligibility::Eligible);
    assert_eq!(decide(&p, Some(&sec), "delete_file"), Eligibility::Eligible);
    let Eligibility::Refused { reason } = decide(&p, Some(&intern), "delete_file") else {
        panic!("an intern may not decide");
    };
    assert!(reason.contains("`ian`"), "{reason}");
    assert!(matches!(
        decide(&p, None, "delete_file"),
        Eligibility::Refused { .. }
    ));
    // The policies name one tool.
    assert!(matches!(
        decide(&p, Some(&sre), "send_email"),
        Eligibility::Refused { .. }
    ));
}

/// A Cedar refusal of a decision is worded by what the requirement is: an approval
/// "cannot count towards its quorum" only where the tool has a quorum; elsewhere the
/// refusal says who may not approve (or reject) which call, and the policy's reason.
#[tokio::test]
async fn a_refused_decision_is_worded_by_whether_its_call_has_a_quorum() {
    async fn refusal(quorum: bool, approve: bool) -> String {
        let model =
            reins_model::ScriptedModel::new([reins_model::ScriptedResponse::tool_call_with_id(
                "c1",
                "delete_file",
                json!({"path": "/home/x"}),
            )]);
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
        let mut agent = Agent::builder()
            .model(model)
            .toolkit(tools)
            .eligibility_policy(deletes());
        if quorum {
            agent = agent.quorum("delete_file", reins_agent::Quorum::of(2));
        }
        let agent = agent.build().unwrap();
        let s = agent.session("dev/1").await.unwrap();
        let out = s.send(reins_message::Msg::user("delete it")).await.unwrap();
        assert_eq!(out.requirements[0].id, "c1");
        let intern = Actor::new("ian").with_metadata(json!({"roles": ["intern"]}));
        let decision = if approve {
            reins_agent::Decision::approve("c1").by("ian")
        } else {
            reins_agent::Decision::reject("c1", "no").by("ian")
        };
        let err = s
            .as_actor(intern)
            .resolve(vec![decision])
            .await
            .unwrap_err();
        assert!(matches!(err, AgentError::NotEligible { .. }), "{err}");
        err.to_string()
    }
    let plain = refusal(false, true).await;
    assert_eq!(
        plain,
        "`ian` may not approve `c1` (a `delete_file` call): no policy permits `ian` to decide \
         calls of `delete_file`"
    );
    let rejected = refusal(false, false).await;
    assert!(
        rejected.starts_with("`ian` may not reject `c1`"),
        "{rejected}"
    );
    let counted = refusal(true, true).await;
    assert_eq!(
        counted,
        "the approval of `c1` cannot count towards its quorum: no policy permits `ian` to \
         decide calls of `delete_file`"
    );
    // A rejection under a quorum counts towards nothing: worded as any refusal.
    let rejected = refusal(true, false).await;
    assert!(!rejected.contains("quorum"), "{rejected}");
}

#[tokio::test]
async fn who_may_create_a_grant_is_asked_before_it_is_stored() {
    let p = deletes();
    let store = Arc::new(InMemoryStore::new());
    let agent = Agent::builder()
        .model(reins_model::ScriptedModel::new([]))
        .store_arc(store.clone())
        .eligibility_policy(p)
        .build()
        .unwrap();
    let admin = Actor::new("ops").with_metadata(json!({"roles": ["admin"]}));
    let user = Actor::new("ana").with_metadata(json!({"roles": ["approver"]}));
    let day = NewGrant {
        ttl: Some(Duration::from_secs(3600)),
        ..NewGrant::tool("delete_file")
    };
    let forever = NewGrant::tool("delete_file");
    let refused = agent.create_grant_as(day.clone(), &user).await;
    assert!(
        matches!(refused, Err(AgentError::NotEligible { .. })),
        "{refused:?}"
    );
    let refused = agent.create_grant_as(forever, &admin).await;
    assert!(
        matches!(refused, Err(AgentError::NotEligible { .. })),
        "{refused:?}"
    );
    // The plain door (a name, no roles) is asked too.
    let refused = agent.create_grant(day.clone(), Some("ops")).await;
    assert!(
        matches!(refused, Err(AgentError::NotEligible { .. })),
        "{refused:?}"
    );
    let all = reins_agent::approval::GrantFilter::all();
    assert!(
        store.list_grants(&all).await.unwrap().is_empty(),
        "nothing stored"
    );
    let g = agent.create_grant_as(day, &admin).await.unwrap();
    assert_eq!(store.list_grants(&all).await.unwrap(), vec![g]);
}

#[test]
fn a_bad_policy_is_refused_with_its_line_and_the_running_set_stays() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("deletes.cedar");
    std::fs::write(&file, DELETES).unwrap();
    let p = CedarPolicy::new(PolicySet::from_dir(dir.path()).unwrap());
    let before: Vec<String> = p.active().ids().map(str::to_owned).collect();
    assert_eq!(
        before,
        ["tmp-deletes", "etc-deletes", "dot-dot", "prod-deletes"]
    );

    // Valid Cedar, but `owner` is not in the schema: refused by validation.
    let unknown = format!(
        "{DELETES}\n@id(\"owners\")\npermit (principal, action == Reins::Action::\"call\", resource)\nwhen {{ resource.owner == principal }};\n"
    );
    std::fs::write(&file, &unknown).unwrap();
    let err = p.reload().unwrap_err();
    let Error::Invalid { problems } = &err else {
        panic!("{err}")
    };
    assert_eq!(problems.len(), 1, "{err}");
    let line = unknown
        .lines()
        .position(|l| l.contains("resource.owner"))
        .unwrap()
        + 1;
    assert_eq!(problems[0].line, line, "{err}");
    assert_eq!(problems[0].policy.as_deref(), Some("owners"));
    assert!(problems[0].reason.contains("owner"), "{err}");
    assert!(
        err.to_string().contains(&format!("deletes.cedar:{line}:")),
        "{err}"
    );

    // A syntax error.
    std::fs::write(
        &file,
        "permit (principal, action, resource) when { 1 + };\n",
    )
    .unwrap();
    let err = p.reload().unwrap_err();
    assert_eq!(err.problems()[0].line, 1, "{err}");

    // An unknown action.
    std::fs::write(
        &file,
        "@id(\"x\")\n\npermit (principal, action == Reins::Action::\"delete\", resource);\n",
    )
    .unwrap();
    let err = p.reload().unwrap_err();
    assert!(
        err.problems()
            .iter()
            .any(|p| p.line == 3 && p.reason.contains("unrecognized action")),
        "{err}"
    );

    // The running set is the one loaded first, and still answers.
    let after: Vec<String> = p.active().ids().map(str::to_owned).collect();
    assert_eq!(after, before);
    let tmp = call(&p, "dev/1", "delete_file", &json!({"path": "/tmp/x"}));
    assert_eq!(tmp.verdict, Verdict::Allow);

    // A good file reloads.
    std::fs::write(&file, DELETES.replace("tmp-deletes", "scratch-deletes")).unwrap();
    assert_eq!(p.reload().unwrap(), 4);
    let tmp = call(&p, "dev/1", "delete_file", &json!({"path": "/tmp/x"}));
    assert_eq!(tmp.policies, ["scratch-deletes"]);
}

#[test]
fn duplicate_ids_and_ask_on_a_permit_are_refused() {
    let twice = "@id(\"a\")\npermit (principal, action == Reins::Action::\"call\", resource);\n@id(\"a\")\nforbid (principal, action == Reins::Action::\"call\", resource);\n";
    let err = PolicySet::from_source("twice.cedar", twice).unwrap_err();
    assert!(err.to_string().contains("used twice"), "{err}");
    let ask =
        "@id(\"b\")\n@ask\npermit (principal, action == Reins::Action::\"call\", resource);\n";
    let err = PolicySet::from_source("ask.cedar", ask).unwrap_err();
    assert!(
        err.to_string().contains("`@ask` belongs on a `forbid`"),
        "{err}"
    );
}

fn generation(n: usize) -> PolicySet {
    let text = format!(
        "@id(\"gen-{n}-a\")\npermit (principal, action == Reins::Action::\"call\", resource in Reins::Tool::\"t\");\n\
         @id(\"gen-{n}-b\")\npermit (principal, action == Reins::Action::\"call\", resource in Reins::Tool::\"t\") when {{ context.depth == 0 }};\n"
    );
    PolicySet::from_source("gen.cedar", &text).unwrap()
}

#[test]
fn decisions_during_reloads_each_see_one_whole_set() {
    let p = CedarPolicy::new(generation(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let deciders: Vec<_> = (0..3)
        .map(|_| {
            let (p, stop) = (p.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut seen = std::collections::BTreeSet::new();
                let args = json!({});
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let a = p.answer_call(&PolicyRequest::new("t", &args, "c", "s", "agent"));
                    assert_eq!(a.verdict, Verdict::Allow);
                    let [x, y] = &a.policies[..] else {
                        panic!("a decision saw part of a set: {:?}", a.policies);
                    };
                    let g = x.trim_end_matches("-a");
                    assert_eq!(
                        y,
                        &format!("{g}-b"),
                        "a decision saw two sets: {:?}",
                        a.policies
                    );
                    seen.insert(g.to_owned());
                }
                seen.len()
            })
        })
        .collect();
    for n in 1..=300 {
        p.replace(generation(n));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen: usize = deciders.into_iter().map(|d| d.join().unwrap()).sum();
    assert!(
        seen > 3,
        "the deciders must have seen several sets, saw {seen}"
    );
    assert_eq!(p.active().ids().next(), Some("gen-300-a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cedar_answers_the_policy_scenario_on_the_local_driver() {
    let p = CedarPolicy::new(PolicySet::from_source("mail.cedar", rules::CEDAR).unwrap());
    on_local(rules::ScenarioRules {
        approval: Arc::new(p.clone()),
        eligibility: Arc::new(p),
    })
    .await;
}

async fn on_local(rules: rules::ScenarioRules) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn MemoryStore> = Arc::new(
        SqliteStore::open(dir.path().join("reins.sqlite"))
            .await
            .unwrap(),
    );
    let outbox = dir.path().join("outbox.txt");
    let agent = Scenario::PolicyRules
        .agent_with_rules(store.clone(), &outbox, rules)
        .unwrap();
    if let Err(e) = Scenario::PolicyRules.check(&agent, &*store, &outbox).await {
        panic!("local driver: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_differences_are_recorded_and_nothing_is_acted_on() {
    let dir = tempfile::tempdir().unwrap();
    let log_file = dir.path().join("shadow.jsonl");
    let active = PolicySet::from_source("mail.cedar", rules::CEDAR).unwrap();
    let p = CedarPolicy::with_log(active, ShadowLog::open(&log_file).unwrap());
    // The shadow set would let every mail run and anyone decide.
    let shadow = r#"@id("all-mail")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"send_email");
@id("anyone-decides")
permit (principal, action == Reins::Action::"decide", resource);
"#;
    p.set_shadow(Some(
        PolicySet::from_source("shadow.cedar", shadow).unwrap(),
    ));
    let rules = rules::ScenarioRules {
        approval: Arc::new(p.clone()),
        eligibility: Arc::new(p.clone()),
    };
    // The scenario's checks hold exactly as without a shadow: nothing acted on it.
    on_local(rules).await;
    let diffs = p.differences();
    // `.invalid` mail (deny vs allow), other mail (ask vs allow), the intern (refused
    // vs eligible), and the internal mail's policies differ too.
    let kinds: Vec<(Question, Verdict, Verdict)> = diffs
        .iter()
        .map(|d| (d.question, d.active.verdict, d.shadow.verdict))
        .collect();
    assert!(
        kinds.contains(&(Question::Call, Verdict::Deny, Verdict::Allow)),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(Question::Call, Verdict::Ask, Verdict::Allow)),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(Question::Decide, Verdict::Deny, Verdict::Allow)),
        "{kinds:?}"
    );
    let asked = diffs
        .iter()
        .find(|d| d.active.verdict == Verdict::Ask)
        .unwrap();
    assert_eq!(asked.shadow.policies, ["all-mail"]);
    assert_eq!(asked.tool, "send_email");
    assert_eq!(asked.principal, "alice");
    assert!(
        asked.arguments.starts_with("{\"to\":"),
        "{}",
        asked.arguments
    );
    // Stored: a new log on the same file reads them back.
    let reopened = ShadowLog::open(&log_file).unwrap();
    assert_eq!(reopened.differences(), diffs);
    // Without a shadow set nothing more is recorded.
    p.set_shadow(None);
    let args = json!({"to": "x@y.test"});
    p.answer_call(&PolicyRequest::new("send_email", &args, "c", "s", "agent"));
    assert_eq!(p.differences().len(), diffs.len());
}

#[test]
fn the_example_policies_of_the_docs_load() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/policy.md"))
        .unwrap();
    let blocks: Vec<&str> = doc
        .split("```cedar\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .collect();
    assert!(
        blocks.len() >= 4,
        "the examples and the schema: {}",
        blocks.len()
    );
    // The first block is the schema (its text is the crate's, in short form).
    let policies: Vec<(String, String)> = blocks[1..]
        .iter()
        .enumerate()
        .map(|(n, b)| (format!("docs/policy.md#{n}"), (*b).to_owned()))
        .collect();
    let set = PolicySet::from_sources(policies).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set.len(), 7);
}
