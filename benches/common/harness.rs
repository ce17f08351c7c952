//! What the comparison benches (`tx`, `allocators`, `store`, `defrag`) share around
//! criterion: where their pool files go, how a failure ends the run, how PMDK is
//! told to treat `/dev/shm` as persistent memory, and the timing loop for
//! operations that fill a structure which must be emptied now and then.
//!
//! Included with `#[path = "common/harness.rs"]`; not a bench target of its own.

// Each bench uses a different subset.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Reports a setup or run-time failure of bench `bench` and exits: a benchmark
/// that cannot run its peer must not print half a comparison.
#[cold]
pub fn fail(bench: &str, what: &str, err: &dyn std::fmt::Display) -> ! {
    eprintln!("{bench} bench: {what}: {err}");
    std::process::exit(1)
}

/// Where pool files go: `PMKIT_BENCH_DIR` if set, else `/dev/shm` (tmpfs: flushes
/// cost what they cost, no disk involved), else `./target`, else `.`.
pub fn bench_dir() -> PathBuf {
    std::env::var_os("PMKIT_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            ["/dev/shm", "target"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_dir())
                .unwrap_or_else(|| PathBuf::from("."))
        })
}

/// PMDK decides when it is loaded whether a mapping counts as PM; as pmem-core's
/// forced-DAX pools, its pools in `/dev/shm` must get the flush instructions of
/// real PM, so this sets `PMEM_IS_PMEM_FORCE=1` unless the user chose otherwise.
/// Call before loading libpmemobj, while the process has one thread.
pub fn force_pmdk_pmem() {
    if std::env::var_os("PMEM_IS_PMEM_FORCE").is_none() {
        std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
    }
}

/// Says on stderr that `peer` is left out of bench `bench`, and why (one line).
pub fn skipped(bench: &str, peer: &str, why: &str) {
    eprintln!("{bench} bench: {peer} peer skipped: {why}");
}

/// `iters` timed calls of `op` on `state`; `reset` empties it (untimed) whenever
/// `op` has run `max` times since the last emptying (`done` counts them across
/// calls), so a structure that grows with every call stays bounded however many
/// iterations criterion asks for.
pub fn timed_with_resets<S>(
    iters: u64,
    max: u64,
    done: &mut u64,
    state: &mut S,
    mut op: impl FnMut(&mut S),
    mut reset: impl FnMut(&mut S),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        if *done >= max {
            reset(state);
            *done = 0;
        }
        let run = left.min(max - *done);
        let t = Instant::now();
        for _ in 0..run {
            op(state);
        }
        total += t.elapsed();
        *done += run;
        left -= run;
    }
    total
}

/// Whether criterion runs in test mode (`cargo test --benches`: each benchmark
/// once, no `--bench` argument): setups then fill smaller structures, so the test
/// takes seconds in a debug build. The timed operation is the same.
pub fn test_mode() -> bool {
    !std::env::args().any(|a| a == "--bench")
}
