//! [`LazySpec`]: a tool's spec whose JSON Schema is made when first needed.
//!
//! A typed tool's schema depends only on its argument type, so it is generated (and
//! checked) once per type per process, kept in a cache, and copied into the tool's
//! [`ToolSpec`] the first time a model request or a caller asks for it. Building
//! agents costs no schema work after the first, and an agent that never runs holds no
//! schema of its own.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use reins_message::ToolSpec;
use schemars::JsonSchema;
use serde_json::Value;

use crate::error::Error;
use crate::schema::{check_parameters, schema_for};

/// Where a typed tool's schema comes from (the cache, for its argument type).
type SchemaSource = fn() -> Arc<Value>;

/// A tool's spec; see the module docs.
pub(crate) struct LazySpec {
    /// Name, description and schema source, until the spec is made.
    head: Option<(String, String, SchemaSource)>,
    spec: OnceLock<ToolSpec>,
}

impl LazySpec {
    /// A spec made already (a dynamic tool's, or a typed tool's whose argument type
    /// is not `'static`).
    pub(crate) fn ready(spec: ToolSpec) -> Self {
        Self {
            head: None,
            spec: OnceLock::from(spec),
        }
    }

    /// The spec of a tool whose arguments are `A`: the schema comes from the cache.
    pub(crate) fn typed<A: JsonSchema + 'static>(name: &str, description: &str) -> Self {
        Self {
            head: Some((
                name.to_owned(),
                description.to_owned(),
                cached_schema::<A> as SchemaSource,
            )),
            spec: OnceLock::new(),
        }
    }

    /// The tool's name.
    pub(crate) fn name(&self) -> &str {
        match (self.spec.get(), &self.head) {
            (Some(s), _) => &s.name,
            (None, Some((name, _, _))) => name,
            (None, None) => "",
        }
    }

    /// The spec, made now if it was not yet.
    pub(crate) fn get(&self) -> &ToolSpec {
        self.spec.get_or_init(|| match &self.head {
            Some((name, description, schema)) => {
                ToolSpec::new(name.clone(), description.clone(), Value::clone(&schema()))
            }
            None => ToolSpec::new(String::new(), String::new(), Value::Null),
        })
    }

    /// Checks that the schema describes an object (at registration).
    pub(crate) fn check(&self) -> Result<(), Error> {
        match (self.spec.get(), &self.head) {
            (Some(s), _) => check_parameters(&s.name, &s.parameters),
            (None, Some((name, _, schema))) => check_parameters(name, &schema()),
            (None, None) => Ok(()),
        }
    }
}

/// The schema of `A`, generated on the first call for each type.
fn cached_schema<A: JsonSchema + 'static>() -> Arc<Value> {
    static CACHE: OnceLock<Mutex<HashMap<TypeId, Arc<Value>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let key = TypeId::of::<A>();
    if let Some(s) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return s.clone();
    }
    // Generated outside the lock: two threads may both generate it once; both get
    // the same schema.
    let fresh = Arc::new(schema_for::<A>());
    cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(key)
        .or_insert(fresh)
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// The path.
        path: String,
    }

    #[test]
    fn the_spec_is_made_on_first_use_and_matches_the_eager_one() {
        let lazy = LazySpec::typed::<Args>("read", "Read a file");
        assert_eq!(lazy.name(), "read");
        assert!(lazy.spec.get().is_none());
        assert!(lazy.check().is_ok());
        assert!(lazy.spec.get().is_none());
        let eager = ToolSpec::new("read", "Read a file", schema_for::<Args>());
        assert_eq!(lazy.get(), &eager);
        assert_eq!(lazy.name(), "read");
        assert!(Arc::ptr_eq(
            &cached_schema::<Args>(),
            &cached_schema::<Args>()
        ));
    }
}
