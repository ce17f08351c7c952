//! `PMutex`: threads take turns through the lock, their transactions running on the
//! log's lanes beside an exclusive transaction of another structure; the lock is
//! free after reopening; the guarded structure keeps its type check.

use std::sync::atomic::{AtomicBool, Ordering};

use pmem_collections::{Container, Error, PBox, PHeap, PMutex};
use pmem_core::Pool;

#[test]
fn two_threads_increment_through_the_lock() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("mutex.pool");
    let pool = Pool::create(&path, &PHeap::pool_options("mutex", 4 << 20)).expect("pool");
    let heap = PHeap::create(pool).expect("heap");
    let counter: PMutex<PBox<u64>> = heap.root("counter").expect("root");
    let mut other: PBox<u64> = heap.root("other").expect("root");
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..200 {
                    let mut g = counter.lock();
                    let v = g.get(&heap).expect("get");
                    g.set(&heap, &(v + 1)).expect("set");
                }
            });
        }
        // An exclusive (lazy) structure written meanwhile.
        s.spawn(|| {
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) && n < 400 {
                n += 1;
                other.set(&heap, &n).expect("set");
            }
        });
        // Let the writers finish before stopping the third thread.
    });
    done.store(true, Ordering::Relaxed);
    assert_eq!(counter.lock().get(&heap).expect("get"), 400);
    let live = heap.live_blocks().expect("live");
    let mut reach = counter.blocks(&heap).expect("blocks");
    reach.extend(other.blocks(&heap).expect("blocks"));
    reach.sort_unstable();
    assert_eq!(live, reach);
    // A guard "held" by a process that died: nothing persists of it.
    std::mem::forget(counter.lock());
    // Handles keep their heap's pool open: all of them go before it is reopened.
    drop(counter);
    drop(other);
    drop(heap);
    let heap = PHeap::open(Pool::open(&path, "mutex").expect("open")).expect("heap");
    let counter: PMutex<PBox<u64>> = heap.root("counter").expect("root");
    let g = counter.try_lock().expect("free after reopening");
    assert_eq!(g.get(&heap).expect("get"), 400);
}

#[test]
fn the_guarded_structure_keeps_its_type() {
    let pool = Pool::anonymous(&PHeap::pool_options("mutex-type", 4 << 20)).expect("pool");
    let heap = PHeap::create(pool).expect("heap");
    drop(heap.root::<PMutex<PBox<u64>>>("m").expect("root"));
    let e = heap.root::<PMutex<PBox<u32>>>("m").expect_err("mismatch");
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e:?}");
    assert!(e.to_string().contains("PBox<u64 (8 B)>"), "{e}");
    // The failed opening released what it claimed.
    heap.root::<PMutex<PBox<u64>>>("m").expect("opens again");
}
