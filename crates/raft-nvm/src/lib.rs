//! # raft-nvm — the storage of a Raft key-value service on persistent memory
//!
//! The MSc thesis behind this crate (seed `raft-on-nvm-thesis-ru.txt`) replaces the
//! Raft write-ahead log and the state machine's snapshots with **one** structure: a
//! persistent append-only list of records in ~1 KiB pages, indexed by a DRAM
//! `BTreeMap<(key, raft index), location>`. This crate provides that store
//! ([`ListStore`]) and the classic design it is compared with ([`WalStore`]: a
//! write-ahead log file with fsync per group plus snapshot files), both behind the
//! [`Store`] trait. The consensus core ([`raft`]) is a pure, deterministic Raft state
//! machine; [`replica`] drives it against a store (the store *is* the log: appends
//! before sends, CAS decided at append time, MVCC reads at the applied index,
//! lagging replicas fed from the list itself: its entries, or a snapshot of it once
//! compacted), synchronously, so the same
//! code runs in the deterministic cluster simulation and in the networked service.
//!
//! ## Three layers
//!
//! `src/` holds three folders, with dependencies running one way, storage ←
//! consensus ← server (`tests/layers.rs` fails on an import that runs upward):
//!
//! - `storage/`: the stores ([`ListStore`], [`WalStore`], the [`Store`] trait,
//!   the list's records, index and on-media layout). No tokio, nothing above it.
//! - `consensus/`: the Raft core ([`raft`]), the replica that drives it against a
//!   store ([`replica`]), the state-machine trait ([`machine`]), the plain-data
//!   requests and replies ([`service`]) and the history checker
//!   ([`linearizability`]). Storage types only.
//! - `server/` (feature `server`, which brings tokio in): the node, the
//!   transport, RESP, metrics and secrets.
//!
//! The layer modules are private; the public paths below are re-exports, so a
//! user writes `raft_nvm::raft::RaftCore`, never the layer.
//!
//! The layers stay one crate: no reason to split has appeared (storage alone is
//! already usable without the `server` feature and its tokio, and the test
//! keeps the direction), and a split would add version boundaries no user needs.
//!
//! ## The surface, in reading order
//!
//! - **Embedding a service:** `node::Node::builder` (with the default feature
//!   `server`) starts a node; [`machine::TypedMachine`] puts your own command
//!   and response types on the replicated map (run it with [`machine::Typed`];
//!   the `counter` example of the `pmkit` package is one), `Node::client_write`
//!   and `Node::client_read` call it, `Node::status` watches the node;
//!   [`machine::StateMachine`] is the byte-level trait underneath (RESP
//!   commands); [`service`] holds the requests and replies a node takes and
//!   gives.
//! - **The stores:** [`ListStore`] and [`WalStore`] behind [`Store`], with their
//!   options and the types of [`store`].
//! - **Driving it yourself** (simulations, other transports): [`raft`] (the pure
//!   core, with membership changes through joint configurations, learners,
//!   leadership transfer and lease reads) and [`replica`] (the core against a
//!   store).
//! - **Front ends and observability:** `resp` (RESP server and client), `net`
//!   (the transport), `secret` (the cluster secret peers authenticate with and
//!   the clients' password, read from files), `metrics` (`INFO` and Prometheus
//!   text), `HOP_TRACE_TARGET`;
//!   [`linearizability`] checks a client history, for your own tests.
//!
//! On-media layouts, record codecs and the DRAM index are private; the list's
//! layout name ([`list::LAYOUT`]) and epoch ([`list::pool_epoch`], for crash
//! suites) are all a pool reader needs.
//!
//! With the default feature `server`: [`node`] runs a replica on tokio, [`net`] is the
//! TCP transport between nodes (length-prefixed postcard frames, bounded queues,
//! reconnection, peers authenticated by a cluster secret, a memory budget for
//! unfinished frames), and [`resp`] is the RESP front end (with `AUTH` and a
//! memory budget for unfinished requests) that `redis-cli` and
//! `redis-benchmark` talk to (followers redirect with `MOVED`; learners answer
//! reads themselves; `RAFT.ADD-LEARNER`, `RAFT.PROMOTE`, `RAFT.REMOVE-NODE`,
//! `RAFT.CONFIG` and `RAFT.TRANSFER-LEADER` administer the cluster). The examples
//! `raft_node`, `raft_cluster` and `raft_bench` of the `pmkit` package run it.
//!
//! ```
//! use raft_nvm::{ListOptions, ListStore, Op, Store};
//!
//! let dir = tempfile::tempdir()?;
//! let store = ListStore::create(dir.path().join("node.pool"), 1 << 20, &ListOptions::default())?;
//! store.append(1, 1, Op::Put { key: b"k", value: b"v1" })?;
//! store.append(2, 1, Op::Put { key: b"k", value: b"v2" })?;
//! store.sync()?; // otherwise durable every 10 appends
//! assert_eq!(store.get(b"k", 1)?, Some(b"v1".to_vec()));
//! assert_eq!(store.get(b"k", 2)?, Some(b"v2".to_vec()));
//! drop(store);
//! let again = ListStore::open(dir.path().join("node.pool"), &ListOptions::default())?;
//! assert_eq!(again.last_index(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Crash semantics (list engine), proven by the crash-simulator suites in
//! `tests/list_crash.rs`: after a crash anywhere, recovery succeeds and the store
//! holds exactly the records appended before some point that is no earlier than the
//! last completed sync (a prefix, never a hole); the used and free page lists
//! partition the pages; a compaction is either wholly visible or not at all.

#![cfg_attr(docsrs, feature(doc_cfg))]

// The layers, each a folder; dependencies run one way, storage <- consensus <- server.
mod consensus;
#[doc(hidden)] // The fuzz targets' bodies: not an API promise.
pub mod fuzzing;
#[cfg(feature = "server")]
mod server;
mod storage;

// The public surface, in the reading order of the crate docs above.

// Embedding a service: the node (with its builder and config), the state machine
// it applies your commands with, and the requests and replies it takes and gives.
pub use consensus::{machine, service};
#[cfg(feature = "server")]
pub use server::node;

// The stores, for those who embed storage alone.
pub use storage::error::{Result, StoreError};
pub use storage::list::{ListOptions, ListStore, ListSummary};
pub use storage::store::{
    CompactStats, HardState, LogEntry, Op, OwnedOp, SnapshotItem, SnapshotMeta, SnapshotStream,
    Store, StoreOptions, StoreUsage, Version,
};
pub use storage::wal::{WalOptions, WalStore};
pub use storage::{error, list, store, wal};

// Driving it yourself: the pure Raft core and the replica that runs it on a store.
pub use consensus::{raft, replica};

// Front ends and observability.
#[cfg(feature = "server")]
pub use server::hops::TARGET as HOP_TRACE_TARGET;
#[cfg(feature = "server")]
pub use server::{metrics, net, resp, secret};

// Checking a client history, for your own tests.
pub use consensus::linearizability;

/// The crate README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
