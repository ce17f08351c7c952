//! Why a node could not start, or stopped ([`NodeError`]).

use std::net::SocketAddr;

use crate::consensus::replica::ReplicaError;
use crate::server::net::TransportError;

#[cfg(doc)]
use super::{NodeBuilder, NodeConfig};

/// Why a node could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The node id is not a member.
    #[error("node {0} is not in the member list")]
    UnknownId(u16),
    /// The node has no store and was not told to create one
    /// ([`crate::consensus::replica::StartMode::Existing`]). The message names the flags of
    /// the `raft_node` example for [`crate::consensus::replica::StartMode::Bootstrap`] and
    /// [`crate::consensus::replica::StartMode::Join`].
    #[error(
        "node {id}: no store at {} — this node's data is gone or was never created; start it with --bootstrap (founding member of a new cluster) or --join (an existing member whose data was lost)",
        path.display()
    )]
    NoStore {
        /// The node.
        id: u16,
        /// Where its store should be.
        path: std::path::PathBuf,
    },
    /// The replica failed (its store, or its configuration).
    #[error(transparent)]
    Replica(#[from] ReplicaError),
    /// The transport could not start.
    #[error("transport: {0}")]
    Transport(#[from] TransportError),
    /// The client address could not be bound.
    #[error("cannot listen for clients on {addr}: {source}")]
    ClientBind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The metrics address could not be bound.
    #[error("cannot listen for metrics on {addr}: {source}")]
    MetricsBind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A blocking task failed to run.
    #[error("node task: {0}")]
    Task(String),
    /// The node was told to bootstrap or join over a store that belongs to
    /// another cluster (see [`NodeConfig::cluster_id`]); nothing was written.
    #[error(
        "node {id}: the data at {} belongs to cluster {found:016x}, not to this cluster ({expected:016x}); refusing to start a fresh member over another cluster's data",
        path.display()
    )]
    OtherCluster {
        /// The node.
        id: u16,
        /// The file recording the store's cluster.
        path: std::path::PathBuf,
        /// The cluster the store belongs to.
        found: u64,
        /// The cluster this node is configured for.
        expected: u64,
    },
    /// The store beside which node id `found` is recorded was given to node `id`
    /// (another member's files); nothing was written.
    #[error(
        "node {id}: the data at {} belongs to node {found}, not to node {id}; refusing to run another member's store",
        path.display()
    )]
    OtherNode {
        /// The node.
        id: u16,
        /// The file recording the store's node.
        path: std::path::PathBuf,
        /// The node the store belongs to.
        found: u16,
    },
    /// The file recording the store's cluster or node could not be read or
    /// written, or is not one.
    #[error("cluster id: {0}")]
    Identity(String),
    /// A [`NodeBuilder`] lacks a setting it cannot default (the message says which).
    #[error("node configuration incomplete: {0}")]
    Incomplete(&'static str),
}
