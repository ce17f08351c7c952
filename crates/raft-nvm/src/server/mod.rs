//! The server layer (feature `server`, which brings tokio in): the networked
//! node and everything it talks through.
//!
//! [`node`] runs a replica on tokio; [`net`] is the authenticated TCP transport
//! between nodes; [`resp`] the RESP front end for clients; [`metrics`] the
//! request statistics, `INFO` and Prometheus text; [`secret`] the cluster secret
//! and the clients' password, read from files. The admission and memory-budget
//! helpers (`accept`, `budget`) and the hop trace events (`hops`) are private to
//! the crate.
//!
//! Dependencies run one way: this layer uses `consensus` and `storage`, neither
//! of which names it (`tests/layers.rs` checks it).

pub(crate) mod accept;
pub(crate) mod budget;
pub(crate) mod hops;
pub mod metrics;
pub mod net;
pub mod node;
pub mod resp;
pub mod secret;
