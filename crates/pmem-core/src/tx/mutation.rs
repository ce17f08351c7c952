//! The flush and fence sites of the log, named, so a mutation test can remove each
//! in turn and show that the crash suite catches it (see
//! `crates/pmem-core/tests/tx_crash.rs`). Without the `sim` feature the sites are
//! plain calls; with it, each first asks whether its log removed it.

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

#[cfg(feature = "sim")]
impl Site {
    fn index(self) -> u8 {
        SITES
            .iter()
            .position(|&s| s == self)
            .map_or(u8::MAX, |i| i as u8 + 1)
    }
}

impl TxLog {
    /// Removes `site` (or none) from this log's transactions, for a mutation test.
    /// Recovery by a freshly opened log runs unmutated. Requires the `sim` feature.
    #[cfg(feature = "sim")]
    pub fn remove_site(&self, site: Option<Site>) {
        self.removed.store(
            site.map_or(0, Site::index),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Makes `site` (or none) fail with an I/O error in this log, as an msync
    /// failure would: for tests of the error paths. Requires the `sim` feature.
    #[cfg(feature = "sim")]
    pub fn fail_site(&self, site: Option<Site>) {
        self.failing.store(
            site.map_or(0, Site::index),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    #[inline(always)]
    fn injected(&self, site: Site) -> Result<(), PoolError> {
        #[cfg(feature = "sim")]
        if self.failing.load(std::sync::atomic::Ordering::Relaxed) == site.index() {
            return Err(PoolError::io(
                "injected failure",
                "",
                std::io::Error::other(format!("{site:?}")),
            ));
        }
        let _ = site;
        Ok(())
    }

    #[inline(always)]
    fn removed(&self, site: Site) -> bool {
        #[cfg(feature = "sim")]
        {
            self.removed.load(std::sync::atomic::Ordering::Relaxed) == site.index()
        }
        #[cfg(not(feature = "sim"))]
        {
            let _ = site;
            false
        }
    }

    /// Flushes a range of the pool at a named site.
    #[inline(always)]
    #[track_caller]
    pub(crate) fn flush_at(&self, site: Site, offset: u64, len: u64) -> Result<(), PoolError> {
        self.injected(site)?;
        if self.removed(site) {
            return Ok(());
        }
        self.pool.flush(offset, len)
    }

    /// Fences at a named site.
    #[inline(always)]
    #[track_caller]
    pub(crate) fn fence_at(&self, site: Site) -> Result<(), PoolError> {
        self.injected(site)?;
        if self.removed(site) {
            return Ok(());
        }
        self.pool.drain()
    }
}
