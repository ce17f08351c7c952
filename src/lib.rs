//! # pmem-kit — pmkit's safe persistent-memory building blocks, in one package
//!
//! The umbrella package (`cargo add pmem-kit`; the name `pmkit` on crates.io is
//! another project's): it re-exports the workspace's library crates, and holds
//! the examples (the Raft cluster binaries, the paper reproductions) and the
//! criterion benchmarks. The `pmkit` command-line tool is a package of its own.
//!
//! * [`pmem_core`]: flush/fence primitives chosen at run time, pools with honest
//!   durability modes, typed offset pointers, the allocator trait, crash-atomic
//!   transactions, counters, and (feature `sim`) the crash simulator — the
//!   foundation everything else builds on.
//! * [`pmem_collections`]: typed, crash-atomic persistent containers (box, vector,
//!   strings, hash map, B-tree, mutex, concurrent hash map) on `pmem_core::tx`.
//! * [`wafa`]: the wear-leveling rotational fine-grained allocator (DAC'19).
//! * [`pmem_defrag`]: a typed persistent heap with marking, leak reclamation and
//!   crash-consistent compaction beside running transactions (ISCA'22 FFCCD).
//! * [`nvwa`]: the NVM-write-aware allocator and adaptive memory fusion (AMF).
//! * [`raft_nvm`]: the Raft key-value service whose log and state are one
//!   persistent append-only list with a DRAM index, and the WAL baseline.
//!
//! openraft users take `openraft-list`, which puts raft-nvm's list under openraft;
//! it is not re-exported here, so that this package does not pull in openraft.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub use nvwa;
pub use pmem_collections;
pub use pmem_core;
pub use pmem_defrag;
pub use raft_nvm;
pub use wafa;

/// The workspace README's Rust snippets, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
