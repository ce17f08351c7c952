//! The volatile peer: std's `HashMap` (its default SipHash hasher), `BTreeMap` and
//! `Vec` running the same operations in DRAM, with nothing to log or flush: the
//! upper bound a persistent container is measured against.

use std::collections::{BTreeMap, HashMap};

/// A std map as the workloads drive it.
pub trait StdMap<V: Copy>: Default {
    /// Inserts or updates; the old value.
    fn put(&mut self, k: u64, v: V) -> Option<V>;
    /// The value of `k`.
    fn find(&self, k: u64) -> Option<V>;
    /// Removes `k`; its value.
    fn del(&mut self, k: u64) -> Option<V>;
    /// Reads up to `count` entries from the first key at or after `from`, in order;
    /// how many (`None`: the map has no order).
    fn scan(&self, from: u64, count: usize) -> Option<u64>;
    /// Entries.
    fn size(&self) -> usize;
}

impl<V: Copy> StdMap<V> for HashMap<u64, V> {
    fn put(&mut self, k: u64, v: V) -> Option<V> {
        self.insert(k, v)
    }
    fn find(&self, k: u64) -> Option<V> {
        self.get(&k).copied()
    }
    fn del(&mut self, k: u64) -> Option<V> {
        self.remove(&k)
    }
    fn scan(&self, _from: u64, _count: usize) -> Option<u64> {
        None
    }
    fn size(&self) -> usize {
        self.len()
    }
}

impl<V: Copy> StdMap<V> for BTreeMap<u64, V> {
    fn put(&mut self, k: u64, v: V) -> Option<V> {
        self.insert(k, v)
    }
    fn find(&self, k: u64) -> Option<V> {
        self.get(&k).copied()
    }
    fn del(&mut self, k: u64) -> Option<V> {
        self.remove(&k)
    }
    fn scan(&self, from: u64, count: usize) -> Option<u64> {
        // The values are copied out, as a persistent scan must copy them from media.
        let mut n = 0u64;
        for (k, v) in self.range(from..).take(count) {
            std::hint::black_box((k, *v));
            n += 1;
        }
        Some(n)
    }
    fn size(&self) -> usize {
        self.len()
    }
}
