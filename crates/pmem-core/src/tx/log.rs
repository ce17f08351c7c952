//! The log itself: formatting and opening the region, handing out lanes, and the
//! two procedures every transaction ends with — roll back (abort, or recovery of an
//! uncommitted transaction) and finish (after the commit point, or recovery of a
//! committed one). Recovery runs exactly these, so an abort in this run and a
//! recovery after a crash are one code path; both are idempotent, so a crash during
//! recovery is recovered again.

use std::sync::Arc;

use zerocopy::{FromBytes, IntoBytes};

use super::lanes::{LaneGuard, LaneSet};
use super::layout::{
    check_word, AllocRecord, LaneGeometry, LaneHeader, LaneState, LogHeader, ObjectRecord, Phase,
    WordRecord, ALLOC_RECORD_BYTES, FRESH_FLAG, KIND_ALLOC, KIND_FREE, LOG_MAGIC, LOG_MAGIC_PREFIX,
    OBJECT_RECORD_BYTES, WORD_RECORD_BYTES,
};
use super::lazy::Ring;
use super::mutation::Site;
use super::{TxError, TxGeometry};
use crate::alloc::PersistentAllocator;
use crate::ptr::PPtr;
use crate::Pool;

/// The TIDs an opening may start its lanes at are below this: a log would need
/// 2^60 transactions to get there, and the state word (`tid << 3`) holds TIDs up
/// to 2^61, so the lanes keep 2^60 transactions of headroom.
const TID_LIMIT: u64 = 1 << 60;

/// What recovery found and did when a log was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Transactions rolled back (uncommitted at the crash).
    pub rolled_back: u32,
    /// Committed transactions whose remaining work (redo, allocator marks) was
    /// finished.
    pub rolled_forward: u32,
    /// Allocations of rolled-back transactions released to the allocator.
    pub blocks_released: u32,
    /// Lazy transactions replayed from the ring.
    pub lazy_replayed: u32,
}

/// A valid record found in a lane, for rollback or redo.
pub(crate) enum Found {
    /// A data record: `size` bytes at `addr`, logged at `data`. `fresh`: the
    /// bytes lie in a block the transaction allocated (logged only under
    /// `TxOptions::log_fresh`), so a rollback, which frees the block, skips them.
    Data {
        addr: u64,
        data: u64,
        size: u64,
        fresh: bool,
    },
    /// An allocation record: `kind` (`KIND_ALLOC` or `KIND_FREE`), `block`, `size`.
    Alloc { kind: u64, block: u64, size: u64 },
}

/// The transaction log of a pool region. See the [module documentation](super).
pub struct TxLog {
    pub(crate) pool: Arc<Pool>,
    pub(crate) region: u64,
    pub(crate) header: LogHeader,
    pub(crate) geo: LaneGeometry,
    pub(crate) alloc: Option<Arc<dyn PersistentAllocator>>,
    /// The ring of lazy transactions, if the geometry has one.
    pub(crate) ring: Option<Ring>,
    /// The lanes, each with the TID it uses next.
    lanes: LaneSet,
    /// Drawn at each opening: `PMutex` words of other openings count as free.
    pub(crate) generation: u64,
    /// The flush or fence site a mutation test removed or makes fail.
    #[cfg(feature = "sim")]
    pub(crate) switch: crate::site_switch::SiteSwitch<Site>,
}

impl std::fmt::Debug for TxLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxLog")
            .field("region", &self.region)
            .field("lanes", &self.header.lanes)
            .field("lane_size", &self.geo.size)
            .finish()
    }
}

impl TxLog {
    /// Bytes a log of `geometry` occupies (a multiple of 64).
    pub fn region_size(geometry: &TxGeometry) -> u64 {
        64 + u64::from(geometry.lanes) * lane_geometry(geometry).size
            + Ring::region_size(geometry.lazy_ring_bytes)
    }

    /// Formats a log at `region` (64-byte aligned, [`TxLog::region_size`] bytes).
    /// `alloc`, if any, serves `Tx::alloc` and `Tx::free`.
    ///
    /// # Safety
    /// The region belongs to the log alone from now on: nothing else may read or
    /// write it, in this run or after reopening.
    pub unsafe fn format(
        pool: Arc<Pool>,
        region: u64,
        geometry: &TxGeometry,
        alloc: Option<Arc<dyn PersistentAllocator>>,
    ) -> Result<TxLog, TxError> {
        geometry.validate()?;
        if !region.is_multiple_of(64) || region == 0 {
            return Err(TxError::InvalidRegion {
                offset: region,
                reason: "not a non-null 64-byte aligned offset",
            });
        }
        let geo = lane_geometry(geometry);
        let size = Self::region_size(geometry);
        pool.check_range(region, size)
            .map_err(|_| TxError::InvalidRegion {
                offset: region,
                reason: "does not fit in the pool",
            })?;
        let header = LogHeader {
            magic: LOG_MAGIC,
            lanes: geometry.lanes,
            word_records: geometry.word_records,
            object_records: geometry.object_records,
            alloc_records: geometry.alloc_records,
            object_bytes: geometry.object_bytes,
            lane_size: geo.size,
            alloc_region: 0,
            ring_bytes: geometry.lazy_ring_bytes.div_ceil(64) * 64,
            checksum: 0,
        }
        .sealed();
        for lane in 0..geometry.lanes {
            let state = LaneState {
                tid: u64::from(lane),
                redo: false,
                phase: Phase::Idle,
            };
            let h = LaneHeader {
                state: state.encode(),
                ..LaneHeader::default()
            };
            // SAFETY: the region is the log's (caller's contract).
            unsafe { pool.write_bytes_shared(lane_start(region, &geo, lane), h.as_bytes())? };
            pool.flush(lane_start(region, &geo, lane), 64)?;
        }
        let log = TxLog::assemble(Arc::clone(&pool), region, header, geo, alloc);
        if let Some(ring) = &log.ring {
            ring.format(&log)?;
        }
        pool.drain()?;
        // The header goes last: a crash before it is durable leaves no valid log.
        // SAFETY: as above.
        unsafe { pool.write_bytes_shared(region, header.as_bytes())? };
        pool.persist(region, 64)?;
        Ok(log)
    }

    /// Opens the log at `region` and recovers every lane: an uncommitted
    /// transaction is rolled back (its allocations released to `alloc`), a committed
    /// one finished. Idempotent: a crash during it is recovered by the next open.
    ///
    /// # Safety
    /// As for [`TxLog::format`]; `alloc` must be the allocator the log's
    /// transactions allocated from.
    pub unsafe fn open(
        pool: Arc<Pool>,
        region: u64,
        alloc: Option<Arc<dyn PersistentAllocator>>,
    ) -> Result<(TxLog, RecoveryReport), TxError> {
        let (header, _, geo) = read_valid_header(&pool, region)?;
        let log = TxLog::assemble(pool, region, header, geo, alloc);
        let mut report = RecoveryReport::default();
        for lane in 0..header.lanes {
            log.recover_lane(lane, &mut report)?;
        }
        // Lazy entries are newer than any lane's transaction (a transaction of
        // another mode checkpoints the ring before it starts).
        if let Some(ring) = &log.ring {
            report.lazy_replayed = ring.recover(&log)?;
        }
        log.reset_free_list()?;
        Ok((log, report))
    }

    fn assemble(
        pool: Arc<Pool>,
        region: u64,
        header: LogHeader,
        geo: LaneGeometry,
        alloc: Option<Arc<dyn PersistentAllocator>>,
    ) -> TxLog {
        let lanes = header.lanes;
        let ring = (header.ring_bytes > 0)
            .then(|| Ring::new(lane_start(region, &geo, lanes), header.ring_bytes));
        TxLog {
            ring,
            pool,
            region,
            header,
            geo,
            alloc,
            lanes: LaneSet::new((0..lanes).map(|l| u64::from(l) + u64::from(lanes))),
            generation: uuid::Uuid::new_v4().as_u64_pair().0 << 1,
            #[cfg(feature = "sim")]
            switch: crate::site_switch::SiteSwitch::new(),
        }
    }

    /// Sets each lane's next TID (after recovery).
    ///
    /// A TID is never used twice, not even by a transaction that left no durable
    /// trace of its start: a crash can lose a lane's `Active` store while some of its
    /// records reached the media, and a later transaction reusing that TID would
    /// find them valid (its rollback would apply another transaction's records). So
    /// every opening raises a durable floor (the word after lane 0's state) above
    /// every TID the previous opening could have used, and starts every lane there.
    fn reset_free_list(&self) -> Result<(), TxError> {
        let lanes = u64::from(self.header.lanes);
        let floor_at = self.lane_off(0) + 8;
        let old_floor: u64 = self.pool.read(PPtr::from_offset(floor_at))?;
        let mut rounds = Vec::new();
        for lane in 0..self.header.lanes {
            rounds.push(self.lane_state(lane)?.tid / lanes);
        }
        let max_round = rounds.iter().copied().max().unwrap_or(0);
        // Every TID the last opening used is at most one round past a durable one,
        // or at its floor when a lane has none: two rounds above both is unused.
        // (A lane's TID moves on only past a transaction that wrote to the lane,
        // and such a one ends with its state durable: see `LaneGuard::give_back`.)
        // The floor word is not checksummed and a lane's state word holds any TID
        // below 2^61: corrupt values must not overflow into reused TIDs (found by
        // the `tx_recover` fuzz target; in release builds the sums wrapped).
        let floor = max_round.max(old_floor).saturating_add(2);
        let next: Vec<u64> = (0..lanes)
            .map(|lane| {
                let round = rounds[lane as usize].saturating_add(1).max(floor);
                lanes.saturating_mul(round).saturating_add(lane)
            })
            .collect();
        if next.iter().any(|&tid| tid >= TID_LIMIT) {
            return Err(TxError::Corrupt(format!(
                "transaction ids would pass {TID_LIMIT:#x} (floor {old_floor:#x}, lane rounds \
                 up to {max_round:#x}): the log's floor or a lane's state is corrupt"
            )));
        }
        if !self.pool.is_read_only() {
            // SAFETY: the word is the log's own (lane 0's header line), written only
            // here, single-threaded at open.
            unsafe {
                self.pool
                    .write_bytes_shared(floor_at, &floor.to_le_bytes())?
            };
            self.pool.persist(floor_at, 8)?;
        }
        self.lanes.set_next_tids(next);
        Ok(())
    }

    /// Takes a lane for a transaction (waiting for one if all are busy); the guard
    /// has its TID and buffers.
    pub(crate) fn take_lane(&self) -> Result<LaneGuard<'_>, TxError> {
        self.lanes.take()
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The allocator transactions allocate from, if any.
    pub fn allocator(&self) -> Option<&Arc<dyn PersistentAllocator>> {
        self.alloc.as_ref()
    }

    /// Number of lanes (transactions that can run at once).
    pub fn lanes(&self) -> u32 {
        self.header.lanes
    }

    pub(crate) fn lane_off(&self, lane: u32) -> u64 {
        lane_start(self.region, &self.geo, lane)
    }

    pub(crate) fn lane_state(&self, lane: u32) -> Result<LaneState, TxError> {
        let word: u64 = self.pool.read(PPtr::from_offset(self.lane_off(lane)))?;
        LaneState::decode(word)
            .ok_or_else(|| TxError::Corrupt(format!("lane {lane} has state word {word:#x}")))
    }

    /// Stores the lane's state word (not persisted: the caller flushes and fences).
    pub(crate) fn store_state(&self, lane: u32, state: LaneState) -> Result<(), TxError> {
        let off = self.lane_off(lane);
        // SAFETY: the lane belongs to the caller (taken from the free list, or during
        // recovery before any lane is handed out).
        unsafe {
            self.pool
                .write_bytes_shared(off, &state.encode().to_le_bytes())?
        };
        self.flush_at(Site::StateFlush, off, 8)?;
        Ok(())
    }

    /// The valid records of `tid` in `lane`, in logging order per section: data
    /// records (word, then object) and allocation records.
    pub(crate) fn scan(&self, lane: u32, tid: u64) -> Result<Vec<Found>, TxError> {
        scan_lane(
            &self.pool,
            self.lane_off(lane),
            &self.geo,
            lane,
            tid,
            &self.forbidden(),
        )
    }

    /// The pool range of the whole log (header, lanes, ring).
    pub(crate) fn range(&self) -> std::ops::Range<u64> {
        self.region..self.region + TxLog::region_size(&header_geometry(&self.header))
    }

    /// What no record may write: the log, and its allocator's metadata.
    pub(crate) fn forbidden(&self) -> [std::ops::Range<u64>; 2] {
        let meta = self.alloc.as_ref().and_then(|a| a.metadata_range());
        [self.range(), meta.unwrap_or(0..0)]
    }

    fn recover_lane(&self, lane: u32, report: &mut RecoveryReport) -> Result<(), TxError> {
        let state = self.lane_state(lane)?;
        match state.phase {
            Phase::Idle => Ok(()),
            Phase::Active => {
                report.rolled_back += 1;
                report.blocks_released += self.roll_back(lane, state)?;
                Ok(())
            }
            Phase::Committed => {
                report.rolled_forward += 1;
                self.finish(lane, state, true)
            }
        }
    }

    /// Undoes an uncommitted transaction: restores the undo records' data (undo
    /// mode), unmarks its allocations and marks its frees allocated again, and
    /// stores the lane idle; then lets go of the allocator's holds on those blocks.
    /// Returns the number of allocations undone. Idempotent.
    pub(crate) fn roll_back(&self, lane: u32, state: LaneState) -> Result<u32, TxError> {
        let records = self.scan(lane, state.tid)?;
        let mut restored = false;
        if !state.redo {
            for r in &records {
                // A fresh block's old bytes need no restoring: the block is freed
                // below (and may be free already, if an earlier recovery of this
                // lane was interrupted).
                if let Found::Data {
                    addr,
                    data,
                    size,
                    fresh: false,
                } = *r
                {
                    self.copy_within_pool(data, addr, size)?;
                    restored = true;
                }
            }
        }
        // Newest first, so a block allocated and freed by the transaction ends free.
        let undone = self.mark_all(records.iter().rev(), |kind| kind == KIND_FREE)?;
        if restored || undone > 0 {
            // The data and the allocator's bits are durable before the lane is idle.
            self.fence_at(Site::RollbackFence)?;
        }
        self.go_idle(lane, state, Site::RollbackIdleFence)?;
        self.release_all(&records);
        Ok(records
            .iter()
            .filter(|r| {
                matches!(
                    r,
                    Found::Alloc {
                        kind: KIND_ALLOC,
                        ..
                    }
                )
            })
            .count() as u32)
    }

    /// Finishes a committed transaction: applies its redo records (redo mode),
    /// marks its allocations and frees again if `remark` (recovery: they were only
    /// flushed when the commit point was stored), and stores the lane idle; then
    /// lets go of the allocator's holds. Idempotent.
    pub(crate) fn finish(&self, lane: u32, state: LaneState, remark: bool) -> Result<(), TxError> {
        let records = self.scan(lane, state.tid)?;
        let mut work = false;
        if state.redo {
            for r in &records {
                if let Found::Data {
                    addr, data, size, ..
                } = *r
                {
                    self.copy_within_pool(data, addr, size)?;
                    work = true;
                }
            }
        }
        if remark {
            work |= self.mark_all(records.iter(), |kind| kind == KIND_ALLOC)? > 0;
        }
        if work {
            self.fence_at(Site::ApplyFence)?;
        }
        self.go_idle(lane, state, Site::FinishIdleFence)?;
        self.release_all(&records);
        Ok(())
    }

    /// Marks the block of every allocation record in the allocator, allocated if
    /// `allocated(kind)`, else free (flushed, not fenced). Returns how many.
    fn mark_all<'r>(
        &self,
        records: impl Iterator<Item = &'r Found>,
        allocated: impl Fn(u64) -> bool,
    ) -> Result<u32, TxError> {
        let mut marked = 0;
        for r in records {
            if let Found::Alloc { kind, block, size } = *r {
                let alloc = self.alloc.as_ref().ok_or(TxError::NoAllocator)?;
                // SAFETY: the block is this transaction's (its record is valid for
                // the lane's TID), and the record, durable before any mark of the
                // transaction, undoes this mark too.
                unsafe { alloc.tx_mark(PPtr::from_offset(block), size, allocated(kind)) }?;
                marked += 1;
            }
        }
        Ok(marked)
    }

    /// Lets go of the allocator's holds on every block of `records`.
    pub(crate) fn release_all(&self, records: &[Found]) {
        if let Some(alloc) = &self.alloc {
            for r in records {
                if let Found::Alloc { block, size, .. } = *r {
                    alloc.tx_release(PPtr::from_offset(block), size);
                }
            }
        }
    }

    /// Stores the lane idle and fences (at `site`).
    pub(crate) fn go_idle(&self, lane: u32, state: LaneState, site: Site) -> Result<(), TxError> {
        self.store_state(
            lane,
            LaneState {
                phase: Phase::Idle,
                ..state
            },
        )?;
        self.fence_at(site)?;
        Ok(())
    }

    /// Copies `size` log bytes at `from` to `to` and flushes them (no fence).
    pub(crate) fn copy_within_pool(&self, from: u64, to: u64, size: u64) -> Result<(), TxError> {
        let bytes = self.pool.bytes(from, size)?.to_vec();
        // SAFETY: `to` is data of the transaction being rolled back or finished,
        // which nothing else accesses meanwhile (the transaction's contract, or
        // recovery before the pool is shared).
        unsafe { self.pool.write_bytes_shared(to, &bytes)? };
        self.flush_at(Site::CopyFlush, to, size)?;
        Ok(())
    }
}

/// The valid records of `tid` in the lane at `base`, in logging order per section:
/// what recovery replays. Reads only, so [`TxHeap::inspect`](super::TxHeap::inspect)
/// checks the same records recovery would act on.
pub(super) fn scan_lane(
    pool: &Pool,
    base: u64,
    g: &LaneGeometry,
    lane: u32,
    tid: u64,
    forbidden: &[std::ops::Range<u64>],
) -> Result<Vec<Found>, TxError> {
    let mut out = Vec::new();
    for i in 0..g.word_records {
        let at = base + g.word_meta + i * WORD_RECORD_BYTES;
        let r: WordRecord = pool.read(PPtr::from_offset(at))?;
        let Ok(data) = pool.bytes(r.data, 8) else {
            break;
        };
        if r.check != check_word(tid, &r.as_bytes()[..16], data) {
            break;
        }
        let section = base + g.word_data..base + g.object_meta;
        check_data_record(lane, r.addr & !FRESH_FLAG, r.data, 8, section, forbidden)?;
        out.push(Found::Data {
            addr: r.addr & !FRESH_FLAG,
            data: r.data,
            size: 8,
            fresh: r.addr & FRESH_FLAG != 0,
        });
    }
    for i in 0..g.object_records {
        let at = base + g.object_meta + i * OBJECT_RECORD_BYTES;
        let r: ObjectRecord = pool.read(PPtr::from_offset(at))?;
        let Ok(data) = pool.bytes(r.data, u64::from(r.size)) else {
            break;
        };
        if r.check != check_word(tid, &r.checked_fields(), data) {
            break;
        }
        let section = base + g.object_data..base + g.alloc_meta;
        check_data_record(lane, r.addr, r.data, u64::from(r.size), section, forbidden)?;
        out.push(Found::Data {
            addr: r.addr,
            data: r.data,
            size: u64::from(r.size),
            fresh: u64::from(r.flags) & FRESH_FLAG != 0,
        });
    }
    for i in 0..g.alloc_records {
        let at = base + g.alloc_meta + i * ALLOC_RECORD_BYTES;
        let r: AllocRecord = pool.read(PPtr::from_offset(at))?;
        if r.check != check_word(tid, &r.as_bytes()[..24], &[]) {
            break;
        }
        if r.kind != KIND_ALLOC && r.kind != KIND_FREE {
            return Err(TxError::Corrupt(format!(
                "lane {lane}: allocation record of unknown kind {}",
                r.kind
            )));
        }
        out.push(Found::Alloc {
            kind: r.kind,
            block: r.block,
            size: r.size,
        });
    }
    Ok(out)
}

/// A record whose check is valid must still describe what a transaction logs:
/// data inside `section` (its own lane's data), and a target outside every range
/// of `forbidden` (the log, the allocator's metadata). A checksummed record that
/// does not (only forged or corrupt media make one) would let recovery copy
/// anywhere, the log itself and its allocator's metadata included (found by the
/// `tx_recover` fuzz target, which reseals checks).
fn check_data_record(
    lane: u32,
    addr: u64,
    data: u64,
    size: u64,
    section: std::ops::Range<u64>,
    forbidden: &[std::ops::Range<u64>],
) -> Result<(), TxError> {
    let in_section =
        data >= section.start && data.checked_add(size).is_some_and(|e| e <= section.end);
    let outside = forbidden.iter().all(|f| {
        f.is_empty() || addr.checked_add(size).is_some_and(|e| e <= f.start) || addr >= f.end
    });
    if in_section && outside {
        Ok(())
    } else {
        Err(TxError::Corrupt(format!(
            "lane {lane}: a record logs {size} bytes at {addr:#x} from {data:#x}, \
             outside its lane's data or into the log or the allocator's metadata"
        )))
    }
}

pub(super) fn lane_geometry(g: &TxGeometry) -> LaneGeometry {
    LaneGeometry::new(
        u64::from(g.word_records),
        u64::from(g.object_records),
        g.object_bytes,
        u64::from(g.alloc_records),
    )
}

pub(super) fn lane_start(region: u64, geo: &LaneGeometry, lane: u32) -> u64 {
    region + 64 + u64::from(lane) * geo.size
}

/// The size of the log formatted at `region` (read from its header).
pub(crate) fn region_size_at(pool: &Pool, region: u64) -> Result<u64, TxError> {
    let (_, geometry, _) = read_valid_header(pool, region)?;
    Ok(TxLog::region_size(&geometry))
}

/// The header at `region` with its geometry, validated as opening and inspecting
/// need it: a checksummed header can still record a geometry no build formats
/// (no lanes: a transaction would divide by zero; sizes whose sums overflow),
/// a lane size that disagrees with it, or a log past the pool's end. (The first
/// two were found by the `tx_recover` fuzz target, which reseals the checksum.)
pub(super) fn read_valid_header(
    pool: &Pool,
    region: u64,
) -> Result<(LogHeader, TxGeometry, LaneGeometry), TxError> {
    let header = read_header(pool, region)?;
    let geometry = header_geometry(&header);
    geometry.validate().map_err(|_| {
        TxError::Corrupt(format!(
            "log header records an invalid geometry {geometry:?}"
        ))
    })?;
    let geo = lane_geometry(&geometry);
    if geo.size != header.lane_size {
        return Err(TxError::Corrupt(
            "lane size disagrees with the geometry".into(),
        ));
    }
    pool.check_range(region, TxLog::region_size(&geometry))
        .map_err(|_| TxError::Corrupt("log extends past the pool".into()))?;
    Ok((header, geometry, geo))
}

/// The geometry a log header records.
pub(super) fn header_geometry(header: &LogHeader) -> TxGeometry {
    TxGeometry {
        lanes: header.lanes,
        word_records: header.word_records,
        object_records: header.object_records,
        object_bytes: header.object_bytes,
        alloc_records: header.alloc_records,
        lazy_ring_bytes: header.ring_bytes,
    }
}

pub(super) fn read_header(pool: &Pool, region: u64) -> Result<LogHeader, TxError> {
    let bytes = pool
        .bytes(region, 64)
        .map_err(|_| TxError::NotFormatted { offset: region })?;
    let header =
        LogHeader::read_from_bytes(bytes).map_err(|_| TxError::NotFormatted { offset: region })?;
    if header.magic != LOG_MAGIC {
        if header.magic.starts_with(LOG_MAGIC_PREFIX) {
            return Err(TxError::Corrupt(format!(
                "log format version '{}' is not the version this build reads ('{}')",
                char::from(header.magic[7]),
                char::from(LOG_MAGIC[7])
            )));
        }
        return Err(TxError::NotFormatted { offset: region });
    }
    if !header.valid() {
        return Err(TxError::Corrupt("log header checksum mismatch".into()));
    }
    Ok(header)
}
