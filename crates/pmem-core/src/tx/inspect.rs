//! A read-only look at a [`TxHeap`](super::TxHeap): what `pmkit pool info` and
//! `pmkit pool check` report about a transaction heap without recovering it.
//!
//! Opening a heap runs recovery, which writes (rolls transactions back or
//! forward). Inspection instead validates what recovery would rely on — the log
//! header's checksum and geometry, every lane's state word, the lazy ring's
//! entries, the allocator's metadata (when it is pmem-core's page allocator) —
//! and reports which lanes and entries recovery would act on, changing nothing.

use super::layout::Phase;
use super::log::{lane_start, read_valid_header, scan_lane, Found};
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
    /// Valid log records of those lanes (data and allocation records) that the
    /// next read-write open replays; each was checked to stay inside the pool.
    pub records_pending: u64,
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
    let alloc_start = allocator_start(region, log_bytes);
    // The records may not write the log (the allocator's metadata is checked by
    // recovery, which knows the allocator).
    let forbidden = [region..region + log_bytes, 0..0];
    let (mut idle, mut active, mut committed, mut records) = (0, 0, 0, 0);
    for lane in 0..header.lanes {
        let base = lane_start(region, &geo, lane);
        let word: u64 = pool.read(PPtr::from_offset(base))?;
        let state = super::layout::LaneState::decode(word)
            .ok_or_else(|| TxError::Corrupt(format!("lane {lane} has state word {word:#x}")))?;
        match state.phase {
            Phase::Idle => idle += 1,
            Phase::Active => active += 1,
            Phase::Committed => committed += 1,
        }
        if state.phase != Phase::Idle {
            let found = scan_lane(pool, base, &geo, lane, state.tid, &forbidden)?;
            check_replayable(pool, lane, &found, alloc_start)?;
            records += found.len() as u64;
        }
    }
    let lazy_entries = if header.ring_bytes > 0 {
        super::lazy::Ring::new(lane_start(region, &geo, header.lanes), header.ring_bytes)
            .pending(pool, &forbidden)?
    } else {
        0
    };
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
        records_pending: records,
        lazy_entries,
        allocator_start: alloc_start,
        allocator,
        blocks,
    })
}

/// Checks what [`scan_lane`] leaves to recovery's writes: every data record
/// restores bytes inside the pool and past its header, and every allocation
/// record names a block in the heap past the allocator's start. (The scan itself
/// refused data outside the record's lane and targets in the log.) Recovery would
/// fail at such a write; inspection names the record instead, writing nothing.
fn check_replayable(
    pool: &Pool,
    lane: u32,
    records: &[Found],
    alloc_start: u64,
) -> Result<(), TxError> {
    let corrupt = |what: String| TxError::Corrupt(format!("lane {lane}: {what}"));
    for r in records {
        match *r {
            Found::Data { addr, size, .. } => {
                if addr < crate::pool::HEADER_AREA || pool.check_range(addr, size).is_err() {
                    return Err(corrupt(format!(
                        "a record writes {size} bytes at {addr:#x}, outside the pool's data"
                    )));
                }
            }
            Found::Alloc { block, size, .. } => {
                if block < alloc_start || pool.check_range(block, size).is_err() {
                    return Err(corrupt(format!(
                        "an allocation record names a block at {block:#x} ({size} bytes) outside the heap"
                    )));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::layout::{check_word, LaneState, Phase, WordRecord, WORD_RECORD_BYTES};
    use super::super::log::{lane_geometry, lane_start};
    use super::super::{TxGeometry, TxHeap};
    use crate::pool::header::HEADER_AREA;
    use crate::{PPtr, Pool, PoolOptions};
    use zerocopy::IntoBytes;

    /// A closed transaction heap whose lane 0 is left Active (TID 5) with one
    /// valid word record restoring 8 bytes at `addr`, as a crash mid-transaction
    /// leaves it; returns the pool, open again read-write for inspection.
    fn heap_with_pending_word(dir: &std::path::Path, addr: u64) -> Pool {
        let path = dir.join("tx.pool");
        let geometry = TxGeometry::default();
        let region = {
            let pool = Pool::create(&path, &PoolOptions::new("tx", 1 << 20)).expect("create");
            let heap = TxHeap::create(pool, &geometry, 4096).expect("format");
            heap.pool().heap().start
        };
        let mut pool = Pool::open(&path, "tx").expect("reopen");
        let geo = lane_geometry(&geometry);
        let lane = lane_start(region, &geo, 0);
        let data = lane + geo.word_data;
        let mut record = WordRecord {
            addr,
            data,
            check: 0,
        };
        let old = 0x1234_u64;
        record.check = check_word(5, &record.as_bytes()[..16], old.as_bytes());
        let state = LaneState {
            tid: 5,
            redo: false,
            phase: Phase::Active,
        };
        pool.write(PPtr::<u64>::from_offset(data), &old)
            .expect("data");
        pool.write(
            PPtr::<WordRecord>::from_offset(lane + geo.word_meta),
            &record,
        )
        .expect("record");
        pool.write(PPtr::<u64>::from_offset(lane), &state.encode())
            .expect("state");
        assert_eq!(WORD_RECORD_BYTES, 24);
        pool
    }

    #[test]
    fn a_pending_record_inside_the_heap_is_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut pool = heap_with_pending_word(dir.path(), (1 << 20) - 4096);
        let s = TxHeap::inspect(&mut pool).expect("a replayable log");
        assert_eq!((s.lanes_active, s.records_pending), (1, 1));
        assert!(s.recovery_pending());
    }

    #[test]
    fn a_pending_record_outside_the_pool_or_in_the_header_is_named() {
        for addr in [1 << 20, HEADER_AREA - 8, u64::MAX - 3] {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut pool = heap_with_pending_word(dir.path(), addr);
            let e = TxHeap::inspect(&mut pool).expect_err("an unreplayable record");
            assert!(
                e.to_string().contains("lane 0: a record writes"),
                "{addr:#x}: {e}"
            );
        }
    }
}
