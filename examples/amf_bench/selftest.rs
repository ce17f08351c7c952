//! The hidden `--selftest`: one line per check, with its time, and a non-zero
//! exit on any failure.
//!
//! 1. the content verifier notices a flipped byte;
//! 2. a cgroup can be made (else the limit checks are skipped and said so);
//! 3. a child touching [`ANON_BYTES`] of `Vec<u8>` under a limit of a quarter of
//!    that is killed;
//! 4. a child touching an eighth under the same limit completes;
//! 5. a `kv` child whose footprint fits the limit completes with an `ok` line;
//! 6. a `kv` child whose footprint is four times the limit is killed;
//! 7. `kv` and `sql` run in this process at a small footprint and verify;
//! 8. the STREAM triad on three `Vec<f64>` and its check.

use std::process::ExitCode;
use std::time::Instant;

use crate::child::{cgroup_available, cgroup_probe, run_limited, ChildOutcome};
use crate::kv::{run_kv, KvConfig};
use crate::sql::{run_sql, SqlConfig};
use crate::verify::{check_stream, fill_stream};
use crate::{parse_ok_line, stream, ChildArgs, Workload, ANON_FLAG};

/// Bytes the killed anonymous child touches (its limit is a quarter).
const ANON_BYTES: u64 = 256 << 20;
/// Footprint of the in-process and fitting workload runs.
const SMALL_FOOTPRINT: u64 = 16 << 20;
/// Operations of the in-process workload runs.
const SMALL_OPS: u64 = 50_000;
/// Elements per triad array (32 MiB each: the selftest's size, not STREAM's
/// rule of four times the last-level cache).
const TRIAD_ELEMENTS: usize = 4 << 20;
/// Triad repetitions.
const TRIAD_REPS: usize = 10;

/// Counts the checks' results.
#[derive(Default)]
struct Tally {
    /// Checks failed.
    failed: u32,
}

impl Tally {
    /// Prints one check's line: `PASS`, `FAIL` or `SKIP`, name, milliseconds and
    /// detail.
    fn line(&mut self, status: Result<bool, ()>, name: &str, start: Instant, detail: &str) {
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let word = match status {
            Ok(true) => "PASS",
            Ok(false) => {
                self.failed += 1;
                "FAIL"
            }
            Err(()) => "SKIP",
        };
        println!("{word} {name:<22} {ms:>9.1} ms  {detail}");
    }
}

/// A one-line summary of a child's outcome.
fn describe(o: &ChildOutcome) -> String {
    let last = o.stdout.lines().last().unwrap_or("");
    let err = o.stderr_tail.lines().last().unwrap_or("");
    format!(
        "{}{} completed={} exit={:?} signal={:?} oom_killed={} oom_kills={:?} limit_hits={:?} peak={:?} removed={} last={last:?}{}",
        o.limit_source,
        if o.swap_limited { "+noswap" } else { "" },
        o.completed,
        o.exit_code,
        o.signal,
        o.oom_killed,
        o.oom_kills,
        o.limit_hits,
        o.peak_bytes,
        o.cgroup_removed,
        if err.is_empty() { String::new() } else { format!(" stderr={err:?}") },
    )
}

/// Runs a limited child and checks it against `expect_kill`.
fn limited(t: &mut Tally, name: &str, args: &[String], limit: u64, expect_kill: bool) {
    let start = Instant::now();
    match run_limited(args, limit) {
        Ok(o) => {
            let ok = if expect_kill {
                !o.completed && o.oom_killed
            } else {
                o.completed && !o.oom_killed
            };
            let detail = format!("limit={limit} {}", describe(&o));
            t.line(Ok(ok), name, start, &detail);
        }
        Err(e) => t.line(Ok(false), name, start, &e.to_string()),
    }
}

/// Runs the selftest.
pub fn run() -> ExitCode {
    let mut t = Tally::default();

    // 1. The verifier sees a single flipped byte.
    let start = Instant::now();
    let mut buf = vec![0u8; 4099];
    fill_stream(&mut buf, 42);
    let clean = check_stream(&buf, 42);
    buf[1234] ^= 0x10;
    let flipped = check_stream(&buf, 42);
    t.line(
        Ok(clean.is_none() && flipped == Some(1234)),
        "verifier",
        start,
        &format!("clean={clean:?} flipped_at={flipped:?}"),
    );

    // 2. A cgroup.
    let start = Instant::now();
    let cgroup = cgroup_probe();
    // The up-front answer agrees with the probe.
    let agrees = cgroup_available() == cgroup.as_ref().ok().copied();
    match &cgroup {
        Ok(src) => t.line(Ok(agrees), "cgroup_probe", start, src),
        Err(e) if agrees => t.line(Err(()), "cgroup_probe", start, e),
        Err(e) => t.line(Ok(false), "cgroup_probe", start, e),
    }

    let limit = ANON_BYTES / 4;
    if cgroup.is_ok() {
        // 3, 4. Anonymous memory over and under the limit.
        let anon = |bytes: u64| vec![ANON_FLAG.to_owned(), bytes.to_string()];
        limited(&mut t, "anon_over_limit", &anon(ANON_BYTES), limit, true);
        limited(
            &mut t,
            "anon_under_limit",
            &anon(ANON_BYTES / 8),
            limit,
            false,
        );

        // 5. A kv child that fits, and its ok line.
        let start = Instant::now();
        let fits = ChildArgs {
            workload: Workload::Kv,
            footprint: SMALL_FOOTPRINT,
            ops: SMALL_OPS,
            seed: 7,
        };
        match run_limited(&fits.to_args(), limit) {
            Ok(o) => {
                let line = parse_ok_line(&o.stdout);
                let ok = o.completed && line.is_some_and(|l| l.verified > 0 && l.ops > SMALL_OPS);
                t.line(Ok(ok), "kv_child_fits", start, &describe(&o));
            }
            Err(e) => t.line(Ok(false), "kv_child_fits", start, &e.to_string()),
        }

        // 6. A kv child four times the limit.
        let over = ChildArgs {
            footprint: 4 * limit,
            ..fits
        };
        limited(&mut t, "kv_child_over_limit", &over.to_args(), limit, true);
    } else {
        let start = Instant::now();
        for name in [
            "anon_over_limit",
            "anon_under_limit",
            "kv_child_fits",
            "kv_child_over_limit",
        ] {
            t.line(Err(()), name, start, "no cgroup");
        }
    }

    // 7. The workloads in process.
    let start = Instant::now();
    match run_kv(&KvConfig {
        footprint_bytes: SMALL_FOOTPRINT,
        ops: SMALL_OPS,
        seed: 11,
    }) {
        Ok(r) => t.line(
            Ok(r.values_verified > 0),
            "kv_in_process",
            start,
            &format!(
                "ops={} fill={} elapsed={:.1}ms ops_per_sec={:.0} verified={} peak={}",
                r.ops,
                r.fill_sets,
                r.elapsed.as_secs_f64() * 1e3,
                r.ops_per_sec,
                r.values_verified,
                r.peak_live_bytes
            ),
        ),
        Err(e) => t.line(Ok(false), "kv_in_process", start, &e.to_string()),
    }
    let start = Instant::now();
    match run_sql(&SqlConfig {
        footprint_bytes: SMALL_FOOTPRINT,
        ops: SMALL_OPS,
        seed: 13,
    }) {
        Ok(r) => t.line(
            Ok(r.rows_verified > 0 && r.live_rows > 0),
            "sql_in_process",
            start,
            &format!(
                "ops={} preload={} mix(i/u/s/d)={:?} elapsed={:.1}ms ops_per_sec={:.0} verified={} live={} peak={}",
                r.ops,
                r.preload_rows,
                r.mix_counts,
                r.elapsed.as_secs_f64() * 1e3,
                r.ops_per_sec,
                r.rows_verified,
                r.live_rows,
                r.peak_live_bytes
            ),
        ),
        Err(e) => t.line(Ok(false), "sql_in_process", start, &e.to_string()),
    }

    // 8. The triad.
    let start = Instant::now();
    let mut a = vec![0.0f64; TRIAD_ELEMENTS];
    let mut b = vec![0.0f64; TRIAD_ELEMENTS];
    let mut c = vec![0.0f64; TRIAD_ELEMENTS];
    stream::init(&mut a, &mut b, &mut c);
    let s = stream::triad_stats(&mut a, &b, &c, TRIAD_REPS);
    // The single-figure forms, a few passes each.
    let best = stream::triad_gbps(&mut a, &b, &c, 3);
    let median = stream::triad_gbps_median(&mut a, &b, &c, 3);
    let checked = stream::check(&a, &b, &c);
    t.line(
        Ok(checked.is_ok() && s.best_gbps > 0.0 && s.median_gbps <= s.best_gbps && best > 0.0 && median > 0.0),
        "stream_triad",
        start,
        &format!(
            "elements={} reps={} best={:.2} GB/s median={:.2} GB/s (3 more: best={best:.2} median={median:.2}) check={checked:?}",
            s.elements, s.reps, s.best_gbps, s.median_gbps
        ),
    );

    if t.failed == 0 {
        println!("selftest: all checks passed");
        ExitCode::SUCCESS
    } else {
        println!("selftest: {} check(s) failed", t.failed);
        ExitCode::FAILURE
    }
}
