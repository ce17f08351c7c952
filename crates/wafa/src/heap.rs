//! The allocator: [`Wafa`], its options, the Clockwise Best-Fit allocation, free, and
//! the crash-atomic `alloc_publish`.
//!
//! One lock guards the DRAM state ([`crate::lock::BiasedLock`]: the first thread to
//! take it enters without a locked instruction; other threads and the reform daemon
//! take a spin lock that yields between attempts and revoke that bias). The fast
//! path of `alloc` under it is a bucket lookup (one bit scan of the bucket occupancy
//! mask), a few bit operations ([`crate::segment::max_segment_at`]), the bucket move
//! and two 8-byte stores into the page's metadata unit through a cached pointer;
//! the flush of that line and the fence follow after the lock is released. The fast
//! path of a small `free` is a bitmap update and two counters. Critical sections
//! are short and bounded; the longest is a reform pass.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use pmem_core::{AllocError, AtomicPPtr, PPtr, PersistentAllocator, Pool, PoolError};

use crate::layout::{Intent, IntentKind, Kind, INTENT_OFF, META_OFF, PAGE, UNIT};
use crate::reform::Daemon;
use crate::segment::DATA_UNITS;
use crate::state::{unit_mask, Page, State, Taken};

/// Pages populated at a time ahead of the fresh pages being divided.
const PREFAULT_PAGES: u32 = 64;

/// Largest request served from a divided page: 63 units of 64 B.
pub const MAX_SMALL: u64 = DATA_UNITS as u64 * UNIT;

/// When reform runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReformMode {
    /// A background thread reforms once `frees` frees accumulated (or 20 ms after
    /// its last pass if any free came): allocation is never stopped for longer than
    /// one pass. The `frees`-th free wakes it (a system call on the freeing thread,
    /// once per pass).
    Daemon {
        /// Frees that trigger a pass.
        frees: u64,
    },
    /// Reform synchronously inside `free` every `frees` frees: deterministic, for
    /// replays and tests.
    Inline {
        /// Frees between passes.
        frees: u64,
    },
    /// Only when [`Wafa::reform`] is called (and, as a last resort, when a request
    /// finds no space).
    Manual,
}

/// Options of a WAFA heap.
#[derive(Clone, Copy, Debug)]
pub struct WafaOptions {
    pub(crate) reform: ReformMode,
}

impl Default for WafaOptions {
    fn default() -> Self {
        WafaOptions {
            reform: ReformMode::Daemon { frees: 4096 },
        }
    }
}

impl WafaOptions {
    /// When reform runs (default: a daemon that reforms after every 4096 frees, or
    /// 20 ms after its last pass when any free happened).
    pub fn reform(mut self, mode: ReformMode) -> Self {
        self.reform = mode;
        self
    }
}

/// Page geometry of a formatted heap.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub region_off: u64,
    pub pages: u32,
    pub first_page: u64,
    pub kinds_off: u64,
}

impl Geometry {
    pub fn page_off(&self, p: u32) -> u64 {
        self.first_page + u64::from(p) * PAGE
    }
}

/// The lock around the DRAM state (see the module documentation).
pub(crate) type StateLock = crate::lock::BiasedLock<State>;

/// The address of the first page in the pool's mapping, for the metadata stores of
/// the fast path.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PagesBase(std::ptr::NonNull<u8>);

// SAFETY: a plain address into the pool's mapping, which the `Arc<Pool>` next to it
// in `Inner` keeps alive; every store through it is made under the state lock to the
// metadata unit of a divided page, which belongs to the allocator.
unsafe impl Send for PagesBase {}
// SAFETY: as above; sharing the address itself is harmless.
unsafe impl Sync for PagesBase {}

impl PagesBase {
    /// The first page of `geo` in `pool`'s mapping.
    pub fn new(pool: &Pool, geo: &Geometry) -> Option<PagesBase> {
        let end = geo
            .first_page
            .checked_add(u64::from(geo.pages).checked_mul(PAGE)?)?;
        if end > pool.len() {
            return None;
        }
        // `first_page < end <= len`: inside the mapping.
        std::ptr::NonNull::new(pool.base_ptr().wrapping_add(geo.first_page as usize)).map(PagesBase)
    }
}

/// Frees between reform passes in `mode` (`u64::MAX`: never on a count).
fn reform_every(mode: ReformMode) -> u64 {
    match mode {
        ReformMode::Daemon { frees } | ReformMode::Inline { frees } => frees.max(1),
        ReformMode::Manual => u64::MAX,
    }
}

pub(crate) struct Inner {
    pub pool: Arc<Pool>,
    pub geo: Geometry,
    pub opts: WafaOptions,
    /// The pages' base address when the pool is writable (the fast path's direct
    /// metadata stores), else `None`: every write then goes through the pool's
    /// checked API, which reports the read-only pool.
    pub pages_base: Option<PagesBase>,
    /// Frees that trigger a reform (see [`ReformMode`]).
    pub reform_every: u64,
    /// Populate fresh pages in batches (see [`Inner::prefault`]).
    pub prefault: bool,
    /// The pool's flushes and fences do something (not `Volatile` mode, where they
    /// are no-ops: the fast path skips the calls).
    pub persists: bool,
    pub state: StateLock,
    /// The reform daemon's thread, unparked when enough frees accumulated.
    pub daemon_thread: OnceLock<std::thread::Thread>,
    pub stop: AtomicBool,
    /// Frees since the last reform, mirrored from the state for the daemon to read
    /// without the lock (stored under the lock).
    pub frees: AtomicU64,
}

/// The WAFA allocator. Safe to share between threads (`Send + Sync`).
pub struct Wafa {
    pub(crate) inner: Arc<Inner>,
    pub(crate) daemon: Option<Daemon>,
}

/// Where a request was placed (DRAM already updated, media not yet).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Placement {
    Small {
        page: u32,
        first: u32,
        new_page: bool,
    },
    Run {
        head: u32,
        pages: u32,
    },
}

impl Placement {
    fn block(&self, geo: &Geometry) -> u64 {
        match *self {
            Placement::Small { page, first, .. } => geo.page_off(page) + u64::from(first) * UNIT,
            Placement::Run { head, .. } => geo.page_off(head),
        }
    }
}

impl Inner {
    /// The shared state of a heap on `pool` (the caller starts the daemon).
    pub fn new(pool: Arc<Pool>, geo: Geometry, opts: WafaOptions, state: State) -> Inner {
        let pool_mode = pool.mode();
        let persists = pool_mode != pmem_core::DurabilityMode::Volatile;
        let pages_base = if pool.is_read_only() {
            None
        } else {
            PagesBase::new(&pool, &geo)
        };
        Inner {
            pool,
            geo,
            opts,
            pages_base,
            reform_every: reform_every(opts.reform),
            persists,
            prefault: pages_base.is_some() && pool_mode != pmem_core::DurabilityMode::Msync,
            state: StateLock::new(state),
            daemon_thread: OnceLock::new(),
            stop: AtomicBool::new(false),
            frees: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn lock(&self) -> crate::lock::Guard<'_, State> {
        self.state.lock()
    }

    /// Chooses and reserves space for `size` bytes in DRAM (Algorithm 1 for small
    /// requests; a free page run for large ones).
    pub fn place(&self, s: &mut State, size: u64) -> Result<Placement, AllocError> {
        if size == 0 {
            return Err(AllocError::InvalidSize { size });
        }
        if size > MAX_SMALL {
            let pages = size.div_ceil(PAGE);
            if pages > u64::from(self.geo.pages) {
                return Err(AllocError::InvalidSize { size });
            }
            let pages = pages as u32;
            let head = match s.find_free_run(pages) {
                Some(h) => h,
                None => {
                    self.release_empty_pages(s)?;
                    s.find_free_run(pages)
                        .ok_or(AllocError::OutOfSpace { requested: size })?
                }
            };
            for p in head..head + pages {
                s.set_free(p, false);
                s.pages[p as usize] = if p == head {
                    Page::RunHead { pages }
                } else {
                    Page::RunTail
                };
            }
            s.cursor = head + pages;
            return Ok(Placement::Run { head, pages });
        }
        let units = size.div_ceil(UNIT) as u32;
        if let Some(t) = s.take_units(units) {
            return Ok(Placement::Small {
                page: t.page,
                first: t.first,
                new_page: false,
            });
        }
        let new_page = match s.find_free_run(1) {
            Some(p) => {
                s.divide(p);
                s.cursor = p + 1;
                self.prefault(s, p);
                true
            }
            None => {
                // Last resort: restart every page at its largest free segment
                // (segments freed behind the clocks become reachable).
                self.reform_restart(s)?;
                false
            }
        };
        let t = s
            .take_units(units)
            .ok_or(AllocError::OutOfSpace { requested: size })?;
        Ok(Placement::Small {
            page: t.page,
            first: t.first,
            new_page,
        })
    }

    /// Fresh pages are taken in order (next fit), and each one's first metadata
    /// store page-faults: a trap and a zeroed page, about 2 µs on the benchmark VM,
    /// once per 63 single-unit allocations. When page `p` is divided beyond the
    /// pages populated so far, populate the next [`PREFAULT_PAGES`] with one
    /// `madvise(MADV_POPULATE_WRITE)` (Linux 5.14+; best effort): the same zeroing,
    /// one trap. Not for `Msync` pools, where it would dirty file pages.
    fn prefault(&self, s: &mut State, p: u32) {
        if !self.prefault || p < s.prefaulted_to {
            return;
        }
        let end = p.saturating_add(PREFAULT_PAGES).min(self.geo.pages);
        s.prefaulted_to = end;
        #[cfg(target_os = "linux")]
        if let Some(base) = self.pages_base {
            let len = (u64::from(end - p) * PAGE) as usize;
            // SAFETY: `[p, end)` are pages of the heap, inside the mapping
            // (`PagesBase::new` checked their extent) and page aligned (the heap's
            // pages are page aligned in a page-aligned mapping). Populating for
            // writing changes no byte, so no reference into them is affected.
            let rc = unsafe {
                libc::madvise(
                    base.0.as_ptr().add(p as usize * PAGE as usize).cast(),
                    len,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            if rc != 0 {
                // Not supported here (old kernel, or memory that is not a mapping):
                // the pages fault one by one as before.
                s.prefaulted_to = u32::MAX;
            }
        }
    }

    /// Makes a placement durable: the page's metadata line (and, for a new page,
    /// its kind), or the kind bytes of a run (tails, then head).
    pub fn commit(&self, s: &mut State, at: &Placement) -> Result<(), PoolError> {
        match *at {
            Placement::Small { page, new_page, .. } => {
                self.write_meta(s, page)?;
                self.pool.drain()?;
                if new_page {
                    self.write_kinds(page, &[Kind::Divided as u8])?;
                    self.pool.drain()?;
                }
            }
            Placement::Run { head, pages } => {
                // One fence: a crash may persist any subset of these bytes, which
                // recovery reads as a shorter run (pages of this in-flight
                // allocation leak, as an in-flight small allocation's units can) or
                // as orphan tails (freed). A completed run is whole.
                if pages > 1 {
                    self.write_kinds(head + 1, &vec![Kind::RunTail as u8; pages as usize - 1])?;
                }
                self.write_kinds(head, &[Kind::RunHead as u8])?;
                self.pool.drain()?;
            }
        }
        Ok(())
    }

    /// Writes and flushes (no fence) a divided page's metadata from the cache (which
    /// makes the page's cached frees durable at the next fence).
    pub fn write_meta(&self, s: &mut State, page: u32) -> Result<(), PoolError> {
        s.dirty[page as usize] = false;
        let Page::Divided {
            bitmap,
            c_fu,
            s_ms,
            pos,
        } = s.pages[page as usize]
        else {
            return Ok(());
        };
        let off = self.geo.page_off(page) + META_OFF;
        let info = crate::layout::pack_info(u32::from(c_fu), u32::from(s_ms), u32::from(pos));
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&bitmap.to_le_bytes());
        bytes[8..].copy_from_slice(&info.to_le_bytes());
        // SAFETY: the metadata unit belongs to the allocator (the format/open
        // contract) and is written only under its lock, which `s` proves is held.
        unsafe { self.pool.write_bytes_shared(off, &bytes)? };
        self.pool.flush(off, 16)
    }

    /// Writes and flushes (no fence) kind bytes starting at page `first`.
    pub fn write_kinds(&self, first: u32, kinds: &[u8]) -> Result<(), PoolError> {
        let off = self.geo.kinds_off + u64::from(first);
        // SAFETY: the kind table belongs to the allocator and is written only under
        // its lock (or during single-threaded open).
        unsafe { self.pool.write_bytes_shared(off, kinds)? };
        self.pool.flush(off, kinds.len() as u64)
    }

    /// Turns fully free divided pages back into free pages (for whole-page runs).
    fn release_empty_pages(&self, s: &mut State) -> Result<(), PoolError> {
        let mut released = false;
        for p in 0..self.geo.pages {
            if let Page::Divided { c_fu, .. } = s.pages[p as usize] {
                if u32::from(c_fu) == DATA_UNITS {
                    s.buckets.remove(p);
                    s.pages[p as usize] = Page::Free;
                    s.set_free(p, true);
                    self.write_kinds(p, &[Kind::Free as u8])?;
                    released = true;
                }
            }
        }
        if released {
            self.pool.drain()?;
        }
        Ok(())
    }

    /// Frees a block; small frees only update the metadata cache (made durable by
    /// the page's next allocation or reform), runs are freed durably.
    #[inline]
    pub fn free(&self, ptr: PPtr<u8>, size: u64) -> Result<(), AllocError> {
        let invalid = |reason| AllocError::InvalidFree {
            offset: ptr.offset(),
            size,
            reason,
        };
        if size == 0 {
            return Err(invalid("zero size"));
        }
        let rel = ptr
            .offset()
            .checked_sub(self.geo.first_page)
            .ok_or(invalid("not in the WAFA heap"))?;
        let page = rel / PAGE;
        if page >= u64::from(self.geo.pages) {
            return Err(invalid("not in the WAFA heap"));
        }
        let page = page as u32;
        let in_page = rel % PAGE;
        if size <= MAX_SMALL {
            if !in_page.is_multiple_of(UNIT) {
                return Err(invalid("not unit aligned"));
            }
            let first = (in_page / UNIT) as u32;
            let units = size.div_ceil(UNIT) as u32;
            if first + units > DATA_UNITS {
                return Err(invalid("runs past the page's data units"));
            }
            let mut s = self.lock();
            let frees = s
                .release_units(page, unit_mask(first, units), units)
                .map_err(invalid)?;
            self.frees.store(frees, Ordering::Relaxed);
            if frees >= self.reform_every && self.reform_due(&mut s)? {
                drop(s);
                self.wake_daemon();
            }
            return Ok(());
        }
        let mut s = self.lock();
        let pages = size.div_ceil(PAGE) as u32;
        if in_page != 0 || s.pages[page as usize] != (Page::RunHead { pages }) {
            return Err(invalid("not a whole-page block of this size"));
        }
        // One fence: a crash leaves orphan tails (freed by recovery) or a shorter
        // run of this block (its pages stay allocated: the in-flight free is lost).
        self.write_kinds(page, &[Kind::Free as u8])?;
        if pages > 1 {
            self.write_kinds(page + 1, &vec![Kind::Free as u8; pages as usize - 1])?;
        }
        self.pool.drain()?;
        for p in page..page + pages {
            s.pages[p as usize] = Page::Free;
            s.set_free(p, true);
        }
        Ok(())
    }

    /// Allocates `size` bytes (see [`Wafa::alloc`]). The fast path — a small request
    /// that an existing divided page fits — updates the cache under the lock, stores
    /// the page's two metadata words directly, and flushes and fences them after
    /// releasing the lock; everything else goes through [`Inner::place`] and
    /// [`Inner::commit`].
    #[inline]
    pub fn alloc(&self, size: u64) -> Result<PPtr<u8>, AllocError> {
        if let (true, Some(base)) = (size.wrapping_sub(1) < MAX_SMALL, self.pages_base) {
            let units = size.div_ceil(UNIT) as u32;
            let mut s = self.lock();
            if let Some(t) = s.take_units(units) {
                let meta = self.store_meta(base, &t);
                drop(s);
                // Another thread may store this line again before the flush; every
                // later version still holds this block's units (only its owner
                // frees them), so persisting any of them makes this one durable.
                if self.persists {
                    self.pool.flush(meta, 16)?;
                    self.pool.drain()?;
                }
                return Ok(PPtr::from_offset(
                    self.geo.page_off(t.page) + u64::from(t.first) * UNIT,
                ));
            }
            return self.alloc_slow(&mut s, size);
        }
        let mut s = self.lock();
        self.alloc_slow(&mut s, size)
    }

    #[cold]
    fn alloc_slow(&self, s: &mut State, size: u64) -> Result<PPtr<u8>, AllocError> {
        let at = self.place(s, size)?;
        self.commit(s, &at)?;
        Ok(PPtr::from_offset(at.block(&self.geo)))
    }

    /// Stores a page's metadata words (no flush): returns their pool offset.
    #[inline]
    fn store_meta(&self, base: PagesBase, t: &Taken) -> u64 {
        let in_pages = u64::from(t.page) * PAGE + META_OFF;
        // SAFETY: `t.page < geo.pages` (it came from a bucket), so the 16 bytes at
        // `in_pages` lie in the page's metadata unit, inside the mapping
        // (`PagesBase::new` checked the pages' extent) and 8-aligned (pages are
        // page aligned). The metadata unit is never handed out and is written only
        // under the state lock, which the caller holds (it produced `t`); nothing
        // holds a reference to it. The pool is writable (`pages_base` is `None`
        // otherwise).
        unsafe {
            let p = base.0.as_ptr().add(in_pages as usize).cast::<u64>();
            p.write(t.bitmap.to_le());
            p.add(1).write(t.info.to_le());
        }
        self.geo.first_page + in_pages
    }

    /// Enough frees accumulated: reform inline, or say that the daemon must be woken
    /// (once per pass; the caller does it after releasing the lock).
    #[cold]
    fn reform_due(&self, s: &mut State) -> Result<bool, PoolError> {
        match self.opts.reform {
            ReformMode::Inline { .. } => self.reform_all(s)?,
            ReformMode::Daemon { .. } if !s.daemon_woken => {
                s.daemon_woken = true;
                return Ok(true);
            }
            _ => {}
        }
        Ok(false)
    }

    /// Wakes the reform daemon. The calling thread first gives up its bias of the
    /// lock (if it has it), so the daemon takes the lock without a handshake: no
    /// barrier interrupt, no waiting for this thread's next operation.
    #[cold]
    fn wake_daemon(&self) {
        self.state.release_bias();
        if let Some(t) = self.daemon_thread.get() {
            t.unpark();
        }
    }

    /// Writes the intent record and persists it.
    pub fn write_intent(&self, intent: &Intent) -> Result<(), PoolError> {
        let off = self.geo.region_off + INTENT_OFF;
        // SAFETY: the intent line belongs to the allocator; written under its lock
        // or during single-threaded open.
        unsafe {
            self.pool
                .write_bytes_shared(off, zerocopy::IntoBytes::as_bytes(intent))?
        };
        self.pool.persist(off, 64)
    }

    /// Whether `slot` is not in free WAFA space (so no placement can cover it).
    pub fn slot_outside_free_space(&self, s: &State, slot: u64) -> bool {
        let Some(rel) = slot.checked_sub(self.geo.first_page) else {
            return true;
        };
        let page = rel / PAGE;
        if page >= u64::from(self.geo.pages) {
            return true;
        }
        match s.pages[page as usize] {
            Page::Free => false,
            Page::Divided { bitmap, .. } => bitmap & (1 << ((rel % PAGE) / UNIT)) != 0,
            Page::RunHead { .. } | Page::RunTail => true,
        }
    }

    /// Checks a publication slot: in the pool, 8-aligned, outside WAFA's metadata.
    pub fn check_slot(&self, slot: u64) -> Result<(), AllocError> {
        pmem_core::alloc::check_publication_slot(
            &self.pool,
            slot,
            self.geo.region_off..self.geo.first_page,
        )?;
        if slot >= self.geo.first_page {
            let rel = slot - self.geo.first_page;
            if rel / PAGE < u64::from(self.geo.pages) && rel % PAGE >= META_OFF {
                return Err(AllocError::InvalidSlot {
                    offset: slot,
                    reason: "inside a page's metadata unit",
                });
            }
        }
        Ok(())
    }
}

impl Wafa {
    /// The pool the heap lives in.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.inner.pool
    }

    /// Allocates `size` bytes: from a divided page by Clockwise Best-Fit when `size`
    /// fits 63 units (4032 B), else whole pages. Durable on return.
    #[inline]
    pub fn alloc(&self, size: u64) -> Result<PPtr<u8>, AllocError> {
        self.inner.alloc(size)
    }

    /// Frees a block of `size` bytes.
    ///
    /// # Safety
    /// No reference into the block may outlive this call.
    #[inline]
    pub unsafe fn free(&self, ptr: PPtr<u8>, size: u64) -> Result<(), AllocError> {
        self.inner.free(ptr, size)
    }

    /// Runs one reform pass now (what the daemon does in the background).
    pub fn reform(&self) -> Result<(), PoolError> {
        let mut s = self.inner.lock();
        self.inner.reform_all(&mut s)
    }

    /// Usage figures.
    pub fn stats(&self) -> WafaStats {
        let s = self.inner.lock();
        let mut st = WafaStats {
            pages: self.inner.geo.pages,
            free_pages: s.free_count,
            ..WafaStats::default()
        };
        for p in &s.pages {
            match *p {
                Page::Divided { c_fu, .. } => {
                    st.divided_pages += 1;
                    st.free_units += u64::from(c_fu);
                }
                Page::RunHead { pages } => st.run_pages += pages,
                _ => {}
            }
        }
        st
    }

    /// Whether `[ptr, ptr + size)` is a live block of that size.
    pub fn is_allocated(&self, ptr: PPtr<u8>, size: u64) -> bool {
        let geo = &self.inner.geo;
        let Some(rel) = ptr.offset().checked_sub(geo.first_page) else {
            return false;
        };
        let page = rel / PAGE;
        if page >= u64::from(geo.pages) || size == 0 {
            return false;
        }
        let s = self.inner.lock();
        match s.pages[page as usize] {
            Page::Divided { bitmap, .. } if size <= MAX_SMALL && rel % UNIT == 0 => {
                let first = ((rel % PAGE) / UNIT) as u32;
                let units = size.div_ceil(UNIT) as u32;
                first + units <= DATA_UNITS
                    && bitmap & unit_mask(first, units) == unit_mask(first, units)
            }
            Page::RunHead { pages } => {
                rel % PAGE == 0 && u64::from(pages) == size.div_ceil(PAGE) && size > MAX_SMALL
            }
            _ => false,
        }
    }

    /// Allocation count per 64 B unit of the heap, page-major (64 per page).
    #[cfg(feature = "wear")]
    pub fn unit_counts(&self) -> Vec<u64> {
        self.inner.lock().wear.clone()
    }

    /// The wear summary of this heap's allocations (see [`crate::wear`]): per-page
    /// wear, total page writes, per-unit std, CV and max.
    #[cfg(feature = "wear")]
    pub fn wear_summary(&self) -> crate::wear::WearSummary {
        crate::wear::WearSummary::from_page_counts(&self.unit_counts())
    }

    /// The offset of page `p`'s first byte (for mapping unit counts to offsets).
    pub fn page_offset(&self, p: u32) -> u64 {
        self.inner.geo.page_off(p)
    }
}

impl Wafa {
    /// Checks that the DRAM metadata is self-consistent: every divided page's free
    /// count matches its bitmap, its metadata unit is reserved, its clock points at a
    /// free segment of its bucket's size, and it sits in that bucket; run heads are
    /// followed by exactly their tails; the free-page bitmap matches the pages.
    pub fn check_consistency(&self) -> Result<(), String> {
        let s = self.inner.lock();
        let mut free = 0u32;
        let mut bucket_units = [0u64; crate::buckets::BUCKETS];
        let mut p = 0usize;
        while p < s.pages.len() {
            match s.pages[p] {
                Page::Free => {
                    if !s.is_free(p as u32) {
                        return Err(format!("page {p} is free but not in the free bitmap"));
                    }
                    free += 1;
                }
                Page::Divided {
                    bitmap,
                    c_fu,
                    s_ms,
                    pos,
                } => {
                    if s.is_free(p as u32) {
                        return Err(format!("divided page {p} is in the free bitmap"));
                    }
                    if bitmap & crate::state::META_BIT == 0 {
                        return Err(format!("page {p}: metadata unit not reserved"));
                    }
                    let expect = DATA_UNITS - (bitmap & !crate::state::META_BIT).count_ones();
                    if u32::from(c_fu) != expect {
                        return Err(format!("page {p}: C_FU {c_fu} but {expect} free bits"));
                    }
                    if s_ms > 0 {
                        let seg = unit_mask(u32::from(pos), u32::from(s_ms));
                        if bitmap & seg != 0 {
                            return Err(format!(
                                "page {p}: clock segment {pos}+{s_ms} is not free"
                            ));
                        }
                    }
                    bucket_units[usize::from(s_ms)] += u64::from(c_fu);
                    if s.buckets.bucket_of(p as u32) != Some(usize::from(s_ms)) {
                        return Err(format!(
                            "page {p}: S_MS {s_ms} but in bucket {:?}",
                            s.buckets.bucket_of(p as u32)
                        ));
                    }
                }
                Page::RunHead { pages } => {
                    for q in p + 1..p + pages as usize {
                        if s.pages.get(q) != Some(&Page::RunTail) {
                            return Err(format!(
                                "run at page {p} of {pages} pages has no tail at {q}"
                            ));
                        }
                    }
                    p += pages as usize;
                    continue;
                }
                Page::RunTail => return Err(format!("orphan run tail at page {p}")),
            }
            p += 1;
        }
        if free != s.free_count {
            return Err(format!(
                "{free} free pages but the count says {}",
                s.free_count
            ));
        }
        for (k, &units) in bucket_units.iter().enumerate() {
            if s.buckets.free_units(k) != units {
                return Err(format!(
                    "bucket {k} counts {} free units, its pages have {units}",
                    s.buckets.free_units(k)
                ));
            }
        }
        Ok(())
    }

    /// Allocated units (data units of divided pages) and run pages, for leak checks.
    pub fn allocated_units(&self) -> (u64, u32) {
        let s = self.inner.lock();
        let mut units = 0u64;
        let mut runs = 0u32;
        for p in &s.pages {
            match *p {
                Page::Divided { c_fu, .. } => units += u64::from(DATA_UNITS - u32::from(c_fu)),
                Page::RunHead { pages } => runs += pages,
                _ => {}
            }
        }
        (units, runs)
    }
}

/// Usage figures of a WAFA heap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WafaStats {
    /// Pages managed.
    pub pages: u32,
    /// Pages not in use.
    pub free_pages: u32,
    /// Divided pages.
    pub divided_pages: u32,
    /// Pages in whole-page runs.
    pub run_pages: u32,
    /// Free units in divided pages (cached).
    pub free_units: u64,
}

impl Drop for Wafa {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Release);
        if let Some(t) = self.inner.daemon_thread.get() {
            t.unpark();
        }
        if let Some(d) = self.daemon.take() {
            d.join();
        }
    }
}

// SAFETY: small blocks are unit runs inside a divided page's 63 data units, never the
// metadata unit, tracked by a bitmap that never hands out a set bit; runs are whole
// pages marked in the kind table; both live inside `first_page ..` (geometry checked
// at format and open), disjoint from the header, intent and kind table.
unsafe impl PersistentAllocator for Wafa {
    fn name(&self) -> &'static str {
        "wafa"
    }

    fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    fn alignment(&self) -> u64 {
        UNIT
    }

    #[inline]
    fn alloc(&self, size: u64) -> Result<PPtr<u8>, AllocError> {
        Wafa::alloc(self, size)
    }

    #[inline]
    unsafe fn free(&self, ptr: PPtr<u8>, size: u64) -> Result<(), AllocError> {
        self.inner.free(ptr, size)
    }

    unsafe fn alloc_publish(
        &self,
        size: u64,
        slot: PPtr<AtomicPPtr<u8>>,
        init: &mut dyn FnMut(&mut [u8]),
    ) -> Result<PPtr<u8>, AllocError> {
        let inner = &self.inner;
        inner.check_slot(slot.offset())?;
        if inner.pool.is_read_only() {
            return Err(PoolError::ReadOnly.into());
        }
        let mut s = inner.lock();
        if !inner.slot_outside_free_space(&s, slot.offset()) {
            return Err(AllocError::InvalidSlot {
                offset: slot.offset(),
                reason: "in free WAFA space",
            });
        }
        let at = inner.place(&mut s, size)?;
        let block = at.block(&inner.geo);
        // SAFETY: the block was just reserved under the lock, so nothing else
        // references it (the trait's contract); in bounds by the geometry.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(inner.pool.base_ptr().add(block as usize), size as usize)
        };
        init(bytes);
        inner.pool.persist(block, size)?;
        inner.write_intent(&Intent::new(
            IntentKind::AllocPublish,
            slot.offset(),
            block,
            size,
            0,
        ))?;
        inner.commit(&mut s, &at)?;
        // SAFETY: the caller keeps all other access to the slot atomic.
        let slot_ref = unsafe { inner.pool.get_shared(slot)? };
        slot_ref.store(PPtr::from_offset(block), Ordering::Release);
        inner.pool.persist_ptr(slot)?;
        inner.write_intent(&Intent::default())?;
        drop(s);
        Ok(PPtr::from_offset(block))
    }
}
