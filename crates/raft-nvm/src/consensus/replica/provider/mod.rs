//! Where a replica's store lives, and how it is replaced by a snapshot.
//!
//! [`crate::storage::store::Store::install_snapshot`] needs an empty store, but a lagging follower
//! holds an old one. The provider builds a fresh store beside the current one
//! (`<store>.incoming`) and installs the snapshot into it *as its chunks arrive*: a
//! [`SnapshotInstall`] runs the installation on its own thread, fed chunk by chunk
//! through a rendezvous channel, so the follower holds at most two chunks in DRAM
//! (the one being written and the next one handed over; see [`ChunkGauge`]). After
//! the last chunk the installation is durable; the hard state is carried over and
//! only then the staged store becomes *the* store with one atomic rename. A crash
//! before the rename leaves the old store (the staging store is removed on open, and
//! the leader sends the snapshot again); a crash after it leaves the new one.
//! Nothing in between is ever opened.
//!
//! Opening checks before it writes ([`StoreProvider::open_validated`]): every path
//! is looked at before it is opened (a FIFO or a device where a file belongs is
//! refused, [`StoreError::NotRegular`](crate::storage::error::StoreError::NotRegular)), the join marker must hold what a join
//! writes (or nothing, as the first ones did), the engine recovers its store
//! without writing, and the caller's check (the replica builds its Raft core
//! there) runs; only then does the list write its new epoch, the WAL cut its torn
//! tail, and an unfinished installation get removed. A refused start leaves the
//! store's files as it found them. (An interrupted WAL directory swap is the
//! exception: it is finished first, since until then there is no directory.)

mod file;
mod install;
mod paths;
mod staged;

use std::sync::Arc;

pub use self::file::{Engine, FileStoreProvider};
pub use self::install::{ChunkGauge, ThreadedInstall};
#[cfg(feature = "server")]
pub(crate) use self::paths::sibling;
pub use self::staged::recover_wal_swap;
use crate::storage::error::Result;
use crate::storage::store::{HardState, SnapshotItem, SnapshotMeta, Store};

/// How a node treats a missing store when it starts. Whatever the mode, a store
/// that a join created and that has not caught up yet (its `<store>.joining`
/// marker is still there) opens passive again — unless the node is its cluster's
/// only voter, which has no leader to catch up with (the replica drops the marker
/// with a warning). A marker holding anything but what a join writes is refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StartMode {
    /// Open the node's store; if there is none, refuse with
    /// [`StoreError::NoStore`](crate::storage::error::StoreError::NoStore) and write nothing. The default: a member whose data
    /// is gone must not silently come back empty.
    #[default]
    Existing,
    /// A founding member of a new cluster: create an empty store if there is none,
    /// open the existing one otherwise (so re-running the founding command after a
    /// restart is harmless). Telling a member of a running cluster whose data is
    /// gone to bootstrap brings back the hole [`StartMode::Existing`] closes: use
    /// [`StartMode::Join`] for that.
    Bootstrap,
    /// An existing member whose data was lost: create an empty store if there is
    /// none, and keep the Raft core passive
    /// ([`crate::consensus::raft::Config::passive_until_caught_up`]) until it caught up with a
    /// leader. Over an existing store this is [`StartMode::Existing`] (passive only
    /// if an earlier join has not caught up yet).
    Join,
}

/// Opens a replica's store and replaces it by an installed snapshot.
pub trait StoreProvider: Send {
    /// Opens the store (whether one may be created depends on the provider: see
    /// [`StartMode`] for [`FileStoreProvider`]).
    fn open(&mut self) -> Result<Arc<dyn Store>>;

    /// [`StoreProvider::open`], calling `check` on the opened store before the
    /// provider writes to an existing one, where it can: a refused start then
    /// leaves the store's files byte for byte as they were. `check` only reads.
    /// The default opens, then checks.
    fn open_validated(
        &mut self,
        check: &mut dyn FnMut(&dyn Store) -> Result<()>,
    ) -> Result<Arc<dyn Store>> {
        let store = self.open()?;
        check(&*store)?;
        Ok(store)
    }

    /// Whether the store [`StoreProvider::open`] returned belongs to a member that
    /// joined empty and has not caught up yet ([`StartMode::Join`]): the replica
    /// then keeps its Raft core passive. The default: never.
    fn joining(&self) -> bool {
        false
    }

    /// The joining member caught up with a leader (its log durably holds the
    /// leader's commit index): the provider forgets the join, durably, so a restart
    /// no longer starts passive. The default does nothing.
    fn caught_up(&mut self) -> Result<()> {
        Ok(())
    }

    /// Starts installing the snapshot `meta` into a fresh staging store, beside the
    /// current one: the caller pushes its chunks in order into the returned
    /// installation, then finishes it ([`SnapshotInstall::finish`] puts the new
    /// store in place) or drops it (the staging store is discarded). At most one
    /// installation runs at a time: drop the previous one first.
    fn begin_install(&mut self, meta: SnapshotMeta) -> Result<Box<dyn SnapshotInstall>>;
}

/// A snapshot installation in progress (see [`StoreProvider::begin_install`]).
/// Dropping it abandons the installation: its staging store is removed, and the
/// current store stays untouched.
pub trait SnapshotInstall: Send {
    /// Installs the next chunk's records into the staging store. May wait until the
    /// installation took the previous chunk (back-pressure: the caller never gets
    /// more than one chunk ahead of the writer). After an error the installation is
    /// dead: drop it.
    fn push(&mut self, items: Vec<SnapshotItem>) -> Result<()>;

    /// The last chunk was pushed: completes the installation (durable), gives the
    /// staged store the hard state `hard_state` and puts it in the current store's
    /// place. On success the current store must not be written again (the caller
    /// drops it); on failure it is untouched and still the store.
    fn finish(self: Box<Self>, hard_state: HardState) -> Result<Arc<dyn Store>>;
}

/// A store with a snapshot fully and durably installed, beside the current one.
/// Dropping it discards it.
pub trait StagedStore: Send {
    /// Gives it the hard state `hard_state` and puts it in the current store's place
    /// (durably, atomically).
    fn commit(self: Box<Self>, hard_state: HardState) -> Result<Arc<dyn Store>>;
}
