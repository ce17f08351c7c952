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
use std::time::Duration;

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

/// Reform within this long of a free even if fewer than the threshold came.
const IDLE: Duration = Duration::from_millis(20);

/// Sleeps until woken by the `free` that reaches the threshold, or for [`IDLE`];
/// reforms if the threshold was reached, or if any free came since the last pass.
/// (The waking thread gave up its bias of the lock first, so taking the lock needs
/// no handshake with it; after a timeout the daemon may have to revoke the bias.)
fn run(weak: Weak<Inner>) {
    loop {
        std::thread::park_timeout(IDLE);
        let Some(inner) = weak.upgrade() else { return };
        if inner.stop.load(Ordering::Acquire) {
            return;
        }
        if !matches!(inner.opts.reform, ReformMode::Daemon { .. }) {
            return;
        }
        // The count is mirrored outside the lock: an idle heap costs no lock.
        if inner.frees.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let mut s = inner.state.lock_guest();
        if s.frees_since_reform > 0 {
            if let Err(e) = inner.reform_all(&mut s) {
                tracing::warn!(error = %e, "wafa reform failed");
            }
        }
    }
}
