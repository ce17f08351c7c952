//! Criterion benchmarks of WAFA's allocation/free pair against mimalloc and glibc, by
//! size, on one thread and on two.
//!
//! * `wafa_pair_1t/<allocator>/<size>`: one `alloc(size)` then its `free`, for sizes
//!   16, 64, 256 and 1024 B (a divided page, Clockwise Best-Fit) and 4096 B (above
//!   63 units: the whole-page path). Allocators: `wafa_volatile` (anonymous
//!   `Volatile` pool: compute only), `wafa_dax` (a pool file in `/dev/shm`, or
//!   `PMKIT_BENCH_DIR`, in forced `Dax` mode: each allocation's `clwb`+`sfence` is
//!   real, durability is not), `mimalloc` (`mi_malloc`/`mi_free`) and `glibc`
//!   (`malloc`/`free`). WAFA runs with its default options (reform daemon).
//! * `wafa_pair_2t/<allocator>/<size>`: two threads, started together, each doing
//!   pairs — on one shared WAFA heap (one lock), or through the DRAM allocator's
//!   thread caches. The reported time is the wall time for each thread to do one
//!   pair while the other does the same (throughput: 2 pairs per iteration).
//!
//! WAFA is built without its `wear` counters unless the `wafa-wear` feature is on.
//! Run: `cargo bench --bench wafa_pair` (2 s of measurement per benchmark).

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_main, BenchmarkId, Criterion, Throughput};
use pmem_core::{ModeRequest, Pool, PoolOptions};
use wafa::{Wafa, WafaOptions};

mod common;

/// Request sizes, bytes.
const SIZES: [usize; 5] = [16, 64, 256, 1024, 4096];
/// Size of the WAFA pools.
const POOL_BYTES: u64 = 32 << 20;

/// Reports a setup or run-time failure and exits: a benchmark that cannot run its
/// peer must not print half a comparison.
#[cold]
fn fail(what: &str, err: &dyn std::fmt::Display) -> ! {
    eprintln!("wafa_pair bench: {what}: {err}");
    std::process::exit(1)
}

fn bench_dir() -> PathBuf {
    std::env::var_os("PMKIT_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(common::default_dir)
}

/// The allocators compared.
#[derive(Clone, Copy)]
enum Alloc<'a> {
    Wafa(&'a Wafa),
    Mimalloc,
    Glibc,
}

impl Alloc<'_> {
    /// One alloc + free of `size` bytes.
    #[inline(always)]
    fn pair(self, size: usize) {
        match self {
            Alloc::Wafa(w) => {
                let p = w
                    .alloc(black_box(size as u64))
                    .unwrap_or_else(|e| fail("wafa alloc", &e));
                // SAFETY: `p` was just allocated with this size; nothing references it.
                if let Err(e) = unsafe { w.free(black_box(p), size as u64) } {
                    fail("wafa free", &e);
                }
            }
            Alloc::Mimalloc => {
                // SAFETY: mi_malloc has no preconditions; null is checked.
                let p = unsafe { libmimalloc_sys::mi_malloc(black_box(size)) };
                if p.is_null() {
                    fail("mi_malloc", &"null");
                }
                // SAFETY: `p` came from mi_malloc and is freed once.
                unsafe { libmimalloc_sys::mi_free(black_box(p)) };
            }
            Alloc::Glibc => {
                // SAFETY: malloc has no preconditions; null is checked.
                let p = unsafe { libc::malloc(black_box(size)) };
                if p.is_null() {
                    fail("malloc", &"null");
                }
                // SAFETY: `p` came from malloc and is freed once.
                unsafe { libc::free(black_box(p)) };
            }
        }
    }
}

/// The two WAFA heaps (the DAX one's pool file is removed on drop, after the heap).
struct Heaps {
    volatile: Wafa,
    dax: Wafa,
    _file: common::TempFile,
}

fn heaps() -> Heaps {
    let pool = Pool::anonymous(&PoolOptions::new("wafa", POOL_BYTES))
        .unwrap_or_else(|e| fail("anonymous pool", &e));
    // SAFETY: a fresh pool; nothing else uses its heap.
    let volatile = unsafe { Wafa::format(Arc::new(pool), WafaOptions::default()) }
        .unwrap_or_else(|e| fail("formatting WAFA", &e));
    let dir = bench_dir();
    let file = common::TempFile::new(common::unique_path(&dir, "wafa"));
    let pool = Pool::create(
        file.path(),
        &PoolOptions::new("wafa", POOL_BYTES).mode(ModeRequest::ForceDax),
    )
    .unwrap_or_else(|e| fail(&format!("creating a pool in {}", dir.display()), &e));
    // SAFETY: a fresh pool; nothing else uses its heap.
    let dax = unsafe { Wafa::format(Arc::new(pool), WafaOptions::default()) }
        .unwrap_or_else(|e| fail("formatting WAFA", &e));
    Heaps {
        volatile,
        dax,
        _file: file,
    }
}

fn allocators(h: &Heaps) -> [(&'static str, Alloc<'_>); 4] {
    [
        ("wafa_volatile", Alloc::Wafa(&h.volatile)),
        ("wafa_dax", Alloc::Wafa(&h.dax)),
        ("mimalloc", Alloc::Mimalloc),
        ("glibc", Alloc::Glibc),
    ]
}

fn bench_one_thread(c: &mut Criterion) {
    let h = heaps();
    let mut g = c.benchmark_group("wafa_pair_1t");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(1));
    for size in SIZES {
        for (name, a) in allocators(&h) {
            g.bench_function(BenchmarkId::new(name, size), |b| b.iter(|| a.pair(size)));
        }
    }
    g.finish();
}

/// Two threads doing `iters` pairs each, started together; the wall time from the
/// first start to the last finish.
fn two_threads(a: Alloc<'_>, size: usize, iters: u64) -> Duration {
    let barrier = Barrier::new(2);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        a.pair(size);
                    }
                    (t0, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| fail("bench thread", &"panicked"))
            })
            .collect()
    });
    let start = spans.iter().map(|s| s.0).min();
    let end = spans.iter().map(|s| s.1).max();
    match (start, end) {
        (Some(s), Some(e)) => e - s,
        _ => Duration::ZERO,
    }
}

fn bench_two_threads(c: &mut Criterion) {
    let h = heaps();
    let mut g = c.benchmark_group("wafa_pair_2t");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30)
        .throughput(Throughput::Elements(2));
    for size in SIZES {
        for (name, a) in allocators(&h) {
            g.bench_function(BenchmarkId::new(name, size), |b| {
                b.iter_custom(|iters| two_threads(a, size, iters))
            });
        }
    }
    g.finish();
}

/// The criterion group (its generated function has no doc comment of its own).
#[allow(missing_docs)]
mod group {
    use super::{bench_one_thread, bench_two_threads};
    criterion::criterion_group!(benches, bench_one_thread, bench_two_threads);
}

criterion_main!(group::benches);
