//! openraft over raft-nvm's storage: the persistent list (or its WAL baseline) as
//! openraft's log store *and* state machine.
//!
//! (Skeleton: see the crate docs once the store is finished.)

mod codec;
mod error;
mod log;
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
pub use store::ListRaftStore;
pub use types::{Entry, LogId, Request, Response, SnapshotMeta, StoredMembership, TypeConfig, Vote};
