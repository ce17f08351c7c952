//! The consensus layer: Raft, and the replica that drives it against a store.
//!
//! [`raft`] is the pure, deterministic core (messages in, a `Ready` out: what to
//! persist, send and apply); [`replica`] drives it synchronously against a
//! [`Store`](crate::storage::store::Store), so the same code runs in the
//! deterministic cluster simulation and in the networked node. [`machine`] is
//! the state-machine trait the replica applies committed commands to,
//! [`service`] the plain-data requests and replies a replica takes and gives,
//! and [`linearizability`] checks a client history against them.
//!
//! This layer uses the storage layer's types only: it knows no tokio and names
//! nothing of `server` (`tests/layers.rs` checks it).

pub mod linearizability;
pub mod machine;
pub mod raft;
pub mod replica;
pub mod service;
