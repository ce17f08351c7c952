//! Criterion benchmarks of pmem-core's hot paths against their raw peers, in one run.
//!
//! * `persist/*`: making 8 B, 64 B (aligned and straddling two lines) and 4 KiB
//!   durable through `Pool::persist`, through the `flush::persist_raw` primitive, and
//!   through a hand-written inline-assembly loop of the same flush instruction
//!   (`clwb` here; whatever `pmem_core::flush::kind()` picked elsewhere) plus `sfence`.
//!   Every variant first dirties each line it persists with the same volatile stores.
//!   The pool lives in `/dev/shm` (or `./target`) in forced `Dax` mode: the flushes
//!   and fences are real, durability is not (there is no PM behind tmpfs).
//! * `deref/*`: 64 reads through `Pool::get(PPtr<u64>)` vs 64 reads through raw
//!   `*const u64`, independent (`*_reads`) and as a dependent chase (`*_chase`);
//!   criterion's throughput line gives the per-dereference rate.
//! * `open/*`: `Pool::open` + drop of a sparse 1 GiB pool.
//!
//! Run: `cargo bench --bench persist` (add `-- --warm-up-time 1 --measurement-time 3`
//! for a shorter run). `PMKIT_BENCH_DIR` overrides the pool directory.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::measurement::WallTime;
use criterion::{criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use pmem_core::flush;

mod common;

use common::{PersistCase, RawSeq, WithRaw, WorkPool, DEREFS_PER_CALL, PERSIST_CASES};

/// Reports a setup or run-time failure and exits: a benchmark that cannot run its
/// peer must not print half a comparison.
#[cold]
fn fail(what: &str, err: &dyn std::fmt::Display) -> ! {
    eprintln!("persist bench: {what}: {err}");
    std::process::exit(1)
}

fn bench_dir() -> PathBuf {
    std::env::var_os("PMKIT_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(common::default_dir)
}

fn work_pool() -> WorkPool {
    let dir = bench_dir();
    WorkPool::create(&dir)
        .unwrap_or_else(|e| fail(&format!("creating a pool in {}", dir.display()), &e))
}

/// Benchmarks the raw sequence `S` on one case (generic, so no dispatch in the loop).
struct RawBench<'g, 'c> {
    group: &'g mut BenchmarkGroup<'c, WallTime>,
    case: PersistCase,
    addr: *mut u8,
}

impl WithRaw for RawBench<'_, '_> {
    type Out = ();

    fn call<S: RawSeq>(self) {
        let (addr, len) = (self.addr, self.case.len as usize);
        let mut v = 0u64;
        self.group
            .bench_function(BenchmarkId::new(S::NAME, self.case.label), |b| {
                b.iter(|| {
                    v = v.wrapping_add(1);
                    // SAFETY: `addr..addr+len` is inside the work pool's mapping, 8-byte
                    // aligned, and no reference to it is live; `S` is the sequence
                    // `raw_for` picked for pmem-core's detected instruction.
                    unsafe { common::dirty_and_persist::<S>(addr, len, v) };
                })
            });
    }
}

fn bench_persist(c: &mut Criterion) {
    let wp = work_pool();
    let kind = flush::kind();
    eprintln!(
        "persist bench: flush instruction {kind}, pool mode {} ({}), raw peer {}",
        wp.pool.mode(),
        wp.pool.mode_source().describe(),
        common::raw_name(kind)
    );
    let mut g = c.benchmark_group("persist");
    for case in PERSIST_CASES {
        let off = wp.offset(&case);
        let addr = wp
            .addr(&case)
            .unwrap_or_else(|e| fail("addressing the persist range", &e));
        let len = case.len;
        let pool = &wp.pool;

        let mut v = 0u64;
        g.bench_function(BenchmarkId::new("pool_persist", case.label), |b| {
            b.iter(|| {
                v = v.wrapping_add(1);
                // SAFETY: as in RawBench: in the mapping, aligned, unreferenced.
                unsafe { common::dirty(addr, len as usize, v) };
                if let Err(e) = pool.persist(black_box(off), black_box(len)) {
                    fail("Pool::persist", &e);
                }
            })
        });

        let mut v = 0u64;
        g.bench_function(BenchmarkId::new("flush_persist_raw", case.label), |b| {
            b.iter(|| {
                v = v.wrapping_add(1);
                // SAFETY: as above.
                unsafe { common::dirty(addr, len as usize, v) };
                // SAFETY: the range is inside the mapped pool.
                unsafe {
                    flush::persist_raw(black_box(addr).cast_const(), black_box(len as usize))
                };
            })
        });

        common::raw_for(
            kind,
            RawBench {
                group: &mut g,
                case,
                addr,
            },
        );
    }
    g.finish();
}

fn bench_deref(c: &mut Criterion) {
    let mut wp = work_pool();
    let set =
        common::DerefSet::build(&mut wp).unwrap_or_else(|e| fail("building the deref set", &e));
    let pool = &wp.pool;
    let mut g = c.benchmark_group("deref");
    g.throughput(Throughput::Elements(DEREFS_PER_CALL as u64));

    g.bench_function("pool_get_reads", |b| {
        b.iter(|| match common::sum_pool(pool, black_box(&set.pptrs[..])) {
            Ok(s) => s,
            Err(e) => fail("Pool::get", &e),
        })
    });
    g.bench_function("raw_ptr_reads", |b| {
        // SAFETY: every raw pointer addresses an aligned u64 of the mapped work pool.
        b.iter(|| unsafe { common::sum_raw(black_box(&set.raws[..])) })
    });

    let mut off = set.chase_off;
    g.bench_function("pool_get_chase", |b| {
        b.iter(|| {
            off = match common::chase_pool(pool, black_box(off)) {
                Ok(o) => o,
                Err(e) => fail("Pool::get", &e),
            };
            off
        })
    });
    let mut p = set.chase_raw;
    g.bench_function("raw_ptr_chase", |b| {
        b.iter(|| {
            // SAFETY: `p` always points into the raw cycle of the mapped work pool.
            p = unsafe { common::chase_raw(black_box(p)) };
            p
        })
    });
    g.finish();
}

fn bench_open(c: &mut Criterion) {
    let dir = bench_dir();
    let big = common::create_big_pool(&dir)
        .unwrap_or_else(|e| fail(&format!("creating a 1 GiB pool in {}", dir.display()), &e));
    let mut g = c.benchmark_group("open");
    g.sample_size(20);
    g.bench_function("open_close_1GiB", |b| {
        b.iter(|| {
            if let Err(e) = common::open_close(big.path()) {
                fail("Pool::open", &e);
            }
        })
    });
    g.finish();
}

/// The criterion group (its generated function has no doc comment of its own).
#[allow(missing_docs)]
mod group {
    use super::{bench_deref, bench_open, bench_persist};
    criterion::criterion_group!(benches, bench_persist, bench_deref, bench_open);
}

criterion_main!(group::benches);
