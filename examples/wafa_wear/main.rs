//! `wafa_wear`: the wear study of the WAFA paper (DAC'19, §4, Figures 4 and 5) on
//! WAFA and its peers, plus the cost of an allocation/free pair, in one run.
//!
//! ```text
//! cargo run --release --example wafa_wear -- [--json] [--quick] [--plot DIR]
//!     [--nvmalloc-window CALLS] [--wafa-reform MODE] [--dir DIR]
//! ```
//!
//! **Workloads** (`workloads.rs`; deterministic, seeded): *memcached* — 60 K
//! inserts (a 10 B key and a 256 B value each) and 40 K deletes of random live items,
//! randomly interleaved; *ycsb* — four smart-home scenarios of 1,000 records of
//! 4–32 B, each step toggling (storing or destroying) a random record, 1,000,000
//! steps (`--quick`: 100,000).
//!
//! **Allocators** (`peers.rs`, `wafa_peer.rs`): `wafa` (reform inline every 64
//! frees by default — deterministic, which the daemon is not; `--wafa-reform`); the simulated
//! `page_grained` (whole pages, data at the page start) and `nvmalloc_like` (first
//! fit over 64 B units, a page allocated from at most twice per window of
//! `--nvmalloc-window` allocator calls, default 10,000 = the paper's 100 ms at
//! 100 K calls/s); and the real `glibc`, `jemalloc`, `mimalloc`.
//!
//! **Metric** (the same for all): every allocation adds one to each 64 B unit its
//! bytes cover, unit = address >> 6, page = address >> 12 (WAFA: pool offsets;
//! simulated peers: offsets in their space; real allocators: virtual addresses).
//! Over the touched pages: total page writes = sum of each page's largest unit count
//! (the paper's "total write counts of pages"), and the mean, standard deviation,
//! CV and maximum of the per-unit counts (`wafa::wear::WearSummary`).
//!
//! **Pair cost** (`pairs.rs`, `timing.rs`): median ns of `alloc(64)` + `free` for
//! `wafa_volatile`, `wafa_dax` (forced-DAX pool file: real `clwb`+`sfence`, not
//! durable on tmpfs), `glibc`, `jemalloc`, `mimalloc`, and the raw persist of one
//! line, interleaved batch by batch. WAFA's own wear counters (feature `wafa-wear`)
//! are off in the default build so they do not inflate the timing; the output says
//! whether they were compiled in. With them, the run also checks that WAFA's
//! counters agree with the offset-derived counts.
//!
//! **Output**: a table per workload, the timing table, the target verdicts (computed,
//! never asserted), with `--json` one final line of JSON (keys
//! `<workload>.<figure>.<allocator>`, `alloc_free_pair_ns.<allocator>`, `ratio.*`,
//! `met_targets`), and with `--plot DIR` the files `DIR/memcached_cdf.svg` and
//! `DIR/ycsb_cdf.svg` (Figure 5).

#[path = "../../benches/common/mod.rs"]
mod common;
mod pairs;
mod peers;
mod plot;
#[allow(dead_code)]
#[path = "../common/progress.rs"]
mod progress;
mod timing;
mod wafa_peer;
mod workloads;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use serde_json::{json, Map, Value};
use wafa::wear::{cdf, WearSummary};
use wafa::ReformMode;

use pairs::PairResults;
use peers::{
    Jemalloc, Libc, Mimalloc, NvmallocLike, PageGrained, DEFAULT_NVMALLOC_WINDOW, SIM_PAGES,
};
use progress::outln;
use timing::Timing;
use wafa_peer::WafaTarget;
use workloads::{Trace, WearTarget};

/// Target: WAFA's total page writes on YCSB at most this fraction of page_grained's.
const YCSB_VS_PAGE_GRAINED: f64 = 0.20;
/// Target: wafa_volatile pair within this factor of mimalloc's.
const VOLATILE_VS_MIMALLOC: f64 = 2.0;
/// Target: wafa_dax pair within this factor of (raw persist of a line + mimalloc pair).
const DAX_VS_PERSIST_PLUS_MIMALLOC: f64 = 1.25;

/// The WAFA wear study (paper Fig. 4/5) with its peers: page writes per allocator on
/// the memcached and YCSB traces, and alloc+free pair timings.
#[derive(Parser, Debug)]
#[command(name = "wafa_wear")]
struct Config {
    /// End the output with one line of JSON holding the figures.
    #[arg(long)]
    json: bool,
    /// YCSB with 100,000 steps instead of 1,000,000; shorter timing.
    #[arg(long)]
    quick: bool,
    /// Write DIR/memcached_cdf.svg and DIR/ycsb_cdf.svg (Figure 5).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// nvmalloc_like's window in allocator calls (the default: 100 ms at 100,000
    /// calls/s).
    #[arg(long, value_name = "CALLS", default_value_t = DEFAULT_NVMALLOC_WINDOW,
          value_parser = clap::value_parser!(u64).range(1..))]
    nvmalloc_window: u64,
    /// WAFA's reform in the wear runs: inline:N (a pass every N frees; default
    /// inline:4096, the daemon's threshold), manual (only when out of space),
    /// daemon[:N] (background; not deterministic).
    #[arg(long, value_name = "MODE", value_parser = wafa_peer::parse_reform)]
    wafa_reform: Option<ReformMode>,
    /// Where the forced-DAX pool file of wafa_dax goes (/dev/shm, else ./target, when
    /// not given).
    #[arg(long, value_name = "DIR", default_value_os_t = common::default_dir())]
    dir: PathBuf,
}

impl Config {
    /// WAFA's reform mode in the wear runs: `--wafa-reform`'s, else the default.
    fn reform(&self) -> ReformMode {
        self.wafa_reform.unwrap_or(wafa_peer::DEFAULT_WEAR_REFORM)
    }
}

/// One allocator's result on one workload.
struct WearResult {
    name: &'static str,
    summary: WearSummary,
    cdf: Vec<(u64, f64)>,
}

/// One workload's results, WAFA first.
struct WorkloadResult {
    name: &'static str,
    calls: usize,
    allocs: usize,
    rows: Vec<WearResult>,
    /// Units compared by the `wafa-wear` cross-check, if it ran.
    cross_checked: Option<usize>,
}

impl WorkloadResult {
    fn get(&self, name: &str) -> Option<&WearSummary> {
        self.rows
            .iter()
            .find(|r| r.name == name)
            .map(|r| &r.summary)
    }

    /// Whether WAFA's figure is strictly below every other allocator's.
    fn wafa_lowest(&self, f: impl Fn(&WearSummary) -> f64) -> bool {
        match self.get("wafa") {
            Some(w) => self
                .rows
                .iter()
                .filter(|r| r.name != "wafa")
                .all(|r| f(w) < f(&r.summary)),
            None => false,
        }
    }

    /// The allocators whose figure is at or below WAFA's.
    fn at_or_below_wafa(&self, f: impl Fn(&WearSummary) -> f64) -> Vec<&'static str> {
        let Some(w) = self.get("wafa") else {
            return Vec::new();
        };
        self.rows
            .iter()
            .filter(|r| r.name != "wafa" && f(&r.summary) <= f(w))
            .map(|r| r.name)
            .collect()
    }
}

/// Replays `trace` on every allocator (fresh instances) and summarises the wear.
fn run_workload(trace: &Trace, cfg: &Config) -> Result<WorkloadResult, String> {
    let mut wafa = WafaTarget::new(cfg.reform())?;
    let mut page = PageGrained::new(SIM_PAGES);
    let mut nv = NvmallocLike::new(SIM_PAGES, cfg.nvmalloc_window);
    let targets: [&mut dyn WearTarget; 6] = [
        &mut wafa,
        &mut page,
        &mut nv,
        &mut Libc,
        &mut Jemalloc,
        &mut Mimalloc,
    ];
    // Replay everything first, summarise after: the summaries allocate through the
    // process allocator (glibc), which is one of the allocators replayed.
    let mut records = Vec::with_capacity(targets.len());
    for t in targets {
        records.push((t.name(), workloads::replay(trace, t)?));
    }
    if nv.waived > 0 {
        progress::suspend(|| {
            eprintln!(
                "note: nvmalloc_like waived its rule {} times on {} (no eligible page)",
                nv.waived, trace.name
            )
        });
    }
    let mut rows = Vec::with_capacity(records.len());
    let mut cross_checked = None;
    for (name, allocs) in &records {
        let counts: HashMap<u64, u64> = workloads::unit_counts(allocs);
        if *name == "wafa" {
            cross_checked = cross_check(&wafa, &counts)?;
        }
        let dense = workloads::dense_pages(&counts);
        rows.push(WearResult {
            name,
            summary: WearSummary::from_page_counts(&dense),
            cdf: cdf(&dense),
        });
    }
    Ok(WorkloadResult {
        name: trace.name,
        calls: trace.ops.len(),
        allocs: trace.allocs,
        rows,
        cross_checked,
    })
}

#[cfg(feature = "wafa-wear")]
fn cross_check(w: &WafaTarget, counts: &HashMap<u64, u64>) -> Result<Option<usize>, String> {
    wafa_peer::cross_check(&w.wafa, counts).map(Some)
}

#[cfg(not(feature = "wafa-wear"))]
fn cross_check(_: &WafaTarget, _: &HashMap<u64, u64>) -> Result<Option<usize>, String> {
    Ok(None)
}

fn print_workload(r: &WorkloadResult) {
    outln!(
        "{}: {} allocator calls ({} allocations)",
        r.name,
        r.calls,
        r.allocs
    );
    outln!(
        "  {:<14} {:>7} {:>12} {:>8} {:>10} {:>10} {:>8} {:>8}",
        "allocator",
        "pages",
        "page writes",
        "vs wafa",
        "unit mean",
        "unit std",
        "CV",
        "max"
    );
    let wafa_total = r.get("wafa").map(|s| s.total_page_writes as f64);
    for row in &r.rows {
        let s = &row.summary;
        let vs = wafa_total
            .filter(|&w| w > 0.0)
            .map(|w| format!("{:.2}x", s.total_page_writes as f64 / w))
            .unwrap_or_else(|| "-".to_owned());
        outln!(
            "  {:<14} {:>7} {:>12} {:>8} {:>10.3} {:>10.3} {:>8.3} {:>8}",
            row.name,
            s.pages,
            s.total_page_writes,
            vs,
            s.unit_write_mean,
            s.unit_write_std,
            s.unit_write_cv,
            s.unit_write_max
        );
    }
    if let Some(n) = r.cross_checked {
        outln!("  (wafa-wear: WAFA's own unit counters agree with the offsets on {n} units)");
    }
    outln!();
}

/// The verdicts, in output order: (JSON key, met, explanation).
type Verdicts = Vec<(String, bool, String)>;

fn verdicts(work: &[WorkloadResult], pairs: &PairResults) -> Verdicts {
    let mut v: Verdicts = Vec::new();
    let tpw = |s: &WearSummary| s.total_page_writes as f64;
    let cv = |s: &WearSummary| s.unit_write_cv;
    for r in work {
        let lowest = r.wafa_lowest(tpw);
        let beaten = r.at_or_below_wafa(tpw);
        v.push((
            format!("{}_wafa_lowest_total_page_writes", r.name),
            lowest,
            format!(
                "{}: WAFA has the lowest total page writes{}",
                r.name,
                if beaten.is_empty() {
                    String::new()
                } else {
                    format!(" (at or below it: {})", beaten.join(", "))
                }
            ),
        ));
        let lowest = r.wafa_lowest(cv);
        let beaten = r.at_or_below_wafa(cv);
        v.push((
            format!("{}_wafa_lowest_unit_cv", r.name),
            lowest,
            format!(
                "{}: WAFA has the lowest per-unit CV{}",
                r.name,
                if beaten.is_empty() {
                    String::new()
                } else {
                    format!(" (at or below it: {})", beaten.join(", "))
                }
            ),
        ));
    }
    if let Some(y) = work.iter().find(|r| r.name == "ycsb") {
        if let (Some(w), Some(p)) = (y.get("wafa"), y.get("page_grained")) {
            let frac = w.total_page_writes as f64 / p.total_page_writes.max(1) as f64;
            v.push((
                "ycsb_wafa_80pct_fewer_page_writes_than_page_grained".to_owned(),
                frac <= YCSB_VS_PAGE_GRAINED,
                format!(
                    "ycsb: WAFA at least 80% fewer total page writes than page_grained ({:.1}% fewer)",
                    (1.0 - frac) * 100.0
                ),
            ));
        }
    }
    if let (Some(wv), Some(wd), Some(mi)) = (
        pairs.median("wafa_volatile"),
        pairs.median("wafa_dax"),
        pairs.median("mimalloc"),
    ) {
        let r = wv / mi;
        v.push((
            "pair_volatile_within_2x_mimalloc".to_owned(),
            r <= VOLATILE_VS_MIMALLOC,
            format!("alloc+free pair, volatile: WAFA within 2x of mimalloc ({r:.2}x)"),
        ));
        if let Some(raw) = pairs.median(pairs.raw_name) {
            let r = wd / (raw + mi);
            v.push((
                "pair_dax_within_1_25x_persist_plus_mimalloc".to_owned(),
                r <= DAX_VS_PERSIST_PLUS_MIMALLOC,
                format!(
                    "alloc+free pair, DAX: WAFA within 1.25x of ({} of a line + a mimalloc pair) ({r:.2}x)",
                    pairs.raw_name
                ),
            ));
        }
    }
    v
}

fn print_pairs(p: &PairResults, wear_compiled: bool) {
    outln!(
        "alloc({}) + free pair, ns (median [q1 .. q3] over interleaved batches)",
        pairs::PAIR_BYTES
    );
    outln!(
        "  wafa_dax pool: mode {} ({}){}",
        p.dax_mode.name(),
        p.dax_source.describe(),
        if p.dax_durable {
            ""
        } else {
            " — the flushes are real, durability is not"
        }
    );
    outln!(
        "  WAFA wear counters compiled in: {}",
        if wear_compiled {
            "yes (feature wafa-wear: one counter increment per allocated unit is included)"
        } else {
            "no"
        }
    );
    for (name, s) in &p.rows {
        let label = if name == p.raw_name {
            format!("{name} (1 line)")
        } else {
            name.clone()
        };
        outln!(
            "  {:<20} {:>9.2}  [{:>8.2} .. {:>8.2}]  ({} per batch)",
            label,
            s.median,
            s.q1,
            s.q3,
            s.per_batch
        );
    }
    outln!();
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The first three fields of `/proc/loadavg`, if readable.
fn loadavg() -> Option<String> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

fn to_json(
    cfg: &Config,
    work: &[WorkloadResult],
    pairs: &PairResults,
    verdicts: &Verdicts,
    wear_compiled: bool,
) -> Value {
    let mut m = Map::new();
    for r in work {
        let w = r.name;
        for row in &r.rows {
            let (a, s) = (row.name, &row.summary);
            m.insert(
                format!("{w}.total_page_writes.{a}"),
                json!(s.total_page_writes),
            );
            m.insert(
                format!("{w}.unit_write_std.{a}"),
                json!(round3(s.unit_write_std)),
            );
            m.insert(
                format!("{w}.unit_write_cv.{a}"),
                json!(round3(s.unit_write_cv)),
            );
            m.insert(format!("{w}.unit_write_max.{a}"), json!(s.unit_write_max));
            m.insert(
                format!("{w}.unit_write_mean.{a}"),
                json!(round3(s.unit_write_mean)),
            );
            m.insert(format!("{w}.pages.{a}"), json!(s.pages));
            m.insert(format!("{w}.unit_writes.{a}"), json!(s.unit_writes));
        }
        m.insert(format!("{w}.allocator_calls"), json!(r.calls));
        if let Some(n) = r.cross_checked {
            m.insert(format!("{w}.wafa_counters_agree_units"), json!(n));
        }
    }
    for (name, s) in &pairs.rows {
        let key = if name == pairs.raw_name {
            "raw_persist_line_ns".to_owned()
        } else {
            format!("alloc_free_pair_ns.{name}")
        };
        m.insert(key, json!(round3(s.median)));
    }
    if let (Some(wv), Some(wd), Some(mi), Some(raw)) = (
        pairs.median("wafa_volatile"),
        pairs.median("wafa_dax"),
        pairs.median("mimalloc"),
        pairs.median(pairs.raw_name),
    ) {
        m.insert(
            "ratio.wafa_volatile_over_mimalloc".into(),
            json!(round3(wv / mi)),
        );
        m.insert(
            "ratio.wafa_dax_over_persist_line_plus_mimalloc".into(),
            json!(round3(wd / (raw + mi))),
        );
    }
    m.insert("raw_peer".into(), json!(pairs.raw_name));
    m.insert("dax_pool_mode".into(), json!(pairs.dax_mode.name()));
    m.insert("dax_pool_durable".into(), json!(pairs.dax_durable));
    m.insert("wafa_wear_counters_compiled".into(), json!(wear_compiled));
    m.insert("nvmalloc_window_calls".into(), json!(cfg.nvmalloc_window));
    m.insert(
        "wafa_wear_reform".into(),
        json!(wafa_peer::reform_name(cfg.reform())),
    );
    m.insert("ycsb_steps".into(), json!(ycsb_steps(cfg.quick)));
    m.insert("quick".into(), json!(cfg.quick));
    m.insert("loadavg".into(), json!(loadavg()));
    let met: Map<String, Value> = verdicts
        .iter()
        .map(|(k, ok, _)| (k.clone(), json!(ok)))
        .collect();
    m.insert("met_targets".into(), Value::Object(met));
    Value::Object(m)
}

fn ycsb_steps(quick: bool) -> u64 {
    if quick {
        workloads::YCSB_STEPS / 10
    } else {
        workloads::YCSB_STEPS
    }
}

fn write_plots(dir: &std::path::Path, work: &[WorkloadResult]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for r in work {
        let curves: Vec<plot::Curve<'_>> = r
            .rows
            .iter()
            .map(|row| plot::Curve {
                name: row.name,
                cdf: &row.cdf,
            })
            .collect();
        let path = dir.join(format!("{}_cdf.svg", r.name));
        plot::write_cdf_svg(&path, r.name, &curves)?;
        outln!("wrote {}", path.display());
    }
    Ok(())
}

fn run(cfg: &Config) -> Result<(), String> {
    let wear_compiled = cfg!(feature = "wafa-wear");
    let traces = [
        workloads::memcached(
            workloads::MC_INSERTS,
            workloads::MC_DELETES,
            workloads::MEMCACHED_SEED,
        ),
        workloads::ycsb(ycsb_steps(cfg.quick), workloads::YCSB_SEED),
    ];
    outln!("WAFA wear study (DAC'19 §4): writes = allocations counted per 64 B unit");
    outln!(
        "  peers: page_grained and nvmalloc_like simulated over {} pages (window {} calls); glibc, jemalloc, mimalloc real",
        SIM_PAGES, cfg.nvmalloc_window
    );
    outln!(
        "  wafa: {} MiB anonymous pool, reform {}{}",
        wafa_peer::POOL_BYTES >> 20,
        wafa_peer::reform_name(cfg.reform()),
        if cfg.quick { "; --quick" } else { "" }
    );
    outln!();
    // A step per trace and one for the pairs, drawn only as a step starts: a ticker
    // thread would allocate through glibc while glibc's wear is being replayed.
    let section = progress::Section::without_ticker("wafa_wear", traces.len() as u64 + 1);
    let mut work = Vec::with_capacity(traces.len());
    for t in &traces {
        section.step(t.name);
        let r = run_workload(t, cfg)?;
        print_workload(&r);
        work.push(r);
    }
    drop(traces);

    if !cfg.dir.is_dir() {
        std::fs::create_dir_all(&cfg.dir)
            .map_err(|e| format!("cannot create {}: {e}", cfg.dir.display()))?;
    }
    section.step("alloc+free pairs");
    let pairs = pairs::measure_pairs(&cfg.dir, &Timing::new(cfg.quick))?;
    drop(section);
    print_pairs(&pairs, wear_compiled);

    let v = verdicts(&work, &pairs);
    for (_, ok, text) in &v {
        outln!("target: {text}: {}", if *ok { "met" } else { "NOT met" });
    }
    if let Some(dir) = &cfg.plot {
        write_plots(dir, &work)?;
    }
    if cfg.json {
        outln!("{}", to_json(cfg, &work, &pairs, &v, wear_compiled));
    }
    Ok(())
}

fn main() -> ExitCode {
    let cfg = Config::parse();
    match run(&cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wafa_wear: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod cli_tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        <Config as clap::CommandFactory>::command().debug_assert();
    }
}
