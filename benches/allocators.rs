//! Criterion benchmarks of the persistent allocators against each other and against
//! PMDK's and a DRAM allocator, in one group: the `nvwa_bench` example's pair
//! figure with criterion's statistics and report.
//!
//! `alloc_free_64B/<allocator>`: one 64-byte allocation followed by its free.
//! * `nvwa`: NVWA with its default options (CAA pages, one arena per core, an
//!   allocation log on the media);
//! * `wafa`: WAFA with its default options (reform daemon);
//! * `pmdk`: libpmemobj's non-transactional `pmemobj_alloc` into a `PMEMoid` in
//!   DRAM and `pmemobj_free` (`examples/nvwa_bench/pmdk.rs`); when
//!   libpmemobj.so.1 is absent, one line says the peer is skipped;
//! * `mimalloc`: `mi_malloc` / `mi_free`, a volatile reference (DRAM, nothing
//!   flushed).
//!
//! The persistent allocators run on pool files in `/dev/shm` (or
//! `PMKIT_BENCH_DIR`) in forced-DAX mode: the flush and fence instructions of real
//! PM, nothing durable; PMDK gets the same through `PMEM_IS_PMEM_FORCE=1`.
//!
//! Run: `cargo bench --bench allocators`; the report is
//! target/criterion/report/index.html.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_main, Criterion};
use nvwa::{Nvwa, NvwaOptions};
use pmem_core::{ModeRequest, PersistentAllocator, Pool, PoolOptions};
use wafa::{Wafa, WafaOptions};

mod common;
#[path = "common/harness.rs"]
mod harness;
// The example's PMDK peer (its pool file removes itself on drop).
#[path = "../examples/nvwa_bench/pmdk.rs"]
#[allow(dead_code)]
mod pmdk;
#[path = "../examples/common/pmdk_lib.rs"]
mod pmdk_lib;

use common::TempFile;
use pmdk::PmdkHeap;

/// Bytes per allocation.
const PAIR_BYTES: u64 = 64;
/// Bytes of each allocator's pool.
const POOL_BYTES: u64 = 64 << 20;

fn fail(what: &str, err: &dyn std::fmt::Display) -> ! {
    harness::fail("allocators", what, err)
}

/// A forced-DAX pool file (removed when the returned guard drops, after the pool).
fn dax_pool(what: &str) -> (Arc<Pool>, TempFile) {
    let file = TempFile::new(common::unique_path(&harness::bench_dir(), what));
    let pool = Pool::create(
        file.path(),
        &PoolOptions::new("pmkit-alloc-bench", POOL_BYTES).mode(ModeRequest::ForceDax),
    )
    .unwrap_or_else(|e| fail(&format!("creating {}", file.path().display()), &e));
    (Arc::new(pool), file)
}

/// One `alloc(PAIR_BYTES)` and its `free` on `h` (generic: no dynamic dispatch in
/// the timed loop, for either allocator).
#[inline(always)]
fn pair<A: PersistentAllocator>(name: &str, h: &A) {
    let p = h
        .alloc(black_box(PAIR_BYTES))
        .unwrap_or_else(|e| fail(name, &e));
    // SAFETY: `p` was just allocated with this size; nothing references it.
    if let Err(e) = unsafe { h.free(black_box(p), PAIR_BYTES) } {
        fail(name, &e);
    }
}

fn benches(c: &mut Criterion) {
    harness::force_pmdk_pmem();
    // Heaps first, files after: the heaps (and their pools) drop before the files.
    let (nvwa_pool, _nvwa_file) = dax_pool("nvwa");
    let (wafa_pool, _wafa_file) = dax_pool("wafa");
    // SAFETY: a fresh pool; nothing else uses its heap area.
    let nvwa = unsafe { Nvwa::format_heap(nvwa_pool, &NvwaOptions::default()) }
        .unwrap_or_else(|e| fail("formatting NVWA", &e));
    // SAFETY: as above.
    let wafa = unsafe { Wafa::format(wafa_pool, WafaOptions::default()) }
        .unwrap_or_else(|e| fail("formatting WAFA", &e));
    let pmdk = PmdkHeap::create(&harness::bench_dir())
        .map_err(|e| harness::skipped("allocators", "PMDK", &e))
        .ok();

    let mut g = c.benchmark_group("alloc_free_64B");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    g.bench_function("nvwa", |b| b.iter(|| pair("nvwa", &nvwa)));
    g.bench_function("wafa", |b| b.iter(|| pair("wafa", &wafa)));
    if let Some(p) = &pmdk {
        g.bench_function("pmdk", |b| {
            b.iter(|| {
                if let Err(e) = p.pair(PAIR_BYTES as usize) {
                    fail("pmdk", &e);
                }
            })
        });
    }
    g.bench_function("mimalloc", |b| {
        b.iter(|| {
            // SAFETY: mi_malloc has no preconditions; null is checked.
            let p = unsafe { libmimalloc_sys::mi_malloc(black_box(PAIR_BYTES as usize)) };
            if p.is_null() {
                fail("mi_malloc", &"null");
            }
            // SAFETY: `p` came from mi_malloc and is freed once.
            unsafe { libmimalloc_sys::mi_free(black_box(p)) };
        })
    });
    g.finish();
}

/// The criterion group (its generated function has no doc comment of its own).
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::benches);
}

criterion_main!(group::benches);
