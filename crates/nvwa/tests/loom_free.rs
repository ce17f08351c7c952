//! Loom model of NVWA's cross-thread free path (run with
//! `RUSTFLAGS="--cfg loom" cargo test -p nvwa --test loom_free --release`).
//!
//! Under `--cfg loom` the heap's locks and atomics (arena locks, the page table
//! that routes a free to the arena owning the block's run, the page source's lock)
//! are loom's, so every interleaving of their acquisitions (up to three
//! preemptions) is explored: a thread frees a block that arena 0 handed out while
//! arena 0's owner keeps allocating, and a third thread allocates in arena 1. In every
//! interleaving the remote free lands in the owner's run (the slot is reused by
//! arena 0 or stays free, never handed out twice), and the live set is exactly
//! the blocks still held.
#![cfg(loom)]

use std::sync::Arc;

use loom::thread;
use nvwa::{Nvwa, NvwaOptions};
use pmem_core::{PersistentAllocator, Pool, PoolOptions};

static ITER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn heap() -> Nvwa {
    let pool = Pool::anonymous(&PoolOptions::new("nvwa-loom", 256 * 1024)).expect("pool");
    let opts = NvwaOptions {
        log_words: Some(1024),
        arenas: 2,
        ..NvwaOptions::default()
    };
    // SAFETY: the pool is this heap's alone.
    unsafe { Nvwa::format_heap(Arc::new(pool), &opts) }.expect("format")
}

#[test]
fn a_remote_free_and_the_owners_allocations_never_share_a_slot() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let heap = Arc::new(heap());
        let a = heap.alloc_in_arena(0, 64).expect("alloc");
        let remote = {
            let heap = Arc::clone(&heap);
            // SAFETY: the block is handed to this thread and used by nobody else.
            thread::spawn(move || unsafe { heap.free(a, 64) }.expect("remote free"))
        };
        let other = {
            let heap = Arc::clone(&heap);
            thread::spawn(move || heap.alloc_in_arena(1, 64).expect("alloc in arena 1"))
        };
        let b = heap.alloc_in_arena(0, 64).expect("alloc");
        remote.join().expect("remote thread");
        let c = heap.alloc_in_arena(0, 64).expect("alloc");
        let d = other.join().expect("arena 1 thread");
        let mut held = vec![b.offset(), c.offset(), d.offset()];
        held.sort_unstable();
        held.dedup();
        assert_eq!(
            held.len(),
            3,
            "a slot was handed out twice: {b:?} {c:?} {d:?}"
        );
        // The freed slot was reused by arena 0, since it is the lowest.
        assert!(
            b == a || c == a,
            "the remote free was lost: a {a:?}, b {b:?}, c {c:?}"
        );
        let mut live = Vec::new();
        heap.for_each_live_block(&mut |p, _| live.push(p.offset()))
            .expect("enumerate");
        assert_eq!(live, held);
        ITER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    let n = ITER.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{n} interleavings explored");
    assert!(n > 1, "loom explored {n} interleavings");
}
