//! `collections_bench`: pmem-collections' containers against std's (the volatile
//! upper bound) and against libpmemobj's transactions on the same hash table, in one
//! run.
//!
//! ```text
//! cargo run --release --example collections_bench -- [--json] [--quick] [--dir DIR] [--durable-dir DIR]
//! ```
//!
//! **Workloads** (forced-DAX pools on `/dev/shm`: the flush and fence instructions of
//! real PM, nothing durable; the durable figures follow), `n` = 1 M (`--quick`:
//! 10 k) distinct random 8-byte keys (splitmix64):
//! * `PHashMap<u64, V>` with 8 B (`u64`) and 64 B (`[u8; 64]`) values: `n`
//!   inserts, `n` random gets, `n` removes, beside std's `HashMap` and (inserts and
//!   gets) PMDK: the same open-addressing table written over libpmemobj's C API,
//!   one `pmemobj_tx_*` transaction per insert (see `pmdk_map.rs`);
//! * `PBTreeMap<u64, V>`, both values: inserts, gets, `n / 10` range scans of 100
//!   keys from a random key, removes, beside std's `BTreeMap`;
//! * `PVec<u64>`: `n` pushes and `n` random gets beside std's `Vec`;
//! * `PConcurrentHashMap<u64, u64>` on 1 and 2 threads (ops/s; `cmap.rs`).
//!
//! Each phase runs the variants interleaved chunk by chunk (fifty chunks, the order
//! rotating), so drift on a shared machine hits every side alike; a figure is the
//! median over chunks of ns per operation. pmkit's flushes and fences per insert
//! are counted (`pmem_core::Counters` deltas; PMDK's own are not). Every map is
//! checked after its inserts and empty after its removals.
//!
//! **Durable mode**: the 8 B hash-table insert again on ordinary files in
//! `--durable-dir` (default `./target`, else `.`): pmkit in msync mode, PMDK in a
//! child process without `PMEM_IS_PMEM_FORCE` (its own msync), 2,000 inserts each
//! (`--quick`: 200).
//!
//! With `--json` the last line is one JSON object with the figures' names
//! (`names.rs` lists them): `hashmap_insert_ns.{pmkit,pmdk,std}`,
//! `hashmap_get_ns.{pmkit,std}`, `hashmap_remove_ns.pmkit`,
//! `btree_{insert,get}_ns.{pmkit,std}`, `btree_range100_ns.pmkit`,
//! `vec_push_ns.{pmkit,std}`, `cmap_ops_per_sec.{t1,t2}`, `cmap_scaling_2t`,
//! `{flushes,fences}_per_insert.{hashmap,btree}`,
//! `durable.hashmap_insert_ns.{pmkit,pmdk}`, the 64 B figures under `hashmap_v64_*`
//! and `btree_v64_*`, and `met_targets` (computed, never asserted). PMDK's figures
//! are `null` when libpmemobj is not installed (the run says so and goes on).

mod cmap;
mod durable;
#[path = "../../benches/common/interleave.rs"]
#[allow(dead_code)]
mod interleave;
mod maps;
#[cfg_attr(not(test), allow(dead_code))]
mod names;
#[path = "../common/pmdk_tx.rs"]
#[allow(dead_code)]
mod pmdk;
#[path = "../common/pmdk_lib.rs"]
mod pmdk_lib;
mod pmdk_map;
#[allow(dead_code)]
#[path = "../common/progress.rs"]
mod progress;
mod report;
mod std_peer;
#[path = "../common/thread_cpu.rs"]
mod thread_cpu;
mod vec;
mod workloads;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use pmem_collections::{PBTreeMap, PHashMap};

use pmdk::Pmdk;
use report::Figures;

/// The PMDK table's first capacity: `PHashMap`'s (both double from there).
pub const PMDK_INITIAL_CAPACITY: u64 = 8;

/// pmem-collections' containers against std's and against libpmemobj's transactions on
/// the same hash table.
#[derive(Parser, Debug)]
#[command(name = "collections_bench")]
struct Config {
    /// End the output with one line of JSON holding the figures.
    #[arg(long)]
    json: bool,
    /// 10 k elements instead of 1 M, fewer rounds (a smoke run).
    #[arg(long)]
    quick: bool,
    /// Where the forced-DAX pools go (/dev/shm, else ./target, when not given).
    #[arg(long, value_name = "DIR", default_value_os_t = default_dir(&["/dev/shm", "target"]))]
    dir: PathBuf,
    /// Where the durable (msync) pools go (./target, else ., when not given).
    #[arg(long, value_name = "DIR", default_value_os_t = default_dir(&["target", "."]))]
    durable_dir: PathBuf,
}

/// Sizes of one run.
struct Sizes {
    /// Elements of the map and vector runs.
    n: u64,
    /// Keys of the concurrent map's rounds.
    cmap: u64,
    /// Rounds per thread count.
    cmap_rounds: usize,
    /// Inserts of the durable runs.
    durable: u64,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                n: 10_000,
                cmap: 10_000,
                cmap_rounds: 3,
                durable: 200,
            }
        } else {
            Sizes {
                n: 1_000_000,
                cmap: 200_000,
                cmap_rounds: 5,
                durable: 2_000,
            }
        }
    }
}

/// Parses the arguments (clap exits on `--help` and on a bad argument) and checks
/// that both directories exist.
fn parse_args() -> Result<Config, String> {
    let cfg = Config::parse();
    for d in [&cfg.dir, &cfg.durable_dir] {
        if !d.is_dir() {
            return Err(format!("{} is not a directory", d.display()));
        }
    }
    Ok(cfg)
}

fn default_dir(candidates: &[&str]) -> PathBuf {
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_dir())
        .unwrap_or_else(|| PathBuf::from("."))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(durable::CHILD_FLAG) {
        return durable::pmdk_child(&args[2..]);
    }
    let cfg = match parse_args() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("collections_bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("collections_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cfg: &Config) -> Result<(), String> {
    let sizes = Sizes::new(cfg.quick);
    // PMDK decides at load whether mappings count as PM; as pmem-core's forced mode,
    // the /dev/shm pools must get the flush instructions of real PM.
    if std::env::var_os("PMEM_IS_PMEM_FORCE").is_none() {
        std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
    }
    let lib = match Pmdk::load() {
        Ok(l) => Some(l),
        Err(e) => {
            println!("PMDK peer skipped: {e} (Debian: apt-get install libpmemobj-dev)");
            None
        }
    };
    println!(
        "collections_bench{}: forced-DAX pools in {} (flush instructions of real PM, NOT durable); durable pools in {}",
        if cfg.quick { " --quick" } else { "" },
        cfg.dir.display(),
        cfg.durable_dir.display()
    );
    println!(
        "flush instruction: {}; PMDK: {}",
        pmem_core::flush::kind().name(),
        if lib.is_some() {
            pmdk::LIBRARY
        } else {
            "absent"
        }
    );
    if cfg!(debug_assertions) {
        println!("debug build: timings are meaningless (use --release)");
    }
    let (n, dir, l) = (sizes.n, cfg.dir.as_path(), lib.as_ref());
    // A step per table; each table prints with the bar off the screen.
    let section = progress::Section::new("collections_bench", 7);
    section.step("PHashMap<u64, u64>");
    let hash8 = maps::run_map::<PHashMap<u64, u64>, HashMap<u64, u64>, u64>(dir, n, l)?;
    progress::suspend(|| report::print_map(&hash8));
    section.step("PHashMap<u64, [u8; 64]>");
    let hash64 =
        maps::run_map::<PHashMap<u64, [u8; 64]>, HashMap<u64, [u8; 64]>, [u8; 64]>(dir, n, l)?;
    progress::suspend(|| report::print_map(&hash64));
    section.step("PBTreeMap<u64, u64>");
    let bt8 = maps::run_map::<PBTreeMap<u64, u64>, BTreeMap<u64, u64>, u64>(dir, n, None)?;
    progress::suspend(|| report::print_map(&bt8));
    section.step("PBTreeMap<u64, [u8; 64]>");
    let bt64 =
        maps::run_map::<PBTreeMap<u64, [u8; 64]>, BTreeMap<u64, [u8; 64]>, [u8; 64]>(dir, n, None)?;
    progress::suspend(|| report::print_map(&bt64));
    section.step("PVec<u64>");
    let vec = vec::run_vec(dir, n)?;
    progress::suspend(|| report::print_vec(&vec));
    section.step("PConcurrentHashMap");
    let cmap = cmap::run_cmap(dir, sizes.cmap, sizes.cmap_rounds)?;
    progress::suspend(|| report::print_cmap(&cmap));
    section.step("durable");
    let durable = durable::run_durable(&cfg.durable_dir, sizes.durable, lib.is_some())?;
    drop(section);
    report::print_durable(&durable, &cfg.durable_dir, sizes.durable);
    let figures = Figures {
        hash8,
        hash64,
        bt8,
        bt64,
        vec,
        cmap,
        durable,
    };
    let met = report::targets(&figures);
    println!();
    println!("targets (computed, not asserted):");
    for (k, v) in &met {
        println!("  {k}: {v}");
    }
    if cfg.json {
        let pmdk_name = lib.as_ref().map(|_| pmdk::LIBRARY);
        println!("{}", report::to_json(&figures, cfg.quick, pmdk_name));
    }
    Ok(())
}
