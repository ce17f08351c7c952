//! What the stricter simulator catches and no longer cries wolf about: concurrent
//! recording without phantom stores, several operations in flight, locked RMWs as
//! fences, `clflush` crash points, unordered multi-word writes, raw writes through
//! handed-out references, another thread's store between a flush and its fence, and
//! crash images of a large pool.

use std::sync::atomic::Ordering;

use pmem_core::sim::{lint, CrashInfo, CrashTest, EventKind, FlushOp, LintKind};
use pmem_core::{PAtomicU64, PPtr, Pool, PoolError, PoolOptions};

const A: u64 = 4096;
const B: u64 = 4096 + 64;
const C: u64 = 4096 + 128;

fn e(err: PoolError) -> String {
    err.to_string()
}

fn word(pool: &Pool, off: u64) -> Result<u64, String> {
    pool.read(PPtr::<u64>::from_offset(off)).map_err(e)
}

/// Two threads hammer their own lines through `write_bytes_shared`. Every store the
/// trace holds must be one the API issued, attributed to the thread that issued it:
/// recording a store before its bytes landed let the other thread's raw-write scan
/// see a phantom revert, attributed to itself.
#[test]
fn concurrent_api_writes_record_no_phantom_stores() {
    const ROUNDS: u64 = 2_000;
    let (pool, sim) = Pool::simulated(&PoolOptions::new("race", 64 * 1024)).expect("pool");
    // A shared reference elsewhere makes every event scan its range for raw writes.
    // SAFETY: the word at C is only accessed through this reference.
    let _watched = unsafe { pool.get_shared(PPtr::<PAtomicU64>::from_offset(C)) }.expect("c");
    let threads: Vec<u16> = std::thread::scope(|s| {
        let run = |line: u64| {
            let pool = &pool;
            move || {
                for i in 0..ROUNDS {
                    // SAFETY: each thread writes only its own line.
                    unsafe { pool.write_bytes_shared(line, &(i + 1).to_le_bytes()) }
                        .expect("write");
                    pool.flush(line, 8).expect("flush");
                }
            }
        };
        let a = s.spawn(run(A));
        let b = s.spawn(run(B));
        a.join().expect("thread a");
        b.join().expect("thread b");
        Vec::new()
    });
    assert!(threads.is_empty());
    let trace = sim.trace();
    let mut owner = std::collections::HashMap::new();
    let mut stores = 0u64;
    for ev in &trace.events {
        if let EventKind::Store { offset, .. } = ev.kind {
            stores += 1;
            let t = owner.entry(offset).or_insert(ev.thread);
            assert_eq!(
                *t, ev.thread,
                "a store to {offset:#x} attributed to two threads"
            );
        }
    }
    assert_eq!(stores, 2 * ROUNDS, "exactly the API's stores, no phantoms");
}

/// Two threads each run operations on their own slot at the same time; a crash may
/// catch both in flight, and the oracle accepts each applied whole or not at all.
/// With one flush left out, the same oracle fails.
#[test]
fn concurrent_operations_each_apply_whole_or_not_at_all() {
    let run = |skip_persist: bool| {
        CrashTest::new(PoolOptions::new("ops", 64 * 1024))
            .deny_correctness_lints(false)
            .run(
                |_| Ok(()),
                |pool, sim| {
                    std::thread::scope(|s| {
                        let worker = |t: u32, slot: u64| {
                            let (pool, sim) = (&pool, sim);
                            move || -> Result<(), String> {
                                for i in 0..3u32 {
                                    let n = t * 10 + i;
                                    sim.begin_op(n);
                                    let value = u64::from(n) + 1;
                                    // SAFETY: each thread writes only its own slot.
                                    unsafe { pool.write_bytes_shared(slot, &value.to_le_bytes()) }
                                        .map_err(e)?;
                                    if !(skip_persist && t == 1) {
                                        pool.persist(slot, 8).map_err(e)?;
                                    }
                                    sim.end_op(n);
                                }
                                Ok(())
                            }
                        };
                        let a = s.spawn(worker(0, A));
                        let b = s.spawn(worker(1, B));
                        a.join().map_err(|_| "thread a panicked".to_owned())??;
                        b.join().map_err(|_| "thread b panicked".to_owned())?
                    })
                },
                |pool| Ok([word(&pool, A)?, word(&pool, B)?]),
                |got: &[u64; 2], crash: &CrashInfo| {
                    crash.expect_model_ops(got, |ops| {
                        let last = |t: u32| {
                            ops.iter()
                                .filter(|&&n| n / 10 == t)
                                .max_by_key(|&&n| n)
                                .map_or(0, |&n| u64::from(n) + 1)
                        };
                        [last(0), last(1)]
                    })
                },
            )
    };
    let report = run(false).expect("persisted operations survive every crash");
    assert!(report.images_checked > 0);
    let err = run(true).expect_err("an unpersisted operation is caught");
    assert!(err.message.contains("expected the model"), "{err}");
}

/// `clwb node; CAS head` is a correct publication: the CAS is a fence. With a plain
/// store in place of the CAS the node may be lost while the head survives.
#[test]
fn a_cas_orders_earlier_flushes() {
    let run = |cas: bool| {
        CrashTest::new(PoolOptions::new("rmw", 64 * 1024)).run(
            |_| Ok(()),
            |mut pool, sim| {
                sim.op(0, || -> Result<(), String> {
                    pool.write(PPtr::<u64>::from_offset(B), &7).map_err(e)?;
                    pool.flush(B, 8).map_err(e)?;
                    // SAFETY: the head word is only accessed through this reference.
                    let head = unsafe { pool.get_shared(PPtr::<PAtomicU64>::from_offset(A)) }
                        .map_err(e)?;
                    if cas {
                        head.compare_exchange(0, B, Ordering::AcqRel, Ordering::Acquire)
                            .map_err(|v| format!("cas saw {v}"))?;
                    } else {
                        head.store(B, Ordering::Release);
                    }
                    pool.persist(A, 8).map_err(e)
                })
            },
            |pool| {
                let head = word(&pool, A)?;
                Ok(if head == 0 {
                    None
                } else {
                    Some(word(&pool, head)?)
                })
            },
            |got: &Option<u64>, crash: &CrashInfo| {
                crash.expect_model(got, |ops| if ops == 0 { None } else { Some(7) })
            },
        )
    };
    let report = run(true).expect("clwb node; CAS head survives every crash");
    assert!(
        report.lints.iter().all(|l| !l.kind.is_correctness()),
        "{:?}",
        report.lints
    );
    run(false).expect_err("clwb node; store head is not ordered");
}

/// The example: `store commit; clflush; store data; clflush; drain` writes
/// the commit record before the data. `clflush` is durable by itself, so a crash
/// between the two flushes leaves the commit without its data — a crash point the
/// default crash points must include.
#[test]
fn clflush_makes_a_crash_point() {
    let run = |commit_first: bool| {
        CrashTest::new(PoolOptions::new("clflush", 64 * 1024)).run(
            |_| Ok(()),
            |mut pool, sim| {
                sim.set_flush_op(FlushOp::Clflush);
                sim.op(0, || -> Result<(), String> {
                    let order = if commit_first { [A, B] } else { [B, A] };
                    for off in order {
                        pool.write(PPtr::<u64>::from_offset(off), &1).map_err(e)?;
                        pool.flush(off, 8).map_err(e)?;
                    }
                    pool.drain().map_err(e)
                })
            },
            |pool| Ok((word(&pool, A)?, word(&pool, B)?)),
            |&(commit, data): &(u64, u64), _crash: &CrashInfo| {
                if commit == 1 && data != 1 {
                    Err("commit record without its data".to_owned())
                } else {
                    Ok(())
                }
            },
        )
    };
    run(false).expect("data then commit is correct");
    let err = run(true).expect_err("commit before data is caught");
    assert!(err.message.contains("without its data"), "{err}");
}

/// A two-word write into one line is a `memcpy`: its words persist in no promised
/// order. A "valid bit after the payload, in the same write" protocol is caught;
/// storing the words one by one in order (`write_words_ordered`) is correct.
#[test]
fn words_of_one_write_are_unordered() {
    let run = |ordered: bool| {
        CrashTest::new(PoolOptions::new("memcpy", 64 * 1024))
            .deny_correctness_lints(false)
            .run(
                |_| Ok(()),
                |mut pool, sim| {
                    sim.op(0, || -> Result<(), String> {
                        // Payload word, then the valid flag after it, one line.
                        if ordered {
                            pool.write_words_ordered(A, &[42, 1]).map_err(e)?;
                        } else {
                            pool.write(PPtr::<[u64; 2]>::from_offset(A), &[42, 1])
                                .map_err(e)?;
                        }
                        pool.persist(A, 16).map_err(e)
                    })
                },
                |pool| Ok((word(&pool, A)?, word(&pool, A + 8)?)),
                |&(payload, valid): &(u64, u64), _crash: &CrashInfo| {
                    if valid == 1 && payload != 42 {
                        Err("valid flag without its payload".to_owned())
                    } else {
                        Ok(())
                    }
                },
            )
    };
    run(true).expect("word-by-word stores keep their order within a line");
    run(false).expect_err("a memcpy's words may persist in any order");
}

/// Raw writes through `get_mut`, `bytes_mut` and `get_shared` references are seen,
/// and a `get_mut` write that is never flushed trips the durability lint.
#[test]
fn raw_writes_through_handed_out_references_are_seen() {
    let trace = CrashTest::new(PoolOptions::new("raw", 64 * 1024))
        .record(
            |_| Ok(()),
            |mut pool, sim| {
                sim.op(0, || -> Result<(), String> {
                    *pool.get_mut(PPtr::<u64>::from_offset(A)).map_err(e)? = 5;
                    pool.bytes_mut(B, 8)
                        .map_err(e)?
                        .copy_from_slice(&6u64.to_le_bytes());
                    pool.persist(B, 8).map_err(e)?;
                    // SAFETY: the word at C is only accessed through this reference.
                    let c = unsafe { pool.get_shared(PPtr::<PAtomicU64>::from_offset(C)) }
                        .map_err(e)?;
                    c.store(9, Ordering::Relaxed);
                    sim.label("after the atomic store");
                    Ok(())
                })
            },
        )
        .expect("records");
    let stored: Vec<u64> = trace
        .events
        .iter()
        .filter_map(|ev| match ev.kind {
            EventKind::Store { offset, .. } => Some(offset),
            _ => None,
        })
        .collect();
    assert_eq!(stored, vec![A, B, C]);
    let lints = lint(&trace);
    assert!(lints.iter().any(|l| l.kind == LintKind::NotDurableAtOpEnd));
}

/// A 64 MiB pool: the crash test builds its images copy-on-write and scans only the
/// lines handed out, so it checks the same protocol as on a small pool.
#[test]
fn large_pools_are_checked_like_small_ones() {
    let report = CrashTest::new(PoolOptions::new("large", 64 << 20))
        .run(
            |_| Ok(()),
            |mut pool, sim| {
                for n in 0..4u32 {
                    let off = A + 64 * 1024 * u64::from(n) * 100;
                    sim.op(n, || -> Result<(), String> {
                        pool.write(PPtr::<u64>::from_offset(off), &u64::from(n + 1))
                            .map_err(e)?;
                        pool.persist(off, 8).map_err(e)
                    })?;
                }
                Ok(())
            },
            |pool| {
                (0..4u64)
                    .map(|n| word(&pool, A + 64 * 1024 * n * 100))
                    .collect::<Result<Vec<u64>, String>>()
            },
            |got: &Vec<u64>, crash: &CrashInfo| {
                crash.expect_model(got, |ops| {
                    (0..4u64)
                        .map(|n| if n < u64::from(ops) { n + 1 } else { 0 })
                        .collect()
                })
            },
        )
        .expect("survives every crash");
    assert!(report.images_checked >= 8);
}

/// Thread 1 stores and flushes a line, thread 2 then stores to the same line (a new
/// record after the durable end, say), and thread 1 fences: thread 1 flushed all it
/// stored, so no missing flush is reported (this is how a sync runs beside appends).
/// Thread 1 leaving its own store unflushed before that fence is still reported,
/// at its own store.
#[test]
fn another_threads_store_between_a_flush_and_the_fence_is_not_a_missing_flush() {
    let run = |flush_first: bool| {
        let (pool, sim) = Pool::simulated(&PoolOptions::new("beside", 64 * 1024)).expect("pool");
        let own_store = line!() + 2;
        // SAFETY: the two threads take turns (joined in order) on these bytes.
        unsafe { pool.write_bytes_shared(A, &1u64.to_le_bytes()) }.expect("write");
        // SAFETY: as above.
        unsafe { pool.write_bytes_shared(B, &1u64.to_le_bytes()) }.expect("write");
        pool.flush(B, 8)
            .expect("a pending flush, so the fence is a barrier");
        if flush_first {
            pool.flush(A, 8).expect("flush");
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: as above.
                unsafe { pool.write_bytes_shared(A + 8, &2u64.to_le_bytes()) }.expect("write")
            })
            .join()
            .expect("thread 2");
        });
        pool.drain().expect("fence");
        let missing: Vec<_> = lint(&sim.trace())
            .into_iter()
            .filter(|l| l.kind == LintKind::MissingFlush)
            .collect();
        (missing, own_store)
    };
    assert_eq!(run(true).0, Vec::new());
    let (missing, own_store) = run(false);
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!(missing[0].loc.line(), own_store, "{missing:?}");
}
