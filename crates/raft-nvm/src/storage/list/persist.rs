//! Every flush and fence the list engine issues, named by its site, so that the
//! crash suites can remove each one in turn (feature `mutation`) and check that a
//! checker notices: a flush or fence no test misses is one the proof does not cover.

use pmem_core::{Pool, PoolError};

/// A flush or fence of the list engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[doc(hidden)]
pub enum Site {
    /// Formatting: the first page's header.
    FormatFlush,
    /// Formatting: the control block.
    FormatControlFlush,
    /// Formatting: the fence ending it.
    FormatFence,
    /// Opening: the new epoch and the records found past the hint.
    SettleFlush,
    /// Opening: the fence ending it (before any page of the new epoch is written).
    SettleFence,
    /// A sync: the records and page headers written since the previous sync.
    SyncFlush,
    /// A sync: the `durable_tail` hint (the previous sync's end).
    HintFlush,
    /// A sync's one fence.
    SyncFence,
    /// A snapshot install: the seal that links its durable chain into the list.
    AttachFlush,
    /// A snapshot install: the fence after it.
    AttachFence,
    /// Compaction: its fresh pages.
    CompactFlush,
    /// Compaction: the fence before the head switch.
    CompactFence,
    /// Compaction: the new `head`.
    HeadFlush,
    /// Compaction: the fence after the head switch (before the old pages are reused).
    HeadFence,
    /// The hard state's checksum word (`hard_check`), written before the word.
    HardCheckFlush,
    /// The fence after it (before the hard state word is written).
    HardCheckFence,
    /// The Raft hard state word.
    HardStateFlush,
    /// The fence ending a hard-state update.
    HardStateFence,
}

impl Site {
    /// Every site, for the mutation suite.
    pub const ALL: [Site; 18] = [
        Site::FormatFlush,
        Site::FormatControlFlush,
        Site::FormatFence,
        Site::SettleFlush,
        Site::SettleFence,
        Site::SyncFlush,
        Site::HintFlush,
        Site::SyncFence,
        Site::AttachFlush,
        Site::AttachFence,
        Site::CompactFlush,
        Site::CompactFence,
        Site::HeadFlush,
        Site::HeadFence,
        Site::HardCheckFlush,
        Site::HardCheckFence,
        Site::HardStateFlush,
        Site::HardStateFence,
    ];
}

impl pmem_core::site_switch::Site for Site {
    const EVERY: &'static [Site] = &Site::ALL;
}

#[cfg(feature = "mutation")]
static SWITCH: pmem_core::site_switch::SiteSwitch<Site> = pmem_core::site_switch::SiteSwitch::new();

/// Removes the flush or fence at `site` from every list store of the process (`None`:
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
