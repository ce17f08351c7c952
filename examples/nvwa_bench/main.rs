//! `nvwa_bench`: the NVWA allocator (dual-use NVM paper, §4.1–4.2) on the
//! paper's workloads, against its naive baseline and against WAFA, PMDK and
//! mimalloc in the same run.
//!
//! ```text
//! cargo run --release --example nvwa_bench -- [--json] [--quick] [--scale F] [--dir DIR]
//!     [--durable-dir DIR] [--only pht,btree,pairs,scaling,recovery,caa,durable]
//! ```
//!
//! **Counted flushes** (not timed): the allocator's own cache-line flushes and
//! fences, counted by pmem-core's per-thread counters around `alloc` and `free`
//! only ([`heaps::Counted`]), on NVWA and on the naive baseline (`nvwa::NaiveHeap`,
//! metadata on the media), each on its own forced-DAX pool:
//! * *PHT* ([`pht`]): the paper's persistent chained hash table at 0.5 M, 1 M and
//!   1.5 M elements (64 B keys and values): `n` puts, `n / 2` gets, `n / 4`
//!   deletes. `flushes_per_alloc` and `flushes_per_free` come from the largest
//!   size; `pht_flush_reduction_x.S` = naive's allocator flushes / NVWA's at size S.
//! * *B-tree* ([`btree`]): 1.5 M random inserts and deletes (the last 30 %
//!   deletes only) on an order-16 B+-tree whose nodes are allocator blocks,
//!   checked against a `BTreeMap`.
//!
//! **Timings** (forced-DAX pools in `--dir`, `/dev/shm` by default: the flush and
//! fence instructions of real PM, nothing durable):
//! * *pairs* ([`pairs`]): `alloc(64)` + `free`, ns, for `nvwa_volatile`,
//!   `nvwa_dax`, `naive_dax`, `wafa_dax`, `pmdk` (`pmemobj_alloc`/`pmemobj_free`,
//!   with `PMEM_IS_PMEM_FORCE=1`), `mimalloc`, and `raw_persist_pair_ns`: the
//!   store-flush-fence sequence NVWA's pair issues, twice, alone;
//! * *scaling* ([`scaling`]): pairs per second on one heap with one and with two
//!   threads (two arenas);
//! * *recovery* ([`recovery`]): `Nvwa::open_heap` of a heap with 1 M live 64-byte
//!   objects, median of three;
//! * *CAA* ([`caa`]): contiguity misses of CAA-4 and CAA-16 against JIT with four
//!   interleaved arenas (counted).
//!
//! **Durable mode** ([`durable`]; the forced-DAX figures above show PM's cost, not
//! durability): ordinary files in `nvwa_bench-durable` under `--durable-dir`
//! (default `./target`, else the cargo target directory, never `/dev/shm`),
//! pmem-core in msync mode, every operation durable on return: the pair for
//! `nvwa_file`, `naive_file`, `wafa_file` and `pmdk_file` (libpmemobj on its msync
//! path, in a child process with `PMEM_IS_PMEM_FORCE=0`), median over a few
//! batches of a few hundred pairs; and the PHT's puts at 5,000 elements (500 with
//! `--quick`): ns and msyncs per put on NVWA and the naive baseline. Its table is
//! printed with the forced-DAX figures of the same run beside it.
//!
//! `--quick` runs a fiftieth of the sizes (and shorter timings); `--scale F` any
//! fraction. A peer that is unavailable — the naive baseline while it is not
//! built, libpmemobj when not installed — is reported with its error and its
//! figures are `null`; the run goes on. The targets of the issue are printed
//! with whether each is met (computed, never asserted). With `--json` the last
//! line is one JSON object: `flushes_per_alloc.{nvwa,naive}`,
//! `flushes_per_free.{nvwa,naive}`, `pht_flush_reduction_x.{0_5m,1m,1_5m}`,
//! `alloc_free_pair_ns.{nvwa_volatile,nvwa_dax,naive_dax,wafa_dax,pmdk,mimalloc}`,
//! `raw_persist_pair_ns`, `pair_ops_per_sec_2t.nvwa_dax` (and `_1t`),
//! `recovery_ms_1m`, `caa.contiguity_miss_reduction_pct.{caa4,caa16}`, the
//! per-workload details (`pht`, `btree`, `caa`, `recovery`, `scaling`), `durable`
//! (`dir`, `mode`, `alloc_free_pair_ns.{nvwa_file,naive_file,wafa_file,pmdk_file}`,
//! `pht_put_ns.{nvwa,naive}`, `msyncs_per_put.{nvwa,naive}`, `elements`, and the
//! batch sizes, `msyncs_per_pair`, `pht_put_median_ns`, `mode_source`, `skipped`), `pmdk`
//! (`"libpmemobj.so.1"` when PMDK ran, else `null`), `scale`, `quick` and `modes`
//! (the pools' durability modes, the flush instruction, the build).

mod btree;
mod caa;
#[path = "../../benches/common/mod.rs"]
mod common;
mod durable;
mod heaps;
#[path = "../../benches/common/interleave.rs"]
#[allow(dead_code)]
mod interleave;
mod pairs;
mod pht;
mod pmdk;
#[path = "../common/pmdk_lib.rs"]
mod pmdk_lib;
#[allow(dead_code)]
#[path = "../common/progress.rs"]
mod progress;
mod recovery;
mod report;
mod scaling;
mod targets;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};

use btree::BtreeRun;
use caa::CaaRun;
use durable::{Durable, DurableDir, DurableSizes};
use heaps::{check_dir, pool_bytes, Counted, DaxPool, Heap, Kind};
use pairs::{PairResults, Timing};
use pht::PhtRun;
use recovery::Recovery;
use scaling::Scaling;

/// The paper's hash-table sizes, with their JSON names.
const PHT_SIZES: [(u64, &str); 3] = [(500_000, "0_5m"), (1_000_000, "1m"), (1_500_000, "1_5m")];
/// The paper's B-tree operations.
const BTREE_OPS: u64 = 1_500_000;
/// Live objects of the recovery heap.
const RECOVERY_OBJECTS: u64 = 1_000_000;
/// Page requests per arena in the CAA runs.
const CAA_PAGES: u64 = 4096;
/// Hash-table puts of the durable workload (each a few msyncs), and its floor.
const DURABLE_ELEMENTS: u64 = 5_000;
const DURABLE_MIN_ELEMENTS: u64 = 500;
/// The fraction of the sizes `--quick` runs.
const QUICK_SCALE: f64 = 0.02;
/// Seeds of the workloads.
const PHT_SEED: u64 = 0x5048_545f_7365_6564;
const BTREE_SEED: u64 = 0x4254_5f73_6565_6421;

/// The workloads, for `--only`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Workload {
    /// The hash table, counted flushes.
    Pht,
    /// The B-tree, counted flushes.
    Btree,
    /// The alloc+free pair timings.
    Pairs,
    /// Pair throughput on one and two threads.
    Scaling,
    /// Recovery time.
    Recovery,
    /// CAA against JIT.
    Caa,
    /// Pairs and PHT puts on ordinary files (msync mode: durable).
    Durable,
}

/// NVWA on the paper's workloads against the naive baseline, WAFA,
/// PMDK and mimalloc.
#[derive(Parser, Debug)]
#[command(name = "nvwa_bench")]
struct Args {
    /// End the output with one line of JSON holding the figures.
    #[arg(long)]
    json: bool,
    /// A fiftieth of the paper's sizes and shorter timings (a smoke run).
    #[arg(long)]
    quick: bool,
    /// The fraction of the paper's sizes to run, in (0, 1] (overrides --quick's).
    #[arg(long, value_name = "F")]
    scale: Option<f64>,
    /// Where the forced-DAX pool files go (default /dev/shm, else ./target).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Where the durable (msync) pool files go, in a directory nvwa_bench-durable
    /// made there; on a disk, not tmpfs (default ./target, else the cargo target
    /// directory, else .).
    #[arg(long, value_name = "DIR")]
    durable_dir: Option<PathBuf>,
    /// Run only these workloads (comma-separated); the others' figures are null.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "pht,btree,pairs,scaling,recovery,caa,durable"
    )]
    only: Vec<Workload>,
}

/// The sizes of one run.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// The fraction of the paper's sizes.
    pub scale: f64,
    /// Elements of each hash-table run.
    pub pht: [u64; 3],
    /// B-tree operations.
    pub btree: u64,
    /// Live objects of the recovery heap.
    pub recovery: u64,
    /// Page requests per arena (CAA).
    pub caa_pages: u64,
    /// Pair timing.
    pub timing: Timing,
    /// Pairs per thread per scaling round, and rounds.
    pub scaling_pairs: u64,
    /// See `scaling_pairs`.
    pub scaling_rounds: usize,
    /// The durable workload.
    pub durable: DurableSizes,
}

impl Sizes {
    fn new(quick: bool, scale: Option<f64>) -> Sizes {
        let scale = scale.unwrap_or(if quick { QUICK_SCALE } else { 1.0 });
        let scaled = |x: u64, min: u64| ((x as f64 * scale).round() as u64).max(min);
        Sizes {
            scale,
            pht: PHT_SIZES.map(|(n, _)| scaled(n, 1000)),
            btree: scaled(BTREE_OPS, 1000),
            recovery: scaled(RECOVERY_OBJECTS, 1000),
            caa_pages: scaled(CAA_PAGES, 256),
            timing: if quick {
                Timing {
                    batches: 11,
                    batch_ns: 200_000,
                }
            } else {
                Timing {
                    batches: 31,
                    batch_ns: 2_000_000,
                }
            },
            scaling_pairs: if quick { 50_000 } else { 1_000_000 },
            scaling_rounds: if quick { 3 } else { 7 },
            durable: DurableSizes {
                pairs_per_batch: if quick { 100 } else { 300 },
                batches: if quick { 3 } else { 7 },
                elements: scaled(DURABLE_ELEMENTS, DURABLE_MIN_ELEMENTS),
            },
        }
    }
}

/// One allocator's result on a counted workload: the figures, or why it failed.
pub type Outcome<T> = Result<T, String>;

/// The PHT at one size.
pub struct PhtSize {
    /// JSON name of the size (`0_5m`, ...).
    pub label: &'static str,
    /// Elements.
    pub n: u64,
    /// NVWA's run.
    pub nvwa: PhtRun,
    /// The naive baseline's run.
    pub naive: Outcome<PhtRun>,
}

impl PhtSize {
    /// Naive's allocator flushes over NVWA's.
    pub fn reduction(&self) -> Option<f64> {
        let naive = self.naive.as_ref().ok()?;
        let nvwa = self.nvwa.cost.lines();
        (nvwa > 0).then(|| naive.cost.lines() as f64 / nvwa as f64)
    }
}

/// The B-tree on both allocators.
pub struct BtreeFig {
    /// NVWA's run.
    pub nvwa: BtreeRun,
    /// The naive baseline's run.
    pub naive: Outcome<BtreeRun>,
}

/// Everything measured.
#[derive(Default)]
pub struct Figures {
    /// The hash table, by size.
    pub pht: Vec<PhtSize>,
    /// The B-tree.
    pub btree: Option<BtreeFig>,
    /// The pair timings.
    pub pairs: Option<PairResults>,
    /// One and two threads.
    pub scaling: Option<Scaling>,
    /// Recovery.
    pub recovery: Option<Recovery>,
    /// CAA against JIT (4 KiB objects first).
    pub caa: Option<Vec<CaaRun>>,
    /// The durable (msync) figures.
    pub durable: Option<Durable>,
    /// The PMDK library, when it ran.
    pub pmdk: Option<&'static str>,
}

impl Figures {
    /// The largest hash-table run.
    pub fn largest_pht(&self) -> Option<&PhtSize> {
        self.pht.last()
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(durable::CHILD_FLAG) {
        return durable::child_main(&argv[2..]);
    }
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvwa_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    if let Some(s) = args.scale {
        if !(s > 0.0 && s <= 1.0) {
            return Err(format!("--scale {s}: must be in (0, 1]"));
        }
    }
    // PMDK decides when it is loaded whether mappings count as PM: as pmem-core's
    // forced mode, the /dev/shm pool must get the flush instructions of real PM.
    // Set before any thread starts.
    if std::env::var_os("PMEM_IS_PMEM_FORCE").is_none() {
        std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
    }
    let dir = match &args.dir {
        Some(d) => check_dir(d)?,
        None => common::default_dir(),
    };
    let sizes = Sizes::new(args.quick, args.scale);
    let on = |w: Workload| args.only.contains(&w);
    // Made now (and removed when the run ends, also on an error) so the header
    // names it.
    let durable_dir = if on(Workload::Durable) {
        let base = match &args.durable_dir {
            Some(d) => check_dir(d)?,
            None => durable::default_base(),
        };
        Some(DurableDir::create(&base)?)
    } else {
        None
    };
    report::header(
        &dir,
        &sizes,
        args.quick,
        durable_dir.as_ref().map(DurableDir::path),
    );

    let mut fig = Figures::default();
    // A step per PHT size and per other workload run; the tables go through
    // `progress::suspend`, which takes the bar off the screen while they print.
    let steps = args
        .only
        .iter()
        .map(|&w| {
            if w == Workload::Pht {
                sizes.pht.len()
            } else {
                1
            }
        })
        .sum::<usize>();
    let section = progress::Section::new("nvwa_bench", steps as u64);
    if on(Workload::Pht) {
        for (&n, &(_, label)) in sizes.pht.iter().zip(PHT_SIZES.iter()) {
            section.step(format!("pht {label}"));
            let size = pht_size(&dir, n, label)?;
            progress::suspend(|| report::pht_size(&size));
            fig.pht.push(size);
        }
    }
    if on(Workload::Btree) {
        section.step("btree");
        let bt = btree_both(&dir, sizes.btree)?;
        progress::suspend(|| report::btree(&bt, sizes.btree));
        fig.btree = Some(bt);
    }
    if on(Workload::Pairs) {
        section.step("pairs");
        let pmdk = pmdk::PmdkHeap::create(&dir);
        if let Err(e) = &pmdk {
            progress::suspend(|| {
                println!("PMDK peer skipped: {e} (Debian: apt-get install libpmemobj-dev)")
            });
        } else {
            fig.pmdk = Some(pmdk_lib::LIBRARY);
        }
        let p = pairs::measure(&dir, sizes.timing, pmdk)?;
        progress::suspend(|| report::pairs(&p));
        fig.pairs = Some(p);
    }
    if on(Workload::Scaling) {
        section.step("scaling");
        let s = scaling::measure(&dir, sizes.scaling_pairs, sizes.scaling_rounds)?;
        progress::suspend(|| report::scaling(&s));
        fig.scaling = Some(s);
    }
    if on(Workload::Recovery) {
        section.step("recovery");
        let r = recovery::measure(&dir, sizes.recovery)?;
        progress::suspend(|| report::recovery(&r));
        fig.recovery = Some(r);
    }
    if on(Workload::Caa) {
        section.step("caa");
        let c = caa::measure(sizes.caa_pages)?;
        progress::suspend(|| report::caa(&c));
        fig.caa = Some(c);
    }
    if let Some(d) = &durable_dir {
        section.step("durable");
        let r = durable::measure(d, sizes.durable)?;
        progress::suspend(|| report::durable(&r, &fig));
        fig.durable = Some(r);
    }
    drop(section);
    targets::print(&fig, &sizes);
    if args.json {
        println!("{}", report::json(&fig, &sizes, args.quick, &dir));
    }
    Ok(())
}

/// One allocator's counted run on a fresh pool: `(figures, heap note)`.
fn counted<T>(
    dir: &std::path::Path,
    kind: Kind,
    what: &str,
    objects: u64,
    slot: u64,
    work: impl FnOnce(&Counted<'_>) -> Outcome<T>,
) -> Outcome<(T, Option<String>)> {
    let pool = DaxPool::create(
        dir,
        &format!("{what}-{}", kind.name()),
        pool_bytes(objects, slot),
    )?;
    let heap = Heap::format(kind, pool.pool.clone(), objects)?;
    let c = Counted::new(heap.allocator());
    let r = work(&c)?;
    Ok((r, heap.note()))
}

/// The PHT of `n` elements on both allocators.
fn pht_size(dir: &std::path::Path, n: u64, label: &'static str) -> Result<PhtSize, String> {
    // Nodes (136 B: NVWA's 160 B class) and the bucket array (8 B per element).
    let objects = n + n.div_ceil(pht::SEGMENT_BUCKETS);
    let slot = 160 + 8;
    let (nvwa, note) = counted(dir, Kind::Nvwa, "pht", objects, slot, |h| {
        pht::run(h, n, PHT_SEED)
    })
    .map_err(|e| format!("PHT {n} on nvwa: {e}"))?;
    if let Some(note) = note {
        progress::suspend(|| println!("  (pht {n} on nvwa: {note})"));
    }
    let naive = counted(dir, Kind::Naive, "pht", objects, slot, |h| {
        pht::run(h, n, PHT_SEED)
    })
    .map(|(r, _)| r);
    Ok(PhtSize {
        label,
        n,
        nvwa,
        naive,
    })
}

/// The B-tree of `ops` operations on both allocators.
fn btree_both(dir: &std::path::Path, ops: u64) -> Result<BtreeFig, String> {
    // Live nodes never outnumber the universe's keys (a sixth of the operations).
    let objects = (ops / 6).max(64);
    let (nvwa, note) = counted(dir, Kind::Nvwa, "btree", objects, btree::NODE, |h| {
        btree::run(h, ops, BTREE_SEED)
    })
    .map_err(|e| format!("B-tree on nvwa: {e}"))?;
    if let Some(note) = note {
        progress::suspend(|| println!("  (btree on nvwa: {note})"));
    }
    let naive = counted(dir, Kind::Naive, "btree", objects, btree::NODE, |h| {
        btree::run(h, ops, BTREE_SEED)
    })
    .map(|(r, _)| r);
    Ok(BtreeFig { nvwa, naive })
}
