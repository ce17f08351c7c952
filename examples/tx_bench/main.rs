//! `tx_bench`: pmem-core's transactions with the NVWA paper's hybrid logging (dual-use
//! NVM, §4.3, Figs 16–18) on its workloads, against libpmemobj's transactions in the
//! same run.
//!
//! ```text
//! cargo run --release --example tx_bench -- [--json] [--quick] [--dir DIR] [--durable-dir DIR]
//! ```
//!
//! **Log economy** (counted, not timed): the persistent hash table of
//! pmem-collections (`PHashMap<PBytes, PBytes>`: open addressing, 40-byte slots,
//! 64 B keys and values in blocks of their own) takes `n` inserts and `n` removals,
//! one transaction each (`insert_with` / `remove_with`), under word-only,
//! object-only and hybrid logging, in two engines:
//! * *the paper's engine* (`TxOptions::log_fresh`): every write of the operation is
//!   logged, the fresh key and value blocks included, as a logging engine that does
//!   not know the allocator must (an insert logs the key, the value, the slot and
//!   the count: 22 word records word by word);
//! * *pmem-core's default*: blocks the transaction allocated are not logged at all
//!   (an abort frees them), so an insert logs only its slot and the count, in one
//!   batch (one fence).
//!
//! Per operation: data-record metadata bytes (24 per word record, 32 per object
//! record: the paper's "log metadata"), flushes of metadata lines (the paper's "log
//! flushes"), all lines flushed, fences; allocation records are counted apart.
//!
//! **Timings** (forced-DAX pools on `/dev/shm`: the flush and fence instructions of
//! real PM, nothing durable; the durable figures follow): `tx_8b` — one transaction
//! snapshotting and writing one 8-byte word, interleaved batch by batch with PMDK's
//! `pmemobj_tx_add_range_direct` of the same word and with the floor of any undo
//! transaction (three ordered persists of one line: log, data, commit); `pht_insert`
//! and `pht_delete` (the same map, sized for its elements beforehand, undo
//! transactions) at 0.5 M, 1 M and 1.5 M elements (`--quick`: a hundredth) with
//! 64 B values, and at 0.1 M with 4 KiB values, word/object/hybrid and PMDK on the
//! same table layout (`pmdk.rs`), interleaved chunk by chunk; a B-tree (order 16,
//! `pmem_collections::PBTreeMap`) with 1.5 M random inserts, word/object/hybrid.
//! Figures are medians over batches or chunks.
//!
//! **Durable mode**: the 8-byte transaction and the 64 B insert again on ordinary
//! files in `--durable-dir` (default `./target`, else `.`): pmem-core in msync mode,
//! PMDK (in a child process, without `PMEM_IS_PMEM_FORCE`) with its own msync.
//!
//! With `--json` the last line is one JSON object: `log_bytes_per_insert`,
//! `log_bytes_per_delete` and `flushes_per_insert` (each `{word, object, hybrid}`,
//! the paper's engine), the same with `_default_engine`, `fences_per_tx.hybrid`,
//! `tx_8b_ns`, `pht_insert_ns`, `pht_delete_ns` (`{pmkit, pmdk}`, pmkit = hybrid at
//! the largest size), `btree_insert_ns.pmkit`, per-size tables, `durable`, and
//! `met_targets` (computed, never asserted). PMDK's figures are `null` when
//! libpmemobj is not installed (the run says so and goes on).

#[path = "../../benches/common/interleave.rs"]
#[allow(dead_code)]
mod interleave;
mod pmdk;
#[path = "../common/pmdk_lib.rs"]
mod pmdk_lib;
#[path = "../common/pmdk_tx.rs"]
#[allow(dead_code)]
mod pmdk_tx;
#[allow(dead_code)]
#[path = "../common/progress.rs"]
mod progress;
mod workloads;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use pmem_collections::{HeapOptions, PBTreeMap, PHeap};
use pmem_core::tx::{Hint, LogMode, Logging, TxGeometry, TxHeap, TxOptions};
use pmem_core::{splitmix64, PPtr, Pool, PoolOptions};
use serde_json::{json, Map, Value};

use interleave::{Stats, Variant};
use pmdk::{Pmdk, PmdkMap, PmdkPool};
use progress::outln;
use workloads::{
    chunked, key, median_ns, pht_costs, pmkit_heap, pmkit_map, pool_size, value, ChunkVariant,
    Cost, PoolFile, LOGGINGS,
};

/// Target: hybrid log metadata per insert at most this share of word-only.
const TARGET_HYBRID_SHARE: f64 = 0.30;
/// Target: hybrid metadata line flushes per insert at most this.
const TARGET_FLUSHES: f64 = 1.0;
/// Target: pmkit's 8-byte transaction at most this share of PMDK's.
const TARGET_TX8_SHARE: f64 = 1.0 / 3.0;

/// pmem-core's transactions with hybrid logging on the NVWA paper's workloads, against
/// libpmemobj's transactions in the same run.
#[derive(Parser, Debug)]
#[command(name = "tx_bench")]
struct Config {
    /// End the output with one line of JSON holding the figures.
    #[arg(long)]
    json: bool,
    /// A hundredth of the elements, shorter timing (a smoke run).
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
    /// Elements of the counting runs.
    count: u64,
    /// Elements of the 64 B hash-table runs.
    pht: [u64; 3],
    /// Elements of the 4 KiB hash-table run.
    pht_4k: u64,
    /// B-tree inserts.
    btree: u64,
    /// Operations of the durable runs.
    durable: u64,
    /// Batches and batch length of the interleaved `tx_8b` timing.
    batches: usize,
    batch_ns: u128,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                count: 2_000,
                pht: [5_000, 10_000, 15_000],
                pht_4k: 1_000,
                btree: 15_000,
                durable: 50,
                batches: 11,
                batch_ns: 200_000,
            }
        } else {
            Sizes {
                count: 20_000,
                pht: [500_000, 1_000_000, 1_500_000],
                pht_4k: 100_000,
                btree: 1_500_000,
                durable: 1_000,
                batches: 31,
                batch_ns: 2_000_000,
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
    if args.get(1).map(String::as_str) == Some(CHILD_FLAG) {
        return pmdk_durable_child(&args[2..]);
    }
    let cfg = match parse_args() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tx_bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tx_bench: {e}");
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
            outln!("PMDK peer skipped: {e} (Debian: apt-get install libpmemobj-dev)");
            None
        }
    };
    outln!(
        "tx_bench{}: forced-DAX pools in {} (flush instructions of real PM, NOT durable); durable pools in {}",
        if cfg.quick { " --quick" } else { "" },
        cfg.dir.display(),
        cfg.durable_dir.display()
    );
    outln!(
        "flush instruction: {}; PMDK: {}",
        pmem_core::flush::kind().name(),
        if lib.is_some() {
            pmdk::LIBRARY
        } else {
            "absent"
        }
    );
    if cfg!(debug_assertions) {
        outln!("debug build: timings are meaningless (use --release)");
    }
    let mut out = Map::new();
    let mut met = Map::new();

    // A step per table; tables print through `outln!`, with the bar off the screen.
    let section = progress::Section::new("tx_bench", 4 + sizes.pht.len() as u64);
    section.step("log economy");
    let economy = log_economy(cfg, &sizes, &mut out)?;
    let share = economy.paper_insert[2].meta_bytes() / economy.paper_insert[0].meta_bytes();
    met.insert(
        "hybrid_log_bytes_le_30pct_of_word".into(),
        json!(share <= TARGET_HYBRID_SHARE),
    );
    met.insert(
        "hybrid_flushes_per_insert_le_1".into(),
        json!(economy.paper_insert[2].meta_flushes() <= TARGET_FLUSHES),
    );
    met.insert(
        "hybrid_flushes_per_insert_le_1_default_engine".into(),
        json!(economy.default_insert[2].meta_flushes() <= TARGET_FLUSHES),
    );

    section.step("tx_8b");
    let (tx_pmkit, tx_pmdk) = tx_8b(cfg, &sizes, lib.as_ref(), &mut out)?;
    met.insert(
        "tx_8b_le_third_of_pmdk".into(),
        tx_pmdk.map_or(Value::Null, |p| json!(tx_pmkit <= p * TARGET_TX8_SHARE)),
    );

    let mut per_size = Vec::new();
    for &n in &sizes.pht {
        section.step(format!("pht {n}"));
        per_size.push(pht_timed(cfg, n, 64, lib.as_ref())?);
    }
    section.step("pht 4 KiB values");
    let big = pht_timed(cfg, sizes.pht_4k, 4096, lib.as_ref())?;
    let last = per_size.last().ok_or("no sizes")?;
    let hybrid_insert = last.insert[2].median;
    let pmdk_insert = last.insert.get(3).map(|s| s.median);
    out.insert(
        "pht_insert_ns".into(),
        json!({"pmkit": hybrid_insert, "pmdk": pmdk_insert}),
    );
    out.insert(
        "pht_delete_ns".into(),
        json!({"pmkit": last.delete[2].median, "pmdk": last.delete.get(3).map(|s| s.median)}),
    );
    met.insert(
        "pht_insert_below_pmdk".into(),
        pmdk_insert.map_or(Value::Null, |p| json!(hybrid_insert < p)),
    );
    out.insert(
        "pht_sizes".into(),
        Value::Array(per_size.iter().map(PhtTimed::to_json).collect()),
    );
    out.insert("pht_4k".into(), big.to_json());
    out.insert(
        "fences_per_tx".into(),
        json!({"hybrid": last.cost[2].fences(), "word": last.cost[0].fences(), "object": last.cost[1].fences()}),
    );

    section.step("btree");
    let bt = btree_timed(cfg, sizes.btree)?;
    out.insert("btree_insert_ns".into(), json!({"pmkit": bt[2].0.median}));
    out.insert(
        "btree".into(),
        json!(LOGGINGS
            .iter()
            .zip(&bt)
            .map(|((_, name), (s, c))| (name.to_string(), json!({"insert_ns": s.median, "log_meta_bytes": c.meta_bytes(), "fences": c.fences()})))
            .collect::<Map<_, _>>()),
    );

    section.step("durable");
    let durable = durable_runs(cfg, &sizes, lib.is_some())?;
    drop(section);
    out.insert("durable".into(), durable);

    out.insert("met_targets".into(), Value::Object(met.clone()));
    out.insert("quick".into(), json!(cfg.quick));
    out.insert("pmdk".into(), json!(lib.as_ref().map(|_| pmdk::LIBRARY)));
    outln!();
    outln!("targets (computed, not asserted):");
    for (k, v) in &met {
        outln!("  {k}: {v}");
    }
    if cfg.json {
        outln!("{}", Value::Object(out));
    }
    Ok(())
}

/// The counted figures of both engines, per logging method (word, object, hybrid).
struct Economy {
    paper_insert: Vec<Cost>,
    default_insert: Vec<Cost>,
}

fn log_economy(
    cfg: &Config,
    sizes: &Sizes,
    out: &mut Map<String, Value>,
) -> Result<Economy, String> {
    let n = sizes.count;
    outln!();
    outln!("log economy: {n} inserts then {n} removals, 64 B keys and values, one undo transaction each");
    outln!(
        "{:<18} {:<7} {:>10} {:>10} {:>11} {:>12} {:>9} {:>8} {:>10} {:>11}",
        "engine",
        "logging",
        "meta B/ins",
        "data B/ins",
        "alloc B/ins",
        "meta fl/ins",
        "lines/ins",
        "fences",
        "meta B/del",
        "meta fl/del"
    );
    let mut economy = Economy {
        paper_insert: Vec::new(),
        default_insert: Vec::new(),
    };
    for (log_fresh, engine, suffix) in [
        (true, "paper (log_fresh)", ""),
        (false, "pmem-core default", "_default_engine"),
    ] {
        let mut bytes_ins = Map::new();
        let mut bytes_del = Map::new();
        let mut flushes = Map::new();
        for &(logging, name) in &LOGGINGS {
            let (ins, del) = pht_costs(&cfg.dir, n, 64, logging, log_fresh)?;
            outln!(
                "{:<18} {:<7} {:>10.1} {:>10.1} {:>11.1} {:>12.2} {:>9.2} {:>8.2} {:>10.1} {:>11.2}",
                engine, name, ins.meta_bytes(), ins.data_bytes(), ins.alloc_bytes(), ins.meta_flushes(), ins.lines(), ins.fences(), del.meta_bytes(), del.meta_flushes()
            );
            bytes_ins.insert(name.into(), json!(ins.meta_bytes()));
            bytes_del.insert(name.into(), json!(del.meta_bytes()));
            flushes.insert(name.into(), json!(ins.meta_flushes()));
            if log_fresh {
                economy.paper_insert.push(ins);
            } else {
                economy.default_insert.push(ins);
            }
        }
        out.insert(
            format!("log_bytes_per_insert{suffix}"),
            Value::Object(bytes_ins),
        );
        out.insert(
            format!("log_bytes_per_delete{suffix}"),
            Value::Object(bytes_del),
        );
        out.insert(
            format!("flushes_per_insert{suffix}"),
            Value::Object(flushes),
        );
    }
    let p = &economy.paper_insert;
    outln!(
        "hybrid / word log metadata per insert: {:.0} / {:.0} B = {:.1} % (paper: 28 / 120 B = 23 %); metadata line flushes {:.2} vs {:.2}",
        p[2].meta_bytes(),
        p[0].meta_bytes(),
        100.0 * p[2].meta_bytes() / p[0].meta_bytes(),
        p[2].meta_flushes(),
        p[0].meta_flushes()
    );
    Ok(economy)
}

/// `tx_8b_ns`: returns pmkit's and PMDK's medians.
fn tx_8b(
    cfg: &Config,
    sizes: &Sizes,
    lib: Option<&Pmdk>,
    out: &mut Map<String, Value>,
) -> Result<(f64, Option<f64>), String> {
    let file = PoolFile::new(&cfg.dir, "tx8");
    let mut heap = pmkit_heap(&file, 8 << 20, false)?;
    let word = word_of(&mut heap)?;
    let floor_file = PoolFile::new(&cfg.dir, "floor");
    let floor_pool = Pool::create(
        &floor_file.0,
        &PoolOptions::new("pmkit-tx-floor", 1 << 20).mode(pmem_core::ModeRequest::ForceDax),
    )
    .map_err(|e| e.to_string())?;
    let lines = floor_pool.heap().start.div_ceil(64) * 64;
    let pmdk_file = PoolFile::new(&cfg.dir, "tx8-pmdk");
    let pmdk_pool = match lib {
        Some(l) => Some(PmdkPool::create(l, &pmdk_file.0, 16 << 20)?),
        None => None,
    };
    let word_opts = TxOptions::new().hint(Hint::Word);
    let redo_opts = TxOptions::new().hint(Hint::Word).mode(LogMode::Redo);
    let lazy_opts = TxOptions::new().hint(Hint::Word).mode(LogMode::Lazy);
    let mut i = 0u64;
    let mut j = 0u64;
    let mut k = 0u64;
    let mut m = 0u64;
    let mut z = 0u64;
    let heap = std::cell::RefCell::new(heap);
    let mut variants: Vec<Variant<'_, String>> = vec![
        Variant::repeat("pmkit_lazy", || {
            z += 1;
            heap.borrow_mut()
                .transaction_with(lazy_opts, |tx| tx.write(word, &z))
                .map_err(|e| e.to_string())
        }),
        Variant::repeat("pmkit_undo", || {
            i += 1;
            heap.borrow_mut()
                .transaction_with(word_opts, |tx| tx.write(word, &i))
                .map_err(|e| e.to_string())
        }),
        Variant::repeat("pmkit_redo", || {
            m += 1;
            heap.borrow_mut()
                .transaction_with(redo_opts, |tx| tx.write(word, &m))
                .map_err(|e| e.to_string())
        }),
        Variant::repeat("floor_3_persists", || {
            k += 1;
            for l in 0..3 {
                let at = lines + 64 * l;
                // SAFETY: the floor pool is this loop's alone; `at` is a line of
                // its heap.
                unsafe { floor_pool.write_bytes_shared(at, &k.to_le_bytes()) }
                    .map_err(|e| e.to_string())?;
                floor_pool.persist(at, 8).map_err(|e| e.to_string())?;
            }
            Ok(())
        }),
    ];
    if let Some(p) = &pmdk_pool {
        let w = p.root();
        variants.push(Variant::repeat("pmdk", move || {
            j += 1;
            pmdk::tx_8b(p, w, j)
        }));
    }
    let stats = interleave::measure(&mut variants, 1, sizes.batches, sizes.batch_ns)?;
    outln!();
    outln!("tx_8b: one transaction writing one 8-byte word, by commit mode, ns, forced-DAX (pmkit = lazy)");
    outln!(
        "{:<18} {:>10} {:>10} {:>10}",
        "variant",
        "median",
        "q1",
        "q3"
    );
    let mut fig = Map::new();
    for (v, s) in variants.iter().zip(&stats) {
        outln!(
            "{:<18} {:>10.1} {:>10.1} {:>10.1}",
            v.name,
            s.median,
            s.q1,
            s.q3
        );
        fig.insert(v.name.clone(), json!(s.median));
    }
    // pmem-core's figure is its fastest durable-on-return mode, the lazy commit.
    let pmkit = stats[0].median;
    fig.insert("pmkit".into(), json!(pmkit));
    let pmdk = pmdk_pool.as_ref().map(|_| stats[4].median);
    match pmdk {
        Some(p) => outln!(
            "pmkit / pmdk = {:.2} (target <= {:.2}); floor / pmdk = {:.2}",
            pmkit / p,
            TARGET_TX8_SHARE,
            stats[3].median / p
        ),
        None => fig.insert("pmdk".into(), Value::Null).map_or((), |_| ()),
    }
    out.insert("tx_8b_ns".into(), Value::Object(fig));
    Ok((pmkit, pmdk))
}

/// A word allocated in `heap` for the 8-byte transactions.
fn word_of(heap: &mut TxHeap) -> Result<PPtr<u64>, String> {
    heap.transaction(|tx| Ok(tx.alloc(8)?.cast::<u64>()))
        .map_err(|e| e.to_string())
}

/// One hash-table size: per variant (word, object, hybrid, [pmdk]) insert and
/// delete statistics, and pmkit's insert costs.
struct PhtTimed {
    n: u64,
    value_len: usize,
    names: Vec<String>,
    insert: Vec<Stats>,
    delete: Vec<Stats>,
    cost: Vec<Cost>,
}

impl PhtTimed {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("elements".into(), json!(self.n));
        m.insert("value_bytes".into(), json!(self.value_len));
        for (i, name) in self.names.iter().enumerate() {
            m.insert(
                name.clone(),
                json!({"insert_ns": self.insert[i].median, "delete_ns": self.delete[i].median}),
            );
        }
        Value::Object(m)
    }
}

fn pht_timed(
    cfg: &Config,
    n: u64,
    value_len: usize,
    lib: Option<&Pmdk>,
) -> Result<PhtTimed, String> {
    let size = pool_size(n, value_len);
    let files: Vec<PoolFile> = LOGGINGS
        .iter()
        .map(|(_, name)| PoolFile::new(&cfg.dir, &format!("pht-{name}")))
        .collect();
    let mut tables = Vec::new();
    for f in &files {
        tables.push(std::cell::RefCell::new(pmkit_map(f, size, n, false)?));
    }
    let pmdk_file = PoolFile::new(&cfg.dir, "pht-pmdk");
    let pmdk_pool = match lib {
        Some(l) => Some(PmdkPool::create(l, &pmdk_file.0, size * 2)?),
        None => None,
    };
    let pmdk_table = match &pmdk_pool {
        Some(p) => Some(PmdkMap::create(p, n)?),
        None => None,
    };
    let costs: Vec<std::cell::RefCell<Cost>> =
        LOGGINGS.iter().map(|_| Default::default()).collect();
    let values: Vec<Vec<u8>> = (0..16).map(|i| value(i, value_len)).collect();
    let chunk = (n / 50).max(1);
    let opts = TxOptions::from(LogMode::Undo);
    let mut names: Vec<String> = LOGGINGS.iter().map(|(_, n)| n.to_string()).collect();
    let insert = {
        let mut variants: Vec<ChunkVariant<'_>> = Vec::new();
        for (idx, &(logging, name)) in LOGGINGS.iter().enumerate() {
            let t = &tables[idx];
            let c = &costs[idx];
            let values = &values;
            variants.push(ChunkVariant::each(name, move |i| {
                let (heap, table) = &mut *t.borrow_mut();
                let (_, s) = table
                    .insert_with(heap, &key(i), &values[(i % 16) as usize], opts, logging)
                    .map_err(|e| e.to_string())?;
                c.borrow_mut().add(&s);
                Ok(())
            }));
        }
        if let Some(pt) = &pmdk_table {
            let values = &values;
            variants.push(ChunkVariant::each("pmdk", move |i| {
                pt.insert(&key(i), &values[(i % 16) as usize])
            }));
        }
        chunked(&mut variants, n, chunk)?
    };
    // Spot checks: every table holds what was inserted.
    for i in [0, n / 2, n - 1] {
        let want = &values[(i % 16) as usize];
        for t in &tables {
            let (heap, table) = &*t.borrow();
            let got = table.get(heap, &key(i)).map_err(|e| e.to_string())?;
            if got.as_ref() != Some(want) {
                return Err(format!("pmkit table: wrong value for key {i}"));
            }
        }
        if let Some(pt) = &pmdk_table {
            if pt.get(&key(i))?.as_ref() != Some(want) {
                return Err(format!("PMDK table: wrong value for key {i}"));
            }
        }
    }
    let delete = {
        let mut variants: Vec<ChunkVariant<'_>> = Vec::new();
        for (idx, &(logging, name)) in LOGGINGS.iter().enumerate() {
            let t = &tables[idx];
            variants.push(ChunkVariant::each(name, move |i| {
                let (heap, table) = &mut *t.borrow_mut();
                let (found, _) = table
                    .remove_with(heap, &key(i), opts, logging)
                    .map_err(|e| e.to_string())?;
                found
                    .map(|_| ())
                    .ok_or(format!("pmkit {name}: key {i} missing"))
            }));
        }
        if let Some(pt) = &pmdk_table {
            variants.push(ChunkVariant::each("pmdk", move |i| {
                pt.remove(&key(i))?
                    .then_some(())
                    .ok_or(format!("PMDK: key {i} missing"))
            }));
        }
        chunked(&mut variants, n, chunk)?
    };
    for t in &tables {
        let (heap, table) = &*t.borrow();
        if !table.is_empty(heap).map_err(|e| e.to_string())? {
            return Err("pmkit table not empty after the removals".into());
        }
    }
    if let Some(pt) = &pmdk_table {
        if pt.len() != 0 {
            return Err("PMDK table not empty after the removals".into());
        }
        names.push("pmdk".into());
    }
    outln!();
    outln!("pht: {n} inserts then {n} removals, 64 B keys, {value_len} B values, ns per operation (median over chunks of {chunk}), forced-DAX");
    outln!(
        "{:<8} {:>10} {:>10} {:>14} {:>10}",
        "variant",
        "insert",
        "delete",
        "fences/insert",
        "lines/ins"
    );
    for (i, name) in names.iter().enumerate() {
        // PMDK's flushes and fences are not counted (its own code issues them).
        let (f, l) = costs.get(i).map_or(("-".into(), "-".into()), |c| {
            let c = c.borrow();
            (format!("{:.2}", c.fences()), format!("{:.2}", c.lines()))
        });
        outln!(
            "{:<8} {:>10.1} {:>10.1} {:>14} {:>10}",
            name,
            insert[i].median,
            delete[i].median,
            f,
            l
        );
    }
    if let Some(p) = insert.get(3) {
        outln!(
            "hybrid / pmdk: insert {:.2}, delete {:.2}",
            insert[2].median / p.median,
            delete[2].median / delete[3].median
        );
    }
    Ok(PhtTimed {
        n,
        value_len,
        names,
        insert,
        delete,
        cost: costs.into_iter().map(|c| c.into_inner()).collect(),
    })
}

fn btree_timed(cfg: &Config, n: u64) -> Result<Vec<(Stats, Cost)>, String> {
    let files: Vec<PoolFile> = LOGGINGS
        .iter()
        .map(|(_, name)| PoolFile::new(&cfg.dir, &format!("btree-{name}")))
        .collect();
    let mut trees = Vec::new();
    for f in &files {
        let heap = collections_heap(f, (n * 160 + (64 << 20)).div_ceil(1 << 20) << 20)?;
        let t: PBTreeMap<u64, u64> = heap.root("btree").map_err(|e| e.to_string())?;
        trees.push(std::cell::RefCell::new((heap, t)));
    }
    let costs: Vec<std::cell::RefCell<Cost>> =
        LOGGINGS.iter().map(|_| Default::default()).collect();
    let keys: Vec<u64> = {
        let mut s = 0x5eed_u64;
        (0..n).map(|_| splitmix64(&mut s)).collect()
    };
    let opts = TxOptions::from(LogMode::Undo);
    let stats = {
        let mut variants: Vec<ChunkVariant<'_>> = Vec::new();
        for (idx, &(logging, name)) in LOGGINGS.iter().enumerate() {
            let t = &trees[idx];
            let c = &costs[idx];
            let keys = &keys;
            variants.push(ChunkVariant::each(name, move |i| {
                let (heap, tree) = &mut *t.borrow_mut();
                tree.insert_with(heap, &keys[i as usize], &i, opts, |len| {
                    logging.hint_for(len)
                })
                .map_err(|e| e.to_string())?;
                c.borrow_mut().add(&heap.last_stats());
                Ok(())
            }));
        }
        chunked(&mut variants, n, (n / 50).max(1))?
    };
    let distinct = {
        let mut k = keys.clone();
        k.sort_unstable();
        k.dedup();
        k.len() as u64
    };
    for t in &trees {
        let (heap, tree) = &*t.borrow();
        if tree.len(heap).map_err(|e| e.to_string())? != distinct {
            return Err("B-tree lost keys".into());
        }
        if tree.check(heap).map_err(|e| e.to_string())? != distinct {
            return Err("B-tree invariants broken".into());
        }
    }
    outln!();
    outln!("btree (order 16): {n} random inserts, ns per insert (median over chunks), forced-DAX");
    outln!(
        "{:<8} {:>10} {:>12} {:>12} {:>8}",
        "logging",
        "insert",
        "meta B/ins",
        "data B/ins",
        "fences"
    );
    let mut res = Vec::new();
    for (i, &(_, name)) in LOGGINGS.iter().enumerate() {
        let c = *costs[i].borrow();
        outln!(
            "{:<8} {:>10.1} {:>12.1} {:>12.1} {:>8.2}",
            name,
            stats[i].median,
            c.meta_bytes(),
            c.data_bytes(),
            c.fences()
        );
        res.push((stats[i], c));
    }
    Ok(res)
}

/// A pmem-collections heap on a new forced-DAX pool file of `size` bytes, with
/// the benchmark's log geometry (room for a split at every level of a tall tree).
fn collections_heap(file: &PoolFile, size: u64) -> Result<PHeap, String> {
    let _ = std::fs::remove_file(&file.0);
    let pool = Pool::create(
        &file.0,
        &PHeap::pool_options("pmkit-tx-bench", size).mode(pmem_core::ModeRequest::ForceDax),
    )
    .map_err(|e| format!("{}: {e}", file.0.display()))?;
    PHeap::create_with(
        pool,
        HeapOptions {
            geometry: TxGeometry {
                alloc_records: 32,
                ..workloads::geometry()
            },
            page_size: workloads::PAGE,
            mode: LogMode::Undo,
        },
    )
    .map_err(|e| e.to_string())
}

const CHILD_FLAG: &str = "--pmdk-durable-child";

/// Durable-mode figures: pmkit in this process, PMDK in a child (it must load
/// without `PMEM_IS_PMEM_FORCE`).
fn durable_runs(cfg: &Config, sizes: &Sizes, pmdk: bool) -> Result<Value, String> {
    let n = sizes.durable;
    let (tx, ins, mode) = pmkit_durable(&cfg.durable_dir, n)?;
    let pmdk_fig = if pmdk {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let outp = std::process::Command::new(exe)
            .arg(CHILD_FLAG)
            .arg(&cfg.durable_dir)
            .arg(n.to_string())
            .env("PMEM_IS_PMEM_FORCE", "0")
            .output()
            .map_err(|e| format!("PMDK durable child: {e}"))?;
        let text = String::from_utf8_lossy(&outp.stdout);
        let line = text.lines().last().unwrap_or_default();
        if !outp.status.success() {
            return Err(format!(
                "PMDK durable child failed: {}",
                String::from_utf8_lossy(&outp.stderr).trim()
            ));
        }
        serde_json::from_str::<Value>(line).map_err(|e| format!("PMDK durable child: {e}"))?
    } else {
        json!({"tx_8b_ns": null, "pht_insert_ns": null})
    };
    outln!();
    outln!("durable mode: ordinary files in {} (pmem-core mode {mode}; PMDK: its msync path), {n} operations, median ns", cfg.durable_dir.display());
    outln!("{:<12} {:>12} {:>12}", "", "pmkit", "pmdk");
    outln!(
        "{:<12} {:>12.0} {:>12}",
        "tx_8b",
        tx[0],
        pmdk_fig["tx_8b_ns"]
    );
    outln!("{:<12} {:>12.0} {:>12}", "tx_8b undo", tx[1], "");
    outln!(
        "{:<12} {:>12.0} {:>12}",
        "pht_insert",
        ins,
        pmdk_fig["pht_insert_ns"]
    );
    Ok(json!({
        "pool_mode": mode,
        "tx_8b_ns": {"pmkit": tx[0], "pmkit_undo": tx[1], "pmdk": pmdk_fig["tx_8b_ns"]},
        "pht_insert_ns": {"pmkit": ins, "pmdk": pmdk_fig["pht_insert_ns"]},
    }))
}

/// Durable medians: the 8-byte transaction (lazy, undo) and the PHT insert.
fn pmkit_durable(dir: &Path, n: u64) -> Result<([f64; 2], f64, String), String> {
    let file = PoolFile::new(dir, "durable-tx8");
    let mut heap = pmkit_heap(&file, 8 << 20, true)?;
    let mode = format!("{:?}", heap.pool().mode());
    let word = word_of(&mut heap)?;
    let mut tx = [0.0; 2];
    for (t, mode) in tx.iter_mut().zip([LogMode::Lazy, LogMode::Undo]) {
        let opts = TxOptions::new().hint(Hint::Word).mode(mode);
        *t = median_ns(n, |i| {
            heap.transaction_with(opts, |tx| tx.write(word, &i))
                .map_err(|e| e.to_string())
        })?;
    }
    let file = PoolFile::new(dir, "durable-pht");
    let (heap, mut table) = pmkit_map(&file, pool_size(n, 64), n, true)?;
    let v = value(1, 64);
    let undo = TxOptions::from(LogMode::Undo);
    let ins = median_ns(n, |i| {
        table
            .insert_with(&heap, &key(i), &v, undo, Logging::Hybrid)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })?;
    Ok((tx, ins, mode))
}

/// The child process of the durable PMDK figures: prints one JSON line.
fn pmdk_durable_child(args: &[String]) -> ExitCode {
    let run = || -> Result<Value, String> {
        let dir = PathBuf::from(args.first().ok_or("missing directory")?);
        let n: u64 = args
            .get(1)
            .ok_or("missing count")?
            .parse()
            .map_err(|e| format!("count: {e}"))?;
        let lib = Pmdk::load()?;
        let f = PoolFile::new(&dir, "durable-pmdk-tx8");
        let pool = PmdkPool::create(&lib, &f.0, 16 << 20)?;
        let w = pool.root();
        let tx = median_ns(n, |i| pmdk::tx_8b(&pool, w, i))?;
        let f2 = PoolFile::new(&dir, "durable-pmdk-pht");
        let pool2 = PmdkPool::create(&lib, &f2.0, pool_size(n, 64) * 2)?;
        let t = PmdkMap::create(&pool2, n)?;
        let v = value(1, 64);
        let ins = median_ns(n, |i| t.insert(&key(i), &v))?;
        Ok(json!({"tx_8b_ns": tx, "pht_insert_ns": ins}))
    };
    match run() {
        Ok(v) => {
            outln!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tx_bench child: {e}");
            ExitCode::FAILURE
        }
    }
}
