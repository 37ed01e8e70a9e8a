//! Properties: any message round-trips through serde unchanged; arbitrary JSON never
//! panics the deserializer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use reins_message::{ContentBlock, MediaSource, Msg, Role, ToolOutcome, ToolResult, ToolUse};
use serde_json::{Map, Value, json};

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn outcome() -> impl Strategy<Value = ToolOutcome> {
    prop_oneof![
        Just(ToolOutcome::Success),
        Just(ToolOutcome::Error),
        prop::option::of(".{0,10}").prop_map(|note| ToolOutcome::Rejected { note }),
        Just(ToolOutcome::Cancelled),
        Just(ToolOutcome::Interrupted),
        Just(ToolOutcome::Unknown),
    ]
}

fn media() -> impl Strategy<Value = MediaSource> {
    prop_oneof![
        ".{0,20}".prop_map(MediaSource::url),
        ("[a-z]+/[a-z]+", "[A-Za-z0-9+/=]{0,20}").prop_map(|(t, d)| MediaSource::base64(t, d)),
    ]
}

fn leaf_block() -> impl Strategy<Value = ContentBlock> {
    prop_oneof![
        ".{0,30}".prop_map(ContentBlock::text),
        (".{0,30}", prop::option::of("[a-zA-Z0-9]{0,16}")).prop_map(|(thinking, signature)| {
            ContentBlock::Thinking {
                thinking,
                signature,
            }
        }),
        (
            "[a-z0-9_]{1,10}",
            "[a-z_]{1,10}",
            json_value(),
            prop::option::of(".{0,10}")
        )
            .prop_map(
                |(id, name, input, raw_input)| ContentBlock::ToolUse(ToolUse {
                    id,
                    name,
                    input,
                    raw_input
                })
            ),
        media().prop_map(|source| ContentBlock::Image { source }),
        media().prop_map(|source| ContentBlock::Audio { source }),
    ]
}

fn block() -> impl Strategy<Value = ContentBlock> {
    prop_oneof![
        4 => leaf_block(),
        1 => ("[a-z0-9_]{1,10}", "[a-z_]{1,10}", prop::collection::vec(leaf_block(), 0..3), outcome(),
              prop::collection::btree_map("[a-z]{1,5}", json_value(), 0..2))
            .prop_map(|(id, name, output, outcome, md)| {
                let mut r = ToolResult::new(id, name, outcome, output);
                r.metadata = md.into_iter().collect();
                ContentBlock::ToolResult(r)
            }),
    ]
}

fn role() -> impl Strategy<Value = Role> {
    prop_oneof![
        Just(Role::System),
        Just(Role::User),
        Just(Role::Assistant),
        Just(Role::Tool)
    ]
}

fn msg() -> impl Strategy<Value = Msg> {
    (
        ".{1,20}",
        prop::option::of(".{0,8}"),
        role(),
        prop::collection::vec(block(), 0..5),
        prop::collection::btree_map("[a-z.]{1,8}", json_value(), 0..3),
        0i64..4_000_000_000_000,
    )
        .prop_map(|(id, name, role, content, md, millis)| Msg {
            id,
            name,
            role,
            content: content.into(),
            metadata: md.into_iter().collect(),
            created_at: DateTime::<Utc>::from_timestamp_millis(millis).unwrap(),
        })
}

proptest! {
    #[test]
    fn msg_round_trips(m in msg()) {
        let json = m.to_json().unwrap();
        prop_assert_eq!(Msg::from_json(&json).unwrap(), m.clone());
        let value = serde_json::to_value(&m).unwrap();
        prop_assert_eq!(reins_message::from_json_value::<Msg>(value).unwrap(), m);
    }

    #[test]
    fn arbitrary_json_never_panics(v in json_value()) {
        let text = v.to_string();
        let _ = Msg::from_json(&text);
        let _ = reins_message::from_json_str::<ContentBlock>(&text);
        let _ = reins_message::from_json_value::<Vec<Msg>>(v);
    }

    #[test]
    fn arbitrary_text_never_panics(s in ".{0,200}") {
        let _ = Msg::from_json(&s);
        let _ = Msg::list_from_json(&s);
    }

    #[test]
    fn message_shaped_json_never_panics(
        content in prop::collection::vec(json_value(), 0..4),
        role in json_value(),
    ) {
        let v = json!({"id": "x", "role": role, "content": content, "created_at": "2026-01-01T00:00:00Z"});
        let _ = reins_message::from_json_value::<Msg>(v);
    }
}
