//! Structured output: typed final answers in every mode, honest bounded retries, tools
//! and pauses before the answer, a run resumed in another process still returning its
//! typed answer, and the request each mode sends to each provider.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::process::Stdio;

use reins_agent::{
    Agent, AgentError, Decision, FINAL_ANSWER_TOOL, OUTPUT_MARK, OutputMode, OutputSpec, RunEvent,
    RunStatus,
};
use reins_message::{Msg, Role};
use reins_model::{ModelCapabilities, ScriptedModel, ScriptedResponse};
use reins_tool::ToolPolicy;
use serde::Deserialize;
use serde_json::{Value, json};
use support::*;

#[derive(Debug, Deserialize, PartialEq, schemars::JsonSchema)]
struct Weather {
    /// The city.
    city: String,
    /// Degrees Celsius.
    celsius: f64,
}

fn native() -> ModelCapabilities {
    ModelCapabilities::new(true, true)
}

fn tools_only() -> ModelCapabilities {
    ModelCapabilities::new(false, true)
}

fn neither() -> ModelCapabilities {
    ModelCapabilities::new(false, false)
}

fn answer_call(args: Value) -> ScriptedResponse {
    ScriptedResponse::tool_call_with_id(
        format!("ans_{}", reins_message::new_id()),
        FINAL_ANSWER_TOOL,
        args,
    )
}

fn typed_agent(model: ScriptedModel, counter: &Counter) -> Agent {
    agent(model, toolkit(counter, ToolPolicy::confirm()))
        .output::<Weather>()
        .build()
        .unwrap()
}

#[tokio::test]
async fn valid_first_time_in_every_mode() {
    let cases = [
        (native(), text(r#"{"city": "Oslo", "celsius": -3.5}"#)),
        (
            tools_only(),
            answer_call(json!({"city": "Oslo", "celsius": -3.5})),
        ),
        (
            neither(),
            answer_call(json!({"city": "Oslo", "celsius": -3.5})),
        ),
        // A model that answers in text though it was asked for the tool: valid JSON
        // is accepted.
        (
            neither(),
            text("```json\n{\"city\": \"Oslo\", \"celsius\": -3.5}\n```"),
        ),
    ];
    for (caps, answer) in cases {
        let counter = Counter::default();
        let model = ScriptedModel::new([answer]).with_capabilities(caps);
        let agent = typed_agent(model.clone(), &counter);
        let s = agent.session("w").await.unwrap();
        let out = s.send(Msg::user("weather in Oslo?")).await.unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{caps:?}");
        assert_eq!(
            out.parsed::<Weather>().unwrap(),
            Weather {
                city: "Oslo".into(),
                celsius: -3.5
            }
        );
        let msgs = s.messages().await.unwrap();
        assert_valid(&msgs);
        assert!(
            msgs.iter()
                .any(|m| m.metadata.get(OUTPUT_MARK) == Some(&json!("answer")))
        );
        // The request asked in the mode the capabilities allow.
        let req = model.last_request().unwrap();
        match OutputMode::Auto.resolve(caps) {
            OutputMode::NativeSchema => {
                assert!(matches!(
                    req.options.response_format,
                    Some(reins_model::ResponseFormat::JsonSchema { ref name, .. }) if name == "Weather"
                ));
                assert!(!req.tools.iter().any(|t| t.name == FINAL_ANSWER_TOOL));
            }
            OutputMode::AnswerTool => {
                assert!(req.tools.iter().any(|t| t.name == FINAL_ANSWER_TOOL));
                assert_eq!(req.tool_choice, reins_model::ToolChoice::Required);
            }
            _ => {
                assert!(req.tools.iter().any(|t| t.name == FINAL_ANSWER_TOOL));
                assert_eq!(req.tool_choice, reins_model::ToolChoice::Auto);
                assert!(req.messages[0].text().contains(FINAL_ANSWER_TOOL));
            }
        }
    }
}

#[tokio::test]
async fn invalid_then_valid_tells_the_model_what_was_wrong_and_keeps_the_invalid_answer() {
    for (caps, bad, good) in [
        (
            native(),
            text(r#"{"city": "Oslo"}"#),
            text(r#"{"city": "Oslo", "celsius": 2}"#),
        ),
        (
            tools_only(),
            answer_call(json!({"city": "Oslo", "celsius": "warm"})),
            answer_call(json!({"city": "Oslo", "celsius": 2})),
        ),
    ] {
        let counter = Counter::default();
        let model = ScriptedModel::new([bad, good]).with_capabilities(caps);
        let agent = typed_agent(model.clone(), &counter);
        let s = agent.session("w").await.unwrap();
        let out = s.send(Msg::user("weather?")).await.unwrap();
        assert_eq!(out.parsed::<Weather>().unwrap().celsius, 2.0, "{caps:?}");
        let msgs = s.messages().await.unwrap();
        assert_valid(&msgs);
        let marks: Vec<&Value> = msgs
            .iter()
            .filter_map(|m| m.metadata.get(OUTPUT_MARK))
            .collect();
        assert_eq!(
            marks,
            [&json!("invalid"), &json!("feedback"), &json!("answer")],
            "{caps:?}"
        );
        // The second request carried the feedback naming the problem.
        let feedback = model.requests()[1].messages.last().unwrap().text();
        let feedback = if feedback.is_empty() {
            model.requests()[1]
                .messages
                .last()
                .unwrap()
                .tool_results_iter()
                .map(|r| r.text())
                .collect::<String>()
        } else {
            feedback
        };
        assert!(feedback.contains("celsius"), "{caps:?}: {feedback}");
    }
}

#[tokio::test]
async fn invalid_beyond_the_bound_is_a_typed_error_with_the_raw_answer() {
    let counter = Counter::default();
    let model = ScriptedModel::new([
        answer_call(json!({"city": 1})),
        answer_call(json!({"city": 2})),
    ])
    .with_capabilities(tools_only());
    let agent = agent(model, toolkit(&counter, ToolPolicy::confirm()))
        .output::<Weather>()
        .max_output_retries(1)
        .build()
        .unwrap();
    let s = agent.session("w").await.unwrap();
    let err = s.send(Msg::user("weather?")).await.unwrap_err();
    match &err {
        AgentError::InvalidOutput {
            raw,
            problems,
            attempts,
        } => {
            assert_eq!(*attempts, 2);
            assert!(raw.contains("\"city\":2"), "{raw}");
            assert!(!problems.is_empty());
        }
        other => panic!("expected InvalidOutput, got {other}"),
    }
    // Nothing lost, still provider-valid, and the session goes on.
    let msgs = s.messages().await.unwrap();
    assert_valid(&msgs);
    assert_eq!(
        msgs.iter()
            .filter(|m| m.metadata.get(OUTPUT_MARK) == Some(&json!("invalid")))
            .count(),
        2
    );
    assert!(!s.is_paused().await.unwrap());
}

#[tokio::test]
async fn tools_and_a_pause_come_before_the_typed_answer() {
    let counter = Counter::default();
    let model = ScriptedModel::new([
        call("d1", "delete_file", json!({"path": "cache"})),
        answer_call(json!({"city": "Bergen", "celsius": 11})),
    ])
    .with_capabilities(tools_only());
    let agent = typed_agent(model.clone(), &counter);
    let s = agent.session("w").await.unwrap();
    let out = s
        .send(Msg::user("clear the cache, then the weather"))
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    assert!(out.structured.is_none());
    assert!(out.parsed::<Weather>().is_err());
    // With other tools, the choice is "any tool", not the answer itself.
    assert_eq!(
        model.requests()[0].tool_choice,
        reins_model::ToolChoice::Required
    );
    let out = s.resolve(vec![Decision::approve("d1")]).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.parsed::<Weather>().unwrap().city, "Bergen");
    assert_eq!(counter.count("delete_file"), 1);
    assert_valid(&s.messages().await.unwrap());
}

#[tokio::test]
async fn an_answer_mixed_with_other_calls_is_refused_and_the_others_go_on() {
    let counter = Counter::default();
    let mixed = ScriptedResponse::tool_call_with_id("q1", "search_web", json!({"query": "oslo"}))
        .then_tool_call(FINAL_ANSWER_TOOL, json!({"city": "Oslo", "celsius": 1}));
    let model = ScriptedModel::new([mixed, answer_call(json!({"city": "Oslo", "celsius": 1}))])
        .with_capabilities(tools_only());
    let agent = typed_agent(model, &counter);
    let s = agent.session("w").await.unwrap();
    let out = s.send(Msg::user("weather")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("search_web"), 1);
    let msgs = s.messages().await.unwrap();
    assert_valid(&msgs);
    assert!(
        msgs.iter()
            .flat_map(|m| m.tool_results_iter())
            .any(|r| r.text().contains("call `final_answer` alone"))
    );
}

#[tokio::test]
async fn the_answer_streams_as_output_deltas() {
    for (caps, answer) in [
        (native(), text(r#"{"city": "Tromsø", "celsius": -10.25}"#)),
        (
            tools_only(),
            answer_call(json!({"city": "Tromsø", "celsius": -10.25})),
        ),
    ] {
        let counter = Counter::default();
        let model = ScriptedModel::new([answer])
            .with_capabilities(caps)
            .with_chunk_size(4);
        let agent = typed_agent(model, &counter);
        let mut run = agent
            .session("w")
            .await
            .unwrap()
            .send(Msg::user("weather"))
            .start()
            .await
            .unwrap();
        let mut json = String::new();
        let mut pieces = 0;
        while let Some(ev) = run.next_event().await {
            if let RunEvent::OutputDelta { json: j } = ev {
                json.push_str(&j);
                pieces += 1;
            }
        }
        let out = run.wait().await.unwrap();
        assert!(pieces > 1, "{caps:?}: the answer came in {pieces} piece(s)");
        let streamed: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(Some(streamed), out.structured, "{caps:?}");
    }
}

#[tokio::test]
async fn a_per_call_schema_overrides_the_agent_and_bad_specs_are_refused() {
    #[derive(Deserialize, schemars::JsonSchema)]
    struct Count {
        n: u32,
    }
    let counter = Counter::default();
    let model = ScriptedModel::new([answer_call(json!({"n": 3})), text("free text again")])
        .with_capabilities(tools_only());
    let agent = agent(model, toolkit(&counter, ToolPolicy::confirm()))
        .build()
        .unwrap();
    let s = agent.session("w").await.unwrap();
    let out = s
        .send(Msg::user("how many?"))
        .output::<Count>()
        .await
        .unwrap();
    assert_eq!(out.parsed::<Count>().unwrap().n, 3);
    // The next plain call is free text again.
    let out = s.send(Msg::user("thanks")).await.unwrap();
    assert_eq!(out.message.text(), "free text again");
    assert!(out.structured.is_none());
    let err = s
        .send(Msg::user("x"))
        .output_spec(OutputSpec::new("bad", json!("not a schema")))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("must be a JSON object"), "{err}");
    // A tool named like the answer tool is refused at build time.
    let mut t = reins_tool::Toolkit::new();
    t.add(reins_tool::Toolkit::function(
        FINAL_ANSWER_TOOL,
        "clash",
        |_: reins_tool::NoArgs, _| async { Ok::<_, reins_tool::ToolError>("x") },
    ))
    .unwrap();
    let err = Agent::builder()
        .model(ScriptedModel::new([]))
        .toolkit(t)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("reserves"), "{err}");
}

// ----- across processes ------------------------------------------------------------

/// The child: opens the paused session with an agent that has NO output schema,
/// approves, and prints the typed answer the stored run asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_run_resumed_in_another_process_returns_its_typed_answer"]
async fn structured_child() {
    let spec = StoreSpec::from_env();
    let counter = Counter::default();
    let model = ScriptedModel::new([answer_call(json!({"city": "Reykjavik", "celsius": 4}))])
        .with_capabilities(tools_only());
    let agent = agent(model, toolkit(&counter, ToolPolicy::confirm()))
        .store_arc(spec.open().await)
        .build()
        .unwrap();
    let s = agent.session("typed").await.unwrap();
    let out = s.resolve(vec![Decision::approve("d1")]).await.unwrap();
    let w: Weather = out.parsed().unwrap();
    tell_parent(&format!(
        "ANSWER {} {} tools={}",
        w.city,
        w.celsius,
        counter.total()
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_resumed_in_another_process_returns_its_typed_answer() {
    let dir = tempfile::tempdir().unwrap();
    for spec in harness_stores(dir.path(), "typed") {
        let counter = Counter::default();
        let model = ScriptedModel::new([call("d1", "delete_file", json!({"path": "old"}))])
            .with_capabilities(tools_only());
        let agent = agent(model, toolkit(&counter, ToolPolicy::confirm()))
            .output::<Weather>()
            .store_arc(spec.open().await)
            .build()
            .unwrap();
        let out = agent
            .session("typed")
            .await
            .unwrap()
            .send(Msg::user("tidy up, then the weather"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused);
        let mut cmd = child_test("structured_child");
        for (k, v) in spec.env() {
            cmd.env(k, v);
        }
        let outp = cmd.stderr(Stdio::inherit()).output().unwrap();
        let stdout = String::from_utf8_lossy(&outp.stdout);
        assert!(
            stdout.contains("ANSWER Reykjavik 4 tools=1"),
            "{}: child said {stdout}",
            spec.label()
        );
        let msgs = agent
            .session("typed")
            .await
            .unwrap()
            .messages()
            .await
            .unwrap();
        assert_valid(&msgs);
        assert_eq!(msgs.last().unwrap().role, Role::Tool);
    }
}

// ----- property ----------------------------------------------------------------------

mod property {
    use super::*;
    use proptest::prelude::*;

    fn answer() -> impl Strategy<Value = ScriptedResponse> {
        prop_oneof![
            Just(text(r#"{"city": "A", "celsius": 1}"#)),
            Just(text("not json")),
            Just(text(r#"{"city": 5}"#)),
            Just(answer_call(json!({"city": "B", "celsius": 2.5}))),
            Just(answer_call(json!({"celsius": "x"}))),
            Just(answer_call(json!([1, 2]))),
            Just(call("s1", "search_web", json!({"query": "q"}))),
            Just(
                ScriptedResponse::tool_call_with_id("s2", "search_web", json!({"query": "r"}))
                    .then_tool_call(FINAL_ANSWER_TOOL, json!({"city": "C", "celsius": 3}))
            ),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
        #[test]
        fn any_answers_end_validated_or_with_the_typed_error(
            answers in proptest::collection::vec(answer(), 1..8),
            caps in prop_oneof![Just(native()), Just(tools_only()), Just(neither())],
            retries in 0u32..3,
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let counter = Counter::default();
                // After the scripted answers, the model keeps answering validly.
                let valid = if caps.json_schema {
                    text(r#"{"city": "Z", "celsius": 0}"#)
                } else {
                    answer_call(json!({"city": "Z", "celsius": 0}))
                };
                let mut script = answers.clone();
                script.extend(std::iter::repeat_n(valid, 12));
                let model = ScriptedModel::new(script).with_capabilities(caps);
                let agent = agent(model, toolkit(&counter, ToolPolicy::auto()))
                    .output::<Weather>()
                    .max_output_retries(retries)
                    .max_iters(30)
                    .build()
                    .unwrap();
                let s = agent.session("p").await.unwrap();
                match s.send(Msg::user("go")).await {
                    Ok(out) => {
                        prop_assert_eq!(out.status, RunStatus::Completed);
                        let v = out.structured.clone().expect("a completed run has its answer");
                        prop_assert!(OutputSpec::of::<Weather>().validate(&v).is_ok());
                        prop_assert!(out.parsed::<Weather>().is_ok());
                    }
                    Err(AgentError::InvalidOutput { attempts, .. }) => {
                        prop_assert_eq!(attempts, retries + 1);
                    }
                    Err(e) => prop_assert!(false, "unexpected error {}", e),
                }
                assert_valid(&s.messages().await.unwrap());
                Ok(())
            })?;
        }
    }
}

// ----- the wire: what each mode sends to each provider -------------------------------

/// The request the agent makes in `mode`, rendered by each provider's real request
/// builder (the body that goes over HTTP).
async fn bodies(mode: OutputMode, with_tools: bool) -> (Value, Value) {
    let counter = Counter::default();
    let model = ScriptedModel::new([text(r#"{"city": "Oslo", "celsius": 1}"#)]);
    let tools = if with_tools {
        toolkit(&counter, ToolPolicy::confirm())
    } else {
        reins_tool::Toolkit::new()
    };
    let agent = agent(model.clone(), tools)
        .output::<Weather>()
        .output_mode(mode)
        .build()
        .unwrap();
    let _ = agent
        .session("wire")
        .await
        .unwrap()
        .send(Msg::user("weather in Oslo?"))
        .await;
    let mut req = model.requests().remove(0);
    for m in &mut req.messages {
        m.id = "[id]".to_owned();
    }
    let openai = reins_openai::OpenAiChat::openai("gpt-4o-mini")
        .request_body(&req)
        .unwrap();
    let anthropic = reins_anthropic::AnthropicChat::new("claude-sonnet-4-5")
        .request_body(&req)
        .unwrap();
    (openai, anthropic)
}

#[tokio::test]
async fn request_bodies_per_mode_and_provider() {
    for (name, mode, with_tools) in [
        ("native_schema", OutputMode::NativeSchema, false),
        ("answer_tool_alone", OutputMode::AnswerTool, false),
        ("answer_tool_with_tools", OutputMode::AnswerTool, true),
        ("prompted_tool", OutputMode::PromptedTool, false),
    ] {
        let (openai, anthropic) = bodies(mode, with_tools).await;
        let _sorted = sorted_maps();
        insta::assert_json_snapshot!(format!("wire_{name}_openai"), openai);

        let _sorted = sorted_maps();
        insta::assert_json_snapshot!(format!("wire_{name}_anthropic"), anthropic);
    }
}

/// Snapshots with object keys sorted: they pin the content, not the order serde_json
/// keeps keys in (insertion order when a dependency turns on `preserve_order`).
fn sorted_maps() -> insta::internals::SettingsBindDropGuard {
    let mut settings = insta::Settings::clone_current();
    settings.set_sort_maps(true);
    settings.bind_to_scope()
}
