//! The synchronisation shim of every pmkit crate: std's locks, atomics and
//! `yield_now`, or loom's under `RUSTFLAGS="--cfg loom"` so that the crates' loom
//! models explore the same code; and lock helpers that ignore poisoning (the state
//! behind pmkit's locks is consistent between operations by construction, so a
//! panic elsewhere must not turn every later lock into a second panic).
//!
//! Public for pmkit's own crates, hidden from the documentation: not an API
//! promise.

#[cfg(loom)]
pub use loom::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(not(loom))]
pub use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

#[cfg(loom)]
pub use loom::thread::yield_now;
#[cfg(not(loom))]
pub use std::thread::yield_now;

/// Atomics and fences: std's, or loom's under `--cfg loom`.
pub mod atomic {
    #[cfg(loom)]
    pub use loom::sync::atomic::{
        fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
        Ordering,
    };
    #[cfg(not(loom))]
    pub use std::sync::atomic::{
        fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
        Ordering,
    };
}

/// Locks `m`, ignoring poisoning.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Read-locks `l`, ignoring poisoning.
pub fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

/// Write-locks `l`, ignoring poisoning.
pub fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}
