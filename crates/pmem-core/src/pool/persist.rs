//! Making ranges of a pool durable, per its [`DurabilityMode`].
//!
//! | mode | `flush(range)` | `drain()` |
//! | --- | --- | --- |
//! | `Dax` | flush every overlapped cache line | `sfence` (for `clflush` only if a non-temporal store is pending) |
//! | `Msync` | remember the overlapped pages | `msync(MS_SYNC)` every remembered page range |
//! | `Volatile` | nothing | nothing |
//!
//! In `Msync` mode `drain` syncs the pages flushed by every thread, a superset of the
//! calling thread's: never less durable than the per-thread fence semantics of `Dax`.

use super::{DurabilityMode, Pool};
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
        #[cfg(feature = "sim")]
        if let Some(sim) = &self.sim {
            sim.flush(offset, len, std::panic::Location::caller());
        }
        match self.mode {
            DurabilityMode::Dax => {
                // SAFETY: the range is inside the mapping (checked above).
                unsafe { flush::flush_raw(self.addr(offset), len as usize) }
            }
            DurabilityMode::Msync => self.remember_pages(offset, len),
            DurabilityMode::Volatile => {}
        }
        Ok(())
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
            sim.label(name);
        }
        #[cfg(not(feature = "sim"))]
        let _ = name;
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
        match self.mode {
            DurabilityMode::Dax => flush::drain(),
            DurabilityMode::Msync => {
                let ranges = self.lock_pending().take();
                for (start, end) in ranges {
                    self.msync(start, end - start)?;
                }
            }
            DurabilityMode::Volatile => {}
        }
        Ok(())
    }

    fn msync(&self, start: u64, len: u64) -> Result<(), PoolError> {
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
