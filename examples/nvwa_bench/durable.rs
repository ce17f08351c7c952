//! The durable mode beside the forced-DAX figures (`--only durable`): the same
//! operations on ordinary files on the disk, where pmem-core maps pools in msync
//! mode (`ModeRequest::Auto` on a page-cache file: every drain is an `msync` of
//! the flushed pages), so each operation is durable when it returns.
//!
//! * Pools go to a directory `nvwa_bench-durable` under `--durable-dir` (default:
//!   `target` in the current directory, else the cargo target directory holding
//!   this executable, else `.`), never to `/dev/shm`. Every file is removed when
//!   its guard drops (also when a run fails half way), and the directory too if
//!   this run created it and it is empty. A pool that does not come out durable
//!   (`PMKIT_FORCE_DAX=1` in the environment) fails the workload, and so does a
//!   `--durable-dir` on tmpfs or ramfs (`msync` there reaches only memory).
//! * *Pairs*: `alloc(64)` + `free`, ns per pair, median [q1 .. q3] over a few
//!   batches of a fixed, small number of pairs (each pair is a few msyncs:
//!   calibrating to a time, as the forced-DAX pairs do, would take minutes):
//!   `nvwa_file`, `naive_file`, `wafa_file` in this process, interleaved batch by
//!   batch in rotating order, with the msyncs per pair counted
//!   ([`pmem_core::Counters`]); then `pmdk_file`: `pmemobj_alloc` /
//!   `pmemobj_free` in a child process of this executable ([`CHILD_FLAG`]) started
//!   with `PMEM_IS_PMEM_FORCE=0`, so that libpmemobj, which reads the variable
//!   when it is loaded, takes its msync path (this process set it to 1 for the
//!   forced-DAX peer), as `tx_bench` and `defrag_repro` measure PMDK durably. Its
//!   pool file is named and removed by this process. Without libpmemobj it is
//!   skipped with its error.
//! * *PHT puts*: the hash table of [`crate::pht`] (64 B keys and values), `n`
//!   puts on NVWA and on the naive baseline, each on its own pool: ns per put
//!   (the mean, as the forced-DAX `put_ns`; the median beside it) and msyncs per
//!   put (the allocator's and the table's own), then the table is checked.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::Instant;

use nvwa::{NaiveHeap, Nvwa, NvwaOptions};
use pmem_core::{Counters, DurabilityMode, ModeSource, Pool, PoolOptions};
use serde_json::{json, Value};
use wafa::{Wafa, WafaOptions};

use crate::common::{unique_path, TempFile};
use crate::heaps::{key, pool_bytes, value, Counted, Heap, Kind, LAYOUT};
use crate::interleave::{Stats, Variant};
use crate::pairs::{allocator_pair, wafa_pair, PAIR_BYTES};
use crate::pht::{self, Pht};
use crate::pmdk::PmdkHeap;
use crate::Outcome;

/// The flag of the child process that times PMDK's durable pair.
pub const CHILD_FLAG: &str = "--pmdk-durable-child";
/// The directory made under the base for the pool files.
const DIR_NAME: &str = "nvwa_bench-durable";
/// Bytes of each pair pool (as the forced-DAX pair pools).
const POOL_BYTES: u64 = 64 << 20;
/// Untimed pairs of each peer before its batches (the trial: a failing peer is
/// left out with its error).
const WARM_PAIRS: u64 = 20;
/// `TMPFS_MAGIC` and `RAMFS_MAGIC` of `statfs(2)`.
#[cfg(target_os = "linux")]
const MEMORY_FS: [u64; 2] = [0x0102_1994, 0x8584_58f6];

/// How much the durable workload does.
#[derive(Clone, Copy, Debug)]
pub struct DurableSizes {
    /// Pairs per timed batch.
    pub pairs_per_batch: u64,
    /// Timed batches per peer.
    pub batches: usize,
    /// Hash-table puts.
    pub elements: u64,
}

/// One peer's durable pair.
pub struct PairRow {
    /// `nvwa_file`, ...
    pub name: String,
    /// ns per pair over the batches.
    pub stats: Stats,
    /// msyncs per pair (`None` for PMDK: its msyncs are not counted here).
    pub msyncs: Option<f64>,
}

/// The durable hash-table puts on one allocator.
#[derive(Clone, Copy, Debug)]
pub struct PhtPut {
    /// Puts.
    pub n: u64,
    /// Wall-clock ns per put (all the puts over their number).
    pub mean_ns: f64,
    /// The median put, ns.
    pub median_ns: f64,
    /// msyncs per put.
    pub msyncs_per_put: f64,
}

/// The durable figures.
pub struct Durable {
    /// Where the pool files were.
    pub dir: PathBuf,
    /// The pools' mode and its source (`msync`, `page_cache`).
    pub mode: (DurabilityMode, ModeSource),
    /// The sizes run.
    pub sizes: DurableSizes,
    /// The pairs, in table order.
    pub pairs: Vec<PairRow>,
    /// Peers left out, with why.
    pub skipped: Vec<(String, String)>,
    /// NVWA's puts.
    pub pht_nvwa: PhtPut,
    /// The naive baseline's puts.
    pub pht_naive: Outcome<PhtPut>,
}

impl Durable {
    /// The median pair of `name`, if it ran.
    pub fn pair(&self, name: &str) -> Option<&PairRow> {
        self.pairs.iter().find(|r| r.name == name)
    }
}

/// The default base directory: `target` here, else the cargo target directory of
/// this executable (`<target>/<profile>/examples/nvwa_bench`), else `.`.
pub fn default_base() -> PathBuf {
    let here = Path::new("target");
    if here.is_dir() {
        return here.to_path_buf();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .filter(|t| t.join("CACHEDIR.TAG").is_file())
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The directory of the pool files; removed on drop if this run created it and
/// it is empty by then (`remove_dir` never removes anything else).
pub struct DurableDir {
    path: PathBuf,
    created: bool,
}

impl DurableDir {
    /// `base/nvwa_bench-durable`, made if absent; `Err` if `base` is on tmpfs
    /// or ramfs.
    pub fn create(base: &Path) -> Result<DurableDir, String> {
        if !base.is_dir() {
            return Err(format!("{} is not a directory", base.display()));
        }
        if on_memory_fs(base) {
            return Err(format!(
                "{} is on tmpfs/ramfs, where msync reaches only memory: give --durable-dir a directory on a disk (or leave durable out of --only)",
                base.display()
            ));
        }
        let path = base.join(DIR_NAME);
        let created = match std::fs::create_dir(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => false,
            Err(e) => return Err(format!("creating {}: {e}", path.display())),
        };
        Ok(DurableDir { path, created })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DurableDir {
    fn drop(&mut self) {
        if self.created {
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

/// Whether `dir` is on a file system that lives in memory (tmpfs, ramfs).
#[cfg(target_os = "linux")]
fn on_memory_fs(dir: &Path) -> bool {
    let Ok(c) = crate::pmdk_lib::c_path(dir) else {
        return false;
    };
    // SAFETY: all-zero bytes are a valid `statfs` (plain integers).
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a writable `statfs`.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    // `f_type`'s integer type differs between targets; the magic numbers are
    // positive and fit 32 bits.
    MEMORY_FS.contains(&(st.f_type as u64))
}

#[cfg(not(target_os = "linux"))]
fn on_memory_fs(_dir: &Path) -> bool {
    false
}

/// A pool file in pmem-core's detected mode (msync on an ordinary file), removed
/// on drop after the pool is unmapped (field order).
struct FilePool {
    pool: Arc<Pool>,
    _file: TempFile,
}

impl FilePool {
    /// A new pool of `bytes` bytes in `dir`; `Err` if it is not durable.
    fn create(dir: &Path, what: &str, bytes: u64) -> Result<FilePool, String> {
        let file = TempFile::new(unique_path(dir, what));
        let pool = Pool::create(file.path(), &PoolOptions::new(LAYOUT, bytes))
            .map_err(|e| format!("creating {}: {e}", file.path().display()))?;
        if !pool.is_durable() {
            return Err(format!(
                "{}: mode {} ({}): the durable workload needs a durable pool (is PMKIT_FORCE_DAX set? unset it, or leave durable out of --only)",
                file.path().display(),
                pool.mode().name(),
                pool.mode_source().describe()
            ));
        }
        Ok(FilePool {
            pool: Arc::new(pool),
            _file: file,
        })
    }
}

/// Times `variants` in `batches` batches of `per_batch` iterations each,
/// interleaved (the order rotating every round): per variant, the statistics of
/// ns per iteration and the msyncs per iteration.
fn fixed_batches(
    variants: &mut [Variant<'_, String>],
    per_batch: u64,
    batches: usize,
) -> Result<Vec<(Stats, f64)>, String> {
    let k = variants.len();
    let mut samples = vec![Vec::with_capacity(batches); k];
    let mut msyncs = vec![0u64; k];
    for round in 0..batches {
        for j in 0..k {
            let i = (round + j) % k;
            let v = &mut variants[i];
            let ((r, ns), c) = Counters::measure(|| {
                let t = Instant::now();
                let r = (v.run)(per_batch);
                (r, t.elapsed().as_nanos())
            });
            r?;
            samples[i].push(ns as f64 / per_batch as f64);
            msyncs[i] += c.msyncs;
        }
    }
    let total = (per_batch * batches as u64).max(1) as f64;
    Ok(samples
        .into_iter()
        .zip(msyncs)
        .map(|(s, m)| (Stats::from_samples(s, per_batch), m as f64 / total))
        .collect())
}

/// The pairs of this process's peers.
struct FilePairs {
    rows: Vec<PairRow>,
    /// Peers left out, with why.
    skipped: Vec<(String, String)>,
    /// The pools' mode and its source.
    mode: (DurabilityMode, ModeSource),
}

/// The pairs of this process's peers on durable pools.
fn file_pairs(dir: &Path, sizes: DurableSizes) -> Result<FilePairs, String> {
    let nvwa_pool = FilePool::create(dir, "nvwa-file", POOL_BYTES)?;
    let mode = (nvwa_pool.pool.mode(), nvwa_pool.pool.mode_source());
    // SAFETY: the pool was just created; nothing else uses its heap area.
    let nvwa = unsafe { Nvwa::format_heap(nvwa_pool.pool.clone(), &NvwaOptions::default()) }
        .map_err(|e| format!("formatting nvwa (file): {e}"))?;
    let naive_pool = FilePool::create(dir, "naive-file", POOL_BYTES)?;
    // SAFETY: as above.
    let naive = unsafe { NaiveHeap::format_heap(naive_pool.pool.clone()) }
        .map_err(|e| format!("formatting naive (file): {e}"));
    let wafa_pool = FilePool::create(dir, "wafa-file", POOL_BYTES)?;
    // SAFETY: as above.
    let wafa = unsafe { Wafa::format(wafa_pool.pool.clone(), WafaOptions::default()) }
        .map_err(|e| format!("formatting WAFA (file): {e}"))?;

    let mut skipped = Vec::new();
    let mut variants = vec![allocator_pair("nvwa_file", &nvwa)];
    match &naive {
        Ok(h) => variants.push(allocator_pair("naive_file", h)),
        Err(e) => skipped.push(("naive_file".to_owned(), e.clone())),
    }
    variants.push(wafa_pair("wafa_file", &wafa));
    let mut kept = Vec::new();
    for mut v in variants {
        match (v.run)(WARM_PAIRS) {
            Ok(()) => kept.push(v),
            Err(e) => skipped.push((v.name.clone(), e)),
        }
    }
    let stats = fixed_batches(&mut kept, sizes.pairs_per_batch, sizes.batches)?;
    let rows = kept
        .iter()
        .zip(stats)
        .map(|(v, (stats, m))| PairRow {
            name: v.name.clone(),
            stats,
            msyncs: Some(m),
        })
        .collect();
    Ok(FilePairs {
        rows,
        skipped,
        mode,
    })
}

/// PMDK's durable pair, from a child process on its msync path.
fn pmdk_pair(dir: &Path, sizes: DurableSizes) -> Result<Stats, String> {
    // Named and removed here, so a child that dies leaves no file behind.
    let file = TempFile::new(unique_path(dir, "pmdk-file"));
    let exe = std::env::current_exe().map_err(|e| format!("this executable: {e}"))?;
    let out = Command::new(exe)
        .arg(CHILD_FLAG)
        .arg(file.path())
        .arg(sizes.pairs_per_batch.to_string())
        .arg(sizes.batches.to_string())
        .env("PMEM_IS_PMEM_FORCE", "0")
        .output()
        .map_err(|e| format!("PMDK durable child: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err
            .lines()
            .last()
            .unwrap_or("PMDK durable child failed")
            .trim()
            .to_owned());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    let samples: Vec<f64> = serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| serde_json::from_value(v["samples"].clone()).ok())
        .ok_or_else(|| format!("PMDK durable child: unexpected output {line:?}"))?;
    Ok(Stats::from_samples(samples, sizes.pairs_per_batch))
}

/// The child: PMDK's pair on a pool file at `args[0]`, `args[2]` batches of
/// `args[1]` pairs after a warm-up; prints one JSON line `{"samples": [ns per
/// pair of each batch]}`. Started by [`measure`] with `PMEM_IS_PMEM_FORCE=0`.
pub fn child_main(args: &[String]) -> ExitCode {
    let run = || -> Result<Value, String> {
        let path = PathBuf::from(args.first().ok_or("missing pool path")?);
        let per_batch: u64 = args
            .get(1)
            .ok_or("missing pairs per batch")?
            .parse()
            .map_err(|e| format!("pairs per batch: {e}"))?;
        let batches: usize = args
            .get(2)
            .ok_or("missing batches")?
            .parse()
            .map_err(|e| format!("batches: {e}"))?;
        let heap = PmdkHeap::create_at(path)?;
        for _ in 0..WARM_PAIRS {
            heap.pair(PAIR_BYTES as usize)?;
        }
        let mut samples = Vec::with_capacity(batches);
        for _ in 0..batches {
            let t = Instant::now();
            for _ in 0..per_batch {
                heap.pair(PAIR_BYTES as usize)?;
            }
            samples.push(t.elapsed().as_nanos() as f64 / per_batch.max(1) as f64);
        }
        Ok(json!({ "samples": samples }))
    };
    match run() {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nvwa_bench (PMDK durable child): {e}");
            ExitCode::FAILURE
        }
    }
}

/// `n` hash-table puts on a durable pool of `kind`, timed one by one, with the
/// msyncs counted; then the table is checked.
fn pht_puts(dir: &Path, kind: Kind, n: u64) -> Result<PhtPut, String> {
    // Nodes (136 B: NVWA's 160 B class) and the bucket array, as the PHT workload.
    let objects = n + n.div_ceil(pht::SEGMENT_BUCKETS);
    let pool = FilePool::create(
        dir,
        &format!("pht-file-{}", kind.name()),
        pool_bytes(objects, 160 + 8),
    )?;
    let heap = Heap::format(kind, pool.pool.clone(), objects)?;
    let counted = Counted::new(heap.allocator());
    let table = Pht::create(&counted, n)?;
    let mut each = Vec::with_capacity(n as usize);
    let before = Counters::current();
    let clock = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        table.put(&key(i), &value(i))?;
        each.push(t.elapsed().as_nanos() as f64);
    }
    let total_ns = clock.elapsed().as_nanos() as f64;
    let msyncs = Counters::since(before).msyncs;
    let held = table.count()?;
    if held != n {
        return Err(format!("durable PHT holds {held} nodes, expected {n}"));
    }
    let step = (n / 500).max(1) as usize;
    for i in (0..n).step_by(step) {
        if table.get(&key(i))? != Some(value(i)) {
            return Err(format!("durable PHT: key {i} lost or wrong"));
        }
    }
    let n_f = n.max(1) as f64;
    Ok(PhtPut {
        n,
        mean_ns: total_ns / n_f,
        median_ns: Stats::from_samples(each, 1).median,
        msyncs_per_put: msyncs as f64 / n_f,
    })
}

/// Runs the durable workload in `dir` (see the module docs).
pub fn measure(dir: &DurableDir, sizes: DurableSizes) -> Result<Durable, String> {
    let path = dir.path();
    let FilePairs {
        rows: mut pairs,
        mut skipped,
        mode,
    } = file_pairs(path, sizes)?;
    match pmdk_pair(path, sizes) {
        Ok(stats) => pairs.push(PairRow {
            name: "pmdk_file".into(),
            stats,
            msyncs: None,
        }),
        Err(e) => skipped.push(("pmdk_file".into(), e)),
    }
    let pht_nvwa = pht_puts(path, Kind::Nvwa, sizes.elements)
        .map_err(|e| format!("durable PHT on nvwa: {e}"))?;
    let pht_naive = pht_puts(path, Kind::Naive, sizes.elements);
    Ok(Durable {
        dir: path.to_path_buf(),
        mode,
        sizes,
        pairs,
        skipped,
        pht_nvwa,
        pht_naive,
    })
}
