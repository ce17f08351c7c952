//! What the workloads do, apart from how they are run: the structures
//! ([`Ds`]), their operations ([`Op`]), applied to any [`Store`] ([`apply`]) or as
//! one pmkit transaction ([`run_op`]), and their contents ([`contents`]). Its own
//! file so that the crash suite of the workloads (`tests/defrag_workloads_crash.rs`)
//! runs exactly these.

use pmem_defrag::DefragHeap;

use super::store::Store;
use super::{avl, bt, hash, ll, lru, pmkit_store, rbt, ss};

/// A workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ds {
    /// Linked list.
    Ll,
    /// AVL tree.
    Avl,
    /// String swap.
    Ss,
    /// B+tree.
    Bt,
    /// Red-black tree.
    Rbt,
    /// Redis-like LRU cache.
    Lru,
}

impl Ds {
    /// Every workload, in the order of the report.
    pub const ALL: [Ds; 6] = [Ds::Ll, Ds::Avl, Ds::Ss, Ds::Bt, Ds::Rbt, Ds::Lru];

    /// Its name (the JSON key).
    pub fn name(self) -> &'static str {
        match self {
            Ds::Ll => "ll",
            Ds::Avl => "avl",
            Ds::Ss => "ss",
            Ds::Bt => "bt",
            Ds::Rbt => "rbt",
            Ds::Lru => "lru",
        }
    }
}

/// One workload operation.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Insert an absent key with a value of `tag`.
    Insert {
        /// The key.
        key: u64,
        /// The value's byte.
        tag: u8,
    },
    /// Delete a present key.
    Delete {
        /// The key.
        key: u64,
    },
    /// `ll`: delete the node `skip` nodes past the cursor (returns its key).
    DeleteNext {
        /// Nodes skipped.
        skip: u64,
    },
    /// `ss`: replace a present slot's string.
    Swap {
        /// The slot.
        key: u64,
        /// The new value's byte (its class: the length).
        tag: u8,
    },
    /// `lru`: look a key up (returns its tag).
    Get {
        /// The key.
        key: u64,
    },
    /// The concurrent hash map: insert an absent key.
    HashInsert {
        /// The key.
        key: u64,
        /// The value's byte.
        tag: u8,
    },
    /// The concurrent hash map: delete a present key.
    HashDelete {
        /// The key.
        key: u64,
    },
    /// `lru`: set a new key, evicting the least recent one (returns its key).
    SetEvict {
        /// The key.
        key: u64,
        /// The value's byte.
        tag: u8,
    },
}

/// How a workload's structure is laid out (what its operations need besides
/// the store).
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// The workload.
    pub ds: Ds,
    /// `ss`: the table's levels.
    pub depth: u32,
    /// `ss`: the slots keys are drawn from.
    pub slots: u64,
}

/// Runs `op` as one pmkit transaction (a compaction may be running: the read
/// barrier heals a bounded number of pointer words per transaction, so no
/// operation's log fills because of it).
pub fn run_op(heap: &DefragHeap, w: Setup, op: Op) -> Result<Option<u64>, String> {
    heap.transaction(|t| apply(&mut pmkit_store::Pm(t), w, op))
        .map_err(|e| format!("{}: {e}", w.ds.name()))
}

/// Applies `op` to the structure in `s`: `Some(key)` of a deleted or evicted
/// entry, or the tag of a `Get` hit.
pub fn apply<S: Store>(s: &mut S, w: Setup, op: Op) -> Result<Option<u64>, S::E> {
    let none = |r: Result<(), S::E>| r.map(|()| None);
    match (w.ds, op) {
        (Ds::Ll, Op::Insert { key, tag }) => none(ll::insert(s, key, tag)),
        (Ds::Ll, Op::DeleteNext { skip }) => ll::delete_next(s, skip).map(Some),
        (Ds::Avl, Op::Insert { key, tag }) => none(avl::insert(s, key, tag)),
        (Ds::Avl, Op::Delete { key }) => none(avl::delete(s, key)),
        (Ds::Rbt, Op::Insert { key, tag }) => none(rbt::insert(s, key, tag)),
        (Ds::Rbt, Op::Delete { key }) => none(rbt::delete(s, key)),
        (Ds::Bt, Op::Insert { key, tag }) => none(bt::insert(s, key, tag)),
        (Ds::Bt, Op::Delete { key }) => none(bt::delete(s, key)),
        (Ds::Ss, Op::Insert { key, tag }) => none(ss::insert(s, key, tag, w.depth)),
        (Ds::Ss, Op::Delete { key }) => none(ss::delete(s, key, w.depth)),
        (Ds::Ss, Op::Swap { key, tag }) => none(ss::swap(s, key, tag, w.depth)),
        (Ds::Lru, Op::Insert { key, tag }) => lru::set_new(s, key, tag, false),
        (Ds::Lru, Op::SetEvict { key, tag }) => lru::set_new(s, key, tag, true),
        (Ds::Lru, Op::Delete { key }) => none(lru::delete(s, key)),
        (Ds::Lru, Op::Get { key }) => lru::get(s, key).map(|t| t.map(u64::from)),
        (_, Op::HashInsert { key, tag }) => hash::insert(s, key, tag).map(|_| None),
        (_, Op::HashDelete { key }) => none(hash::delete(s, key)),
        (ds, op) => Err(S::fail(format!(
            "{}: unsupported operation {op:?}",
            ds.name()
        ))),
    }
}

/// Every (key, tag) of the structure, sorted by key.
pub fn contents<S: Store>(s: &mut S, w: Setup) -> Result<Vec<(u64, u8)>, S::E> {
    let mut v = match w.ds {
        Ds::Ll => ll::contents(s)?,
        Ds::Avl => avl::contents(s)?,
        Ds::Rbt => rbt::contents(s)?,
        Ds::Bt => bt::contents(s)?,
        Ds::Ss => ss::contents(s, w.depth)?,
        Ds::Lru => lru::contents(s)?,
    };
    v.sort_unstable();
    Ok(v)
}

/// The setup of workload `ds` for `n` keys.
pub fn setup(ds: Ds, n: u64) -> Setup {
    let slots = (2 * n).max(16);
    Setup {
        ds,
        depth: ss::depth(slots),
        slots,
    }
}
