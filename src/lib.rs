//! # pmkit — safe persistent-memory building blocks
//!
//! The umbrella package: it re-exports the workspace's crates and owns the
//! `pmkit` command-line tool, the examples and the benchmarks.
//!
//! * [`pmem_core`]: flush/fence primitives, pools, offset pointers, the allocator
//!   trait and counters — the foundation everything else builds on.
//! * [`wafa`], [`defrag`], [`raft_nvm`], [`nvwa`]: the systems of the papers (not
//!   implemented yet; see each crate's documentation).

pub use defrag;
pub use nvwa;
pub use pmem_core;
pub use raft_nvm;
pub use wafa;
