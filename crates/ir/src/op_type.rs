//! A node's op type, one shared allocation per distinct type in a graph.
//!
//! A million-node model has a few dozen op types. Held as a string per node, each lookup of
//! an op's meaning read a cold heap allocation (a cache miss per node per stage) and each
//! node paid 32 bytes for it. The graph builder interns them instead.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpType(Arc<str>);

impl OpType {
    pub fn new(s: &str) -> OpType {
        OpType(Arc::from(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether both are the same interned allocation (then they are equal; equal op types
    /// from different graphs may not be).
    pub fn same_allocation(&self, other: &OpType) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Default for OpType {
    fn default() -> OpType {
        OpType::new("")
    }
}

impl Deref for OpType {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for OpType {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

// Hashes as the `str` it holds (the derive hashes the `Arc<str>`'s contents), so maps keyed
// by op type can be searched with a `&str`.
impl Borrow<str> for OpType {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for OpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for OpType {
    fn from(s: &str) -> OpType {
        OpType::new(s)
    }
}

impl From<String> for OpType {
    fn from(s: String) -> OpType {
        OpType(Arc::from(s))
    }
}

impl From<OpType> for String {
    fn from(o: OpType) -> String {
        o.0.to_string()
    }
}

impl PartialEq<str> for OpType {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for OpType {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for OpType {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<OpType> for str {
    fn eq(&self, other: &OpType) -> bool {
        self == &*other.0
    }
}

impl PartialEq<OpType> for &str {
    fn eq(&self, other: &OpType) -> bool {
        *self == &*other.0
    }
}

/// The op types of one graph being built: each distinct type allocated once.
#[derive(Debug, Default)]
pub(crate) struct OpTypes {
    known: rustc_hash::FxHashSet<OpType>,
}

impl OpTypes {
    pub(crate) fn intern(&mut self, s: &str) -> OpType {
        if let Some(o) = self.known.get(s) {
            return o.clone();
        }
        let o = OpType::new(s);
        self.known.insert(o.clone());
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interned_types_share_one_allocation_and_compare_as_strings() {
        let mut t = OpTypes::default();
        let (a, b) = (t.intern("Conv"), t.intern(&String::from("Conv")));
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a, "Conv");
        assert!("Conv" == a);
        assert_ne!(t.intern("Relu"), a);
        let mut m = std::collections::HashMap::new();
        m.insert(a, 1);
        assert_eq!(m.get("Conv"), Some(&1));
    }
}
