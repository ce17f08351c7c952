//! # defrag — a typed persistent heap for crash-consistent defragmentation (FFCCD)
//!
//! The FFCCD paper's system on pmem-core: a typed persistent
//! heap whose objects declare their persistent pointers exactly
//! ([`PersistentType`], [`persistent_type!`]), a persisted type table checked
//! against the program's [`Registry`] at open, named roots, objects in size-class
//! slab pages taken from pmem-core's page allocator, the live fragmentation ratio
//! (the paper's Eq. 1), marking from the roots and leak reclamation (which PMDK
//! cannot do), and compaction beside running transactions
//! ([`DefragHeap::begin_compaction`], [`Compaction`]): a persisted plan that is the
//! forwarding table, moves by a defragmenter thread and by a read barrier in the
//! mutators' transactions, with the paper's three protocols ([`Protocol`]:
//! Espresso, a sound SFCCD, FFCCD for eADR and, with the paper's reached bitmap,
//! for ADR: [`reached`]), healing, release, and recovery of an interrupted cycle
//! at open, and a [`Collector`] thread with the paper's trigger policies
//! ([`Trigger::normal`], [`Trigger::relaxed`]). Every allocation and free is a
//! pmem-core transaction; all of it is
//! crash-tested (`tests/heap_crash.rs`, `tests/concurrent_crash.rs`,
//! `tests/move_mutants.rs`, `tests/planning_crash.rs`). No CPU has the reached bitmap: pmem-core's crash
//! simulator emulates it, so FFCCD on ADR is crash-tested, and on a real durable
//! pool not declared eADR FFCCD runs as SFCCD.
//!
//! **Concurrency.** Transactions of several threads run at once, each on its
//! own log lane of pmem-core's `TxHeap`. Conflicting access is ruled out by
//! object-level locks, not by one global lock:
//! a transaction locks each object, slab page header and root it touches at
//! first access (shared to read, exclusive to write or free) until it commits
//! or rolls back; on a conflict it rolls back and [`DefragHeap::transaction`]
//! runs its closure again (no-wait, so no deadlock; the closure is `FnMut`).
//! Chosen over a `PMutex` per structure because it asks nothing of the user,
//! lets threads working on one structure's disjoint parts commit together, and
//! tells the healer which objects a running transaction holds. Healing runs
//! without any heap-wide lock: it swaps each pointer word by CAS
//! (`Pool::cas_word_shared`) under the word's object lock taken with a `try`,
//! revisiting what a running transaction holds, so a transaction's write, or
//! its rollback, and a heal never lose each other. A compaction is planned in
//! slices ([`planning`]): the longest hold, [`CompactReport::plan_pause_ns`], is
//! the remaining pause (about 1 ms on a 1 M-object list, 8 ms at worst in our
//! runs; the paper's is its marking). [`Collector`] runs the paper's trigger policy on a thread.
//!
//! A compaction's plans are released as transactions beside the running ones.
//!
//! **Limits:** marking and leak collection, [`DefragHeap::stats`], each
//! planning slice, a compaction's activation and its deactivation take the heap
//! alone (a reader-writer *gate*: transactions shared, these exclusive). Two transactions that touch one object conflict even if
//! only one writes, and the one that finds it held retries (two readers share
//! it). The lock table is striped, so two objects may share a stripe: a false
//! conflict costs a retry. Every transaction takes shared holds on the words it
//! reads, and the gate, so threads reading the same hot objects (a structure's
//! root) move those lines between cores: two threads on one hash map run
//! 1.46–1.78 times one thread's transactions (two threads on heaps of their own,
//! 1.71–1.84), and a mutator loses 10–25 % of its throughput while the healer
//! visits the objects it reads (BENCHMARKS.md).
//!
//! **Layers.** The modules depend one way, bottom to top: `layout` (on-media
//! formats and the shared constants) → `protocol` → `types` → `barrier` →
//! `locks` → `heap` (the heap core: pages, transactions) → `heal` → `mark` →
//! `compact` → `reached` → `planning` → `cycle` → `open` (opening and every
//! recovery step, in one place) → `collector`. `tests/layers.rs` fails on a
//! `crate::` path that names a layer above its own.
//!
//! ```
//! use pmem_defrag::{persistent_type, DefragHeap, HeapRoot, Registry};
//! use pmem_core::{PPtr, Pool, PoolOptions};
//! use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};
//!
//! #[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
//! #[repr(C)]
//! struct Node {
//!     value: u64,
//!     next: PPtr<Node>,
//! }
//! persistent_type!(Node, id = 1, pointers = [next: Node]);
//!
//! # fn main() -> Result<(), pmem_defrag::DefragError> {
//! let registry = Registry::new().with::<Node>();
//! let pool = Pool::anonymous(&PoolOptions::new("list", 4 << 20).root::<HeapRoot>())?;
//! let mut heap = DefragHeap::create(pool, &registry)?;
//! // Push 1, 2, 3 on a list under the root "list", one transaction each.
//! for v in 1..=3 {
//!     heap.transaction(|t| {
//!         let head = t.root::<Node>("list")?;
//!         let n = t.alloc::<Node>()?;
//!         t.write(n, &Node { value: v, next: head })?;
//!         t.set_root("list", n)
//!     })?;
//! }
//! // Drop the head without freeing it: a leak, found and reclaimed by marking.
//! heap.transaction(|t| {
//!     let head = t.root::<Node>("list")?;
//!     let next = t.read(head)?.next;
//!     t.set_root("list", next)
//! })?;
//! assert_eq!(heap.stats()?.live_objects, 3);
//! assert_eq!(heap.collect_leaks()?, 1);
//! assert_eq!(heap.stats()?.live_objects, 2);
//! let head = heap.root::<Node>("list")?;
//! assert_eq!(heap.read(head)?.value, 2);
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod barrier;
pub mod collector;
mod compact;
mod cycle;
#[doc(hidden)] // The fuzz targets' bodies: not an API promise.
pub mod fuzzing;
mod heal;
mod heap;
mod inspect;
#[doc(hidden)] // On-media layout: public for the crash suites, not an API promise.
pub mod layout;
mod locks;
mod mark;
mod open;
pub mod planning;
pub mod protocol;
pub mod reached;
mod types;

#[cfg(feature = "mutation")]
#[doc(hidden)]
pub use barrier::remove_site;
#[doc(hidden)]
pub use barrier::{Site, HEAL_SITES, SITES};
pub use collector::{
    Collector, CollectorError, CollectorOptions, CollectorReport, Trigger, TriggerError,
};
pub use compact::CompactReport;
pub use cycle::Compaction;
pub use heap::{DefragHeap, DefragTx, HeapStats};
pub use inspect::{BlockLister, DefragSummary};
pub use layout::{HeapRoot, MAX_OBJECT};
pub use mark::MarkReport;
pub use pmem_core::PPtr;
pub use protocol::{CompactOptions, Protocol};
#[cfg(feature = "mutation")]
pub use reached::set_reached_mutant;
#[doc(hidden)]
pub use reached::{ReachedMutant, REACHED_MUTANTS};
pub use types::{PersistentType, PtrField, Registry, TypeDesc};

use pmem_core::tx::TxError;
use pmem_core::PoolError;

/// Errors of the heap.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DefragError {
    /// The registry is inconsistent, or does not match the heap's type table.
    #[error("type registry: {0}")]
    Registry(String),
    /// The pool's root holds no heap.
    #[error("no defrag heap is formatted in this pool")]
    NotFormatted,
    /// The heap's on-media state is inconsistent.
    #[error("defrag heap: {0}")]
    Corrupt(String),
    /// An offset that is not a live object.
    #[error("offset {offset:#x} is not a live object: {reason}")]
    NotAnObject {
        /// The offset given.
        offset: u64,
        /// What it is instead.
        reason: &'static str,
    },
    /// An object of another type than the one asked for.
    #[error("object at {offset:#x} has type {found}, not {expected}")]
    WrongType {
        /// The object.
        offset: u64,
        /// The type asked for.
        expected: u32,
        /// The type it has.
        found: u32,
    },
    /// A type not in the registry.
    #[error("type {0} is not registered")]
    Unregistered(u32),
    /// A root name that is empty, longer than 24 bytes or holds a NUL.
    #[error("invalid root name {0:?} (1 to 24 bytes, no NUL)")]
    BadRootName(String),
    /// All 16 roots are in use.
    #[error("all 16 roots are in use")]
    RootsFull,
    /// Another running transaction holds an object (or root) this one needs in
    /// a conflicting mode. [`DefragHeap::transaction`] rolls back and runs the
    /// closure again, so a caller sees it only if its closure swallows it and
    /// returns another error.
    #[error("conflict with another running transaction")]
    Conflict,
    /// A compaction is in progress (one at a time; marking waits for it too).
    #[error("a compaction is in progress")]
    Busy,
    /// The transaction layer failed.
    #[error(transparent)]
    Tx(#[from] TxError),
    /// The pool failed.
    #[error(transparent)]
    Pool(#[from] PoolError),
}

/// The crate README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
