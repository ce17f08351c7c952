//! [`FusionHeap`]: a volatile heap that serves from DRAM (the system allocator)
//! while there is no memory pressure and from integrated PM sections under
//! pressure, integrating and reclaiming sections by the Table 2 policy.
//!
//! # Where a block comes from
//!
//! Every allocation reads one flag, *serving PM*, set by the last policy round:
//! true when the level is above [`Level::NoPressure`] and at least one section is
//! integrated. Then the block comes from the integrated sections: the thread's
//! home section first (the one it last allocated from), then the others lowest
//! index first (so the top sections empty first, and the policy reclaims from the
//! top); if they are full, or cannot serve the request (larger than a section,
//! aligned beyond a page), it comes from DRAM, which raises the pressure the next
//! round sees. Otherwise it comes from DRAM. Frees are routed by address: a block
//! inside the section reservation goes back to its section's [`SectionCarver`],
//! anything else to the system allocator. A section's carver is built when it is
//! integrated and dropped when it is reclaimed: a hidden section costs a state
//! byte and its (empty) cell, one cache line.
//!
//! # Rounds
//!
//! A round samples the pressure, asks [`decide`] and applies the decision:
//! integrate the lowest hidden sections, or reclaim the listed ones after checking
//! — under the lock that allocation takes — that they still hold no live block.
//! Rounds run on three occasions:
//!
//! * from the daemon thread, every period ([`super::Daemon`]);
//! * on the allocation path, whenever the DRAM this heap has handed out grows by
//!   another step (1/64 of the sampled DRAM by default) since the last round: the
//!   allocating thread runs the round itself, as the kernel's allocator wakes
//!   kpmemd before kswapd, so that a burst of allocations cannot outrun a daemon
//!   that sleeps; only one thread runs a round at a time, the others go on;
//! * by hand, [`FusionHeap::round`] or, with a given sample,
//!   [`FusionHeap::apply`] (tests replay scripted traces through it).
//!
//! # Pressure: a source, or a limit the heap is given
//!
//! The heap samples a [`PressureSource`] ([`ZoneInfo`](super::ZoneInfo),
//! [`MemInfo`](super::MemInfo), [`Cgroup`](super::Cgroup), or a scripted trace).
//! Where no memory limit can be set from outside (no cgroup), it can be given one
//! itself ([`FusionConfig::dram_limit`]): its pressure is then the DRAM it has
//! handed out against that limit (source `heap-limit`, watermarks as a cgroup's),
//! and a DRAM allocation that would pass the limit is served from PM or fails.
//!
//! # Unified
//!
//! [`FusionMode::Unified`] is the paper's baseline: every section is integrated
//! (and its metadata built) when the heap is made, and none is ever reclaimed.
//!
//! # Concurrency
//!
//! Two levels of lock, always taken in this order:
//!
//! * the **structural lock** (`pm`) around the section space and the slot
//!   states: integration, reclaim, pass-through mappings, the policy's view and
//!   the statistics take it. Allocation and free never do.
//! * one **section lock** per section (`cells.rs`), around its carver and
//!   its allocation count, each on its own cache line.
//!
//! **Allocation** from PM reads the thread's home section (`home.rs`) and
//! `try_lock`s it; if another thread holds it, or it has no room, the thread
//! walks the bitmap of sections with a carver (one atomic load per 64
//! sections, lowest first), `try_lock`ing each, and the section that serves
//! becomes its home. Only if every section was busy does it walk them again,
//! waiting on each lock. So threads settle on different sections and then work
//! under different locks; no allocation takes a global lock or writes a shared
//! counter (a section counts its own allocations, summed by
//! [`FusionHeap::stats`]). **Free** finds its section by address arithmetic
//! (the reservation is one range) and takes that section's lock alone.
//!
//! **Reclaim never removes a section in use.** Under the structural lock, a
//! round locks the section's cell, checks that its carver holds no live block,
//! takes the carver out and clears its bitmap bit — all while holding the cell —
//! and only then unmaps the section. A thread allocating from the section holds
//! the cell, so the round waits for it, and then sees its block; a thread
//! freeing into it frees a live block, so the round does not take the section;
//! and a thread that read the bit before it was cleared locks the cell after
//! and finds no carver, so it moves on. The carver writes section memory (its
//! in-band free lists) only under the cell's lock, so nothing touches the
//! section once the round has taken its carver. **Integration** maps the
//! section, puts the carver in its cell, and then sets its bit (release), so a
//! thread that sees the bit finds the carver. The loom model
//! (`tests/loom_fusion.rs`) explores these interleavings with two allocating
//! threads and a reclaiming round.
//!
//! The DRAM side takes no lock (the system allocator's own, and two atomic
//! counters). A round takes the structural lock only to apply its decision,
//! after sampling.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt;

use super::carve::SectionCarver;
use super::cells::{CellGuard, Cells, Integrated, SectionCell};
use super::global::Inside;
use super::policy::{decide, Decision, FusionState, Level, PolicyConfig, SectionView};
use super::pressure::{limit_watermarks, Pressure, PressureError, PressureSource};
use super::section::{paper_descriptor_bytes, SectionError, SectionSpace};
use crate::sync::{
    lock, try_lock, AtomicBool, AtomicI64, AtomicU64, AtomicU8, Mutex, MutexGuard, Ordering,
};

/// How many allocation-path checks a DRAM-sized growth is split into: a round
/// runs each time the DRAM handed out grows by `total / CHECK_STEPS`.
pub const CHECK_STEPS: u64 = 64;

/// The step before the first sample says how large DRAM is: 4 MiB.
const FIRST_STEP: i64 = 4 << 20;

/// Adaptive (AMF) or everything integrated at start (the paper's Unified).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FusionMode {
    /// Integrate and reclaim sections by the policy (AMF).
    #[default]
    Adaptive,
    /// Integrate every section when the heap is made; never reclaim (the paper's
    /// Unified baseline, architecture A5).
    Unified,
}

/// How a [`FusionHeap`] decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FusionConfig {
    /// Table 2 and the reclaim threshold.
    pub policy: PolicyConfig,
    /// Adaptive or Unified.
    pub mode: FusionMode,
    /// A DRAM limit the heap enforces itself, in bytes, and takes its pressure
    /// from (source `heap-limit`) instead of a [`PressureSource`]. For machines
    /// where no cgroup can be made.
    pub dram_limit: Option<u64>,
    /// Bytes of DRAM growth between allocation-path rounds; `None`: 1/64 of the
    /// sampled DRAM ([`CHECK_STEPS`]).
    pub check_every: Option<u64>,
}

/// Why the heap could not be made or a round could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FusionError {
    /// The section space failed.
    #[error(transparent)]
    Section(#[from] SectionError),
    /// The pressure source failed.
    #[error("pressure source: {0}")]
    Pressure(#[from] PressureError),
    /// The section size is not a multiple of the heap's chunk.
    #[error("sections of {section_bytes} B are not a multiple of the heap's {chunk} B chunk")]
    SectionSize {
        /// The space's section size.
        section_bytes: u64,
        /// [`super::carve::CHUNK_BYTES`].
        chunk: u64,
    },
    /// [`FusionHeap::round`] with neither a source nor a DRAM limit.
    #[error("the heap has no pressure source and no DRAM limit")]
    NoSource,
    /// A pass-through mapping asked for more contiguous hidden sections than
    /// there are.
    #[error(
        "a pass-through mapping of {bytes} B needs {sections} contiguous hidden sections; \
         the space has no such run"
    )]
    NoHiddenRun {
        /// Bytes asked for.
        bytes: u64,
        /// Sections needed.
        sections: u64,
    },
    /// A pass-through mapping of zero bytes.
    #[error("a pass-through mapping must have at least one byte")]
    EmptyPassThrough,
}

/// What one section slot is, as the heap sees it.
#[derive(Debug)]
pub(super) enum Slot {
    /// Not mapped, no metadata.
    Hidden,
    /// Integrated into the heap; its allocator metadata is in its
    /// [`SectionCell`].
    Heap,
    /// Mapped for a pass-through mapping: not the heap's, not the policy's.
    Passed,
    /// Its mapping failed; never touched again.
    Lost,
}

/// The structural side of PM, behind one lock: the space and what each section
/// is. The carvers are in the section cells, under their own locks.
#[derive(Debug)]
pub(super) struct PmState {
    pub(super) space: SectionSpace,
    pub(super) slots: Vec<Slot>,
}

/// The PM lock held, with the thread marked inside the heap
/// ([`FusionHeap::pm`]). The guard drops before the mark.
pub(super) struct PmLock<'a> {
    guard: MutexGuard<'a, PmState>,
    _inside: Inside,
}

impl std::ops::Deref for PmLock<'_> {
    type Target = PmState;
    fn deref(&self) -> &PmState {
        &self.guard
    }
}

impl std::ops::DerefMut for PmLock<'_> {
    fn deref_mut(&mut self) -> &mut PmState {
        &mut self.guard
    }
}

/// What one round did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundReport {
    /// The policy's decision (level, sections to integrate, sections to reclaim).
    pub decision: Decision,
    /// Sections integrated, by index.
    pub integrated: Vec<usize>,
    /// Sections reclaimed, by index.
    pub reclaimed: Vec<usize>,
    /// Sections the decision named that could not be integrated or reclaimed
    /// (a mapping failed, or a block was allocated in it since the sample).
    pub skipped: Vec<usize>,
    /// Where the sample came from.
    pub source: &'static str,
    /// Whether allocations are served from PM after the round.
    pub serving_pm: bool,
}

/// Counters and sizes of a [`FusionHeap`].
#[derive(Clone, Debug, PartialEq)]
pub struct FusionStats {
    /// The level of the last round.
    pub level: Level,
    /// Whether allocations are served from PM now.
    pub serving_pm: bool,
    /// Sections in the space.
    pub sections: usize,
    /// Sections integrated into the heap.
    pub integrated: usize,
    /// Sections hidden.
    pub hidden: usize,
    /// Sections mapped for pass-through mappings.
    pub passed: usize,
    /// Sections lost to a failed mapping.
    pub lost: usize,
    /// Bytes of live PM blocks (slot and run sizes).
    pub pm_live_bytes: u64,
    /// Live PM blocks.
    pub pm_live_blocks: u64,
    /// Bytes of DRAM handed out through the heap and not freed through it.
    pub dram_live_bytes: i64,
    /// Allocations served from PM.
    pub pm_allocs: u64,
    /// Allocations served from DRAM.
    pub dram_allocs: u64,
    /// Allocations that wanted PM but got DRAM (sections full or unsuitable).
    pub pm_misses: u64,
    /// Allocations refused (a DRAM limit reached and no PM room).
    pub refused: u64,
    /// Rounds run.
    pub rounds: u64,
    /// Rounds that failed (the source could not be read).
    pub round_errors: u64,
    /// Sections integrated over the heap's life.
    pub integrations: u64,
    /// Sections reclaimed over the heap's life.
    pub reclaims: u64,
    /// The DRAM the heap's own metadata takes (see [`FusionHeap::metadata_bytes`]).
    pub metadata_bytes: usize,
    /// The paper's page-descriptor cost for the integrated sections.
    pub paper_metadata_bytes: u64,
    /// Whether the "PM" is emulated (tmpfs or disk).
    pub emulated: bool,
    /// The backing, described.
    pub backing: String,
}

impl fmt::Display for FusionStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "level {}, {} from PM; sections {} integrated / {} hidden / {} passed / {} lost of {}; \
             PM live {} B in {} blocks, DRAM live {} B; allocs {} PM, {} DRAM ({} PM misses, {} refused); \
             rounds {} ({} failed), {} integrations, {} reclaims; metadata {} B (paper's descriptors {} B); {}",
            self.level,
            if self.serving_pm { "serving" } else { "not serving" },
            self.integrated,
            self.hidden,
            self.passed,
            self.lost,
            self.sections,
            self.pm_live_bytes,
            self.pm_live_blocks,
            self.dram_live_bytes,
            self.pm_allocs,
            self.dram_allocs,
            self.pm_misses,
            self.refused,
            self.rounds,
            self.round_errors,
            self.integrations,
            self.reclaims,
            self.metadata_bytes,
            self.paper_metadata_bytes,
            self.backing,
        )
    }
}

#[derive(Debug, Default)]
struct Counters {
    dram_allocs: AtomicU64,
    pm_misses: AtomicU64,
    refused: AtomicU64,
    rounds: AtomicU64,
    round_errors: AtomicU64,
    integrations: AtomicU64,
    reclaims: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The fusion heap. See the module docs.
pub struct FusionHeap {
    /// The reservation's first address and length (immutable copies of the
    /// space's, so that routing a free takes no lock).
    base: usize,
    span: usize,
    section_len: usize,
    pm: Mutex<PmState>,
    /// A cell per section ever integrated: its lock, carver and allocation
    /// count.
    cells: Cells,
    /// Which sections have a carver: where allocation looks, without a lock.
    integrated: Integrated,
    /// Held while a round runs; holds the source.
    source: Mutex<Option<Box<dyn PressureSource + Send>>>,
    config: FusionConfig,
    serving_pm: AtomicBool,
    level: AtomicU8,
    /// DRAM bytes handed out and not freed through the heap.
    dram_live: AtomicI64,
    /// The DRAM figure at which the allocation path runs the next round.
    next_check: AtomicI64,
    counters: Counters,
    /// The backing, described once: [`FusionHeap::stats`] must not allocate
    /// under the PM lock, where an allocation through the adapter would come
    /// back to the lock.
    backing: String,
}

impl fmt::Debug for FusionHeap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FusionHeap")
            .field("base", &format_args!("{:#x}", self.base))
            .field("span", &self.span)
            .field("section_len", &self.section_len)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl FusionHeap {
    /// A heap over `space` (every section hidden, as a new space's are), taking
    /// its pressure from `source` (may be `None` with a
    /// [`FusionConfig::dram_limit`], or for a heap driven by
    /// [`FusionHeap::apply`]). In [`FusionMode::Unified`] every section is
    /// integrated now.
    pub fn new(
        space: SectionSpace,
        source: Option<Box<dyn PressureSource + Send>>,
        config: FusionConfig,
    ) -> Result<FusionHeap, FusionError> {
        let section_bytes = space.section_bytes();
        if !section_bytes.is_multiple_of(super::carve::CHUNK_BYTES) {
            return Err(FusionError::SectionSize {
                section_bytes,
                chunk: super::carve::CHUNK_BYTES,
            });
        }
        let first = space.range(0).map_or(0, |r| r.start);
        let section_len = space.range(0).map_or(0, |r| r.len);
        let slots = (0..space.len())
            .map(|i| match space.state(i) {
                Some(super::section::SectionState::Integrated) => Slot::Passed,
                Some(super::section::SectionState::Lost) => Slot::Lost,
                _ => Slot::Hidden,
            })
            .collect();
        let span = section_len * space.len();
        let backing = space.backing().describe();
        let sections = space.len();
        let heap = FusionHeap {
            base: first,
            span,
            section_len,
            pm: Mutex::new(PmState { space, slots }),
            cells: Cells::new(sections),
            integrated: Integrated::new(sections),
            source: Mutex::new(source),
            config,
            serving_pm: AtomicBool::new(false),
            level: AtomicU8::new(Level::NoPressure as u8),
            dram_live: AtomicI64::new(0),
            next_check: AtomicI64::new(FIRST_STEP),
            counters: Counters::default(),
            backing,
        };
        if config.mode == FusionMode::Unified {
            let mut pm = heap.pm();
            let hidden: Vec<usize> = (0..pm.slots.len())
                .filter(|&i| matches!(pm.slots[i], Slot::Hidden))
                .collect();
            for index in hidden {
                heap.integrate_locked(&mut pm, index)?;
            }
        }
        Ok(heap)
    }

    /// Whether `ptr` is inside the section reservation (a PM block, or a
    /// pass-through mapping's byte). Lock-free arithmetic.
    #[inline]
    pub fn owns(&self, ptr: *const u8) -> bool {
        ptr.addr().wrapping_sub(self.base) < self.span
    }

    /// Allocates a block for `layout`: from PM when serving PM and a section has
    /// room, else from DRAM. Null for a zero-sized layout (as `GlobalAlloc`, the
    /// heap does not serve those), when the system allocator fails, or when a
    /// [`FusionConfig::dram_limit`] would be passed and PM has no room.
    pub fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() == 0 {
            return std::ptr::null_mut();
        }
        if self.serving_pm.load(Ordering::Relaxed) {
            if let Some(p) = self.alloc_pm(layout) {
                return p;
            }
            bump(&self.counters.pm_misses);
        }
        self.alloc_dram(layout)
    }

    /// Frees a block of this heap.
    ///
    /// # Safety
    ///
    /// `ptr` must have come from [`FusionHeap::alloc`] or
    /// [`FusionHeap::realloc`] of this heap with `layout`, and not have been
    /// freed; it is not used afterwards.
    pub unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if self.owns(ptr) {
            self.dealloc_pm(ptr);
        } else {
            // SAFETY: not in the reservation, so (by the caller's promise) it came
            // from `System` through `alloc_dram` with this layout.
            unsafe { System.dealloc(ptr, layout) };
            self.dram_live
                .fetch_sub(layout.size() as i64, Ordering::Relaxed);
        }
    }

    /// Grows or shrinks a block, keeping its first `min(old, new)` bytes: in place
    /// when its PM slot is large enough, with the system's `realloc` for a DRAM
    /// block while not serving PM, and by allocating, copying and freeing
    /// otherwise (so a DRAM block that grows under pressure moves to PM).
    ///
    /// # Safety
    ///
    /// As [`GlobalAlloc::realloc`]: `ptr` is a live block of this heap allocated
    /// with `layout`, `new_size` is non-zero and, rounded up to `layout.align()`,
    /// does not overflow `isize`.
    pub unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if self.owns(ptr) {
            if let Some(usable) = self.usable_size(ptr) {
                if new_size as u64 <= usable && new_size >= layout.size() / 2 {
                    return ptr;
                }
            }
        } else if !self.serving_pm.load(Ordering::Relaxed) && self.config.dram_limit.is_none() {
            // SAFETY: a DRAM block from `System` with `layout` (caller's promise).
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                let grown = new_size as i64 - layout.size() as i64;
                self.note_dram(grown);
            }
            return p;
        }
        // SAFETY: the caller promises the new size is valid for the alignment.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let p = self.alloc(new_layout);
        if !p.is_null() {
            // SAFETY: both blocks are live, distinct, and at least this long.
            unsafe { std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size)) };
            // SAFETY: the caller's block, not used again.
            unsafe { self.dealloc(ptr, layout) };
        }
        p
    }

    /// The usable bytes of a PM block (its slot or run size); `None` for a DRAM
    /// block or an address that is not a live PM block's start.
    pub fn usable_size(&self, ptr: *const u8) -> Option<u64> {
        let (index, offset) = self.locate(ptr)?;
        let cell = self.cells.get(index)?.lock();
        cell.carver.as_ref()?.usable_size(offset)
    }

    fn locate(&self, ptr: *const u8) -> Option<(usize, u64)> {
        let rel = ptr.addr().checked_sub(self.base)?;
        (rel < self.span).then(|| (rel / self.section_len, (rel % self.section_len) as u64))
    }

    /// A block from the integrated sections: the home section, then the others
    /// lowest first, skipping sections another thread holds; if every section
    /// was busy, once more waiting on each. See the module docs.
    fn alloc_pm(&self, layout: Layout) -> Option<*mut u8> {
        let (size, align) = (layout.size() as u64, layout.align() as u64);
        let me = std::ptr::from_ref(self).addr();
        let home = super::home::get(me);
        if let Some(h) = home {
            if let Some(mut guard) = self.cells.get(h).and_then(SectionCell::try_lock) {
                if let Some(p) = self.carve(&mut guard, h, size, align) {
                    return Some(p);
                }
            }
        }
        let mut busy = false;
        for index in self.integrated.iter() {
            if Some(index) == home {
                continue;
            }
            let Some(cell) = self.cells.get(index) else {
                continue;
            };
            match cell.try_lock() {
                Some(mut guard) => {
                    if let Some(p) = self.carve(&mut guard, index, size, align) {
                        super::home::set(me, index);
                        return Some(p);
                    }
                }
                None => busy = true,
            }
        }
        if !busy {
            return None;
        }
        // Every section with room may have been busy for a moment only: wait.
        for index in self.integrated.iter() {
            let Some(cell) = self.cells.get(index) else {
                continue;
            };
            if let Some(p) = self.carve(&mut cell.lock(), index, size, align) {
                super::home::set(me, index);
                return Some(p);
            }
        }
        None
    }

    /// A block of section `index` from its locked cell, if it has a carver with
    /// room.
    fn carve(
        &self,
        cell: &mut CellGuard<'_>,
        index: usize,
        size: u64,
        align: u64,
    ) -> Option<*mut u8> {
        let offset = cell.carver.as_mut()?.alloc(size, align)?;
        cell.allocs += 1;
        let addr = self.section_addr(index) + offset as usize;
        Some(std::ptr::with_exposed_provenance_mut(addr))
    }

    fn dealloc_pm(&self, ptr: *mut u8) {
        let Some((index, offset)) = self.locate(ptr) else {
            return;
        };
        let Some(cell) = self.cells.get(index) else {
            return;
        };
        let mut cell = cell.lock();
        let result = match cell.carver.as_mut() {
            Some(carver) => carver.free(offset).map(|_| ()).map_err(|e| e.to_string()),
            None => Err(format!("section {index} is not the heap's")),
        };
        drop(cell);
        if let Err(why) = result {
            // A free of something this heap never handed out: the caller broke
            // the contract. Leaking is the only safe answer.
            tracing::error!(addr = ptr.addr(), %why, "fusion heap: invalid free ignored");
        }
    }

    fn alloc_dram(&self, layout: Layout) -> *mut u8 {
        let size = layout.size() as i64;
        if let Some(limit) = self.config.dram_limit {
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            if self.dram_live.load(Ordering::Relaxed) + size > limit {
                // The limit would be passed: a round that counts this request
                // as taken sees no free DRAM and integrates; then PM, or
                // nothing.
                self.limit_round(layout.size() as u64);
                if let Some(p) = self.alloc_pm(layout) {
                    return p;
                }
                bump(&self.counters.refused);
                return std::ptr::null_mut();
            }
        }
        // SAFETY: `layout` has a non-zero size: `alloc` returned null for the
        // others before coming here.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            bump(&self.counters.dram_allocs);
            self.note_dram(size);
        }
        p
    }

    /// Counts `delta` bytes of DRAM and runs a round if the growth since the
    /// last one passed the step.
    fn note_dram(&self, delta: i64) {
        let now = self.dram_live.fetch_add(delta, Ordering::Relaxed) + delta;
        if delta > 0 && now >= self.next_check.load(Ordering::Relaxed) {
            self.pressure_event();
        }
    }

    /// A round from the allocation path: skipped when another thread runs one.
    fn pressure_event(&self) {
        let _inside = Inside::enter();
        if let Some(mut source) = try_lock(&self.source) {
            if let Err(e) = self.round_holding(&mut source, 0) {
                tracing::warn!(error = %e, "fusion heap: pressure round failed");
            }
        }
    }

    /// The round for a request of `pending` bytes that would pass the
    /// [`FusionConfig::dram_limit`]: its limit sample counts them as used. It
    /// waits for a round another thread is running instead of skipping it (that
    /// round's sample need not have counted this request, and its sections need
    /// not be in yet); the wait is short, as a limit sample reads no source.
    fn limit_round(&self, pending: u64) {
        let _inside = Inside::enter();
        let mut source = lock(&self.source);
        if let Err(e) = self.round_holding(&mut source, pending) {
            tracing::warn!(error = %e, "fusion heap: pressure round failed");
        }
    }

    /// Samples the pressure and applies the policy's decision. Waits for a round
    /// another thread is running.
    pub fn round(&self) -> Result<RoundReport, FusionError> {
        // What the round allocates (a source's strings, sections' metadata under
        // the PM lock) must not come back into this heap through the adapter.
        let _inside = Inside::enter();
        let mut source = lock(&self.source);
        self.round_holding(&mut source, 0)
    }

    fn round_holding(
        &self,
        source: &mut MutexGuard<'_, Option<Box<dyn PressureSource + Send>>>,
        pending: u64,
    ) -> Result<RoundReport, FusionError> {
        let sample = match (self.config.dram_limit, source.as_mut()) {
            (Some(limit), _) => Ok(self.limit_sample(limit, pending)),
            (None, Some(src)) => src.sample().map_err(FusionError::from),
            (None, None) => Err(FusionError::NoSource),
        };
        match sample {
            Ok(p) => Ok(self.apply(&p)),
            Err(e) => {
                bump(&self.counters.round_errors);
                // Do not retry on every allocation: wait for another step.
                self.arm_check(self.config.check_every.unwrap_or(FIRST_STEP as u64));
                Err(e)
            }
        }
    }

    /// The pressure of a heap given a DRAM limit: its own DRAM (and `pending`
    /// bytes about to be asked for) against the limit, with a cgroup's
    /// watermarks.
    fn limit_sample(&self, limit: u64, pending: u64) -> Pressure {
        let used = u64::try_from(self.dram_live.load(Ordering::Relaxed))
            .unwrap_or(0)
            .saturating_add(pending);
        let (min, low, high) = limit_watermarks(limit);
        Pressure {
            free_bytes: limit.saturating_sub(used),
            min,
            low,
            high,
            total: limit,
            psi_some_avg10: None,
            source: "heap-limit",
        }
    }

    fn arm_check(&self, step: u64) {
        let step = i64::try_from(step.max(1)).unwrap_or(i64::MAX);
        let now = self.dram_live.load(Ordering::Relaxed);
        self.next_check
            .store(now.saturating_add(step), Ordering::Relaxed);
    }

    /// Applies the policy to the sample `p`: integrates or reclaims sections as
    /// [`decide`] says (in [`FusionMode::Unified`], neither), then sets where
    /// allocations come from. Rounds from [`FusionHeap::round`] end here; tests
    /// call it with scripted samples.
    pub fn apply(&self, p: &Pressure) -> RoundReport {
        let _inside = Inside::enter();
        bump(&self.counters.rounds);
        let mut pm = self.pm();
        let state = self.policy_state(&pm, p.total);
        let decision = decide(&state, p, &self.config.policy);
        let mut report = RoundReport {
            decision: decision.clone(),
            integrated: Vec::new(),
            reclaimed: Vec::new(),
            skipped: Vec::new(),
            source: p.source,
            serving_pm: false,
        };
        if self.config.mode == FusionMode::Adaptive {
            for _ in 0..decision.integrate {
                let Some(index) = pm.slots.iter().position(|s| matches!(s, Slot::Hidden)) else {
                    break;
                };
                match self.integrate_locked(&mut pm, index) {
                    Ok(()) => report.integrated.push(index),
                    Err(e) => {
                        tracing::warn!(index, error = %e, "fusion heap: integration failed");
                        report.skipped.push(index);
                    }
                }
            }
            for &index in &decision.reclaim {
                match self.reclaim_locked(&mut pm, index) {
                    Ok(true) => report.reclaimed.push(index),
                    Ok(false) => report.skipped.push(index),
                    Err(e) => {
                        tracing::warn!(index, error = %e, "fusion heap: reclaim failed");
                        report.skipped.push(index);
                    }
                }
            }
        }
        let any = pm.slots.iter().any(|s| matches!(s, Slot::Heap));
        drop(pm);
        report.serving_pm = decision.level > Level::NoPressure && any;
        self.serving_pm.store(report.serving_pm, Ordering::Relaxed);
        self.level.store(decision.level as u8, Ordering::Relaxed);
        self.arm_check(self.config.check_every.unwrap_or(p.total / CHECK_STEPS));
        if !report.integrated.is_empty() || !report.reclaimed.is_empty() {
            tracing::debug!(
                level = %decision.level,
                integrated = ?report.integrated,
                reclaimed = ?report.reclaimed,
                source = p.source,
                "fusion round"
            );
        }
        report
    }

    fn policy_state(&self, pm: &PmState, dram_bytes: u64) -> FusionState {
        let mut integrated = Vec::new();
        let mut hidden = 0;
        for (index, slot) in pm.slots.iter().enumerate() {
            match slot {
                Slot::Heap => {
                    let live_bytes = self.cells.get(index).map_or(0, |cell| {
                        cell.lock().carver.as_ref().map_or(0, |c| c.live_bytes())
                    });
                    integrated.push(SectionView {
                        index,
                        live_bytes,
                        free_bytes: (self.section_len as u64).saturating_sub(live_bytes),
                    });
                }
                Slot::Hidden => hidden += 1,
                Slot::Passed | Slot::Lost => {}
            }
        }
        FusionState {
            section_bytes: self.section_len as u64,
            dram_bytes,
            integrated,
            hidden,
        }
    }

    fn integrate_locked(&self, pm: &mut PmState, index: usize) -> Result<(), FusionError> {
        let Some(cell) = self.cells.make(index) else {
            return Err(SectionError::OutOfRange {
                index,
                sections: pm.slots.len(),
            }
            .into());
        };
        match pm.space.integrate(index) {
            Ok(range) => {
                // SAFETY: the space just mapped [start, start + len) read-write,
                // page-aligned, and the heap keeps it mapped until it reclaims the
                // section, which it does only when the carver has no live block
                // (and then drops the carver). The fresh mapping holds no object.
                let carver = unsafe { SectionCarver::new(range.start, range.len as u64) };
                cell.lock().carver = Some(Box::new(carver));
                // After the carver is in: a thread that sees the bit finds it.
                self.integrated.set(index);
                pm.slots[index] = Slot::Heap;
                bump(&self.counters.integrations);
                Ok(())
            }
            Err(e) => {
                if pm.space.state(index) == Some(super::section::SectionState::Lost) {
                    pm.slots[index] = Slot::Lost;
                }
                Err(e.into())
            }
        }
    }

    /// Reclaims section `index` if it is the heap's and holds no live block;
    /// `Ok(false)` if it is not (left as it is).
    fn reclaim_locked(&self, pm: &mut PmState, index: usize) -> Result<bool, FusionError> {
        if !matches!(pm.slots.get(index), Some(Slot::Heap)) {
            return Ok(false);
        }
        {
            // The check and the taking under one hold of the cell: no thread
            // can allocate from the section between them, and none is inside
            // it (allocating or freeing) while it is held.
            let Some(cell) = self.cells.get(index) else {
                return Ok(false);
            };
            let mut cell = cell.lock();
            if cell.carver.as_ref().is_some_and(|c| c.live_blocks() != 0) {
                return Ok(false);
            }
            // The carver goes first: nothing may hand out its addresses again.
            self.integrated.clear(index);
            cell.carver = None;
        }
        pm.slots[index] = Slot::Hidden;
        match pm.space.reclaim(index) {
            Ok(_) => {
                bump(&self.counters.reclaims);
                Ok(true)
            }
            Err(e) => {
                if pm.space.state(index) == Some(super::section::SectionState::Lost) {
                    pm.slots[index] = Slot::Lost;
                }
                Err(e.into())
            }
        }
    }

    /// Locks the PM side. The thread is marked inside the heap while it holds
    /// the lock, so that anything allocated meanwhile (a section's metadata, an
    /// error's message) goes to the system allocator instead of coming back
    /// through [`super::FusionAlloc`] to this lock.
    pub(super) fn pm(&self) -> PmLock<'_> {
        let inside = Inside::enter();
        PmLock {
            guard: lock(&self.pm),
            _inside: inside,
        }
    }

    /// The first address of section `index`.
    pub(super) fn section_addr(&self, index: usize) -> usize {
        self.base + index * self.section_len
    }

    /// Bytes of one section.
    pub fn section_bytes(&self) -> u64 {
        self.section_len as u64
    }

    /// The level of the last round.
    pub fn level(&self) -> Level {
        let v = self.level.load(Ordering::Relaxed);
        Level::ALL
            .get(usize::from(v))
            .copied()
            .unwrap_or(Level::Critical)
    }

    /// Whether allocations are served from PM now.
    pub fn serving_pm(&self) -> bool {
        self.serving_pm.load(Ordering::Relaxed)
    }

    /// The DRAM the heap's metadata takes, in bytes: the heap struct and its
    /// backing's description, the section space's
    /// ([`SectionSpace::metadata_bytes`]), the slot vector, and the carver of
    /// each integrated section. Hidden sections cost a state byte and a
    /// slot entry.
    pub fn metadata_bytes(&self) -> usize {
        let pm = self.pm();
        self.metadata_locked(&pm)
    }

    fn metadata_locked(&self, pm: &PmState) -> usize {
        let carvers: usize = pm
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, Slot::Heap))
            .map(|(index, _)| {
                self.cells.get(index).map_or(0, |cell| {
                    cell.lock()
                        .carver
                        .as_ref()
                        .map_or(0, |c| size_of::<SectionCarver>().max(c.metadata_bytes()))
                })
            })
            .sum();
        size_of::<FusionHeap>()
            + self.backing.capacity()
            + pm.space.metadata_bytes()
            + pm.slots.capacity() * size_of::<Slot>()
            + self.cells.metadata_bytes()
            + self.integrated.metadata_bytes()
            + carvers
    }

    /// Counters and sizes now.
    pub fn stats(&self) -> FusionStats {
        // Allocated before the lock: through the adapter it may come from PM.
        let backing = self.backing.clone();
        let pm = self.pm();
        let mut s = FusionStats {
            level: self.level(),
            serving_pm: self.serving_pm(),
            sections: pm.slots.len(),
            integrated: 0,
            hidden: 0,
            passed: 0,
            lost: 0,
            pm_live_bytes: 0,
            pm_live_blocks: 0,
            dram_live_bytes: self.dram_live.load(Ordering::Relaxed),
            pm_allocs: 0,
            dram_allocs: self.counters.dram_allocs.load(Ordering::Relaxed),
            pm_misses: self.counters.pm_misses.load(Ordering::Relaxed),
            refused: self.counters.refused.load(Ordering::Relaxed),
            rounds: self.counters.rounds.load(Ordering::Relaxed),
            round_errors: self.counters.round_errors.load(Ordering::Relaxed),
            integrations: self.counters.integrations.load(Ordering::Relaxed),
            reclaims: self.counters.reclaims.load(Ordering::Relaxed),
            metadata_bytes: self.metadata_locked(&pm),
            paper_metadata_bytes: 0,
            emulated: pm.space.backing().emulated,
            backing,
        };
        for (index, slot) in pm.slots.iter().enumerate() {
            if let Some(cell) = self.cells.get(index) {
                let cell = cell.lock();
                s.pm_allocs += cell.allocs;
                if let Some(c) = &cell.carver {
                    s.pm_live_bytes += c.live_bytes();
                    s.pm_live_blocks += c.live_blocks();
                }
            }
            match slot {
                Slot::Heap => s.integrated += 1,
                Slot::Hidden => s.hidden += 1,
                Slot::Passed => s.passed += 1,
                Slot::Lost => s.lost += 1,
            }
        }
        s.paper_metadata_bytes =
            s.integrated as u64 * paper_descriptor_bytes(self.section_len as u64);
        s
    }
}
