//! Per-thread persistence counters.
//!
//! Every flush, fence, msync and byte written through a pool's write API bumps a
//! counter in a thread-local cell: one TLS access and an add, no atomics, so the
//! counters stay on in release builds. The NVM-write economy of every crate in the
//! workspace is reported from these (flushes per insert, fences per allocation, ...).
//!
//! Counters are per thread: take a [`Counters::current`] snapshot before and after the
//! work on the same thread and subtract, or use [`Counters::measure`].
//! Writes made through plain references into a mapping (`get_mut`) are not seen here;
//! only [`crate::Pool`]'s write API counts bytes.

use std::cell::Cell;
use std::ops::Sub;

/// A snapshot (or a delta) of one thread's persistence counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Cache lines handed to a flush instruction (`clwb`/`clflushopt`/`clflush`).
    pub lines_flushed: u64,
    /// Store fences issued (`sfence`); `clflush` needs none, so none is counted for it
    /// unless a non-temporal store was pending (see [`crate::flush::drain`]).
    pub fences: u64,
    /// `msync` calls made to make page-cache ranges durable.
    pub msyncs: u64,
    /// Calls that flush the storage device's cache to make page-cache data durable:
    /// each `msync(MS_SYNC)` (on Linux it ends in `vfs_fsync_range`) and each
    /// `fdatasync`. With group commit, concurrent drains share one.
    pub device_flushes: u64,
    /// Bytes written through a pool's write API.
    pub bytes_written: u64,
}

thread_local! {
    static COUNTS: Cell<Counters> = const { Cell::new(Counters {
        lines_flushed: 0,
        fences: 0,
        msyncs: 0,
        device_flushes: 0,
        bytes_written: 0,
    }) };
}

#[inline(always)]
fn bump(f: impl FnOnce(&mut Counters)) {
    // `try_with` so that flushing from a thread-local destructor never panics.
    let _ = COUNTS.try_with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
}

#[inline(always)]
pub(crate) fn add_lines_flushed(n: u64) {
    bump(|c| c.lines_flushed += n);
}

#[inline(always)]
pub(crate) fn add_fence() {
    bump(|c| c.fences += 1);
}

#[inline(always)]
pub(crate) fn add_msync() {
    bump(|c| c.msyncs += 1);
}

#[inline(always)]
pub(crate) fn add_device_flush() {
    bump(|c| c.device_flushes += 1);
}

#[inline(always)]
pub(crate) fn add_bytes_written(n: u64) {
    bump(|c| c.bytes_written += n);
}

impl Counters {
    /// The calling thread's counters since it started.
    pub fn current() -> Counters {
        COUNTS.try_with(Cell::get).unwrap_or_default()
    }

    /// The counters accumulated since `earlier` (a snapshot from the same thread).
    pub fn since(earlier: Counters) -> Counters {
        Counters::current() - earlier
    }

    /// Runs `f` and returns its result with the counters it accumulated on this thread.
    pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Counters) {
        let before = Counters::current();
        let r = f();
        (r, Counters::since(before))
    }
}

impl Sub for Counters {
    type Output = Counters;

    /// Field-wise difference, saturating at zero so a mismatched pair of snapshots
    /// cannot wrap around.
    fn sub(self, rhs: Counters) -> Counters {
        Counters {
            lines_flushed: self.lines_flushed.saturating_sub(rhs.lines_flushed),
            fences: self.fences.saturating_sub(rhs.fences),
            msyncs: self.msyncs.saturating_sub(rhs.msyncs),
            device_flushes: self.device_flushes.saturating_sub(rhs.device_flushes),
            bytes_written: self.bytes_written.saturating_sub(rhs.bytes_written),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_counts_only_this_threads_work() {
        let before = Counters::current();
        add_lines_flushed(3);
        add_fence();
        add_msync();
        add_device_flush();
        add_bytes_written(100);
        std::thread::spawn(|| add_lines_flushed(1000))
            .join()
            .expect("helper thread");
        let d = Counters::since(before);
        assert_eq!(
            d,
            Counters {
                lines_flushed: 3,
                fences: 1,
                msyncs: 1,
                device_flushes: 1,
                bytes_written: 100
            }
        );
    }

    #[test]
    fn measure_returns_result_and_delta() {
        let (v, d) = Counters::measure(|| {
            add_fence();
            7
        });
        assert_eq!(v, 7);
        assert_eq!(d.fences, 1);
        assert_eq!(d.lines_flushed, 0);
    }
}
