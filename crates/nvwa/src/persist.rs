//! Every flush and fence the allocator issues, named by its site, so that the
//! crash suite can remove each one in turn (feature `mutation`) and check that its
//! checker notices: a flush or fence no test misses is one the proof does not
//! cover.

use pmem_core::{Pool, PoolError};

/// A flush or fence of the allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[doc(hidden)]
pub enum Site {
    /// An allocation's records.
    AllocFlush,
    /// A run record another thread flushed without a fence, flushed again.
    RunReflush,
    /// The fence ending an allocation.
    AllocFence,
    /// A free's exclusion or delete record.
    FreeFlush,
    /// The fence ending a free.
    FreeFence,
    /// A realloc's new length.
    ReallocFlush,
    /// The fence ending a realloc.
    ReallocFence,
    /// An `alloc_publish`'s block contents.
    PublishDataFlush,
    /// Its `Pub` and pending `Obj` records.
    PublishRecordFlush,
    /// The fence making block and records durable before the slot store.
    PublishRecordFence,
    /// The publication slot.
    PublishSlotFlush,
    /// The fence making the slot durable before the pending bit is cleared.
    PublishSlotFence,
    /// The cleared pending bit.
    PublishClearFlush,
    /// The fence ending an `alloc_publish`.
    PublishClearFence,
    /// A transaction's mark (no fence of the allocator's own).
    MarkFlush,
    /// A checkpoint's new log area.
    CheckpointFlush,
    /// The fence making the new area durable before the switch.
    CheckpointFence,
    /// The active word.
    SwitchFlush,
    /// The fence ending a checkpoint.
    SwitchFence,
    /// Recovery's decisions (exclusions, cleared pending bits).
    RecoveryFlush,
    /// The fence ending recovery.
    RecoveryFence,
    /// The naive baseline: its undo entries and count.
    NaiveUndoFlush,
    /// The naive baseline: the fence after its undo entries, before their count.
    NaiveEntriesFence,
    /// The naive baseline: the fence after the undo count (set, and cleared).
    NaiveUndoFence,
    /// The naive baseline: a metadata word updated in place.
    NaiveApplyFlush,
    /// The naive baseline: the fence after its updates.
    NaiveApplyFence,
}

impl Site {
    /// The naive baseline's sites.
    pub const NAIVE: [Site; 5] = [
        Site::NaiveUndoFlush,
        Site::NaiveEntriesFence,
        Site::NaiveUndoFence,
        Site::NaiveApplyFlush,
        Site::NaiveApplyFence,
    ];

    /// Every site of the NVWA heap, for the mutation suite.
    pub const ALL: [Site; 21] = [
        Site::AllocFlush,
        Site::RunReflush,
        Site::AllocFence,
        Site::FreeFlush,
        Site::FreeFence,
        Site::ReallocFlush,
        Site::ReallocFence,
        Site::PublishDataFlush,
        Site::PublishRecordFlush,
        Site::PublishRecordFence,
        Site::PublishSlotFlush,
        Site::PublishSlotFence,
        Site::PublishClearFlush,
        Site::PublishClearFence,
        Site::MarkFlush,
        Site::CheckpointFlush,
        Site::CheckpointFence,
        Site::SwitchFlush,
        Site::SwitchFence,
        Site::RecoveryFlush,
        Site::RecoveryFence,
    ];
}

/// The heap's sites, then the naive baseline's: every site, for the switch.
const EVERY_SITE: [Site; 26] = {
    let mut every = [Site::AllocFlush; 26];
    let mut i = 0;
    while i < Site::ALL.len() {
        every[i] = Site::ALL[i];
        i += 1;
    }
    let mut j = 0;
    while j < Site::NAIVE.len() {
        every[Site::ALL.len() + j] = Site::NAIVE[j];
        j += 1;
    }
    every
};

impl pmem_core::site_switch::Site for Site {
    const EVERY: &'static [Site] = &EVERY_SITE;
}

#[cfg(feature = "mutation")]
static SWITCH: pmem_core::site_switch::SiteSwitch<Site> = pmem_core::site_switch::SiteSwitch::new();

/// Removes the flush or fence at `site` from every heap of the process (`None`:
/// none). For the mutation suite only.
#[cfg(feature = "mutation")]
#[doc(hidden)]
pub fn set_mutant(site: Option<Site>) {
    SWITCH.remove(site);
}

/// Flushes `len` bytes at `offset` (site `site`).
#[inline]
#[track_caller]
pub(crate) fn flush(pool: &Pool, site: Site, offset: u64, len: u64) -> Result<(), PoolError> {
    #[cfg(feature = "mutation")]
    return SWITCH.flush(pool, site, offset, len);
    #[cfg(not(feature = "mutation"))]
    {
        let _ = site;
        pool.flush(offset, len)
    }
}

/// Fences (site `site`).
#[inline]
#[track_caller]
pub(crate) fn fence(pool: &Pool, site: Site) -> Result<(), PoolError> {
    #[cfg(feature = "mutation")]
    return SWITCH.fence(pool, site);
    #[cfg(not(feature = "mutation"))]
    {
        let _ = site;
        pool.drain()
    }
}
