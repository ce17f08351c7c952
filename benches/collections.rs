//! Criterion benchmarks of pmem-collections' containers against std's and against
//! libpmemobj's transactions, in one run (the `collections_bench` example's
//! comparisons at a smaller size, with criterion's statistics).
//!
//! * `hashmap_insert/{pmkit,std,pmdk}`: inserts of fresh random 8-byte keys with
//!   8-byte values into `PHashMap<u64, u64>`, std's `HashMap` and PMDK's
//!   transactions on the same open-addressing table (`pmdk` only when libpmemobj is
//!   installed). A map is emptied (untimed) whenever it reaches [`MAX_ENTRIES`], so
//!   the pools stay small however many iterations criterion asks for.
//! * `hashmap_get/{pmkit,std,pmdk}`: random gets in maps of [`ENTRIES`] entries.
//! * `btree_get/{pmkit,std}`: random gets in `PBTreeMap<u64, u64>` and `BTreeMap`.
//! * `vec_push/{pmkit,std}`: pushes of 8-byte values to `PVec<u64>` and `Vec`
//!   (emptied, untimed, at [`MAX_ENTRIES`]).
//!
//! pmkit's pools are forced-DAX files in `/dev/shm` (or `./target`): the flush and
//! fence instructions of real PM, nothing durable. Run: `cargo bench --bench
//! collections` (add `-- --warm-up-time 1 --measurement-time 3` for a shorter
//! run). `PMKIT_BENCH_DIR` overrides the pool directory.

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{criterion_main, Criterion};
use pmem_collections::{Container, PBTreeMap, PHashMap, PHeap, PVec};
use pmem_core::{splitmix64, ModeRequest, Pool};

#[path = "common/harness.rs"]
mod harness;
// The example's PMDK peer; the bench uses part of it, and not its unit tests.
#[path = "../examples/common/pmdk_tx.rs"]
#[allow(unused_imports, dead_code)]
mod pmdk;
#[path = "../examples/common/pmdk_lib.rs"]
mod pmdk_lib;
#[path = "../examples/collections_bench/pmdk_map.rs"]
#[allow(unused_imports, dead_code)]
mod pmdk_map;

use pmdk::{Pmdk, PmdkPool};
use pmdk_map::PmdkMap;

/// Entries of the maps the gets run on.
const ENTRIES: u64 = 100_000;
/// Entries at which an insert or push benchmark empties its structure.
const MAX_ENTRIES: u64 = 200_000;
/// Bytes of every pool (a 2^18-slot table of 24-byte slots and the one it grew
/// from, the log, slack).
const POOL_BYTES: u64 = 128 << 20;

/// Reports a setup or run-time failure and exits: a benchmark that cannot run its
/// peer must not print half a comparison.
#[cold]
fn fail(what: &str, err: &dyn std::fmt::Display) -> ! {
    eprintln!("collections bench: {what}: {err}");
    std::process::exit(1)
}

/// A pool file removed when dropped.
struct PoolFile(PathBuf);

impl PoolFile {
    fn new(what: &str) -> PoolFile {
        let p = harness::bench_dir().join(format!(
            "pmkit-coll-criterion-{}-{what}.pool",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        PoolFile(p)
    }
}

impl Drop for PoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A forced-DAX heap on `f`.
fn heap(f: &PoolFile) -> PHeap {
    let pool = Pool::create(
        &f.0,
        &PHeap::pool_options("pmkit-coll-criterion", POOL_BYTES).mode(ModeRequest::ForceDax),
    )
    .unwrap_or_else(|e| fail(&format!("creating {}", f.0.display()), &e));
    PHeap::create(pool).unwrap_or_else(|e| fail("formatting the heap", &e))
}

/// Opens the root `name` of `heap`.
fn root<C: Container>(heap: &PHeap, name: &str) -> C {
    heap.root(name)
        .unwrap_or_else(|e| fail(&format!("opening {name}"), &e))
}

/// Frees the root `name` (its handle `c`) and opens an empty one in its place.
fn renew<C: Container>(heap: &PHeap, name: &str, c: C) -> C {
    heap.remove_root(name, c)
        .unwrap_or_else(|e| fail(&format!("removing {name}"), &e));
    root(heap, name)
}

/// The next random key.
fn next_key(s: &mut u64) -> u64 {
    splitmix64(s)
}

fn bench_hashmap_insert(c: &mut Criterion, lib: Option<&Pmdk>) {
    let mut g = c.benchmark_group("hashmap_insert");
    {
        let f = PoolFile::new("insert");
        let heap = heap(&f);
        let mut map: Option<PHashMap<u64, u64>> = Some(root(&heap, "m"));
        let (mut s, mut done) = (1u64, 0u64);
        g.bench_function("pmkit", |b| {
            b.iter_custom(|iters| {
                let heap = &heap;
                harness::timed_with_resets(
                    iters,
                    MAX_ENTRIES,
                    &mut done,
                    &mut map,
                    |map| {
                        if let Some(m) = map.as_mut() {
                            let k = next_key(&mut s);
                            if let Err(e) = m.insert(heap, &k, &k) {
                                fail("PHashMap::insert", &e);
                            }
                        }
                    },
                    |map| {
                        if let Some(m) = map.take() {
                            *map = Some(renew(heap, "m", m));
                        }
                    },
                )
            })
        });
    }
    let mut std_map: HashMap<u64, u64> = HashMap::new();
    let (mut s, mut done) = (1u64, 0u64);
    g.bench_function("std", |b| {
        b.iter_custom(|iters| {
            harness::timed_with_resets(
                iters,
                MAX_ENTRIES,
                &mut done,
                &mut std_map,
                |m| {
                    let k = next_key(&mut s);
                    black_box(m.insert(k, k));
                },
                |m| *m = HashMap::new(),
            )
        })
    });
    if let Some(lib) = lib {
        // The table lives in its pool; emptying it means a new pool (untimed).
        let f = PoolFile::new("insert-pmdk");
        let mut pool = Some(pmdk_pool(lib, &f));
        let (mut s, mut done) = (1u64, 0u64);
        g.bench_function("pmdk", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    if done >= MAX_ENTRIES {
                        drop(pool.take());
                        pool = Some(pmdk_pool(lib, &f));
                        done = 0;
                    }
                    let Some(p) = pool.as_ref() else {
                        fail("PMDK pool", &"missing")
                    };
                    let m = pmdk_table(p);
                    let run = left.min(MAX_ENTRIES - done);
                    let t = Instant::now();
                    for _ in 0..run {
                        let k = next_key(&mut s);
                        if let Err(e) = m.insert(k, &k.to_le_bytes()) {
                            fail("PMDK insert", &e);
                        }
                    }
                    total += t.elapsed();
                    done += run;
                    left -= run;
                }
                total
            })
        });
    }
    g.finish();
}

/// A PMDK pool on `f` with an empty table (8-byte values) in its root.
fn pmdk_pool<'a>(lib: &'a Pmdk, f: &PoolFile) -> PmdkPool<'a> {
    let p = PmdkPool::create(lib, &f.0, POOL_BYTES * 2)
        .unwrap_or_else(|e| fail("creating the PMDK pool", &e));
    PmdkMap::create(&p, 64, 8).unwrap_or_else(|e| fail("creating the PMDK table", &e));
    p
}

/// The table of a pool made by [`pmdk_pool`].
fn pmdk_table<'p>(p: &'p PmdkPool<'p>) -> PmdkMap<'p> {
    PmdkMap::attach(p, 8)
}

/// `ENTRIES` keys.
fn entry_keys() -> Vec<u64> {
    let mut s = 7u64;
    (0..ENTRIES).map(|_| next_key(&mut s)).collect()
}

/// The index of the next random lookup.
fn next_lookup(s: &mut u64) -> usize {
    (splitmix64(s) % ENTRIES) as usize
}

fn bench_gets(c: &mut Criterion, lib: Option<&Pmdk>) {
    let keys = entry_keys();
    let f = PoolFile::new("gets");
    let heap = heap(&f);
    let mut pm: PHashMap<u64, u64> = root(&heap, "hash");
    let mut pb: PBTreeMap<u64, u64> = root(&heap, "btree");
    let mut sm = HashMap::new();
    let mut sb = BTreeMap::new();
    for &k in &keys {
        if let Err(e) = pm.insert(&heap, &k, &k) {
            fail("PHashMap::insert", &e);
        }
        if let Err(e) = pb.insert(&heap, &k, &k) {
            fail("PBTreeMap::insert", &e);
        }
        sm.insert(k, k);
        sb.insert(k, k);
    }
    let pf = PoolFile::new("gets-pmdk");
    let pp = lib.map(|l| pmdk_pool(l, &pf));
    let pt = pp.as_ref().map(pmdk_table);
    if let Some(t) = &pt {
        for &k in &keys {
            if let Err(e) = t.insert(k, &k.to_le_bytes()) {
                fail("PMDK insert", &e);
            }
        }
    }

    let mut g = c.benchmark_group("hashmap_get");
    let mut s = 1u64;
    g.bench_function("pmkit", |b| {
        b.iter(|| match pm.get(&heap, &keys[next_lookup(&mut s)]) {
            Ok(v) => black_box(v),
            Err(e) => fail("PHashMap::get", &e),
        })
    });
    g.bench_function("std", |b| {
        b.iter(|| black_box(sm.get(&keys[next_lookup(&mut s)]).copied()))
    });
    if let Some(t) = &pt {
        g.bench_function("pmdk", |b| {
            b.iter(|| match t.get(keys[next_lookup(&mut s)]) {
                Ok(v) => black_box(v.map(|b| b.len())),
                Err(e) => fail("PMDK get", &e),
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("btree_get");
    g.bench_function("pmkit", |b| {
        b.iter(|| match pb.get(&heap, &keys[next_lookup(&mut s)]) {
            Ok(v) => black_box(v),
            Err(e) => fail("PBTreeMap::get", &e),
        })
    });
    g.bench_function("std", |b| {
        b.iter(|| black_box(sb.get(&keys[next_lookup(&mut s)]).copied()))
    });
    g.finish();
}

fn bench_vec_push(c: &mut Criterion) {
    let mut g = c.benchmark_group("vec_push");
    {
        let f = PoolFile::new("vec");
        let heap = heap(&f);
        let mut v: Option<PVec<u64>> = Some(root(&heap, "v"));
        let (mut i, mut done) = (0u64, 0u64);
        g.bench_function("pmkit", |b| {
            b.iter_custom(|iters| {
                let heap = &heap;
                harness::timed_with_resets(
                    iters,
                    MAX_ENTRIES,
                    &mut done,
                    &mut v,
                    |v| {
                        i += 1;
                        if let Some(v) = v.as_mut() {
                            if let Err(e) = v.push(heap, &i) {
                                fail("PVec::push", &e);
                            }
                        }
                    },
                    |v| {
                        if let Some(old) = v.take() {
                            *v = Some(renew(heap, "v", old));
                        }
                    },
                )
            })
        });
    }
    let mut sv: Vec<u64> = Vec::new();
    let (mut i, mut done) = (0u64, 0u64);
    g.bench_function("std", |b| {
        b.iter_custom(|iters| {
            harness::timed_with_resets(
                iters,
                MAX_ENTRIES,
                &mut done,
                &mut sv,
                |v| {
                    i += 1;
                    v.push(i);
                    black_box(&v);
                },
                |v| *v = Vec::new(),
            )
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    // PMDK decides at load whether mappings count as PM; as pmem-core's forced mode,
    // the /dev/shm pools must get the flush instructions of real PM.
    harness::force_pmdk_pmem();
    let lib = Pmdk::load()
        .map_err(|e| harness::skipped("collections", "PMDK", &e))
        .ok();
    bench_hashmap_insert(c, lib.as_ref());
    bench_gets(c, lib.as_ref());
    bench_vec_push(c);
}

/// The criterion group (its generated function has no doc comment of its own).
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::benches);
}

criterion_main!(group::benches);
