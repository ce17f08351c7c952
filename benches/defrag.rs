//! Criterion benchmark of a defragmentation move, per protocol of pmkit's `defrag`
//! against libpmemobj's `pmemobj_defrag`, in one group: the `defrag_repro`
//! example's protocol table with criterion's statistics and report.
//!
//! `defrag_move/{espresso,sfccd,ffccd,pmdk}`: the `ll` workload (a list of
//! 128-byte nodes, every other one freed; `examples/defrag_repro/ll.rs`) is built,
//! untimed, then compacted once, timed: pmkit with the protocol named (no mutator
//! runs), PMDK with every `PMEMoid` of its list handed to `pmemobj_defrag`
//! (`examples/defrag_repro/pmdk.rs`). One iteration is one moved object: the time
//! of the whole compaction (plan, moves, healing, release) is divided among the
//! objects it moved, and lists are built and compacted until criterion's
//! iterations are covered. The two heaps move different numbers of objects from
//! the same list (pmkit about half, PMDK about a quarter), so the figure compared
//! is the cost per moved object, as in the example. When libpmemobj.so.1 is
//! absent, one line says the peer is skipped.
//!
//! Pools are forced-DAX files in `/dev/shm` (or `PMKIT_BENCH_DIR`): the flush
//! and fence instructions of real PM, nothing durable; PMDK gets the same through
//! `PMEM_IS_PMEM_FORCE=1`. Building the lists takes several times as long as the
//! compactions timed, which the group's short measurement time allows for.
//!
//! Run: `cargo bench --bench defrag`; the report is
//! target/criterion/report/index.html.

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_main, Criterion};
use pmem_defrag::{CompactOptions, Protocol};

#[path = "common/harness.rs"]
mod harness;
#[path = "../examples/defrag_repro/ll.rs"]
#[allow(dead_code)]
mod ll;
// The example's PMDK peer; the bench uses its list.
#[path = "../examples/defrag_repro/pmdk.rs"]
#[allow(dead_code, unused_imports)]
mod pmdk;
#[path = "../examples/common/pmdk_lib.rs"]
mod pmdk_lib;

/// Nodes of each list (about half of them moved by pmkit per compaction).
const NODES: u64 = 20_000;
/// [`NODES`] in test mode (`cargo test --benches`: a debug build, one compaction).
const NODES_TEST: u64 = 1_000;

fn fail(what: &str, err: &dyn std::fmt::Display) -> ! {
    harness::fail("defrag", what, err)
}

/// Runs `compact_once` (which returns its timed span and the objects it moved)
/// until `iters` objects have moved; the time, scaled to `iters` moves.
fn per_move(iters: u64, mut compact_once: impl FnMut() -> (Duration, u64)) -> Duration {
    let (mut total, mut moved) = (Duration::ZERO, 0u64);
    while moved < iters {
        let (t, m) = compact_once();
        if m == 0 {
            fail("compaction", &"moved nothing");
        }
        total += t;
        moved += m;
    }
    total.mul_f64(iters as f64 / moved as f64)
}

/// One pmkit compaction of a fresh `ll` heap of `n` nodes with `protocol`.
fn pmkit_once(dir: &Path, n: u64, protocol: Protocol) -> (Duration, u64) {
    let (heap, _file) = ll::build_ll(dir, &format!("criterion-{}", protocol.name()), n, false)
        .unwrap_or_else(|e| fail("building the list", &e));
    let t = Instant::now();
    let r = heap
        .compact_with(&CompactOptions::new().protocol(protocol))
        .unwrap_or_else(|e| fail(protocol.name(), &e));
    let elapsed = t.elapsed();
    if r.protocol != protocol {
        fail(protocol.name(), &format!("ran as {}", r.protocol));
    }
    (elapsed, r.moved)
}

/// One `pmemobj_defrag` of a fresh PMDK list of `n` nodes.
fn pmdk_once(lib: &pmdk::Pmdk, dir: &Path, n: u64) -> (Duration, u64) {
    let path = dir.join(format!(
        "pmkit-defrag-criterion-pmdk-{}.pool",
        std::process::id()
    ));
    let size = (n * 2 * 4096 / 26 + (32 << 20)).next_power_of_two();
    let mut list = pmdk::PmdkList::create(lib, &path, size, ll::VALUE)
        .unwrap_or_else(|e| fail("PMDK list", &e));
    for i in 0..n {
        if let Err(e) = list.push(i as u8) {
            fail("PMDK push", &e);
        }
    }
    list.free_every_other();
    let t = Instant::now();
    let r = list.defrag().unwrap_or_else(|e| fail("pmemobj_defrag", &e));
    (t.elapsed(), r.relocated as u64)
}

fn benches(c: &mut Criterion) {
    harness::force_pmdk_pmem();
    let lib = pmdk::Pmdk::load()
        .map_err(|e| harness::skipped("defrag", "PMDK", &e))
        .ok();
    let dir = harness::bench_dir();
    let n = if harness::test_mode() {
        NODES_TEST
    } else {
        NODES
    };
    let mut g = c.benchmark_group("defrag_move");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10);
    for protocol in [Protocol::Espresso, Protocol::Sfccd, Protocol::Ffccd] {
        g.bench_function(protocol.name(), |b| {
            b.iter_custom(|iters| per_move(iters, || pmkit_once(&dir, n, protocol)))
        });
    }
    if let Some(lib) = &lib {
        g.bench_function("pmdk", |b| {
            b.iter_custom(|iters| per_move(iters, || pmdk_once(lib, &dir, n)))
        });
    }
    g.finish();
}

/// The criterion group (its generated function has no doc comment of its own).
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::benches);
}

criterion_main!(group::benches);
