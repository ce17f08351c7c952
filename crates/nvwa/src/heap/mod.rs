//! The NVWA heap (the paper's §4.2, Fig. 12): the whole allocator in DRAM —
//! arenas, size-class runs, slot bitmaps, the index from object to record — and on
//! the media only the allocation log, kept consistent with DRAM by flushing.
//!
//! Per operation, on the media:
//!
//! | operation | log | line flushes | fences |
//! | --- | --- | ---: | ---: |
//! | `alloc` | one `Obj` record (with the run's `Run` record in the same line when it is the run's first) | 1 (2 when another thread's transaction logged the run without a fence yet) | 1 |
//! | `free` | the exclude bit set in place, or a `Del` record appended ([`FreeMode`]) | 1 | 1 |
//! | `realloc` in place | the record's length rewritten | 1 | 1 |
//! | `alloc_publish` | `Pub` + pending `Obj`; then the slot; then the pending bit cleared | 2 + the block's and the slot's | 3 |
//! | transactional mark | as `alloc` or `free` | 1 (2 as above) | 0 (the transaction's) |
//!
//! When the log is full, a checkpoint writes the live records compactly into the
//! other log area and switches the active word ([`crate::layout`]); when the heap
//! runs out of pages, a checkpoint also gives back the pages of empty runs.
//! Opening a heap replays the log ([`crate::recover`]).
//!
//! Threads: each thread allocates in its own arena (round-robin over
//! [`NvwaOptions::arenas`]), under that arena's lock — a spin lock released with a
//! plain store, which yields while it waits — so two threads share no lock on the
//! fast path; each arena sits on cache lines of its own. A free takes the lock of
//! the arena owning the block's run, found through a page table (a remote free
//! waits only for that arena). A checkpoint takes every arena's lock.
//!
//! Crash semantics (what the crash suite checks):
//! * `alloc`, `free`, `realloc`: durable on return; one in flight at a crash
//!   happened or did not. A block allocated with plain `alloc` and not yet linked
//!   by the caller leaks at a crash (use `alloc_publish`).
//! * `alloc_publish`: after a crash either the block is allocated and the slot
//!   holds it, or the block is free and the slot unchanged; recovery decides from
//!   the slot, and never writes it.
//! * A moving `realloc` (to another class) is `alloc`, copy, `free`: a crash in
//!   between leaves both blocks allocated (the new one leaks).

use std::cell::Cell;
use std::sync::Arc;

use pmem_core::{AllocError, PPtr, PersistentAllocator, Pool, PoolError};

mod allocator;
mod checkpoint;
mod inspect;
mod open;

pub use inspect::NvwaSummary;

use crate::arena::Arena;
use crate::classes::{large_pages, record_len, Class};
use crate::layout::Geometry;
use crate::log::{AllocLog, LogError};
use crate::pages::{ArenaKind, PagePolicy, PageSource, PageStats, Watermarks};
use crate::persist::{fence, flush, Site};
use crate::record::{with_len, Record, PAGE};
use crate::run::{Logged, Run, RunKind};
use crate::sync::{lock, AtomicU64, AtomicUsize, Mutex, Ordering};

/// How `free` records a free (the paper's two modes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FreeMode {
    /// Set the exclude bit of the object's record in place, found through the
    /// DRAM index: no log space, one line that may have left the cache.
    #[default]
    Exclude,
    /// Append a `Del` record: sequential writes, log space per free.
    Append,
}

/// Options of a heap (DRAM policy; only `log_words` is part of the format).
#[derive(Clone, Debug)]
pub struct NvwaOptions {
    /// Words of each of the two log areas at format (`None`: 64 per heap page,
    /// at least 4,096: enough for a heap full of 64-byte objects). One live object
    /// takes one word and a run one more; when the live records no longer fit an
    /// area even after a checkpoint, allocations fail with `OutOfSpace` (a heap
    /// of smaller objects needs more).
    pub log_words: Option<u64>,
    /// Arenas (per-thread caches); threads are spread over them round-robin.
    /// `0`: one per available core.
    pub arenas: usize,
    /// Where runs get their pages.
    pub policy: PagePolicy,
    /// The page source's watermarks.
    pub watermarks: Watermarks,
    /// How frees are recorded.
    pub free_mode: FreeMode,
}

impl Default for NvwaOptions {
    fn default() -> Self {
        NvwaOptions {
            log_words: None,
            arenas: 0,
            policy: PagePolicy::Caa { batch: 4 },
            watermarks: Watermarks::default(),
            free_mode: FreeMode::Exclude,
        }
    }
}

/// Figures of a heap.
#[derive(Clone, Debug, Default)]
pub struct NvwaStats {
    /// Live objects.
    pub live_objects: u64,
    /// Their bytes (slot sizes).
    pub live_bytes: u64,
    /// Runs (small and large).
    pub runs: u64,
    /// Log words reserved so far in the active area.
    pub log_used: u64,
    /// Words of one log area.
    pub log_capacity: u64,
    /// Checkpoints since the heap was opened.
    pub checkpoints: u64,
    /// The active log's generation.
    pub generation: u64,
    /// The page source's figures.
    pub pages: PageStats,
}

/// An NVWA heap over a region of a pool. See the module docs.
pub struct Nvwa {
    pool: Arc<Pool>,
    geo: Geometry,
    logs: [AllocLog; 2],
    area: AtomicUsize,
    generation: AtomicU64,
    /// Words of each area that may be non-zero (a checkpoint zeroes them first).
    dirty: [AtomicU64; 2],
    arenas: Box<[Padded<Mutex<Arena>>]>,
    pages: Mutex<PageSource>,
    /// Per heap page: `(arena + 1) << 32 | run id`, or 0.
    owners: Box<[AtomicU64]>,
    checkpointing: Mutex<()>,
    checkpoints: AtomicU64,
    free_mode: FreeMode,
}

impl std::fmt::Debug for Nvwa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvwa")
            .field("geometry", &self.geo)
            .field("arenas", &self.arenas.len())
            .finish_non_exhaustive()
    }
}

/// An arena's lock on cache lines of its own: one arena's lock and log cursor,
/// written on every operation, must not share a line with the next arena's
/// (measured: two threads on neighbouring arenas scaled 1.4×, on arenas four
/// apart 1.9×). 128 bytes: the adjacent-line prefetcher pairs lines.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Why an operation stopped before changing anything.
enum Stop {
    /// The log has no room: checkpoint, then retry.
    LogFull,
    /// No pages for a run: give back empty runs, then retry.
    NoPages(u64),
    /// A real error.
    Err(AllocError),
}

impl From<AllocError> for Stop {
    fn from(e: AllocError) -> Self {
        Stop::Err(e)
    }
}

impl From<PoolError> for Stop {
    fn from(e: PoolError) -> Self {
        Stop::Err(e.into())
    }
}

impl From<LogError> for Stop {
    fn from(e: LogError) -> Self {
        match e {
            LogError::Full { .. } => Stop::LogFull,
            other => Stop::Err(log_error(other)),
        }
    }
}

fn log_error(e: LogError) -> AllocError {
    match e {
        LogError::Pool(p) => p.into(),
        other => AllocError::Corrupt {
            reason: other.to_string(),
        },
    }
}

fn owner_word(arena: usize, id: u32) -> u64 {
    (arena as u64 + 1) << 32 | u64::from(id)
}

thread_local! {
    static ARENA_HINT: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_HINT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The calling thread's arena among `n`: threads are numbered round-robin.
fn my_arena(n: usize) -> usize {
    ARENA_HINT.with(|h| {
        if h.get() == usize::MAX {
            h.set(NEXT_HINT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        }
        h.get() % n
    })
}

fn invalid_free(offset: u64, size: u64, reason: &'static str) -> AllocError {
    AllocError::InvalidFree {
        offset,
        size,
        reason,
    }
}

impl Nvwa {
    /// The heap's geometry.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    fn log(&self) -> &AllocLog {
        &self.logs[self.area.load(Ordering::Relaxed)]
    }

    fn heap_offset(&self, ptr: PPtr<u8>) -> Option<u64> {
        let off = ptr.offset().checked_sub(self.geo.heap_start)?;
        (off < self.geo.heap_pages * PAGE).then_some(off)
    }

    /// The arena and run owning the page of heap offset `off`.
    fn owner_of(&self, off: u64) -> Option<(usize, u32)> {
        let w = self
            .owners
            .get((off / PAGE) as usize)?
            .load(Ordering::Acquire);
        (w != 0).then(|| ((w >> 32) as usize - 1, w as u32))
    }

    fn set_owner(&self, run: &Run, word: u64) {
        for p in run.first_page..run.first_page + run.pages {
            self.owners[p as usize].store(word, Ordering::Release);
        }
    }

    /// Runs `op` on arena `index` under its lock; a full log is checkpointed and
    /// the operation retried, and missing pages are looked for once more after a
    /// checkpoint gives back empty runs.
    fn with_arena<T>(
        &self,
        index: usize,
        size: u64,
        mut op: impl FnMut(&mut Arena) -> Result<T, Stop>,
    ) -> Result<T, AllocError> {
        // Checkpoints this operation asked for; a busy heap can refill a small
        // log between a checkpoint and the retry, so a few are allowed.
        let mut checkpoints = 0;
        let mut reclaimed = false;
        loop {
            let (r, seen) = {
                let mut a = lock(&self.arenas[index]);
                // The log generation the operation ran on (it changes only under
                // every arena's lock).
                (op(&mut a), self.generation.load(Ordering::Relaxed))
            };
            match r {
                Ok(v) => return Ok(v),
                Err(Stop::Err(e)) => return Err(e),
                Err(Stop::LogFull) => {
                    // Another thread that found the same log full may have
                    // checkpointed already: then just retry.
                    let written = self.checkpoint_unless_newer(seen, false)?;
                    let room = written.map(|n| self.geo.log_words.saturating_sub(n));
                    // Room for every arena's next chunk, or the log is too small
                    // for the live set.
                    let slack = self.arenas.len() as u64 * crate::arena::CHUNK + 8;
                    if room.is_some_and(|r| r < slack) || checkpoints == 8 {
                        tracing::warn!(
                            log_words = self.geo.log_words,
                            "nvwa: the live records fill the allocation log even after a checkpoint; format with more log words"
                        );
                        return Err(AllocError::OutOfSpace { requested: size });
                    }
                    checkpoints += u32::from(written.is_some());
                }
                Err(Stop::NoPages(_)) if !reclaimed => {
                    reclaimed = self.checkpoint_unless_newer(seen, true)?.is_some();
                }
                Err(Stop::NoPages(size)) => return Err(AllocError::OutOfSpace { requested: size }),
            }
        }
    }

    /// Takes a slot for `size` bytes in arena `a` (a new run if needed). DRAM only.
    fn place(&self, a: &mut Arena, size: u64) -> Result<(u32, u32), Stop> {
        match Class::of(size) {
            Some(c) => {
                let id = match a.run_with_room(usize::from(c.0)) {
                    Some(id) => id,
                    None => self.new_run(a, RunKind::Small(c), c.run_pages(), size)?,
                };
                let slot = a.run_mut(id).and_then(Run::take).ok_or_else(|| {
                    Stop::Err(AllocError::Corrupt {
                        reason: "a binned run had no free slot".into(),
                    })
                })?;
                Ok((id, slot))
            }
            None => {
                let id = self.new_run(a, RunKind::Large, large_pages(size), size)?;
                let slot = a.run_mut(id).and_then(Run::take).unwrap_or(0);
                Ok((id, slot))
            }
        }
    }

    fn new_run(&self, a: &mut Arena, kind: RunKind, pages: u64, size: u64) -> Result<u32, Stop> {
        let first = lock(&self.pages)
            .take(a.index, ArenaKind::Persistent, pages)
            .ok_or(Stop::NoPages(size))?;
        let run = Run::new(first, pages, kind);
        let id = a.insert(run);
        if let Some(run) = a.run(id) {
            self.set_owner(run, owner_word(a.index, id));
        }
        Ok(id)
    }

    /// Gives a slot taken by `place` back (its operation stopped).
    fn unplace(&self, a: &mut Arena, id: u32, slot: u32) {
        let Some(run) = a.run_mut(id) else {
            return;
        };
        run.put(slot);
        if run.kind == RunKind::Large && run.live == 0 && !run.any_held() {
            self.drop_run(a, id);
        } else {
            a.rebin(id);
        }
    }

    /// Removes an empty run and gives its pages back.
    fn drop_run(&self, a: &mut Arena, id: u32) {
        if let Some(run) = a.remove(id) {
            self.set_owner(&run, 0);
            if let Err(e) = lock(&self.pages).give_back(run.first_page, run.pages) {
                tracing::error!(%e, "nvwa: a run's pages were already free");
            }
        }
    }

    /// The records announcing slot `slot` of run `id` (its `Run` record first if
    /// the run has none yet, then `publish`'s `Pub` record, then the `Obj`,
    /// pending if publishing), stored and flushed. Returns the `Obj` record's
    /// position and, if written, the `Run` record's.
    fn log_object(
        &self,
        a: &mut Arena,
        (id, slot): (u32, u32),
        len: u64,
        publish: Option<u64>,
        site: Site,
    ) -> Result<(u64, Option<u64>), Stop> {
        let pending = publish.is_some();
        let run = a.run(id).ok_or_else(vanished)?;
        // At most three words (run, publication, object): no heap allocation.
        let mut buf = [0u64; 3];
        let mut n = 0;
        let mut reflush = None;
        match (run.kind, run.logged) {
            (RunKind::Small(c), Logged::No) => {
                buf[n] = Record::Run {
                    class: c.id(),
                    pages: run.pages,
                    first_page: run.first_page,
                }
                .encode()
                .map_err(|e| corrupt_record(&e))?;
                n += 1;
            }
            (_, Logged::Unfenced(p)) => reflush = Some(u64::from(p)),
            _ => {}
        }
        let has_run = n == 1;
        if let Some(w) = publish {
            buf[n] = w;
            n += 1;
        }
        buf[n] = Record::Obj {
            offset: run.offset(slot),
            len: record_len(len),
            exclude: false,
            pending,
        }
        .encode()
        .map_err(|e| corrupt_record(&e))?;
        let words = &buf[..=n];
        let log = self.log();
        let at = a.append(&self.pool, log, words)?;
        flush(&self.pool, site, log.offset_of(at), words.len() as u64 * 8)?;
        if let Some(p) = reflush {
            flush(&self.pool, Site::RunReflush, log.offset_of(p), 8)?;
        }
        Ok((at + words.len() as u64 - 1, has_run.then_some(at)))
    }

    /// Finds the live block `ptr` of `size` bytes: its arena, run and slot.
    fn locate(&self, ptr: PPtr<u8>, size: u64) -> Result<(usize, u32), AllocError> {
        let off = self
            .heap_offset(ptr)
            .ok_or_else(|| invalid_free(ptr.offset(), size, "outside the heap"))?;
        self.owner_of(off)
            .ok_or_else(|| invalid_free(ptr.offset(), size, "not in a run"))
    }

    /// The slot of `ptr` in run `id` of `a`, checked against `size`.
    fn slot_of(&self, a: &Arena, id: u32, ptr: PPtr<u8>, size: u64) -> Result<u32, AllocError> {
        let bad = |reason| invalid_free(ptr.offset(), size, reason);
        let run = a.run(id).ok_or_else(|| bad("not in a run"))?;
        let off = self
            .heap_offset(ptr)
            .ok_or_else(|| bad("outside the heap"))?;
        let slot = run
            .slot_at(off)
            .ok_or_else(|| bad("not the start of a block"))?;
        if !run.holds_size(size) {
            return Err(bad("the size does not match the block"));
        }
        Ok(slot)
    }

    /// Writes `word` over position `pos` and flushes it (site `site`).
    fn rewrite(&self, pos: u64, word: u64, site: Site) -> Result<(), Stop> {
        let log = self.log();
        // SAFETY: the position is the record of an object of a run whose arena's
        // lock the caller holds.
        unsafe { log.put(&self.pool, pos, word)? };
        flush(&self.pool, site, log.offset_of(pos), 8)?;
        Ok(())
    }

    /// The word of slot `slot`'s live record in run `run`, with the given bits.
    fn obj_word(&self, run: &Run, slot: u32, exclude: bool, pending: bool) -> Result<u64, Stop> {
        Record::Obj {
            offset: run.offset(slot),
            len: run.len(slot),
            exclude,
            pending,
        }
        .encode()
        .map_err(|e| corrupt_record(&e))
    }

    fn alloc_in(&self, index: usize, size: u64) -> Result<PPtr<u8>, AllocError> {
        if size == 0 || size > crate::record::MAX_LEN {
            return Err(AllocError::InvalidSize { size });
        }
        if self.pool.is_read_only() {
            return Err(PoolError::ReadOnly.into());
        }
        self.with_arena(index, size, |a| {
            let (id, slot) = self.place(a, size)?;
            let (pos, run_pos) = match self.log_object(a, (id, slot), size, None, Site::AllocFlush)
            {
                Ok(p) => p,
                Err(e) => {
                    self.unplace(a, id, slot);
                    return Err(e);
                }
            };
            fence(&self.pool, Site::AllocFence)?;
            let run = a.run_mut(id).ok_or_else(vanished)?;
            if let Some(p) = run_pos {
                run.logged = Logged::Durable(p as u32);
            } else if let Logged::Unfenced(p) = run.logged {
                run.logged = Logged::Durable(p);
            }
            run.set_live(slot, pos as u32, record_len(size));
            Ok(PPtr::from_offset(self.geo.heap_start + run.offset(slot)))
        })
    }

    /// Frees through arena `index`'s lock (the owner of the block's run).
    fn free_in(&self, ptr: PPtr<u8>, size: u64) -> Result<(), AllocError> {
        let (index, id) = self.locate(ptr, size)?;
        let mode = self.free_mode;
        self.with_arena(index, size, |a| {
            let slot = self.slot_of(a, id, ptr, size)?;
            let run = a.run(id).ok_or_else(vanished)?;
            if run.is_held(slot) {
                return Err(invalid_free(ptr.offset(), size, "held by a transaction").into());
            }
            let pos = u64::from(
                run.pos(slot)
                    .ok_or_else(|| invalid_free(ptr.offset(), size, "not allocated"))?,
            );
            match mode {
                FreeMode::Exclude => {
                    let w = self.obj_word(run, slot, true, false)?;
                    self.rewrite(pos, w, Site::FreeFlush)?;
                }
                FreeMode::Append => {
                    let del = Record::Del { position: pos }
                        .encode()
                        .map_err(|e| corrupt_record(&e))?;
                    let log = self.log();
                    let at = a.append(&self.pool, log, &[del])?;
                    flush(&self.pool, Site::FreeFlush, log.offset_of(at), 8)?;
                }
            }
            fence(&self.pool, Site::FreeFence)?;
            self.release_slot(a, id, slot);
            Ok(())
        })
    }

    /// A slot whose record is dead on the media: free in DRAM (a large run goes).
    fn release_slot(&self, a: &mut Arena, id: u32, slot: u32) {
        if let Some(run) = a.run_mut(id) {
            run.clear_live(slot);
        }
        self.unplace(a, id, slot);
    }

    /// Resizes the live block `ptr` of `old` bytes to `new` bytes. Within its size
    /// class (or, for a large block, its pages) only the record's length is
    /// rewritten: one line flush, one fence. Otherwise the block moves: a new one
    /// is allocated, the first `min(old, new)` bytes copied and persisted, and the
    /// old one freed (a crash in between leaks the new block).
    ///
    /// # Safety
    /// As [`PersistentAllocator::free`] for the old block when it moves.
    pub unsafe fn realloc(
        &self,
        ptr: PPtr<u8>,
        old: u64,
        new: u64,
    ) -> Result<PPtr<u8>, AllocError> {
        if new == 0 || new > crate::record::MAX_LEN {
            return Err(AllocError::InvalidSize { size: new });
        }
        let (index, id) = self.locate(ptr, old)?;
        let in_place = self.with_arena(index, new, |a| {
            let slot = self.slot_of(a, id, ptr, old)?;
            let run = a.run(id).ok_or_else(vanished)?;
            let pos = u64::from(
                run.pos(slot)
                    .ok_or_else(|| invalid_free(ptr.offset(), old, "not allocated"))?,
            );
            if !run.holds_size(new) {
                return Ok(false);
            }
            let w = with_len(self.obj_word(run, slot, false, false)?, record_len(new))
                .map_err(|e| corrupt_record(&e))?;
            self.rewrite(pos, w, Site::ReallocFlush)?;
            fence(&self.pool, Site::ReallocFence)?;
            if let Some(run) = a.run_mut(id) {
                run.set_live(slot, pos as u32, record_len(new));
            }
            Ok(true)
        })?;
        if in_place {
            return Ok(ptr);
        }
        let moved = self.alloc(new)?;
        let bytes = self.pool.bytes(ptr.offset(), old.min(new))?.to_vec();
        // SAFETY: the new block is ours alone until returned.
        unsafe { self.pool.write_bytes_shared(moved.offset(), &bytes)? };
        self.pool.persist(moved.offset(), bytes.len() as u64)?;
        // SAFETY: the caller's contract covers the old block.
        unsafe { self.free(ptr, old)? };
        Ok(moved)
    }

    /// `alloc` in arena `arena` (modulo the arena count) instead of the calling
    /// thread's: for benchmarks that interleave arenas deterministically and for
    /// the loom model.
    #[doc(hidden)]
    pub fn alloc_in_arena(&self, arena: usize, size: u64) -> Result<PPtr<u8>, AllocError> {
        self.alloc_in(arena % self.arenas.len(), size)
    }

    /// The length the log records for the live block `ptr` (the size it was
    /// allocated or last resized to, rounded up to 16 bytes), or `None` if `ptr`
    /// does not start a live block.
    pub fn recorded_len(&self, ptr: PPtr<u8>) -> Option<u64> {
        let off = self.heap_offset(ptr)?;
        let (index, id) = self.owner_of(off)?;
        let a = lock(&self.arenas[index]);
        let run = a.run(id)?;
        let slot = run.slot_at(off)?;
        run.pos(slot)?;
        Some(run.len(slot))
    }

    /// The heap's figures (takes every arena's lock in turn).
    pub fn stats(&self) -> NvwaStats {
        let mut s = NvwaStats {
            log_used: self.log().tail().min(self.geo.log_words),
            log_capacity: self.geo.log_words,
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
            generation: self.generation.load(Ordering::Relaxed),
            pages: lock(&self.pages).stats(),
            ..NvwaStats::default()
        };
        for a in self.arenas.iter() {
            let a = lock(a);
            for (_, run) in a.runs() {
                s.runs += 1;
                s.live_objects += u64::from(run.live);
                s.live_bytes += u64::from(run.live) * run.slot_size;
            }
        }
        s
    }
}

/// A run the arena's own state names is gone: a bug, reported, not a panic.
fn vanished() -> Stop {
    Stop::Err(AllocError::Corrupt {
        reason: "a run of the arena vanished".into(),
    })
}

fn corrupt_record(e: &crate::record::RecordError) -> Stop {
    Stop::Err(AllocError::Corrupt {
        reason: e.to_string(),
    })
}
