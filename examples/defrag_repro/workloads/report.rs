//! Runs every workload on the four heaps, derives the figures (the paper's Eq. 1
//! time-average reduction over the check-point samples), prints the table and
//! builds the JSON fields.

use serde_json::{json, Map, Value};

use super::{run_pmdk, run_pmkit, setup, Ds, Env, RunResult, Sample, Setup};
use crate::pmdk::Pmdk;

/// One workload's four runs.
pub struct Figures {
    /// The workload.
    pub ds: Ds,
    /// pmkit with the collector.
    pub ours: RunResult,
    /// pmkit without it.
    pub base: RunResult,
    /// PMDK with `pmemobj_defrag` (`None` without PMDK).
    pub pmdk: Option<RunResult>,
    /// PMDK without it.
    pub pmdk_base: Option<RunResult>,
}

/// Mean of `f` over the samples (0 if none).
pub fn mean(s: &[Sample], f: fn(&Sample) -> u64) -> f64 {
    if s.is_empty() {
        0.0
    } else {
        s.iter().map(|x| f(x) as f64).sum::<f64>() / s.len() as f64
    }
}

/// The paper's Eq. 1: the footprint saved over the fragmentation of the baseline,
/// in percent.
pub fn reduction(base_fp: f64, fp: f64, live: f64) -> f64 {
    if base_fp - live <= 0.0 {
        0.0
    } else {
        100.0 * (base_fp - fp) / (base_fp - live)
    }
}

fn fp(r: &RunResult) -> f64 {
    mean(&r.samples, |s| s.footprint)
}

fn live(r: &RunResult) -> f64 {
    mean(&r.samples, |s| s.live)
}

impl Figures {
    /// Against pmkit without the collector.
    pub fn reduction_pct(&self) -> f64 {
        reduction(fp(&self.base), fp(&self.ours), live(&self.ours))
    }

    /// Against PMDK without defragmentation (the paper's baseline), over pmkit's
    /// live bytes.
    pub fn reduction_vs_pmdk_pct(&self) -> Option<f64> {
        self.pmdk_base
            .as_ref()
            .map(|b| reduction(fp(b), fp(&self.ours), live(&self.ours)))
    }

    /// PMDK with `pmemobj_defrag` against PMDK without.
    pub fn pmdk_reduction_pct(&self) -> Option<f64> {
        match (&self.pmdk, &self.pmdk_base) {
            (Some(p), Some(b)) => Some(reduction(fp(b), fp(p), live(p))),
            _ => None,
        }
    }

    /// The paper's execution-time overhead: the phases' wall-clock time with the
    /// collector over the same without it, in percent.
    pub fn exec_overhead_pct(&self) -> f64 {
        100.0 * (self.ours.secs / self.base.secs - 1.0)
    }

    /// Share of the phases' time the collector held the heap lock, in percent.
    pub fn locked_pct(&self) -> f64 {
        100.0 * self.ours.locked_secs / self.ours.secs
    }

    /// The workload's JSON object.
    pub fn json(&self) -> Value {
        let mib = |x: f64| x / (1u64 << 20) as f64;
        let mut v = json!({
            "frag_ratio_before": self.ours.ratio_before,
            "frag_ratio_after": self.ours.ratio_after,
            "reduction_pct": self.reduction_pct(),
            "reduction_vs_pmdk_pct": self.reduction_vs_pmdk_pct(),
            "pmdk_frag_ratio_before": self.pmdk.as_ref().map(|p| p.ratio_before),
            "pmdk_frag_ratio_after": self.pmdk.as_ref().map(|p| p.ratio_after),
            "pmdk_reduction_pct": self.pmdk_reduction_pct(),
            "compactions": self.ours.compactions,
            "moved": self.ours.moved,
            "p99_op_us_beside_compactions": self.ours.during.map(|d| d.0),
            "ops_beside_compactions": self.ours.during.map(|d| d.1),
            "pmdk_defrags": self.pmdk.as_ref().map(|p| p.compactions),
            "pmdk_moved": self.pmdk.as_ref().map(|p| p.moved),
            "pmdk_pause_max_ms": self.pmdk.as_ref().map(|p| p.pauses_ms.iter().copied().fold(0.0, f64::max)),
            "avg_footprint_mib": {
                "pmkit": mib(fp(&self.ours)),
                "pmkit_no_defrag": mib(fp(&self.base)),
                "pmdk": self.pmdk.as_ref().map(|p| mib(fp(p))),
                "pmdk_no_defrag": self.pmdk_base.as_ref().map(|p| mib(fp(p))),
                "live": mib(live(&self.ours)),
            },
            "exec_overhead_pct": self.exec_overhead_pct(),
            "collector_locked_pct": self.locked_pct(),
            "secs": {
                "pmkit": self.ours.secs,
                "pmkit_no_defrag": self.base.secs,
                "pmdk": self.pmdk.as_ref().map(|p| p.secs),
            },
        });
        if let Some(l) = self.base.latency {
            v["p99_op_us_during_defrag"] = json!(l.p99_us);
            v["max_op_us_during_defrag"] = json!(l.max_us);
            v["ops_during_defrag"] = json!(l.ops);
            v["moved_during_latency_stage"] = json!(l.moved);
            v["pmdk_pause_ms"] = json!(self
                .pmdk_base
                .as_ref()
                .and_then(|p| p.latency)
                .map(|p| p.pmdk_pause_ms));
        }
        v
    }
}

/// Runs of pmkit with and without the collector per workload: the execution-time
/// overhead compares the median runs (a run of a fraction of a second moves by
/// tens of percent with what ran just before it).
pub const TIMING_RUNS: usize = 3;

/// Runs `w` on pmkit `env.timing_runs` times (normally [`TIMING_RUNS`]) with the collector and as many
/// without, alternating which goes first, and returns the run of median time of
/// each (every figure of a side comes from that one run).
fn median_runs(env: &Env, w: Setup) -> Result<(RunResult, RunResult), String> {
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for round in 0..env.timing_runs.max(1) {
        if round % 2 == 0 {
            on.push(run_pmkit(env, w, true)?);
            off.push(run_pmkit(env, w, false)?);
        } else {
            off.push(run_pmkit(env, w, false)?);
            on.push(run_pmkit(env, w, true)?);
        }
    }
    let median = |mut v: Vec<RunResult>| {
        v.sort_by(|a, b| a.secs.total_cmp(&b.secs));
        v.swap_remove(v.len() / 2)
    };
    Ok((median(on), median(off)))
}

/// Runs every workload: pmkit with and without the collector (the median of
/// [`TIMING_RUNS`] each), PMDK with and without `pmemobj_defrag` (if `lib`).
pub fn run_all(env: &Env, lib: Option<&Pmdk>) -> Result<Vec<Figures>, String> {
    let mut out = Vec::new();
    for ds in Ds::ALL {
        crate::progress::step(ds.name());
        let w = setup(ds, env.plan.n);
        let (ours, base) = median_runs(env, w)?;
        let (pmdk, pmdk_base) = match lib {
            Some(l) => (
                Some(run_pmdk(l, env, w, true)?),
                Some(run_pmdk(l, env, w, false)?),
            ),
            None => (None, None),
        };
        crate::progress::suspend(|| {
            println!(
                "  {:<4} done: pmkit {:.2} s with the collector ({} compactions, {:.3} s of them holding the heap lock), {:.2} s without{}",
                ds.name(),
                ours.secs,
                ours.compactions,
                ours.locked_secs,
                base.secs,
                pmdk.as_ref()
                    .map_or(String::new(), |p| format!("; PMDK {:.1} s", p.secs)),
            )
        });
        out.push(Figures {
            ds,
            ours,
            base,
            pmdk,
            pmdk_base,
        });
    }
    Ok(out)
}

fn opt(x: Option<f64>, prec: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.prec$}"))
}

/// Prints the table of the workloads.
pub fn print_table(figs: &[Figures]) {
    println!(
        "{:<5} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>6} {:>9} {:>7} {:>28}",
        "",
        "before",
        "after",
        "reduct.",
        "vs PMDK",
        "PMDK aft",
        "PMDK red",
        "comp.",
        "moved",
        "PMDK df",
        "avg MiB: none/ours/PMDK/live"
    );
    let mib = |x: f64| x / (1u64 << 20) as f64;
    for f in figs {
        println!(
            "{:<5} {:>8.3} {:>8.3} {:>8.1}% {:>8}% {:>9} {:>8}% {:>6} {:>9} {:>7} {:>28}",
            f.ds.name(),
            f.ours.ratio_before,
            f.ours.ratio_after,
            f.reduction_pct(),
            opt(f.reduction_vs_pmdk_pct(), 1),
            opt(f.pmdk.as_ref().map(|p| p.ratio_after), 3),
            opt(f.pmdk_reduction_pct(), 1),
            f.ours.compactions,
            f.ours.moved,
            f.pmdk
                .as_ref()
                .map_or("-".into(), |p| p.compactions.to_string()),
            format!(
                "{:.1}/{:.1}/{}/{:.1}",
                mib(fp(&f.base)),
                mib(fp(&f.ours)),
                opt(f.pmdk.as_ref().map(|p| mib(fp(p))), 1),
                mib(live(&f.ours))
            ),
        );
    }
    println!(
        "before/after: pmkit's ratio at the end of the last phase and after a final FFCCD compaction there (target 1.25); PMDK aft: after a final pmemobj_defrag; comp./moved: compactions beside the workload and their moves; PMDK df: pmemobj_defrag calls (stop-the-world, ratio above 1.5 at a check point)"
    );
    println!(
        "average reduction {:.1}% (Eq. 1 time-average; baseline: pmkit's heap without the collector; 'vs PMDK': PMDK without pmemobj_defrag as the baseline, as in the paper)",
        avg_reduction(figs)
    );
    let each: Vec<String> = figs
        .iter()
        .map(|f| {
            format!(
                "{} {:+.1}% (heap lock held {:.1}% of the run)",
                f.ds.name(),
                f.exec_overhead_pct(),
                f.locked_pct()
            )
        })
        .collect();
    println!(
        "execution time with the collector over without (the paper's overhead; median of {TIMING_RUNS} runs each): {}; average {:+.1}%",
        each.join(", "),
        avg_exec_overhead(figs)
    );
}

/// Mean of `f` over the workloads (0 if none).
fn avg(figs: &[Figures], f: fn(&Figures) -> f64) -> f64 {
    if figs.is_empty() {
        0.0
    } else {
        figs.iter().map(f).sum::<f64>() / figs.len() as f64
    }
}

/// Mean of the workloads' execution-time overhead (the paper's mutator overhead).
pub fn avg_exec_overhead(figs: &[Figures]) -> f64 {
    avg(figs, Figures::exec_overhead_pct)
}

/// Mean of the workloads' `reduction_pct`.
pub fn avg_reduction(figs: &[Figures]) -> f64 {
    avg(figs, Figures::reduction_pct)
}

/// The JSON fields: one object per workload and the averages.
pub fn json(figs: &[Figures]) -> Map<String, Value> {
    let mut m = Map::new();
    for f in figs {
        m.insert(f.ds.name().into(), f.json());
    }
    m.insert("avg_reduction_pct".into(), json!(avg_reduction(figs)));
    m.insert(
        "avg_exec_overhead_pct".into(),
        json!(avg_exec_overhead(figs)),
    );
    let vs: Vec<f64> = figs
        .iter()
        .filter_map(Figures::reduction_vs_pmdk_pct)
        .collect();
    m.insert(
        "avg_reduction_vs_pmdk_pct".into(),
        json!((vs.len() == figs.len() && !vs.is_empty())
            .then(|| vs.iter().sum::<f64>() / vs.len() as f64)),
    );
    m
}

/// Prints the table of the durable run (pmkit only).
pub fn print_durable_table(figs: &[Figures]) {
    println!(
        "{:<5} {:>8} {:>8} {:>9} {:>6} {:>9} {:>9} {:>9} {:>8}",
        "", "before", "after", "reduct.", "comp.", "moved", "secs on", "secs off", "time +"
    );
    for f in figs {
        println!(
            "{:<5} {:>8.3} {:>8.3} {:>8.1}% {:>6} {:>9} {:>9.2} {:>9.2} {:>+7.1}%",
            f.ds.name(),
            f.ours.ratio_before,
            f.ours.ratio_after,
            f.reduction_pct(),
            f.ours.compactions,
            f.ours.moved,
            f.ours.secs,
            f.base.secs,
            f.exec_overhead_pct()
        );
    }
    println!(
        "average reduction {:.1}%, execution time {:+.1}%",
        avg_reduction(figs),
        avg_exec_overhead(figs)
    );
}

/// The JSON fields of the durable run: per workload its ratios, reduction,
/// execution-time overhead, compactions and moves; and the averages.
pub fn durable_json(figs: &[Figures]) -> Map<String, Value> {
    let mut m = Map::new();
    for f in figs {
        m.insert(
            f.ds.name().into(),
            json!({
                "frag_ratio_before": f.ours.ratio_before,
                "frag_ratio_after": f.ours.ratio_after,
                "reduction_pct": f.reduction_pct(),
                "exec_overhead_pct": f.exec_overhead_pct(),
                "collector_locked_pct": f.locked_pct(),
                "compactions": f.ours.compactions,
                "moved": f.ours.moved,
                "secs": {"pmkit": f.ours.secs, "pmkit_no_defrag": f.base.secs},
            }),
        );
    }
    m.insert("avg_reduction_pct".into(), json!(avg_reduction(figs)));
    m.insert(
        "avg_exec_overhead_pct".into(),
        json!(avg_exec_overhead(figs)),
    );
    m
}
