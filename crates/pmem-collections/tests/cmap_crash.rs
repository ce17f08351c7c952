//! Crash suite of `PConcurrentHashMap` with two threads: each thread inserts,
//! replaces and removes its own keys (keys of both threads share stripes and the
//! log's lanes), every operation one transaction on a lane of its own, running
//! beside the other thread's. Crashed wherever the durable set can change, the map
//! must equal the model of the completed operations plus any subset of those in
//! flight (each applied whole or not at all), and the allocator must hold exactly
//! the map's blocks.

use std::collections::BTreeMap;

use pmem_collections::{Container, HeapOptions, PConcurrentHashMap, PHeap};
use pmem_core::sim::{CrashInfo, CrashTest, Model};
use pmem_core::tx::{LogMode, TxGeometry};
use pmem_core::Pool;
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
enum Op {
    Insert { k: u64, v: u64 },
    Remove { k: u64 },
}

type Map = BTreeMap<u64, u64>;

/// The operations of both threads, numbered: thread t's i-th is `2 * i + t`.
fn numbered(threads: &[Vec<Op>; 2]) -> Vec<Op> {
    let n = threads[0].len().max(threads[1].len());
    let mut out = Vec::new();
    for i in 0..n {
        for t in threads {
            // Threads shorter than the other leave gaps, filled with no-ops.
            out.push(t.get(i).copied().unwrap_or(Op::Remove { k: u64::MAX }));
        }
    }
    out
}

fn model(all: &[Op], done: &[u32]) -> Map {
    let mut m = Map::new();
    for &n in done {
        match all[n as usize] {
            Op::Insert { k, v } => {
                m.insert(k, v);
            }
            Op::Remove { k } => {
                m.remove(&k);
            }
        }
    }
    m
}

fn options() -> HeapOptions {
    HeapOptions {
        geometry: TxGeometry {
            lanes: 2,
            word_records: 32,
            object_records: 8,
            object_bytes: 1024,
            alloc_records: 8,
            lazy_ring_bytes: 4096,
        },
        page_size: 64,
        mode: LogMode::Lazy,
    }
}

fn recover(pool: Pool) -> Result<Map, String> {
    let heap = PHeap::open(pool).map_err(|e| format!("open: {e}"))?;
    let map: PConcurrentHashMap<u64, u64> = heap.root("m").map_err(|e| e.to_string())?;
    map.check(&heap).map_err(|e| e.to_string())?;
    let live = heap.live_blocks().map_err(|e| e.to_string())?;
    let blocks = map.blocks(&heap).map_err(|e| e.to_string())?;
    if live != blocks {
        return Err(format!(
            "allocator holds {live:x?}, the map reaches {blocks:x?}"
        ));
    }
    Ok(map
        .entries(&heap)
        .map_err(|e| e.to_string())?
        .into_iter()
        .collect())
}

/// Runs the two threads' operations under the simulator; returns the most
/// operations seen in flight at one crash point.
fn run(threads: [Vec<Op>; 2], model_kind: Model) -> Result<usize, String> {
    let all = numbered(&threads);
    let most_in_flight = std::sync::atomic::AtomicUsize::new(0);
    CrashTest::new(PHeap::pool_options("cmap", 512 * 1024))
        .model(model_kind)
        // The trace lints judge one operation at a time: at the end of one thread's
        // operation they count the other thread's flush awaiting its fence (in the
        // middle of its commit) as a missing fence. The crash images below are the
        // proof; the single-threaded suites keep the lints on.
        .deny_correctness_lints(false)
        .run(
            |_| Ok(()),
            |pool, sim| {
                let heap = PHeap::create_with(pool, options()).map_err(|e| e.to_string())?;
                let map: PConcurrentHashMap<u64, u64> =
                    heap.root("m").map_err(|e| e.to_string())?;
                heap.checkpoint().map_err(|e| e.to_string())?;
                sim.mark_durable();
                // Both threads enter their i-th operation before either runs it,
                // so the two transactions overlap (the checker sees both in flight).
                let rendezvous = std::sync::Barrier::new(2);
                std::thread::scope(|s| -> Result<(), String> {
                    let hs: Vec<_> = (0..2usize)
                        .map(|t| {
                            let (heap, map, sim, all) = (&heap, &map, &sim, &all);
                            let rendezvous = &rendezvous;
                            s.spawn(move || -> Result<(), String> {
                                for (n, op) in all.iter().enumerate().skip(t).step_by(2) {
                                    sim.op(n as u32, || {
                                        rendezvous.wait();
                                        match *op {
                                            Op::Insert { k, v } => {
                                                map.insert(heap, &k, &v).map(|_| ())
                                            }
                                            Op::Remove { k } => map.remove(heap, &k).map(|_| ()),
                                        }
                                    })
                                    .map_err(|e| e.to_string())?;
                                }
                                Ok(())
                            })
                        })
                        .collect();
                    for h in hs {
                        h.join().map_err(|_| "a thread panicked".to_string())??;
                    }
                    Ok(())
                })
            },
            recover,
            |got: &Map, crash: &CrashInfo| {
                most_in_flight
                    .fetch_max(crash.in_flight.len(), std::sync::atomic::Ordering::Relaxed);
                crash.expect_model_ops(got, |done| model(&all, done))
            },
        )
        .map(|_| most_in_flight.into_inner())
        .map_err(|f| f.to_string())
}

fn thread_ops(t: u64, raw: &[(bool, u64, u64)]) -> Vec<Op> {
    raw.iter()
        .map(|&(ins, k, v)| {
            // Thread t owns keys ≡ t (mod 2): same-key operations never race, so
            // completion order is the order they took effect in.
            let k = k * 2 + t;
            if ins {
                Op::Insert { k, v }
            } else {
                Op::Remove { k }
            }
        })
        .collect()
}

#[test]
fn two_threads_inserting_and_removing_survive_every_crash() {
    let a = thread_ops(
        0,
        &[(true, 1, 10), (true, 2, 20), (true, 1, 11), (false, 2, 0)],
    );
    let b = thread_ops(
        1,
        &[(true, 1, 30), (false, 1, 0), (true, 3, 31), (true, 4, 32)],
    );
    let mut most = 0;
    for m in [Model::Line, Model::Word] {
        most = most.max(run([a.clone(), b.clone()], m).unwrap_or_else(|e| panic!("{m:?}: {e}")));
    }
    // The two threads' transactions overlapped (else this tested one thread).
    assert!(
        most >= 2,
        "at most {most} operation in flight at any crash point"
    );
}

/// The suite catches an operation that is not one transaction: a thread's "move"
/// of a key as an insert and a removal in two transactions.
#[test]
fn an_operation_split_in_two_transactions_is_caught() {
    let err = CrashTest::new(PHeap::pool_options("cmap-split", 512 * 1024))
        .run(
            |_| Ok(()),
            |pool, sim| {
                let heap = PHeap::create_with(pool, options()).map_err(|e| e.to_string())?;
                let map: PConcurrentHashMap<u64, u64> =
                    heap.root("m").map_err(|e| e.to_string())?;
                map.insert(&heap, &1, &7).map_err(|e| e.to_string())?;
                heap.checkpoint().map_err(|e| e.to_string())?;
                sim.mark_durable();
                sim.op(0, || -> Result<(), String> {
                    map.insert(&heap, &2, &7).map_err(|e| e.to_string())?;
                    map.remove(&heap, &1).map_err(|e| e.to_string())?;
                    Ok(())
                })
            },
            recover,
            |got: &Map, crash: &CrashInfo| {
                crash.expect_model(got, |n| Map::from([(if n == 0 { 1 } else { 2 }, 7)]))
            },
        )
        .expect_err("the split move must be caught");
    assert!(err.to_string().contains("recovered"), "{err}");
}

fn ops() -> impl Strategy<Value = Vec<(bool, u64, u64)>> {
    proptest::collection::vec(
        (
            prop_oneof![3 => Just(true), 1 => Just(false)],
            0u64..6,
            0u64..100,
        ),
        1..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    #[test]
    fn random_two_thread_runs_survive_every_crash(a in ops(), b in ops()) {
        run([thread_ops(0, &a), thread_ops(1, &b)], Model::Line).map_err(TestCaseError::fail)?;
    }
}
