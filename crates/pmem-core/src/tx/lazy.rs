//! Lazy commit ([`LogMode::Lazy`](super::LogMode::Lazy)): one fence per transaction.
//!
//! A lazy transaction stages its writes in DRAM (as redo does) and commits by
//! appending one *entry* — its new bytes, allocations and frees, under one checksum
//! — to the log's ring and fencing once: from then on recovery replays it, so the
//! transaction is durable when it returns. It then writes the bytes in place and
//! marks its blocks in the allocator, all without flushing or fencing: a later
//! *checkpoint* makes them durable and truncates the ring.
//!
//! Ring layout (after the lanes): a 64-byte [`RingHeader`] with the sequence number
//! of the last truncated entry, then entries from the ring's start, each on a line
//! boundary: an [`EntryHeader`] (sequence, size, record count, check), then records
//! of a [`RecordHeader`] and, for data, the bytes padded to 8.
//!
//! Recovery replays, from the ring's start, the entries whose sequence numbers
//! follow on: the first above the truncated one, each next exactly one more, each
//! with a valid check. A torn entry (crash before its fence) fails its check and
//! ends the scan; entries of before the last truncation fail the sequence rule.
//! Replay is in commit order, so a location written by several entries ends with
//! the last value, and it is idempotent.
//!
//! What keeps an old entry from being replayed over newer data:
//! * a block freed by a lazy transaction stays held (never handed out) until the
//!   checkpoint that truncates the entry, so no replay lands in a reused block;
//! * every transaction of another mode checkpoints a non-empty ring before it
//!   starts (lazy transactions need `&mut` access to the heap, so none runs
//!   meanwhile), so no replay lands on data an undo or redo transaction wrote later;
//! * the checkpoint flushes every location and block mark of the ring's entries
//!   itself (from whichever thread runs it), fences, and only then stores and fences
//!   the truncation.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::layout::KIND_ALLOC;
use super::log::TxLog;
use super::mutation::Site;
use super::txn::{AllocOp, Scratch};
use super::writeset::WriteSet;
use super::TxError;
use crate::ptr::PPtr;

/// The ring's header line.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub(crate) struct RingHeader {
    /// Entries up to this sequence number are applied durably (truncated).
    pub truncated: u64,
    pub reserved: [u64; 7],
}
const _: () = assert!(std::mem::size_of::<RingHeader>() == 64);

/// The header of one entry (one committed lazy transaction).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub(crate) struct EntryHeader {
    pub seq: u64,
    /// Bytes of the entry, header included (a multiple of 64).
    pub bytes: u32,
    pub records: u32,
    /// The sequence number's low 32 bits over a crc32c of the two words before it
    /// and the records.
    pub check: u64,
    pub reserved: u64,
}
pub(crate) const ENTRY_HEADER: u64 = 32;
const _: () = assert!(std::mem::size_of::<EntryHeader>() as u64 == ENTRY_HEADER);

/// The header of one record: `len_kind = len << 2 | kind`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub(crate) struct RecordHeader {
    pub addr: u64,
    pub len_kind: u64,
}
pub(crate) const RECORD_HEADER: u64 = 16;
const _: () = assert!(std::mem::size_of::<RecordHeader>() as u64 == RECORD_HEADER);
/// Record kinds: new bytes at `addr`, or an allocation or free of a block there.
const REC_DATA: u64 = 0;
const REC_ALLOC: u64 = 1;
const REC_FREE: u64 = 2;

pub(crate) fn entry_check(seq: u64, bytes: u32, records: u32, body: &[u8]) -> u64 {
    let mut head = [0u8; 16];
    head[..8].copy_from_slice(&seq.to_le_bytes());
    head[8..12].copy_from_slice(&bytes.to_le_bytes());
    head[12..].copy_from_slice(&records.to_le_bytes());
    let c = crc32c::crc32c_append(crc32c::crc32c(&head), body);
    (seq & 0xffff_ffff) << 32 | u64::from(c)
}

/// What a replay or checkpoint does with one record.
#[derive(Clone, Copy, Debug)]
enum Item {
    /// Bytes at `addr` (`len` of them), found at `data` in the ring.
    Data { addr: u64, len: u64, data: u64 },
    /// A block allocated (`alloc`) or freed.
    Mark { block: u64, size: u64, alloc: bool },
}

/// DRAM state of the ring, locked by a lazy transaction from its start to its end.
#[derive(Debug, Default)]
pub(crate) struct RingState {
    /// Where the next entry goes (relative to the first entry byte).
    tail: u64,
    /// The next entry's sequence number.
    next_seq: u64,
    /// What the entries since the last truncation changed, in commit order: the
    /// locations written in place and the blocks marked.
    items: Vec<Item>,
    /// The entry being built.
    buf: Vec<u8>,
    /// Buffers of the lazy transactions (one at a time: they need `&mut`).
    scratch: Option<Box<Scratch>>,
    /// A commit failed at or after its fence: nothing more until reopened.
    in_doubt: bool,
}

/// The lazy-commit ring of a log.
#[derive(Debug)]
pub(crate) struct Ring {
    /// Pool offset of the ring header; entries follow it.
    start: u64,
    /// Bytes for entries.
    capacity: u64,
    state: Mutex<RingState>,
    /// Entries exist that a checkpoint has not truncated.
    dirty: AtomicBool,
}

/// A committed lazy transaction's contents, handed to [`Ring::commit`].
pub(crate) struct Commit<'a> {
    pub writes: &'a WriteSet,
    pub allocs: &'a [AllocOp],
}

impl Ring {
    /// The ring at `start` (its header) with `capacity` bytes of entries, its DRAM
    /// state read from the header (entries are replayed by [`Ring::recover`]).
    pub fn new(start: u64, capacity: u64) -> Ring {
        Ring {
            start,
            capacity,
            // Sequence numbers start above a fresh ring's truncation point (0).
            state: Mutex::new(RingState {
                next_seq: 1,
                ..RingState::default()
            }),
            dirty: AtomicBool::new(false),
        }
    }

    /// Bytes a ring of `capacity` occupies (header included).
    pub fn region_size(capacity: u64) -> u64 {
        if capacity == 0 {
            0
        } else {
            64 + capacity.div_ceil(64) * 64
        }
    }

    /// Writes an empty ring's header (format time; the caller fences).
    pub fn format(&self, log: &TxLog) -> Result<(), TxError> {
        let h = RingHeader::default();
        // SAFETY: the ring belongs to the log, formatted single-threaded.
        unsafe { log.pool.write_bytes_shared(self.start, h.as_bytes())? };
        log.pool.flush(self.start, 64)?;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RingState> {
        // Every update of the state completes before anything can fail, or marks
        // the ring in doubt first: a poisoned lock guards a usable state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a lazy transaction: locks the ring (held until the transaction
    /// ends; lazy transactions run one at a time anyway) and hands out its
    /// sequence number and buffers.
    pub fn begin(
        &self,
    ) -> Result<(std::sync::MutexGuard<'_, RingState>, u64, Box<Scratch>), TxError> {
        let mut s = self.lock();
        if s.in_doubt {
            return Err(TxError::NoLane);
        }
        let scratch = s.scratch.take().unwrap_or_default();
        let seq = s.next_seq;
        Ok((s, seq, scratch))
    }

    /// Gives the buffers back (the caller then unlocks the ring).
    pub fn end(s: &mut RingState, scratch: Box<Scratch>) {
        s.scratch = Some(scratch);
    }

    /// Commits: appends the entry and fences (the commit point), then writes the
    /// bytes in place and marks the blocks, unflushed. Returns the entry's size
    /// (0: nothing to commit). `Err(.., false)`: nothing happened; `Err(.., true)`:
    /// in doubt until the log is reopened.
    pub fn commit(
        &self,
        log: &TxLog,
        s: &mut RingState,
        c: &Commit<'_>,
    ) -> Result<u64, (TxError, bool)> {
        let before = |e: TxError| (e, false);
        let after = |e: TxError| (e, true);
        if c.writes.is_empty() && c.allocs.is_empty() {
            return Ok(0);
        }
        let body: u64 = c
            .writes
            .iter()
            .map(|(_, b, _)| RECORD_HEADER + (b.len() as u64).div_ceil(8) * 8)
            .sum::<u64>()
            + RECORD_HEADER * c.allocs.len() as u64;
        let size = (ENTRY_HEADER + body).div_ceil(64) * 64;
        if size > self.capacity || size > u64::from(u32::MAX) {
            return Err(before(TxError::LogFull { what: "lazy ring" }));
        }
        if s.in_doubt {
            return Err(before(TxError::NoLane));
        }
        if s.tail + size > self.capacity {
            self.checkpoint_locked(log, s).map_err(before)?;
        }
        let mut buf = std::mem::take(&mut s.buf);
        buf.clear();
        buf.resize(ENTRY_HEADER as usize, 0);
        let mut writes = 0;
        for (addr, bytes, _) in c.writes.iter() {
            writes += 1;
            let h = RecordHeader {
                addr,
                len_kind: (bytes.len() as u64) << 2 | REC_DATA,
            };
            buf.extend_from_slice(h.as_bytes());
            buf.extend_from_slice(bytes);
            buf.resize(buf.len().div_ceil(8) * 8, 0);
        }
        for a in c.allocs {
            let kind = if a.kind == KIND_ALLOC {
                REC_ALLOC
            } else {
                REC_FREE
            };
            let h = RecordHeader {
                addr: a.block,
                len_kind: a.size << 2 | kind,
            };
            buf.extend_from_slice(h.as_bytes());
        }
        buf.resize(size as usize, 0);
        let seq = s.next_seq;
        let records = (writes + c.allocs.len()) as u32;
        let header = EntryHeader {
            seq,
            bytes: size as u32,
            records,
            check: entry_check(seq, size as u32, records, &buf[ENTRY_HEADER as usize..]),
            reserved: 0,
        };
        buf[..ENTRY_HEADER as usize].copy_from_slice(header.as_bytes());
        let at = self.start + 64 + s.tail;
        // SAFETY: the ring belongs to the log; its state lock is held.
        let written = unsafe { log.pool.write_bytes_shared(at, &buf) };
        s.buf = buf;
        written.map_err(|e| before(e.into()))?;
        // From the flush on, the entry may reach the media: in doubt on failure.
        let fenced = log
            .flush_at(Site::LazyEntryFlush, at, size)
            .and_then(|()| log.fence_at(Site::LazyCommitFence));
        if let Err(e) = fenced {
            s.in_doubt = true;
            return Err(after(e.into()));
        }
        s.tail += size;
        s.next_seq += 1;
        // The next entry's line, fetched now so its stores do not wait for it.
        log.pool.prefetch_for_write(self.start + 64 + s.tail);
        self.dirty.store(true, Ordering::Release);
        if let Err(e) = self.apply(log, s, c) {
            s.in_doubt = true;
            return Err(after(e));
        }
        Ok(size)
    }

    /// Writes a committed entry's bytes in place and marks its blocks (no flush of
    /// the bytes, the marks' own flushes unfenced), remembering both for the
    /// checkpoint. A freed block stays held until the checkpoint.
    fn apply(&self, log: &TxLog, s: &mut RingState, c: &Commit<'_>) -> Result<(), TxError> {
        for (addr, bytes, _) in c.writes.iter() {
            // SAFETY: the transaction's contract (exclusive access to the heap).
            unsafe { log.pool.write_bytes_shared(addr, bytes)? };
            // Not flushed: the entry recovers it; the checkpoint flushes it.
            log.pool.sim_log_covered(addr, bytes.len() as u64);
            s.items.push(Item::Data {
                addr,
                len: bytes.len() as u64,
                data: 0,
            });
        }
        if c.allocs.is_empty() {
            return Ok(());
        }
        let alloc = log.alloc.as_ref().ok_or(TxError::NoAllocator)?;
        for a in c.allocs {
            let is_alloc = a.kind == KIND_ALLOC;
            // SAFETY: the block is the transaction's (held, or live and freed by
            // it) and the committed entry undoes nothing: replay redoes the mark.
            unsafe { alloc.tx_mark(PPtr::from_offset(a.block), a.size, is_alloc) }?;
            s.items.push(Item::Mark {
                block: a.block,
                size: a.size,
                alloc: is_alloc,
            });
        }
        // The marks' flushes stay unfenced: the entry recovers them, the
        // checkpoint marks and fences them again.
        log.pool.sim_defer_flushes();
        for a in c.allocs.iter().filter(|a| a.kind == KIND_ALLOC) {
            alloc.tx_release(PPtr::from_offset(a.block), a.size);
        }
        Ok(())
    }

    /// Checkpoints if entries are pending (before a transaction of another mode).
    pub fn checkpoint_if_dirty(&self, log: &TxLog) -> Result<(), TxError> {
        if !self.dirty.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut s = self.lock();
        if s.in_doubt {
            return Err(TxError::NoLane);
        }
        self.checkpoint_locked(log, &mut s)
    }

    /// Makes every entry's effects durable (flushing each location and marking each
    /// block again, fence), then truncates the ring (header store, fence) and lets
    /// go of the freed blocks.
    fn checkpoint_locked(&self, log: &TxLog, s: &mut RingState) -> Result<(), TxError> {
        if s.items.is_empty() && s.tail == 0 {
            return Ok(());
        }
        let result = self.make_durable(log, &s.items, false);
        let result = result.and_then(|()| self.truncate(log, s.next_seq - 1));
        if let Err(e) = result {
            s.in_doubt = true;
            return Err(e);
        }
        self.release(log, &s.items);
        s.items.clear();
        s.tail = 0;
        self.dirty.store(false, Ordering::Release);
        Ok(())
    }

    /// Flushes the locations of `items` (copying each from the ring first if
    /// `copy`: replay) and marks their blocks again, in order, then fences.
    fn make_durable(&self, log: &TxLog, items: &[Item], copy: bool) -> Result<(), TxError> {
        for item in items {
            match *item {
                Item::Data { addr, len, data } => {
                    if copy {
                        let bytes = log.pool.bytes(data, len)?.to_vec();
                        // SAFETY: recovery runs before the pool is shared.
                        unsafe { log.pool.write_bytes_shared(addr, &bytes)? };
                    }
                    log.flush_at(Site::CheckpointFlush, addr, len)?;
                }
                Item::Mark { block, size, alloc } => {
                    let a = log.alloc.as_ref().ok_or(TxError::NoAllocator)?;
                    // SAFETY: the block was this entry's; marking it again as the
                    // entry left it is what the ring's durability promised.
                    unsafe { a.tx_mark(PPtr::from_offset(block), size, alloc) }?;
                }
            }
        }
        log.fence_at(Site::CheckpointFence)?;
        Ok(())
    }

    /// Stores the truncation point and fences.
    fn truncate(&self, log: &TxLog, seq: u64) -> Result<(), TxError> {
        // SAFETY: the ring header belongs to the log; callers hold the state lock
        // or run recovery single-threaded.
        unsafe {
            log.pool
                .write_bytes_shared(self.start, &seq.to_le_bytes())?
        };
        log.flush_at(Site::CheckpointHeaderFlush, self.start, 8)?;
        log.fence_at(Site::CheckpointHeaderFence)?;
        Ok(())
    }

    /// Lets go of the holds on every marked block.
    fn release(&self, log: &TxLog, items: &[Item]) {
        if let Some(a) = &log.alloc {
            for item in items {
                if let Item::Mark { block, size, .. } = *item {
                    a.tx_release(PPtr::from_offset(block), size);
                }
            }
        }
    }

    /// Replays the ring's entries (open time), truncates it, and sets the DRAM
    /// state. Returns how many entries were replayed. Idempotent.
    pub fn recover(&self, log: &TxLog) -> Result<u32, TxError> {
        let (items, entries, last, next_seq) = self.read_pending(&log.pool, &log.forbidden())?;
        if entries > 0 {
            self.make_durable(log, &items, true)?;
            self.truncate(log, last)?;
            self.release(log, &items);
        }
        let mut s = self.lock();
        s.next_seq = next_seq;
        s.tail = 0;
        s.items.clear();
        Ok(entries)
    }

    /// Entries recovery would replay, read without writing anything (for
    /// `TxHeap::inspect`).
    pub fn pending(&self, pool: &crate::Pool, forbidden: &[Range<u64>]) -> Result<u32, TxError> {
        self.read_pending(pool, forbidden)
            .map(|(_, entries, _, _)| entries)
    }

    /// The ring's entries to replay: their records, how many, the last one's
    /// sequence number and the next one's. `forbidden`: ranges no data record may
    /// write (the log, the allocator's metadata).
    fn read_pending(
        &self,
        pool: &crate::Pool,
        forbidden: &[Range<u64>],
    ) -> Result<(Vec<Item>, u32, u64, u64), TxError> {
        let header: RingHeader = pool.read(PPtr::from_offset(self.start))?;
        let (items, entries, last) = self.scan(pool, header.truncated, forbidden)?;
        // The next entry's sequence number must exist: a truncation point (or a
        // last entry) at the end of the sequence space is corruption, and wrapping
        // to 0 would make every later lazy commit invisible to recovery (found by
        // the `tx_recover` fuzz target).
        let next_seq = last.checked_add(1).ok_or_else(|| {
            TxError::Corrupt(format!(
                "lazy ring: sequence number {last:#x} leaves no room for the next entry"
            ))
        })?;
        Ok((items, entries, last, next_seq))
    }

    /// The records of the entries that follow `truncated`, in order, how many
    /// entries, and the last entry's sequence number (`truncated` if none).
    fn scan(
        &self,
        pool: &crate::Pool,
        truncated: u64,
        forbidden: &[Range<u64>],
    ) -> Result<(Vec<Item>, u32, u64), TxError> {
        let mut items = Vec::new();
        let mut off = 0;
        let mut last = truncated;
        let mut entries = 0;
        while off + ENTRY_HEADER <= self.capacity {
            let at = self.start + 64 + off;
            let h: EntryHeader = pool.read(PPtr::from_offset(at))?;
            let size = u64::from(h.bytes);
            let follows = if entries == 0 {
                h.seq > truncated
            } else {
                last.checked_add(1) == Some(h.seq)
            };
            if !follows
                || size < ENTRY_HEADER
                || !size.is_multiple_of(64)
                || off + size > self.capacity
            {
                break;
            }
            let body = pool.bytes(at + ENTRY_HEADER, size - ENTRY_HEADER)?;
            if h.check != entry_check(h.seq, h.bytes, h.records, body) {
                break;
            }
            let corrupt =
                |what: &str| TxError::Corrupt(format!("lazy ring entry {} at {at}: {what}", h.seq));
            let mut r = 0;
            for _ in 0..h.records {
                let rh = body
                    .get(r..r + RECORD_HEADER as usize)
                    .and_then(|b| RecordHeader::read_from_bytes(b).ok())
                    .ok_or_else(|| corrupt("records run past the entry"))?;
                r += RECORD_HEADER as usize;
                let len = rh.len_kind >> 2;
                match rh.len_kind & 3 {
                    REC_DATA => {
                        let padded = len.div_ceil(8) * 8;
                        if (r as u64) + padded > body.len() as u64 {
                            return Err(corrupt("data runs past the entry"));
                        }
                        pool.check_range(rh.addr, len)
                            .map_err(|_| corrupt("data outside the pool"))?;
                        // A checksummed entry that writes into the log (the ring
                        // itself, a lane) or the allocator's metadata is corrupt:
                        // no transaction logs that.
                        if forbidden
                            .iter()
                            .any(|f| rh.addr < f.end && rh.addr + len > f.start)
                        {
                            return Err(corrupt("data into the log or allocator metadata"));
                        }
                        items.push(Item::Data {
                            addr: rh.addr,
                            len,
                            data: at + ENTRY_HEADER + r as u64,
                        });
                        r += padded as usize;
                    }
                    kind @ (REC_ALLOC | REC_FREE) => items.push(Item::Mark {
                        block: rh.addr,
                        size: len,
                        alloc: kind == REC_ALLOC,
                    }),
                    _ => return Err(corrupt("unknown record kind")),
                }
            }
            entries += 1;
            last = h.seq;
            off += size;
        }
        Ok((items, entries, last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_checks_bind_sequence_size_and_body() {
        let a = entry_check(5, 64, 1, b"body");
        assert_ne!(a, entry_check(6, 64, 1, b"body"));
        assert_ne!(a, entry_check(5, 128, 1, b"body"));
        assert_ne!(a, entry_check(5, 64, 2, b"body"));
        assert_ne!(a, entry_check(5, 64, 1, b"bodz"));
        assert_eq!(a >> 32, 5);
    }
}
