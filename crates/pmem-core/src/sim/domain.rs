//! The recorder behind a simulated pool.
//!
//! A [`SimDomain`] keeps the trace of a simulated pool: every store made through
//! the pool's write API (split into aligned-word stores, in address order, as a
//! `memcpy` issues them), every flush and fence, and the markers the test adds. It
//! also keeps a *shadow* of the pool's bytes as the trace explains them; before each
//! event it compares the mapping with the shadow, and records every 8-byte word that
//! changed behind its back (writes through `get_mut`, `bytes_mut`, atomics) as a store
//! at the location of that event. Such raw writes are therefore seen at the
//! granularity of persistence events, in address order: when the order of stores
//! inside one cache line matters, write through the pool's write API.
//!
//! The trace starts from a *durable base*: the pool's bytes when the domain was
//! created, or when [`SimDomain::mark_durable`] was last called (after a test's setup).

use std::cell::Cell;
use std::panic::Location;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::event::{word_chunks, Event, EventKind, FlushOp, Loc};
use super::trace::Trace;

/// Default bound on recorded events; beyond it recording stops and the trace says so.
pub const DEFAULT_MAX_EVENTS: usize = 1 << 20;

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

struct Recorder {
    base: Vec<u8>,
    shadow: Vec<u8>,
    events: Vec<Event>,
    /// The pool's mapping while the pool lives (address, length).
    mapping: Option<(usize, usize)>,
    flush_op: FlushOp,
    max_events: usize,
    overflowed: bool,
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

impl SimDomain {
    /// A recorder whose durable base is the `len` bytes at `base`.
    ///
    /// # Safety
    /// `base..base + len` must stay mapped and readable until [`SimDomain::detach`].
    pub(crate) unsafe fn attach(base: *const u8, len: usize) -> Arc<SimDomain> {
        // SAFETY: the caller guarantees the range is mapped and readable.
        let bytes = unsafe { std::slice::from_raw_parts(base, len) }.to_vec();
        Arc::new(SimDomain {
            inner: Mutex::new(Recorder {
                base: bytes.clone(),
                shadow: bytes,
                events: Vec::new(),
                mapping: Some((base as usize, len)),
                flush_op: FlushOp::Clwb,
                max_events: DEFAULT_MAX_EVENTS,
                overflowed: false,
            }),
        })
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
        r.mapping = None;
    }

    /// Records a store through the write API (before the bytes are written).
    pub(crate) fn store(&self, offset: u64, bytes: &[u8], nt: bool, loc: Loc) {
        let mut r = self.lock();
        r.sync_raw(loc);
        for (off, chunk) in word_chunks(offset, bytes) {
            let mut value = [0u8; 8];
            value[..chunk.len()].copy_from_slice(chunk);
            let start = off as usize;
            r.shadow[start..start + chunk.len()].copy_from_slice(chunk);
            r.push(
                EventKind::Store {
                    offset: off,
                    len: chunk.len() as u8,
                    value,
                    nt,
                },
                loc,
            );
        }
    }

    /// Records a flush of every line overlapping the range.
    pub(crate) fn flush(&self, offset: u64, len: u64, loc: Loc) {
        if len == 0 {
            return;
        }
        let mut r = self.lock();
        r.sync_raw(loc);
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
        let mut r = self.lock();
        r.sync_raw(loc);
        r.push(EventKind::Fence, loc);
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

    /// Marks the start of operation `n` of the workload.
    #[track_caller]
    pub fn begin_op(&self, n: u32) {
        self.marker(EventKind::OpBegin(n), Location::caller());
    }

    /// Marks the end of operation `n`: it completed and its effects must be durable.
    #[track_caller]
    pub fn end_op(&self, n: u32) {
        self.marker(EventKind::OpEnd(n), Location::caller());
    }

    /// Runs `f` as operation `n` (between [`SimDomain::begin_op`] and
    /// [`SimDomain::end_op`]).
    #[track_caller]
    pub fn op<R>(&self, n: u32, f: impl FnOnce() -> R) -> R {
        let loc = Location::caller();
        self.marker(EventKind::OpBegin(n), loc);
        let r = f();
        self.marker(EventKind::OpEnd(n), loc);
        r
    }

    /// Marks a labelled point (a crash point under `CrashPoints::Labels`).
    #[track_caller]
    pub fn label(&self, name: &'static str) {
        self.marker(EventKind::Label(name), Location::caller());
    }

    /// Declares `[offset, offset + len)` volatile: the durability lints skip it.
    #[track_caller]
    pub fn volatile_range(&self, offset: u64, len: u64) {
        self.marker(EventKind::Volatile { offset, len }, Location::caller());
    }

    fn marker(&self, kind: EventKind, loc: Loc) {
        let mut r = self.lock();
        r.sync_raw(loc);
        r.push(kind, loc);
    }

    /// Makes everything so far the durable base and clears the trace (call it after
    /// a test's setup, so crashes start from a fully persisted initial state).
    #[track_caller]
    pub fn mark_durable(&self) {
        let mut r = self.lock();
        r.sync_raw(Location::caller());
        r.base = r.shadow.clone();
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

    /// Records every word of the mapping that differs from the shadow as a store.
    /// Compares a cache line at a time and looks at words only in changed lines.
    fn sync_raw(&mut self, loc: Loc) {
        let Some((base, len)) = self.mapping else {
            return;
        };
        for line in 0..len / 64 {
            let off = line * 64;
            // SAFETY: the mapping is live while attached (attach's contract) and
            // `off + 64 <= len`; a volatile read forms no reference to memory that
            // the code under test may be writing.
            let now = unsafe { std::ptr::read_volatile((base + off) as *const [u8; 64]) };
            if now[..] == self.shadow[off..off + 64] {
                continue;
            }
            for w in 0..8 {
                let o = off + w * 8;
                let new_word = &now[w * 8..w * 8 + 8];
                if new_word == &self.shadow[o..o + 8] {
                    continue;
                }
                let before: [u8; 8] = self.shadow[o..o + 8].try_into().unwrap_or([0; 8]);
                self.shadow[o..o + 8].copy_from_slice(new_word);
                // Record only the bytes that changed, as one word-local store.
                let first = (0..8).find(|&i| new_word[i] != before[i]).unwrap_or(0);
                let last = (0..8)
                    .rev()
                    .find(|&i| new_word[i] != before[i])
                    .unwrap_or(7);
                let mut value = [0u8; 8];
                value[..=last - first].copy_from_slice(&new_word[first..=last]);
                self.push(
                    EventKind::Store {
                        offset: (o + first) as u64,
                        len: (last - first + 1) as u8,
                        value,
                        nt: false,
                    },
                    loc,
                );
            }
        }
    }
}
