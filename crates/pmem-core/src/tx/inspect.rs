//! A read-only look at a [`TxHeap`](super::TxHeap): what `pmkit pool info` and
//! `pmkit pool check` report about a transaction heap without recovering it.
//!
//! Opening a heap runs recovery, which writes (rolls transactions back or
//! forward). Inspection instead validates what recovery would rely on — the log
//! header's checksum and geometry, every lane's state word, the lazy ring's
//! entries, the allocator's metadata (when it is pmem-core's page allocator) —
//! and reports which lanes and entries recovery would act on, changing nothing.

use super::layout::Phase;
use super::log::{lane_start, read_valid_header};
use super::{allocator_start, TxError, TxGeometry, TxLog};
use crate::alloc::{AllocError, PageAllocStats, PageAllocator};
use crate::ptr::PPtr;
use crate::Pool;

/// What [`TxHeap::inspect`](super::TxHeap::inspect) found: the log's shape and
/// state, and the page allocator's usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxHeapSummary {
    /// The log's geometry, as recorded in its header.
    pub geometry: TxGeometry,
    /// Bytes the log occupies at the heap's start.
    pub log_bytes: u64,
    /// Lanes with no transaction.
    pub lanes_idle: u32,
    /// Lanes whose transaction was running (uncommitted) when the pool was last
    /// closed: the next read-write open rolls them back.
    pub lanes_active: u32,
    /// Lanes whose transaction had committed with work left: the next read-write
    /// open finishes them.
    pub lanes_committed: u32,
    /// Committed lazy transactions in the ring that the next read-write open
    /// replays.
    pub lazy_entries: u32,
    /// Where the page allocator's region starts.
    pub allocator_start: u64,
    /// The page allocator's usage; `None` when the region holds another
    /// allocator (a heap made by [`TxHeap::create_with`](super::TxHeap::create_with),
    /// which the caller may inspect at [`TxHeapSummary::allocator_start`]).
    pub allocator: Option<PageAllocStats>,
    /// Allocated blocks (objects) in the page allocator (`None` as above).
    pub blocks: Option<u64>,
}

impl TxHeapSummary {
    /// Whether the next read-write open has transactions to roll back or forward.
    pub fn recovery_pending(&self) -> bool {
        self.lanes_active + self.lanes_committed + self.lazy_entries > 0
            || self.allocator.is_some_and(|a| a.intent_pending)
    }
}

/// Reads and validates the transaction heap of `pool` (made by
/// [`TxHeap::create`](super::TxHeap::create)) without writing anything.
pub(super) fn inspect(pool: &mut Pool) -> Result<TxHeapSummary, TxError> {
    let region = pool.heap().start;
    let (header, geometry, geo) = read_valid_header(pool, region)?;
    let log_bytes = TxLog::region_size(&geometry);
    let (mut idle, mut active, mut committed) = (0, 0, 0);
    for lane in 0..header.lanes {
        let word: u64 = pool.read(PPtr::from_offset(lane_start(region, &geo, lane)))?;
        let state = super::layout::LaneState::decode(word)
            .ok_or_else(|| TxError::Corrupt(format!("lane {lane} has state word {word:#x}")))?;
        match state.phase {
            Phase::Idle => idle += 1,
            Phase::Active => active += 1,
            Phase::Committed => committed += 1,
        }
    }
    // The records may not write the log (the allocator's metadata is checked by
    // recovery, which knows the allocator).
    let forbidden = [region..region + log_bytes, 0..0];
    let lazy_entries = if header.ring_bytes > 0 {
        super::lazy::Ring::new(lane_start(region, &geo, header.lanes), header.ring_bytes)
            .pending(pool, &forbidden)?
    } else {
        0
    };
    let alloc_start = allocator_start(region, log_bytes);
    let (allocator, blocks) = match PageAllocator::inspect(pool, alloc_start) {
        Ok(a) => (
            Some(a),
            Some(PageAllocator::inspect_blocks(pool, alloc_start)?.len() as u64),
        ),
        Err(AllocError::NotFormatted { .. }) => (None, None),
        Err(e) => return Err(e.into()),
    };
    Ok(TxHeapSummary {
        geometry,
        log_bytes,
        lanes_idle: idle,
        lanes_active: active,
        lanes_committed: committed,
        lazy_entries,
        allocator_start: alloc_start,
        allocator,
        blocks,
    })
}
