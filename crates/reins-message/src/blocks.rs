//! [`Blocks`]: a message's content, shared between copies of the message.
//!
//! A run copies a message several times: into the commit that stores it, into every
//! model request that carries the history, into the in-memory store's record. Each
//! copy of a `Vec<ContentBlock>` copied every block's strings and JSON trees — about
//! a fifth of a tool-call run's allocations. `Blocks` keeps the blocks behind an
//! [`Arc`], so copying a message copies a pointer; changing the content of one copy
//! (through [`DerefMut`]) copies the blocks first if another copy still shares them
//! (copy on write), so no copy ever sees another's change.
//!
//! It reads as a `Vec<ContentBlock>` (through [`Deref`]), serializes as the same JSON
//! array, and converts from and into a `Vec`.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::content::ContentBlock;

/// A message's content blocks, shared between copies and copied on write.
///
/// ```
/// use reins_message::{Blocks, ContentBlock};
///
/// let a: Blocks = vec![ContentBlock::text("hi")].into();
/// let mut b = a.clone(); // shares the blocks
/// b.push(ContentBlock::text("there")); // copies them first
/// assert_eq!(a.len(), 1);
/// assert_eq!(b.len(), 2);
/// assert_eq!(serde_json::to_string(&a).unwrap(), r#"[{"type":"text","text":"hi"}]"#);
/// ```
#[derive(Clone, Default)]
pub struct Blocks(Arc<Vec<ContentBlock>>);

impl Blocks {
    /// No blocks.
    pub fn new() -> Self {
        Self::default()
    }

    /// The blocks as a `Vec`: moved out when no other copy shares them, copied
    /// otherwise.
    pub fn into_vec(self) -> Vec<ContentBlock> {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone())
    }

    /// Whether `self` and `other` share the same blocks (not only equal ones).
    pub fn shares_with(&self, other: &Blocks) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for Blocks {
    type Target = Vec<ContentBlock>;

    fn deref(&self) -> &Vec<ContentBlock> {
        &self.0
    }
}

impl DerefMut for Blocks {
    /// The blocks to change, copied first when another copy shares them.
    fn deref_mut(&mut self) -> &mut Vec<ContentBlock> {
        Arc::make_mut(&mut self.0)
    }
}

impl PartialEq for Blocks {
    fn eq(&self, other: &Self) -> bool {
        self.shares_with(other) || self.0 == other.0
    }
}

impl PartialEq<Vec<ContentBlock>> for Blocks {
    fn eq(&self, other: &Vec<ContentBlock>) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<[ContentBlock]> for Blocks {
    fn eq(&self, other: &[ContentBlock]) -> bool {
        self.0.as_slice() == other
    }
}

impl fmt::Debug for Blocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.as_slice().fmt(f)
    }
}

impl From<Vec<ContentBlock>> for Blocks {
    fn from(blocks: Vec<ContentBlock>) -> Self {
        Self(Arc::new(blocks))
    }
}

impl From<Blocks> for Vec<ContentBlock> {
    fn from(blocks: Blocks) -> Self {
        blocks.into_vec()
    }
}

impl FromIterator<ContentBlock> for Blocks {
    fn from_iter<I: IntoIterator<Item = ContentBlock>>(iter: I) -> Self {
        Self(Arc::new(iter.into_iter().collect()))
    }
}

impl IntoIterator for Blocks {
    type Item = ContentBlock;
    type IntoIter = std::vec::IntoIter<ContentBlock>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

impl<'a> IntoIterator for &'a Blocks {
    type Item = &'a ContentBlock;
    type IntoIter = std::slice::Iter<'a, ContentBlock>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a mut Blocks {
    type Item = &'a mut ContentBlock;
    type IntoIter = std::slice::IterMut<'a, ContentBlock>;

    fn into_iter(self) -> Self::IntoIter {
        Arc::make_mut(&mut self.0).iter_mut()
    }
}

impl Serialize for Blocks {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.as_slice().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Blocks {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<ContentBlock>::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_shares_until_one_side_changes() {
        let a: Blocks = vec![ContentBlock::text("a")].into();
        let mut b = a.clone();
        assert!(a.shares_with(&b));
        b[0] = ContentBlock::text("b");
        assert!(!a.shares_with(&b));
        assert_eq!(a[0].as_text(), Some("a"));
        assert_eq!(b[0].as_text(), Some("b"));
    }

    #[test]
    fn into_vec_moves_when_alone_and_copies_when_shared() {
        let a: Blocks = vec![ContentBlock::text("a")].into();
        let kept = a.clone();
        assert_eq!(a.into_vec(), vec![ContentBlock::text("a")]);
        assert_eq!(kept.len(), 1);
        let mut it = kept.into_iter();
        assert_eq!(it.next(), Some(ContentBlock::text("a")));
        assert_eq!(it.next(), None);
    }

    #[test]
    fn equality_debug_and_json_are_the_vecs() {
        let v = vec![ContentBlock::text("x"), ContentBlock::thinking("y")];
        let b: Blocks = v.clone().into();
        assert_eq!(b, v);
        assert_eq!(b, Blocks::from(v.clone()));
        assert_eq!(format!("{b:?}"), format!("{v:?}"));
        let json = serde_json::to_value(&b).unwrap();
        assert_eq!(json, serde_json::to_value(&v).unwrap());
        let back: Blocks = serde_json::from_value(json).unwrap();
        assert_eq!(back, b);
        assert!(serde_json::from_str::<Blocks>("{}").is_err());
    }
}
