//! Reference structures built on [`crate::tx`]: the B-tree workload of the
//! `tx_bench` benchmark and an example to copy from. Each operation is one
//! transaction, so after a crash a structure holds exactly the operations that
//! completed, plus perhaps the one in flight applied whole. (The hash table that
//! was here is now `pmem_collections::PHashMap`.)

pub mod btree;

/// Re-exported from its new home, [`crate::tx::Logging`] (kept here while the
/// reference B-tree still names it so).
pub use super::Logging;
