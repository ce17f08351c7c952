//! A simple crash-safe page allocator: fixed-size pages, two bits each.
//!
//! On-media layout at the start of its region (offsets relative to the region):
//!
//! | offset | size | contents |
//! | ---: | ---: | --- |
//! | 0 | 64 | [`MetaHeader`]: magic `PMKPAGE2`, geometry, crc32c — written once at format |
//! | 64 | 64 | [`PublishIntent`](super::intent::PublishIntent): the redo record of an in-flight publication or unpublication |
//! | 128 | 8 × ⌈pages / 32⌉ | page bitmap: for page `p`, bit `2p` = allocated, bit `2p + 1` = first page of a block |
//! | page aligned | pages × page size | the pages |
//!
//! Format version 2 (magic `PMKPAGE2`) added the block-start bits, so live blocks can
//! be enumerated with their sizes ([`PersistentAllocator::for_each_live_block`]) and
//! `free` checks that it is given exactly one whole block. A page's two bits share an
//! aligned 8-byte word, so they persist together. Opening a version-1 allocator
//! (`PMKPAGE1`) is [`AllocError::UnsupportedVersion`].
//!
//! A block is a run of allocated pages whose first page has its start bit set (or,
//! after a torn plain `alloc` or `free`, follows a free page) and whose other pages do
//! not. Every page of a run lies in the words written by the one operation, and the
//! word holding the first page carries its start bit, so a torn run can only split
//! off orphan pages (leaked as blocks of their own), never merge into a neighbour.
//!
//! A DRAM copy of the bitmap serves allocation (next-fit for runs of pages); each
//! allocation or free writes the changed bitmap words and persists them (one flush
//! per changed line, one fence) before returning.
//!
//! Crash semantics:
//! * `alloc`: durable on return. A crash after it returns but before the caller
//!   links the block leaks that block (use `alloc_publish` to avoid this).
//! * `free`: durable on return; a crash before it returns leaves the block allocated
//!   (a leak of that block, never a double use).
//! * `alloc_publish`: the block is initialised and persisted, then an intent record
//!   `{slot, block, pages}` with a checksum is persisted, then the bitmap bits and the
//!   slot are written and persisted, then the intent is cleared. Recovery
//!   ([`PageAllocator::open`]) redoes a checksummed intent (set bits, store slot) and
//!   discards a torn one (which means the bitmap and slot were never touched).
//!   Nothing leaks and the slot never points to a free page.
//! * `alloc_publish_if`: as `alloc_publish`, after checking (under the allocator's
//!   lock) that the slot holds the expected value; the intent also records the
//!   expected value, and the redo stores the block only if the slot holds the
//!   expected value or the block (otherwise it frees the block). The intent is cleared
//!   durably before the call returns, and the caller's contract forbids other stores
//!   to the slot while the call runs, so a redo can never overwrite a later update of
//!   the slot — not even one that set it back to the expected value (ABA).
//! * `free_unpublish`: an intent `{slot, block, pages}` is persisted, then the slot
//!   is cleared and the block's bits cleared, persisted under one fence, then the
//!   intent is cleared. Recovery redoes an intact intent (clears the slot if it still
//!   points to the block, clears the bits). After a crash either the slot still
//!   points to the allocated block, or the slot is null and the block is free.
//! * The transactional operations (`tx_reserve`, `tx_mark`, `tx_release`) keep a
//!   DRAM-only *hold* bitmap beside the page bitmap: a held page is never handed
//!   out. `tx_mark` writes a block's bits and flushes them without a fence; what a
//!   crash leaves of them is the caller's to undo from its own durable records (the
//!   transaction log does), so the allocator itself has nothing to recover.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::intent::{IntentKind, PublishIntent as Intent};
use super::{AllocError, PersistentAllocator};
use crate::ptr::{AtomicPPtr, PPtr};
use crate::Pool;

/// The on-media format version, the last byte of the magic.
const FORMAT_VERSION: u8 = 2;
const MAGIC_PREFIX: &[u8; 7] = b"PMKPAGE";
const META_MAGIC: [u8; 8] = *b"PMKPAGE2";
const _: () = assert!(META_MAGIC[7] == b'0' + FORMAT_VERSION);
const INTENT_OFF: u64 = 64;
const BITMAP_OFF: u64 = 128;
/// Pages per bitmap word (two bits each).
const PAGES_PER_WORD: u64 = 32;
/// The allocated bits of a bitmap word.
const ALLOC_MASK: u64 = 0x5555_5555_5555_5555;

fn word_bit(page: u64) -> (usize, u64) {
    (
        (page / PAGES_PER_WORD) as usize,
        2 * (page % PAGES_PER_WORD),
    )
}

fn is_alloc(bitmap: &[u64], page: u64) -> bool {
    let (w, b) = word_bit(page);
    bitmap[w] & (1 << b) != 0
}

fn is_start_bit(bitmap: &[u64], page: u64) -> bool {
    let (w, b) = word_bit(page);
    bitmap[w] & (2 << b) != 0
}

/// Whether `page` is the first page of a block: allocated, and either marked as a
/// start or following a free page (an orphan left by a torn plain alloc or free).
fn is_block_start(bitmap: &[u64], page: u64) -> bool {
    is_alloc(bitmap, page)
        && (is_start_bit(bitmap, page) || page == 0 || !is_alloc(bitmap, page - 1))
}

fn is_held(held: &[u64], page: u64) -> bool {
    held[(page / 64) as usize] & (1 << (page % 64)) != 0
}

fn set_held(held: &mut [u64], first: u64, n: u64, value: bool) {
    for p in first..first + n {
        let (w, b) = ((p / 64) as usize, p % 64);
        if value {
            held[w] |= 1 << b;
        } else {
            held[w] &= !(1 << b);
        }
    }
}

fn pages_used(bitmap: &[u64]) -> u64 {
    bitmap
        .iter()
        .map(|w| u64::from((w & ALLOC_MASK).count_ones()))
        .sum()
}

/// The blocks of `bitmap` (of `page_count` pages): (first page, pages).
fn blocks(bitmap: &[u64], page_count: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut p = 0;
    while p < page_count {
        if is_block_start(bitmap, p) {
            let mut end = p + 1;
            while end < page_count && is_alloc(bitmap, end) && !is_start_bit(bitmap, end) {
                end += 1;
            }
            out.push((p, end - p));
            p = end;
        } else {
            p += 1;
        }
    }
    out
}

/// The allocator's header, written once at format.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct MetaHeader {
    magic: [u8; 8],
    page_size: u64,
    page_count: u64,
    region_off: u64,
    region_len: u64,
    first_page: u64,
    reserved: u64,
    checksum: u64,
}
const _: () = assert!(std::mem::size_of::<MetaHeader>() == 64);

fn crc_of(bytes: &[u8]) -> u64 {
    u64::from(crc32c::crc32c(bytes))
}

impl MetaHeader {
    fn sealed(mut self) -> Self {
        self.checksum = crc_of(&self.as_bytes()[..56]);
        self
    }
    fn valid(&self) -> bool {
        self.magic == META_MAGIC && self.checksum == crc_of(&self.as_bytes()[..56])
    }
}

/// Usage of a page allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageAllocStats {
    /// Page size in bytes.
    pub page_size: u64,
    /// Pages managed.
    pub pages_total: u64,
    /// Pages allocated.
    pub pages_used: u64,
    /// Whether an `alloc_publish` intent awaits recovery.
    pub intent_pending: bool,
}

struct State {
    bitmap: Vec<u64>,
    /// DRAM only, one bit per page: pages held by a transaction (`tx_reserve`,
    /// `tx_mark`) until its `tx_release`, never handed out meanwhile.
    held: Vec<u64>,
    used: u64,
    /// Next-fit cursor: where the last search ended.
    cursor: u64,
}

/// A crash-safe allocator of fixed-size pages: a bitmap with a DRAM copy, and a redo
/// intent that makes `alloc_publish` crash-atomic (layout and crash semantics in the
/// source of `alloc/page.rs`).
pub struct PageAllocator {
    pool: Arc<Pool>,
    meta: MetaHeader,
    state: Mutex<State>,
}

/// Geometry for a region: (page_count, first_page offset).
fn geometry(region: &Range<u64>, page_size: u64) -> Option<(u64, u64)> {
    if !valid_page_size(page_size) {
        return None;
    }
    let len = region.end.checked_sub(region.start)?;
    let mut count = len.checked_sub(BITMAP_OFF)? / page_size;
    // Fewer pages need a smaller bitmap, so the pages that fit after the bitmap of
    // `count` pages only grow as `count` shrinks: step down to what fits until it
    // does (a few steps; bounded for safety).
    for _ in 0..64 {
        let bitmap_end = region.start + BITMAP_OFF + count.div_ceil(PAGES_PER_WORD) * 8;
        let first = bitmap_end.div_ceil(page_size) * page_size;
        let fit = region.end.saturating_sub(first) / page_size;
        if fit >= count {
            return (count > 0).then_some((count, first));
        }
        count = fit;
    }
    None
}

/// Page sizes the allocator supports: powers of two from 64 B to 2 MiB.
fn valid_page_size(page_size: u64) -> bool {
    page_size.is_power_of_two() && (64..=(2 << 20)).contains(&page_size)
}

impl PageAllocator {
    /// Formats `region` of the pool (offsets, at least 8-byte aligned) as a page
    /// allocator with pages of `page_size` bytes (a power of two from 64 to 2 MiB).
    ///
    /// # Safety
    /// While the allocator lives, the region's bytes are accessed only through it and
    /// each allocated block only by its owner (no [`Pool::get`] or [`Pool::bytes`]
    /// over the metadata).
    pub unsafe fn format(
        pool: Arc<Pool>,
        region: Range<u64>,
        page_size: u64,
    ) -> Result<Self, AllocError> {
        if !valid_page_size(page_size) {
            return Err(AllocError::InvalidSize { size: page_size });
        }
        if !region.start.is_multiple_of(64)
            || region.end > pool.len()
            || region.start < pool.heap().start
        {
            return Err(AllocError::Corrupt {
                reason: format!(
                    "region {region:?} is not a 64-byte aligned part of the heap {:?}",
                    pool.heap()
                ),
            });
        }
        let (page_count, first_page) = geometry(&region, page_size).ok_or(AllocError::Corrupt {
            reason: format!("region {region:?} is too small for one {page_size}-byte page"),
        })?;
        let meta = MetaHeader {
            magic: META_MAGIC,
            page_size,
            page_count,
            region_off: region.start,
            region_len: region.end - region.start,
            first_page,
            reserved: 0,
            checksum: 0,
        }
        .sealed();
        let words = page_count.div_ceil(PAGES_PER_WORD) as usize;
        let zero_bitmap = vec![0u8; words * 8];
        let r = region.start;
        // SAFETY: the caller reserves the region for this allocator (contract above).
        unsafe {
            pool.write_bytes_shared(r + INTENT_OFF, Intent::default().as_bytes())?;
            pool.write_bytes_shared(r + BITMAP_OFF, &zero_bitmap)?;
        }
        pool.persist(r + INTENT_OFF, 64 + zero_bitmap.len() as u64)?;
        // The header goes last: a crash before it is durable leaves no valid allocator.
        // SAFETY: as above.
        unsafe { pool.write_bytes_shared(r, meta.as_bytes())? };
        pool.persist(r, 64)?;
        let state = State {
            bitmap: vec![0; words],
            held: vec![0; (page_count as usize).div_ceil(64)],
            used: 0,
            cursor: 0,
        };
        Ok(PageAllocator {
            pool,
            meta,
            state: Mutex::new(state),
        })
    }

    /// Formats the whole heap of the pool with 4 KiB pages.
    ///
    /// # Safety
    /// As for [`PageAllocator::format`], over the whole heap.
    pub unsafe fn format_heap(pool: Arc<Pool>) -> Result<Self, AllocError> {
        let heap = pool.heap();
        // SAFETY: forwarded.
        unsafe { Self::format(pool, heap, 4096) }
    }

    /// Opens the allocator formatted at `region_start`, recovering an interrupted
    /// `alloc_publish` (this writes, so the pool must be writable).
    ///
    /// # Safety
    /// As for [`PageAllocator::format`].
    pub unsafe fn open(pool: Arc<Pool>, region_start: u64) -> Result<Self, AllocError> {
        let (meta, bitmap) = read_meta(&pool, region_start)?;
        let used = pages_used(&bitmap);
        let a = PageAllocator {
            pool,
            meta,
            state: Mutex::new(State {
                bitmap,
                held: vec![0; (meta.page_count as usize).div_ceil(64)],
                used,
                cursor: 0,
            }),
        };
        a.recover()?;
        a.mark_orphan_starts()?;
        Ok(a)
    }

    /// Gives every orphan block (allocated pages after a free page whose first page
    /// lacks its start bit: what a torn plain `alloc` or `free` leaves) its start
    /// bit, durably, so that a block allocated later right before it cannot absorb
    /// it: the enumeration would then see one block, and `free` of the new block
    /// would fail as "not exactly one block" (found by the `page_alloc_intents`
    /// fuzz target). On a read-only pool only the DRAM copy is fixed.
    fn mark_orphan_starts(&self) -> Result<(), AllocError> {
        let mut s = self.lock();
        let mut changed = Vec::new();
        for p in 0..self.meta.page_count {
            if is_block_start(&s.bitmap, p) && !is_start_bit(&s.bitmap, p) {
                let (w, b) = word_bit(p);
                s.bitmap[w] |= 2 << b;
                if changed.last() != Some(&w) {
                    changed.push(w);
                }
            }
        }
        if changed.is_empty() || self.pool.is_read_only() {
            return Ok(());
        }
        tracing::info!(words = changed.len(), "marking orphan pages as blocks");
        for &w in &changed {
            let off = self.meta.region_off + BITMAP_OFF + w as u64 * 8;
            // SAFETY: the bitmap is the allocator's metadata; open is
            // single-threaded and holds the lock.
            unsafe {
                self.pool
                    .write_bytes_shared(off, &s.bitmap[w].to_le_bytes())?
            };
            self.pool.flush(off, 8)?;
        }
        self.pool.drain()?;
        Ok(())
    }

    /// Opens the allocator formatted over the whole heap.
    ///
    /// # Safety
    /// As for [`PageAllocator::format`].
    pub unsafe fn open_heap(pool: Arc<Pool>) -> Result<Self, AllocError> {
        let start = pool.heap().start;
        // SAFETY: forwarded.
        unsafe { Self::open(pool, start) }
    }

    /// Reads the allocator's usage without changing anything (works on read-only
    /// pools; a pending intent is reported, not applied). Used by `pmkit pool info`.
    ///
    /// Takes `&mut Pool` so that no allocator can be live on the pool while it reads:
    /// a live allocator holds the pool (an `Arc<Pool>`) and writes its bitmap and
    /// intent through shared access, which these plain reads would race with. With
    /// an `Arc<Pool>`, drop the allocators and use [`std::sync::Arc::get_mut`].
    ///
    /// Inspecting next to a live allocator does not compile:
    ///
    /// ```compile_fail
    /// # use std::sync::Arc;
    /// # use pmem_core::{PageAllocator, Pool, PoolOptions};
    /// let pool = Arc::new(Pool::anonymous(&PoolOptions::new("x", 1 << 16)).unwrap());
    /// // SAFETY: only this allocator uses the heap.
    /// let alloc = unsafe { PageAllocator::format_heap(Arc::clone(&pool)) }.unwrap();
    /// let heap = pool.heap().start;
    /// let stats = PageAllocator::inspect(&pool, heap); // `&Pool` is not `&mut Pool`
    /// # drop(alloc);
    /// ```
    pub fn inspect(pool: &mut Pool, region_start: u64) -> Result<PageAllocStats, AllocError> {
        let pool: &Pool = pool;
        let (meta, bitmap) = read_meta(pool, region_start)?;
        let intent = pool.read(PPtr::<Intent>::from_offset(region_start + INTENT_OFF))?;
        Ok(PageAllocStats {
            page_size: meta.page_size,
            pages_total: meta.page_count,
            pages_used: pages_used(&bitmap),
            intent_pending: !intent.is_none(),
        })
    }

    /// The allocated blocks, `(pool offset, bytes)` in address order, read without
    /// changing anything, as [`PageAllocator::inspect`] reads its usage: for tools
    /// that account for every block (which structure reaches it, whether two
    /// overlap).
    pub fn inspect_blocks(
        pool: &mut Pool,
        region_start: u64,
    ) -> Result<Vec<(u64, u64)>, AllocError> {
        let pool: &Pool = pool;
        let (meta, bitmap) = read_meta(pool, region_start)?;
        let mut blocks = Vec::new();
        let mut p = 0;
        while p < meta.page_count {
            if !is_block_start(&bitmap, p) {
                p += 1;
                continue;
            }
            let mut n = 1;
            while p + n < meta.page_count
                && is_alloc(&bitmap, p + n)
                && !is_block_start(&bitmap, p + n)
            {
                n += 1;
            }
            blocks.push((meta.first_page + p * meta.page_size, n * meta.page_size));
            p += n;
        }
        Ok(blocks)
    }

    /// Current usage.
    pub fn stats(&self) -> PageAllocStats {
        let s = self.lock();
        PageAllocStats {
            page_size: self.meta.page_size,
            pages_total: self.meta.page_count,
            pages_used: s.used,
            intent_pending: false,
        }
    }

    /// Whether every page of the block `[ptr, ptr + size)` is allocated (false for
    /// anything that is not a page-aligned run of this allocator's pages).
    pub fn is_allocated(&self, ptr: PPtr<u8>, size: u64) -> bool {
        let Ok(n) = self.pages_for(size) else {
            return false;
        };
        let Some(rel) = ptr.offset().checked_sub(self.meta.first_page) else {
            return false;
        };
        if rel % self.meta.page_size != 0 {
            return false;
        }
        let first = rel / self.meta.page_size;
        if first
            .checked_add(n)
            .is_none_or(|e| e > self.meta.page_count)
        {
            return false;
        }
        let s = self.lock();
        (first..first + n).all(|p| is_alloc(&s.bitmap, p))
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> u64 {
        self.meta.page_size
    }

    /// The pool range of the pages: every block lies inside it.
    pub fn pages(&self) -> Range<u64> {
        self.meta.first_page..self.meta.first_page + self.meta.page_count * self.meta.page_size
    }

    /// The metadata region (header, intent, bitmap): blocks never overlap it.
    fn meta_range(&self) -> Range<u64> {
        self.meta.region_off..self.meta.first_page
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update of State is completed before anything that can fail or panic
        // is called, so a poisoned lock still guards a consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pages_for(&self, size: u64) -> Result<u64, AllocError> {
        if size == 0 || size > self.meta.page_count * self.meta.page_size {
            return Err(AllocError::InvalidSize { size });
        }
        Ok(size.div_ceil(self.meta.page_size))
    }

    fn page_offset(&self, page: u64) -> u64 {
        self.meta.first_page + page * self.meta.page_size
    }

    /// Finds `n` consecutive free pages, next-fit from the cursor.
    fn find_run(&self, s: &State, n: u64) -> Option<u64> {
        let total = self.meta.page_count;
        let is_free = |p: u64| !is_alloc(&s.bitmap, p) && !is_held(&s.held, p);
        for start_at in [s.cursor, 0] {
            let mut run_start = start_at;
            let mut p = start_at;
            while p < total {
                if !is_free(p) {
                    run_start = p + 1;
                } else if p + 1 - run_start == n {
                    return Some(run_start);
                }
                p += 1;
            }
        }
        None
    }

    /// Marks pages `[first, first + n)` as one allocated block (`value`: allocated
    /// bits set, start bit on `first` only) or as free (both bits clear), in DRAM and
    /// on media, and flushes the changed words (the caller fences).
    fn set_bits(&self, s: &mut State, first: u64, n: u64, value: bool) -> Result<(), AllocError> {
        for p in first..first + n {
            let (w, b) = word_bit(p);
            s.bitmap[w] &= !(3 << b);
            if value {
                s.bitmap[w] |= if p == first { 3 << b } else { 1 << b };
            }
        }
        let (w0, w1) = (word_bit(first).0, word_bit(first + n - 1).0);
        let off = self.meta.region_off + BITMAP_OFF + w0 as u64 * 8;
        let words = &s.bitmap[w0..=w1];
        // SAFETY: the bitmap is the allocator's metadata, written only under its lock
        // (which `s` proves we hold); the format/open contract keeps others off it.
        unsafe { self.pool.write_bytes_shared(off, words.as_bytes())? };
        self.pool.flush(off, words.len() as u64 * 8)?;
        Ok(())
    }

    /// Finds a free run of `n` pages for a block of `size` bytes to be published in
    /// `slot` (which must not lie inside it): its first page and offset.
    fn pick_block(
        &self,
        s: &State,
        n: u64,
        size: u64,
        slot: PPtr<AtomicPPtr<u8>>,
    ) -> Result<(u64, u64), AllocError> {
        let first = self
            .find_run(s, n)
            .ok_or(AllocError::OutOfSpace { requested: size })?;
        let block = self.page_offset(first);
        if (block..block + n * self.meta.page_size).contains(&slot.offset()) {
            return Err(AllocError::InvalidSlot {
                offset: slot.offset(),
                reason: "inside the block being allocated",
            });
        }
        self.pool.check_range(block, size)?;
        Ok((first, block))
    }

    /// Runs `init` on the free block picked under the lock `_s` proves we hold, and
    /// persists it.
    fn fill_block(
        &self,
        _s: &State,
        block: u64,
        size: u64,
        init: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), AllocError> {
        // A raw write the crash simulator must look for.
        #[cfg(feature = "sim")]
        self.pool.sim_watch(block, size, true);
        // SAFETY: the pages are free (bitmap under the lock `_s` proves held), so by
        // the trait's contract no one else references them; the range is in bounds
        // (checked by `pick_block`).
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.pool.addr(block), size as usize) };
        init(bytes);
        self.pool.persist(block, size)?;
        Ok(())
    }

    fn write_intent(&self, intent: &Intent) -> Result<(), AllocError> {
        let off = self.meta.region_off + INTENT_OFF;
        // SAFETY: the intent line is allocator metadata, written only under its lock
        // (callers hold it) or during single-threaded open.
        unsafe { self.pool.write_bytes_shared(off, intent.as_bytes())? };
        self.pool.persist(off, 64)?;
        Ok(())
    }

    fn check_slot(&self, slot: u64) -> Result<(), AllocError> {
        super::check_publication_slot(&self.pool, slot, self.meta_range())
    }

    /// The first page of the block at `block` of `pages` pages, if it is a run of
    /// this allocator's pages.
    fn page_run(&self, block: u64, pages: u64) -> Option<u64> {
        block
            .checked_sub(self.meta.first_page)
            .filter(|d| d % self.meta.page_size == 0)
            .map(|d| d / self.meta.page_size)
            .filter(|&p| {
                pages > 0
                    && p.checked_add(pages)
                        .is_some_and(|e| e <= self.meta.page_count)
            })
    }

    /// The first page and page count of the live block `[ptr, ptr + size)`: `ptr`
    /// must start a block of exactly `pages_for(size)` pages.
    fn live_block(&self, s: &State, ptr: PPtr<u8>, size: u64) -> Result<(u64, u64), AllocError> {
        let n = self.pages_for(size)?;
        let invalid = |reason| AllocError::InvalidFree {
            offset: ptr.offset(),
            size,
            reason,
        };
        let rel = ptr
            .offset()
            .checked_sub(self.meta.first_page)
            .ok_or(invalid("not a page of this allocator"))?;
        if rel % self.meta.page_size != 0 {
            return Err(invalid("not page aligned"));
        }
        let first = rel / self.meta.page_size;
        if first
            .checked_add(n)
            .is_none_or(|e| e > self.meta.page_count)
        {
            return Err(invalid("beyond the last page"));
        }
        if !(first..first + n).all(|p| is_alloc(&s.bitmap, p)) {
            return Err(invalid("not allocated (double free?)"));
        }
        let end = first + n;
        if !is_block_start(&s.bitmap, first)
            || (first + 1..end).any(|p| is_start_bit(&s.bitmap, p))
            || (end < self.meta.page_count
                && is_alloc(&s.bitmap, end)
                && !is_start_bit(&s.bitmap, end))
        {
            return Err(invalid("not exactly one block of this size"));
        }
        Ok((first, n))
    }

    /// Applies or discards a pending intent (open time, single-threaded).
    fn recover(&self) -> Result<(), AllocError> {
        let off = self.meta.region_off + INTENT_OFF;
        let intent = self.pool.read(PPtr::<Intent>::from_offset(off))?;
        if intent.is_none() {
            return Ok(());
        }
        // Redoing or discarding the intent writes, and the slot's store goes
        // through a reference into the mapping: on a read-only pool it would fault
        // instead of failing (found by the `page_alloc_intents` fuzz target).
        if self.pool.is_read_only() {
            return Err(crate::PoolError::ReadOnly.into());
        }
        let kind = intent.intact();
        if matches!(
            kind,
            Some(IntentKind::PublishIf | IntentKind::FreeUnpublish)
        ) {
            let first =
                self.page_run(intent.block, intent.extent)
                    .ok_or_else(|| AllocError::Corrupt {
                        reason: "intent names a block outside the pages".into(),
                    })?;
            self.check_slot(intent.slot)?;
            // SAFETY: open is single-threaded and the caller's contract gave the
            // allocator the slot for the duration of the operation being redone.
            let slot = unsafe {
                self.pool
                    .get_shared(PPtr::<AtomicPPtr<u8>>::from_offset(intent.slot))?
            };
            let now = slot.load(Ordering::Acquire).offset();
            let mut s = self.lock();
            if kind == Some(IntentKind::PublishIf) {
                if now == intent.expected || now == intent.block {
                    tracing::info!(
                        block = intent.block,
                        slot = intent.slot,
                        "redoing interrupted alloc_publish_if"
                    );
                    self.set_bits(&mut s, first, intent.extent, true)?;
                    slot.store(PPtr::from_offset(intent.block), Ordering::Release);
                } else {
                    // The slot holds neither: the publication never happened (only
                    // possible if the caller broke the contract); undo the allocation.
                    tracing::warn!(
                        block = intent.block,
                        slot = intent.slot,
                        "rolling back alloc_publish_if whose slot changed"
                    );
                    self.set_bits(&mut s, first, intent.extent, false)?;
                }
            } else {
                tracing::info!(
                    block = intent.block,
                    slot = intent.slot,
                    "redoing interrupted free_unpublish"
                );
                if now == intent.block {
                    slot.store(PPtr::null(), Ordering::Release);
                }
                self.set_bits(&mut s, first, intent.extent, false)?;
            }
            crate::counters::add_bytes_written(8);
            self.pool.flush(intent.slot, 8)?;
            self.pool.drain()?;
            s.used = pages_used(&s.bitmap);
        } else if kind == Some(IntentKind::AllocPublish) {
            let pages = intent.extent;
            let first = intent
                .block
                .checked_sub(self.meta.first_page)
                .filter(|d| d % self.meta.page_size == 0)
                .map(|d| d / self.meta.page_size)
                .filter(|&p| {
                    pages > 0
                        && p.checked_add(pages)
                            .is_some_and(|e| e <= self.meta.page_count)
                })
                .ok_or_else(|| AllocError::Corrupt {
                    reason: "intent names a block outside the pages".into(),
                })?;
            self.check_slot(intent.slot)?;
            tracing::info!(
                block = intent.block,
                slot = intent.slot,
                "redoing interrupted alloc_publish"
            );
            let mut s = self.lock();
            self.set_bits(&mut s, first, pages, true)?;
            s.used = pages_used(&s.bitmap);
            // SAFETY: open is single-threaded and the caller's contract gives the
            // allocator the slot for the duration of the publication being redone.
            let slot = unsafe {
                self.pool
                    .get_shared(PPtr::<AtomicPPtr<u8>>::from_offset(intent.slot))?
            };
            slot.store(PPtr::from_offset(intent.block), Ordering::Release);
            crate::counters::add_bytes_written(8);
            self.pool.flush(intent.slot, 8)?;
            self.pool.drain()?;
        } else {
            tracing::info!("discarding torn alloc_publish intent");
        }
        self.write_intent(&Intent::default())
    }
}

/// Reads and validates the header and bitmap at `region_start`.
fn read_meta(pool: &Pool, region_start: u64) -> Result<(MetaHeader, Vec<u64>), AllocError> {
    let corrupt = |reason: &str| AllocError::Corrupt {
        reason: reason.to_owned(),
    };
    if !region_start.is_multiple_of(64) {
        return Err(corrupt("region start is not 64-byte aligned"));
    }
    let meta = pool.read(PPtr::<MetaHeader>::from_offset(region_start))?;
    if meta.magic != META_MAGIC {
        let v = meta.magic[7];
        if meta.magic[..7] == MAGIC_PREFIX[..] && v.is_ascii_digit() {
            return Err(AllocError::UnsupportedVersion {
                offset: region_start,
                found: u32::from(v - b'0'),
                supported: u32::from(FORMAT_VERSION),
            });
        }
        return Err(AllocError::NotFormatted {
            offset: region_start,
        });
    }
    if !meta.valid() {
        return Err(corrupt("header checksum mismatch"));
    }
    if !valid_page_size(meta.page_size) {
        return Err(corrupt(
            "page size is not a power of two from 64 B to 2 MiB",
        ));
    }
    let region = meta.region_off..meta.region_off.saturating_add(meta.region_len);
    if meta.region_off != region_start || region.end > pool.len() {
        return Err(corrupt("region does not match the pool"));
    }
    if geometry(&region, meta.page_size) != Some((meta.page_count, meta.first_page)) {
        return Err(corrupt("geometry does not match the region"));
    }
    let words = meta.page_count.div_ceil(PAGES_PER_WORD);
    let raw = pool.bytes(region_start + BITMAP_OFF, words * 8)?;
    let bitmap: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    let tail_bits = 2 * (meta.page_count % PAGES_PER_WORD);
    if tail_bits != 0 && bitmap.last().is_some_and(|w| w >> tail_bits != 0) {
        return Err(corrupt("bitmap marks pages beyond the end"));
    }
    Ok((meta, bitmap))
}

// SAFETY: blocks are page runs inside `first_page .. region end` (geometry checked at
// format and open), page aligned, disjoint from the metadata before `first_page`; the
// bitmap (DRAM and media, updated under one lock) never hands out a set bit.
unsafe impl PersistentAllocator for PageAllocator {
    fn metadata_range(&self) -> Option<Range<u64>> {
        Some(self.meta_range())
    }

    fn name(&self) -> &'static str {
        "page"
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn alignment(&self) -> u64 {
        self.meta.page_size
    }

    fn alloc(&self, size: u64) -> Result<PPtr<u8>, AllocError> {
        let n = self.pages_for(size)?;
        let mut s = self.lock();
        let first = self
            .find_run(&s, n)
            .ok_or(AllocError::OutOfSpace { requested: size })?;
        self.set_bits(&mut s, first, n, true)?;
        self.pool.drain()?;
        s.used += n;
        s.cursor = first + n;
        Ok(PPtr::from_offset(self.page_offset(first)))
    }

    unsafe fn free(&self, ptr: PPtr<u8>, size: u64) -> Result<(), AllocError> {
        let mut s = self.lock();
        let (first, n) = self.live_block(&s, ptr, size)?;
        self.set_bits(&mut s, first, n, false)?;
        self.pool.drain()?;
        s.used -= n;
        Ok(())
    }

    unsafe fn alloc_publish(
        &self,
        size: u64,
        slot: PPtr<AtomicPPtr<u8>>,
        init: &mut dyn FnMut(&mut [u8]),
    ) -> Result<PPtr<u8>, AllocError> {
        let n = self.pages_for(size)?;
        self.check_slot(slot.offset())?;
        let mut s = self.lock();
        let (first, block) = self.pick_block(&s, n, size, slot)?;
        if self.pool.is_read_only() {
            return Err(crate::PoolError::ReadOnly.into());
        }
        self.fill_block(&s, block, size, init)?;
        // 1. Intent durable: from here on recovery finishes the publication.
        self.write_intent(&Intent::new(
            IntentKind::AllocPublish,
            slot.offset(),
            block,
            n,
            0,
        ))?;
        // 2. Bitmap and slot, one fence for both.
        self.set_bits(&mut s, first, n, true)?;
        s.used += n;
        s.cursor = first + n;
        // SAFETY: the caller keeps all other access to the slot atomic.
        let slot_ref = unsafe { self.pool.get_shared(slot)? };
        slot_ref.store(PPtr::from_offset(block), Ordering::Release);
        crate::counters::add_bytes_written(8);
        self.pool.flush(slot.offset(), 8)?;
        self.pool.drain()?;
        // 3. Done: clear the intent.
        self.write_intent(&Intent::default())?;
        Ok(PPtr::from_offset(block))
    }

    fn for_each_live_block(&self, f: &mut dyn FnMut(PPtr<u8>, u64)) -> Result<(), AllocError> {
        // A snapshot, so `f` runs without the lock (and may call the allocator).
        let snapshot = blocks(&self.lock().bitmap, self.meta.page_count);
        for (first, pages) in snapshot {
            f(
                PPtr::from_offset(self.page_offset(first)),
                pages * self.meta.page_size,
            );
        }
        Ok(())
    }

    fn usable_size(&self, ptr: PPtr<u8>, size: u64) -> u64 {
        let _ = ptr;
        self.pages_for(size)
            .map_or(size, |n| n * self.meta.page_size)
    }

    unsafe fn alloc_publish_if(
        &self,
        size: u64,
        slot: PPtr<AtomicPPtr<u8>>,
        expected: PPtr<u8>,
        init: &mut dyn FnMut(&mut [u8]),
    ) -> Result<PPtr<u8>, AllocError> {
        let n = self.pages_for(size)?;
        self.check_slot(slot.offset())?;
        if self.pool.is_read_only() {
            return Err(crate::PoolError::ReadOnly.into());
        }
        // SAFETY: the caller keeps all other access to the slot atomic.
        let slot_ref = unsafe { self.pool.get_shared(slot)? };
        let mismatch = |found: PPtr<u8>| AllocError::SlotMismatch {
            slot: slot.offset(),
            expected: expected.offset(),
            found: found.offset(),
        };
        let mut s = self.lock();
        let found = slot_ref.load(Ordering::Acquire);
        if found != expected {
            return Err(mismatch(found));
        }
        let (first, block) = self.pick_block(&s, n, size, slot)?;
        self.fill_block(&s, block, size, init)?;
        // 1. Intent durable, recording the expected value.
        self.write_intent(&Intent::new(
            IntentKind::PublishIf,
            slot.offset(),
            block,
            n,
            expected.offset(),
        ))?;
        // 2. Bitmap and slot, one fence for both.
        self.set_bits(&mut s, first, n, true)?;
        let publish = slot_ref.compare_exchange(
            expected,
            PPtr::from_offset(block),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if let Err(found) = publish {
            // Only if the caller broke the contract: undo the allocation.
            self.set_bits(&mut s, first, n, false)?;
            self.pool.drain()?;
            self.write_intent(&Intent::default())?;
            return Err(mismatch(found));
        }
        s.used += n;
        s.cursor = first + n;
        crate::counters::add_bytes_written(8);
        self.pool.flush(slot.offset(), 8)?;
        self.pool.drain()?;
        // 3. Done: retire the intent before anyone can update the slot again.
        self.write_intent(&Intent::default())?;
        Ok(PPtr::from_offset(block))
    }

    unsafe fn free_unpublish(
        &self,
        slot: PPtr<AtomicPPtr<u8>>,
        block: PPtr<u8>,
        size: u64,
    ) -> Result<(), AllocError> {
        self.check_slot(slot.offset())?;
        if self.pool.is_read_only() {
            return Err(crate::PoolError::ReadOnly.into());
        }
        // SAFETY: the caller keeps all other access to the slot atomic.
        let slot_ref = unsafe { self.pool.get_shared(slot)? };
        let mut s = self.lock();
        let (first, n) = self.live_block(&s, block, size)?;
        let found = slot_ref.load(Ordering::Acquire);
        if found != block {
            return Err(AllocError::SlotMismatch {
                slot: slot.offset(),
                expected: block.offset(),
                found: found.offset(),
            });
        }
        // 1. Intent durable: from here on recovery finishes the unpublication.
        self.write_intent(&Intent::new(
            IntentKind::FreeUnpublish,
            slot.offset(),
            block.offset(),
            n,
            0,
        ))?;
        // 2. Slot and bitmap, one fence for both.
        slot_ref.store(PPtr::null(), Ordering::Release);
        crate::counters::add_bytes_written(8);
        self.pool.flush(slot.offset(), 8)?;
        self.set_bits(&mut s, first, n, false)?;
        self.pool.drain()?;
        s.used -= n;
        // 3. Done: clear the intent.
        self.write_intent(&Intent::default())?;
        Ok(())
    }

    fn tx_reserve(&self, size: u64) -> Result<PPtr<u8>, AllocError> {
        let n = self.pages_for(size)?;
        if self.pool.is_read_only() {
            return Err(crate::PoolError::ReadOnly.into());
        }
        let mut s = self.lock();
        let first = self
            .find_run(&s, n)
            .ok_or(AllocError::OutOfSpace { requested: size })?;
        let block = self.page_offset(first);
        self.pool.check_range(block, size)?;
        set_held(&mut s.held, first, n, true);
        s.cursor = first + n;
        Ok(PPtr::from_offset(block))
    }

    fn tx_check_live(&self, block: PPtr<u8>, size: u64) -> Result<(), AllocError> {
        let s = self.lock();
        self.live_block(&s, block, size).map(|_| ())
    }

    unsafe fn tx_mark(
        &self,
        block: PPtr<u8>,
        size: u64,
        allocated: bool,
    ) -> Result<(), AllocError> {
        let n = self.pages_for(size)?;
        let first = self
            .page_run(block.offset(), n)
            .ok_or(AllocError::InvalidFree {
                offset: block.offset(),
                size,
                reason: "not a run of this allocator's pages",
            })?;
        let mut s = self.lock();
        let before = (first..first + n)
            .filter(|&p| is_alloc(&s.bitmap, p))
            .count() as u64;
        // Flushed, not fenced: the caller's fence makes the mark durable, after the
        // records it undoes it from (the caller's contract).
        self.set_bits(&mut s, first, n, allocated)?;
        s.used = s.used - before + if allocated { n } else { 0 };
        set_held(&mut s.held, first, n, true);
        Ok(())
    }

    fn tx_release(&self, block: PPtr<u8>, size: u64) {
        let Ok(n) = self.pages_for(size) else {
            return;
        };
        if let Some(first) = self.page_run(block.offset(), n) {
            set_held(&mut self.lock().held, first, n, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolOptions;

    const SLOT: u64 = 4096; // the root object of the test pool
    const OLD_SLOT_VALUE: u64 = 0xdead_beef_0000;

    /// A formatted allocator on an anonymous pool whose root is the publication slot,
    /// and the state a crash inside `alloc_publish` would leave, built by hand
    /// following the protocol's order: `bits_set` and `slot_set` say how far step 2
    /// got; `torn` garbles the intent's checksum (a crash while writing it).
    fn crashed_state(torn: bool, bits_set: bool, slot_set: bool) -> (Arc<Pool>, u64, u64) {
        let pool =
            Arc::new(Pool::anonymous(&PoolOptions::new("t", 1 << 20).root::<u64>()).expect("anon"));
        let heap = pool.heap().start;
        // SAFETY: the test is the only user of the pool.
        let a = unsafe { PageAllocator::format(Arc::clone(&pool), heap..pool.len(), 4096) }
            .expect("format");
        let block = a.page_offset(3);
        let mut intent = Intent::new(IntentKind::AllocPublish, SLOT, block, 2, 0);
        if torn {
            // The checksum word: the record no longer verifies.
            intent.as_mut_bytes()[56] ^= 1;
        }
        let slot_value = if slot_set { block } else { OLD_SLOT_VALUE };
        // SAFETY: single-threaded test, no references into the pool are live.
        unsafe {
            pool.write_bytes_shared(SLOT, &slot_value.to_le_bytes())
                .expect("slot");
            pool.write_bytes_shared(heap + INTENT_OFF, intent.as_bytes())
                .expect("intent");
            if bits_set {
                pool.write_bytes_shared(
                    heap + BITMAP_OFF,
                    &((0b11u64 << 6) | (1 << 8)).to_le_bytes(),
                )
                .expect("bits");
            }
        }
        drop(a);
        (pool, heap, block)
    }

    /// `inspect` of an `Arc<Pool>` no allocator holds any more.
    fn inspect(pool: &mut Arc<Pool>, heap: u64) -> PageAllocStats {
        let pool = Arc::get_mut(pool).expect("no allocator holds the pool");
        PageAllocator::inspect(pool, heap).expect("inspect")
    }

    fn slot_value(pool: &Pool) -> u64 {
        pool.read(PPtr::<u64>::from_offset(SLOT)).expect("slot")
    }

    #[test]
    fn torn_intent_is_discarded_without_touching_bitmap_or_slot() {
        let (mut pool, heap, _) = crashed_state(true, false, false);
        // SAFETY: only the test uses the pool.
        let a = unsafe { PageAllocator::open(Arc::clone(&pool), heap) }.expect("open");
        assert_eq!(a.stats().pages_used, 0);
        assert_eq!(slot_value(&pool), OLD_SLOT_VALUE);
        drop(a);
        assert!(!inspect(&mut pool, heap).intent_pending);
    }

    #[test]
    fn intact_intent_is_redone_from_every_point_of_step_two() {
        for (bits, slot) in [(false, false), (true, false), (false, true), (true, true)] {
            let (mut pool, heap, block) = crashed_state(false, bits, slot);
            assert!(inspect(&mut pool, heap).intent_pending);
            for round in 0..2 {
                // Opening twice checks recovery is idempotent.
                // SAFETY: only the test uses the pool.
                let a = unsafe { PageAllocator::open(Arc::clone(&pool), heap) }.expect("open");
                assert_eq!(
                    a.stats().pages_used,
                    2,
                    "bits {bits} slot {slot} round {round}"
                );
                assert_eq!(slot_value(&pool), block);
                // The published pages are not handed out again.
                let p = a.alloc(4096).expect("alloc");
                assert!(p.offset() < block || p.offset() >= block + 2 * 4096);
                // SAFETY: never referenced.
                unsafe { a.free(p, 4096) }.expect("free");
                drop(a);
                assert!(!inspect(&mut pool, heap).intent_pending);
            }
        }
    }

    #[test]
    fn intent_naming_a_bad_block_is_corrupt_not_a_write() {
        let (pool, heap, _) = crashed_state(false, false, false);
        let bad = Intent::new(IntentKind::AllocPublish, SLOT, 12_345, 2, 0);
        // SAFETY: single-threaded test.
        unsafe { pool.write_bytes_shared(heap + INTENT_OFF, bad.as_bytes()) }.expect("intent");
        // SAFETY: only the test uses the pool.
        let r = unsafe { PageAllocator::open(Arc::clone(&pool), heap) };
        assert!(matches!(r, Err(AllocError::Corrupt { .. })));
        assert_eq!(slot_value(&pool), OLD_SLOT_VALUE);
    }

    /// A fresh allocator over the heap of an anonymous pool whose root is the slot.
    fn fresh() -> (Arc<Pool>, PageAllocator) {
        let pool =
            Arc::new(Pool::anonymous(&PoolOptions::new("t", 1 << 20).root::<u64>()).expect("anon"));
        // SAFETY: the test is the only user of the pool.
        let a = unsafe { PageAllocator::format_heap(Arc::clone(&pool)) }.expect("format");
        (pool, a)
    }

    fn live(a: &PageAllocator) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        a.for_each_live_block(&mut |p, size| v.push((p.offset(), size)))
            .expect("enumerate");
        v
    }

    #[test]
    fn adjacent_blocks_are_enumerated_with_their_sizes() {
        let (_pool, a) = fresh();
        let x = a.alloc(4096).expect("x");
        let y = a.alloc(3 * 4096 - 5).expect("y");
        let z = a.alloc(2 * 4096).expect("z");
        assert_eq!(
            y.offset(),
            x.offset() + 4096,
            "next-fit places them adjacent"
        );
        assert_eq!(z.offset(), y.offset() + 3 * 4096);
        assert_eq!(
            live(&a),
            vec![
                (x.offset(), 4096),
                (y.offset(), 3 * 4096),
                (z.offset(), 2 * 4096)
            ]
        );
        assert_eq!(a.usable_size(y, 3 * 4096 - 5), 3 * 4096);
        // free checks it is given exactly one block.
        // SAFETY: the calls fail before touching anything.
        unsafe {
            assert!(a.free(y, 4096).is_err(), "a prefix of a block");
            assert!(a.free(y, 4 * 4096).is_err(), "a block and a half");
            assert!(a.free(PPtr::from_offset(y.offset() + 4096), 4096).is_err());
        }
        // SAFETY: never referenced.
        unsafe { a.free(y, 3 * 4096 - 5) }.expect("free y");
        assert_eq!(live(&a), vec![(x.offset(), 4096), (z.offset(), 2 * 4096)]);
    }

    #[test]
    fn publish_if_and_free_unpublish_check_the_slot() {
        let (pool, a) = fresh();
        let slot = PPtr::<AtomicPPtr<u8>>::from_offset(SLOT);
        // SAFETY: the slot is accessed only through the allocator and atomically.
        let b = unsafe { a.alloc_publish_if(100, slot, PPtr::null(), &mut |m| m.fill(7)) }
            .expect("publish into an empty slot");
        assert_eq!(slot_value(&pool), b.offset());
        // SAFETY: as above.
        let again = unsafe { a.alloc_publish_if(100, slot, PPtr::null(), &mut |_| {}) };
        assert!(
            matches!(again, Err(AllocError::SlotMismatch { found, .. }) if found == b.offset())
        );
        assert_eq!(a.stats().pages_used, 1, "a mismatch allocates nothing");
        let other = a.alloc(4096).expect("other");
        // SAFETY: the call fails before touching anything.
        let wrong = unsafe { a.free_unpublish(slot, other, 4096) };
        assert!(matches!(wrong, Err(AllocError::SlotMismatch { .. })));
        // SAFETY: nothing references the block.
        unsafe { a.free_unpublish(slot, b, 100) }.expect("free_unpublish");
        assert_eq!(slot_value(&pool), 0);
        assert_eq!(live(&a), vec![(other.offset(), 4096)]);
    }

    /// The redo of an interrupted `alloc_publish_if` or `free_unpublish`, from every
    /// point of its step 2, finishes it; a second recovery changes nothing.
    #[test]
    fn new_intents_are_redone() {
        for (kind, bits, slot) in [
            (IntentKind::PublishIf, false, false),
            (IntentKind::PublishIf, true, false),
            (IntentKind::PublishIf, true, true),
            (IntentKind::FreeUnpublish, true, true),
            (IntentKind::FreeUnpublish, false, true),
            (IntentKind::FreeUnpublish, false, false),
        ] {
            let (mut pool, a) = fresh();
            let heap = pool.heap().start;
            let block = a.page_offset(3);
            let publish = kind == IntentKind::PublishIf;
            drop(a);
            let intent = Intent::new(kind, SLOT, block, 2, OLD_SLOT_VALUE);
            // For a publication "done" means bits set and slot = block; for an
            // unpublication it means bits clear and slot null.
            let bits_value = if bits == publish {
                (0b11u64 << 6) | (1 << 8)
            } else {
                0
            };
            let slot_value_now = match (publish, slot) {
                (true, true) => block,
                (true, false) => OLD_SLOT_VALUE,
                (false, true) => 0,
                (false, false) => block,
            };
            // SAFETY: single-threaded test, no references into the pool are live.
            unsafe {
                pool.write_bytes_shared(SLOT, &slot_value_now.to_le_bytes())
                    .expect("slot");
                pool.write_bytes_shared(heap + INTENT_OFF, intent.as_bytes())
                    .expect("intent");
                pool.write_bytes_shared(heap + BITMAP_OFF, &bits_value.to_le_bytes())
                    .expect("bits");
            }
            for round in 0..2 {
                // SAFETY: only the test uses the pool.
                let a = unsafe { PageAllocator::open(Arc::clone(&pool), heap) }.expect("open");
                let what = format!("kind {kind:?} bits {bits} slot {slot} round {round}");
                if publish {
                    assert_eq!(live(&a), vec![(block, 2 * 4096)], "{what}");
                    assert_eq!(slot_value(&pool), block, "{what}");
                } else {
                    assert_eq!(live(&a), vec![], "{what}");
                    assert_eq!(slot_value(&pool), 0, "{what}");
                }
                drop(a);
                assert!(!inspect(&mut pool, heap).intent_pending);
            }
        }
    }

    #[test]
    fn version_one_allocators_are_refused() {
        let (pool, a) = fresh();
        let heap = pool.heap().start;
        drop(a);
        let mut meta = pool
            .read(PPtr::<MetaHeader>::from_offset(heap))
            .expect("meta");
        meta.magic = *b"PMKPAGE1";
        let meta = meta.sealed();
        // SAFETY: no allocator lives; single-threaded.
        unsafe { pool.write_bytes_shared(heap, meta.as_bytes()) }.expect("write");
        // SAFETY: only the test uses the pool.
        let r = unsafe { PageAllocator::open(Arc::clone(&pool), heap) };
        assert!(matches!(
            r,
            Err(AllocError::UnsupportedVersion {
                found: 1,
                supported: 2,
                ..
            })
        ));
    }

    #[test]
    fn transactional_operations_hold_mark_and_release() {
        let (pool, a) = fresh();
        let size = 3 * a.page_size();
        let held = a.tx_reserve(size).expect("reserve");
        // Held, not allocated: neither live nor handed out again.
        assert!(!a.is_allocated(held, size));
        assert!(a.tx_check_live(held, size).is_err());
        let other = a.alloc(size).expect("alloc");
        assert_ne!(other, held);
        // Marked: allocated in DRAM and on media (flushed, not fenced), still held.
        let fences = crate::Counters::current().fences;
        // SAFETY: the block is held by this test.
        unsafe { a.tx_mark(held, size, true) }.expect("mark");
        assert_eq!(
            crate::Counters::current().fences,
            fences,
            "no fence of its own"
        );
        assert!(a.tx_check_live(held, size).is_ok());
        let (_, bitmap) = read_meta(&pool, pool.heap().start).expect("meta");
        let first = (held.offset() - a.meta.first_page) / a.page_size();
        assert!(is_block_start(&bitmap, first) && is_alloc(&bitmap, first + 2));
        a.tx_release(held, size);
        // Marked free: gone from media, but held until released.
        // SAFETY: the block is the test's, live.
        unsafe { a.tx_mark(held, size, false) }.expect("unmark");
        assert!(!a.is_allocated(held, size));
        let used = a.stats().pages_used;
        let next = a.alloc(size).expect("alloc");
        assert_ne!(next, held, "space marked free stays held until released");
        a.tx_release(held, size);
        assert_eq!(a.stats().pages_used, used + 3);
        // Bad blocks are errors, not writes.
        // SAFETY: an invalid block; the call must refuse it.
        let bad = unsafe { a.tx_mark(PPtr::from_offset(held.offset() + 1), size, true) };
        assert!(matches!(bad, Err(AllocError::InvalidFree { .. })));
    }

    #[test]
    fn geometry_fits_region() {
        let (n, first) = geometry(&(4096..4096 + 64 * 4096), 4096).expect("fits");
        assert_eq!(first, 8192);
        assert_eq!(n, 63);
        assert!(first + n * 4096 <= 4096 + 64 * 4096);
        assert_eq!(geometry(&(4096..4096 + 100), 4096), None);
        // Small pages over a large region: the bitmap takes many pages, which once
        // made the fitting loop give up.
        let (n, first) = geometry(&(8192..4 << 20), 64).expect("fits");
        assert!(first >= 8192 + 128 + n.div_ceil(64) * 8);
        assert!(first + n * 64 <= 4 << 20 && first + (n + 1) * 64 > (4 << 20) - 1024);
        let (n, first) = geometry(&(4096..4096 + 1024 * 1024), 1024).expect("fits");
        assert!(first + n * 1024 <= 4096 + 1024 * 1024);
        assert_eq!(n, 1023);
    }
}
