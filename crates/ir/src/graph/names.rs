//! Tensor names to values, without a second copy of each name: the table holds value ids
//! and hashes the names where the values keep them. A million-tensor graph saves a million
//! string allocations (about 60 MB) and the copying.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::{Value, ValueId};

/// Fx hashing: names are looked up millions of times while a large model loads, and
/// SipHash's protection against crafted collisions costs a tenth of that.
fn hash(name: &str) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(name)
}

#[derive(Clone, Debug, Default)]
pub(crate) struct NameIndex {
    table: HashTable<ValueId>,
}

impl NameIndex {
    pub(crate) fn get(&self, name: &str, values: &[Value]) -> Option<ValueId> {
        self.table
            .find(hash(name), |id| values[id.index()].name == name)
            .copied()
    }

    /// Indexes `id` under its value's name, which no other indexed value has.
    pub(crate) fn insert_new(&mut self, id: ValueId, values: &[Value]) {
        let rehash = |id: &ValueId| hash(&values[id.index()].name);
        self.table
            .insert_unique(hash(&values[id.index()].name), id, rehash);
    }

    pub(crate) fn reserve(&mut self, additional: usize, values: &[Value]) {
        self.table
            .reserve(additional, |id| hash(&values[id.index()].name));
    }
}
