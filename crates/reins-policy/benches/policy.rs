//! What one policy question costs: Cedar's answer to "may this call run without
//! asking?" and "may this person decide it?", per call, on a set of ten policies (the
//! three examples of docs/policy.md and seven more tools), alone and with a shadow set
//! evaluated beside it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use reins_agent::Actor;
use reins_agent::approval::PolicyRequest;
use reins_agent::eligibility::DecideRequest;
use reins_policy::{CedarPolicy, PolicySet, Verdict};
use serde_json::json;

const EXAMPLES: &str = r#"@id("tmp-deletes")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "/tmp/*" };

@id("etc-deletes")
@reason("system files are not deleted by agents")
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "/etc/*" };

@id("prod-deletes")
@ask
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { context.session like "prod/*" };

@id("sre-decides")
permit (principal in Reins::Role::"sre", action == Reins::Action::"decide", resource);
"#;

fn set() -> PolicySet {
    let mut text = EXAMPLES.to_owned();
    for n in 0..6 {
        text.push_str(&format!(
            "@id(\"tool-{n}\")\npermit (principal, action == Reins::Action::\"call\", resource in Reins::Tool::\"tool_{n}\")\nwhen {{ resource.hasTag(\"q\") && resource.getTag(\"q\") like \"safe*\" && context.hour < 24 }};\n"
        ));
    }
    let p = PolicySet::from_source("bench.cedar", &text).unwrap();
    assert_eq!(p.len(), 10);
    p
}

fn bench(c: &mut Criterion) {
    let policy = CedarPolicy::new(set());
    let args = json!({"path": "/tmp/build/cache.bin", "recursive": true});
    let call = || PolicyRequest::new("delete_file", &args, "call_1", "dev/42", "agent");
    assert_eq!(policy.answer_call(&call()).verdict, Verdict::Allow);
    c.bench_function("policy/call (cedar, 10 policies)", |b| {
        b.iter(|| black_box(policy.answer_call(black_box(&call()))));
    });
    let sre = Actor::new("sam").with_metadata(json!({"roles": ["sre"], "department": "ops"}));
    let decide = || DecideRequest::new("dev/42", "call_1", "delete_file", &args).actor(Some(&sre));
    assert_eq!(policy.answer_decide(&decide()).verdict, Verdict::Allow);
    c.bench_function("policy/decide (cedar, 10 policies)", |b| {
        b.iter(|| black_box(policy.answer_decide(black_box(&decide()))));
    });
    // The same set as its own shadow: both evaluated, nothing differs, nothing logged.
    let shadowed = CedarPolicy::new(set());
    shadowed.set_shadow(Some(set()));
    c.bench_function("policy/call with shadow (cedar, 2x10 policies)", |b| {
        b.iter(|| black_box(shadowed.answer_call(black_box(&call()))));
    });
    assert!(shadowed.differences().is_empty());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
