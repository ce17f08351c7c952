//! The targets, computed from the measured figures and printed with
//! whether each is met (never asserted; not part of the JSON). A target whose
//! figures did not run (a workload left out, the naive baseline or PMDK
//! unavailable) is `n/a` with the reason.

use crate::pairs::RAW;
use crate::{Figures, Sizes, PHT_SIZES};

/// Largest allocator line flushes per NVWA allocation.
const MAX_FLUSHES_PER_ALLOC: f64 = 2.0;
/// Largest allocator line flushes per NVWA free.
const MAX_FLUSHES_PER_FREE: f64 = 1.0;
/// Smallest naive / NVWA flush ratio on every hash-table size (the paper: up to 8).
const MIN_PHT_REDUCTION: f64 = 5.0;
/// `nvwa_dax` at most this times (raw persist pair + mimalloc pair).
const MAX_DAX_OVER_RAW_PLUS_MIMALLOC: f64 = 1.25;
/// `nvwa_dax` at most this share of PMDK's pair.
const MAX_DAX_SHARE_OF_PMDK: f64 = 1.0 / 3.0;
/// Two threads' pair throughput at least this times one thread's.
const MIN_SCALING_2T: f64 = 1.6;
/// Recovery of 1 M live objects at most this long.
const MAX_RECOVERY_MS: f64 = 100.0;
/// Smallest CAA-4 and CAA-16 contiguity-miss reductions against JIT, percent.
const MIN_CAA4_PCT: f64 = 75.0;
const MIN_CAA16_PCT: f64 = 90.0;

/// One target: what it asks, what was measured, and the verdict (`Err`: why
/// there is none).
struct Row {
    target: String,
    measured: String,
    met: Result<bool, &'static str>,
}

fn row(
    target: String,
    value: Option<f64>,
    why_absent: &'static str,
    ok: impl Fn(f64) -> bool,
    shown: impl Fn(f64) -> String,
) -> Row {
    match value {
        Some(v) => Row {
            target,
            measured: shown(v),
            met: Ok(ok(v)),
        },
        None => Row {
            target,
            measured: "-".into(),
            met: Err(why_absent),
        },
    }
}

fn rows(f: &Figures, sizes: &Sizes) -> Vec<Row> {
    let mut out = Vec::new();
    let nvwa = f.largest_pht().map(|s| s.nvwa.cost);
    out.push(row(
        format!("flushes_per_alloc.nvwa <= {MAX_FLUSHES_PER_ALLOC}"),
        nvwa.and_then(|c| c.lines_per_alloc()),
        "pht not run",
        |v| v <= MAX_FLUSHES_PER_ALLOC,
        |v| format!("{v:.3}"),
    ));
    out.push(row(
        format!("flushes_per_free.nvwa <= {MAX_FLUSHES_PER_FREE}"),
        nvwa.and_then(|c| c.lines_per_free()),
        "pht not run",
        |v| v <= MAX_FLUSHES_PER_FREE,
        |v| format!("{v:.3}"),
    ));
    for &(_, label) in &PHT_SIZES {
        let size = f.pht.iter().find(|s| s.label == label);
        out.push(row(
            format!("pht_flush_reduction_x.{label} >= {MIN_PHT_REDUCTION}"),
            size.and_then(|s| s.reduction()),
            if size.is_some() {
                "naive did not run"
            } else {
                "pht not run"
            },
            |v| v >= MIN_PHT_REDUCTION,
            |v| format!("{v:.2}x"),
        ));
    }
    let pair = |n: &str| f.pairs.as_ref().and_then(|p| p.median(n));
    let dax = pair("nvwa_dax");
    let floor = pair(RAW).zip(pair("mimalloc")).map(|(r, m)| r + m);
    out.push(row(
        format!("nvwa_dax <= {MAX_DAX_OVER_RAW_PLUS_MIMALLOC} x (raw_persist_pair + mimalloc)"),
        dax.zip(floor).map(|(d, fl)| d / fl),
        "pairs not run",
        |v| v <= MAX_DAX_OVER_RAW_PLUS_MIMALLOC,
        |v| format!("{v:.2}x"),
    ));
    out.push(row(
        "nvwa_dax <= pmdk / 3".into(),
        dax.zip(pair("pmdk")).map(|(d, p)| d / p),
        if f.pairs.is_some() {
            "PMDK did not run"
        } else {
            "pairs not run"
        },
        |v| v <= MAX_DAX_SHARE_OF_PMDK,
        |v| format!("{v:.3} of pmdk"),
    ));
    out.push(row(
        format!("pair_ops_per_sec_2t >= {MIN_SCALING_2T} x 1 thread"),
        f.scaling.map(|s| s.two / s.one),
        "scaling not run",
        |v| v >= MIN_SCALING_2T,
        |v| format!("{v:.2}x"),
    ));
    let objects = f.recovery.as_ref().map_or(sizes.recovery, |r| r.objects);
    out.push(row(
        format!(
            "recovery_ms_1m <= {MAX_RECOVERY_MS}{}",
            if objects == 1_000_000 {
                String::new()
            } else {
                format!(" (here {objects} objects, not 1 M)")
            }
        ),
        f.recovery.as_ref().map(|r| r.open_heap_ms),
        "recovery not run",
        |v| v <= MAX_RECOVERY_MS,
        |v| format!("{v:.2} ms"),
    ));
    let caa = f.caa.as_ref().and_then(|c| c.first());
    for (name, min) in [("caa4", MIN_CAA4_PCT), ("caa16", MIN_CAA16_PCT)] {
        out.push(row(
            format!("caa.contiguity_miss_reduction_pct.{name} >= {min}"),
            caa.and_then(|c| c.reduction_pct(name)),
            "caa not run",
            |v| v >= min,
            |v| format!("{v:.1} %"),
        ));
    }
    out
}

/// Prints the targets table.
pub fn print(f: &Figures, sizes: &Sizes) {
    let rows = rows(f, sizes);
    let width = rows.iter().map(|r| r.target.len()).max().unwrap_or(0);
    println!();
    println!("targets (computed, not asserted):");
    for r in &rows {
        let verdict = match r.met {
            Ok(true) => "met".to_owned(),
            Ok(false) => "NOT met".to_owned(),
            Err(why) => format!("n/a ({why})"),
        };
        println!("  {:<width$}  {:>16}  {verdict}", r.target, r.measured);
    }
}
