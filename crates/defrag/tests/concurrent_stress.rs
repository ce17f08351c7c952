//! Real threads, no simulator: a mutator pushes, pops and rewrites list nodes
//! while another thread runs compactions of many small plans back to back, so
//! transactions land everywhere in a cycle: between moves, between healing
//! batches and between the releases of two plans. The list must equal the model
//! kept beside it, `verify` must pass, and a marking asked for during a cycle (its
//! release included) must get `Busy`, never run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pmem_core::{Pool, PoolOptions};
use pmem_defrag::{CompactOptions, DefragError, DefragHeap, HeapRoot, Protocol, Registry};

mod common;
use common::{push, Node};

/// The list's values, read in one transaction (a pointer kept outside one may be
/// moved by a compaction that finishes meanwhile).
fn values(h: &DefragHeap) -> Vec<u64> {
    h.transaction(|t| {
        let mut out = Vec::new();
        let mut p = t.root::<Node>("list")?;
        while !p.is_null() {
            let n = t.read(p)?;
            out.push(n.value);
            p = n.next;
        }
        Ok(out)
    })
    .expect("walk the list")
}

#[test]
fn a_mutator_beside_back_to_back_compactions_of_small_plans() {
    for protocol in [Protocol::Espresso, Protocol::Sfccd, Protocol::Ffccd] {
        let pool = Pool::anonymous(&PoolOptions::new("stress", 16 << 20).root::<HeapRoot>())
            .expect("pool");
        let heap = DefragHeap::create(pool, &Registry::new().with::<Node>()).expect("heap");
        // 3,000 nodes, two of three unlinked and freed: pages a third full.
        let mut model: Vec<u64> = Vec::new();
        for v in 0..3000 {
            heap.transaction(|t| push(t, "list", v).map(|_| ()))
                .expect("push");
            model.insert(0, v);
        }
        let mut keep = heap.root::<Node>("list").expect("root");
        while !keep.is_null() {
            keep = heap
                .transaction(|t| {
                    let mut k = t.read(keep)?;
                    for _ in 0..2 {
                        if k.next.is_null() {
                            break;
                        }
                        let gone = k.next;
                        k.next = t.read(gone)?.next;
                        t.free(gone)?;
                    }
                    t.write(keep, &k)?;
                    Ok(k.next)
                })
                .expect("thin");
        }
        model = model.into_iter().step_by(3).collect();
        let done = AtomicBool::new(false);
        // What the other threads achieved so far: the mutator goes on past its 60
        // rounds until both did something (a fast build finishes 60 rounds before
        // the prober's first marking finds the heap between two compactions).
        let (moved_cycles, markings) = (AtomicU64::new(0), AtomicU64::new(0));
        // Set on every way out of the mutator (a failed assertion included), so
        // the other threads stop and the failure is reported instead of hanging.
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let (cycles, (marks, refused)) = std::thread::scope(|s| {
            let defragmenter = s.spawn(|| {
                let mut cycles = 0;
                let opts = CompactOptions::new()
                    .target(1.05)
                    .protocol(protocol)
                    .plan_pages(2);
                while !done.load(Ordering::Acquire) {
                    match heap.compact_with(&opts) {
                        Ok(r) if r.moved > 0 => {
                            cycles += 1;
                            moved_cycles.fetch_add(1, Ordering::Release);
                        }
                        Ok(_) => {}
                        Err(e) => panic!("{protocol}: compaction: {e}"),
                    }
                }
                cycles
            });
            // A prober marks and asks for a second compaction all along: during a
            // cycle (its release included) both must be refused. A marking that
            // ran during a release would find the relocation pages' objects
            // unreachable.
            let prober = s.spawn(|| {
                let (mut marks, mut refused) = (0, 0);
                while !done.load(Ordering::Acquire) {
                    match heap.mark() {
                        Ok(m) => {
                            assert!(
                                m.unreachable.is_empty(),
                                "{protocol}: a marking found {} objects unreachable",
                                m.unreachable.len()
                            );
                            marks += 1;
                            markings.fetch_add(1, Ordering::Release);
                        }
                        Err(DefragError::Busy) => refused += 1,
                        Err(e) => panic!("{protocol}: mark: {e}"),
                    }
                    std::thread::yield_now();
                }
                (marks, refused)
            });
            let stop = Done(&done);
            // The mutator: rounds of 40 pushes, then pops of 50 (the heap keeps
            // fragmenting), and a rewrite of the head's value.
            let started = std::time::Instant::now();
            for round in 0u64.. {
                let enough = moved_cycles.load(Ordering::Acquire) > 0
                    && markings.load(Ordering::Acquire) > 0;
                if round >= 60 && (enough || started.elapsed().as_secs() >= 30) {
                    break;
                }
                for i in 0..40 {
                    let v = 10_000 + round * 100 + i;
                    heap.transaction(|t| push(t, "list", v).map(|_| ()))
                        .expect("push");
                    model.insert(0, v);
                }
                // 50 pops a round for the first 60 (the list shrinks from 1,000
                // to 400), then 40: the list stays that long however long the
                // mutator waits for the others.
                for _ in 0..if round < 60 { 50 } else { 40 } {
                    heap.transaction(|t| {
                        let head = t.root::<Node>("list")?;
                        let next = t.read(head)?.next;
                        t.set_root("list", next)?;
                        t.free(head)
                    })
                    .expect("pop");
                    model.remove(0);
                }
                heap.transaction(|t| {
                    let head = t.root::<Node>("list")?;
                    let mut n = t.read(head)?;
                    n.value += 1;
                    t.write(head, &n)
                })
                .expect("rewrite");
                model[0] += 1;
                assert_eq!(values(&heap), model, "{protocol}: round {round}");
            }
            drop(stop);
            let probes = prober.join().expect("the prober panicked");
            let cycles = defragmenter.join().expect("the defragmenter panicked");
            (cycles, probes)
        });
        assert!(cycles > 0, "{protocol}: no compaction moved anything");
        assert_eq!(values(&heap), model, "{protocol}");
        heap.verify().expect("verify");
        assert!(marks > 0, "{protocol}: no marking ran");
        eprintln!("{protocol}: {cycles} compactions; {marks} markings, {refused} refused as busy");
    }
}

/// Four mutator threads, each on a list of its own under its own root (pushes,
/// pops, rewrites of a node in the middle), run their transactions at once for
/// about two seconds while a defragmenter compacts back to back with the three
/// protocols by turns. Afterwards each list must equal its thread's model, and
/// `verify` must pass (every pointer valid: nothing a transaction wrote was lost
/// to a heal, and no heal was undone by a transaction).
#[test]
fn four_mutators_beside_back_to_back_compactions() {
    const THREADS: usize = 4;
    let pool =
        Pool::anonymous(&PoolOptions::new("stress4", 32 << 20).root::<HeapRoot>()).expect("pool");
    let heap = DefragHeap::create(pool, &Registry::new().with::<Node>()).expect("heap");
    let roots: Vec<String> = (0..THREADS).map(|i| format!("t{i}")).collect();
    let done = AtomicBool::new(false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let (models, cycles) = std::thread::scope(|s| {
        let defragmenter = s.spawn(|| {
            let mut cycles = 0u64;
            let protocols = [Protocol::Espresso, Protocol::Sfccd, Protocol::Ffccd];
            let mut i = 0;
            while !done.load(Ordering::Acquire) {
                let opts = CompactOptions::new()
                    .target(1.05)
                    .protocol(protocols[i % 3])
                    .plan_pages(4);
                i += 1;
                match heap.compact_with(&opts) {
                    Ok(r) if r.moved > 0 => cycles += 1,
                    Ok(_) => std::thread::yield_now(),
                    Err(e) => panic!("compaction: {e}"),
                }
            }
            cycles
        });
        let mutators: Vec<_> = roots
            .iter()
            .enumerate()
            .map(|(id, root)| {
                let heap = &heap;
                s.spawn(move || {
                    let mut model: Vec<u64> = Vec::new();
                    let mut rng = pmem_core::SplitMix64::new(0x9e37_79b9_7f4a_7c15 ^ id as u64);
                    let mut next = 0u64;
                    while std::time::Instant::now() < deadline {
                        let x = rng.next_u64();
                        match x % 8 {
                            // Pushes outnumber pops: the lists grow and the pops
                            // leave holes all over the pages.
                            0..=3 => {
                                let v = (id as u64) << 32 | next;
                                next += 1;
                                heap.transaction(|t| push(t, root, v).map(|_| ()))
                                    .expect("push");
                                model.insert(0, v);
                            }
                            4 | 5 if !model.is_empty() => {
                                heap.transaction(|t| {
                                    let head = t.root::<Node>(root)?;
                                    let next = t.read(head)?.next;
                                    t.set_root(root, next)?;
                                    t.free(head)
                                })
                                .expect("pop");
                                model.remove(0);
                            }
                            _ if !model.is_empty() => {
                                // Rewrite the node at position k (and so its
                                // pointer word, translated during a compaction).
                                let k = (x >> 8) as usize % model.len().min(16);
                                heap.transaction(|t| {
                                    let mut p = t.root::<Node>(root)?;
                                    for _ in 0..k {
                                        p = t.read(p)?.next;
                                    }
                                    let mut n = t.read(p)?;
                                    n.value += 1;
                                    t.write(p, &n)
                                })
                                .expect("rewrite");
                                model[k] += 1;
                            }
                            _ => {}
                        }
                    }
                    model
                })
            })
            .collect();
        let models: Vec<Vec<u64>> = mutators
            .into_iter()
            .map(|m| m.join().expect("a mutator panicked"))
            .collect();
        done.store(true, Ordering::Release);
        let cycles = defragmenter.join().expect("the defragmenter panicked");
        (models, cycles)
    });
    for (root, model) in roots.iter().zip(&models) {
        let got = heap
            .transaction(|t| {
                let mut out = Vec::new();
                let mut p = t.root::<Node>(root)?;
                while !p.is_null() {
                    let n = t.read(p)?;
                    out.push(n.value);
                    p = n.next;
                }
                Ok(out)
            })
            .expect("walk");
        assert_eq!(&got, model, "list {root}");
    }
    let marking = heap.verify().expect("verify");
    assert!(marking.unreachable.is_empty(), "{:?}", marking.unreachable);
    let live: usize = models.iter().map(Vec::len).sum();
    assert_eq!(heap.stats().expect("stats").live_objects, live as u64);
    assert!(cycles > 0, "no compaction moved anything");
    eprintln!("{cycles} compactions beside {live} live nodes of {THREADS} threads");
}
