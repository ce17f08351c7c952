//! [`PMutex`]: a structure shared by threads, behind a lock that owns it.
//!
//! Locking gives a guard through which the structure's operations run, each its own
//! transaction on a lane of the log, beside other threads' transactions on other
//! structures: the safe path to concurrent transactions. The lock itself lives in
//! the DRAM handle, never on media: it costs no persistent write, and it is free
//! again whenever the pool is reopened (a process that died holding it holds
//! nothing).
//!
//! A guard cannot outlive its lock:
//!
//! ```compile_fail,E0597
//! # use pmem_collections::{PBox, PHeap, PMutex};
//! # fn f(heap: &PHeap) -> pmem_collections::Result<()> {
//! let guard;
//! {
//!     let m: PMutex<PBox<u64>> = heap.root("shared")?;
//!     guard = m.lock();
//! } // `m` dropped here while still borrowed
//! guard.get(heap)?;
//! # Ok(()) }
//! ```

use pmem_core::tx::Tx;
use pmem_core::PPtr;

use crate::element::{read_u64, Media};
use crate::heap::{Access, Claim, PHeap};
use crate::roots::{sealed::Structure, Container};
use crate::tag::{Kind, Tag, TAG_BYTES};
use crate::Result;

const VERSION: u16 = 1;
/// The block: the tag, then the guarded structure's offset.
const BLOCK: u64 = TAG_BYTES + 8;

/// A structure `T` behind a lock (see the [module documentation](self)). Share it
/// between threads by reference or in an `Arc`.
pub struct PMutex<T: Container> {
    claim: Claim,
    inner: parking_lot::Mutex<T>,
}

impl<T: Container> std::fmt::Debug for PMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PMutex<{}>@{:?}", T::WHAT, self.claim)
    }
}

/// Holds a [`PMutex`]; derefs to the structure; unlocks on drop.
pub struct PMutexGuard<'a, T: Container> {
    guard: parking_lot::MutexGuard<'a, T>,
}

impl<T: Container> std::ops::Deref for PMutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T: Container> std::ops::DerefMut for PMutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T: Container> PMutex<T> {
    /// Locks, waiting while another thread holds the lock.
    pub fn lock(&self) -> PMutexGuard<'_, T> {
        PMutexGuard {
            guard: self.inner.lock(),
        }
    }

    /// Locks if no other thread holds the lock.
    pub fn try_lock(&self) -> Option<PMutexGuard<'_, T>> {
        self.inner.try_lock().map(|guard| PMutexGuard { guard })
    }
}

impl<T: Container> Structure for PMutex<T> {
    const WHAT: &'static str = "PMutex";

    fn tag() -> Tag {
        Tag::new(Kind::Mutex, VERSION, None, None)
    }

    fn create_in(tx: &mut Tx<'_>) -> Result<u64> {
        let inner = T::create_in(tx)?;
        let block = tx.alloc(BLOCK)?;
        tx.write(block.cast::<Tag>(), &Self::tag())?;
        tx.write(PPtr::<u64>::from_offset(block.offset() + TAG_BYTES), &inner)?;
        Ok(block.offset())
    }

    fn open_claimed(heap: &PHeap, claim: Claim) -> Result<Self> {
        let inner_at = read_u64(heap.pool() as &dyn Media, claim.at() + TAG_BYTES)?;
        heap.check_tag(inner_at, &T::tag())?;
        // The guarded structure commits on lanes, beside other threads'.
        let inner = T::open_claimed(heap, heap.claim(inner_at, Access::Shared)?)?;
        Ok(PMutex {
            claim,
            inner: parking_lot::Mutex::new(inner),
        })
    }

    fn destroy_in(self, heap: &PHeap, tx: &mut Tx<'_>) -> Result<()> {
        self.claim.check(heap, "PMutex")?;
        let at = self.claim.at();
        self.inner.into_inner().destroy_in(heap, tx)?;
        Ok(tx.free(PPtr::from_offset(at), BLOCK)?)
    }

    fn offset(&self) -> u64 {
        self.claim.at()
    }
}

impl<T: Container> Container for PMutex<T> {
    fn blocks(&self, heap: &PHeap) -> Result<Vec<u64>> {
        self.claim.check(heap, "PMutex")?;
        let mut out = self.inner.lock().blocks(heap)?;
        out.push(self.claim.at());
        out.sort_unstable();
        Ok(out)
    }
}
