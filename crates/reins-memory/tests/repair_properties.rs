//! Properties of transcript repair on generated transcripts, malformed ones included
//! (orphan and duplicate results, partially streamed messages, interleavings).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use reins_memory::repair::{is_partial, is_provider_valid, violations};
use reins_memory::{current_turn_start, sanitize_after_interrupt, sanitize_for_request};
use reins_message::{Msg, Role, ToolOutcome, ToolResult};
use support::*;

#[derive(Debug, Clone)]
enum Event {
    User,
    System,
    Assistant {
        uses: usize,
        partial: bool,
    },
    Results {
        picks: Vec<(usize, u8)>,
        partial: bool,
    },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        2 => Just(Event::User),
        1 => Just(Event::System),
        4 => (0usize..4, prop::bool::weighted(0.15))
            .prop_map(|(uses, partial)| Event::Assistant { uses, partial }),
        5 => (prop::collection::vec((0usize..64, 0u8..6), 1..4), prop::bool::weighted(0.1))
            .prop_map(|(picks, partial)| Event::Results { picks, partial }),
    ]
}

fn outcome(i: u8) -> ToolOutcome {
    match i {
        0 => ToolOutcome::Success,
        1 => ToolOutcome::Error,
        2 => ToolOutcome::Cancelled,
        3 => ToolOutcome::Rejected { note: None },
        4 => ToolOutcome::Interrupted,
        _ => ToolOutcome::Unknown,
    }
}

/// Builds a transcript from events. Results pick among recent tool uses (mostly the
/// latest assistant message's), earlier ones, and ids that never existed.
fn build(events: &[Event]) -> Vec<Msg> {
    let mut out = Vec::new();
    let mut all_uses: Vec<String> = Vec::new();
    let mut latest: Vec<String> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let id = format!("m{i}");
        let n = i as i64;
        match e {
            Event::User => out.push(user(&id, n, "hi")),
            Event::System => {
                let mut m = Msg::system("be careful").with_id(&id);
                m.created_at = at(n);
                out.push(m);
            }
            Event::Assistant { uses, partial: p } => {
                let ids: Vec<String> = (0..*uses).map(|k| format!("t{i}_{k}")).collect();
                let pairs: Vec<(&str, &str)> = ids.iter().map(|u| (u.as_str(), "tool")).collect();
                let m = assistant(&id, n, "ok", &pairs);
                out.push(if *p { partial(m) } else { m });
                all_uses.extend(ids.iter().cloned());
                latest = ids;
            }
            Event::Results { picks, partial: p } => {
                let rs = picks
                    .iter()
                    .map(|&(sel, o)| {
                        let tid = if sel < 40 && !latest.is_empty() {
                            latest[sel % latest.len()].clone()
                        } else if sel < 56 && !all_uses.is_empty() {
                            all_uses[sel % all_uses.len()].clone()
                        } else {
                            format!("ghost{sel}")
                        };
                        ToolResult::new(tid, "tool", outcome(o), vec![])
                    })
                    .collect();
                let m = results(&id, n, rs);
                out.push(if *p { partial(m) } else { m });
            }
        }
    }
    out
}

fn ran(r: &ToolResult) -> bool {
    !matches!(
        r.outcome,
        ToolOutcome::Cancelled | ToolOutcome::Rejected { .. }
    )
}

/// For each window, the first result of a tool that ran, per tool use id:
/// (message id, result).
fn first_ran_results(ms: &[Msg]) -> Vec<(String, ToolResult)> {
    let mut out = Vec::new();
    let mut window: Option<(HashSet<String>, HashSet<String>)> = None;
    for m in ms {
        match m.role {
            Role::Assistant => {
                window = Some((
                    m.tool_uses().map(|u| u.id.clone()).collect(),
                    HashSet::new(),
                ));
                continue;
            }
            Role::User => window = None,
            _ => {}
        }
        if let Some((uses, seen)) = window.as_mut() {
            for r in m.tool_results_iter() {
                if uses.contains(&r.id) && ran(r) && seen.insert(r.id.clone()) {
                    out.push((m.id.clone(), r.clone()));
                }
            }
        }
    }
    out
}

fn is_subsequence(small: &[String], big: &[String]) -> bool {
    let mut it = big.iter();
    small.iter().all(|s| it.any(|b| b == s))
}

fn ids(ms: &[Msg]) -> Vec<String> {
    ms.iter().map(|m| m.id.clone()).collect()
}

/// Nothing is silent: every message that disappeared is reported, and every
/// synthesized result is reported.
fn check_report_complete(input: &[Msg], out: &[Msg], report: &reins_memory::RepairReport) {
    let out_ids: HashSet<String> = ids(out).into_iter().collect();
    for m in input {
        if !out_ids.contains(&m.id) {
            assert!(
                report.removed_messages.contains(&m.id),
                "{} vanished silently",
                m.id
            );
        }
    }
    let input_ids: HashSet<String> = ids(input).into_iter().collect();
    let added: Vec<String> = ids(out)
        .into_iter()
        .filter(|i| !input_ids.contains(i))
        .collect();
    assert_eq!(added, report.added_messages);
    let synthesized: usize = out
        .iter()
        .filter(|m| report.added_messages.contains(&m.id))
        .map(|m| m.tool_results_iter().count())
        .sum();
    assert_eq!(synthesized, report.synthesized.len());
}

fn check_kept_results(input: &[Msg], out: &[Msg]) {
    let by_id: HashMap<&str, &Msg> = out.iter().map(|m| (m.id.as_str(), m)).collect();
    for (mid, r) in first_ran_results(input) {
        let holder = by_id
            .get(mid.as_str())
            .unwrap_or_else(|| panic!("message {mid} holding a real result was dropped"));
        assert!(
            holder.tool_results_iter().any(|x| x == &r),
            "real result for {} dropped",
            r.id
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn request_repair_holds_the_guarantees(events in prop::collection::vec(event(), 0..24)) {
        let input = build(&events);
        let (out, report) = sanitize_for_request(&input);

        // provider-valid
        prop_assert!(is_provider_valid(&out), "{:?}", violations(&out));
        // idempotent
        let (again, report2) = sanitize_for_request(&out);
        prop_assert_eq!(&again, &out);
        prop_assert!(report2.is_empty());
        // order preserved, no person's message dropped
        let kept: Vec<String> = ids(&out).into_iter().filter(|i| input.iter().any(|m| &m.id == i)).collect();
        prop_assert!(is_subsequence(&kept, &ids(&input)));
        prop_assert_eq!(ids_with_role(&out, Role::User), ids_with_role(&input, Role::User));
        // no real result dropped; nothing silent
        check_kept_results(&input, &out);
        check_report_complete(&input, &out, &report);
        // a report is empty exactly when nothing changed
        prop_assert_eq!(report.is_empty(), out == input);
    }

    #[test]
    fn interrupt_repair_holds_the_guarantees(events in prop::collection::vec(event(), 0..24)) {
        let input = build(&events);
        let start = current_turn_start(&input);
        let (out, report) = sanitize_after_interrupt(&input);

        // earlier turns untouched; the current turn is valid and has no partial message
        prop_assert_eq!(&out[..start], &input[..start]);
        prop_assert!(is_provider_valid(&out[start..]), "{:?}", violations(&out[start..]));
        prop_assert!(out[start..].iter().all(|m| !is_partial(m) || m.role == Role::User));
        // idempotent
        let (again, report2) = sanitize_after_interrupt(&out);
        prop_assert_eq!(&again, &out);
        prop_assert!(report2.is_empty());
        // order preserved, no person's message dropped
        let kept: Vec<String> = ids(&out).into_iter().filter(|i| input.iter().any(|m| &m.id == i)).collect();
        prop_assert!(is_subsequence(&kept, &ids(&input)));
        prop_assert_eq!(ids_with_role(&out, Role::User), ids_with_role(&input, Role::User));
        // no real result dropped (among complete messages of the turn); nothing silent
        let complete: Vec<Msg> = input[start..].iter().filter(|m| !is_partial(m) || m.role == Role::User).cloned().collect();
        check_kept_results(&complete, &out);
        check_report_complete(&input, &out, &report);
        // synthesized results say the truth
        for m in out.iter().filter(|m| report.added_messages.contains(&m.id)) {
            for r in m.tool_results_iter() {
                prop_assert_eq!(&r.outcome, &ToolOutcome::Cancelled);
                prop_assert_eq!(r.text(), "not run: interrupted");
            }
        }
    }

    #[test]
    fn valid_transcripts_come_back_unchanged(events in prop::collection::vec(event(), 0..24)) {
        let raw: Vec<Msg> = build(&events).into_iter().filter(|m| !is_partial(m)).collect();
        let (valid, _) = sanitize_for_request(&raw);
        prop_assert!(is_provider_valid(&valid));
        let (a, ra) = sanitize_for_request(&valid);
        let (b, rb) = sanitize_after_interrupt(&valid);
        prop_assert_eq!(&a, &valid);
        prop_assert_eq!(&b, &valid);
        prop_assert!(ra.is_empty() && rb.is_empty());
    }

    #[test]
    fn after_interrupt_nothing_is_pending(events in prop::collection::vec(event(), 0..24)) {
        let input = build(&events);
        let (out, _) = sanitize_after_interrupt(&input);
        prop_assert!(reins_memory::pending_tool_uses(&out).is_empty());
    }
}
