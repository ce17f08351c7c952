//! Making ranges of a pool durable, per its [`DurabilityMode`].
//!
//! | mode | `flush(range)` | `drain()` |
//! | --- | --- | --- |
//! | `Dax` | flush every overlapped cache line | `sfence` (for `clflush` only if a non-temporal store is pending) |
//! | `Dax`, domain `CpuCache` (eADR) | nothing: the caches are persistent | `sfence`: stores must still be ordered and visible |
//! | `Msync` | remember the overlapped pages | one `msync(MS_SYNC)` over the span of the remembered pages |
//! | `Volatile` | nothing | nothing |
//!
//! In `Msync` mode `drain` syncs the pages flushed by every thread, a superset of the
//! calling thread's: never less durable than the per-thread fence semantics of `Dax`.
//! It issues **one** `msync` over the span from the lowest to the highest pending
//! page, however many separate ranges were flushed: the kernel writes back only the
//! dirty pages of the span, and each `msync` call pays a device cache flush, so one
//! call over two distant pages costs about half of two calls. Dirty pages in the
//! span that no one flushed are written back too (earlier than asked: harmless).
//! A drain returns only when every range flushed (by any thread) before it began is
//! durable: drains are serialised by a drain lock held from taking the pending
//! ranges until they are synced, so a drain that finds nothing pending still waits
//! for a concurrent drain that took its pages. The pending list's own lock is held
//! only briefly, so flushes never wait for an msync. If an msync fails, the ranges
//! not yet synced go back to the pending list (a later drain retries them) and the
//! error is returned.
//!
//! The mode and the [`super::PersistenceDomain`] are folded once, at open, into a
//! [`FlushPath`]: a flush matches on it exactly as it matched on the mode before
//! domains existed, so the ordinary (ADR) path costs nothing more.

use super::mode::FlushPath;
use super::Pool;
use crate::ptr::PPtr;
use crate::{counters, flush, PoolError};

const PAGE: u64 = 4096;
/// Beyond this many disjoint ranges, pending pages collapse into one covering range,
/// so the list stays bounded whatever the flush pattern.
const MAX_PENDING_RANGES: usize = 64;

/// Page ranges flushed in `Msync` mode and not yet drained.
#[derive(Debug, Default)]
pub(crate) struct PendingPages {
    ranges: Vec<(u64, u64)>,
}

impl PendingPages {
    fn add(&mut self, offset: u64, len: u64) {
        let start = offset / PAGE * PAGE;
        let end = (offset + len).div_ceil(PAGE) * PAGE;
        if let Some(last) = self.ranges.last_mut() {
            if start <= last.1 && end >= last.0 {
                *last = (last.0.min(start), last.1.max(end));
                return;
            }
        }
        self.ranges.push((start, end));
        if self.ranges.len() > MAX_PENDING_RANGES {
            let lo = self.ranges.iter().map(|r| r.0).min().unwrap_or(start);
            let hi = self.ranges.iter().map(|r| r.1).max().unwrap_or(end);
            self.ranges.clear();
            self.ranges.push((lo, hi));
        }
    }

    /// The pending ranges, sorted and merged, leaving the set empty.
    fn take(&mut self) -> Vec<(u64, u64)> {
        let mut v = std::mem::take(&mut self.ranges);
        v.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (s, e) in v {
            match out.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => out.push((s, e)),
            }
        }
        out
    }
}

impl Pool {
    /// Starts writing `[offset, offset + len)` back toward media. Not durable until
    /// [`Pool::drain`]. A no-op in `Volatile` mode.
    #[inline]
    #[track_caller]
    pub fn flush(&self, offset: u64, len: u64) -> Result<(), PoolError> {
        self.check_range(offset, len)?;
        match self.flush_path {
            FlushPath::CacheLines => {
                self.sim_flush(offset, len);
                // SAFETY: the range is inside the mapping (checked above).
                unsafe { flush::flush_raw(self.addr(offset), len as usize) }
            }
            FlushPath::Pages => {
                self.sim_flush(offset, len);
                self.remember_pages(offset, len);
            }
            // eADR: no flush instruction, and none recorded, so the simulator proves
            // the code correct without the flushes it elides here.
            FlushPath::FenceOnly => {}
            FlushPath::Nothing => self.sim_flush(offset, len),
        }
        Ok(())
    }

    /// Records a flush with the crash simulator (nothing without it).
    #[inline(always)]
    #[track_caller]
    fn sim_flush(&self, offset: u64, len: u64) {
        #[cfg(feature = "sim")]
        if let Some(sim) = &self.sim {
            sim.flush(offset, len, std::panic::Location::caller());
        }
        #[cfg(not(feature = "sim"))]
        let _ = (offset, len);
    }

    /// Waits until everything flushed so far is durable (as far as the mode allows:
    /// see [`Pool::is_durable`]).
    #[inline]
    #[track_caller]
    pub fn drain(&self) -> Result<(), PoolError> {
        self.drain_result()
    }

    /// [`Pool::flush`] then [`Pool::drain`].
    #[track_caller]
    pub fn persist(&self, offset: u64, len: u64) -> Result<(), PoolError> {
        self.flush(offset, len)?;
        self.drain()
    }

    /// Marks a labelled point in the code under test: a crash point under the crash
    /// simulator's `CrashPoints::Labels`. Does nothing unless the pool is simulated,
    /// and compiles to nothing without the `sim` feature.
    #[inline(always)]
    #[track_caller]
    pub fn label(&self, name: &'static str) {
        #[cfg(feature = "sim")]
        if let Some(sim) = &self.sim {
            sim.pool_label(name, std::panic::Location::caller());
        }
        #[cfg(not(feature = "sim"))]
        let _ = name;
    }

    /// Tells the crash simulator's lints that the stores to `[offset, offset + len)`
    /// are recovered from a log already durable (no effect without the simulator).
    #[track_caller]
    pub(crate) fn sim_log_covered(&self, offset: u64, len: u64) {
        #[cfg(feature = "sim")]
        if let Some(sim) = &self.sim {
            sim.log_covered(offset, len, std::panic::Location::caller());
        }
        #[cfg(not(feature = "sim"))]
        let _ = (offset, len);
    }

    /// Tells the crash simulator's lints that this thread's pending flushes are
    /// left unfenced on purpose (no effect without the simulator).
    #[track_caller]
    pub(crate) fn sim_defer_flushes(&self) {
        #[cfg(feature = "sim")]
        if let Some(sim) = &self.sim {
            sim.defer_flushes(std::panic::Location::caller());
        }
    }

    /// The crash simulator's recorder of a simulated pool.
    #[cfg(feature = "sim")]
    pub fn sim(&self) -> Option<&std::sync::Arc<crate::sim::SimDomain>> {
        self.sim.as_ref()
    }

    /// Persists the `T` that `p` points to.
    #[track_caller]
    pub fn persist_ptr<T>(&self, p: PPtr<T>) -> Result<(), PoolError> {
        self.persist(p.offset(), std::mem::size_of::<T>() as u64)
    }

    #[inline]
    #[track_caller]
    pub(super) fn drain_result(&self) -> Result<(), PoolError> {
        #[cfg(feature = "sim")]
        if let Some(sim) = &self.sim {
            sim.fence(std::panic::Location::caller());
        }
        match self.flush_path {
            FlushPath::CacheLines => flush::drain(),
            FlushPath::FenceOnly => flush::fence(),
            FlushPath::Pages => self.drain_msync()?,
            FlushPath::Nothing => {}
        }
        Ok(())
    }

    /// Msync mode's drain: take the pending ranges and sync them under the drain
    /// lock; on failure put back the ranges not synced and return the error.
    fn drain_msync(&self) -> Result<(), PoolError> {
        // Poisoning: the guarded state is `()`; a panicking drain has put back or
        // synced its ranges or left them for the next drain to find pending anyway.
        let _drain = self.drain_lock.lock().unwrap_or_else(|p| p.into_inner());
        let ranges = self.lock_pending().take();
        let (Some(&(start, _)), Some(&(_, end))) = (ranges.first(), ranges.last()) else {
            return Ok(());
        };
        // `take` sorted and merged the ranges: the span is first start to last end.
        if let Err(e) = self.msync(start, end - start) {
            let mut pending = self.lock_pending();
            for &(s, e) in &ranges {
                pending.add(s, e - s);
            }
            return Err(e);
        }
        Ok(())
    }

    fn msync(&self, start: u64, len: u64) -> Result<(), PoolError> {
        #[cfg(test)]
        if let Some(e) = tests::msync_hook(&self.path, start, len) {
            counters::add_msync();
            return Err(PoolError::io("msync", &self.path, e));
        }
        // SAFETY: `start` is page aligned and `start + len` is within the page-rounded
        // mapping (pool sizes are page multiples); msync only writes back, it changes
        // no bytes of the mapping.
        let rc = unsafe {
            libc::msync(
                self.addr(start).cast::<libc::c_void>(),
                len as usize,
                libc::MS_SYNC,
            )
        };
        counters::add_msync();
        if rc != 0 {
            return Err(PoolError::io(
                "msync",
                &self.path,
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Msync mode: remembers the pages of a range for the next drain.
    pub(super) fn remember_pages(&self, offset: u64, len: u64) {
        self.lock_pending().add(offset, len);
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, PendingPages> {
        // A panic while holding this lock cannot leave the list inconsistent (every
        // update is a single push or replace), so a poisoned lock is still usable.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    type Hook = Arc<dyn Fn(u64, u64) -> Option<std::io::Error> + Send + Sync>;

    /// Fault injection for `msync`, per pool file (tests run in parallel; each hooks
    /// only its own pool). A hook may delay, or return an error instead of syncing.
    static HOOKS: Mutex<Vec<(PathBuf, Hook)>> = Mutex::new(Vec::new());

    pub(super) fn msync_hook(path: &Path, start: u64, len: u64) -> Option<std::io::Error> {
        let hook = HOOKS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, h)| Arc::clone(h))?;
        hook(start, len)
    }

    fn set_hook(path: &Path, hook: Hook) {
        HOOKS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((path.to_path_buf(), hook));
    }

    /// A file pool in `Msync` mode, or `None` if the environment forces another mode.
    fn msync_pool(dir: &tempfile::TempDir) -> Option<Pool> {
        let path = dir.path().join("drain.pool");
        let pool =
            Pool::create(&path, &crate::PoolOptions::new("drain", 64 * 1024)).expect("create pool");
        (pool.mode() == crate::DurabilityMode::Msync).then_some(pool)
    }

    /// Thread A's drain takes B's flushed page and is slow to msync it; B's drain,
    /// started meanwhile, finds nothing pending, yet must not return before A's msync
    /// of B's page completes.
    #[test]
    fn a_drain_waits_for_a_concurrent_drain_syncing_its_pages() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some(pool) = msync_pool(&dir) else { return };
        let pool = Arc::new(pool);
        let page = pool.heap().start;
        let done = Arc::new(AtomicBool::new(false));
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let entered_tx = Mutex::new(Some(entered_tx));
        let d = Arc::clone(&done);
        set_hook(
            pool.path(),
            Arc::new(move |_, _| {
                if let Some(tx) = entered_tx.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    let _ = tx.send(());
                    std::thread::sleep(Duration::from_millis(300));
                    d.store(true, Ordering::SeqCst);
                }
                None
            }),
        );
        // B flushes its page (not yet durable).
        pool.flush(page, 64).expect("flush");
        let a = {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || pool.drain())
        };
        entered_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("A's drain reaches msync");
        // B's drain: its page is being synced by A right now.
        pool.drain().expect("B's drain");
        assert!(
            done.load(Ordering::SeqCst),
            "B's drain returned before A's msync of B's page completed"
        );
        a.join().expect("thread A").expect("A's drain");
    }

    /// A failed msync returns its error and leaves the ranges pending; the next drain
    /// syncs them.
    #[test]
    fn a_failed_msync_keeps_its_ranges_pending() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some(pool) = msync_pool(&dir) else { return };
        let page = pool.heap().start;
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (c, sn) = (Arc::clone(&calls), Arc::clone(&seen));
        set_hook(
            pool.path(),
            Arc::new(move |start, len| {
                sn.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((start, len));
                (c.fetch_add(1, Ordering::SeqCst) == 0)
                    .then(|| std::io::Error::from_raw_os_error(libc::EIO))
            }),
        );
        pool.flush(page, 64).expect("flush");
        pool.flush(page + 3 * PAGE, 64).expect("flush");
        let e = pool.drain().expect_err("the injected failure is reported");
        assert!(matches!(e, PoolError::Io { op: "msync", .. }), "{e}");
        {
            let pending = pool.lock_pending();
            assert!(
                pending.ranges.contains(&(page, page + PAGE))
                    && pending.ranges.contains(&(page + 3 * PAGE, page + 4 * PAGE)),
                "ranges dropped after a failed msync: {:?}",
                pending.ranges
            );
        }
        pool.drain().expect("the retry succeeds");
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // One msync per drain, over the span of both ranges.
        assert_eq!(seen, vec![(page, 4 * PAGE); 2]);
        assert!(pool.lock_pending().ranges.is_empty());
    }

    #[test]
    fn pending_pages_round_and_merge() {
        let mut p = PendingPages::default();
        p.add(10, 10);
        p.add(4000, 200);
        p.add(3 * PAGE + 1, 1);
        p.add(PAGE, 1);
        assert_eq!(p.take(), vec![(0, 2 * PAGE), (3 * PAGE, 4 * PAGE)]);
        assert!(p.take().is_empty());
    }

    #[test]
    fn pending_pages_stay_bounded() {
        let mut p = PendingPages::default();
        for i in 0..1000u64 {
            p.add(i * 2 * PAGE, 1);
        }
        assert!(p.ranges.len() <= MAX_PENDING_RANGES + 1);
        let t = p.take();
        assert_eq!(t.first().map(|r| r.0), Some(0));
        assert_eq!(t.last().map(|r| r.1), Some(999 * 2 * PAGE + PAGE));
    }
}
