//! Object locks: a striped table of reader-writer lock words in DRAM, keyed by
//! the offset of what a transaction touches (an object, a slab page's header, a
//! root slot, the root table's names).
//!
//! Why a lock table rather than one heap lock: threads whose transactions touch
//! disjoint objects must commit at the same time, each on its own log lane
//! (pmem-core's `TxHeap::transaction_shared`), and the defragmenter must heal
//! pointer words while transactions run. A transaction takes a lock at its first
//! access to an item (shared to read, exclusive to write or free) and holds it to
//! its commit or rollback (strict two-phase locking), so what it wrote is never
//! seen or overwritten by another running transaction, and its rollback restores
//! bytes nobody else changed.
//!
//! **No-wait.** A lock that another transaction holds in a conflicting mode is
//! not waited for: the access fails with a conflict, the transaction rolls back
//! and the heap retries its closure after a short backoff. So there is no
//! deadlock to detect, and a thread never sleeps holding locks. The healer
//! ([`crate::heal`]) takes the same locks with a `try` and revisits what it could
//! not take.
//!
//! Stripes are hashed from the key: two keys on one stripe conflict (a false
//! conflict costs a retry, never correctness). The table lives in DRAM: nothing
//! about it needs recovery.

use std::sync::atomic::{AtomicU64, Ordering};

use rustc_hash::FxHashMap;
use zerocopy::FromZeros;

/// Stripes in the table (a power of two; 1 MiB of DRAM, a line each).
const STRIPES: usize = 1 << 14;

/// A lock word holding this bit is held exclusively, by the owner in the other
/// bits; without it, the word counts its shared holders.
const EXCLUSIVE: u64 = 1 << 63;

/// Another transaction holds the item in a conflicting mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Conflict;

/// One lock word on a cache line of its own: two threads taking neighbouring
/// stripes do not pull one line back and forth.
#[derive(FromZeros)]
#[repr(C, align(64))]
struct Stripe(AtomicU64);

/// The striped lock words of a heap.
pub(crate) struct LockTable {
    words: Box<[Stripe]>,
}

/// Owner ids handed to threads, one each on first use.
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's owner id, written into the words it holds exclusively (for
    /// debugging a stuck word: nothing compares it). Per thread rather than per
    /// transaction, so starting a transaction touches no shared line.
    static OWNER: u64 = NEXT_OWNER.fetch_add(1, Ordering::Relaxed) & !EXCLUSIVE;
}

impl std::fmt::Debug for LockTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockTable")
            .field("stripes", &self.words.len())
            .finish()
    }
}

/// The locks one transaction (or one healing visit) holds: stripe → exclusive.
#[derive(Debug)]
pub(crate) struct Held {
    owner: u64,
    stripes: FxHashMap<u32, bool>,
}

impl LockTable {
    /// A table with every stripe free.
    pub(crate) fn new() -> LockTable {
        LockTable {
            // Zeroed memory straight from the allocator (every stripe free): a
            // heap is opened once per crash image in the crash suites, so a 1 MiB
            // loop of stores per open would be most of their time.
            words: <[Stripe]>::new_box_zeroed_with_elems(STRIPES).unwrap_or_else(|_| {
                std::alloc::handle_alloc_error(std::alloc::Layout::new::<[Stripe; STRIPES]>())
            }),
        }
    }

    /// A holder with the calling thread's owner id, holding nothing.
    pub(crate) fn holder(&self) -> Held {
        Held {
            owner: OWNER.with(|o| *o),
            stripes: FxHashMap::with_capacity_and_hasher(16, Default::default()),
        }
    }

    fn stripe(key: u64) -> u32 {
        // Fibonacci hashing: neighbouring slots land on different stripes.
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - STRIPES.trailing_zeros())) as u32
    }

    /// Takes the item `key` for `held` (shared, or exclusive if `exclusive`), or
    /// fails at once if another holder has it in a conflicting mode. A shared hold
    /// is upgraded when this holder is the only reader.
    pub(crate) fn acquire(
        &self,
        held: &mut Held,
        key: u64,
        exclusive: bool,
    ) -> Result<(), Conflict> {
        let s = Self::stripe(key);
        let word = &self.words[s as usize].0;
        let mine = EXCLUSIVE | held.owner;
        match held.stripes.get(&s).copied() {
            Some(true) => Ok(()),
            Some(false) if !exclusive => Ok(()),
            Some(false) => {
                // Upgrade: only if this holder is the one reader.
                word.compare_exchange(1, mine, Ordering::Acquire, Ordering::Relaxed)
                    .map_err(|_| Conflict)?;
                held.stripes.insert(s, true);
                Ok(())
            }
            None if exclusive => {
                word.compare_exchange(0, mine, Ordering::Acquire, Ordering::Relaxed)
                    .map_err(|_| Conflict)?;
                held.stripes.insert(s, true);
                Ok(())
            }
            None => {
                let mut cur = word.load(Ordering::Relaxed);
                loop {
                    if cur & EXCLUSIVE != 0 {
                        return Err(Conflict);
                    }
                    match word.compare_exchange_weak(
                        cur,
                        cur + 1,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break,
                        Err(now) => cur = now,
                    }
                }
                held.stripes.insert(s, false);
                Ok(())
            }
        }
    }

    /// Whether `held` holds `key` exclusively.
    #[cfg(test)]
    pub(crate) fn holds_exclusive(&self, held: &Held, key: u64) -> bool {
        held.stripes.get(&Self::stripe(key)).copied() == Some(true)
    }

    /// Releases everything `held` holds (at commit or after rollback).
    pub(crate) fn release_all(&self, held: &mut Held) {
        for (s, exclusive) in held.stripes.drain() {
            let word = &self.words[s as usize].0;
            if exclusive {
                word.store(0, Ordering::Release);
            } else {
                word.fetch_sub(1, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_holds_exclude_writers_and_exclusive_holds_exclude_all() {
        let t = LockTable::new();
        let (mut a, mut b) = (t.holder(), t.holder());
        t.acquire(&mut a, 64, false).expect("free");
        t.acquire(&mut b, 64, false).expect("free");
        assert_eq!(t.acquire(&mut b, 64, true), Err(Conflict), "two readers");
        t.release_all(&mut a);
        t.acquire(&mut b, 64, true).expect("free");
        assert!(t.holds_exclusive(&b, 64));
        assert_eq!(t.acquire(&mut a, 64, false), Err(Conflict));
        assert_eq!(t.acquire(&mut a, 64, true), Err(Conflict));
        t.acquire(&mut b, 64, false).expect("free");
        t.release_all(&mut b);
        t.acquire(&mut a, 64, true).expect("free");
        t.release_all(&mut a);
        assert!(t.words.iter().all(|w| w.0.load(Ordering::Relaxed) == 0));
    }
}
