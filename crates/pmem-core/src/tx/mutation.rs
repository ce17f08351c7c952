//! The flush and fence sites of the log, named, so a mutation test can remove each
//! in turn and show that the crash suite catches it (see
//! `crates/pmem-core/tests/tx_crash.rs`). Without the `sim` feature the sites are
//! plain calls; with it, each goes through its log's
//! [`SiteSwitch`](crate::site_switch::SiteSwitch).

use super::TxLog;
use crate::PoolError;

/// A flush or fence of the transaction log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Site {
    /// Flush of the lane's state word.
    StateFlush,
    /// Flush of a log record (metadata and data).
    RecordFlush,
    /// Fence after undo records, before the write in place.
    SnapshotFence,
    /// Fence making allocation records durable before their blocks are marked in the
    /// allocator (when no snapshot fence followed them).
    AllocRecordFence,
    /// Undo: flush of data written in place (fenced at commit).
    DataFlush,
    /// Undo commit: fence after that flush, before the commit point.
    CommitDataFence,
    /// Redo commit: fence after the records, before the commit point.
    RedoRecordsFence,
    /// Fence making the lane's committed state durable (the redo commit point).
    CommitPointFence,
    /// Fence making the lane idle after an undo commit (its commit point).
    CommitIdleFence,
    /// Flush of bytes copied from the log in place (rollback, redo apply).
    CopyFlush,
    /// Fence after a rollback restored the data.
    RollbackFence,
    /// Fence making the lane idle after a rollback.
    RollbackIdleFence,
    /// Fence after redo records were applied in place.
    ApplyFence,
    /// Fence making the lane idle after finishing a committed transaction.
    FinishIdleFence,
    /// Lazy commit: flush of the ring entry.
    LazyEntryFlush,
    /// Lazy commit: fence after the entry (the commit point).
    LazyCommitFence,
    /// Checkpoint: flush of a location an entry wrote in place.
    CheckpointFlush,
    /// Checkpoint: fence after those flushes and the blocks' marks.
    CheckpointFence,
    /// Checkpoint: flush of the ring's truncation point.
    CheckpointHeaderFlush,
    /// Checkpoint: fence after the truncation point.
    CheckpointHeaderFence,
}

/// Every site.
pub const SITES: [Site; 20] = [
    Site::StateFlush,
    Site::RecordFlush,
    Site::SnapshotFence,
    Site::AllocRecordFence,
    Site::DataFlush,
    Site::CommitDataFence,
    Site::RedoRecordsFence,
    Site::CommitPointFence,
    Site::CommitIdleFence,
    Site::CopyFlush,
    Site::RollbackFence,
    Site::RollbackIdleFence,
    Site::ApplyFence,
    Site::FinishIdleFence,
    Site::LazyEntryFlush,
    Site::LazyCommitFence,
    Site::CheckpointFlush,
    Site::CheckpointFence,
    Site::CheckpointHeaderFlush,
    Site::CheckpointHeaderFence,
];

impl crate::site_switch::Site for Site {
    const EVERY: &'static [Site] = &SITES;
}

impl TxLog {
    /// Removes `site` (or none) from this log's transactions, for a mutation test.
    /// Recovery by a freshly opened log runs unmutated. Requires the `sim` feature.
    #[cfg(feature = "sim")]
    pub fn remove_site(&self, site: Option<Site>) {
        self.switch.remove(site);
    }

    /// Makes `site` (or none) fail with an I/O error in this log, as an msync
    /// failure would: for tests of the error paths. Requires the `sim` feature.
    #[cfg(feature = "sim")]
    pub fn fail_site(&self, site: Option<Site>) {
        self.switch.fail(site);
    }

    /// Flushes a range of the pool at a named site.
    #[inline(always)]
    #[track_caller]
    pub(crate) fn flush_at(&self, site: Site, offset: u64, len: u64) -> Result<(), PoolError> {
        #[cfg(feature = "sim")]
        return self.switch.flush(&self.pool, site, offset, len);
        #[cfg(not(feature = "sim"))]
        {
            let _ = site;
            self.pool.flush(offset, len)
        }
    }

    /// Fences at a named site.
    #[inline(always)]
    #[track_caller]
    pub(crate) fn fence_at(&self, site: Site) -> Result<(), PoolError> {
        #[cfg(feature = "sim")]
        return self.switch.fence(&self.pool, site);
        #[cfg(not(feature = "sim"))]
        {
            let _ = site;
            self.pool.drain()
        }
    }
}
