#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! Invariants of the argument validator: it never panics, it accepts what serde would
//! produce for a typed struct, and it agrees with serde on missing required fields.

use proptest::prelude::*;
use reins_tool::{schema_for, validate};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Fast,
    Careful,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Inner {
    label: String,
    weight: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Args {
    name: String,
    count: u32,
    mode: Mode,
    tags: Vec<String>,
    inner: Option<Inner>,
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[a-z]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_args() -> impl Strategy<Value = Args> {
    (
        "[a-z ]{0,12}",
        any::<u32>(),
        prop_oneof![Just(Mode::Fast), Just(Mode::Careful)],
        prop::collection::vec("[a-z]{0,5}", 0..4),
        prop::option::of(("[a-z]{0,5}", prop::option::of(-1e6f64..1e6))),
    )
        .prop_map(|(name, count, mode, tags, inner)| Args {
            name,
            count,
            mode,
            tags,
            inner: inner.map(|(label, weight)| Inner { label, weight }),
        })
}

proptest! {
    #[test]
    fn never_panics_on_any_schema_or_value(schema in arb_json(), value in arb_json()) {
        let _ = validate(&schema, &value);
    }

    #[test]
    fn accepts_every_serialized_value_of_the_type(args in arb_args()) {
        let schema = schema_for::<Args>();
        let value = serde_json::to_value(&args).unwrap();
        prop_assert_eq!(validate(&schema, &value), Ok(()));
    }

    #[test]
    fn agrees_with_serde_about_arbitrary_objects(value in arb_json()) {
        let schema = schema_for::<Args>();
        let serde_ok = serde_json::from_value::<Args>(value.clone()).is_ok();
        let schema_ok = validate(&schema, &value).is_ok();
        // Whatever serde accepts, the schema accepts too (the schema is never stricter).
        prop_assert!(!serde_ok || schema_ok, "serde accepted {value} but the schema did not");
    }
}
