//! The transaction API as a user meets it: what each call logs (the NVM-write
//! economy), aborts by error and by panic, redo's read-your-writes, errors for
//! impossible requests, reopening, and concurrent transactions on their own lanes.

use pmem_core::tx::{Hint, LogMode, TxError, TxGeometry, TxHeap, TxOptions};
use pmem_core::{PPtr, Pool, PoolOptions};
use zerocopy::IntoBytes;

fn heap() -> TxHeap {
    let pool = Pool::anonymous(&PoolOptions::new("tx-api", 4 << 20)).expect("pool");
    TxHeap::create(pool, &TxGeometry::default(), 64).expect("heap")
}

fn block(h: &mut TxHeap, words: u64) -> PPtr<u64> {
    h.transaction(|tx| tx.alloc(8 * words))
        .expect("alloc")
        .cast()
}

#[test]
fn word_records_cost_24_bytes_object_records_32() {
    // A simulated pool is in Dax mode, so flushes and fences are issued and counted
    // (an anonymous pool is volatile: it issues none).
    let (pool, _sim) = Pool::simulated(&PoolOptions::new("tx-cost", 4 << 20)).expect("pool");
    let mut h = TxHeap::create(pool, &TxGeometry::default(), 64).expect("heap");
    let p = block(&mut h, 4);
    for (hint, meta, data) in [(Hint::Word, 2 * 24, 16), (Hint::Object, 32, 16)] {
        let (_, st) = h
            .transaction_stats(TxOptions::new().hint(hint), |tx| {
                tx.write(p.cast::<[u64; 2]>(), &[1, 2])
            })
            .expect("tx");
        assert_eq!(
            (st.log_meta_bytes, st.log_data_bytes),
            (meta, data),
            "{hint:?}"
        );
        // The log's fence, the data's fence, the commit point's fence.
        assert_eq!(st.fences, 3, "{hint:?}: {st:?}");
    }
    // A write inside a block the transaction allocated is not logged at all.
    let (_, st) = h
        .transaction_stats(TxOptions::new(), |tx| {
            let b = tx.alloc(64)?;
            tx.write(b.cast::<[u64; 8]>(), &[7; 8])
        })
        .expect("tx");
    assert_eq!((st.log_meta_bytes, st.log_data_bytes), (0, 0));
    assert_eq!(st.alloc_record_bytes, 32, "only the allocation record");
    // Under `log_fresh` the same write is logged as any other (the paper's engine).
    for (hint, meta, lines) in [(Hint::Word, 8 * 24, 3), (Hint::Object, 32, 1)] {
        let (_, st) = h
            .transaction_stats(TxOptions::new().hint(hint).log_fresh(true), |tx| {
                let b = tx.alloc(64)?;
                tx.write(b.cast::<[u64; 8]>(), &[7; 8])
            })
            .expect("tx");
        assert_eq!(
            (st.log_meta_bytes, st.log_data_bytes),
            (meta, 64),
            "{hint:?}"
        );
        assert_eq!(st.meta_lines_flushed, lines, "{hint:?}: {st:?}");
    }
}

#[test]
fn add_ranges_logs_a_batch_with_one_fence_and_one_flush_per_line() {
    let (pool, _sim) = Pool::simulated(&PoolOptions::new("tx-batch", 4 << 20)).expect("pool");
    let mut h = TxHeap::create(pool, &TxGeometry::default(), 64).expect("heap");
    let a = block(&mut h, 1);
    let b = block(&mut h, 1);
    // Two words written one by one: a snapshot (and a fence) each.
    let (_, one_by_one) = h
        .transaction_stats(TxOptions::new().hint(Hint::Word), |tx| {
            tx.write(a, &1)?;
            tx.write(b, &2)
        })
        .expect("tx");
    // The same two words announced first: one snapshot.
    let (_, batched) = h
        .transaction_stats(TxOptions::new(), |tx| {
            tx.add_ranges(&[(a.offset(), 8, Hint::Word), (b.offset(), 8, Hint::Word)])?;
            tx.write(a, &3)?;
            tx.write(b, &4)
        })
        .expect("tx");
    assert_eq!(one_by_one.log_meta_bytes, 48);
    assert_eq!(batched.log_meta_bytes, 48, "nothing logged twice");
    assert_eq!(
        batched.fences + 1,
        one_by_one.fences,
        "{batched:?} vs {one_by_one:?}"
    );
    assert_eq!(
        batched.meta_lines_flushed, 1,
        "two records in one line, flushed once"
    );
    assert_eq!(one_by_one.meta_lines_flushed, 2);
    assert_eq!(h.pool().read(a).expect("a"), 3);
    assert_eq!(h.pool().read(b).expect("b"), 4);
    // Overlapping ranges of one call are logged once.
    let (_, st) = h
        .transaction_stats(TxOptions::new(), |tx| {
            tx.add_ranges(&[
                (a.offset(), 8, Hint::Object),
                (a.offset() + 4, 4, Hint::Object),
            ])?;
            tx.write(a, &5)
        })
        .expect("tx");
    assert_eq!((st.log_meta_bytes, st.log_data_bytes), (32, 8));
}

#[test]
fn an_error_or_a_panic_rolls_everything_back() {
    let mut h = heap();
    let p = block(&mut h, 2);
    h.transaction(|tx| tx.write(p, &5)).expect("set");
    let used = h.allocator().stats().pages_used;
    for mode in [LogMode::Undo, LogMode::Redo] {
        let r: Result<(), TxError> = h.transaction_with(TxOptions::new().mode(mode), |tx| {
            tx.write(p, &6)?;
            tx.alloc(128)?;
            Err(TxError::Aborted("no".into()))
        });
        assert!(matches!(r, Err(TxError::Aborted(_))));
        assert_eq!(h.pool().read(p).expect("read"), 5, "{mode:?}");
        assert_eq!(
            h.allocator().stats().pages_used,
            used,
            "{mode:?}: allocation released"
        );
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = h.transaction_with(TxOptions::new().mode(mode), |tx| {
                tx.write(p, &7)?;
                panic!("inside a transaction");
                #[allow(unreachable_code)]
                Ok(())
            });
        }));
        assert!(caught.is_err());
        assert_eq!(h.pool().read(p).expect("read"), 5, "{mode:?} after a panic");
    }
    // The heap stays usable.
    h.transaction(|tx| tx.write(p, &8)).expect("after aborts");
    assert_eq!(h.pool().read(p).expect("read"), 8);
}

#[test]
fn frees_are_checked_when_asked_and_take_effect_at_commit() {
    let mut h = heap();
    let p = block(&mut h, 2);
    let used = h.allocator().stats().pages_used;
    // Not a block, a double free, a wrong size: refused at the call, nothing freed.
    for (at, size) in [(p.offset() + 8, 16), (p.offset(), 4096)] {
        let r = h.transaction(|tx| tx.free(PPtr::from_offset(at), size));
        assert!(matches!(r, Err(TxError::Alloc(_))), "{at:#x} {size}: {r:?}");
    }
    let r = h.transaction(|tx| {
        tx.free(p.cast(), 16)?;
        tx.free(p.cast(), 16)
    });
    assert!(matches!(r, Err(TxError::Alloc(_))), "double free: {r:?}");
    assert_eq!(h.allocator().stats().pages_used, used);
    // A block allocated and freed by one transaction ends free.
    h.transaction(|tx| {
        let b = tx.alloc(64)?;
        tx.free(b, 64)
    })
    .expect("alloc and free");
    assert_eq!(h.allocator().stats().pages_used, used);
    // A free in an aborted transaction is no free.
    let r: Result<(), _> = h.transaction(|tx| {
        tx.free(p.cast(), 16)?;
        Err(TxError::Aborted("keep it".into()))
    });
    assert!(r.is_err());
    assert!(h.allocator().is_allocated(p.cast(), 16));
    h.transaction(|tx| tx.free(p.cast(), 16)).expect("free");
    assert!(!h.allocator().is_allocated(p.cast(), 16));
}

#[test]
fn an_allocation_costs_no_fence_of_its_own() {
    let (pool, _sim) = Pool::simulated(&PoolOptions::new("tx-alloc", 4 << 20)).expect("pool");
    let mut h = TxHeap::create(pool, &TxGeometry::default(), 64).expect("heap");
    let p = block(&mut h, 1);
    // Undo: snapshot (1), commit data (1), commit point (1) — the allocation's
    // record rides on the snapshot fence, its mark on the commit's.
    let ((), stats) = h
        .transaction_stats(TxOptions::new(), |tx| {
            let b = tx.alloc(64)?;
            tx.write(p, &b.offset())
        })
        .expect("tx");
    assert_eq!(stats.fences, 3, "{stats:?}");
    // Allocated after the last snapshot: one more fence, for its record.
    let ((), stats) = h
        .transaction_stats(TxOptions::new(), |tx| {
            tx.add_range(p.offset(), 8)?;
            let b = tx.alloc(64)?;
            tx.write(p, &b.offset())
        })
        .expect("tx");
    assert_eq!(stats.fences, 4, "{stats:?}");
}

#[test]
fn a_lazy_transaction_costs_one_fence_and_survives_reopening() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("lazy.pool");
    let lazy = TxOptions::new().mode(LogMode::Lazy);
    let (p, q) = {
        // Forced DAX, so flushes and fences are counted (not folded into msync).
        let opts = PoolOptions::new("tx-lazy", 4 << 20).mode(pmem_core::ModeRequest::ForceDax);
        let pool = Pool::create(&path, &opts).expect("pool");
        let mut h = TxHeap::create(pool, &TxGeometry::default(), 64).expect("heap");
        let p = block(&mut h, 2);
        let ((), st) = h
            .transaction_stats(lazy, |tx| {
                tx.write(p, &41)?;
                // Reads see the transaction's own writes.
                assert_eq!(tx.read(p)?, 41);
                tx.write(p, &42)
            })
            .expect("lazy");
        assert_eq!(st.fences, 1, "{st:?}");
        // One entry: a 32-byte header, a 16-byte record header, the 8 bytes.
        assert_eq!((st.log_meta_bytes, st.log_data_bytes), (48, 8), "{st:?}");
        assert_eq!(h.pool().read(p).expect("read"), 42);
        // An allocation and a free in one lazy transaction, and an abort.
        let q = h
            .transaction_with(lazy, |tx| {
                let q = tx.alloc(64)?;
                tx.write(q.cast::<u64>(), &7)?;
                Ok(q)
            })
            .expect("alloc");
        let r: Result<(), _> = h.transaction_with(lazy, |tx| {
            tx.write(p, &0)?;
            tx.free(q, 64)?;
            Err(TxError::Aborted("no".into()))
        });
        assert!(r.is_err());
        assert_eq!(h.pool().read(p).expect("read"), 42);
        assert!(h.allocator().is_allocated(q, 64));
        // Through `transaction_shared`: refused, nothing done.
        // SAFETY: nothing else uses the heap.
        let shared = unsafe { h.transaction_shared(lazy, |tx| tx.write(p, &1)) };
        assert!(matches!(shared, Err(TxError::LazyNeedsExclusive)));
        (p, q)
    };
    // Reopened without a checkpoint: the ring's entries are replayed.
    let pool = Pool::open(&path, "tx-lazy").expect("open");
    let (h, report) = TxHeap::open(pool).expect("reopen");
    assert_eq!(report.lazy_replayed, 2, "{report:?}");
    assert_eq!(h.pool().read(p).expect("read"), 42);
    assert_eq!(h.pool().read(q.cast::<u64>()).expect("read"), 7);
    assert!(h.allocator().is_allocated(q, 64));
    // After an explicit checkpoint, the next opening replays nothing.
    let mut h = h;
    h.transaction_with(lazy, |tx| tx.write(p, &43))
        .expect("lazy");
    h.checkpoint().expect("checkpoint");
    drop(h);
    let (h, report) = TxHeap::open(Pool::open(&path, "tx-lazy").expect("open")).expect("reopen");
    assert_eq!(report.lazy_replayed, 0, "{report:?}");
    assert_eq!(h.pool().read(p).expect("read"), 43);
}

/// A crash can lose a transaction's `Active` store while its records reached the
/// media; a TID reused after reopening would make those records look like the new
/// transaction's (found by the defrag crash suite: a rollback re-marked a block an
/// older transaction had freed). Every opening therefore skips past every TID the
/// previous one could have used, on every lane.
#[test]
fn a_reopened_log_never_reuses_a_tid() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tid.pool");
    let tids = |h: &mut TxHeap| -> Vec<u64> {
        (0..4)
            .map(|_| h.transaction(|tx| Ok(tx.tid())).expect("tx"))
            .collect()
    };
    let mut seen: Vec<u64> = Vec::new();
    {
        let pool = Pool::create(&path, &PoolOptions::new("tid", 4 << 20)).expect("pool");
        let mut h = TxHeap::create(pool, &TxGeometry::default(), 64).expect("heap");
        // A transaction that writes nothing leaves no durable trace of its TID.
        seen.extend(tids(&mut h));
    }
    for _ in 0..3 {
        let (mut h, _) = TxHeap::open(Pool::open(&path, "tid").expect("open")).expect("reopen");
        let next = tids(&mut h);
        let newest = seen.iter().copied().max().unwrap_or(0);
        assert!(next.iter().all(|&t| t > newest), "{next:?} after {seen:?}");
        seen.extend(next);
    }
}

/// The reopening's TID floor assumes every TID a run used is at most one round past
/// a durable one on its lane. Transactions that write nothing leave no durable
/// trace, so they must not move their lane's TID on: on every lane, the TIDs of
/// consecutive transactions that wrote are exactly one round apart, however many
/// empty ones ran between them, on whichever threads.
#[test]
fn transactions_that_write_nothing_do_not_spend_tids() {
    let mut h = heap();
    let p = block(&mut h, 1);
    let big = block(&mut h, 300);
    let lanes = u64::from(h.log().lanes());
    let mut written: Vec<u64> = Vec::new();
    for i in 0..60u64 {
        // A thread of its own per transaction, so the lanes taken vary.
        std::thread::scope(|s| {
            s.spawn(|| {
                if i % 5 == 0 {
                    written.push(
                        h.transaction(|tx| tx.write(p, &i).map(|()| tx.tid()))
                            .expect("write"),
                    );
                } else {
                    h.transaction(|tx| tx.read(p).map(|_| ())).expect("read");
                }
            });
        });
    }
    // And one that failed after it logged (redo's records, then the log was full):
    // its TID is spent like a committed one's.
    let tiny = TxOptions::new().mode(LogMode::Redo).hint(Hint::Word);
    let mut failed_tid = 0;
    let r = h.transaction_with(tiny, |tx| {
        failed_tid = tx.tid();
        (0..300).try_for_each(|w| tx.write(PPtr::<u64>::from_offset(big.offset() + 8 * w), &w))
    });
    assert!(matches!(r, Err(TxError::LogFull { .. })), "{r:?}");
    written.push(failed_tid);
    written.push(
        h.transaction(|tx| tx.write(p, &7).map(|()| tx.tid()))
            .expect("write"),
    );
    let mut by_lane: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    for t in written {
        by_lane.entry(t % lanes).or_default().push(t);
    }
    for (lane, tids) in by_lane {
        for pair in tids.windows(2) {
            assert_eq!(pair[1], pair[0] + lanes, "lane {lane}: {tids:?}");
        }
    }
}

#[test]
fn lazy_transactions_need_a_ring_that_fits_them() {
    let pool = Pool::anonymous(&PoolOptions::new("tx-noring", 1 << 20)).expect("pool");
    let geometry = TxGeometry {
        lazy_ring_bytes: 0,
        ..TxGeometry::default()
    };
    let mut h = TxHeap::create(pool, &geometry, 64).expect("heap");
    let p = block(&mut h, 1);
    let lazy = TxOptions::new().mode(LogMode::Lazy);
    let r = h.transaction_with(lazy, |tx| tx.write(p, &1));
    assert!(matches!(r, Err(TxError::NoRing)), "{r:?}");
    let pool = Pool::anonymous(&PoolOptions::new("tx-ring", 1 << 20)).expect("pool");
    let geometry = TxGeometry {
        lazy_ring_bytes: 128,
        ..TxGeometry::default()
    };
    let mut h = TxHeap::create(pool, &geometry, 64).expect("heap");
    let p = block(&mut h, 32);
    let r = h.transaction_with(lazy, |tx| tx.write(p.cast::<[u64; 32]>(), &[5; 32]));
    assert!(
        matches!(r, Err(TxError::LogFull { what: "lazy ring" })),
        "{r:?}"
    );
    assert_eq!(h.pool().read(p).expect("read"), 0, "nothing written");
    // Many small ones fill and checkpoint the ring as they go.
    for i in 0..100u64 {
        h.transaction_with(lazy, |tx| tx.write(p, &i))
            .expect("small");
    }
    assert_eq!(h.pool().read(p).expect("read"), 99);
}

#[test]
fn redo_reads_its_own_writes_and_applies_them_at_commit() {
    let mut h = heap();
    let p = block(&mut h, 2);
    h.transaction_with(
        TxOptions::new().mode(LogMode::Redo).hint(Hint::Word),
        |tx| {
            tx.write_bytes(p.offset() + 3, &[0xab])?;
            tx.write_bytes(p.offset() + 9, &[0xcd, 0xef])?;
            assert_eq!(h_read_in(tx, p)?, 0xab00_0000, "staged, not in place");
            tx.write(p, &(tx.read(p)? + 1))?;
            Ok(())
        },
    )
    .expect("tx");
    assert_eq!(h.pool().read(p).expect("read"), 0xab00_0001);
    assert_eq!(
        h.pool()
            .read(PPtr::<u64>::from_offset(p.offset() + 8))
            .expect("read"),
        0xefcd00
    );
}

fn h_read_in(tx: &mut pmem_core::tx::Tx<'_>, p: PPtr<u64>) -> Result<u64, TxError> {
    tx.read(p)
}

#[test]
fn a_transaction_too_large_for_its_lane_fails_cleanly() {
    let pool = Pool::anonymous(&PoolOptions::new("tx-small", 1 << 20)).expect("pool");
    let geometry = TxGeometry {
        lanes: 1,
        word_records: 2,
        object_records: 1,
        object_bytes: 64,
        alloc_records: 1,
        lazy_ring_bytes: 128,
    };
    let mut h = TxHeap::create(pool, &geometry, 64).expect("heap");
    let p = h
        .transaction(|tx| tx.alloc(256))
        .expect("alloc")
        .cast::<[u64; 4]>();
    let r = h.transaction_with(TxOptions::new().hint(Hint::Word), |tx| tx.write(p, &[1; 4]));
    assert!(
        matches!(
            r,
            Err(TxError::LogFull {
                what: "word records"
            })
        ),
        "{r:?}"
    );
    assert_eq!(
        h.pool().read(p).expect("read"),
        [0; 4],
        "nothing of it stayed"
    );
    let r = h.transaction(|tx| tx.write_bytes(p.offset(), &[9; 100]));
    assert!(matches!(r, Err(TxError::LogFull { .. })), "{r:?}");
}

#[test]
fn bad_geometry_and_unformatted_regions_are_typed_errors() {
    let pool = Pool::anonymous(&PoolOptions::new("tx-bad", 1 << 20)).expect("pool");
    let bad = TxGeometry {
        lanes: 0,
        ..TxGeometry::default()
    };
    assert!(matches!(
        TxHeap::create(pool, &bad, 64),
        Err(TxError::InvalidGeometry(_))
    ));
    let pool = Pool::anonymous(&PoolOptions::new("tx-none", 1 << 20)).expect("pool");
    assert!(matches!(
        TxHeap::open(pool),
        Err(TxError::NotFormatted { .. })
    ));
}

#[test]
fn a_reopened_heap_keeps_committed_data() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tx.pool");
    let p = {
        let pool = Pool::create(&path, &PoolOptions::new("tx-file", 1 << 20)).expect("create");
        let mut h = TxHeap::create(pool, &TxGeometry::default(), 64).expect("heap");
        let p = block(&mut h, 1);
        h.transaction(|tx| tx.write(p, &42)).expect("tx");
        p
    };
    let pool = Pool::open(&path, "tx-file").expect("open");
    let (h, report) = TxHeap::open(pool).expect("reopen");
    assert_eq!(report.rolled_back + report.rolled_forward, 0);
    assert_eq!(h.pool().read(p).expect("read"), 42);
}

#[test]
fn threads_run_transactions_on_their_own_lanes() {
    let mut h = heap();
    let slots: Vec<PPtr<u64>> = (0..4).map(|_| block(&mut h, 1)).collect();
    std::thread::scope(|s| {
        for (t, &p) in slots.iter().enumerate() {
            let h = &h;
            s.spawn(move || {
                for i in 0..200u64 {
                    let opts = TxOptions::new().mode(if i % 2 == 0 {
                        LogMode::Undo
                    } else {
                        LogMode::Redo
                    });
                    // SAFETY: each thread writes only its own slot.
                    unsafe { h.transaction_shared(opts, |tx| tx.write(p, &(i + 1))) }
                        .unwrap_or_else(|e| panic!("thread {t}: {e}"));
                }
            });
        }
    });
    for p in slots {
        assert_eq!(h.pool().read(p).expect("read"), 200);
    }
}

/// A failure before the commit point rolls back; one at the commit point leaves the
/// transaction in doubt, retires its lane, and the next open decides.
#[test]
fn commit_failures_roll_back_or_leave_the_transaction_in_doubt() {
    use pmem_core::tx::mutation::Site;
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("doubt.pool");
    let pool = Pool::create(&path, &PoolOptions::new("tx-doubt", 1 << 20)).expect("create");
    let geometry = TxGeometry {
        lanes: 1,
        ..TxGeometry::default()
    };
    let mut h = TxHeap::create(pool, &geometry, 64).expect("heap");
    let p = block(&mut h, 1);
    h.transaction(|tx| tx.write(p, &1)).expect("tx");

    h.log().fail_site(Some(Site::CommitDataFence));
    let r = h.transaction(|tx| tx.write(p, &2));
    assert!(matches!(r, Err(TxError::Pool(_))), "{r:?}");
    assert_eq!(h.pool().read(p).expect("read"), 1, "rolled back");

    h.log().fail_site(Some(Site::CommitIdleFence));
    let r = h.transaction(|tx| tx.write(p, &3));
    assert!(matches!(r, Err(TxError::InDoubt { .. })), "{r:?}");
    let r = h.transaction(|tx| tx.write(p, &4));
    assert!(
        matches!(r, Err(TxError::NoLane)),
        "the only lane is retired: {r:?}"
    );
    drop(h);
    let (h, _) = TxHeap::open(Pool::open(&path, "tx-doubt").expect("open")).expect("reopen");
    let v = h.pool().read(p).expect("read");
    assert!(v == 1 || v == 3, "in doubt means before or after, got {v}");
}

#[test]
fn alloc_uninit_keeps_the_old_bytes_flushes_none_and_is_released_on_abort() {
    let (pool, _sim) = Pool::simulated(&PoolOptions::new("tx-uninit", 4 << 20)).expect("pool");
    let mut h = TxHeap::create(pool, &TxGeometry::default(), 64).expect("heap");
    for mode in [LogMode::Undo, LogMode::Redo, LogMode::Lazy] {
        let opts = TxOptions::new().mode(mode);
        // The pool's bytes before: an uninit block keeps them (zero-filling would
        // also keep fresh zeroes, so the flush count below tells the two apart).
        let before = h.pool().bytes(0, h.pool().len()).expect("bytes").to_vec();
        let ((b, zeroed), st) = h
            .transaction_stats(opts, |tx| {
                let b = tx.alloc_uninit(256)?;
                tx.write(b.cast::<u64>(), &1)?;
                Ok((b, tx.read(PPtr::<[u64; 32]>::from_offset(b.offset()))?))
            })
            .expect("alloc_uninit");
        assert_eq!(zeroed[0], 1, "{mode:?}");
        let at = b.offset() as usize;
        assert_eq!(
            zeroed[1..].as_bytes(),
            &before[at + 8..at + 256],
            "{mode:?}: the old bytes"
        );
        let (c, st_zeroed) = h
            .transaction_stats(opts, |tx| {
                tx.free(b, 256)?;
                let c = tx.alloc(256)?;
                tx.write(c.cast::<u64>(), &1)?;
                Ok(c)
            })
            .expect("alloc");
        assert!(
            st.lines_flushed + 4 <= st_zeroed.lines_flushed,
            "{mode:?}: uninit {st:?}, zeroed {st_zeroed:?}"
        );
        // An aborted transaction's uninit block is free again (two would not fit).
        let e = h.transaction_with(opts, |tx| -> Result<(), TxError> {
            tx.alloc_uninit(2 << 20)?;
            Err(TxError::Aborted("test".into()))
        });
        assert!(matches!(e, Err(TxError::Aborted(_))), "{mode:?}: {e:?}");
        let again = h.transaction_with(opts, |tx| tx.alloc_uninit(2 << 20));
        assert!(again.is_ok(), "{mode:?}: {again:?}");
        h.transaction_with(opts, |tx| tx.free(again.expect("checked"), 2 << 20))
            .expect("free");
        h.transaction_with(opts, |tx| tx.free(c, 256))
            .expect("free the zeroed block");
    }
}
