//! Reference structures built on [`crate::tx`]: the workloads of the `tx_bench`
//! benchmark and examples to copy from. Each operation is one transaction, so after
//! a crash a structure holds exactly the operations that completed, plus perhaps the
//! one in flight applied whole.

pub mod btree;
pub mod pht;

/// Re-exported from its new home, [`crate::tx::Logging`] (kept here while the
/// reference B-tree still names it so).
pub use super::Logging;
