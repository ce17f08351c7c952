//! The recorder behind a simulated pool.
//!
//! A [`SimDomain`] keeps the trace of a simulated pool: every store made through
//! the pool's write API (split into aligned-word stores; the stores of one write call
//! share a *group*, unordered among themselves), every flush, fence and locked
//! read-modify-write, and the markers the test adds. Each API write is performed
//! while the recorder's lock is held, so the bytes land and the events are recorded
//! as one step: another thread can never see the bytes without the events (or the
//! reverse), and every store is attributed to the thread that issued it.
//!
//! **Raw writes.** Code may also write through references the pool handed out
//! (`get_mut`, `bytes_mut`, `get_shared` atomics). The recorder keeps a *shadow* of
//! the bytes the trace explains, and before each event compares the *watched* ranges
//! of the mapping with it, recording every changed word as a store of one group per
//! scan (so raw writes seen at one event are unordered among themselves), attributed
//! to the thread whose event found them. The watched ranges are those the pool handed
//! out: a `get_mut`/`bytes_mut` range until the next event issued through the pool
//! (which proves the `&mut` borrow ended), a `get_shared` range for the rest of the
//! pool's life. [`crate::Pool::base_ptr`] hands out the whole mapping, so after it
//! every event scans the whole pool (the slow path). The cost of recording therefore
//! follows the lines actually touched, not the pool's size.
//!
//! **Locked read-modify-writes** through [`crate::AtomicPPtr`] and
//! [`crate::ptr::PAtomicU64`] (CAS, swap, fetch-ops, `SeqCst` stores) find the domain
//! of their address in a process-wide registry of attached domains, run under its
//! lock, and are recorded as their store plus [`EventKind::LockedRmw`], a fence of the
//! calling thread.
//!
//! The trace starts from a *durable base*: the pool's bytes when the domain was
//! created, or when [`SimDomain::mark_durable`] was last called (after a test's setup).

use std::cell::Cell;
use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};

use super::event::{word_chunks, Event, EventKind, FlushOp, Loc};
use super::image::Image;
use super::trace::Trace;
use crate::pool::WriteOrder;

/// Default bound on recorded events; beyond it recording stops and the trace says so.
pub const DEFAULT_MAX_EVENTS: usize = 1 << 20;

const LINE: usize = 64;

static NEXT_THREAD: AtomicU16 = AtomicU16::new(0);

thread_local! {
    static THREAD: Cell<Option<u16>> = const { Cell::new(None) };
}

/// A small number for the calling thread, stable for its lifetime.
fn thread_number() -> u16 {
    THREAD.with(|t| match t.get() {
        Some(n) => n,
        None => {
            let n = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
            t.set(Some(n));
            n
        }
    })
}

/// Attached domains by mapping address range, for atomics that know only their own
/// address.
type Registry = Vec<(usize, usize, Weak<SimDomain>)>;
static REGISTRY: RwLock<Registry> = RwLock::new(Vec::new());

/// The attached domain whose mapping holds `addr`, and `addr`'s pool offset.
pub(crate) fn domain_at(addr: usize) -> Option<(Arc<SimDomain>, u64)> {
    let reg = REGISTRY.read().unwrap_or_else(|p| p.into_inner());
    reg.iter()
        .find(|(base, len, _)| addr >= *base && addr < base + len)
        .and_then(|(base, _, d)| d.upgrade().map(|d| (d, (addr - base) as u64)))
}

struct Recorder {
    base: Image,
    /// Lines whose explained bytes differ from (or were checked against) the base.
    shadow: HashMap<usize, [u8; LINE]>,
    events: Vec<Event>,
    /// The pool's mapping while the pool lives (address, length).
    mapping: Option<(usize, usize)>,
    /// Ranges handed out for the pool's life (`get_shared`).
    watched: Vec<(usize, usize)>,
    /// Ranges handed out under `&mut` (`get_mut`, `bytes_mut`), until the next event
    /// issued through the pool.
    transient: Vec<(usize, usize)>,
    /// The whole mapping was handed out (`base_ptr`): scan every line.
    watch_all: bool,
    next_group: u32,
    flush_op: FlushOp,
    max_events: usize,
    overflowed: bool,
    /// Relocations are recorded for the emulated reached bitmap.
    reached_bitmap: bool,
}

/// The recorder of one simulated pool. Shared (`Arc`) between the pool and the test.
pub struct SimDomain {
    inner: Mutex<Recorder>,
}

impl std::fmt::Debug for SimDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.lock();
        f.debug_struct("SimDomain")
            .field("events", &r.events.len())
            .field("attached", &r.mapping.is_some())
            .finish()
    }
}

/// Who issued an event: the pool itself (which proves no `&mut` borrow of it is
/// live, so transient watches can end) or the test's markers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Pool,
    Marker,
}

impl SimDomain {
    /// A recorder of the `len` bytes at `base`, whose durable base is `image` (which
    /// must equal those bytes) or, if `None`, a copy of them.
    ///
    /// # Safety
    /// `base..base + len` must stay mapped and readable until [`SimDomain::detach`].
    pub(crate) unsafe fn attach(
        base: *const u8,
        len: usize,
        image: Option<Image>,
    ) -> Arc<SimDomain> {
        let bytes = match image {
            Some(i) => i,
            // SAFETY: the caller guarantees the range is mapped and readable.
            None => Image::from(unsafe { std::slice::from_raw_parts(base, len) }.to_vec()),
        };
        let domain = Arc::new(SimDomain {
            inner: Mutex::new(Recorder {
                base: bytes,
                shadow: HashMap::new(),
                events: Vec::new(),
                mapping: Some((base as usize, len)),
                watched: Vec::new(),
                transient: Vec::new(),
                watch_all: false,
                next_group: 0,
                flush_op: FlushOp::Clwb,
                max_events: DEFAULT_MAX_EVENTS,
                overflowed: false,
                reached_bitmap: false,
            }),
        });
        let mut reg = REGISTRY.write().unwrap_or_else(|p| p.into_inner());
        reg.retain(|(_, _, d)| d.strong_count() > 0);
        reg.push((base as usize, len, Arc::downgrade(&domain)));
        domain
    }

    fn lock(&self) -> MutexGuard<'_, Recorder> {
        // Every update of the recorder completes before anything can panic, so a
        // poisoned lock still guards a consistent trace.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops reading the mapping (the pool is being dropped).
    pub(crate) fn detach(&self) {
        let mut r = self.lock();
        let loc = Location::caller();
        r.sync_raw(loc);
        if let Some((base, _)) = r.mapping.take() {
            let mut reg = REGISTRY.write().unwrap_or_else(|p| p.into_inner());
            reg.retain(|(b, _, d)| *b != base && d.strong_count() > 0);
        }
    }

    /// Watches `[offset, offset + len)` for raw writes: until the next pool event
    /// (`transient`, a `&mut` borrow) or for the pool's life.
    pub(crate) fn watch(&self, offset: u64, len: u64, transient: bool) {
        let mut r = self.lock();
        let range = (offset as usize, len as usize);
        if transient {
            r.transient.push(range);
        } else if !r.watched.contains(&range) {
            r.watched.push(range);
        }
    }

    /// Watches the whole mapping for the pool's life (raw base pointer handed out).
    pub(crate) fn watch_all(&self) {
        self.lock().watch_all = true;
    }

    /// Performs an API write (`do_write` stores `bytes` at `offset`) and records it,
    /// as one step under the recorder's lock: its stores and, for a relocation while
    /// the domain emulates the reached bitmap, a [`EventKind::Relocate`] marker
    /// naming their group (recorded under the same hold, so it names exactly them).
    pub(crate) fn write<R>(
        &self,
        offset: u64,
        bytes: &[u8],
        nt: bool,
        order: WriteOrder,
        loc: Loc,
        do_write: impl FnOnce() -> R,
    ) -> R {
        let mut r = self.lock();
        r.sync_raw(loc);
        r.transient.clear();
        let result = do_write();
        let mut group = r.new_group();
        for (off, chunk) in word_chunks(offset, bytes) {
            if order == WriteOrder::WordByWord {
                group = r.new_group();
            }
            r.record_store(off, chunk, nt, group, loc);
        }
        if order == WriteOrder::Relocation && r.reached_bitmap && !bytes.is_empty() {
            let len = bytes.len() as u64;
            r.push(EventKind::Relocate { offset, len, group }, loc);
        }
        result
    }

    /// Performs a compare-and-swap of the word at `offset` (`do_cas`, storing `new`
    /// if it wins) and records it, under the recorder's lock: one 8-byte store if
    /// it won, nothing if it lost (the word is unchanged).
    pub(crate) fn cas_word(
        &self,
        offset: u64,
        new: u64,
        loc: Loc,
        do_cas: impl FnOnce() -> Result<u64, u64>,
    ) -> Result<u64, u64> {
        let mut r = self.lock();
        r.sync_raw(loc);
        r.transient.clear();
        let result = do_cas();
        if result.is_ok() {
            let group = r.new_group();
            r.record_store(offset, &new.to_le_bytes(), false, group, loc);
        }
        result
    }

    /// Starts a new reached bitmap (records [`EventKind::ReachedReset`] while the
    /// domain emulates it).
    pub(crate) fn reset_reached(&self, loc: Loc) {
        let mut r = self.lock();
        if r.reached_bitmap {
            r.sync_raw(loc);
            r.push(EventKind::ReachedReset, loc);
        }
    }

    /// Emulates the FFCCD paper's reached bitmap (§4.2; no shipping CPU has it):
    /// from now on [`crate::Pool::relocate_bytes_shared`] records which stores were
    /// relocations, the pool reports [`crate::Pool::tracks_relocation`], and the
    /// crash harness gives each crash image's pool the bitmap of its cut
    /// ([`crate::sim::CrashState::reached`]), as the paper's own fault injection
    /// (§7.1) flushed its emulated bitmap into the image at the crash.
    pub fn emulate_reached_bitmap(&self, on: bool) {
        self.lock().reached_bitmap = on;
    }

    /// Whether the domain emulates the reached bitmap.
    pub fn emulates_reached_bitmap(&self) -> bool {
        self.lock().reached_bitmap
    }

    /// Performs a locked read-modify-write of the word at `offset` (`op`) and records
    /// its store (if the word changed) and the fence it implies.
    pub(crate) fn rmw<R>(&self, offset: u64, loc: Loc, op: impl FnOnce() -> R) -> R {
        let mut r = self.lock();
        r.sync_raw(loc);
        r.transient.clear();
        let result = op();
        // The fence first: a locked instruction's store becomes visible (and can
        // persist) only after the thread's earlier flushes completed.
        r.push(EventKind::LockedRmw { offset }, loc);
        if let Some((base, len)) = r.mapping {
            let o = (offset & !7) as usize;
            if o + 8 <= len {
                // SAFETY: the mapping is live while attached and `o + 8 <= len`; a
                // volatile read forms no reference to memory other threads write.
                let now = unsafe { std::ptr::read_volatile((base + o) as *const [u8; 8]) };
                let before = r.shadow_word(o);
                if now != before {
                    let group = r.new_group();
                    r.record_store(o as u64, &now, false, group, loc);
                }
            }
        }
        result
    }

    /// Records a flush of every line overlapping the range.
    pub(crate) fn flush(&self, offset: u64, len: u64, loc: Loc) {
        if len == 0 {
            return;
        }
        let mut r = self.lock();
        r.sync_raw(loc);
        r.transient.clear();
        let op = r.flush_op;
        let first = offset / 64;
        let last = (offset + len - 1) / 64;
        for line in first..=last {
            r.push(
                EventKind::Flush {
                    line: line * 64,
                    op,
                },
                loc,
            );
        }
    }

    /// Records a fence of the calling thread.
    pub(crate) fn fence(&self, loc: Loc) {
        self.event(EventKind::Fence, Source::Pool, loc);
    }

    /// Chooses which instruction later flushes model (default `clwb`), so a test can
    /// check code written for `clflush` or `clflushopt`.
    pub fn set_flush_op(&self, op: FlushOp) {
        self.lock().flush_op = op;
    }

    /// Bounds the trace (default [`DEFAULT_MAX_EVENTS`]); beyond it recording stops
    /// and the trace is marked overflowed, which the harness reports as a failure.
    pub fn set_max_events(&self, max: usize) {
        self.lock().max_events = max;
    }

    /// Marks the start of operation `n` of the workload. Operation numbers must be
    /// unique within a trace; threads may overlap their operations.
    #[track_caller]
    pub fn begin_op(&self, n: u32) {
        self.event(EventKind::OpBegin(n), Source::Marker, Location::caller());
    }

    /// Marks the end of operation `n`: it completed and its effects must be durable.
    #[track_caller]
    pub fn end_op(&self, n: u32) {
        self.event(EventKind::OpEnd(n), Source::Marker, Location::caller());
    }

    /// Runs `f` as operation `n` (between [`SimDomain::begin_op`] and
    /// [`SimDomain::end_op`]).
    #[track_caller]
    pub fn op<R>(&self, n: u32, f: impl FnOnce() -> R) -> R {
        let loc = Location::caller();
        self.event(EventKind::OpBegin(n), Source::Marker, loc);
        let r = f();
        self.event(EventKind::OpEnd(n), Source::Marker, loc);
        r
    }

    /// Marks a labelled point (a crash point under `CrashPoints::Labels`).
    #[track_caller]
    pub fn label(&self, name: &'static str) {
        self.event(EventKind::Label(name), Source::Marker, Location::caller());
    }

    /// A label issued through the pool (`Pool::label`).
    pub(crate) fn pool_label(&self, name: &'static str, loc: Loc) {
        self.event(EventKind::Label(name), Source::Pool, loc);
    }

    /// Declares `[offset, offset + len)` volatile: the durability lints skip it.
    #[track_caller]
    pub fn volatile_range(&self, offset: u64, len: u64) {
        self.event(
            EventKind::Volatile { offset, len },
            Source::Marker,
            Location::caller(),
        );
    }

    /// Marks `[offset, offset + len)` as covered by a durable log (pool code).
    pub(crate) fn log_covered(&self, offset: u64, len: u64, loc: Loc) {
        self.event(EventKind::LogCovered { offset, len }, Source::Pool, loc);
    }

    /// Marks the calling thread's pending flushes as deliberately unfenced.
    pub(crate) fn defer_flushes(&self, loc: Loc) {
        self.event(EventKind::DeferFlushes, Source::Pool, loc);
    }

    fn event(&self, kind: EventKind, source: Source, loc: Loc) {
        let mut r = self.lock();
        r.sync_raw(loc);
        if source == Source::Pool {
            r.transient.clear();
        }
        r.push(kind, loc);
    }

    /// Makes everything so far the durable base and clears the trace (call it after
    /// a test's setup, so crashes start from a fully persisted initial state).
    #[track_caller]
    pub fn mark_durable(&self) {
        let mut r = self.lock();
        r.sync_raw(Location::caller());
        let shadow = std::mem::take(&mut r.shadow);
        r.base.write_lines(shadow);
        r.events.clear();
        r.overflowed = false;
    }

    /// A copy of the trace so far (durable base and events).
    #[track_caller]
    pub fn trace(&self) -> Trace {
        let mut r = self.lock();
        r.sync_raw(Location::caller());
        Trace {
            base: r.base.clone(),
            events: r.events.clone(),
            overflowed: r.overflowed,
        }
    }

    /// Number of events recorded so far.
    pub fn event_count(&self) -> usize {
        self.lock().events.len()
    }
}

impl Recorder {
    fn push(&mut self, kind: EventKind, loc: Loc) {
        if self.events.len() >= self.max_events {
            self.overflowed = true;
            return;
        }
        self.events.push(Event {
            kind,
            thread: thread_number(),
            loc,
        });
    }

    fn new_group(&mut self) -> u32 {
        let g = self.next_group;
        self.next_group = self.next_group.wrapping_add(1);
        g
    }

    fn shadow_line_mut(&mut self, line: usize) -> &mut [u8; LINE] {
        let base = &self.base;
        self.shadow.entry(line).or_insert_with(|| {
            let mut l = [0u8; LINE];
            l.copy_from_slice(&base[line * LINE..line * LINE + LINE]);
            l
        })
    }

    fn shadow_word(&self, off: usize) -> [u8; 8] {
        let line = off / LINE;
        let at = off % LINE;
        let src = match self.shadow.get(&line) {
            Some(l) => &l[at..at + 8],
            None => &self.base[off..off + 8],
        };
        let mut w = [0u8; 8];
        w.copy_from_slice(src);
        w
    }

    /// Records a word-local store and applies it to the shadow.
    fn record_store(&mut self, off: u64, chunk: &[u8], nt: bool, group: u32, loc: Loc) {
        let o = off as usize;
        let line = self.shadow_line_mut(o / LINE);
        line[o % LINE..o % LINE + chunk.len()].copy_from_slice(chunk);
        let mut value = [0u8; 8];
        value[..chunk.len()].copy_from_slice(chunk);
        self.push(
            EventKind::Store {
                offset: off,
                len: chunk.len() as u8,
                value,
                nt,
                group,
            },
            loc,
        );
    }

    /// Records every word of the watched ranges that differs from the shadow, as one
    /// group of stores.
    fn sync_raw(&mut self, loc: Loc) {
        let Some((base, len)) = self.mapping else {
            return;
        };
        let lines: Vec<usize> = if self.watch_all {
            (0..len / LINE).collect()
        } else {
            let mut v: Vec<usize> = self
                .watched
                .iter()
                .chain(&self.transient)
                .filter(|&&(_, l)| l > 0)
                .flat_map(|&(o, l)| o / LINE..(o + l).div_ceil(LINE).min(len / LINE))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let mut group = None;
        for line in lines {
            let off = line * LINE;
            // SAFETY: the mapping is live while attached (attach's contract) and
            // `off + 64 <= len`; a volatile read forms no reference to memory that
            // the code under test may be writing.
            let now = unsafe { std::ptr::read_volatile((base + off) as *const [u8; LINE]) };
            let same = match self.shadow.get(&line) {
                Some(s) => *s == now,
                None => self.base[off..off + LINE] == now[..],
            };
            if same {
                continue;
            }
            let before = *self.shadow_line_mut(line);
            for w in 0..8 {
                let (new_word, old_word) = (&now[w * 8..w * 8 + 8], &before[w * 8..w * 8 + 8]);
                if new_word == old_word {
                    continue;
                }
                // Record only the bytes that changed, as one word-local store.
                let first = (0..8).find(|&i| new_word[i] != old_word[i]).unwrap_or(0);
                let last = (0..8)
                    .rev()
                    .find(|&i| new_word[i] != old_word[i])
                    .unwrap_or(7);
                let g = match group {
                    Some(g) => g,
                    None => {
                        let g = self.new_group();
                        group = Some(g);
                        g
                    }
                };
                self.record_store(
                    (off + w * 8 + first) as u64,
                    &new_word[first..=last],
                    false,
                    g,
                    loc,
                );
            }
        }
    }
}
