//! The lock around WAFA's DRAM state: a spin lock biased towards one owner thread.
//!
//! A plain lock costs a locked read-modify-write per acquisition (about 10 ns on the
//! benchmark VM, two per alloc/free pair). Most heaps are driven by one thread, so
//! that thread — the *owner*, the first thread to take the lock — enters without
//! one: it sets its `busy` flag, and if the bias is not `revoked` it is in. Every
//! other thread (a *guest*: another allocating thread, the reform daemon) takes a
//! spin lock (`mutex`, yielding between attempts), revokes the bias and waits until
//! the owner is not busy. The owner and a guest form Dekker's handshake (each stores
//! its flag, then reads the other's); x86 may reorder a store before a later load,
//! so both sides need a full barrier in between. The owner's side is only a compiler
//! fence: the guest issues `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which
//! runs a full barrier on every CPU running a thread of the process (the
//! asymmetric-fence pattern of userspace RCU and folly). Where `membarrier` is not
//! available the bias is never granted: every thread takes the spin lock.
//!
//! A revoked owner takes the spin lock like a guest; after [`REBIAS_AFTER`]
//! consecutive acquisitions by the owner with no guest in between, it restores its
//! bias. The loom model (`tests` below, under `--cfg loom`) checks mutual exclusion
//! and the visibility of the protected data with the barriers as `SeqCst` fences.

use pmem_core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};

/// Consecutive owner acquisitions of the spin lock after which it takes the bias
/// back.
pub(crate) const REBIAS_AFTER: u32 = 64;

/// The token of a thread that never becomes the owner (the reform daemon, and a
/// thread whose thread-locals are gone).
pub(crate) const GUEST: u64 = u64::MAX;

/// A lock around a `T` (see the module documentation).
pub(crate) struct BiasedLock<T> {
    data: UnsafeCell<T>,
    /// Token of the owner thread: 0 until the first acquisition claims it, then
    /// never changed.
    owner: AtomicU64,
    /// The owner is in a critical section (or entering one). Written only by the
    /// owner.
    busy: AtomicBool,
    /// The owner must take `mutex`. Written only under `mutex`; true until the
    /// owner first earns its bias.
    revoked: AtomicBool,
    /// The spin lock of guests and of a revoked owner.
    mutex: AtomicBool,
    /// Revocations so far (written under `mutex`, before `revoked`).
    epoch: AtomicU64,
    /// The latest revocation the owner has seen and left the fast path for.
    ack: AtomicU64,
    /// Under `mutex`: consecutive acquisitions of it by the owner.
    streak: AtomicU32,
    /// Whether the bias may be granted (the barrier is available).
    biasable: bool,
}

// SAFETY: the lock hands out `&mut T` to one thread at a time (the handshake in the
// module documentation), so sharing the lock shares `T` by moving exclusive access
// between threads: `T: Send` suffices, as for `std::sync::Mutex`.
unsafe impl<T: Send> Sync for BiasedLock<T> {}
// SAFETY: owning the lock is owning the `T`.
unsafe impl<T: Send> Send for BiasedLock<T> {}

/// Exclusive access to the data; released on drop.
pub(crate) struct Guard<'a, T> {
    lock: &'a BiasedLock<T>,
    /// Entered by the owner's fast path (release = clear `busy`), else holds `mutex`.
    fast: bool,
    /// The holder is the owner (for the rebias count).
    owner: bool,
}

impl<T> BiasedLock<T> {
    /// A lock around `data`, biasable if the barrier is available.
    pub fn new(data: T) -> BiasedLock<T> {
        Self::with_bias(data, barrier::available())
    }

    /// A lock around `data` that grants the bias only if `biasable`.
    pub fn with_bias(data: T, biasable: bool) -> BiasedLock<T> {
        BiasedLock {
            data: UnsafeCell::new(data),
            owner: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            revoked: AtomicBool::new(true),
            mutex: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            ack: AtomicU64::new(0),
            streak: AtomicU32::new(0),
            biasable,
        }
    }

    /// Locks as the calling thread (which becomes the owner if there is none yet).
    #[inline]
    pub fn lock(&self) -> Guard<'_, T> {
        self.lock_as(token())
    }

    /// Locks as a thread that never becomes the owner (the reform daemon).
    pub fn lock_guest(&self) -> Guard<'_, T> {
        self.lock_slow(GUEST)
    }

    /// Called by the owner outside any critical section: gives the bias up, so the
    /// next guest needs neither the owner's acknowledgement nor the heavy barrier
    /// (WAFA calls it before waking the reform daemon). The owner earns the bias
    /// back as usual. Does nothing on any other thread.
    pub fn release_bias(&self) {
        self.release_bias_as(token());
    }

    /// [`BiasedLock::release_bias`] for the thread with token `me`.
    pub fn release_bias_as(&self, me: u64) {
        if self.owner.load(Ordering::Relaxed) != me {
            return;
        }
        self.acquire_mutex();
        if !self.revoked.load(Ordering::Relaxed) {
            // We are not in a critical section (the caller's contract), so no
            // handshake: the mutex's release publishes everything we wrote.
            self.revoked.store(true, Ordering::Relaxed);
        }
        self.streak.store(0, Ordering::Relaxed);
        self.mutex.store(false, Ordering::Release);
    }

    fn acquire_mutex(&self) {
        while self
            .mutex
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.mutex.load(Ordering::Relaxed) {
                relax();
            }
        }
    }

    /// Locks as the thread with token `me` (nonzero).
    #[inline]
    pub fn lock_as(&self, me: u64) -> Guard<'_, T> {
        if self.owner.load(Ordering::Relaxed) == me {
            self.busy.store(true, Ordering::Relaxed);
            barrier::light();
            // Acquire: the guest or slow-path writes before the rebias are visible.
            if !self.revoked.load(Ordering::Acquire) {
                return Guard {
                    lock: self,
                    fast: true,
                    owner: true,
                };
            }
            self.busy.store(false, Ordering::Release);
            // Tell the revoking guest that we are out and will not come back
            // before a rebias (Release: our critical sections happen before).
            self.ack
                .store(self.epoch.load(Ordering::Relaxed), Ordering::Release);
        }
        self.lock_slow(me)
    }

    #[cold]
    fn lock_slow(&self, me: u64) -> Guard<'_, T> {
        self.acquire_mutex();
        let mut owner = self.owner.load(Ordering::Relaxed);
        if owner == 0 && me != GUEST && self.biasable {
            // Claimed under the mutex; the bias still has to be earned.
            self.owner.store(me, Ordering::Relaxed);
            owner = me;
        }
        let is_owner = owner == me;
        if !self.revoked.load(Ordering::Relaxed) {
            // Only a guest gets here (a biased owner took the fast path, and only
            // the owner clears `revoked`, under this mutex): take the bias away,
            // then wait for the owner to leave.
            self.revoke();
        }
        let streak = if is_owner {
            self.streak.load(Ordering::Relaxed).saturating_add(1)
        } else {
            0
        };
        self.streak.store(streak, Ordering::Relaxed);
        Guard {
            lock: self,
            fast: false,
            owner: is_owner,
        }
    }
}

impl<T> BiasedLock<T> {
    /// Takes the bias away (under `mutex`) and waits until the owner is out. An
    /// active owner sees `revoked` at its next acquisition and acknowledges: that
    /// needs no barrier (the acknowledgement is a release store made after the
    /// owner read `revoked`, so its critical sections are over and it will take the
    /// mutex from then on). An owner that does not come back within
    /// [`ACK_WAIT`] yields is fenced with the heavy barrier and its `busy` flag read
    /// (Dekker's handshake).
    #[cold]
    fn revoke(&self) {
        let epoch = self.epoch.load(Ordering::Relaxed) + 1;
        self.epoch.store(epoch, Ordering::Relaxed);
        // Release: an owner that reads `revoked == true` then reads this epoch.
        self.revoked.store(true, Ordering::Release);
        let acked = || self.ack.load(Ordering::Acquire) >= epoch;
        for _ in 0..ACK_WAIT {
            if acked() {
                return;
            }
            relax();
        }
        barrier::heavy();
        while self.busy.load(Ordering::Acquire) {
            relax();
        }
    }
}

/// Yields a revoking guest waits for the owner's acknowledgement before it fences.
#[cfg(not(loom))]
const ACK_WAIT: u32 = 64;
#[cfg(loom)]
const ACK_WAIT: u32 = 1;

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        let l = self.lock;
        if self.fast {
            l.busy.store(false, Ordering::Release);
            return;
        }
        if self.owner && l.streak.load(Ordering::Relaxed) >= REBIAS_AFTER {
            l.streak.store(0, Ordering::Relaxed);
            l.revoked.store(false, Ordering::Release);
        }
        l.mutex.store(false, Ordering::Release);
    }
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard proves exclusive access (module documentation).
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`; `&mut self` keeps the borrow unique.
        unsafe { &mut *self.lock.data.get() }
    }
}

/// Waits a little in a spin loop (yields: a preempted holder gets the CPU back).
fn relax() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// The calling thread's token: a nonzero number unique to the thread.
#[cfg(not(loom))]
#[inline]
fn token() -> u64 {
    use std::cell::Cell;
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    thread_local! {
        static TOKEN: Cell<u64> = const { Cell::new(0) };
    }
    TOKEN
        .try_with(|t| {
            let v = t.get();
            if v != 0 {
                return v;
            }
            let v = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            t.set(v);
            v
        })
        .unwrap_or(GUEST)
}

#[cfg(loom)]
fn token() -> u64 {
    GUEST
}

/// The two sides of the asymmetric barrier.
mod barrier {
    /// The owner's side: keeps the compiler from moving the load of `revoked`
    /// above the store of `busy`; the CPU is fenced by the guest's `heavy`.
    #[inline(always)]
    pub fn light() {
        #[cfg(not(loom))]
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        #[cfg(loom)]
        loom::sync::atomic::fence(loom::sync::atomic::Ordering::SeqCst);
    }

    /// The guest's side: a full barrier on every CPU running a thread of the
    /// process, so the owner's store of `busy` is visible before the guest's load of
    /// it, or the guest's store of `revoked` before the owner's load.
    pub fn heavy() {
        #[cfg(loom)]
        loom::sync::atomic::fence(loom::sync::atomic::Ordering::SeqCst);
        #[cfg(all(not(loom), target_os = "linux"))]
        {
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            if membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 {
                // Registration is per address space and a `fork`ed child starts
                // unregistered: register (again) and retry. The bias was granted,
                // so without the barrier the lock would not exclude the owner.
                if membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0
                    || membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0
                {
                    eprintln!("wafa: membarrier failed after registration; aborting");
                    std::process::abort();
                }
            }
        }
    }

    #[cfg(all(not(loom), target_os = "linux"))]
    fn membarrier(cmd: libc::c_int) -> libc::c_long {
        // SAFETY: the membarrier syscall takes integer arguments and touches no
        // memory of the caller.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) }
    }

    #[cfg(all(not(loom), target_os = "linux"))]
    const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    #[cfg(all(not(loom), target_os = "linux"))]
    const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    /// Whether `heavy` works: registers the process for expedited private
    /// `membarrier` once (Linux 4.14+; a seccomp filter may refuse it).
    pub fn available() -> bool {
        #[cfg(loom)]
        return true;
        #[cfg(all(not(loom), target_os = "linux"))]
        {
            static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            *REGISTERED.get_or_init(|| membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0)
        }
        #[cfg(all(not(loom), not(target_os = "linux")))]
        false
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn owner_earns_the_bias_and_guests_revoke_it() {
        let l = BiasedLock::with_bias(0u64, true);
        for _ in 0..=REBIAS_AFTER {
            *l.lock_as(7) += 1;
        }
        assert!(!l.revoked.load(Ordering::Relaxed), "owner biased");
        *l.lock_as(7) += 1;
        // A guest revokes (its barrier runs even with no other thread).
        *l.lock_as(GUEST) += 1;
        assert!(l.revoked.load(Ordering::Relaxed));
        assert_eq!(l.owner.load(Ordering::Relaxed), 7);
        assert_eq!(*l.lock_as(9), u64::from(REBIAS_AFTER) + 3);
        let unbiasable = BiasedLock::with_bias((), false);
        drop(unbiasable.lock_as(7));
        assert_eq!(unbiasable.owner.load(Ordering::Relaxed), 0);
    }

    /// The owner hammers the fast path while guests take the lock: no increment is
    /// lost (a non-atomic read-modify-write under the lock).
    #[test]
    fn stress_owner_and_guests() {
        let l = Arc::new(BiasedLock::new(0u64));
        let n = 20_000u64;
        // The main thread is the owner.
        *l.lock() += 1;
        let guests: Vec<_> = (0..2)
            .map(|g| {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    for i in 0..n {
                        // One guest like the reform daemon, one like another
                        // allocating thread.
                        if g == 0 {
                            *l.lock_guest() += 1;
                        } else {
                            *l.lock() += 1;
                        }
                        if i % 64 == 0 {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        for i in 0..n * 4 {
            *l.lock() += 1;
            if i % 1000 == 0 {
                l.release_bias();
            }
        }
        for g in guests {
            assert!(g.join().is_ok());
        }
        assert_eq!(*l.lock(), 1 + 6 * n);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// Enters as `me`, checks that no one else is inside, increments the counter
    /// (a loom cell, which flags unsynchronised access) and leaves.
    fn enter(l: &BiasedLock<loom::cell::UnsafeCell<u32>>, inside: &AtomicU32, me: u64) {
        let g = l.lock_as(me);
        assert_eq!(inside.fetch_add(1, Ordering::Relaxed), 0);
        // SAFETY: loom checks that accesses are ordered by the lock.
        g.with_mut(|v| unsafe { *v += 1 });
        inside.fetch_sub(1, Ordering::Relaxed);
    }

    type Counter = BiasedLock<loom::cell::UnsafeCell<u32>>;

    /// A lock whose owner (token 1) has entered once and earned its bias, the
    /// "inside" count, and a guest thread entering concurrently.
    fn biased_with_guest() -> (Arc<Counter>, Arc<AtomicU32>, loom::thread::JoinHandle<()>) {
        let l = Arc::new(BiasedLock::with_bias(
            loom::cell::UnsafeCell::new(0u32),
            true,
        ));
        let inside = Arc::new(AtomicU32::new(0));
        l.streak.store(REBIAS_AFTER - 1, Ordering::Relaxed);
        enter(&l, &inside, 1);
        assert!(!l.revoked.load(Ordering::Relaxed));
        let (l2, i2) = (Arc::clone(&l), Arc::clone(&inside));
        let guest = loom::thread::spawn(move || enter(&l2, &i2, GUEST));
        (l, inside, guest)
    }

    /// Joins the guest and checks that all four increments happened.
    fn four_increments(l: &Counter, guest: loom::thread::JoinHandle<()>) {
        assert!(guest.join().is_ok());
        let g = l.lock_as(GUEST);
        // SAFETY: loom checks that accesses are ordered by the lock.
        assert_eq!(g.with(|v| unsafe { *v }), 4);
    }

    /// An owner (token 1, bias granted after one acquisition) and a guest each
    /// increment a counter held in a loom cell (which flags unsynchronised access)
    /// and check that no one else is inside.
    #[test]
    fn owner_and_guest_exclude_each_other() {
        loom::model(|| {
            let (l, inside, guest) = biased_with_guest();
            enter(&l, &inside, 1);
            enter(&l, &inside, 1);
            four_increments(&l, guest);
        });
    }

    /// The owner gives its bias up between two critical sections while a guest
    /// takes the lock.
    #[test]
    fn released_bias_needs_no_handshake() {
        loom::model(|| {
            let (l, inside, guest) = biased_with_guest();
            enter(&l, &inside, 1);
            l.release_bias_as(1);
            enter(&l, &inside, 1);
            four_increments(&l, guest);
        });
    }
}
