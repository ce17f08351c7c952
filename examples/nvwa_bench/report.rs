//! The printed tables (one per workload, printed as each finishes) and the final
//! JSON line. Figures come only from the measurements; a peer that did not run
//! prints its error and is `null` in the JSON. The durable table prints the
//! forced-DAX figures of the same run beside its own, each labelled.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::btree::BtreeRun;
use crate::caa::CaaRun;
use crate::durable::{Durable, PhtPut};
use crate::heaps::AllocCost;
use crate::pairs::{PairResults, RAW};
use crate::pht::PhtRun;
use crate::recovery::Recovery;
use crate::scaling::Scaling;
use crate::{BtreeFig, Figures, PhtSize, Sizes, PHT_SIZES};

/// The pair rows of the JSON, in order.
const PAIR_KEYS: [&str; 6] = [
    "nvwa_volatile",
    "nvwa_dax",
    "naive_dax",
    "wafa_dax",
    "pmdk",
    "mimalloc",
];

/// The durable pair rows of the JSON, in order, with the forced-DAX row of the
/// same peer.
const DURABLE_PAIRS: [(&str, &str); 4] = [
    ("nvwa_file", "nvwa_dax"),
    ("naive_file", "naive_dax"),
    ("wafa_file", "wafa_dax"),
    ("pmdk_file", "pmdk"),
];

/// `x` rounded to three decimals (`null` for NaN or infinity).
fn r3(x: f64) -> Value {
    if x.is_finite() {
        json!((x * 1000.0).round() / 1000.0)
    } else {
        Value::Null
    }
}

fn r3o(x: Option<f64>) -> Value {
    x.map_or(Value::Null, r3)
}

fn fmt_o(x: Option<f64>, width: usize, prec: usize) -> String {
    match x {
        Some(v) => format!("{v:>width$.prec$}"),
        None => format!("{:>width$}", "-"),
    }
}

fn build() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// The first lines: where the pools are and what the timings mean.
pub fn header(dir: &Path, sizes: &Sizes, quick: bool, durable: Option<&Path>) {
    println!(
        "nvwa_bench{}: scale {} of the paper's sizes; forced-DAX pools in {} (the flush instructions of real PM, NOT durable)",
        if quick { " --quick" } else { "" },
        sizes.scale,
        dir.display()
    );
    println!(
        "flush instruction: {}; PMEM_IS_PMEM_FORCE={}; {} build",
        pmem_core::flush::kind().name(),
        std::env::var("PMEM_IS_PMEM_FORCE").unwrap_or_default(),
        build()
    );
    if let Some(d) = durable {
        println!(
            "durable mode (the last table): ordinary files in {} (msync: durable on return)",
            d.display()
        );
    }
    if cfg!(debug_assertions) {
        println!("debug build: timings are meaningless (use --release)");
    }
}

fn cost_cells(c: &AllocCost) -> String {
    format!(
        "{} {} {} {} {:>12}",
        fmt_o(c.lines_per_alloc(), 9, 3),
        fmt_o(c.fences_per_alloc(), 9, 3),
        fmt_o(c.lines_per_free(), 9, 3),
        fmt_o(c.fences_per_free(), 9, 3),
        c.lines()
    )
}

const COST_HEAD: &str = "  fl/alloc fe/alloc   fl/free  fe/free  alloc lines";

/// The PHT table of one size.
pub fn pht_size(s: &PhtSize) {
    println!();
    println!(
        "pht {}: {} puts, {} gets, {} deletes; 64 B keys and values; allocator flushes (fl) and fences (fe) counted around alloc/free",
        s.label,
        s.n,
        s.n / 2,
        s.n / 4
    );
    println!(
        "  {:<6}{COST_HEAD} {:>10} {:>8} {:>8} {:>8}",
        "alloc", "all fl/op", "put ns", "get ns", "del ns"
    );
    pht_row("nvwa", Ok(&s.nvwa));
    pht_row("naive", s.naive.as_ref());
    match s.reduction() {
        Some(x) => println!("  reduction of allocator flushes (naive / nvwa): {x:.2}x"),
        None => println!("  reduction of allocator flushes: - (naive did not run)"),
    }
}

fn pht_row(name: &str, r: Result<&PhtRun, &String>) {
    match r {
        Ok(r) => {
            let ops = r.n + r.n / 4;
            println!(
                "  {:<6}{} {:>10.3} {:>8.0} {:>8.0} {:>8.0}",
                name,
                cost_cells(&r.cost),
                r.total_lines as f64 / ops as f64,
                r.put_ns,
                r.get_ns,
                r.delete_ns
            );
        }
        Err(e) => println!("  {name:<6}error: {e}"),
    }
}

/// The B-tree table.
pub fn btree(b: &BtreeFig, ops: u64) {
    println!();
    println!("btree (order 16): {ops} random operations (60 % inserts, 40 % deletes; the last 30 % deletes only), checked against a BTreeMap");
    println!(
        "  {:<6}{COST_HEAD} {:>10} {:>8} {:>9} {:>7}",
        "alloc", "all fl/op", "op ns", "entries", "nodes"
    );
    btree_row("nvwa", Ok(&b.nvwa));
    btree_row("naive", b.naive.as_ref());
    match btree_reduction(b) {
        Some(x) => println!("  reduction of allocator flushes (naive / nvwa): {x:.2}x"),
        None => println!("  reduction of allocator flushes: - (naive did not run)"),
    }
}

fn btree_row(name: &str, r: Result<&BtreeRun, &String>) {
    match r {
        Ok(r) => println!(
            "  {:<6}{} {:>10.3} {:>8.0} {:>9} {:>7}   ({} allocs, {} frees)",
            name,
            cost_cells(&r.cost),
            r.total_lines as f64 / r.ops.max(1) as f64,
            r.op_ns,
            r.entries,
            r.nodes,
            r.cost.allocs,
            r.cost.frees
        ),
        Err(e) => println!("  {name:<6}error: {e}"),
    }
}

fn btree_reduction(b: &BtreeFig) -> Option<f64> {
    let naive = b.naive.as_ref().ok()?.cost.lines();
    let nvwa = b.nvwa.cost.lines();
    (nvwa > 0).then(|| naive as f64 / nvwa as f64)
}

/// The pair table.
pub fn pairs(p: &PairResults) {
    println!();
    println!("alloc(64) + free pair, ns (median [q1 .. q3] over interleaved batches)");
    println!(
        "  pools: nvwa_volatile {} ({}); *_dax {} ({}); raw = {} x 2",
        p.volatile_mode.0.name(),
        p.volatile_mode.1.describe(),
        p.dax_mode.0.name(),
        p.dax_mode.1.describe(),
        p.raw_seq
    );
    for (name, s) in &p.rows {
        println!(
            "  {:<18} {:>9.1}  [{:>8.1} .. {:>8.1}]  ({} per batch)",
            name, s.median, s.q1, s.q3, s.per_batch
        );
    }
    for (name, e) in &p.skipped {
        println!("  {name:<18} skipped: {e}");
    }
}

/// The scaling table.
pub fn scaling(s: &Scaling) {
    println!();
    println!(
        "nvwa_dax pairs/s on one heap (2 arenas), {} pairs per thread, median of {} rounds",
        s.pairs_per_thread, s.rounds
    );
    println!("  1 thread   {:>14.0}", s.one);
    println!("  2 threads  {:>14.0}", s.two);
    println!("  2t / 1t    {:>14.2}", s.two / s.one);
}

/// The recovery table.
pub fn recovery(r: &Recovery) {
    println!();
    println!(
        "recovery: nvwa heap with {} live 64 B objects (log {} words per area), forced-DAX",
        r.objects, r.log_words
    );
    let all: Vec<String> = r.all_ms.iter().map(|m| format!("{m:.2}")).collect();
    println!(
        "  open_heap  {:>9.2} ms (median; all: {})",
        r.open_heap_ms,
        all.join(", ")
    );
    println!(
        "  pool open  {:>9.2} ms (mapping the file, apart)",
        r.pool_open_ms
    );
}

/// The CAA table.
pub fn caa(runs: &[CaaRun]) {
    println!();
    println!(
        "CAA vs JIT: {} arenas allocating round-robin; contiguity misses (an arena's run not right after its previous one)",
        crate::caa::ARENAS
    );
    for c in runs {
        println!("  {} B objects, {} per arena:", c.object, c.per_arena);
        println!(
            "    {:<6} {:>8} {:>8} {:>8} {:>10}  per arena",
            "policy", "takes", "misses", "batches", "reduction"
        );
        for r in &c.runs {
            let red = if r.policy == "jit" {
                "-".to_owned()
            } else {
                fmt_o(c.reduction_pct(r.policy), 0, 1) + " %"
            };
            println!(
                "    {:<6} {:>8} {:>8} {:>8} {:>10}  {:?}",
                r.policy, r.takes, r.misses, r.batches, red, r.misses_per_arena
            );
        }
    }
}

/// The durable table, with the forced-DAX figures of this run beside it.
pub fn durable(d: &Durable, f: &Figures) {
    println!();
    println!(
        "DURABLE MODE (these figures are durable: each operation returns after its msyncs): ordinary files in {}, pmem-core {} ({}); PMDK on its msync path (child process, PMEM_IS_PMEM_FORCE=0)",
        d.dir.display(),
        d.mode.0.name(),
        d.mode.1.describe()
    );
    println!(
        "alloc(64) + free pair, ns: median [q1 .. q3] over {} batches of {} pairs (nvwa/naive/wafa interleaved; pmdk_file in a child after them)",
        d.sizes.batches, d.sizes.pairs_per_batch
    );
    println!(
        "  {:<12} {:>11}  [{:>10} .. {:>10}]  {:>11}   forced DAX, NOT durable (this run)",
        "peer", "durable ns", "q1", "q3", "msyncs/pair"
    );
    let dax = |name: &str| f.pairs.as_ref().and_then(|p| p.median(name));
    for (name, dax_name) in DURABLE_PAIRS {
        let beside = match dax(dax_name) {
            Some(ns) => format!("{dax_name} {ns:.1} ns"),
            None => format!("{dax_name} -"),
        };
        match d.pair(name) {
            Some(r) => println!(
                "  {:<12} {:>11.0}  [{:>10.0} .. {:>10.0}]  {}   {beside}",
                name,
                r.stats.median,
                r.stats.q1,
                r.stats.q3,
                fmt_o(r.msyncs, 11, 2)
            ),
            None => {
                let why = d
                    .skipped
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or("did not run", |(_, e)| e.as_str());
                let hint = if why.contains(crate::pmdk_lib::LIBRARY) {
                    " (Debian: apt-get install libpmemobj-dev)"
                } else {
                    ""
                };
                println!("  {name:<12} skipped: {why}{hint}");
            }
        }
    }
    let small = f.pht.first();
    println!(
        "PHT puts (durable), {} elements, 64 B keys and values: ns per put (mean, and the median put), msyncs per put",
        d.sizes.elements
    );
    println!(
        "  {:<6} {:>12} {:>10} {:>11}   forced DAX, NOT durable{}",
        "alloc",
        "put ns",
        "median",
        "msyncs/put",
        small.map_or(String::new(), |s| format!(
            " (pht {}, {} elements, this run)",
            s.label, s.n
        ))
    );
    let row = |name: &str, r: Result<&PhtPut, &String>, beside: Option<f64>| {
        let beside = beside.map_or("-".to_owned(), |ns| format!("{ns:.0} ns"));
        match r {
            Ok(p) => println!(
                "  {:<6} {:>12.0} {:>10.0} {:>11.2}   {beside}",
                name, p.mean_ns, p.median_ns, p.msyncs_per_put
            ),
            Err(e) => println!("  {name:<6} error: {e}"),
        }
    };
    row("nvwa", Ok(&d.pht_nvwa), small.map(|s| s.nvwa.put_ns));
    row(
        "naive",
        d.pht_naive.as_ref(),
        small.and_then(|s| s.naive.as_ref().ok().map(|r| r.put_ns)),
    );
}

fn durable_json(d: &Durable) -> Value {
    let pairs = |fig: &dyn Fn(&crate::durable::PairRow) -> Option<f64>| -> Map<String, Value> {
        DURABLE_PAIRS
            .iter()
            .map(|&(k, _)| (k.to_owned(), r3o(d.pair(k).and_then(fig))))
            .collect()
    };
    let pht = |fig: fn(&PhtPut) -> f64| {
        json!({
            "nvwa": r3(fig(&d.pht_nvwa)),
            "naive": r3o(d.pht_naive.as_ref().ok().map(fig)),
        })
    };
    let mut skipped: Map<String, Value> = d
        .skipped
        .iter()
        .map(|(n, e)| (n.clone(), json!(e)))
        .collect();
    if let Err(e) = &d.pht_naive {
        skipped.insert("pht_naive".into(), json!(e));
    }
    json!({
        "dir": d.dir.display().to_string(),
        "mode": d.mode.0.name(),
        "mode_source": d.mode.1.name(),
        "alloc_free_pair_ns": pairs(&|r| Some(r.stats.median)),
        "msyncs_per_pair": pairs(&|r| r.msyncs),
        "pairs_per_batch": d.sizes.pairs_per_batch,
        "batches": d.sizes.batches,
        "pht_put_ns": pht(|p| p.mean_ns),
        "pht_put_median_ns": pht(|p| p.median_ns),
        "msyncs_per_put": pht(|p| p.msyncs_per_put),
        "elements": d.sizes.elements,
        "skipped": skipped,
    })
}

fn cost_json(c: &AllocCost) -> Value {
    json!({
        "allocs": c.allocs,
        "frees": c.frees,
        "lines_per_alloc": r3o(c.lines_per_alloc()),
        "lines_per_free": r3o(c.lines_per_free()),
        "fences_per_alloc": r3o(c.fences_per_alloc()),
        "fences_per_free": r3o(c.fences_per_free()),
        "allocator_lines": c.lines(),
    })
}

fn pht_run_json(r: Result<&PhtRun, &String>) -> Value {
    match r {
        Ok(r) => json!({
            "allocator": cost_json(&r.cost),
            "allocator_lines_per_put": r3o(r.put_cost.lines_per_alloc()),
            "all_lines": r.total_lines,
            "put_ns": r3(r.put_ns),
            "get_ns": r3(r.get_ns),
            "delete_ns": r3(r.delete_ns),
        }),
        Err(e) => json!({ "error": e }),
    }
}

fn btree_run_json(r: Result<&BtreeRun, &String>) -> Value {
    match r {
        Ok(r) => json!({
            "allocator": cost_json(&r.cost),
            "inserts": r.inserts,
            "all_lines": r.total_lines,
            "op_ns": r3(r.op_ns),
            "entries": r.entries,
            "nodes": r.nodes,
        }),
        Err(e) => json!({ "error": e }),
    }
}

fn caa_json(c: &CaaRun) -> Value {
    let misses: Map<String, Value> = c
        .runs
        .iter()
        .map(|r| (r.policy.to_owned(), json!(r.misses)))
        .collect();
    json!({
        "contiguity_miss_reduction_pct": {
            "caa4": r3o(c.reduction_pct("caa4")),
            "caa16": r3o(c.reduction_pct("caa16")),
        },
        "contiguity_misses": misses,
        "object_bytes": c.object,
        "allocs_per_arena": c.per_arena,
        "arenas": crate::caa::ARENAS,
    })
}

/// The final JSON line.
pub fn json(f: &Figures, sizes: &Sizes, quick: bool, dir: &Path) -> Value {
    let largest = f.largest_pht();
    let nvwa_cost = largest.map(|s| s.nvwa.cost);
    let naive_cost = largest.and_then(|s| s.naive.as_ref().ok().map(|r| r.cost));
    let reduction: Map<String, Value> = PHT_SIZES
        .iter()
        .map(|&(_, label)| {
            let x = f
                .pht
                .iter()
                .find(|s| s.label == label)
                .and_then(PhtSize::reduction);
            (label.to_owned(), r3o(x))
        })
        .collect();
    let pair = |name: &str| r3o(f.pairs.as_ref().and_then(|p| p.median(name)));
    let pair_ns: Map<String, Value> = PAIR_KEYS.iter().map(|&k| (k.to_owned(), pair(k))).collect();
    let pht: Map<String, Value> = f
        .pht
        .iter()
        .map(|s| {
            (
                s.label.to_owned(),
                json!({
                    "elements": s.n,
                    "nvwa": pht_run_json(Ok(&s.nvwa)),
                    "naive": pht_run_json(s.naive.as_ref()),
                }),
            )
        })
        .collect();
    let caa_main = f.caa.as_ref().and_then(|c| c.first());
    let mut caa = caa_main.map_or_else(
        || json!({"contiguity_miss_reduction_pct": {"caa4": null, "caa16": null}}),
        caa_json,
    );
    if let (Some(obj), Some(small)) = (caa.as_object_mut(), f.caa.as_ref().and_then(|c| c.get(1))) {
        obj.insert("small_objects".into(), caa_json(small));
    }
    let pools = f.pairs.as_ref().map(|p| {
        json!({
            "nvwa_volatile": format!("{}/{}", p.volatile_mode.0.name(), p.volatile_mode.1.name()),
            "dax": format!("{}/{}", p.dax_mode.0.name(), p.dax_mode.1.name()),
        })
    });
    json!({
        "flushes_per_alloc": {
            "nvwa": r3o(nvwa_cost.and_then(|c| c.lines_per_alloc())),
            "naive": r3o(naive_cost.and_then(|c| c.lines_per_alloc())),
        },
        "flushes_per_free": {
            "nvwa": r3o(nvwa_cost.and_then(|c| c.lines_per_free())),
            "naive": r3o(naive_cost.and_then(|c| c.lines_per_free())),
        },
        "pht_flush_reduction_x": reduction,
        "alloc_free_pair_ns": pair_ns,
        "raw_persist_pair_ns": pair(RAW),
        "pair_ops_per_sec_2t": { "nvwa_dax": r3o(f.scaling.map(|s| s.two)) },
        "pair_ops_per_sec_1t": { "nvwa_dax": r3o(f.scaling.map(|s| s.one)) },
        "pair_scaling_2t_over_1t": r3o(f.scaling.map(|s| s.two / s.one)),
        "recovery_ms_1m": r3o(f.recovery.as_ref().map(|r| r.open_heap_ms)),
        "caa": caa,
        "pht": pht,
        "btree": f.btree.as_ref().map(|b| json!({
            "ops": sizes.btree,
            "nvwa": btree_run_json(Ok(&b.nvwa)),
            "naive": btree_run_json(b.naive.as_ref()),
            "flush_reduction_x": r3o(btree_reduction(b)),
        })),
        "recovery": f.recovery.as_ref().map(|r| json!({
            "objects": r.objects,
            "open_heap_ms": r3(r.open_heap_ms),
            "all_ms": r.all_ms.iter().map(|&m| r3(m)).collect::<Vec<_>>(),
            "pool_open_ms": r3(r.pool_open_ms),
        })),
        "scaling": f.scaling.map(|s| json!({
            "pairs_per_thread": s.pairs_per_thread,
            "rounds": s.rounds,
        })),
        "durable": f.durable.as_ref().map(durable_json),
        "pair_skipped": f.pairs.as_ref().map(|p| p.skipped.iter().map(|(n, e)| (n.clone(), json!(e))).collect::<Map<_, _>>()),
        "pmdk": f.pmdk,
        "scale": sizes.scale,
        "quick": quick,
        "modes": {
            "flush_instruction": pmem_core::flush::kind().name(),
            "raw_sequence": f.pairs.as_ref().map(|p| p.raw_seq),
            "pools": pools,
            "dax_pool_durable": f.pairs.as_ref().map(|p| p.dax_durable),
            "pmem_is_pmem_force": std::env::var("PMEM_IS_PMEM_FORCE").ok(),
            "dir": dir.display().to_string(),
            "build": build(),
            "cpus": std::thread::available_parallelism().map_or(1, |n| n.get()),
        },
    })
}
