//! Lock and atomic shims (atomics from pmem-core's shared shim): std's (a lock ignores poisoning: the state it guards is
//! consistent between operations by construction), and loom's under `--cfg loom`
//! for the model of the cross-thread free path.

pub(crate) use pmem_core::sync::atomic::{
    AtomicBool, AtomicI64, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use pmem_core::sync::{Mutex, MutexGuard};
/// A lock whose release is a plain store (no locked instruction), yielding the
/// thread while it waits.
#[cfg(not(loom))]
pub(crate) type Mutex<T> = spin::mutex::SpinMutex<T, spin::relax::Yield>;
#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = spin::mutex::SpinMutexGuard<'a, T>;

/// Locks `m`.
#[cfg(not(loom))]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

#[cfg(loom)]
pub(crate) use pmem_core::sync::lock;

/// Locks `m` if it is free.
#[cfg(not(loom))]
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    m.try_lock()
}

/// Locks `m` if it is free, ignoring poisoning.
#[cfg(loom)]
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}
