//! Making ranges of a pool durable, per its [`DurabilityMode`].
//!
//! | mode | `flush(range)` | `drain()` |
//! | --- | --- | --- |
//! | `Dax` | flush every overlapped cache line | `sfence` (for `clflush` only if a non-temporal store is pending) |
//! | `Dax`, domain `CpuCache` (eADR) | nothing: the caches are persistent | `sfence`: stores must still be ordered and visible |
//! | `Msync` | remember the overlapped pages | one sync of the remembered pages, shared by concurrent drains (group commit) |
//! | `Volatile` | nothing | nothing |
//!
//! In `Msync` mode `drain` syncs the pages flushed by every thread, a superset of the
//! calling thread's: never less durable than the per-thread fence semantics of `Dax`.
//! A sync is by default **one** `msync(MS_SYNC)` over the span from the lowest to the
//! highest pending page, however many separate ranges were flushed: the kernel
//! writes back only the dirty pages of the span, and each call pays a device cache
//! flush, so one call over two distant pages costs about half of two calls. Dirty
//! pages in the span that no one flushed are written back too (earlier than asked:
//! harmless). The alternative, `sync_file_range` per range then one `fdatasync`, is
//! [`super::DrainSync::WriteThenFdatasync`].
//!
//! A drain returns only when every range flushed (by any thread) before it began is
//! durable. Drains are **group-committed** (`group.rs`): a drain that arrives while
//! another is syncing joins the next sync, which one of the waiting drains leads, so
//! N concurrent drainers pay about one device flush per round, not N. The pending
//! list's own lock is held only briefly, so flushes never wait for a sync. If a sync
//! fails, its ranges go back to the pending list (a later drain retries them) and
//! the error is returned to every drain of that group.
//!
//! `PMKIT_GROUP_COMMIT=0` in the environment (read once per pool, when it is opened
//! or created; or [`super::DrainPolicy::serial`] through
//! [`crate::OpenOptions::drain`]) gives the drain before group commit, for A/B runs:
//! drains are serialised by a drain lock held from taking the pending ranges until
//! they are synced, one msync over their span each; a drain that finds nothing
//! pending still waits for a concurrent drain that took its pages.
//! `PMKIT_DRAIN_SYNC=msync|fdatasync` picks the sync calls (see `drain_policy.rs`).

//!
//! The mode and the [`super::PersistenceDomain`] are folded once, at open, into a
//! [`FlushPath`]: a flush matches on it exactly as it matched on the mode before
//! domains existed, so the ordinary (ADR) path costs nothing more.

use super::mode::FlushPath;
use super::{DrainSync, Pool};
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

    /// How this pool's drains sync in `Msync` mode (chosen once, at open).
    pub fn drain_policy(&self) -> super::DrainPolicy {
        self.drain_policy
    }

    /// Msync mode's drain: group-committed (see `group.rs`) unless the policy
    /// asks for the old serialised drain.
    fn drain_msync(&self) -> Result<(), PoolError> {
        if self.drain_policy.group_commit {
            self.group.drain(&self.path, || self.sync_pending())
        } else {
            self.drain_serial()
        }
    }

    /// The drain before group commit (`PMKIT_GROUP_COMMIT=0`): take the pending
    /// ranges and sync them under the drain lock, one sync per drain.
    fn drain_serial(&self) -> Result<(), PoolError> {
        // Poisoning: the guarded state is `()`; a panicking drain has put back or
        // synced its ranges or left them for the next drain to find pending anyway.
        let _drain = self.drain_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.sync_pending()
    }

    /// Takes every pending range and makes it durable with the policy's calls; on
    /// failure puts the ranges back (a later drain retries them) and returns the
    /// error. The caller keeps other drains from returning meanwhile.
    fn sync_pending(&self) -> Result<(), PoolError> {
        let ranges = self.lock_pending().take();
        let (Some(&(start, _)), Some(&(_, end))) = (ranges.first(), ranges.last()) else {
            return Ok(());
        };
        let r = match (self.drain_policy.sync, &self.file) {
            (DrainSync::WriteThenFdatasync, Some(file)) => {
                self.write_back_then_fdatasync(file, &ranges)
            }
            // `take` sorted and merged the ranges: the span is first start to last end.
            _ => self.msync(start, end - start),
        };
        if r.is_err() {
            let mut pending = self.lock_pending();
            for &(s, e) in &ranges {
                pending.add(s, e - s);
            }
        }
        r
    }

    fn msync(&self, start: u64, len: u64) -> Result<(), PoolError> {
        #[cfg(test)]
        if let Some(e) = tests::sync_hook(&self.path, "msync", start, len) {
            counters::add_msync();
            counters::add_device_flush();
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
        // On Linux MS_SYNC ends in vfs_fsync_range: a device cache flush.
        counters::add_device_flush();
        if rc != 0 {
            return Err(PoolError::io(
                "msync",
                &self.path,
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Starts write-back of every range (`sync_file_range(SYNC_FILE_RANGE_WRITE)`,
    /// which returns once the I/O is queued), then waits for it and flushes the
    /// device once with `fdatasync`. The file offsets are the pool offsets (a pool
    /// maps its file from offset 0).
    fn write_back_then_fdatasync(
        &self,
        file: &std::fs::File,
        ranges: &[(u64, u64)],
    ) -> Result<(), PoolError> {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        for &(s, e) in ranges {
            #[cfg(test)]
            if let Some(err) = tests::sync_hook(&self.path, "sync_file_range", s, e - s) {
                return Err(PoolError::io("sync_file_range", &self.path, err));
            }
            // SAFETY: plain syscall on a descriptor the pool owns; it reads no
            // memory of ours. Offsets are below the pool size, so they fit off64_t.
            let rc = unsafe {
                libc::sync_file_range(
                    fd,
                    s as libc::off64_t,
                    (e - s) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
            if rc != 0 {
                return Err(PoolError::io(
                    "sync_file_range",
                    &self.path,
                    std::io::Error::last_os_error(),
                ));
            }
        }
        #[cfg(test)]
        if let Some(err) = tests::sync_hook(&self.path, "fdatasync", 0, 0) {
            counters::add_device_flush();
            return Err(PoolError::io("fdatasync", &self.path, err));
        }
        // `sync_data` is fdatasync(2): waits for the write-back started above (and
        // writes any other dirty page of the file), then flushes the device cache.
        let r = file.sync_data();
        counters::add_device_flush();
        r.map_err(|e| PoolError::io("fdatasync", &self.path, e))
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

    /// A fault hook: called with the call (`msync`, `sync_file_range`, `fdatasync`)
    /// and its range (`0, 0` for `fdatasync`: the whole file).
    type Hook = Arc<dyn Fn(&'static str, u64, u64) -> Option<std::io::Error> + Send + Sync>;

    /// Fault injection for `msync`, `sync_file_range` and `fdatasync`, per pool file
    /// (tests run in parallel; each hooks only its own pool). A hook may delay, or
    /// return an error instead of making the call.
    static HOOKS: Mutex<Vec<(PathBuf, Hook)>> = Mutex::new(Vec::new());

    pub(super) fn sync_hook(
        path: &Path,
        op: &'static str,
        start: u64,
        len: u64,
    ) -> Option<std::io::Error> {
        let hook = HOOKS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, h)| Arc::clone(h))?;
        hook(op, start, len)
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
            Arc::new(move |_, _, _| {
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
            Arc::new(move |_, start, len| {
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

    /// Ranges a hook saw synced, recorded at the end of the hook (after its delay):
    /// `(0, 0)` is the whole file (`fdatasync`).
    type Synced = Arc<Mutex<Vec<(u64, u64)>>>;

    fn covered(synced: &Synced, page: u64) -> bool {
        synced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|&(s, l)| l == 0 || (s <= page && page < s + l))
    }

    /// What one thread of a staged group saw.
    struct Member {
        page: u64,
        result: Result<(), PoolError>,
        /// Whether, when the drain returned, a completed sync covered the page.
        covered_at_return: bool,
        device_flushes: u64,
    }

    /// Stages a group commit: thread 0 flushes its page and leads generation 1,
    /// whose sync is held (by the fault hook) until the 7 other threads have flushed
    /// their pages and are waiting in `drain`; they must all join generation 2,
    /// whose sync is delayed 100 ms (so a drain returning without it is caught), and
    /// fails with EIO if `fail_second`. Returns the pool, the synced ranges and the
    /// 8 members.
    fn staged_group(
        dir: &tempfile::TempDir,
        sync: DrainSync,
        fail_second: bool,
    ) -> Option<(Arc<Pool>, Synced, Vec<Member>, u64)> {
        const THREADS: u64 = 8;
        let mut pool = msync_pool(dir)?;
        pool.drain_policy = super::super::DrainPolicy {
            group_commit: true,
            sync,
        };
        let pool = Arc::new(pool);
        // Creating the pool drained its header: count generations from here.
        let generation_0 = pool.group.started();
        let synced: Synced = Arc::default();
        let device_calls = Arc::new(AtomicUsize::new(0));
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let entered_tx = Mutex::new(entered_tx);
        let weak = Arc::downgrade(&pool);
        let (sn, dc) = (Arc::clone(&synced), Arc::clone(&device_calls));
        set_hook(
            pool.path(),
            Arc::new(move |op, start, len| {
                if op == "sync_file_range" {
                    return None;
                }
                let n = dc.fetch_add(1, Ordering::SeqCst);
                if n == 0 {
                    let _ = entered_tx
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .send(());
                    let t0 = std::time::Instant::now();
                    while weak.upgrade().is_some_and(|p| p.group.waiting() < 7)
                        && t0.elapsed() < Duration::from_secs(10)
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                } else if n == 1 {
                    std::thread::sleep(Duration::from_millis(100));
                    if fail_second {
                        return Some(std::io::Error::from_raw_os_error(libc::EIO));
                    }
                }
                sn.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((start, len));
                None
            }),
        );
        let member = |t: u64| {
            let pool = Arc::clone(&pool);
            let synced = Arc::clone(&synced);
            move || {
                let page = pool.heap().start + t * PAGE;
                let before = counters::Counters::current();
                pool.flush(page, 64).expect("flush");
                let result = pool.drain();
                let covered_at_return = covered(&synced, page);
                Member {
                    page,
                    result,
                    covered_at_return,
                    device_flushes: counters::Counters::since(before).device_flushes,
                }
            }
        };
        let leader = std::thread::spawn(member(0));
        entered_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the leader reaches its sync");
        let others: Vec<_> = (1..THREADS)
            .map(|t| std::thread::spawn(member(t)))
            .collect();
        let mut members = vec![leader.join().expect("leader")];
        members.extend(others.into_iter().map(|h| h.join().expect("member")));
        let generations = pool.group.started() - generation_0;
        Some((pool, synced, members, generations))
    }

    /// 8 threads flush and drain at once: every drain returns Ok, only once a sync
    /// covering its page completed, and the 8 drains cost exactly 2 device flushes
    /// (the leader's, and one for the 7 that arrived while it ran), with either
    /// sync strategy.
    #[test]
    fn eight_concurrent_drains_share_two_device_flushes() {
        for sync in [DrainSync::MsyncSpan, DrainSync::WriteThenFdatasync] {
            let dir = tempfile::tempdir().expect("tempdir");
            let Some((pool, _, members, generations)) = staged_group(&dir, sync, false) else {
                return;
            };
            for m in &members {
                assert!(m.result.is_ok(), "{sync:?}: {:?}", m.result);
                assert!(
                    m.covered_at_return,
                    "{sync:?}: the drain of page {:#x} returned before a sync covering it",
                    m.page
                );
            }
            let flushes: u64 = members.iter().map(|m| m.device_flushes).sum();
            assert_eq!(flushes, 2, "{sync:?}: device flushes for 8 drains");
            assert_eq!(generations, 2, "{sync:?}: generations");
            assert!(pool.lock_pending().ranges.is_empty());
        }
    }

    /// The sync of generation 2 (the 7 threads that waited) fails: every one of the
    /// 7 gets the error (not only the one that led it), their pages stay pending,
    /// and the next drain syncs them. The leader of generation 1 is not a member and
    /// gets Ok.
    #[test]
    fn a_failure_mid_group_reaches_every_member_and_keeps_their_ranges() {
        for sync in [DrainSync::MsyncSpan, DrainSync::WriteThenFdatasync] {
            let dir = tempfile::tempdir().expect("tempdir");
            let Some((pool, synced, members, _)) = staged_group(&dir, sync, true) else {
                return;
            };
            let op = match sync {
                DrainSync::MsyncSpan => "msync",
                DrainSync::WriteThenFdatasync => "fdatasync",
            };
            assert!(members[0].result.is_ok() && members[0].covered_at_return);
            for m in &members[1..] {
                match &m.result {
                    Err(PoolError::Io {
                        op: got,
                        path,
                        source,
                    }) => {
                        assert_eq!(*got, op);
                        assert_eq!(path, pool.path());
                        assert_eq!(source.raw_os_error(), Some(libc::EIO));
                    }
                    other => panic!("{sync:?}: page {:#x}: {other:?}", m.page),
                }
            }
            let flushes: u64 = members.iter().map(|m| m.device_flushes).sum();
            assert_eq!(flushes, 2, "{sync:?}: device flushes");
            {
                let pending = pool.lock_pending();
                for m in &members[1..] {
                    assert!(
                        pending
                            .ranges
                            .iter()
                            .any(|&(s, e)| s <= m.page && m.page < e),
                        "{sync:?}: page {:#x} dropped after the failed sync: {:?}",
                        m.page,
                        pending.ranges
                    );
                }
            }
            for m in &members[1..] {
                assert!(!covered(&synced, m.page) || sync == DrainSync::WriteThenFdatasync);
            }
            pool.drain().expect("the retry succeeds");
            for m in &members[1..] {
                assert!(
                    covered(&synced, m.page),
                    "{sync:?}: retry missed {:#x}",
                    m.page
                );
            }
            assert!(pool.lock_pending().ranges.is_empty());
        }
    }

    /// The property that separates group commit from the serialised drain: the 7
    /// members of generation 2 return when it completes, although thread 0 flushed
    /// again and is draining meanwhile. Generation 3 (thread 0's) is held until all
    /// 7 have returned; the serialised drain fails this (the drain lock keeps the 7
    /// behind the third sync, which one of them would run). 9 drains, 3 flushes.
    #[test]
    fn group_members_do_not_wait_for_later_flushes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some(mut pool) = msync_pool(&dir) else {
            return;
        };
        pool.drain_policy = super::super::DrainPolicy::default();
        let pool = Arc::new(pool);
        let returned = Arc::new(AtomicUsize::new(0));
        let held_until_returned = Arc::new(AtomicBool::new(false));
        let device_calls = Arc::new(AtomicUsize::new(0));
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let entered_tx = Mutex::new(entered_tx);
        // Thread 0 flushes again only once a member leads generation 2 (else it
        // could lead generation 2 itself, before any member wakes).
        let (gen2_tx, gen2_rx) = std::sync::mpsc::channel();
        let gen2_tx = Mutex::new(gen2_tx);
        let weak = Arc::downgrade(&pool);
        let (ret, held, dc) = (
            Arc::clone(&returned),
            Arc::clone(&held_until_returned),
            Arc::clone(&device_calls),
        );
        let wait_until = |cond: &dyn Fn() -> bool| {
            let t0 = std::time::Instant::now();
            while !cond() && t0.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_millis(1));
            }
            cond()
        };
        set_hook(
            pool.path(),
            Arc::new(move |op, _, _| {
                if op == "sync_file_range" {
                    return None;
                }
                let waiting = |n| weak.upgrade().is_some_and(|p| p.group.waiting() >= n);
                match dc.fetch_add(1, Ordering::SeqCst) {
                    0 => {
                        let _ = entered_tx
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .send(());
                        wait_until(&|| waiting(7));
                    }
                    // Until thread 0 has flushed again and waits for generation 3.
                    1 => {
                        let _ = gen2_tx.lock().unwrap_or_else(|p| p.into_inner()).send(());
                        wait_until(&|| waiting(1));
                    }
                    2 => {
                        let all = wait_until(&|| ret.load(Ordering::SeqCst) == 7);
                        held.store(all, Ordering::SeqCst);
                    }
                    _ => {}
                }
                None
            }),
        );
        let counts = Arc::new(AtomicUsize::new(0));
        let drainer = |t: u64, gen2: Option<std::sync::mpsc::Receiver<()>>| {
            let (pool, returned, counts) = (
                Arc::clone(&pool),
                Arc::clone(&returned),
                Arc::clone(&counts),
            );
            move || {
                let page = pool.heap().start + t * PAGE;
                let before = counters::Counters::current();
                pool.flush(page, 64).expect("flush");
                pool.drain().expect("drain");
                if let Some(gen2) = gen2 {
                    gen2.recv_timeout(Duration::from_secs(10))
                        .expect("a member leads generation 2");
                    pool.flush(page, 64).expect("flush");
                    pool.drain().expect("drain");
                }
                if t != 0 {
                    returned.fetch_add(1, Ordering::SeqCst);
                }
                let d = counters::Counters::since(before).device_flushes;
                counts.fetch_add(d as usize, Ordering::SeqCst);
            }
        };
        let first = std::thread::spawn(drainer(0, Some(gen2_rx)));
        entered_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("thread 0 reaches its sync");
        let members: Vec<_> = (1..8)
            .map(|t| std::thread::spawn(drainer(t, None)))
            .collect();
        for m in members {
            m.join().expect("member");
        }
        first.join().expect("thread 0");
        assert!(
            held_until_returned.load(Ordering::SeqCst),
            "the members of generation 2 waited for generation 3"
        );
        assert_eq!(
            counts.load(Ordering::SeqCst),
            3,
            "device flushes for 9 drains"
        );
    }

    /// `PMKIT_GROUP_COMMIT=0` (read at open) gives the old serialised drain: the
    /// policy is `serial`, each sync runs under the drain lock, and the group-commit
    /// state is never used. The check runs in a child process (this test binary,
    /// filtered to `env_switch_child`), so no other test sees the variable.
    #[test]
    fn the_env_switch_gives_the_serial_drain() {
        let exe = std::env::current_exe().expect("test binary");
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "pool::persist::tests::env_switch_child",
                "--nocapture",
            ])
            .env("PMKIT_GROUP_COMMIT", "0")
            .env("PMKIT_TEST_ENV_SWITCH_CHILD", "1")
            .output()
            .expect("run the child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("env switch child ran"), "{stdout}");
    }

    /// The child of [`the_env_switch_gives_the_serial_drain`]; passes at once
    /// unless run as that child.
    #[test]
    fn env_switch_child() {
        if std::env::var_os("PMKIT_TEST_ENV_SWITCH_CHILD").is_none() {
            return;
        }
        println!("env switch child ran");
        let dir = tempfile::tempdir().expect("tempdir");
        let Some(pool) = msync_pool(&dir) else { return };
        assert_eq!(pool.drain_policy(), super::super::DrainPolicy::serial());
        let pool = Arc::new(pool);
        let weak = Arc::downgrade(&pool);
        let under_lock = Arc::new(AtomicUsize::new(0));
        let ul = Arc::clone(&under_lock);
        set_hook(
            pool.path(),
            Arc::new(move |_, _, _| {
                if weak
                    .upgrade()
                    .is_some_and(|p| p.drain_lock.try_lock().is_err())
                {
                    ul.fetch_add(1, Ordering::SeqCst);
                }
                None
            }),
        );
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let pool = Arc::clone(&pool);
                std::thread::spawn(move || {
                    let page = pool.heap().start + t * PAGE;
                    for _ in 0..5 {
                        pool.flush(page, 64).expect("flush");
                        pool.drain().expect("drain");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("drainer");
        }
        assert!(
            under_lock.load(Ordering::SeqCst) >= 1,
            "no sync under the drain lock"
        );
        assert_eq!(
            pool.group.started(),
            0,
            "the serial drain used group commit"
        );
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
