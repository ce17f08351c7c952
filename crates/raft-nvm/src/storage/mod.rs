//! The storage layer: the stores a replica's log and state live in, and nothing
//! above them.
//!
//! The [`store::Store`] trait is what the layers above see; [`list`] is the
//! thesis's engine (one persistent append-only list of records with a DRAM
//! index, crate-private `index`), [`wal`] the classic baseline (a write-ahead
//! log file plus snapshot files). The record codecs (`record`, `vkey`), the
//! on-media helpers (`ondisk`), the lock shims (`sync`, loom's under `--cfg
//! loom`) and the list's background threads (`ticker`) are private to the crate.
//!
//! This layer knows no tokio and names nothing of `consensus` or `server`
//! (`tests/layers.rs` checks it): a store can be embedded alone.

pub mod error;
pub(crate) mod index;
pub mod list;
pub(crate) mod ondisk;
pub(crate) mod record;
pub mod store;
pub(crate) mod sync;
pub(crate) mod ticker;
pub(crate) mod vkey;
pub mod wal;
