//! The naive baseline of the NVWA paper (§4.2, Table 2): the same size classes,
//! runs and page source as [`crate::Nvwa`], but the allocator's own jemalloc-style
//! metadata lives on the media — a page map, a run header with its slot bitmap per
//! run, per-class bin statistics and arena statistics — and every update of it is
//! undo-logged and flushed, as a persistent jemalloc does. It exists to be
//! measured against: the flushes it pays per allocation are what NVWA's log saves.
//!
//! One operation (under one lock) is one undo transaction: the old value of every
//! metadata word it changes is written to the undo area with its address (flushed,
//! fenced), then their count (flushed, fenced), the new values are stored and
//! each changed line flushed and fenced, and the count is cleared (flushed,
//! fenced). Recovery rolls back an uncleared transaction, then rebuilds DRAM from
//! the page map and run headers. `alloc_publish` puts the slot in the same
//! transaction, so it is crash-atomic.
//!
//! Layout at the start of its region (offsets from the region's 64-byte aligned
//! start): header (64 B: magic `PMKNAIV1`, geometry, crc32c); undo area (4 KiB: a
//! count word, then 16-byte entries); arena statistics (a line); bin statistics
//! (a line per class); the page map (a word per page); run headers (a line per
//! page, used at a run's first page); then the heap's pages.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use pmem_core::alloc::check_publication_slot;
use pmem_core::{AllocError, AtomicPPtr, PPtr, PersistentAllocator, Pool, PoolError};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::classes::{large_pages, Class, SIZES};
use crate::pages::{ArenaKind, PagePolicy, PageSource, Watermarks};
use crate::persist::{fence, flush, Site};
use crate::record::PAGE;
use crate::run::{Run, RunKind};
use crate::sync::{lock, Mutex};

const MAGIC: [u8; 8] = *b"PMKNAIV1";
const UNDO_OFF: u64 = 64;
const UNDO_BYTES: u64 = 4096;
const MAX_UNDO: usize = ((UNDO_BYTES - 16) / 16) as usize;
const ARENA_OFF: u64 = UNDO_OFF + UNDO_BYTES;
const BINS_OFF: u64 = ARENA_OFF + 64;
const MAP_OFF: u64 = BINS_OFF + 64 * SIZES.len() as u64;
/// Page map word: kind in bits 0–1 (0 free, 1 small run, 2 large), bit 2 first
/// page of its run, class id in bits 8–15, pages in bits 16–47.
const KIND_SMALL: u64 = 1;
const KIND_LARGE: u64 = 2;
const FIRST: u64 = 4;

#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Header {
    magic: [u8; 8],
    region_start: u64,
    region_len: u64,
    heap_start: u64,
    heap_pages: u64,
    reserved: [u64; 2],
    checksum: u64,
}

fn crc_of(bytes: &[u8]) -> u64 {
    u64::from(crc32c::crc32c(bytes))
}

#[derive(Clone, Copy, Debug)]
struct Geo {
    region_start: u64,
    region_len: u64,
    heap_start: u64,
    heap_pages: u64,
}

impl Geo {
    fn plan(region: &Range<u64>) -> Result<Geo, AllocError> {
        let start = region.start;
        if !start.is_multiple_of(64) {
            return Err(AllocError::Corrupt {
                reason: format!("region start {start:#x} is not 64-byte aligned"),
            });
        }
        let len = region.end.saturating_sub(start);
        // Per page: a map word, a header line and the page.
        let pages = len.saturating_sub(MAP_OFF + 2 * PAGE) / (PAGE + 72);
        if pages == 0 {
            return Err(AllocError::Corrupt {
                reason: format!("region of {len} bytes leaves no page for the heap"),
            });
        }
        let heap_start = (start + MAP_OFF + pages * 8 + pages * 64).div_ceil(PAGE) * PAGE;
        Ok(Geo {
            region_start: start,
            region_len: len,
            heap_start,
            heap_pages: pages,
        })
    }
    fn undo(&self) -> u64 {
        self.region_start + UNDO_OFF
    }
    fn arena(&self) -> u64 {
        self.region_start + ARENA_OFF
    }
    fn bin(&self, c: Class) -> u64 {
        self.region_start + BINS_OFF + 64 * u64::from(c.0)
    }
    fn map(&self, page: u64) -> u64 {
        self.region_start + MAP_OFF + 8 * page
    }
    fn run_header(&self, page: u64) -> u64 {
        (self.region_start + MAP_OFF + 8 * self.heap_pages).div_ceil(64) * 64 + 64 * page
    }
    fn metadata(&self) -> Range<u64> {
        self.region_start..self.heap_start
    }
}

/// The DRAM side: the same runs as NVWA's, one lock.
#[derive(Debug)]
struct State {
    runs: BTreeMap<u64, Run>,
    bins: Vec<Vec<u64>>,
    pages: PageSource,
    /// Words of the media metadata as DRAM knows them (stats, bitmaps, map).
    allocated_bytes: u64,
}

/// The naive baseline allocator. See the module docs.
#[derive(Debug)]
pub struct NaiveHeap {
    pool: Arc<Pool>,
    geo: Geo,
    state: Mutex<State>,
}

/// One undo transaction's updates: (pool offset of a word, new value).
type Updates = Vec<(u64, u64)>;

impl NaiveHeap {
    /// Formats the pool's heap area (from a 64-byte boundary) and opens it.
    ///
    /// # Safety
    /// Nothing else uses the area, now or later, except through this heap.
    pub unsafe fn format_heap(pool: Arc<Pool>) -> Result<NaiveHeap, AllocError> {
        if pool.is_read_only() {
            return Err(PoolError::ReadOnly.into());
        }
        let heap = pool.heap();
        let start = heap.start.div_ceil(64) * 64;
        let g = Geo::plan(&(start..heap.end))?;
        let zeros = vec![0u8; 64 * 1024];
        let mut at = g.undo();
        while at < g.heap_start {
            let n = (g.heap_start - at).min(zeros.len() as u64);
            // SAFETY: the area is the caller's alone (this function's contract).
            unsafe { pool.write_bytes_shared(at, &zeros[..n as usize])? };
            at += n;
        }
        pool.persist(g.undo(), g.heap_start - g.undo())?;
        let mut h = Header {
            magic: MAGIC,
            region_start: g.region_start,
            region_len: g.region_len,
            heap_start: g.heap_start,
            heap_pages: g.heap_pages,
            reserved: [0; 2],
            checksum: 0,
        };
        h.checksum = crc_of(&h.as_bytes()[..56]);
        // SAFETY: as above.
        unsafe { pool.write_bytes_shared(g.region_start, h.as_bytes())? };
        pool.persist(g.region_start, 64)?;
        // SAFETY: as above.
        unsafe { NaiveHeap::open_heap(pool) }
    }

    /// Opens the heap formatted by [`NaiveHeap::format_heap`]: rolls back an
    /// unfinished operation and rebuilds DRAM from the page map and run headers.
    ///
    /// # Safety
    /// As [`NaiveHeap::format_heap`]; one heap at a time per pool.
    pub unsafe fn open_heap(pool: Arc<Pool>) -> Result<NaiveHeap, AllocError> {
        let start = pool.heap().start.div_ceil(64) * 64;
        let corrupt = |reason: &str| AllocError::Corrupt {
            reason: format!("naive heap: {reason}"),
        };
        if start + 64 > pool.len() {
            return Err(AllocError::NotFormatted { offset: start });
        }
        let h = pool.read(PPtr::<Header>::from_offset(start))?;
        if h.magic != MAGIC {
            return Err(AllocError::NotFormatted { offset: start });
        }
        if h.checksum != crc_of(&h.as_bytes()[..56]) {
            return Err(corrupt("header checksum mismatch"));
        }
        let g = Geo::plan(&(start..start.saturating_add(h.region_len)))?;
        if g.heap_start != h.heap_start || g.heap_pages != h.heap_pages || h.region_start != start {
            return Err(corrupt("the header's geometry does not match its region"));
        }
        if g.heap_start + g.heap_pages * PAGE > pool.len() {
            return Err(corrupt("the heap runs past the pool"));
        }
        roll_back(&pool, &g)?;
        let mut pages = PageSource::new(
            g.heap_pages,
            PagePolicy::Caa { batch: 4 },
            1,
            Watermarks::default(),
        );
        let mut runs = BTreeMap::new();
        let mut bins = vec![Vec::new(); SIZES.len()];
        let mut allocated_bytes = 0;
        let mut page = 0;
        while page < g.heap_pages {
            let w = pool.read(PPtr::<u64>::from_offset(g.map(page)))?;
            if w & FIRST == 0 {
                page += 1;
                continue;
            }
            let n = (w >> 16) & 0xffff_ffff;
            if n == 0 || page + n > g.heap_pages {
                return Err(corrupt("a page map entry's run runs past the heap"));
            }
            pages
                .mark_used(page, n)
                .map_err(|e| corrupt(&e.to_string()))?;
            let mut run = match w & 3 {
                KIND_SMALL => {
                    let c = Class::from_id(((w >> 8) & 0xff) as u8)
                        .ok_or_else(|| corrupt("a run of no class"))?;
                    let mut run = Run::new(page, n, RunKind::Small(c));
                    let bitmap = pool.bytes(g.run_header(page) + 8, 32)?;
                    for slot in 0..run.slots {
                        let byte = bitmap[(slot / 8) as usize];
                        if byte >> (slot % 8) & 1 == 1 {
                            run.take_at(slot);
                            run.set_live(slot, 0, 0);
                        }
                    }
                    allocated_bytes += u64::from(run.live) * c.size();
                    if run.has_room() {
                        run.in_bin = true;
                        bins[usize::from(c.0)].push(page);
                    }
                    run
                }
                KIND_LARGE => {
                    let mut run = Run::new(page, n, RunKind::Large);
                    run.take_at(0);
                    run.set_live(0, 0, 0);
                    allocated_bytes += n * PAGE;
                    run
                }
                _ => return Err(corrupt("a page map entry of no kind")),
            };
            run.in_bin = run.in_bin && matches!(run.kind, RunKind::Small(_));
            runs.insert(page, run);
            page += n;
        }
        Ok(NaiveHeap {
            pool,
            geo: g,
            state: Mutex::new(State {
                runs,
                bins,
                pages,
                allocated_bytes,
            }),
        })
    }

    /// Runs one undo transaction over `updates`.
    fn commit(&self, updates: &Updates) -> Result<(), AllocError> {
        commit(&self.pool, &self.geo, updates)
    }

    fn read_word(&self, offset: u64) -> Result<u64, AllocError> {
        Ok(self.pool.read(PPtr::<u64>::from_offset(offset))?)
    }

    /// The updates that take slot `slot` of the run at `first` (allocated or
    /// freed), with the bin and arena statistics. `fresh`: the run's header is
    /// being written by the same transaction (all slots free).
    fn slot_updates(
        &self,
        s: &State,
        first: u64,
        slot: u32,
        (allocated, fresh): (bool, bool),
        u: &mut Updates,
    ) -> Result<(), AllocError> {
        let run = s.runs.get(&first).ok_or_else(|| AllocError::Corrupt {
            reason: "a run vanished".into(),
        })?;
        let header = self.geo.run_header(first);
        match run.kind {
            RunKind::Small(c) => {
                let word_at = header + 8 + 8 * u64::from(slot / 64);
                let (old, nfree) = if fresh {
                    (0, u64::from(run.slots))
                } else {
                    (self.read_word(word_at)?, self.read_word(header)?)
                };
                let bit = 1u64 << (slot % 64);
                u.push((word_at, if allocated { old | bit } else { old & !bit }));
                u.push((
                    header,
                    if allocated {
                        nfree.wrapping_sub(1)
                    } else {
                        nfree + 1
                    },
                ));
                let bin = self.geo.bin(c);
                let (nmalloc, ndalloc, cur) = (
                    self.read_word(bin)?,
                    self.read_word(bin + 8)?,
                    self.read_word(bin + 16)?,
                );
                if allocated {
                    u.push((bin, nmalloc + 1));
                    u.push((bin + 16, cur + 1));
                } else {
                    u.push((bin + 8, ndalloc + 1));
                    u.push((bin + 16, cur.wrapping_sub(1)));
                }
            }
            RunKind::Large => {}
        }
        let size = run.slot_size;
        let bytes = s.allocated_bytes;
        let arena = self.geo.arena();
        u.push((
            arena,
            if allocated {
                bytes + size
            } else {
                bytes - size
            },
        ));
        Ok(())
    }

    /// The updates announcing a new run at `first` (page map and run header).
    fn run_updates(&self, run: &Run, on: bool, u: &mut Updates) {
        let (kind, class) = match run.kind {
            RunKind::Small(c) => (KIND_SMALL, u64::from(c.id())),
            RunKind::Large => (KIND_LARGE, 0),
        };
        for p in run.first_page..run.first_page + run.pages {
            let w = if on {
                kind | if p == run.first_page { FIRST } else { 0 } | class << 8 | run.pages << 16
            } else {
                0
            };
            u.push((self.geo.map(p), w));
        }
        if let RunKind::Small(_) = run.kind {
            let header = self.geo.run_header(run.first_page);
            u.push((header, if on { u64::from(run.slots) } else { 0 }));
            for w in 0..u64::from(run.slots.div_ceil(64)) {
                u.push((header + 8 + 8 * w, 0));
            }
        }
    }

    /// Picks a slot for `size` bytes (a new run if needed); DRAM only. Returns the
    /// run's first page, the slot, and whether the run is new.
    fn place(&self, s: &mut State, size: u64) -> Result<(u64, u32, bool), AllocError> {
        let out = || AllocError::OutOfSpace { requested: size };
        match Class::of(size) {
            Some(c) => {
                let bin = &mut s.bins[usize::from(c.0)];
                while let Some(&first) = bin.last() {
                    if let Some(slot) = s.runs.get_mut(&first).and_then(Run::take) {
                        return Ok((first, slot, false));
                    }
                    bin.pop();
                    if let Some(r) = s.runs.get_mut(&first) {
                        r.in_bin = false;
                    }
                }
                let first = s
                    .pages
                    .take(0, ArenaKind::Persistent, c.run_pages())
                    .ok_or_else(out)?;
                let mut run = Run::new(first, c.run_pages(), RunKind::Small(c));
                let slot = run.take().unwrap_or(0);
                run.in_bin = true;
                s.runs.insert(first, run);
                s.bins[usize::from(c.0)].push(first);
                Ok((first, slot, true))
            }
            None => {
                let n = large_pages(size);
                let first = s.pages.take(0, ArenaKind::Persistent, n).ok_or_else(out)?;
                let mut run = Run::new(first, n, RunKind::Large);
                run.take_at(0);
                s.runs.insert(first, run);
                Ok((first, 0, true))
            }
        }
    }

    /// Undoes `place` (its operation failed before committing).
    fn unplace(&self, s: &mut State, first: u64, slot: u32, new: bool) {
        if new {
            if let Some(run) = s.runs.remove(&first) {
                if let RunKind::Small(c) = run.kind {
                    s.bins[usize::from(c.0)].retain(|&f| f != first);
                }
                let _ = s.pages.give_back(first, run.pages);
            }
        } else if let Some(run) = s.runs.get_mut(&first) {
            run.put(slot);
        }
    }

    fn alloc_with(&self, size: u64, publish: Option<(u64, &[u8])>) -> Result<PPtr<u8>, AllocError> {
        if size == 0 || size > crate::record::MAX_LEN {
            return Err(AllocError::InvalidSize { size });
        }
        if self.pool.is_read_only() {
            return Err(PoolError::ReadOnly.into());
        }
        let mut s = lock(&self.state);
        let (first, slot, new) = self.place(&mut s, size)?;
        let block = {
            let run = s.runs.get(&first).ok_or_else(|| AllocError::Corrupt {
                reason: "a run vanished".into(),
            })?;
            self.geo.heap_start + run.offset(slot)
        };
        let mut u = Updates::new();
        let r = (|| -> Result<(), AllocError> {
            if new {
                if let Some(run) = s.runs.get(&first) {
                    self.run_updates(run, true, &mut u);
                }
            }
            self.slot_updates(&s, first, slot, (true, new), &mut u)?;
            if let Some((slot_off, data)) = publish {
                if slot_off + 8 > block && slot_off < block + size {
                    return Err(AllocError::InvalidSlot {
                        offset: slot_off,
                        reason: "inside the block being allocated",
                    });
                }
                // SAFETY: the block was just taken under the lock.
                unsafe { self.pool.write_bytes_shared(block, data)? };
                self.pool.persist(block, size)?;
                u.push((slot_off, block));
            }
            self.commit(&u)
        })();
        if let Err(e) = r {
            self.unplace(&mut s, first, slot, new);
            return Err(e);
        }
        let size_class = s.runs.get(&first).map_or(0, |r| r.slot_size);
        if let Some(run) = s.runs.get_mut(&first) {
            run.set_live(slot, 0, 0);
        }
        s.allocated_bytes += size_class;
        Ok(PPtr::from_offset(block))
    }
}

/// Writes the undo entries of `updates`, then the updates, then clears the log,
/// each step flushed and fenced.
fn commit(pool: &Pool, g: &Geo, updates: &Updates) -> Result<(), AllocError> {
    if updates.len() > MAX_UNDO {
        return Err(AllocError::Corrupt {
            reason: format!("{} updates exceed the undo area", updates.len()),
        });
    }
    let mut entries = Vec::with_capacity(updates.len() * 16);
    for &(off, _) in updates {
        let old = pool.read(PPtr::<u64>::from_offset(off))?;
        entries.extend_from_slice(&off.to_le_bytes());
        entries.extend_from_slice(&old.to_le_bytes());
    }
    // SAFETY: the undo area and the metadata words are written only under the
    // heap's lock (callers hold it) or by single-threaded recovery.
    unsafe { pool.write_bytes_shared(g.undo() + 16, &entries)? };
    flush(
        pool,
        Site::NaiveUndoFlush,
        g.undo() + 16,
        entries.len() as u64,
    )?;
    // The entries before their count: a count that persisted alone would name
    // entries that did not.
    fence(pool, Site::NaiveEntriesFence)?;
    // SAFETY: as above.
    unsafe { pool.write_bytes_shared(g.undo(), &(updates.len() as u64).to_le_bytes())? };
    flush(pool, Site::NaiveUndoFlush, g.undo(), 8)?;
    fence(pool, Site::NaiveUndoFence)?;
    for &(off, new) in updates {
        // SAFETY: as above; a slot word is accessed by others only atomically
        // (the publication contract), and an aligned 8-byte store is one store.
        unsafe { pool.write_bytes_shared(off, &new.to_le_bytes())? };
        flush(pool, Site::NaiveApplyFlush, off, 8)?;
    }
    retire_undo(pool, g)
}

/// Ends a transaction whose words are written and flushed: fences them, then
/// clears the undo count (flushed and fenced), so the log no longer names them.
fn retire_undo(pool: &Pool, g: &Geo) -> Result<(), AllocError> {
    fence(pool, Site::NaiveApplyFence)?;
    // SAFETY: the undo area is written only under the heap's lock (the committer
    // holds it) or by recovery before the heap is shared.
    unsafe { pool.write_bytes_shared(g.undo(), &0u64.to_le_bytes())? };
    flush(pool, Site::NaiveUndoFlush, g.undo(), 8)?;
    fence(pool, Site::NaiveUndoFence)?;
    Ok(())
}

/// Restores the old values of an unfinished transaction, newest first.
fn roll_back(pool: &Pool, g: &Geo) -> Result<(), AllocError> {
    let n = pool.read(PPtr::<u64>::from_offset(g.undo()))?;
    if n == 0 {
        return Ok(());
    }
    if n as usize > MAX_UNDO {
        return Err(AllocError::Corrupt {
            reason: format!("naive heap: undo count {n} is past the area"),
        });
    }
    if pool.is_read_only() {
        return Err(PoolError::ReadOnly.into());
    }
    for i in (0..n).rev() {
        let e = g.undo() + 16 + 16 * i;
        let off = pool.read(PPtr::<u64>::from_offset(e))?;
        let old = pool.read(PPtr::<u64>::from_offset(e + 8))?;
        if off.checked_add(8).is_none_or(|end| end > pool.len()) || !off.is_multiple_of(8) {
            return Err(AllocError::Corrupt {
                reason: format!("naive heap: undo entry {i} names {off:#x}"),
            });
        }
        // SAFETY: recovery runs before the heap is shared.
        unsafe { pool.write_bytes_shared(off, &old.to_le_bytes())? };
        flush(pool, Site::NaiveApplyFlush, off, 8)?;
    }
    retire_undo(pool, g)
}

// SAFETY: blocks are slots of runs on the heap's pages after the metadata; the page
// source hands each page to one run, a slot is handed out only while its bit is
// free, and recovery rebuilds exactly the runs and bits on the media.
unsafe impl PersistentAllocator for NaiveHeap {
    fn name(&self) -> &'static str {
        "naive"
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn alignment(&self) -> u64 {
        crate::record::UNIT
    }

    fn alloc(&self, size: u64) -> Result<PPtr<u8>, AllocError> {
        self.alloc_with(size, None)
    }

    unsafe fn free(&self, ptr: PPtr<u8>, size: u64) -> Result<(), AllocError> {
        let bad = |reason| AllocError::InvalidFree {
            offset: ptr.offset(),
            size,
            reason,
        };
        if self.pool.is_read_only() {
            return Err(PoolError::ReadOnly.into());
        }
        let off = ptr
            .offset()
            .checked_sub(self.geo.heap_start)
            .filter(|o| *o < self.geo.heap_pages * PAGE)
            .ok_or_else(|| bad("outside the heap"))?;
        let mut s = lock(&self.state);
        let (&first, run) = s
            .runs
            .range(..=off / PAGE)
            .next_back()
            .filter(|(f, r)| off / PAGE < **f + r.pages)
            .ok_or_else(|| bad("not in a run"))?;
        let slot = run
            .slot_at(off)
            .ok_or_else(|| bad("not the start of a block"))?;
        if !run.holds_size(size) {
            return Err(bad("the size does not match the block"));
        }
        if run.pos(slot).is_none() {
            return Err(bad("not allocated"));
        }
        let mut u = Updates::new();
        let large = run.kind == RunKind::Large;
        self.slot_updates(&s, first, slot, (false, false), &mut u)?;
        if large {
            if let Some(run) = s.runs.get(&first) {
                self.run_updates(run, false, &mut u);
            }
        }
        self.commit(&u)?;
        let slot_size = s.runs.get(&first).map_or(0, |r| r.slot_size);
        s.allocated_bytes -= slot_size;
        if large {
            if let Some(run) = s.runs.remove(&first) {
                let _ = s.pages.give_back(first, run.pages);
            }
        } else if let Some(run) = s.runs.get_mut(&first) {
            run.clear_live(slot);
            run.put(slot);
            if !run.in_bin {
                run.in_bin = true;
                if let RunKind::Small(c) = run.kind {
                    s.bins[usize::from(c.0)].push(first);
                }
            }
        }
        Ok(())
    }

    unsafe fn alloc_publish(
        &self,
        size: u64,
        slot: PPtr<AtomicPPtr<u8>>,
        init: &mut dyn FnMut(&mut [u8]),
    ) -> Result<PPtr<u8>, AllocError> {
        check_publication_slot(&self.pool, slot.offset(), self.geo.metadata())?;
        let mut data = vec![0u8; size as usize];
        init(&mut data);
        self.alloc_with(size, Some((slot.offset(), &data)))
    }

    fn for_each_live_block(&self, f: &mut dyn FnMut(PPtr<u8>, u64)) -> Result<(), AllocError> {
        let blocks: Vec<(u64, u64)> = {
            let s = lock(&self.state);
            s.runs
                .values()
                .flat_map(|r| {
                    r.live_slots()
                        .map(|(slot, _)| (self.geo.heap_start + r.offset(slot), r.slot_size))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        for (b, size) in blocks {
            f(PPtr::from_offset(b), size);
        }
        Ok(())
    }

    fn usable_size(&self, _ptr: PPtr<u8>, size: u64) -> u64 {
        crate::classes::usable_size(size)
    }
}
