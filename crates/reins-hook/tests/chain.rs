#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The hook chain: ordering, mutation, read-only events, control merging, errors.

mod support;

use std::sync::{Arc, Mutex};

use reins_hook::{HookContext, HookEvent, HookEventKind, Hooks, ToolConfirmationHook, TracingHook};
use reins_message::{ContentBlock, Msg, ToolOutcome, ToolResult, ToolUse};
use reins_model::{ChatChunk, ChatRequest};
use serde_json::json;
use support::{ctx, mock_hook};

fn pre_reasoning() -> HookEvent {
    HookEvent::PreReasoning {
        request: ChatRequest::new(vec![Msg::user("hi")]),
    }
}

#[tokio::test]
async fn hooks_run_by_priority_then_registration_order() {
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut hooks = Hooks::new();
    for (name, priority) in [("a", 5), ("b", -1), ("c", 5), ("d", 0), ("e", -1)] {
        let mut m = mock_hook(name, priority);
        let order = order.clone();
        m.expect_on_event().times(1).returning(move |_, _, _| {
            order.lock().unwrap().push(name);
            Ok(())
        });
        hooks.add(m);
    }
    assert_eq!(hooks.names(), ["b", "e", "d", "a", "c"]);
    hooks.run(&mut pre_reasoning(), &ctx()).await.unwrap();
    assert_eq!(*order.lock().unwrap(), ["b", "e", "d", "a", "c"]);
}

#[tokio::test]
async fn each_hook_sees_the_previous_hooks_changes() {
    let mut first = mock_hook("first", 0);
    first.expect_on_event().times(1).returning(|event, ctx, _| {
        assert_eq!((ctx.agent_name.as_str(), ctx.iteration), ("tester", 2));
        if let HookEvent::PreReasoning { request } = event {
            request.messages.insert(0, Msg::system("be brief"));
            request.options.temperature = Some(0.1);
        }
        Ok(())
    });
    let mut second = mock_hook("second", 1);
    second.expect_on_event().times(1).returning(|event, _, _| {
        let HookEvent::PreReasoning { request } = event else {
            panic!("wrong event")
        };
        assert_eq!(request.messages[0].text(), "be brief");
        request.messages.push(Msg::user("(appended)"));
        Ok(())
    });
    let hooks = Hooks::new().with(second).with(first);
    let mut event = pre_reasoning();
    let control = hooks.run(&mut event, &ctx()).await.unwrap();
    assert!(control.is_empty());
    let HookEvent::PreReasoning { request } = event else {
        panic!("wrong event")
    };
    let texts: Vec<String> = request.messages.iter().map(Msg::text).collect();
    assert_eq!(texts, ["be brief", "hi", "(appended)"]);
    assert_eq!(request.options.temperature, Some(0.1));
}

#[tokio::test]
async fn tool_uses_and_results_are_mutable() {
    let mut editor = mock_hook("editor", 0);
    editor.expect_on_event().times(2).returning(|event, _, _| {
        match event {
            HookEvent::PreActing { tool_use } => tool_use.input["path"] = json!("/tmp/safe.txt"),
            HookEvent::PostActing { result, .. } => {
                result
                    .output
                    .push(ContentBlock::text("(checked by the editor hook)"));
            }
            _ => panic!("unexpected event"),
        }
        Ok(())
    });
    let hooks = Hooks::new().with(editor);
    let mut pre = HookEvent::PreActing {
        tool_use: ToolUse::new("c1", "write_file", json!({ "path": "/etc/x" })),
    };
    hooks.run(&mut pre, &ctx()).await.unwrap();
    let HookEvent::PreActing { tool_use } = &pre else {
        panic!()
    };
    assert_eq!(tool_use.input, json!({ "path": "/tmp/safe.txt" }));

    let mut post = HookEvent::PostActing {
        tool_use: tool_use.clone(),
        result: ToolResult::success("c1", "write_file", "written"),
    };
    hooks.run(&mut post, &ctx()).await.unwrap();
    let HookEvent::PostActing { result, .. } = post else {
        panic!()
    };
    assert_eq!(result.text(), "written\n(checked by the editor hook)");
    assert_eq!(result.outcome, ToolOutcome::Success);
}

#[tokio::test]
async fn changes_to_read_only_events_are_discarded() {
    let original = HookEvent::ReasoningChunk {
        chunk: ChatChunk::TextDelta { text: "lo".into() },
        accumulated_text: "hello".into(),
    };
    let mut vandal = mock_hook("vandal", 0);
    vandal.expect_on_event().times(1).returning(|event, _, _| {
        if let HookEvent::ReasoningChunk {
            accumulated_text, ..
        } = event
        {
            accumulated_text.push_str(" (changed)");
        }
        Ok(())
    });
    let mut observer = mock_hook("observer", 1);
    let expected = original.clone();
    observer
        .expect_on_event()
        .times(1)
        .returning(move |event, _, _| {
            assert_eq!(
                *event, expected,
                "the next hook saw a changed read-only event"
            );
            Ok(())
        });
    let hooks = Hooks::new().with(vandal).with(observer);
    let mut event = original.clone();
    hooks.run(&mut event, &ctx()).await.unwrap();
    assert_eq!(event, original);
}

#[tokio::test]
async fn controls_merge_across_the_chain() {
    let mut stopper = mock_hook("stopper", 0);
    stopper.expect_on_event().returning(|_, _, control| {
        control.stop_agent();
        control.goto_reasoning(vec![Msg::user("first")]);
        control.reject("first note");
        Ok(())
    });
    let mut later = mock_hook("later", 1);
    later.expect_on_event().returning(|_, _, control| {
        // A later hook cannot undo the stop: it only sees its own fresh Control.
        assert!(!control.is_stopped());
        control.goto_reasoning(vec![Msg::user("second")]);
        control.reject("second note");
        Ok(())
    });
    let hooks = Hooks::new().with(later).with(stopper);
    let control = hooks
        .run(
            &mut HookEvent::PostReasoning {
                message: Msg::assistant("x"),
            },
            &ctx(),
        )
        .await
        .unwrap();
    assert!(control.is_stopped());
    let goto: Vec<String> = control.goto().unwrap().iter().map(Msg::text).collect();
    assert_eq!(goto, ["first", "second"]);
    assert_eq!(control.rejection(), Some("first note"));
}

#[tokio::test]
async fn a_hook_error_stops_the_chain_and_names_the_hook() {
    let mut ok = mock_hook("ok", 0);
    ok.expect_on_event().times(1).returning(|_, _, c| {
        c.stop_agent();
        Ok(())
    });
    let mut failing = mock_hook("budget", 1);
    failing
        .expect_on_event()
        .times(1)
        .returning(|_, _, _| Err("token budget exceeded".into()));
    let mut never = mock_hook("never", 2);
    never.expect_on_event().times(0);
    let hooks = Hooks::new().with(never).with(failing).with(ok);
    let err = hooks.run(&mut pre_reasoning(), &ctx()).await.unwrap_err();
    assert_eq!(err.hook(), "budget");
    assert_eq!(err.event(), Some(HookEventKind::PreReasoning));
    assert_eq!(
        err.to_string(),
        "hook `budget` failed on pre_reasoning: token budget exceeded"
    );
}

#[tokio::test]
async fn uninterested_hooks_are_skipped() {
    let mut picky = support::MockHook::new();
    picky.expect_name().return_const("picky".to_owned());
    picky.expect_priority().return_const(0);
    picky
        .expect_interested()
        .returning(|k| k == HookEventKind::PostActing);
    picky.expect_on_event().times(0);
    let hooks = Hooks::new().with(picky);
    assert!(hooks.wants(HookEventKind::PostActing));
    assert!(!hooks.wants(HookEventKind::ReasoningChunk));
    let control = hooks.run(&mut pre_reasoning(), &ctx()).await.unwrap();
    assert!(control.is_empty());
    assert!(!Hooks::new().wants(HookEventKind::PreCall));
}

#[tokio::test]
async fn shared_and_boxed_hooks_work_and_clones_are_independent() {
    let mut m = mock_hook("shared", 0);
    m.expect_on_event().times(2).returning(|_, _, c| {
        c.stop_agent();
        Ok(())
    });
    let shared = Arc::new(m);
    let mut hooks = Hooks::new();
    hooks.add(shared.clone());
    let boxed: Box<dyn reins_hook::Hook> = Box::new(ToolConfirmationHook::new(["x"]));
    let before = hooks.clone();
    hooks.add(boxed);
    assert_eq!(before.len(), 1);
    assert_eq!(hooks.names(), ["shared", "ToolConfirmationHook"]);
    assert!(
        hooks
            .run(&mut pre_reasoning(), &ctx())
            .await
            .unwrap()
            .is_stopped()
    );
    assert!(
        before
            .run(&mut pre_reasoning(), &ctx())
            .await
            .unwrap()
            .is_stopped()
    );
}

fn answer_calling(tools: &[&str]) -> HookEvent {
    let mut message = Msg::assistant("working on it");
    for (i, t) in tools.iter().enumerate() {
        message = message.with_block(ContentBlock::ToolUse(ToolUse::new(
            format!("c{i}"),
            *t,
            json!({}),
        )));
    }
    HookEvent::PostReasoning { message }
}

#[tokio::test]
async fn tool_confirmation_hook_stops_only_for_listed_tools() {
    let hooks = Hooks::new().with(ToolConfirmationHook::new(["delete_file", "send_email"]));
    let c = ctx();
    assert!(
        hooks
            .run(&mut answer_calling(&["search", "send_email"]), &c)
            .await
            .unwrap()
            .is_stopped()
    );
    assert!(
        !hooks
            .run(&mut answer_calling(&["search"]), &c)
            .await
            .unwrap()
            .is_stopped()
    );
    assert!(
        !hooks
            .run(&mut answer_calling(&[]), &c)
            .await
            .unwrap()
            .is_stopped()
    );
    // Other events never stop, even if they mention a listed tool.
    let mut pre = HookEvent::PreActing {
        tool_use: ToolUse::new("c1", "delete_file", json!({})),
    };
    assert!(hooks.run(&mut pre, &c).await.unwrap().is_empty());
    assert!(!hooks.wants(HookEventKind::ReasoningChunk));
}

#[tokio::test]
async fn tracing_hook_opens_and_closes_spans() {
    let tracer = Arc::new(TracingHook::new());
    let hooks = Hooks::new().with(tracer.clone());
    assert!(!hooks.wants(HookEventKind::ReasoningChunk));
    assert!(
        Hooks::new()
            .with(TracingHook::new().with_chunks(true))
            .wants(HookEventKind::ActingChunk)
    );
    let c = HookContext::new("tracer", "s9");
    let use_ = ToolUse::new("c1", "search", json!({}));
    let mut events = vec![
        HookEvent::PreCall {
            input: Some(Msg::user("hi")),
        },
        pre_reasoning(),
        answer_calling(&["search"]),
        HookEvent::PreActing {
            tool_use: use_.clone(),
        },
    ];
    for e in &mut events {
        assert!(hooks.run(e, &c).await.unwrap().is_empty());
    }
    assert_eq!(tracer.open_spans(), 2); // the call and the tool call
    let mut post = HookEvent::PostActing {
        tool_use: use_,
        result: ToolResult::success("c1", "search", "found"),
    };
    hooks.run(&mut post, &c).await.unwrap();
    assert_eq!(tracer.open_spans(), 1);
    hooks.run(&mut pre_reasoning(), &c).await.unwrap();
    hooks
        .run(
            &mut HookEvent::Error {
                message: "model unavailable".into(),
            },
            &c,
        )
        .await
        .unwrap();
    assert_eq!(tracer.open_spans(), 0);
}
