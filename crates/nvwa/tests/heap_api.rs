//! The NVWA heap's API: typed errors for bad input, threads allocating and
//! freeing each other's blocks through checkpoints, out of space and reclaim,
//! realloc in place and moving, both free modes across reopening, and a corrupt
//! log refused.

use std::collections::BTreeMap;
use std::sync::{mpsc, Arc};

use nvwa::{FreeMode, Nvwa, NvwaOptions};
use pmem_core::{AllocError, AtomicPPtr, PPtr, PersistentAllocator, Pool, PoolOptions};

fn pool(bytes: u64) -> Arc<Pool> {
    Arc::new(
        Pool::anonymous(&PoolOptions::new("nvwa-api", bytes).root::<[u64; 8]>()).expect("pool"),
    )
}

fn opts(log_words: u64, arenas: usize, free_mode: FreeMode) -> NvwaOptions {
    NvwaOptions {
        log_words: Some(log_words),
        arenas,
        free_mode,
        ..NvwaOptions::default()
    }
}

fn format(p: &Arc<Pool>, o: &NvwaOptions) -> Nvwa {
    // SAFETY: the pool's heap is this heap's alone.
    unsafe { Nvwa::format_heap(Arc::clone(p), o) }.expect("format")
}

fn reopen(p: &Arc<Pool>, o: &NvwaOptions) -> Nvwa {
    // SAFETY: as above; the previous heap is dropped.
    unsafe { Nvwa::open_heap(Arc::clone(p), o) }.expect("open")
}

fn live(h: &Nvwa) -> Vec<u64> {
    let mut v = Vec::new();
    h.for_each_live_block(&mut |p, _| v.push(p.offset()))
        .expect("enumerate");
    v
}

#[test]
fn bad_input_gets_typed_errors_and_changes_nothing() {
    let p = pool(1 << 20);
    let o = opts(4096, 1, FreeMode::Exclude);
    let h = format(&p, &o);
    let a = h.alloc(100).expect("alloc");
    assert!(matches!(
        h.alloc(0),
        Err(AllocError::InvalidSize { size: 0 })
    ));
    assert!(matches!(
        h.alloc(1 << 40),
        Err(AllocError::InvalidSize { .. })
    ));
    let wrong = [
        (
            PPtr::from_offset(a.offset() + 16),
            100,
            "not the start of a block",
        ),
        (a, 300, "the size does not match the block"),
        (PPtr::from_offset(8), 64, "outside the heap"),
    ];
    for (ptr, size, reason) in wrong {
        // SAFETY: refused (nothing is freed).
        match unsafe { h.free(ptr, size) } {
            Err(AllocError::InvalidFree { reason: r, .. }) => assert_eq!(r, reason),
            other => panic!("{ptr:?} {size}: {other:?}"),
        }
    }
    // SAFETY: `a` is not used again.
    unsafe { h.free(a, 100) }.expect("free");
    assert!(matches!(
        // SAFETY: refused (a double free).
        unsafe { h.free(a, 100) },
        Err(AllocError::InvalidFree {
            reason: "not allocated",
            ..
        })
    ));
    let bad_slot = PPtr::<AtomicPPtr<u8>>::from_offset(12);
    // SAFETY: the slot is refused before any store.
    let r = unsafe { h.alloc_publish(64, bad_slot, &mut |_| {}) };
    assert!(matches!(r, Err(AllocError::InvalidSlot { .. })), "{r:?}");
    assert!(live(&h).is_empty());
    drop(h);
    assert!(live(&reopen(&p, &o)).is_empty());
}

#[test]
fn threads_allocate_and_free_each_others_blocks_through_checkpoints() {
    let p = pool(16 << 20);
    // A small log: checkpoints happen while the threads run.
    let o = opts(8192, 4, FreeMode::Exclude);
    let h = Arc::new(format(&p, &o));
    const THREADS: usize = 4;
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS)
        .map(|_| mpsc::channel::<(u64, u64, u8)>())
        .unzip();
    let kept: Vec<Vec<(u64, u64, u8)>> = std::thread::scope(|s| {
        let handles: Vec<_> = rxs
            .into_iter()
            .enumerate()
            .map(|(t, rx)| {
                let h = Arc::clone(&h);
                let next = txs[(t + 1) % THREADS].clone();
                let pool = Arc::clone(&p);
                s.spawn(move || {
                    let mut kept = Vec::new();
                    let mut x = t as u64 * 7919 + 1;
                    for i in 0..3000u64 {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let size = 16 + (x >> 33) % if i % 50 == 0 { 9000 } else { 700 };
                        let b = h.alloc(size).expect("alloc");
                        let tag = (x >> 7) as u8;
                        // SAFETY: the block is this thread's until handed over.
                        unsafe { pool.write_bytes_shared(b.offset(), &vec![tag; size as usize]) }
                            .expect("fill");
                        match i % 3 {
                            0 => next.send((b.offset(), size, tag)).expect("send"),
                            1 => kept.push((b.offset(), size, tag)),
                            _ => {
                                // SAFETY: not used again.
                                unsafe { h.free(b, size) }.expect("free");
                            }
                        }
                        // Free what the neighbour handed over (a remote free).
                        while let Ok((off, size, tag)) = rx.try_recv() {
                            let bytes = pool.bytes(off, size).expect("read");
                            assert!(bytes.iter().all(|&b| b == tag), "a block was overwritten");
                            // SAFETY: handed over; not used again.
                            unsafe { h.free(PPtr::from_offset(off), size) }.expect("remote free");
                        }
                    }
                    drop(next);
                    (kept, rx)
                })
            })
            .collect();
        drop(txs);
        let mut out = Vec::new();
        let mut leftovers = Vec::new();
        for handle in handles {
            let (kept, rx) = handle.join().expect("thread");
            out.push(kept);
            leftovers.push(rx);
        }
        // What was sent after its receiver stopped: free it here.
        for rx in leftovers {
            while let Ok((off, size, _)) = rx.try_recv() {
                // SAFETY: handed over; not used again.
                unsafe { h.free(PPtr::from_offset(off), size) }.expect("late free");
            }
        }
        out
    });
    let mut expect: BTreeMap<u64, (u64, u8)> = BTreeMap::new();
    for (off, size, tag) in kept.into_iter().flatten() {
        assert!(
            expect.insert(off, (size, tag)).is_none(),
            "a block was handed out twice"
        );
    }
    let blocks: Vec<u64> = expect.keys().copied().collect();
    assert_eq!(live(&h), blocks);
    assert!(h.stats().checkpoints > 0, "the small log never filled");
    for (&off, &(size, tag)) in &expect {
        assert!(p.bytes(off, size).expect("read").iter().all(|&b| b == tag));
    }
    drop(h);
    let again = reopen(&p, &o);
    assert_eq!(live(&again), blocks);
    for (&off, &(size, _)) in &expect {
        assert!(again
            .recorded_len(PPtr::from_offset(off))
            .is_some_and(|l| l >= size));
    }
}

#[test]
fn out_of_space_then_reclaim_gives_pages_to_other_classes() {
    let p = pool(1 << 20);
    let o = opts(16 * 1024, 1, FreeMode::Exclude);
    let h = format(&p, &o);
    let mut small = Vec::new();
    loop {
        match h.alloc(64) {
            Ok(b) => small.push(b),
            Err(AllocError::OutOfSpace { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(small.len() > 1000);
    assert!(matches!(h.alloc(8192), Err(AllocError::OutOfSpace { .. })));
    for b in small {
        // SAFETY: not used again.
        unsafe { h.free(b, 64) }.expect("free");
    }
    // The empty runs of the 64-byte class go back to the page source.
    let big = h.alloc(64 * 1024).expect("a large block after reclaim");
    assert_eq!(live(&h), vec![big.offset()]);
}

#[test]
fn realloc_in_place_and_moving() {
    let p = pool(1 << 20);
    let o = opts(4096, 1, FreeMode::Exclude);
    let h = format(&p, &o);
    let a = h.alloc(300).expect("alloc");
    // SAFETY: the block is ours.
    unsafe { p.write_bytes_shared(a.offset(), &[9u8; 300]) }.expect("fill");
    // SAFETY: in place (300 and 260 share the 320-byte class).
    let same = unsafe { h.realloc(a, 300, 260) }.expect("realloc");
    assert_eq!(same, a);
    assert_eq!(h.recorded_len(a), Some(272));
    // SAFETY: `a` is not used after it moves.
    let moved = unsafe { h.realloc(a, 260, 5000) }.expect("realloc");
    assert_ne!(moved, a);
    assert!(p
        .bytes(moved.offset(), 260)
        .expect("read")
        .iter()
        .all(|&b| b == 9));
    assert_eq!(live(&h), vec![moved.offset()]);
    assert_eq!(h.recorded_len(moved), Some(5008));
}

#[test]
fn both_free_modes_survive_reopening_and_full_logs() {
    for mode in [FreeMode::Exclude, FreeMode::Append] {
        let p = pool(2 << 20);
        let o = opts(2048, 2, mode);
        let h = format(&p, &o);
        let mut kept = Vec::new();
        for i in 0..3000u64 {
            let b = h.alloc(32 + i % 200).expect("alloc");
            if i % 4 == 0 {
                kept.push(b.offset());
            } else {
                // SAFETY: not used again.
                unsafe { h.free(b, 32 + i % 200) }.expect("free");
            }
        }
        assert!(h.stats().checkpoints > 0, "{mode:?}: the log never filled");
        kept.sort_unstable();
        assert_eq!(live(&h), kept, "{mode:?}");
        drop(h);
        assert_eq!(live(&reopen(&p, &o)), kept, "{mode:?} after reopening");
    }
}

#[test]
fn a_corrupt_log_or_no_heap_is_refused_without_a_write() {
    let p = pool(1 << 20);
    let o = opts(1024, 1, FreeMode::Exclude);
    // SAFETY: nothing was formatted.
    let r = unsafe { Nvwa::open_heap(Arc::clone(&p), &o) };
    assert!(matches!(r, Err(AllocError::NotFormatted { .. })), "{r:?}");
    let h = format(&p, &o);
    h.alloc(64).expect("alloc");
    let g = h.geometry();
    drop(h);
    // A word that is no record in the active log (area 0).
    // SAFETY: no heap is open.
    unsafe { p.write_bytes_shared(g.log_base(0) + 8 * 100, &7u64.to_le_bytes()) }.expect("poke");
    let before = p
        .bytes(g.region_start, g.heap_start - g.region_start)
        .expect("read")
        .to_vec();
    // SAFETY: no other heap is open.
    let r = unsafe { Nvwa::open_heap(Arc::clone(&p), &o) };
    assert!(matches!(r, Err(AllocError::Corrupt { .. })), "{r:?}");
    let after = p
        .bytes(g.region_start, g.heap_start - g.region_start)
        .expect("read");
    assert_eq!(before, after, "refusing wrote to the metadata");
}
