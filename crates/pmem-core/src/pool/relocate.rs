//! Relocation tracking: the FFCCD paper's `relocate` instruction and persistent
//! *reached bitmap* (§4.2), which let a compactor move objects with no flush or
//! fence on ADR and still recover: after a crash, the bitmap says which relocated
//! lines reached the media.
//!
//! No shipping CPU has them. On a simulated pool whose domain emulates them
//! ([`crate::sim::SimDomain::emulate_reached_bitmap`]) relocations are recorded,
//! and the crash harness gives every crash image's pool the bitmap of its cut
//! ([`crate::sim::Reached`]). Everywhere else [`Pool::tracks_relocation`] is
//! false, a relocation is a plain write and nothing is ever reached: code that
//! needs the bitmap must check for it and fall back (defrag runs SFCCD).

use super::{Pool, WriteOrder};
use crate::PoolError;

impl Pool {
    /// Whether the pool tracks relocations: a simulated pool emulating the reached
    /// bitmap, or a crash image that carries one. False for every real pool.
    pub fn tracks_relocation(&self) -> bool {
        #[cfg(feature = "sim")]
        {
            self.reached.is_some()
                || self
                    .sim
                    .as_ref()
                    .is_some_and(|s| s.emulates_reached_bitmap())
        }
        #[cfg(not(feature = "sim"))]
        false
    }

    /// [`Pool::write_bytes_shared`] as a *relocation*: copies data that is also
    /// at its old place (so a lost copy can be made again) to `offset`, without
    /// flushing. Where the pool tracks relocation, the reached bitmap records
    /// whether each of these stores reaches the media ([`Pool::reached`]).
    ///
    /// # Safety
    /// As for [`Pool::write_bytes_shared`].
    #[track_caller]
    pub unsafe fn relocate_bytes_shared(&self, offset: u64, bytes: &[u8]) -> Result<(), PoolError> {
        // SAFETY: the caller's contract is this one's.
        unsafe { self.copy_shared(offset, bytes, WriteOrder::Relocation) }
    }

    /// Starts a new, empty reached bitmap: relocations before it no longer count
    /// (the paper creates one per compacting phase). Does nothing unless the pool
    /// tracks relocation.
    #[track_caller]
    pub fn reset_reached(&self) {
        #[cfg(feature = "sim")]
        if let Some(sim) = &self.sim {
            sim.reset_reached(std::panic::Location::caller());
        }
    }

    /// After a crash: whether every word of `[offset, offset + len)` was stored by
    /// a relocation since the bitmap's last reset, and the latest such store
    /// reached the media before the crash. False where nothing was relocated, and
    /// always false on a pool that does not carry a bitmap.
    pub fn reached(&self, offset: u64, len: u64) -> bool {
        #[cfg(feature = "sim")]
        if let Some(r) = &self.reached {
            return r.range(offset, len);
        }
        let _ = (offset, len);
        false
    }

    /// Gives the pool the reached bitmap of the crash image it holds (the crash
    /// harness does this; a test building images by hand with
    /// [`crate::sim::CrashState`] can too).
    #[cfg(feature = "sim")]
    pub fn with_reached(mut self, reached: crate::sim::Reached) -> Pool {
        self.reached = Some(std::sync::Arc::new(reached));
        self
    }

    /// The reached bitmap the pool carries, if any.
    #[cfg(feature = "sim")]
    pub fn reached_bitmap(&self) -> Option<&crate::sim::Reached> {
        self.reached.as_deref()
    }
}
