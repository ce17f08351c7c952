//! # pmkit — safe persistent-memory building blocks
//!
//! The umbrella package: it re-exports the workspace's crates and owns the
//! `pmkit` command-line tool, the examples and the benchmarks.
//!
//! * [`pmem_core`]: flush/fence primitives, pools, offset pointers, the allocator
//!   trait and counters — the foundation everything else builds on.
//! * [`wafa`]: the wear-leveling allocator (DAC'19), with its wear study.
//! * [`raft_nvm`]: the Raft thesis's store (persistent list + DRAM index) and the
//!   WAL baseline; its consensus layer is not implemented yet.
//! * [`defrag`], [`nvwa`]: not implemented yet (see each crate's documentation).

pub use defrag;
pub use nvwa;
pub use pmem_core;
pub use raft_nvm;
pub use wafa;
