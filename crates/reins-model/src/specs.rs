//! [`ToolSpecs`]: the tools of a request, shared between requests.
//!
//! An agent offers the same tools in every request of every run. Copying each spec
//! (name, description, JSON Schema) into each request was about 6 % of a tool-call
//! run's instructions, so a request holds them behind an `Arc`: building a request
//! costs one reference count, and a hook or the agent that changes a request's tools
//! (pushing the structured-output tool, adding client tools) copies them then, and
//! only for that request.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use reins_message::ToolSpec;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The tools a request offers: a `Vec<ToolSpec>` shared by `Arc` and copied on write.
/// It derefs to `Vec<ToolSpec>`, so reading and changing it look as they would on a
/// vector; it serializes as a JSON array.
///
/// ```
/// use reins_message::ToolSpec;
/// use reins_model::ToolSpecs;
/// use serde_json::json;
///
/// let shared = ToolSpecs::from(vec![ToolSpec::new("add", "Add two numbers.", json!({"type": "object"}))]);
/// let mut mine = shared.clone(); // no copy
/// assert!(mine.shares_with(&shared));
/// mine.push(ToolSpec::new("answer", "The final answer.", json!({"type": "object"})));
/// assert_eq!((shared.len(), mine.len()), (1, 2)); // copied on write; the original is unchanged
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolSpecs(Arc<Vec<ToolSpec>>);

impl ToolSpecs {
    /// Whether both hold the very same specs (no copy was made between them).
    pub fn shares_with(&self, other: &ToolSpecs) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for ToolSpecs {
    type Target = Vec<ToolSpec>;

    fn deref(&self) -> &Vec<ToolSpec> {
        &self.0
    }
}

/// Changing the specs copies them first when another request shares them.
impl DerefMut for ToolSpecs {
    fn deref_mut(&mut self) -> &mut Vec<ToolSpec> {
        Arc::make_mut(&mut self.0)
    }
}

impl From<Vec<ToolSpec>> for ToolSpecs {
    fn from(v: Vec<ToolSpec>) -> Self {
        Self(Arc::new(v))
    }
}

impl FromIterator<ToolSpec> for ToolSpecs {
    fn from_iter<I: IntoIterator<Item = ToolSpec>>(iter: I) -> Self {
        Self(Arc::new(iter.into_iter().collect()))
    }
}

impl<'a> IntoIterator for &'a ToolSpecs {
    type Item = &'a ToolSpec;
    type IntoIter = std::slice::Iter<'a, ToolSpec>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Serialize for ToolSpecs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.as_slice().serialize(s)
    }
}

impl<'de> Deserialize<'de> for ToolSpecs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<ToolSpec>::deserialize(d).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serializes_as_the_array_it_holds() {
        let specs = ToolSpecs::from(vec![ToolSpec::new("t", "d", json!({"type": "object"}))]);
        let text = serde_json::to_string(&specs).unwrap();
        assert!(text.starts_with('['), "{text}");
        let back: ToolSpecs = serde_json::from_str(&text).unwrap();
        assert_eq!(back, specs);
        assert!(!back.shares_with(&specs));
    }
}
