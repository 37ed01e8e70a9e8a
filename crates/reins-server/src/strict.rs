//! JSON read as the API's schemas say: an object wherever a struct is expected.
//!
//! serde's derived `Deserialize` for a struct also accepts a sequence of its fields in
//! declaration order, so that `[null, null, 1]` reads as `{"tool_calls": 1}` for a
//! budget. No schema in `/v1/openapi.json` allows that, and no client means it: a
//! misplaced array would change what is stored without anyone seeing it. Every request
//! body ([`ApiJson`](crate::extract::ApiJson)) and every JSON value the API reads as a
//! struct (a run's `budget`, an A2A message's decisions) is read through [`Strict`],
//! which refuses a sequence wherever a struct or a struct variant is expected, at any
//! depth, with serde's own message ("invalid type: sequence, expected struct
//! BudgetLimit").
//!
//! What it cannot see: a struct read from input serde buffers first (the variants of
//! internally tagged and untagged enums, flattened fields) is read from the buffer, not
//! through this wrapper. The API's request types use none of these for structs.

use std::fmt;

use serde::Deserialize;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, Unexpected,
    VariantAccess, Visitor,
};

/// A deserializer that refuses a sequence wherever a struct is expected (see the
/// [module docs](self)).
pub(crate) struct Strict<D>(pub(crate) D);

/// `T` read from `value`, sequences refused for structs.
pub(crate) fn from_value<T: de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, serde_json::Error> {
    T::deserialize(Strict(value))
}

/// A request body read through [`Strict`] (what [`ApiJson`](crate::extract::ApiJson)
/// extracts; its errors name the path, as axum's JSON extractor says them).
#[derive(Debug)]
pub(crate) struct StrictBody<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for StrictBody<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(Strict(d)).map(StrictBody)
    }
}

/// Forwards `deserialize_*` methods that take only a visitor.
macro_rules! forward {
    ($($method:ident),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            self.0.$method(Wrap::any(visitor))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<D> {
    type Error = D::Error;

    forward!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_unit_struct(name, Wrap::any(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_newtype_struct(name, Wrap::any(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_tuple(len, Wrap::any(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0
            .deserialize_tuple_struct(name, len, Wrap::any(visitor))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0
            .deserialize_struct(name, fields, Wrap::object(visitor))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, Wrap::any(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// A visitor whose nested values are read through [`Strict`] too; `object`: it reads
/// a struct, and refuses a sequence.
struct Wrap<V> {
    inner: V,
    object: bool,
}

impl<V> Wrap<V> {
    fn any(inner: V) -> Self {
        Self {
            inner,
            object: false,
        }
    }

    fn object(inner: V) -> Self {
        Self {
            inner,
            object: true,
        }
    }
}

/// Forwards `visit_*` methods of plain values.
macro_rules! visit {
    ($($method:ident($ty:ty)),* $(,)?) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    visit!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char),
        visit_str(&str),
        visit_borrowed_str(&'de str),
        visit_string(String),
        visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]),
        visit_byte_buf(Vec<u8>),
    );

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_some(Strict(d))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_newtype_struct(Strict(d))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        if self.object {
            return Err(de::Error::invalid_type(Unexpected::Seq, &self));
        }
        self.inner.visit_seq(Seq(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(Map(map))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_enum(Enum(data))
    }
}

/// A seed whose value is read through [`Strict`].
struct Seed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(Strict(d))
    }
}

struct Seq<A>(A);

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Seq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        self.0.next_element_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

struct Map<A>(A);

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Map<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        self.0.next_key_seed(Seed(seed))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<T::Value, Self::Error> {
        self.0.next_value_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

struct Enum<A>(A);

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Enum<A> {
    type Error = A::Error;
    type Variant = Variant<A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), Self::Error> {
        let (value, variant) = self.0.variant_seed(Seed(seed))?;
        Ok((value, Variant(variant)))
    }
}

struct Variant<A>(A);

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Variant<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), Self::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, Self::Error> {
        self.0.newtype_variant_seed(Seed(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.tuple_variant(len, Wrap::any(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.struct_variant(fields, Wrap::object(visitor))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    struct Limit {
        tokens: Option<u64>,
        calls: Option<u64>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Change {
        Set { limit: Limit },
        Pair(u64, u64),
        Clear,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Body {
        limits: Vec<Limit>,
        maybe: Option<Limit>,
        change: Change,
        any: serde_json::Value,
        pair: (u8, u8),
    }

    #[test]
    fn objects_read_as_serde_reads_them_and_sequences_are_refused_for_structs() {
        let good = json!({
            "limits": [{"tokens": 5}, {"calls": 1}],
            "maybe": {"tokens": 1},
            "change": {"set": {"limit": {"calls": 2}}},
            "any": [1, [2], {"x": [3]}],
            "pair": [1, 2],
        });
        let strict: Body = from_value(good.clone()).unwrap();
        assert_eq!(strict, serde_json::from_value::<Body>(good).unwrap());
        let tuple: Change = from_value(json!({"pair": [1, 2]})).unwrap();
        assert_eq!(tuple, Change::Pair(1, 2));
        let unit: Change = from_value(json!("clear")).unwrap();
        assert_eq!(unit, Change::Clear);

        // What serde alone would take, refused: at the top, in a list, inside an
        // Option, in a struct variant's field, as a struct variant.
        assert!(serde_json::from_value::<Limit>(json!([null, 1])).is_ok());
        let refused = |e: serde_json::Error| {
            assert!(e.to_string().contains("invalid type: sequence"), "{e}");
        };
        refused(from_value::<Limit>(json!([null, 1])).unwrap_err());
        let body = |limits: serde_json::Value,
                    maybe: serde_json::Value,
                    change: serde_json::Value| {
            json!({"limits": limits, "maybe": maybe, "change": change, "any": 1, "pair": [1, 2]})
        };
        let e =
            from_value::<Body>(body(json!([[5, null]]), json!(null), json!("clear"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid type: sequence, expected struct Limit"
        );
        refused(from_value::<Body>(body(json!([]), json!([1, 2]), json!("clear"))).unwrap_err());
        let field = json!({"set": {"limit": [1, null]}});
        refused(from_value::<Body>(body(json!([]), json!(null), field)).unwrap_err());
        let variant = json!({"set": [{"tokens": 1}]});
        refused(from_value::<Body>(body(json!([]), json!(null), variant)).unwrap_err());
        // A request body, from text.
        let text =
            r#"{"limits": [[1, 2]], "maybe": null, "change": "clear", "any": 1, "pair": [1, 2]}"#;
        refused(serde_json::from_str::<StrictBody<Body>>(text).unwrap_err());
    }
}
