//! A simple persistent B+-tree of order 16 whose nodes are blocks of the allocator
//! under test, and its workload over a universe of random keys a sixth of the
//! operation count: for the first 70 % of the operations, random inserts (60 %)
//! and deletes (40 %); then deletes only, which empty leaves, so node frees are
//! counted too. Every operation is checked against a `BTreeMap` model, and the
//! whole tree against it at the end.
//!
//! A node is [`NODE`] bytes, 32 words: a header (`leaf` in bit 0, the key count
//! in the high half), 15 keys, 16 pointers (children of an internal node, values
//! of a leaf). Child `i` of an internal node holds the keys in
//! `[keys[i - 1], keys[i])`.
//!
//! * insert: into the leaf, in order; a full node splits (a new right node is
//!   allocated, written and persisted before the left half and the parent are
//!   rewritten); a root split allocates a new root, published through an 8-byte
//!   anchor word;
//! * delete: from the leaf, without rebalancing; a leaf left empty is unlinked from
//!   its parent (with one separator) and freed, and so on upward; an internal root
//!   left with one child is replaced by it and freed.
//!
//! Every changed node is persisted whole. The tree is not crash-consistent across
//! a split or a merge (the benchmark counts the allocator's flushes, it does not
//! crash the tree); the allocator's cost is counted around `alloc` and `free` only.

use std::collections::BTreeMap;
use std::time::Instant;

use pmem_core::{splitmix64, Counters, PPtr, Pool};
use zerocopy::IntoBytes;

use crate::heaps::{read_u64, write_persist, AllocCost, Counted, Rng};

/// Bytes of a node.
pub const NODE: u64 = 256;
/// Keys per node at most (order 16: 16 children).
const MAX_KEYS: usize = 15;
const WORDS: usize = (NODE / 8) as usize;
const PTRS_AT: usize = 1 + MAX_KEYS;

/// A node's contents in DRAM.
#[derive(Clone, Debug, Default)]
struct Node {
    leaf: bool,
    keys: Vec<u64>,
    /// Children (`keys.len() + 1`) or values (`keys.len()`).
    ptrs: Vec<u64>,
}

impl Node {
    fn empty_leaf() -> Node {
        Node {
            leaf: true,
            ..Node::default()
        }
    }

    /// The child to descend to for `key`: the number of keys `<= key`.
    fn child_index(&self, key: u64) -> usize {
        self.keys.partition_point(|&k| k <= key)
    }

    /// Splits a node with one key too many: its right half, and the separator.
    fn split(&mut self) -> (u64, Node) {
        let mid = self.keys.len() / 2;
        if self.leaf {
            let keys = self.keys.split_off(mid);
            let ptrs = self.ptrs.split_off(mid);
            (
                keys[0],
                Node {
                    leaf: true,
                    keys,
                    ptrs,
                },
            )
        } else {
            let mut keys = self.keys.split_off(mid);
            let sep = keys.remove(0);
            let ptrs = self.ptrs.split_off(mid + 1);
            (
                sep,
                Node {
                    leaf: false,
                    keys,
                    ptrs,
                },
            )
        }
    }
}

/// The tree.
pub struct BTree<'a> {
    heap: &'a Counted<'a>,
    pool: &'a Pool,
    /// The 8-byte block holding the root's offset.
    anchor: u64,
    root: u64,
}

impl<'a> BTree<'a> {
    /// An empty tree (its anchor and first root are not counted: set-up).
    pub fn create(heap: &'a Counted<'a>) -> Result<BTree<'a>, String> {
        let pool = heap.pool();
        let anchor = heap.alloc_uncounted(16)?;
        let root = heap.alloc_uncounted(NODE)?;
        let mut t = BTree {
            heap,
            pool,
            anchor,
            root,
        };
        t.store(root, &Node::empty_leaf())?;
        t.set_root(root)?;
        Ok(t)
    }

    fn load(&self, off: u64) -> Result<Node, String> {
        let w: [u64; WORDS] = self
            .pool
            .read(PPtr::from_offset(off))
            .map_err(|e| format!("reading node {off:#x}: {e}"))?;
        let leaf = w[0] & 1 == 1;
        let n = (w[0] >> 32) as usize;
        let ptrs = if leaf { n } else { n + 1 };
        if n > MAX_KEYS || ptrs > WORDS - PTRS_AT {
            return Err(format!("node {off:#x}: corrupt header {:#x}", w[0]));
        }
        Ok(Node {
            leaf,
            keys: w[1..1 + n].to_vec(),
            ptrs: w[PTRS_AT..PTRS_AT + ptrs].to_vec(),
        })
    }

    fn store(&self, off: u64, n: &Node) -> Result<(), String> {
        debug_assert!(n.keys.len() <= MAX_KEYS);
        let mut w = [0u64; WORDS];
        w[0] = u64::from(n.leaf) | (n.keys.len() as u64) << 32;
        w[1..1 + n.keys.len()].copy_from_slice(&n.keys);
        w[PTRS_AT..PTRS_AT + n.ptrs.len()].copy_from_slice(&n.ptrs);
        // SAFETY: `off` is a node of this single-threaded tree; no reference into it
        // is live.
        unsafe { write_persist(self.pool, off, w.as_bytes()) }
    }

    fn set_root(&mut self, root: u64) -> Result<(), String> {
        // SAFETY: the anchor is this tree's; no reference into it is live.
        unsafe { write_persist(self.pool, self.anchor, &root.to_le_bytes())? };
        self.root = root;
        Ok(())
    }

    /// Inserts or replaces `key`; whether it was new.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, String> {
        let (new, split) = self.insert_at(self.root, key, value)?;
        if let Some((sep, right)) = split {
            let root = self.heap.alloc(NODE)?;
            let n = Node {
                leaf: false,
                keys: vec![sep],
                ptrs: vec![self.root, right],
            };
            self.store(root, &n)?;
            self.set_root(root)?;
        }
        Ok(new)
    }

    /// Inserts under `off`: whether the key was new, and the separator and new
    /// right sibling if `off` split.
    fn insert_at(
        &self,
        off: u64,
        key: u64,
        value: u64,
    ) -> Result<(bool, Option<(u64, u64)>), String> {
        let mut n = self.load(off)?;
        let new = if n.leaf {
            match n.keys.binary_search(&key) {
                Ok(i) => {
                    n.ptrs[i] = value;
                    self.store(off, &n)?;
                    return Ok((false, None));
                }
                Err(i) => {
                    n.keys.insert(i, key);
                    n.ptrs.insert(i, value);
                    true
                }
            }
        } else {
            let i = n.child_index(key);
            let (new, split) = self.insert_at(n.ptrs[i], key, value)?;
            let Some((sep, right)) = split else {
                return Ok((new, None));
            };
            n.keys.insert(i, sep);
            n.ptrs.insert(i + 1, right);
            new
        };
        if n.keys.len() <= MAX_KEYS {
            self.store(off, &n)?;
            return Ok((new, None));
        }
        let (sep, right_node) = n.split();
        let right = self.heap.alloc(NODE)?;
        self.store(right, &right_node)?;
        self.store(off, &n)?;
        Ok((new, Some((sep, right))))
    }

    /// Deletes `key`; whether it was present.
    pub fn delete(&mut self, key: u64) -> Result<bool, String> {
        let (removed, empty) = self.delete_at(self.root, key)?;
        if empty && !self.load(self.root)?.leaf {
            self.store(self.root, &Node::empty_leaf())?;
        }
        loop {
            let n = self.load(self.root)?;
            if n.leaf || n.ptrs.len() != 1 {
                break;
            }
            let old = self.root;
            self.set_root(n.ptrs[0])?;
            // SAFETY: the old root is unlinked (the anchor names its child) and was
            // allocated with NODE bytes.
            unsafe { self.heap.free(old, NODE)? };
        }
        Ok(removed)
    }

    /// Deletes under `off`: whether the key was there, and whether `off` is left
    /// empty (then the caller unlinks and frees it).
    fn delete_at(&self, off: u64, key: u64) -> Result<(bool, bool), String> {
        let mut n = self.load(off)?;
        if n.leaf {
            let Ok(i) = n.keys.binary_search(&key) else {
                return Ok((false, n.keys.is_empty()));
            };
            n.keys.remove(i);
            n.ptrs.remove(i);
            self.store(off, &n)?;
            return Ok((true, n.keys.is_empty()));
        }
        let i = n.child_index(key);
        let (removed, child_empty) = self.delete_at(n.ptrs[i], key)?;
        if !child_empty {
            return Ok((removed, false));
        }
        let child = n.ptrs.remove(i);
        if !n.keys.is_empty() {
            n.keys.remove(i.saturating_sub(1));
        }
        let empty = n.ptrs.is_empty();
        if !empty {
            self.store(off, &n)?;
        }
        // SAFETY: the child is unlinked (or its parent is, by our caller) and was
        // allocated with NODE bytes.
        unsafe { self.heap.free(child, NODE)? };
        Ok((removed, empty))
    }

    /// Every entry in key order, and the number of nodes.
    fn entries(&self) -> Result<(Vec<(u64, u64)>, u64), String> {
        let mut out = Vec::new();
        let mut nodes = 0;
        let mut stack = vec![self.root];
        while let Some(off) = stack.pop() {
            nodes += 1;
            let n = self.load(off)?;
            if n.leaf {
                out.extend(n.keys.iter().copied().zip(n.ptrs.iter().copied()));
            } else {
                stack.extend(n.ptrs.iter().rev());
            }
        }
        Ok((out, nodes))
    }
}

/// The figures of one B-tree run on one allocator.
#[derive(Clone, Debug)]
pub struct BtreeRun {
    /// Operations.
    pub ops: u64,
    /// Inserts among them.
    pub inserts: u64,
    /// The allocator's counted cost (node allocations and frees).
    pub cost: AllocCost,
    /// All lines flushed (the tree's own included).
    pub total_lines: u64,
    /// Wall-clock ns per operation.
    pub op_ns: f64,
    /// Entries and nodes at the end.
    pub entries: u64,
    /// See `entries`.
    pub nodes: u64,
}

/// Runs `ops` random operations (see the module docs), checked against a model.
pub fn run(heap: &Counted<'_>, ops: u64, seed: u64) -> Result<BtreeRun, String> {
    let mut tree = BTree::create(heap)?;
    let universe = (ops / 6).max(64);
    let drain_from = ops / 10 * 7;
    let mut model = BTreeMap::new();
    let mut rng = Rng::new(seed);
    let mut inserts = 0;
    let before = Counters::current();
    let clock = Instant::now();
    for j in 0..ops {
        let mut s = rng.below(universe);
        let k = splitmix64(&mut s);
        let insert = rng.below(100) < 60;
        if insert && j < drain_from {
            let new = tree.insert(k, j)?;
            if new != model.insert(k, j).is_none() {
                return Err(format!("B-tree: insert of {k:#x} disagrees with the model"));
            }
            inserts += 1;
        } else if tree.delete(k)? != model.remove(&k).is_some() {
            return Err(format!("B-tree: delete of {k:#x} disagrees with the model"));
        }
    }
    let op_ns = clock.elapsed().as_nanos() as f64 / ops.max(1) as f64;
    let total_lines = Counters::since(before).lines_flushed;
    let (entries, nodes) = tree.entries()?;
    if !entries
        .iter()
        .copied()
        .eq(model.iter().map(|(&k, &v)| (k, v)))
    {
        return Err(format!(
            "B-tree holds {} entries that differ from the model's {}",
            entries.len(),
            model.len()
        ));
    }
    if read_u64(tree.pool, tree.anchor)? != tree.root {
        return Err("B-tree: the anchor does not name the root".into());
    }
    Ok(BtreeRun {
        ops,
        inserts,
        cost: heap.cost(),
        total_lines,
        op_ns,
        entries: entries.len() as u64,
        nodes,
    })
}
