//! Criterion benchmarks of pmem-core's transactions against libpmemobj's (PMDK), in
//! one run: the `tx_bench` example's two headline comparisons, with criterion's
//! statistics and report.
//!
//! * `tx_8b/{pmkit_lazy,pmkit_undo,pmkit_redo,pmdk}`: one transaction that
//!   snapshots and writes one 8-byte word, by pmem-core's commit modes, against
//!   `pmemobj_tx_begin` + `pmemobj_tx_add_range_direct` + store + commit of the
//!   same word.
//! * `pht_insert/{pmkit,pmdk}`: an insert of a fresh 64-byte key with a 64-byte
//!   value into pmem-collections' `PHashMap<PBytes, PBytes>` (`insert`, its default
//!   logging), one transaction each, against the same open-addressing table on
//!   PMDK's transactions (`examples/tx_bench/pmdk.rs`: the key and value allocated
//!   in the transaction, slot and count snapshotted). Both tables are sized
//!   beforehand for [`MAX_ENTRIES`] (the figure is of inserts, not of growth) and
//!   replaced by fresh ones, untimed, when they hold that many.
//!
//! Pools are forced-DAX files in `/dev/shm` (or `PMKIT_BENCH_DIR`): the flush and
//! fence instructions of real PM, nothing durable; PMDK gets the same through
//! `PMEM_IS_PMEM_FORCE=1`. When libpmemobj.so.1 is absent, one line says the peer
//! is skipped and pmkit runs alone.
//!
//! Run: `cargo bench --bench tx`; the report is target/criterion/report/index.html.

use std::cell::RefCell;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_main, Criterion};
use pmem_core::tx::{Hint, LogMode, TxHeap, TxOptions};
use pmem_core::PPtr;

#[path = "common/harness.rs"]
mod harness;
#[path = "common/interleave.rs"]
#[allow(dead_code)]
mod interleave;
// The example's PMDK peer and workload helpers (pools, keys, values); the bench
// uses part of them.
#[path = "../examples/tx_bench/pmdk.rs"]
#[allow(dead_code, unused_imports)]
mod pmdk;
#[path = "../examples/common/pmdk_lib.rs"]
mod pmdk_lib;
#[path = "../examples/common/pmdk_tx.rs"]
#[allow(dead_code)]
mod pmdk_tx;
#[path = "../examples/tx_bench/workloads.rs"]
#[allow(dead_code, unused_imports)]
mod workloads;

use pmdk::{Pmdk, PmdkMap, PmdkPool};
use workloads::{key, pmkit_heap, pmkit_map, pool_size, value, Map, PoolFile};

/// Entries at which a hash table is replaced by an empty one.
const MAX_ENTRIES: u64 = 20_000;
/// Bytes of a value (the paper's 64 B).
const VALUE: usize = 64;

fn fail(what: &str, err: &dyn std::fmt::Display) -> ! {
    harness::fail("tx", what, err)
}

/// A word allocated in `heap` for the 8-byte transactions.
fn word_of(heap: &mut TxHeap) -> PPtr<u64> {
    heap.transaction(|tx| Ok(tx.alloc(8)?.cast::<u64>()))
        .unwrap_or_else(|e| fail("allocating the word", &e))
}

fn bench_tx_8b(c: &mut Criterion, lib: Option<&Pmdk>) {
    let dir = harness::bench_dir();
    let file = PoolFile::new(&dir, "criterion-tx8");
    let mut heap = pmkit_heap(&file, 8 << 20, false).unwrap_or_else(|e| fail("pmkit heap", &e));
    let word = word_of(&mut heap);
    let heap = RefCell::new(heap);
    let mut g = c.benchmark_group("tx_8b");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    for (name, mode) in [
        ("pmkit_lazy", LogMode::Lazy),
        ("pmkit_undo", LogMode::Undo),
        ("pmkit_redo", LogMode::Redo),
    ] {
        let opts = TxOptions::new().hint(Hint::Word).mode(mode);
        let mut v = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                v += 1;
                if let Err(e) = heap
                    .borrow_mut()
                    .transaction_with(opts, |tx| tx.write(word, black_box(&v)))
                {
                    fail(name, &e);
                }
            })
        });
    }
    let pmdk_file = PoolFile::new(&dir, "criterion-tx8-pmdk");
    if let Some(lib) = lib {
        let pool =
            PmdkPool::create(lib, &pmdk_file.0, 16 << 20).unwrap_or_else(|e| fail("PMDK pool", &e));
        let w = pool.root();
        let mut v = 0u64;
        g.bench_function("pmdk", |b| {
            b.iter(|| {
                v += 1;
                if let Err(e) = pmdk::tx_8b(&pool, w, black_box(v)) {
                    fail("pmdk", &e);
                }
            })
        });
    }
    g.finish();
}

/// A pmkit table sized for [`MAX_ENTRIES`] on a new pool at `file`.
fn pmkit_table(file: &PoolFile) -> (pmem_collections::PHeap, Map) {
    pmkit_map(file, pool_size(MAX_ENTRIES, VALUE), MAX_ENTRIES, false)
        .unwrap_or_else(|e| fail("pmkit table", &e))
}

/// A PMDK pool at `file` with a table sized for [`MAX_ENTRIES`].
fn pmdk_table<'a>(lib: &'a Pmdk, file: &PoolFile) -> PmdkPool<'a> {
    let pool = PmdkPool::create(lib, &file.0, pool_size(MAX_ENTRIES, VALUE) * 2)
        .unwrap_or_else(|e| fail("PMDK pool", &e));
    PmdkMap::create(&pool, MAX_ENTRIES).unwrap_or_else(|e| fail("PMDK table", &e));
    pool
}

fn bench_pht_insert(c: &mut Criterion, lib: Option<&Pmdk>) {
    let dir = harness::bench_dir();
    let values: Vec<Vec<u8>> = (0..16).map(|i| value(i, VALUE)).collect();
    let mut g = c.benchmark_group("pht_insert");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(30);
    {
        let file = PoolFile::new(&dir, "criterion-pht");
        let mut table = Some(pmkit_table(&file));
        let (mut i, mut done) = (0u64, 0u64);
        g.bench_function("pmkit", |b| {
            b.iter_custom(|iters| {
                harness::timed_with_resets(
                    iters,
                    MAX_ENTRIES,
                    &mut done,
                    &mut table,
                    |t| {
                        if let Some((heap, map)) = t.as_mut() {
                            i += 1;
                            let v = &values[(i % 16) as usize];
                            if let Err(e) = map.insert(heap, &key(i), v) {
                                fail("PHashMap::insert", &e);
                            }
                        }
                    },
                    |t| {
                        // The old pool is unmapped before its file is re-created.
                        drop(t.take());
                        *t = Some(pmkit_table(&file));
                    },
                )
            })
        });
    }
    if let Some(lib) = lib {
        let file = PoolFile::new(&dir, "criterion-pht-pmdk");
        let mut pool = Some(pmdk_table(lib, &file));
        let (mut i, mut done) = (0u64, 0u64);
        g.bench_function("pmdk", |b| {
            b.iter_custom(|iters| {
                harness::timed_with_resets(
                    iters,
                    MAX_ENTRIES,
                    &mut done,
                    &mut pool,
                    |p| {
                        if let Some(p) = p.as_ref() {
                            i += 1;
                            let v = &values[(i % 16) as usize];
                            if let Err(e) = PmdkMap::attach(p).insert(&key(i), v) {
                                fail("PMDK insert", &e);
                            }
                        }
                    },
                    |p| {
                        drop(p.take());
                        *p = Some(pmdk_table(lib, &file));
                    },
                )
            })
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    harness::force_pmdk_pmem();
    let lib = Pmdk::load()
        .map_err(|e| harness::skipped("tx", "PMDK", &e))
        .ok();
    bench_tx_8b(c, lib.as_ref());
    bench_pht_insert(c, lib.as_ref());
}

/// The criterion group (its generated function has no doc comment of its own).
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::benches);
}

criterion_main!(group::benches);
