//! A thread's home section: the section it last allocated from, tried first by
//! its next allocation.
//!
//! The hint is what spreads threads over sections without a shared structure: a
//! thread keeps allocating where it last succeeded, and moves on only when that
//! section is full or another thread holds its lock at that moment. Two threads
//! that start in the same section part after their first collision (the loser
//! finds another section and makes it its home), and then each works under its
//! own section's lock.
//!
//! It is a hint and nothing more: the heap checks it (the index is in range, the
//! section has a carver under its lock) before using it, so a stale one — from a
//! section reclaimed since, or from another heap that lived at the same address —
//! costs a failed attempt, never a wrong block. One slot per thread (not per
//! heap): a thread that allocates from two heaps in turn loses its hint each
//! time it switches, which is correct and only slower.
//!
//! The thread-local is a `Cell` with a constant initializer and no destructor:
//! reading it never allocates, which matters on the allocation path of a global
//! allocator. Under loom it is loom's thread-local, so that each modelled thread
//! has its own.

use std::cell::Cell;

/// No home: the index part of an empty hint.
const NONE: usize = usize::MAX;

#[cfg(not(loom))]
std::thread_local! {
    /// (the heap's address, the section index).
    static HOME: Cell<(usize, usize)> = const { Cell::new((0, NONE)) };
}

#[cfg(loom)]
loom::thread_local! {
    static HOME: Cell<(usize, usize)> = Cell::new((0, NONE));
}

/// The calling thread's home section in the heap at address `heap`, if it has
/// one there.
pub(super) fn get(heap: usize) -> Option<usize> {
    HOME.try_with(Cell::get)
        .ok()
        .and_then(|(h, i)| (h == heap && i != NONE).then_some(i))
}

/// Makes `index` the calling thread's home section in the heap at `heap`.
pub(super) fn set(heap: usize, index: usize) {
    let _ = HOME.try_with(|c| c.set((heap, index)));
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_hint_is_per_thread_and_per_heap() {
        assert_eq!(get(0x1000), None);
        set(0x1000, 7);
        assert_eq!(get(0x1000), Some(7));
        assert_eq!(get(0x2000), None, "another heap's hint is not ours");
        std::thread::spawn(|| assert_eq!(get(0x1000), None, "a new thread has none"))
            .join()
            .expect("thread");
        set(0x2000, 1);
        assert_eq!(get(0x1000), None, "one slot: switching heaps drops it");
    }
}
