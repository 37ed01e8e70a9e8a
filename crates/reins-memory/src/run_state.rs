//! [`RunStateData`]: the run state a [`Commit`](crate::Commit) writes.
//!
//! A run commits its state several times per run (a tool-call run four times). Turning
//! it into a `serde_json::Value` each time, only for the in-memory store to keep the
//! tree and drop the last one, was a quarter of a tool-call run's instructions. So a
//! commit carries the run's own typed value behind an `Arc`: the in-memory store keeps
//! it as it is and makes JSON only when a session is read, and the SQL stores
//! serialize it straight to text. A `Value` still works (imports, tests, stores written
//! elsewhere).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

/// A run state as a commit carries it: either JSON or a typed value shared by `Arc`.
///
/// ```
/// use reins_memory::RunStateData;
/// use serde_json::json;
///
/// #[derive(Debug, PartialEq, serde::Serialize)]
/// struct Step { step: u32 }
///
/// let typed = RunStateData::typed(std::sync::Arc::new(Step { step: 2 }));
/// assert_eq!(typed.to_value().unwrap(), json!({"step": 2}));
/// assert_eq!(typed.to_json().unwrap(), r#"{"step":2}"#);
/// assert_eq!(typed, RunStateData::from(json!({"step": 2})));
/// assert_eq!(typed.downcast::<Step>().map(|s| s.step), Some(2));
/// ```
#[derive(Clone)]
pub struct RunStateData(Repr);

#[derive(Clone)]
enum Repr {
    Json(Value),
    Typed(Arc<dyn Typed>),
}

/// What a typed run state must offer: JSON on demand, equality, and its own type back.
trait Typed: Any + Send + Sync + fmt::Debug {
    fn to_value(&self) -> serde_json::Result<Value>;
    fn to_json(&self) -> serde_json::Result<String>;
    fn same(&self, other: &dyn Typed) -> Option<bool>;
    fn as_any(&self) -> &dyn Any;
}

impl<T> Typed for T
where
    T: Serialize + PartialEq + fmt::Debug + Send + Sync + 'static,
{
    fn to_value(&self) -> serde_json::Result<Value> {
        serde_json::to_value(self)
    }

    fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }

    fn same(&self, other: &dyn Typed) -> Option<bool> {
        other.as_any().downcast_ref::<T>().map(|o| self == o)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl RunStateData {
    /// A typed run state, kept as it is by the in-memory store.
    pub fn typed<T>(state: Arc<T>) -> Self
    where
        T: Serialize + PartialEq + fmt::Debug + Send + Sync + 'static,
    {
        Self(Repr::Typed(state))
    }

    /// The state as a JSON value (a typed state is serialized).
    pub fn to_value(&self) -> serde_json::Result<Value> {
        match &self.0 {
            Repr::Json(v) => Ok(v.clone()),
            Repr::Typed(t) => t.to_value(),
        }
    }

    /// The state as a JSON value, without a copy when it is one already.
    pub fn into_value(self) -> serde_json::Result<Value> {
        match self.0 {
            Repr::Json(v) => Ok(v),
            Repr::Typed(t) => t.to_value(),
        }
    }

    /// The state as JSON text (a typed state is serialized straight to text).
    pub fn to_json(&self) -> serde_json::Result<String> {
        match &self.0 {
            Repr::Json(v) => serde_json::to_string(v),
            Repr::Typed(t) => t.to_json(),
        }
    }

    /// The typed value, when this holds a `T`.
    pub fn downcast<T: 'static>(&self) -> Option<&T> {
        match &self.0 {
            Repr::Json(_) => None,
            Repr::Typed(t) => t.as_any().downcast_ref::<T>(),
        }
    }
}

impl From<Value> for RunStateData {
    fn from(v: Value) -> Self {
        Self(Repr::Json(v))
    }
}

impl fmt::Debug for RunStateData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Json(v) => f.debug_tuple("Json").field(v).finish(),
            Repr::Typed(t) => f.debug_tuple("Typed").field(t).finish(),
        }
    }
}

/// Two states are equal when their JSON is (two typed values of one type compare
/// directly, without JSON).
impl PartialEq for RunStateData {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Json(a), Repr::Json(b)) => a == b,
            (Repr::Typed(a), Repr::Typed(b)) => match a.same(b.as_ref()) {
                Some(same) => same,
                None => a.to_value().ok() == b.to_value().ok(),
            },
            (Repr::Json(v), Repr::Typed(t)) | (Repr::Typed(t), Repr::Json(v)) => {
                t.to_value().ok().as_ref() == Some(v)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, PartialEq, Serialize)]
    struct A {
        n: u32,
    }

    #[derive(Debug, PartialEq, Serialize)]
    struct B {
        n: u32,
    }

    #[test]
    fn equality_follows_the_json() {
        let a = RunStateData::typed(Arc::new(A { n: 1 }));
        assert_eq!(a, RunStateData::typed(Arc::new(A { n: 1 })));
        assert_ne!(a, RunStateData::typed(Arc::new(A { n: 2 })));
        // Different types with the same JSON are the same stored state.
        assert_eq!(a, RunStateData::typed(Arc::new(B { n: 1 })));
        assert_eq!(a, RunStateData::from(json!({"n": 1})));
        assert_ne!(RunStateData::from(json!({"n": 2})), a);
    }

    #[test]
    fn json_forms_agree() {
        let a = RunStateData::typed(Arc::new(A { n: 7 }));
        assert_eq!(a.to_json().unwrap(), "{\"n\":7}");
        assert_eq!(a.clone().into_value().unwrap(), json!({"n": 7}));
        assert!(a.downcast::<B>().is_none());
        let j = RunStateData::from(json!({"n": 7}));
        assert_eq!(j.to_json().unwrap(), a.to_json().unwrap());
        assert!(j.downcast::<A>().is_none());
    }
}
