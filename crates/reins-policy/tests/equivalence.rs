//! For random calls, the Cedar policies decide as an equivalent hand-written
//! `ApprovalPolicy` does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use async_trait::async_trait;
use proptest::prelude::*;
use reins_agent::approval::{ApprovalPolicy, PolicyRequest, PolicyVerdict};
use reins_policy::{CedarPolicy, PolicySet};
use serde_json::{Value, json};

const POLICIES: &str = r#"@id("tmp-deletes")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "/tmp/*" };

@id("etc-deletes")
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "/etc/*" };

@id("dot-dot")
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "*..*" };

@id("prod-deletes")
@ask
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { context.session like "prod/*" };

@id("reads")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"read_file")
when { principal != Reins::User::"" };
"#;

/// The same rules, by hand.
struct ByHand;

#[async_trait]
impl ApprovalPolicy for ByHand {
    async fn decide(&self, c: PolicyRequest<'_>) -> PolicyVerdict {
        let path = c
            .arguments
            .get("path")
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned));
        match c.tool {
            "delete_file" => {
                let p = path.unwrap_or_default();
                let has = c.arguments.get("path").is_some();
                if has && (p.starts_with("/etc/") || p.contains("..")) {
                    PolicyVerdict::deny("no")
                } else if c.session.starts_with("prod/") {
                    PolicyVerdict::Ask
                } else if has && p.starts_with("/tmp/") {
                    PolicyVerdict::allow("yes")
                } else {
                    PolicyVerdict::Ask
                }
            }
            "read_file" if c.principal.is_some_and(|p| !p.is_empty()) => {
                PolicyVerdict::allow("yes")
            }
            _ => PolicyVerdict::Ask,
        }
    }
}

fn class(v: &PolicyVerdict) -> &'static str {
    match v {
        PolicyVerdict::Ask | PolicyVerdict::AskBecause { .. } => "ask",
        PolicyVerdict::Allow { .. } => "allow",
        PolicyVerdict::Deny { .. } => "deny",
    }
}

fn path() -> impl Strategy<Value = Option<Value>> {
    let prefix = prop_oneof![
        Just("/tmp/"),
        Just("/tmp"),
        Just("/etc/"),
        Just("/etc"),
        Just("/home/"),
        Just("/"),
        Just(""),
        Just("/tmp/../")
    ];
    prop_oneof![
        (prefix, "[a-z./]{0,10}").prop_map(|(p, s)| Some(json!(format!("{p}{s}")))),
        any::<i32>().prop_map(|n| Some(json!(n))),
        Just(None),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn cedar_decides_as_the_hand_written_policy(
        tool in prop_oneof![Just("delete_file"), Just("read_file"), Just("send_email")],
        path in path(),
        session in prop_oneof![Just("prod/1"), Just("prod"), Just("dev/2"), Just("produce/3")],
        principal in prop_oneof![Just(None), Just(Some("")), Just(Some("ana"))],
    ) {
        let cedar = CedarPolicy::new(PolicySet::from_source("p.cedar", POLICIES).unwrap());
        let args = path.map_or_else(|| json!({}), |p| json!({"path": p}));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let ask = || PolicyRequest::new(tool, &args, "c1", session, "agent").principal(principal);
        let by_cedar = rt.block_on(cedar.decide(ask()));
        let by_hand = rt.block_on(ByHand.decide(ask()));
        prop_assert_eq!(class(&by_cedar), class(&by_hand), "{} {} in {} for {:?}: cedar {:?}", tool, args, session, principal, by_cedar);
    }
}
