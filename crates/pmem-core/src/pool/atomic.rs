//! Atomic 8-byte access to a pool word: a load and a compare-and-swap that other
//! threads' stores to the same word can neither tear nor lose.
//!
//! Why: a collector that heals pointer words (defrag) runs beside transactions
//! that read and write them. A plain copy (`write_bytes_shared`) of a word that
//! another thread may store to at the same time is a data race; a CAS from the
//! old value to the new one either wins whole or leaves the other thread's value
//! in place, and the crash simulator records it as one 8-byte store (so a crash
//! image holds the word old or new, never torn).

use std::sync::atomic::{AtomicU64, Ordering};

use super::Pool;
use crate::PoolError;

impl Pool {
    /// The 8-aligned word at `offset`, loaded atomically (acquire).
    pub fn load_word(&self, offset: u64) -> Result<u64, PoolError> {
        let a = self.atomic_word(offset, false)?;
        Ok(a.load(Ordering::Acquire))
    }

    /// Replaces the 8-aligned word at `offset` by `new` if it holds `current`,
    /// atomically (acq-rel), without flushing. `Ok(current)` if it did, `Err(found)`
    /// with the value found if not. The simulator records a successful swap as
    /// one 8-byte store.
    ///
    /// # Safety
    /// No reference to the word may be live, and every other thread that
    /// accesses the word at the same time must do so atomically (this method,
    /// [`Pool::load_word`], or the word's owner's exclusive access while no CAS can
    /// run, as a lock arranges).
    #[track_caller]
    pub unsafe fn cas_word_shared(
        &self,
        offset: u64,
        current: u64,
        new: u64,
    ) -> Result<Result<u64, u64>, PoolError> {
        self.check_writable()?;
        let a = self.atomic_word(offset, true)?;
        let swap = || a.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire);
        #[cfg(feature = "sim")]
        if let Some(sim) = &self.sim {
            return Ok(sim.cas_word(offset, new, std::panic::Location::caller(), swap));
        }
        let r = swap();
        if r.is_ok() {
            crate::counters::add_bytes_written(8);
        }
        Ok(r)
    }

    /// The word at `offset` as an atomic, after checking range and alignment.
    fn atomic_word(&self, offset: u64, write: bool) -> Result<&AtomicU64, PoolError> {
        if offset & 7 != 0 {
            return Err(PoolError::Misaligned { offset, align: 8 });
        }
        if write {
            self.check_write_range(offset, 8)?;
        } else {
            self.check_range(offset, 8)?;
        }
        // SAFETY: in bounds (checked) and 8-aligned (checked; the mapping is page
        // aligned); an AtomicU64 has the layout of a u64, and every concurrent
        // access to the word is atomic by the callers' contracts.
        Ok(unsafe { &*self.addr(offset).cast::<AtomicU64>() })
    }
}
