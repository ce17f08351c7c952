//! raft-nvm's persistent list (or its WAL baseline) as [openraft]'s log store
//! *and* state machine: storage for an engine people already run.
//!
//! [`ListRaftStore`] implements openraft 0.10's `RaftLogStorage`, `RaftLogReader`,
//! `RaftStateMachine` and `RaftSnapshotBuilder` for [`TypeConfig`] (a key-value
//! state machine: [`Request::Set`] / [`Request::Delete`], answered with the
//! previous value in [`Response`]). The log and the applied state are one
//! structure, as in the thesis: every entry is one record of the list; applying
//! an entry writes nothing, it raises the applied index at which reads see the
//! key-value map.
//!
//! # Wiring it in
//!
//! One store, two clones: one is openraft's log store, the other its state
//! machine. The network is yours (any `RaftNetworkV2` whose snapshot data is a
//! [`std::fs::File`]: send its bytes, write them to a file on the receiver and
//! hand that to `Raft::install_full_snapshot`).
//!
//! ```
//! use std::sync::Arc;
//!
//! use openraft::network::{NetSnapshot, RaftNetworkFactory};
//! use openraft::{Config, Raft};
//! use openraft_list::{list_options, ListRaftStore, Request, TypeConfig};
//! use pmem_core::ModeRequest;
//!
//! async fn start<N>(id: u64, network: N) -> Result<(), Box<dyn std::error::Error>>
//! where
//!     N: RaftNetworkFactory<TypeConfig>,
//!     N::Network: NetSnapshot<TypeConfig, SnapshotData = std::fs::File>,
//! {
//!     // A pool on a DAX file system (ModeRequest::Auto maps it with MAP_SYNC;
//!     // on any other file system it is made durable with msync).
//!     let store = ListRaftStore::create_list(
//!         "/mnt/pmem/node.pool",
//!         1 << 30,
//!         &list_options(ModeRequest::Auto),
//!     )?;
//!     // Or, after a restart: ListRaftStore::open_list(path, &list_options(..)).
//!     // Or the WAL engine: ListRaftStore::open_wal(dir, &openraft_list::wal_options()).
//!     let config = Arc::new(Config::default().validate()?);
//!     let raft = Raft::new(id, config, network, store.clone(), store.clone()).await?;
//!
//!     let reply = raft
//!         .client_write(Request::Set { key: b"k".to_vec(), value: b"v".to_vec() })
//!         .await?;
//!     assert_eq!(reply.data.previous, None);
//!     // The applied state, read locally (linearizable reads: `ensure_linearizable`
//!     // first, as openraft documents).
//!     assert_eq!(store.get(b"k")?, Some(b"v".to_vec()));
//!     Ok(())
//! }
//! ```
//!
//! # What is durable when
//!
//! - `append`: the entries are appended as one batch and made durable by one
//!   `sync` of the store, and only then does the `IOFlushed` callback fire. On
//!   persistent memory (or a pool forced to act as it) the sync is the record
//!   lines' flushes and one fence, done inline before `append` returns. Where a
//!   sync waits for a device (the list's `msync` on a plain file, the WAL's
//!   `fdatasync`), `append` returns once the entries are written and a flusher
//!   thread syncs and then fires the callbacks: openraft keeps appending while
//!   the device works, and one sync covers every group handed over meanwhile.
//!   Use [`list_options`] / [`wal_options`]: they keep the store from syncing by
//!   itself inside a batch.
//! - `save_vote`: durable on return (the list publishes the vote with one
//!   failure-atomic 8-byte store, persisted: the word holds `term << 1 |
//!   committed` and the node id; see the limits below).
//! - `truncate_after`: a rollback record, synced before it returns: the
//!   discarded suffix never comes back after a crash.
//! - `purge`: the purged log id is written to `<store>.openraft-meta` (atomic
//!   replace, synced) and hidden from reads at once. The list then compacts when
//!   raft-nvm's compaction policy says the copying pays (by default: the pool half
//!   full with a quarter of it estimated dead, or 85 % full;
//!   [`ListRaftStore::set_compaction_policy`]), up to the purged entry and no
//!   further (`Store::compact_to`), so entries openraft may still send to a
//!   lagging follower keep their records. The WAL compacts at every purge.
//! - `apply`: raises the applied index in DRAM. After a restart the applied index
//!   is the purged id (or the compaction base), and openraft applies the entries
//!   above it again: here, raising the index again over records that are already
//!   there.
//! - Snapshots: `build_snapshot` streams the live records at the applied index
//!   into `<store>.openraft-snapshots/` in chunks of [`CHUNK_ITEMS`] records
//!   (synced); `install_snapshot` streams a snapshot file's chunks into a fresh
//!   store staged beside the current one, which replaces it with one atomic
//!   rename once durable (raft-nvm's `FileStoreProvider`). The current snapshot
//!   survives a restart.
//!
//! # Limits
//!
//! - Terms below 2^47 and node ids below 65535 (the list's one-word hard state
//!   and its per-entry term hold them packed; see [`MAX_TERM`], [`MAX_NODE_ID`]).
//! - `save_committed` is not implemented (openraft's default): after a restart
//!   openraft learns the commit index from the leader.
//! - The engine must not compact by itself: `ListOptions::compact_interval` and
//!   `WalOptions::snapshot_every` are refused (compaction is openraft's purge).
//! - openraft's storage suite treats the log and the state machine as two
//!   structures; 17 of its tests build states where they disagree (a state
//!   machine ahead of the log, entries applied that the log never held), which
//!   one structure cannot represent (see `tests/suite.rs`).
//! - Drop every clone (and the `Raft`, after `Raft::shutdown`) before opening
//!   the same store again: a list pool is locked while open.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod codec;
mod error;
mod flusher;
#[doc(hidden)] // The fuzz target's body: not an API promise.
pub mod fuzzing;
mod log;
mod meta;
mod sm;
mod snapshot;
mod store;
mod types;

pub use codec::{MAX_NODE_ID, MAX_TERM};
pub use error::OpenraftListError;
pub use raft_nvm::replica::{Engine, StartMode};
pub use raft_nvm::{ListOptions, WalOptions};
pub use sm::ListSnapshot;
pub use snapshot::CHUNK_ITEMS;
pub use store::{list_options, wal_options, ListRaftStore};
pub use types::{
    Entry, LogId, Request, Response, SnapshotMeta, StoredMembership, TypeConfig, Vote,
};

/// The crate README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
