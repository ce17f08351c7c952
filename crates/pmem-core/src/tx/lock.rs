//! [`PMutex`]: a lock that lives in the pool, next to the data it protects, and is
//! free again whenever the pool is reopened.
//!
//! Its word holds `generation << 1 | 1` while locked, where the generation is drawn
//! at random each time a log is opened; a word from an earlier opening (a process
//! that crashed holding the lock) carries another generation and counts as free, so
//! no DRAM side table and no reset pass over the pool are needed. The word is never
//! flushed: its state does not have to survive a crash.

use std::sync::atomic::Ordering;

use zerocopy::{FromBytes, IntoBytes, KnownLayout};

use super::{TxError, TxLog};
use crate::ptr::{PAtomicU64, PPtr};

/// A pool-resident mutex (8 bytes). Its word holds `generation << 1 | 1` while locked, with a generation drawn at each opening of the log, so a lock held when the process died reads as free after reopening.
#[derive(FromBytes, IntoBytes, KnownLayout, Default, Debug)]
#[repr(transparent)]
pub struct PMutex(PAtomicU64);

const _: () = assert!(std::mem::size_of::<PMutex>() == 8);

/// Holds a [`PMutex`]; unlocks on drop.
#[derive(Debug)]
pub struct PMutexGuard<'a> {
    word: &'a PMutex,
}

impl Drop for PMutexGuard<'_> {
    fn drop(&mut self) {
        self.word.0.store(0, Ordering::Release);
    }
}

impl TxLog {
    /// Locks the [`PMutex`] at `p`, spinning (then yielding) while another thread
    /// holds it in this opening of the log.
    ///
    /// # Safety
    /// The 8 bytes at `p` must be accessed only as a `PMutex` (through this method)
    /// while the log is open.
    pub unsafe fn lock(&self, p: PPtr<PMutex>) -> Result<PMutexGuard<'_>, TxError> {
        // SAFETY: the caller keeps every access to these bytes to this type.
        let word = unsafe { self.pool.get_shared(p) }?;
        #[cfg(feature = "sim")]
        if let Some(sim) = self.pool.sim() {
            // The lock word's state need not survive a crash.
            sim.volatile_range(p.offset(), 8);
        }
        let mine = self.generation | 1;
        let mut spins = 0u32;
        loop {
            let cur = word.0.load(Ordering::Relaxed);
            let held = cur & 1 == 1 && cur | 1 == mine;
            if !held
                && word
                    .0
                    .compare_exchange(cur, mine, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return Ok(PMutexGuard { word });
            }
            spins = spins.saturating_add(1);
            if spins > 64 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tx::TxGeometry;
    use crate::{Pool, PoolOptions};
    use std::sync::Arc;

    #[test]
    fn a_stale_lock_from_an_earlier_opening_is_free() {
        let pool = Arc::new(Pool::anonymous(&PoolOptions::new("lock", 1 << 20)).expect("pool"));
        let heap = pool.heap();
        let g = TxGeometry::default();
        let lock_at = heap.start + TxLog::region_size(&g);
        // SAFETY: a fresh pool; the log and the lock word are used only as such.
        let log = unsafe { TxLog::format(Arc::clone(&pool), heap.start, &g, None) }.expect("log");
        let p = PPtr::<PMutex>::from_offset(lock_at);
        // SAFETY: the word is used only as a PMutex.
        let guard = unsafe { log.lock(p) }.expect("lock");
        std::mem::forget(guard); // "crash" while holding it
        drop(log);
        // SAFETY: as above.
        let (log, _) = unsafe { TxLog::open(Arc::clone(&pool), heap.start, None) }.expect("open");
        // SAFETY: as above.
        let g1 = unsafe { log.lock(p) }.expect("the stale lock is free after reopening");
        drop(g1);
        // SAFETY: as above.
        let _g2 = unsafe { log.lock(p) }.expect("and free again after unlock");
    }

    #[test]
    fn two_threads_take_turns() {
        let pool = Arc::new(Pool::anonymous(&PoolOptions::new("lock2", 1 << 20)).expect("pool"));
        let heap = pool.heap();
        let g = TxGeometry::default();
        let at = heap.start + TxLog::region_size(&g);
        // SAFETY: a fresh pool; regions used only as declared.
        let log = unsafe { TxLog::format(Arc::clone(&pool), heap.start, &g, None) }.expect("log");
        let counter = at + 64;
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        // SAFETY: the lock word is used only as a PMutex.
                        let _g = unsafe { log.lock(PPtr::from_offset(at)) }.expect("lock");
                        let v: u64 = pool.read(PPtr::from_offset(counter)).expect("read");
                        // SAFETY: the counter is only touched under the lock.
                        unsafe { pool.write_bytes_shared(counter, &(v + 1).to_le_bytes()) }
                            .expect("write");
                    }
                });
            }
        });
        assert_eq!(
            pool.read(PPtr::<u64>::from_offset(counter)).expect("read"),
            2000
        );
    }
}
