//! One transaction: the handle a closure writes through, and its commit.
//!
//! **Undo** (the default): the first touch of a range logs its old bytes — one
//! record per 8-byte word under [`Hint::Word`], one record for the range under
//! [`Hint::Object`] — and persists the records (one fence per write call) before the
//! new bytes are written in place and flushed. Commit fences the written data (one
//! fence) and then stores the lane idle (one fence): that store is the commit point.
//!
//! **Redo**: writes go to a DRAM write set (reads through the handle see them);
//! commit writes the set to the log as records holding the *new* bytes (one fence),
//! stores the lane committed (one fence: the commit point), applies the records in
//! place (one fence) and stores the lane idle (one fence).
//!
//! Allocations are logged before they happen and published by the allocator into
//! their record, so an aborted or crashed transaction releases exactly the blocks it
//! got; frees are logged and carried out only after the commit point. Writes into a
//! block the transaction allocated itself are not logged, in either mode: they go
//! in place (flushed, made durable by the commit's fence), since an abort frees the
//! block and nothing can point into it before the commit.

use std::collections::BTreeMap;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::layout::{
    check_word, AllocRecord, LaneState, ObjectRecord, Phase, WordRecord, ALLOC_RECORD_BYTES,
    KIND_ALLOC, KIND_FREE, OBJECT_RECORD_BYTES, WORD_RECORD_BYTES,
};
use super::log::TxLog;
use super::mutation::Site;
use super::ranges::RangeSet;
use super::{Hint, LogMode, TxError, TxOptions, TxStats};
use crate::ptr::{AtomicPPtr, PPtr};
use crate::Counters;

/// The handle of a running transaction. See the [module documentation](self).
pub struct Tx<'a> {
    log: &'a TxLog,
    lane: u32,
    tid: u64,
    opts: TxOptions,
    /// The lane's state word was stored active (undo records or allocations exist).
    active: bool,
    /// Undo: ranges whose old bytes are logged (whole words under `Hint::Word`), so
    /// no byte is logged twice and rollback order does not matter.
    logged: RangeSet,
    /// Blocks allocated by this transaction: written in place without logging.
    fresh: RangeSet,
    /// Redo: the new bytes, by start offset (disjoint, merged on write).
    write_set: BTreeMap<u64, (Vec<u8>, Hint)>,
    words_used: u64,
    objects_used: u64,
    object_bytes_used: u64,
    allocs_used: u64,
    has_frees: bool,
    stats: TxStats,
}

impl<'a> Tx<'a> {
    pub(crate) fn new(log: &'a TxLog, lane: u32, tid: u64, opts: TxOptions) -> Tx<'a> {
        Tx {
            log,
            lane,
            tid,
            opts,
            active: false,
            logged: RangeSet::default(),
            fresh: RangeSet::default(),
            write_set: BTreeMap::new(),
            words_used: 0,
            objects_used: 0,
            object_bytes_used: 0,
            allocs_used: 0,
            has_frees: false,
            stats: TxStats::default(),
        }
    }

    /// This transaction's id (increasing per lane, unique in the log).
    pub fn tid(&self) -> u64 {
        self.tid
    }

    /// Changes the hint for the writes that follow (hybrid logging inside one
    /// transaction: word records for a counter, an object record for an object).
    pub fn set_hint(&mut self, hint: Hint) {
        self.opts.hint = hint;
    }

    /// Writes `value` at `p` as part of the transaction.
    #[track_caller]
    pub fn write<T: IntoBytes + Immutable>(
        &mut self,
        p: PPtr<T>,
        value: &T,
    ) -> Result<(), TxError> {
        let align = std::mem::align_of::<T>() as u64;
        if p.is_null() || !p.offset().is_multiple_of(align) {
            return Err(crate::PoolError::Misaligned {
                offset: p.offset(),
                align,
            }
            .into());
        }
        self.write_bytes(p.offset(), value.as_bytes())
    }

    /// Writes `bytes` at `offset` as part of the transaction.
    #[track_caller]
    pub fn write_bytes(&mut self, offset: u64, bytes: &[u8]) -> Result<(), TxError> {
        let len = bytes.len() as u64;
        self.log.pool.check_range(offset, len)?;
        if self.log.pool.is_read_only() {
            return Err(crate::PoolError::ReadOnly.into());
        }
        if len == 0 {
            return Ok(());
        }
        if self.fresh.uncovered(offset, offset + len).is_empty() {
            // Inside a block this transaction allocated: nothing to log (an abort
            // frees the block, and nothing points into it before the commit), so it
            // goes in place, flushed; the commit's fence makes it durable.
            // SAFETY: the block is this transaction's alone.
            unsafe { self.log.pool.write_bytes_shared(offset, bytes)? };
            self.log.flush_at(Site::DataFlush, offset, len)?;
            return Ok(());
        }
        match self.opts.mode {
            LogMode::Undo => {
                self.snapshot(offset, len)?;
                // SAFETY: the transaction's contract: nothing else accesses the data
                // it writes while it runs.
                unsafe { self.log.pool.write_bytes_shared(offset, bytes)? };
                // Flushed now, fenced at commit: every later fence of this
                // transaction then finds the line flushed (no line is left dirty
                // across a persist barrier), at one flush per write.
                self.log.flush_at(Site::DataFlush, offset, len)?;
            }
            LogMode::Redo if self.opts.hint == Hint::Word => {
                // Stage whole words, so no two records share a word.
                let start = offset & !7;
                let end = (offset + len).div_ceil(8) * 8;
                self.log.pool.check_range(start, end - start)?;
                let mut words = self.log.pool.bytes(start, end - start)?.to_vec();
                self.overlay(start, end - start, &mut words);
                let at = (offset - start) as usize;
                words[at..at + bytes.len()].copy_from_slice(bytes);
                self.stage(start, &words, Hint::Word);
            }
            LogMode::Redo => self.stage(offset, bytes, Hint::Object),
        }
        Ok(())
    }

    /// Undo mode: logs the old bytes of `[offset, offset + len)` now, if not yet
    /// logged (a no-op in redo mode, which logs at commit).
    pub fn add_range(&mut self, offset: u64, len: u64) -> Result<(), TxError> {
        self.log.pool.check_range(offset, len)?;
        if self.opts.mode == LogMode::Undo && len > 0 {
            self.snapshot(offset, len)?;
        }
        Ok(())
    }

    /// Reads the `T` at `p` as this transaction sees it (its own writes included).
    pub fn read<T: FromBytes + IntoBytes + KnownLayout + Immutable>(
        &self,
        p: PPtr<T>,
    ) -> Result<T, TxError> {
        let mut value: T = self.log.pool.read(p)?;
        if self.opts.mode == LogMode::Redo {
            let size = std::mem::size_of::<T>() as u64;
            self.overlay(p.offset(), size, value.as_mut_bytes());
        }
        Ok(value)
    }

    /// Allocates `size` bytes (zeroed) from the log's allocator. Released if the
    /// transaction aborts or a crash interrupts it before it commits.
    pub fn alloc(&mut self, size: u64) -> Result<PPtr<u8>, TxError> {
        let alloc = self.log.alloc.clone().ok_or(TxError::NoAllocator)?;
        let at = self.alloc_record(KIND_ALLOC, size, 0)?;
        // No fence of our own: `alloc_publish` persists the block (a fence) before it
        // stores the slot, and that fence makes this record durable first, so
        // recovery can always find the record of a published block.
        let slot = PPtr::<AtomicPPtr<u8>>::from_offset(at + 16);
        // SAFETY: the slot is this record's block field, which only the log touches.
        let block = unsafe { alloc.alloc_publish(size, slot, &mut |b: &mut [u8]| b.fill(0)) }?;
        self.fresh.insert(block.offset(), block.offset() + size);
        Ok(block)
    }

    /// Frees the block `p` of `size` bytes when (and only if) the transaction
    /// commits.
    pub fn free(&mut self, p: PPtr<u8>, size: u64) -> Result<(), TxError> {
        if self.log.alloc.is_none() {
            return Err(TxError::NoAllocator);
        }
        self.alloc_record(KIND_FREE, size, p.offset())?;
        self.has_frees = true;
        Ok(())
    }

    /// Stores the lane active with this TID (flushed; durable at the caller's fence).
    fn activate(&mut self) -> Result<(), TxError> {
        if !self.active {
            self.log.store_state(self.lane, self.state(Phase::Active))?;
            self.active = true;
        }
        Ok(())
    }

    fn state(&self, phase: Phase) -> LaneState {
        LaneState {
            tid: self.tid,
            redo: self.opts.mode == LogMode::Redo,
            phase,
        }
    }

    /// Appends an allocation record (flushed, not fenced). Returns its offset.
    fn alloc_record(&mut self, kind: u64, size: u64, block: u64) -> Result<u64, TxError> {
        if self.allocs_used >= self.log.geo.alloc_records {
            return Err(TxError::LogFull {
                what: "allocation records",
            });
        }
        self.activate()?;
        let at = self.log.lane_off(self.lane)
            + self.log.geo.alloc_meta
            + self.allocs_used * ALLOC_RECORD_BYTES;
        let mut r = AllocRecord {
            kind,
            size,
            block,
            check: 0,
        };
        r.check = check_word(self.tid, &r.as_bytes()[..16], &[]);
        // An earlier transaction's allocation may have left its block in this
        // record's slot. The new check must never be durable beside that block
        // (recovery would release it), and words may tear apart: clear it first.
        let old: u64 = self.log.pool.read(PPtr::from_offset(at + 16))?;
        if old != 0 {
            // SAFETY: `at` is inside this transaction's lane, which it owns.
            unsafe {
                self.log
                    .pool
                    .write_bytes_shared(at + 16, &0u64.to_le_bytes())?
            };
            self.log.flush_at(Site::RecordFlush, at + 16, 8)?;
            self.log.fence_at(Site::SlotClearFence)?;
        }
        // Word by word, in order: the check does not cover `block` (the allocator
        // fills it in later), so a record reusing this place must never show its
        // new check beside an old block. In one line, a durable check implies the
        // words stored before it are durable.
        let words = [r.kind, r.size, r.block, r.check];
        // SAFETY: `at` is inside this transaction's lane, which it owns.
        unsafe { self.log.pool.write_words_ordered_shared(at, &words)? };
        self.log
            .flush_at(Site::RecordFlush, at, ALLOC_RECORD_BYTES)?;
        self.allocs_used += 1;
        self.stats.log_meta_bytes += ALLOC_RECORD_BYTES;
        Ok(at)
    }

    /// Writes log bytes (the lane is ours) and flushes them.
    fn put(&self, at: u64, bytes: &[u8]) -> Result<(), TxError> {
        // SAFETY: `at` is inside this transaction's lane, which it owns.
        unsafe { self.log.pool.write_bytes_shared(at, bytes)? };
        self.log
            .flush_at(Site::RecordFlush, at, bytes.len() as u64)?;
        Ok(())
    }

    /// Logs the not-yet-logged parts of a range with their current bytes and makes
    /// the records durable (undo).
    fn snapshot(&mut self, offset: u64, len: u64) -> Result<(), TxError> {
        let (start, end) = match self.opts.hint {
            Hint::Word => (offset & !7, (offset + len).div_ceil(8) * 8),
            Hint::Object => (offset, offset + len),
        };
        self.log.pool.check_range(start, end - start)?;
        let parts = self.logged.uncovered(start, end);
        if parts.is_empty() {
            return Ok(());
        }
        self.activate()?;
        for &(s, e) in &parts {
            let old = self.log.pool.bytes(s, e - s)?.to_vec();
            self.append_data(s, &old, self.opts.hint)?;
        }
        self.log.fence_at(Site::SnapshotFence)?;
        for (s, e) in parts {
            self.logged.insert(s, e);
        }
        Ok(())
    }

    /// Appends data records for `bytes` at `addr` per the hint (flushed, no fence).
    fn append_data(&mut self, addr: u64, bytes: &[u8], hint: Hint) -> Result<(), TxError> {
        match hint {
            Hint::Object => self.append_object(addr, bytes),
            Hint::Word => {
                // Whole words: extend the range to word boundaries with the bytes
                // around it as they are now (in the log, never in place).
                let start = addr & !7;
                let end = (addr + bytes.len() as u64).div_ceil(8) * 8;
                let mut words = self.log.pool.bytes(start, end - start)?.to_vec();
                let at = (addr - start) as usize;
                words[at..at + bytes.len()].copy_from_slice(bytes);
                for (i, w) in words.chunks(8).enumerate() {
                    self.append_word(start + 8 * i as u64, w)?;
                }
                Ok(())
            }
        }
    }

    fn append_word(&mut self, addr: u64, word: &[u8]) -> Result<(), TxError> {
        let g = &self.log.geo;
        if self.words_used >= g.word_records {
            return Err(TxError::LogFull {
                what: "word records",
            });
        }
        let lane = self.log.lane_off(self.lane);
        let data = lane + g.word_data + self.words_used * 8;
        let meta = lane + g.word_meta + self.words_used * WORD_RECORD_BYTES;
        let mut r = WordRecord {
            addr,
            data,
            check: 0,
        };
        r.check = check_word(self.tid, &r.as_bytes()[..16], word);
        self.put(data, word)?;
        self.put(meta, r.as_bytes())?;
        self.words_used += 1;
        self.stats.log_meta_bytes += WORD_RECORD_BYTES;
        self.stats.log_data_bytes += 8;
        Ok(())
    }

    fn append_object(&mut self, addr: u64, bytes: &[u8]) -> Result<(), TxError> {
        let g = &self.log.geo;
        let size = bytes.len() as u64;
        let room = size.div_ceil(64) * 64;
        if self.objects_used >= g.object_records
            || self.object_bytes_used + room > g.object_bytes
            || size > u64::from(u32::MAX)
        {
            return Err(TxError::LogFull {
                what: "object records",
            });
        }
        let lane = self.log.lane_off(self.lane);
        let data = lane + g.object_data + self.object_bytes_used;
        let meta = lane + g.object_meta + self.objects_used * OBJECT_RECORD_BYTES;
        let mut r = ObjectRecord {
            addr,
            data,
            check: 0,
            size: size as u32,
            reserved: 0,
        };
        let fields = [&r.as_bytes()[..16], &r.as_bytes()[24..]].concat();
        r.check = check_word(self.tid, &fields, bytes);
        self.put(data, bytes)?;
        self.put(meta, r.as_bytes())?;
        self.objects_used += 1;
        self.object_bytes_used += room;
        self.stats.log_meta_bytes += OBJECT_RECORD_BYTES;
        self.stats.log_data_bytes += size;
        Ok(())
    }

    /// Redo: adds `bytes` at `offset` to the write set, merging overlaps. A merged
    /// entry is logged as words only if every part of it was written as words.
    fn stage(&mut self, offset: u64, bytes: &[u8], hint: Hint) {
        let mut hint = hint;
        let end = offset + bytes.len() as u64;
        let mut start = offset;
        let mut merged_end = end;
        // Entries overlapping or adjacent to [offset, end).
        let before = self
            .write_set
            .range(..=offset)
            .next_back()
            .filter(|(&s, v)| s + v.0.len() as u64 >= offset)
            .map(|(&s, _)| s);
        if let Some(s) = before {
            start = s;
        }
        let keys: Vec<u64> = self.write_set.range(start..=end).map(|(&s, _)| s).collect();
        for &k in &keys {
            if let Some(v) = self.write_set.get(&k) {
                merged_end = merged_end.max(k + v.0.len() as u64);
            }
        }
        // Gaps cannot occur (merged entries overlap or touch), but fill from memory
        // rather than trust that.
        let mut buf = match self.log.pool.bytes(start, merged_end - start) {
            Ok(now) => now.to_vec(),
            Err(_) => vec![0u8; (merged_end - start) as usize],
        };
        for k in keys {
            if let Some((v, h)) = self.write_set.remove(&k) {
                let at = (k - start) as usize;
                buf[at..at + v.len()].copy_from_slice(&v);
                if h == Hint::Object {
                    hint = Hint::Object;
                }
            }
        }
        let at = (offset - start) as usize;
        buf[at..at + bytes.len()].copy_from_slice(bytes);
        self.write_set.insert(start, (buf, hint));
    }

    /// Redo: overlays the write set on bytes read from `[offset, offset + len)`.
    fn overlay(&self, offset: u64, len: u64, out: &mut [u8]) {
        let end = offset + len;
        let first = self
            .write_set
            .range(..=offset)
            .next_back()
            .map_or(offset, |(&s, _)| s);
        for (&s, (v, _)) in self.write_set.range(first..end) {
            let e = s + v.len() as u64;
            let (lo, hi) = (s.max(offset), e.min(end));
            if lo < hi {
                out[(lo - offset) as usize..(hi - offset) as usize]
                    .copy_from_slice(&v[(lo - s) as usize..(hi - s) as usize]);
            }
        }
    }

    /// Commits. An error before the commit point leaves the transaction to be
    /// rolled back (`Err(.., false)`); an error from the commit point on leaves it
    /// in doubt (`Err(.., true)`): the lane's state on media decides, and the next
    /// recovery finishes or rolls it back.
    pub(crate) fn commit(&mut self) -> Result<(), (TxError, bool)> {
        let before = |e: TxError| (e, false);
        let after = |e: TxError| (e, true);
        let log = self.log;
        match self.opts.mode {
            LogMode::Undo => {
                if !self.active {
                    // Nothing logged, nothing written: nothing to commit.
                    return Ok(());
                }
                log.fence_at(Site::CommitDataFence)
                    .map_err(|e| before(e.into()))?;
            }
            LogMode::Redo => {
                if self.write_set.is_empty() && !self.active {
                    return Ok(());
                }
                let set = std::mem::take(&mut self.write_set);
                for (s, (bytes, hint)) in &set {
                    self.append_data(*s, bytes, *hint).map_err(before)?;
                }
                log.fence_at(Site::RedoRecordsFence)
                    .map_err(|e| before(e.into()))?;
                self.write_set = set;
            }
        }
        let redo_work = self.opts.mode == LogMode::Redo && !self.write_set.is_empty();
        if redo_work || self.has_frees {
            // The commit point: the lane says committed.
            log.store_state(self.lane, self.state(Phase::Committed))
                .map_err(after)?;
            log.fence_at(Site::CommitPointFence)
                .map_err(|e| after(e.into()))?;
            log.finish(self.lane, self.state(Phase::Committed))
                .map_err(after)?;
        } else {
            // Undo without frees: the lane going idle is the commit point.
            log.store_state(self.lane, self.state(Phase::Idle))
                .map_err(after)?;
            log.fence_at(Site::CommitIdleFence)
                .map_err(|e| after(e.into()))?;
        }
        Ok(())
    }

    /// Rolls back (abort).
    pub(crate) fn roll_back(&mut self) -> Result<(), TxError> {
        if self.active {
            self.log.roll_back(self.lane, self.state(Phase::Active))?;
        }
        Ok(())
    }

    pub(crate) fn finish_stats(&mut self, before: Counters) -> TxStats {
        let d = Counters::since(before);
        self.stats.lines_flushed = d.lines_flushed;
        self.stats.fences = d.fences;
        self.stats
    }
}
