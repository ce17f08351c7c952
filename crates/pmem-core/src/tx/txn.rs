//! One transaction: the handle a closure writes through, and its commit.
//!
//! **Undo** (the default): the first touch of a range logs its old bytes — one
//! record per 8-byte word under [`Hint::Word`], one record for the range under
//! [`Hint::Object`] — and persists the records (one fence per write call, or one for
//! a whole [`Tx::add_ranges`] batch, each log line flushed once) before the new bytes
//! are written in place and flushed. Commit fences the written data (one
//! fence) and then stores the lane idle (one fence): that store is the commit point.
//!
//! **Redo**: writes go to a DRAM write set (reads through the handle see them);
//! commit writes the set to the log as records holding the *new* bytes (one fence),
//! stores the lane committed (one fence: the commit point), applies the records in
//! place (one fence) and stores the lane idle (one fence).
//!
//! **Lazy**: writes are staged as in redo (writes into fresh blocks too, and their
//! zeroing); commit appends one checksummed entry to the log's ring and fences once
//! (the commit point), then applies in place without flushing; see `lazy.rs` for
//! the ring and its checkpoints.
//!
//! Allocations and frees go through the allocator's transactional operations
//! ([`PersistentAllocator::tx_reserve`] and friends): an allocation holds a block in
//! DRAM and logs it in an allocation record (flushed); a free checks the block and
//! logs it. At commit, once the records are durable (the snapshot fence usually
//! covers them; otherwise one fence of their own), every block is marked allocated
//! or free in the allocator's bitmap, flushed, and made durable by the commit's own
//! fence: no allocator fence at all. A rollback marks them back from the records;
//! the holds keep freed space from being handed out before the commit is durable.
//! Writes into a
//! block the transaction allocated itself are not logged, in either mode: they go
//! in place (flushed, made durable by the commit's fence), since an abort frees the
//! block and nothing can point into it before the commit. Under
//! [`TxOptions::log_fresh`] they are logged like any other write, in records flagged
//! fresh that rollback skips (the block may already be free when a recovery is
//! repeated).
//!
//! The DRAM side (the logged and fresh range sets, buffers) lives in a `Scratch`
//! that stays with the lane, so a small transaction allocates nothing.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::layout::{
    check_word, AllocRecord, LaneState, ObjectRecord, Phase, WordRecord, ALLOC_RECORD_BYTES,
    FRESH_FLAG, KIND_ALLOC, KIND_FREE, OBJECT_RECORD_BYTES, WORD_RECORD_BYTES,
};
use super::lazy::{Commit, Ring, RingState, ENTRY_HEADER, RECORD_HEADER};
use super::log::TxLog;
use super::mutation::Site;
use super::ranges::RangeSet;
use super::writeset::WriteSet;
use super::{Hint, LogMode, TxError, TxOptions, TxStats};
use crate::alloc::PersistentAllocator;
use crate::ptr::PPtr;
use crate::Counters;

/// DRAM buffers a transaction needs, kept with its lane between transactions so a
/// small transaction allocates nothing.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Undo: ranges whose old bytes are logged (whole words under `Hint::Word`), so
    /// no byte is logged twice and rollback order does not matter.
    logged: RangeSet,
    /// Blocks allocated by this transaction: written in place without logging.
    fresh: RangeSet,
    /// The ranges a snapshot was asked for, word-extended, sorted and merged.
    wanted: Vec<Part>,
    /// The parts of them still to log.
    parts: Vec<Part>,
    /// The unlogged pieces of one wanted range.
    found: Vec<(u64, u64)>,
    /// Old bytes on their way to the log.
    buf: Vec<u8>,
    /// The allocation records of this transaction, in order.
    allocs: Vec<AllocOp>,
    /// The same records by block (a free checks them; a transaction of a thousand
    /// frees must not scan them a thousand times): `Some(size)` allocated by this
    /// transaction, `None` freed by it.
    alloc_index: std::collections::HashMap<u64, Option<u64>>,
    /// Redo and lazy: the staged writes.
    writes: WriteSet,
}

/// An allocation or free of the running transaction (its record's fields).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AllocOp {
    pub kind: u64,
    pub block: u64,
    pub size: u64,
}

impl Scratch {
    fn clear(&mut self) {
        self.logged.clear();
        self.fresh.clear();
        self.wanted.clear();
        self.parts.clear();
        self.found.clear();
        self.buf.clear();
        self.allocs.clear();
        self.alloc_index.clear();
        self.writes.clear();
    }
}

/// A range to snapshot, with its hint and whether it lies in a fresh block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Part {
    start: u64,
    end: u64,
    hint: Hint,
    fresh: bool,
}

/// How far a transaction's record sections are filled (to flush what a batch added).
#[derive(Clone, Copy, Debug, Default)]
struct Fill {
    words: u64,
    objects: u64,
    object_bytes: u64,
}

/// The handle of a running transaction. See the [module documentation](crate::tx).
pub struct Tx<'a> {
    log: &'a TxLog,
    lane: u32,
    tid: u64,
    opts: TxOptions,
    /// The lane's state word was stored active (undo records or allocations exist).
    active: bool,
    /// Something was written to the lane (a record, or the state word): its TID
    /// is spent, and the lane's final state must be durable with it.
    wrote: bool,
    scratch: Box<Scratch>,
    /// Redo: the new bytes, by start offset (disjoint, merged on write).
    fill: Fill,
    /// Every allocation record written so far is durable (a fence followed it).
    records_fenced: bool,
    stats: TxStats,
}

impl<'a> Tx<'a> {
    pub(crate) fn new(
        log: &'a TxLog,
        lane: u32,
        tid: u64,
        opts: TxOptions,
        mut scratch: Box<Scratch>,
    ) -> Tx<'a> {
        scratch.clear();
        Tx {
            log,
            lane,
            tid,
            opts,
            active: false,
            wrote: false,
            scratch,

            fill: Fill::default(),
            records_fenced: true,
            stats: TxStats::default(),
        }
    }

    /// Whether the transaction wrote to its lane (see [`super::lanes::LaneGuard::give_back`]).
    pub(crate) fn wrote(&self) -> bool {
        self.wrote
    }

    /// Gives back the buffers, for the lane's next transaction.
    pub(crate) fn into_scratch(self) -> Box<Scratch> {
        self.scratch
    }

    /// This transaction's id (increasing per lane, unique among the lanes' ids); for
    /// a lazy transaction, its sequence number in the ring (increasing).
    pub fn tid(&self) -> u64 {
        self.tid
    }

    /// The hint the next writes are logged with.
    pub fn hint(&self) -> Hint {
        self.opts.hint
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
        let fresh = self.scratch.fresh.covers(offset, offset + len);
        // (Lazy mode logs them like any write: its entry can reach the media before
        // its fence, so nothing it names may depend on unfenced bytes.)
        if fresh && !self.opts.log_fresh && self.opts.mode != LogMode::Lazy {
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
                self.snapshot(&[(offset, len, self.opts.hint)])?;
                // SAFETY: the transaction's contract: nothing else accesses the data
                // it writes while it runs.
                unsafe { self.log.pool.write_bytes_shared(offset, bytes)? };
                // Flushed now, fenced at commit: every later fence of this
                // transaction then finds the line flushed (no line is left dirty
                // across a persist barrier), at one flush per write.
                self.log.flush_at(Site::DataFlush, offset, len)?;
            }
            LogMode::Redo | LogMode::Lazy
                if self.opts.hint == Hint::Word
                    && offset.is_multiple_of(8)
                    && len.is_multiple_of(8) =>
            {
                self.stage(offset, bytes, Hint::Word);
            }
            LogMode::Redo | LogMode::Lazy if self.opts.hint == Hint::Word => {
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
            LogMode::Redo | LogMode::Lazy => self.stage(offset, bytes, Hint::Object),
        }
        Ok(())
    }

    /// Replaces the 8-aligned word at `offset` by `new` if it holds `current`, as
    /// part of the transaction: the word is logged first (one word record, undo
    /// mode only), then swapped atomically, so a thread that heals the word with
    /// [`crate::Pool::cas_word_shared`] at the same time either wins before (this
    /// returns `false`, the word is the healer's) or after (the healer's CAS sees
    /// `new` and fails). Returns whether it swapped.
    ///
    /// A rollback restores the word as it was when first logged by this
    /// transaction: a concurrent writer of the word must be one whose effect may
    /// be undone and done again (an idempotent healer that revisits words of
    /// running transactions), never a second transaction.
    #[track_caller]
    pub fn cas_word(&mut self, offset: u64, current: u64, new: u64) -> Result<bool, TxError> {
        if self.opts.mode != LogMode::Undo {
            return Err(TxError::Unsupported("cas_word needs undo logging"));
        }
        if self.log.pool.is_read_only() {
            return Err(crate::PoolError::ReadOnly.into());
        }
        self.log.pool.check_range(offset, 8)?;
        if !self.scratch.fresh.covers(offset, offset + 8) || self.opts.log_fresh {
            self.snapshot(&[(offset, 8, Hint::Word)])?;
        }
        // SAFETY: the word is logged; every concurrent access to it is atomic by
        // this method's contract (the healer's CAS, or none).
        let swapped = unsafe { self.log.pool.cas_word_shared(offset, current, new)? }.is_ok();
        if swapped {
            self.log.flush_at(Site::DataFlush, offset, 8)?;
        }
        Ok(swapped)
    }

    /// Undo mode: logs the old bytes of `[offset, offset + len)` now (with the
    /// current hint), if not yet logged. A no-op in redo mode, which logs at commit.
    pub fn add_range(&mut self, offset: u64, len: u64) -> Result<(), TxError> {
        self.add_ranges(&[(offset, len, self.opts.hint)])
    }

    /// Undo mode: logs the old bytes of several `(offset, len, hint)` ranges at
    /// once, with one fence and one flush per log line for all of them, instead of a
    /// fence per write. Writes to them later in the transaction log nothing more.
    /// Ranges in blocks this transaction allocated are skipped (unless
    /// [`TxOptions::log_fresh`]). A no-op in redo mode.
    ///
    /// This is the hybrid log's batching: an operation that knows what it will
    /// change (a hash-table insert: the bucket head and the count) logs it all with
    /// one persist barrier.
    pub fn add_ranges(&mut self, ranges: &[(u64, u64, Hint)]) -> Result<(), TxError> {
        for &(offset, len, _) in ranges {
            self.log.pool.check_range(offset, len)?;
        }
        if self.opts.mode == LogMode::Undo {
            self.snapshot(ranges)?;
        }
        Ok(())
    }

    /// Reads the `T` at `p` as this transaction sees it (its own writes included).
    pub fn read<T: FromBytes + IntoBytes + KnownLayout + Immutable>(
        &self,
        p: PPtr<T>,
    ) -> Result<T, TxError> {
        let mut value: T = self.log.pool.read(p)?;
        if self.opts.mode != LogMode::Undo {
            let size = std::mem::size_of::<T>() as u64;
            self.overlay(p.offset(), size, value.as_mut_bytes());
        }
        Ok(value)
    }

    /// Reads `out.len()` bytes at `offset` as this transaction sees them (its own
    /// writes included): the untyped form of [`Tx::read`], for containers whose
    /// slots are not one Rust type.
    pub fn read_bytes(&self, offset: u64, out: &mut [u8]) -> Result<(), TxError> {
        let len = out.len() as u64;
        out.copy_from_slice(self.log.pool.bytes(offset, len)?);
        if self.opts.mode != LogMode::Undo {
            self.overlay(offset, len, out);
        }
        Ok(())
    }

    /// Allocates `size` bytes (zeroed) from the log's allocator. Released if the
    /// transaction aborts or a crash interrupts it before it commits.
    pub fn alloc(&mut self, size: u64) -> Result<PPtr<u8>, TxError> {
        self.alloc_block(size, true)
    }

    /// Allocates `size` bytes *without zeroing them*: the block holds whatever
    /// this pool's bytes were there (an earlier, freed object's, or zeroes). For a
    /// caller that writes every byte it will ever read before reading it (a slab
    /// page whose header says which slots hold data, say): it saves writing and
    /// flushing the whole block. Released if the transaction aborts or a crash
    /// interrupts it before it commits, like [`Tx::alloc`].
    pub fn alloc_uninit(&mut self, size: u64) -> Result<PPtr<u8>, TxError> {
        self.alloc_block(size, false)
    }

    fn alloc_block(&mut self, size: u64, zeroed: bool) -> Result<PPtr<u8>, TxError> {
        let alloc = self.allocator()?;
        self.room_for_alloc_record()?;
        let block = alloc.tx_reserve(size)?;
        // If writing the record fails (a media error), the hold stays until the log
        // is reopened: the record may still reach media, and its rollback must not
        // find the block handed to someone else.
        self.alloc_record(KIND_ALLOC, block.offset(), size)?;
        // Uninitialised: nothing to stage or write, the caller's writes are the
        // contents.
        if zeroed {
            if self.opts.mode == LogMode::Lazy {
                // Zeroes staged like any write: the entry carries the whole block.
                self.stage(block.offset(), &vec![0; size as usize], Hint::Object);
            } else {
                self.zero_fresh(block.offset(), size)?;
            }
        }
        self.scratch
            .fresh
            .insert(block.offset(), block.offset() + size);
        Ok(block)
    }

    /// Frees the block `p` of `size` bytes when (and only if) the transaction
    /// commits. The block must be live (checked now, so a bad free fails here).
    pub fn free(&mut self, p: PPtr<u8>, size: u64) -> Result<(), TxError> {
        let alloc = self.allocator()?;
        let seen = self.scratch.alloc_index.get(&p.offset()).copied();
        let own = seen == Some(Some(size));
        let freed = seen == Some(None);
        if freed {
            return Err(crate::alloc::AllocError::InvalidFree {
                offset: p.offset(),
                size,
                reason: "already freed by this transaction",
            }
            .into());
        }
        if !own {
            alloc.tx_check_live(p, size)?;
        }
        self.room_for_alloc_record()?;
        self.alloc_record(KIND_FREE, p.offset(), size)
    }

    fn allocator(&self) -> Result<std::sync::Arc<dyn PersistentAllocator>, TxError> {
        self.log.alloc.clone().ok_or(TxError::NoAllocator)
    }

    fn room_for_alloc_record(&self) -> Result<(), TxError> {
        // A lazy transaction's allocations go into its ring entry, whose size the
        // commit checks; only the lanes' record sections are bounded here.
        if self.opts.mode == LogMode::Lazy {
            return Ok(());
        }
        if self.scratch.allocs.len() as u64 >= self.log.geo.alloc_records {
            return Err(TxError::LogFull {
                what: "allocation records",
            });
        }
        Ok(())
    }

    /// Zeroes a block this transaction allocated, in place, flushed (durable at the
    /// commit's fence, before the block is marked allocated).
    fn zero_fresh(&self, block: u64, size: u64) -> Result<(), TxError> {
        const ZEROS: [u8; 4096] = [0; 4096];
        let mut at = block;
        while at < block + size {
            let n = (block + size - at).min(ZEROS.len() as u64);
            // SAFETY: the block is held for this transaction alone.
            unsafe { self.log.pool.write_bytes_shared(at, &ZEROS[..n as usize])? };
            at += n;
        }
        self.log.flush_at(Site::DataFlush, block, size)?;
        Ok(())
    }

    /// Stores the lane active with this TID (flushed; durable at the caller's fence).
    fn activate(&mut self) -> Result<(), TxError> {
        if !self.active {
            self.wrote = true;
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

    fn push_alloc_op(&mut self, op: AllocOp) {
        self.scratch
            .alloc_index
            .insert(op.block, (op.kind == KIND_ALLOC).then_some(op.size));
        self.scratch.allocs.push(op);
    }

    /// Appends an allocation record (flushed, not fenced; the commit fences it
    /// before it marks the block).
    fn alloc_record(&mut self, kind: u64, block: u64, size: u64) -> Result<(), TxError> {
        if self.opts.mode == LogMode::Lazy {
            // The ring's entry records it at commit; nothing on media before.
            self.push_alloc_op(AllocOp { kind, block, size });
            return Ok(());
        }
        self.activate()?;
        let index = self.scratch.allocs.len() as u64;
        let at =
            self.log.lane_off(self.lane) + self.log.geo.alloc_meta + index * ALLOC_RECORD_BYTES;
        let mut r = AllocRecord {
            kind,
            size,
            block,
            check: 0,
        };
        r.check = check_word(self.tid, &r.as_bytes()[..24], &[]);
        self.put(at, r.as_bytes())?;
        self.log
            .flush_at(Site::RecordFlush, at, ALLOC_RECORD_BYTES)?;
        self.push_alloc_op(AllocOp { kind, block, size });
        self.records_fenced = false;
        self.stats.alloc_record_bytes += ALLOC_RECORD_BYTES;
        Ok(())
    }

    /// Marks every block of the transaction in the allocator (allocations
    /// allocated, frees free), flushed: the caller's fence makes them durable.
    /// The records are durable first (a fence of their own if none followed them).
    fn mark_blocks(&mut self) -> Result<(), TxError> {
        if self.scratch.allocs.is_empty() {
            return Ok(());
        }
        if !self.records_fenced {
            self.log.fence_at(Site::AllocRecordFence)?;
            self.records_fenced = true;
        }
        let alloc = self.allocator()?;
        for a in &self.scratch.allocs {
            // SAFETY: the block is this transaction's (held by its reservation, or
            // live and freed by it after `tx_check_live`), and its record is durable.
            unsafe { alloc.tx_mark(PPtr::from_offset(a.block), a.size, a.kind == KIND_ALLOC) }?;
        }
        Ok(())
    }

    /// Lets go of the allocator's holds on this transaction's blocks (its final
    /// state is durable: committed, or rolled back).
    fn release_blocks(&self) {
        if let Some(alloc) = &self.log.alloc {
            for a in &self.scratch.allocs {
                alloc.tx_release(PPtr::from_offset(a.block), a.size);
            }
        }
    }

    /// Writes log bytes (the lane is ours); [`Tx::flush_records`] flushes them.
    fn put(&mut self, at: u64, bytes: &[u8]) -> Result<(), TxError> {
        self.wrote = true;
        // SAFETY: `at` is inside this transaction's lane, which it owns.
        unsafe { self.log.pool.write_bytes_shared(at, bytes)? };
        Ok(())
    }

    /// Flushes the records appended since `since` (metadata and data of each
    /// section, each line once) and counts the metadata lines.
    fn flush_records(&mut self, since: Fill) -> Result<(), TxError> {
        let g = &self.log.geo;
        let lane = self.log.lane_off(self.lane);
        let now = self.fill;
        let sections = [
            (g.word_meta, WORD_RECORD_BYTES, since.words, now.words),
            (
                g.object_meta,
                OBJECT_RECORD_BYTES,
                since.objects,
                now.objects,
            ),
        ];
        for (meta, size, from, to) in sections {
            if to > from {
                let start = lane + meta + from * size;
                let len = (to - from) * size;
                self.log.flush_at(Site::RecordFlush, start, len)?;
                self.stats.meta_lines_flushed += (start + len).div_ceil(64) - start / 64;
            }
        }
        if now.words > since.words {
            let start = lane + g.word_data + since.words * 8;
            self.log
                .flush_at(Site::RecordFlush, start, (now.words - since.words) * 8)?;
        }
        if now.object_bytes > since.object_bytes {
            let start = lane + g.object_data + since.object_bytes;
            self.log.flush_at(
                Site::RecordFlush,
                start,
                now.object_bytes - since.object_bytes,
            )?;
        }
        Ok(())
    }

    /// Logs the not-yet-logged parts of `ranges` with their current bytes, each
    /// per its hint, and makes the records durable with one fence (undo). A range
    /// inside a block this transaction allocated is skipped, or under `log_fresh`
    /// logged with the fresh flag (rollback skips it). The ranges count as logged
    /// only once that succeeded.
    fn snapshot(&mut self, ranges: &[(u64, u64, Hint)]) -> Result<(), TxError> {
        let mut wanted = std::mem::take(&mut self.scratch.wanted);
        wanted.clear();
        for &(offset, len, hint) in ranges {
            let (start, end) = match hint {
                Hint::Word => (offset & !7, (offset + len).div_ceil(8) * 8),
                Hint::Object => (offset, offset + len),
            };
            self.log.pool.check_range(start, end - start)?;
            let fresh = self.scratch.fresh.covers(offset, offset + len);
            if end > start && (!fresh || self.opts.log_fresh) {
                wanted.push(Part {
                    start,
                    end,
                    hint,
                    fresh,
                });
            }
        }
        // Sorted and merged, so overlapping ranges of one call log each byte once
        // (a merged range is logged as words only if all its parts asked for words,
        // and as fresh only if all its parts are fresh).
        wanted.sort_unstable_by_key(|p| p.start);
        let mut kept = 0;
        for i in 0..wanted.len() {
            let p = wanted[i];
            if kept > 0 && p.start < wanted[kept - 1].end {
                let q = &mut wanted[kept - 1];
                q.end = q.end.max(p.end);
                if p.hint == Hint::Object {
                    q.hint = Hint::Object;
                }
                q.fresh &= p.fresh;
            } else {
                wanted[kept] = p;
                kept += 1;
            }
        }
        wanted.truncate(kept);
        let mut parts = std::mem::take(&mut self.scratch.parts);
        parts.clear();
        for w in &wanted {
            let first = parts.len();
            let mut found = std::mem::take(&mut self.scratch.found);
            found.clear();
            self.scratch
                .logged
                .uncovered_into(w.start, w.end, &mut found);
            parts.extend(found.iter().map(|&(start, end)| Part { start, end, ..*w }));
            self.scratch.found = found;
            debug_assert!(parts[first..].iter().all(|p| p.start < p.end));
        }
        let result = self.log_parts(&parts);
        if result.is_ok() {
            for p in &parts {
                self.scratch.logged.insert(p.start, p.end);
            }
        }
        self.scratch.parts = parts;
        self.scratch.wanted = wanted;
        result
    }

    fn log_parts(&mut self, parts: &[Part]) -> Result<(), TxError> {
        if parts.is_empty() {
            return Ok(());
        }
        self.activate()?;
        let since = self.fill;
        let mut buf = std::mem::take(&mut self.scratch.buf);
        let mut result = Ok(());
        for p in parts {
            buf.clear();
            match self.log.pool.bytes(p.start, p.end - p.start) {
                Ok(old) => buf.extend_from_slice(old),
                Err(err) => {
                    result = Err(err.into());
                    break;
                }
            }
            result = self.append_data(p.start, &buf, p.hint, p.fresh);
            if result.is_err() {
                break;
            }
        }
        self.scratch.buf = buf;
        result?;
        self.flush_records(since)?;
        self.log.fence_at(Site::SnapshotFence)?;
        self.records_fenced = true;
        Ok(())
    }

    /// Appends data records for `bytes` at `addr` per the hint (not flushed: see
    /// [`Tx::flush_records`]).
    fn append_data(
        &mut self,
        addr: u64,
        bytes: &[u8],
        hint: Hint,
        fresh: bool,
    ) -> Result<(), TxError> {
        match hint {
            Hint::Object => self.append_object(addr, bytes, fresh),
            Hint::Word if addr.is_multiple_of(8) && bytes.len().is_multiple_of(8) => {
                for (i, w) in bytes.chunks_exact(8).enumerate() {
                    self.append_word(addr + 8 * i as u64, w, fresh)?;
                }
                Ok(())
            }
            Hint::Word => {
                // Whole words: extend the range to word boundaries with the bytes
                // around it as they are now (in the log, never in place).
                let start = addr & !7;
                let end = (addr + bytes.len() as u64).div_ceil(8) * 8;
                let mut words = self.log.pool.bytes(start, end - start)?.to_vec();
                let at = (addr - start) as usize;
                words[at..at + bytes.len()].copy_from_slice(bytes);
                for (i, w) in words.chunks_exact(8).enumerate() {
                    self.append_word(start + 8 * i as u64, w, fresh)?;
                }
                Ok(())
            }
        }
    }

    fn append_word(&mut self, addr: u64, word: &[u8], fresh: bool) -> Result<(), TxError> {
        let g = &self.log.geo;
        if self.fill.words >= g.word_records {
            return Err(TxError::LogFull {
                what: "word records",
            });
        }
        let lane = self.log.lane_off(self.lane);
        let data = lane + g.word_data + self.fill.words * 8;
        let meta = lane + g.word_meta + self.fill.words * WORD_RECORD_BYTES;
        let mut r = WordRecord {
            addr: addr | if fresh { FRESH_FLAG } else { 0 },
            data,
            check: 0,
        };
        r.check = check_word(self.tid, &r.as_bytes()[..16], word);
        self.put(data, word)?;
        self.put(meta, r.as_bytes())?;
        self.fill.words += 1;
        self.stats.log_meta_bytes += WORD_RECORD_BYTES;
        self.stats.log_data_bytes += 8;
        Ok(())
    }

    fn append_object(&mut self, addr: u64, bytes: &[u8], fresh: bool) -> Result<(), TxError> {
        let g = &self.log.geo;
        let size = bytes.len() as u64;
        let room = size.div_ceil(64) * 64;
        if self.fill.objects >= g.object_records
            || self.fill.object_bytes + room > g.object_bytes
            || size > u64::from(u32::MAX)
        {
            return Err(TxError::LogFull {
                what: "object records",
            });
        }
        let lane = self.log.lane_off(self.lane);
        let data = lane + g.object_data + self.fill.object_bytes;
        let meta = lane + g.object_meta + self.fill.objects * OBJECT_RECORD_BYTES;
        let mut r = ObjectRecord {
            addr,
            data,
            check: 0,
            size: size as u32,
            flags: if fresh { FRESH_FLAG as u32 } else { 0 },
        };
        r.check = check_word(self.tid, &r.checked_fields(), bytes);
        self.put(data, bytes)?;
        self.put(meta, r.as_bytes())?;
        self.fill.objects += 1;
        self.fill.object_bytes += room;
        self.stats.log_meta_bytes += OBJECT_RECORD_BYTES;
        self.stats.log_data_bytes += size;
        Ok(())
    }

    /// Redo and lazy: adds `bytes` at `offset` to the write set, merging overlaps.
    /// A merged entry is logged as words only if every part of it was written as
    /// words.
    fn stage(&mut self, offset: u64, bytes: &[u8], hint: Hint) {
        self.scratch.writes.stage(offset, bytes, hint);
    }

    /// Redo and lazy: overlays the write set on bytes read from `[offset, offset +
    /// len)`.
    fn overlay(&self, offset: u64, len: u64, out: &mut [u8]) {
        debug_assert_eq!(out.len() as u64, len);
        self.scratch.writes.overlay(offset, out);
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
                // The blocks' marks and the data written in place, durable under
                // one fence; then the lane going idle is the commit point.
                self.mark_blocks().map_err(before)?;
                log.fence_at(Site::CommitDataFence)
                    .map_err(|e| before(e.into()))?;
                log.store_state(self.lane, self.state(Phase::Idle))
                    .map_err(after)?;
                log.fence_at(Site::CommitIdleFence)
                    .map_err(|e| after(e.into()))?;
                self.release_blocks();
            }
            // Lazy transactions commit through the ring (`commit_lazy`).
            LogMode::Lazy => return Err((TxError::LazyNeedsExclusive, false)),
            LogMode::Redo => {
                if self.scratch.writes.is_empty() && !self.active {
                    return Ok(());
                }
                let set = std::mem::take(&mut self.scratch.writes);
                let since = self.fill;
                // Redo records are applied, never restored: no fresh flag.
                let logged = set
                    .iter()
                    .try_for_each(|(s, bytes, hint)| self.append_data(s, bytes, hint, false));
                self.scratch.writes = set;
                logged.map_err(before)?;
                self.flush_records(since).map_err(before)?;
                log.fence_at(Site::RedoRecordsFence)
                    .map_err(|e| before(e.into()))?;
                self.records_fenced = true;
                // The marks need not be durable before the commit point: recovery
                // of a committed lane marks its blocks again from the records.
                self.mark_blocks().map_err(before)?;
                log.store_state(self.lane, self.state(Phase::Committed))
                    .map_err(after)?;
                log.fence_at(Site::CommitPointFence)
                    .map_err(|e| after(e.into()))?;
                // Finishing lets go of the blocks' holds (from the records).
                log.finish(self.lane, self.state(Phase::Committed), false)
                    .map_err(after)?;
            }
        }
        Ok(())
    }

    /// Lazy mode: commits through the ring (see [`Ring::commit`]).
    pub(crate) fn commit_lazy(
        &mut self,
        ring: &Ring,
        state: &mut RingState,
    ) -> Result<(), (TxError, bool)> {
        let entry = ring.commit(
            self.log,
            state,
            &Commit {
                writes: &self.scratch.writes,
                allocs: &self.scratch.allocs,
            },
        )?;
        if entry > 0 {
            // Data bytes as staged; everything else of the entry (its header, the
            // record headers, padding) counts as metadata, all in flushed lines.
            let data: u64 = self
                .scratch
                .writes
                .iter()
                .map(|(_, b, _)| b.len() as u64)
                .sum();
            let records = self.scratch.writes.iter().count() + self.scratch.allocs.len();
            self.stats.log_data_bytes += data;
            self.stats.log_meta_bytes += ENTRY_HEADER + RECORD_HEADER * records as u64;
            self.stats.meta_lines_flushed += entry / 64;
        }
        Ok(())
    }

    /// Lazy mode, not committed: nothing reached the media (but fresh blocks'
    /// bytes); lets go of the held blocks.
    pub(crate) fn drop_lazy(&mut self) {
        if let Some(alloc) = &self.log.alloc {
            for a in self.scratch.allocs.iter().filter(|a| a.kind == KIND_ALLOC) {
                alloc.tx_release(PPtr::from_offset(a.block), a.size);
            }
        }
        // The zeroing of its fresh blocks was flushed for a commit that did not
        // come; the blocks are free again, their bytes matter to no one.
        self.log.pool.sim_defer_flushes();
        self.scratch.writes.clear();
    }

    /// Rolls back (abort).
    pub(crate) fn roll_back(&mut self) -> Result<(), TxError> {
        if self.active {
            // The log's rollback works from the records on media (as recovery does)
            // and lets go of the holds of the recorded blocks.
            self.log.roll_back(self.lane, self.state(Phase::Active))?;
        } else if self.wrote {
            // Records of this TID may be on media (redo's, logged before a failed
            // commit point) with the lane's state still at an older TID: store
            // this TID idle, durably, so the TID is spent on media too and the
            // lane's next transaction stays within a round of a durable one.
            self.log
                .go_idle(self.lane, self.state(Phase::Idle), Site::RollbackIdleFence)?;
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
