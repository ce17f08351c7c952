//! The reform operation and its daemon.
//!
//! After many frees, pages hold free units behind their clock position, or a
//! maximum segment larger than the cached `S_MS`. Reform recomputes a bucket's pages
//! when the bucket's average free units exceed its index (`TF_k.avg > k`), restarts
//! each page's clock at its maximum segment (preferring one at or after the current
//! position, so the rotation continues), backs the cache up to the page metadata,
//! and moves the page to its proper bucket. The daemon holds the lock for one pass;
//! allocation and free wait at most that long.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pmem_core::PoolError;

use crate::buckets::BUCKETS;
use crate::heap::{Inner, ReformMode};
use crate::state::{Page, State};

impl Inner {
    /// One reform pass over every bucket whose average free units exceed its index.
    pub fn reform_all(&self, s: &mut State) -> Result<(), PoolError> {
        self.reform_pass(s, false)
    }

    /// A pass that restarts every divided page at its largest free segment: the last
    /// resort of a request that found no room (pages keep their clocks otherwise,
    /// and a page whose rest of run is smaller than the request would never serve
    /// it).
    pub fn reform_restart(&self, s: &mut State) -> Result<(), PoolError> {
        self.reform_pass(s, true)
    }

    fn reform_pass(&self, s: &mut State, restart: bool) -> Result<(), PoolError> {
        let mut wrote = false;
        // Used-up pages start new runs only when free pages run low (under 1/8 of
        // the heap): until then fresh pages spread the writes further.
        let new_runs = restart || u64::from(s.free_count) * 8 < s.pages.len() as u64;
        // Bucket 0 holds pages whose run is used up; while they may not start new
        // runs there is nothing to gain from them, and scanning them every pass
        // would cost time proportional to the heap.
        let first_bucket = usize::from(!new_runs);
        for k in first_bucket..BUCKETS {
            let len = s.buckets.len(k);
            // TF_k.avg > k, without division.
            if len == 0 || (!restart && s.buckets.free_units(k) <= k as u64 * u64::from(len)) {
                continue;
            }
            let pages = s.buckets.pages(k);
            for p in pages {
                let pos = match s.pages[p as usize] {
                    Page::Divided { pos, .. } => u32::from(pos),
                    _ => continue,
                };
                let before = s.pages[p as usize];
                s.reform_page(p, pos, restart, new_runs);
                // Back the cache up only where it differs from media.
                if s.pages[p as usize] != before || s.dirty[p as usize] {
                    self.write_meta(s, p)?;
                    wrote = true;
                }
            }
        }
        if wrote {
            self.pool.drain()?;
        }
        s.frees_since_reform = 0;
        s.daemon_woken = false;
        self.frees.store(0, Ordering::Relaxed);
        Ok(())
    }
}

/// The background reform thread.
pub(crate) struct Daemon {
    handle: JoinHandle<()>,
}

impl Daemon {
    /// Starts the daemon; it holds only a weak reference, so dropping the allocator
    /// stops it.
    pub fn start(inner: &Arc<Inner>) -> std::io::Result<Daemon> {
        let weak: Weak<Inner> = Arc::downgrade(inner);
        let handle = std::thread::Builder::new()
            .name("wafa-reform".into())
            .spawn(move || run(weak))?;
        let _ = inner.daemon_thread.set(handle.thread().clone());
        Ok(Daemon { handle })
    }

    /// Waits for the thread to end (after `stop` was set and it was unparked).
    pub fn join(self) {
        let _ = self.handle.join();
    }
}

/// How often the daemon looks at the free count while frees keep coming.
const POLL: Duration = Duration::from_micros(500);
/// Reform within this long of a free even if fewer than the threshold came; also
/// how long frees must stop before the daemon parks.
const IDLE: Duration = Duration::from_millis(20);

/// While frees keep coming, looks at the free count every [`POLL`] and reforms once
/// it reaches the threshold (or [`IDLE`] after the last pass if any free came);
/// when frees stop for [`IDLE`] it parks, and the next `free` to reach the
/// threshold wakes it (or the park times out after [`IDLE`]). Polling keeps the
/// wake-up system call — several microseconds on a VM — off the allocating thread
/// while it is busy.
fn run(weak: Weak<Inner>) {
    let mut last_pass = Instant::now();
    let mut last_seen = 0u64;
    let mut last_change = Instant::now();
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.stop.load(Ordering::Acquire) {
            return;
        }
        if !matches!(inner.opts.reform, ReformMode::Daemon { .. }) {
            return;
        }
        let frees = inner.frees.load(Ordering::Relaxed);
        if frees >= inner.reform_every || (frees > 0 && last_pass.elapsed() >= IDLE) {
            let mut s = inner.state.lock_patient();
            if s.frees_since_reform > 0 {
                if let Err(e) = inner.reform_all(&mut s) {
                    tracing::warn!(error = %e, "wafa reform failed");
                }
            }
            drop(s);
            last_pass = Instant::now();
        }
        if frees != last_seen {
            last_seen = frees;
            last_change = Instant::now();
        }
        if last_change.elapsed() < IDLE {
            drop(inner);
            std::thread::sleep(POLL);
            continue;
        }
        // Idle: park until a free reaches the threshold. The flag, then a full
        // fence, then the count (the freeing thread stores the count, fences, then
        // reads the flag): one of the two sees the other.
        inner.daemon_parked.store(true, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
        let due = inner.frees.load(Ordering::Relaxed) >= inner.reform_every;
        drop(inner);
        if !due {
            std::thread::park_timeout(IDLE);
        }
        let Some(inner) = weak.upgrade() else { return };
        inner.daemon_parked.store(false, Ordering::Relaxed);
    }
}
