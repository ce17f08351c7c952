//! Typed pool-relative pointers.
//!
//! A [`PPtr<T>`] is a `u64` byte offset from the start of a pool, with `0` as null
//! (offset 0 is the pool header, so no object ever lives there). Being an offset, it
//! stays valid when the pool is mapped at another address in another run. It is
//! dereferenced through [`crate::Pool::get`], which checks bounds and alignment.
//!
//! [`AtomicPPtr<T>`] is the same 8 bytes as an `AtomicU64`: an aligned 8-byte store is
//! the unit of failure atomicity on x86, so storing one and persisting it publishes
//! a new object all-or-nothing ([`crate::Pool::publish`]).
//!
//! [`PAtomicU64`] is a pool-resident `AtomicU64` for counters and version words.
//!
//! All three are zerocopy types (every bit pattern valid, no padding, no DRAM
//! pointers), so they can sit inside pool-resident structs.
//!
//! A locked read-modify-write (compare-exchange, swap, fetch-op) is also a store
//! fence on x86: it orders the thread's earlier `clwb`s, so `clwb node; CAS head`
//! needs no `sfence` between them. So is a `SeqCst` store, which compiles to
//! `xchg`. Under the crash simulator (feature `sim`) the atomics in a simulated pool
//! record these operations as such fences, with the caller's location.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A typed, relocatable pointer into a pool: a little-endian `u64` offset, 0 = null.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(transparent)]
pub struct PPtr<T> {
    offset: u64,
    // `fn() -> T`: covariant, and Send + Sync whatever T is (it owns no T).
    _type: PhantomData<fn() -> T>,
}

const _: () = assert!(std::mem::size_of::<PPtr<[u8; 100]>>() == 8);

impl<T> PPtr<T> {
    /// The null pointer.
    pub const fn null() -> Self {
        PPtr {
            offset: 0,
            _type: PhantomData,
        }
    }

    /// A pointer at byte `offset` of the pool (not checked until dereferenced).
    pub const fn from_offset(offset: u64) -> Self {
        PPtr {
            offset,
            _type: PhantomData,
        }
    }

    /// The byte offset from the start of the pool.
    pub const fn offset(self) -> u64 {
        self.offset
    }

    /// Whether this is the null pointer.
    pub const fn is_null(self) -> bool {
        self.offset == 0
    }

    /// The same offset, viewed as a pointer to `U`.
    pub const fn cast<U>(self) -> PPtr<U> {
        PPtr {
            offset: self.offset,
            _type: PhantomData,
        }
    }

    /// A pointer `bytes` further into the pool, `None` on overflow.
    pub fn byte_add<U>(self, bytes: u64) -> Option<PPtr<U>> {
        self.offset.checked_add(bytes).map(PPtr::from_offset)
    }

    /// The `i`-th element of an array of `T` starting here, `None` on overflow.
    pub fn index(self, i: u64) -> Option<PPtr<T>> {
        let stride = std::mem::size_of::<T>() as u64;
        i.checked_mul(stride).and_then(|b| self.byte_add(b))
    }
}

impl<T> Clone for PPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for PPtr<T> {}
impl<T> PartialEq for PPtr<T> {
    fn eq(&self, other: &Self) -> bool {
        self.offset == other.offset
    }
}
impl<T> Eq for PPtr<T> {}
impl<T> Hash for PPtr<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.offset.hash(state);
    }
}
impl<T> PartialOrd for PPtr<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for PPtr<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.offset.cmp(&other.offset)
    }
}
impl<T> Default for PPtr<T> {
    fn default() -> Self {
        Self::null()
    }
}
impl<T> fmt::Debug for PPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_null() {
            write!(f, "PPtr(null)")
        } else {
            write!(f, "PPtr({:#x})", self.offset)
        }
    }
}

/// An 8-byte atomic [`PPtr`], the unit of failure-atomic publication.
#[derive(FromBytes, IntoBytes, KnownLayout)]
#[repr(transparent)]
pub struct AtomicPPtr<T> {
    offset: AtomicU64,
    _type: PhantomData<fn() -> T>,
}

const _: () = assert!(std::mem::size_of::<AtomicPPtr<u8>>() == 8);
const _: () = assert!(std::mem::align_of::<AtomicPPtr<u8>>() == 8);

impl<T> AtomicPPtr<T> {
    /// A new atomic pointer holding `p` (for building values in DRAM).
    pub const fn new(p: PPtr<T>) -> Self {
        AtomicPPtr {
            offset: AtomicU64::new(p.offset),
            _type: PhantomData,
        }
    }

    /// Loads the pointer.
    pub fn load(&self, order: Ordering) -> PPtr<T> {
        PPtr::from_offset(self.offset.load(order))
    }

    /// Stores `p`. Not durable until the slot is persisted (see [`crate::Pool::publish`]).
    /// With `Ordering::SeqCst` this is a locked `xchg`, a fence.
    #[track_caller]
    pub fn store(&self, p: PPtr<T>, order: Ordering) {
        if order == Ordering::SeqCst {
            locked_rmw(&self.offset, Location::caller(), || {
                self.offset.store(p.offset, order)
            });
        } else {
            self.offset.store(p.offset, order);
        }
    }

    /// Swaps in `p`, returning the previous pointer (a locked RMW: a fence).
    #[track_caller]
    pub fn swap(&self, p: PPtr<T>, order: Ordering) -> PPtr<T> {
        let old = locked_rmw(&self.offset, Location::caller(), || {
            self.offset.swap(p.offset, order)
        });
        PPtr::from_offset(old)
    }

    /// Compare-and-exchange, as [`AtomicU64::compare_exchange`] (a locked RMW: a
    /// fence, whether or not it succeeds).
    #[track_caller]
    pub fn compare_exchange(
        &self,
        current: PPtr<T>,
        new: PPtr<T>,
        success: Ordering,
        failure: Ordering,
    ) -> Result<PPtr<T>, PPtr<T>> {
        locked_rmw(&self.offset, Location::caller(), || {
            self.offset
                .compare_exchange(current.offset, new.offset, success, failure)
        })
        .map(PPtr::from_offset)
        .map_err(PPtr::from_offset)
    }
}

/// Runs a locked read-modify-write of `word`; in a simulated pool, as a recorded
/// store and fence of the calling thread.
#[inline]
fn locked_rmw<R>(word: &AtomicU64, loc: &'static Location<'static>, op: impl FnOnce() -> R) -> R {
    #[cfg(feature = "sim")]
    if let Some((domain, offset)) = crate::sim::domain_at(word.as_ptr() as usize) {
        return domain.rmw(offset, loc, op);
    }
    let _ = (word, loc);
    op()
}

/// A pool-resident `AtomicU64` whose read-modify-writes the crash simulator records
/// as fences (see the [module documentation](self)).
#[derive(FromBytes, IntoBytes, KnownLayout, Default)]
#[repr(transparent)]
pub struct PAtomicU64(AtomicU64);

const _: () = assert!(std::mem::size_of::<PAtomicU64>() == 8);
const _: () = assert!(std::mem::align_of::<PAtomicU64>() == 8);

impl PAtomicU64 {
    /// A new value (for building structures in DRAM).
    pub const fn new(v: u64) -> Self {
        PAtomicU64(AtomicU64::new(v))
    }

    /// Loads the value.
    pub fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }

    /// Stores `v` (with `SeqCst`, a locked `xchg`: a fence).
    #[track_caller]
    pub fn store(&self, v: u64, order: Ordering) {
        if order == Ordering::SeqCst {
            locked_rmw(&self.0, Location::caller(), || self.0.store(v, order));
        } else {
            self.0.store(v, order);
        }
    }

    /// Swaps in `v`, returning the previous value.
    #[track_caller]
    pub fn swap(&self, v: u64, order: Ordering) -> u64 {
        locked_rmw(&self.0, Location::caller(), || self.0.swap(v, order))
    }

    /// Compare-and-exchange, as [`AtomicU64::compare_exchange`].
    #[track_caller]
    pub fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        locked_rmw(&self.0, Location::caller(), || {
            self.0.compare_exchange(current, new, success, failure)
        })
    }

    /// Adds `v` (wrapping), returning the previous value.
    #[track_caller]
    pub fn fetch_add(&self, v: u64, order: Ordering) -> u64 {
        locked_rmw(&self.0, Location::caller(), || self.0.fetch_add(v, order))
    }

    /// Subtracts `v` (wrapping), returning the previous value.
    #[track_caller]
    pub fn fetch_sub(&self, v: u64, order: Ordering) -> u64 {
        locked_rmw(&self.0, Location::caller(), || self.0.fetch_sub(v, order))
    }

    /// Bitwise or, returning the previous value.
    #[track_caller]
    pub fn fetch_or(&self, v: u64, order: Ordering) -> u64 {
        locked_rmw(&self.0, Location::caller(), || self.0.fetch_or(v, order))
    }

    /// Bitwise and, returning the previous value.
    #[track_caller]
    pub fn fetch_and(&self, v: u64, order: Ordering) -> u64 {
        locked_rmw(&self.0, Location::caller(), || self.0.fetch_and(v, order))
    }
}

impl fmt::Debug for PAtomicU64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PAtomicU64({})", self.load(Ordering::Relaxed))
    }
}

impl<T> fmt::Debug for AtomicPPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Atomic{:?}", self.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_cast_and_arithmetic() {
        let p: PPtr<u64> = PPtr::null();
        assert!(p.is_null());
        let q = PPtr::<u64>::from_offset(4096);
        assert_eq!(q.index(3).map(PPtr::offset), Some(4096 + 24));
        assert_eq!(q.byte_add::<u8>(1).map(PPtr::offset), Some(4097));
        assert_eq!(PPtr::<u64>::from_offset(u64::MAX).index(1), None);
        assert_eq!(q.cast::<u32>().offset(), 4096);
        assert_eq!(format!("{p:?} {q:?}"), "PPtr(null) PPtr(0x1000)");
    }

    #[test]
    fn zerocopy_round_trip_is_little_endian() {
        let q = PPtr::<u8>::from_offset(0x0102_0304);
        assert_eq!(q.as_bytes(), &[4, 3, 2, 1, 0, 0, 0, 0]);
        let back = PPtr::<u8>::read_from_bytes(q.as_bytes()).expect("8 bytes");
        assert_eq!(back, q);
    }

    #[test]
    fn atomic_ops() {
        let a = AtomicPPtr::new(PPtr::<u8>::null());
        assert!(a.load(Ordering::Acquire).is_null());
        a.store(PPtr::from_offset(64), Ordering::Release);
        assert_eq!(
            a.swap(PPtr::from_offset(128), Ordering::AcqRel).offset(),
            64
        );
        assert!(a
            .compare_exchange(
                PPtr::from_offset(1),
                PPtr::null(),
                Ordering::AcqRel,
                Ordering::Acquire
            )
            .is_err());
        assert!(a
            .compare_exchange(
                PPtr::from_offset(128),
                PPtr::null(),
                Ordering::AcqRel,
                Ordering::Acquire
            )
            .is_ok());
    }
}
