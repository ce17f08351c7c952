//! The FFCCD paper's Table 3 workloads (`ll`, `avl`, `ss`, `bt`, `rbt`) and the
//! Redis-like `lru` cache (§7.4), each written once against [`store::Store`] and
//! run on pmkit's heap (each operation one transaction) and on libpmemobj.
//!
//! **Phases** (the paper's §6, scaled by `--scale`): `n` inserts of 128-byte
//! values (random keys from a seeded generator), then a delete phase, an insert
//! phase and a delete phase of `0.8 n` operations each (the paper: 5 M inserts,
//! 4 M-operation phases), so live data swings between `n` and `0.2 n`. `ss`'s
//! insert phases also swap a random string for one of another length after each
//! insert, and `lru`'s get a random key (moving it to the front). Every run of a
//! workload replays the same operations (same seed, same DRAM model).
//!
//! **Runs** per workload: pmkit with the collector (the paper's normal
//! parameters: a compaction starts when the ratio exceeds 1.5 and aims at 1.25;
//! FFCCD on forced-DAX pools, begun and finished on a defragmenter thread while
//! the workload keeps running); pmkit without it; PMDK with `pmemobj_defrag`
//! (stop-the-world, at the same check points and the same 1.5 trigger); PMDK
//! without it. The ratio is checked, and footprint and live bytes sampled, every
//! 1 % of a phase's operations (the samples the averages and the plot use).
//!
//! **Figures.** `frag_ratio_before` / `frag_ratio_after`: the ratio at the end of
//! the last phase and after a final compaction there (target 1.25; for PMDK, a
//! final `pmemobj_defrag`). `reduction_pct` is the paper's time-average
//! (Eq. 1, Table 3): 100 × (avg footprint without defragmentation − avg footprint
//! with it) / (avg footprint without − avg live bytes), the baseline being
//! pmkit's own heap running the same operations without the collector (the same
//! allocator, so only the collector differs). `reduction_vs_pmdk_pct` is the
//! paper's literal baseline, PMDK's footprint without defragmentation (its
//! objects are larger: 16-byte `PMEMoid`s). `pmdk_reduction_pct`: PMDK with
//! `pmemobj_defrag` against PMDK without. Check of the definition on Table 3's
//! LL row: (245.6 − 194.6) / (245.6 − 145.3) = 50.8 %.
//!
//! `lru`'s tail latency (§7.4): the cache left full and fragmented by the run
//! without the collector serves one client (70 % gets, 30 % sets of new keys with
//! eviction) while an FFCCD compaction runs on a defragmenter thread:
//! `p99_op_us_during_defrag`; `pmdk_pause_ms` is `pmemobj_defrag` on PMDK's cache
//! at the same point (the end of the phases without defragmentation). Every
//! workload also reports `p99_op_us_beside_compactions`, the p99 of its own
//! operations made while one of its in-run compactions ran.
//!
//! Every run ends by comparing the structure's contents with the DRAM model (and
//! pmkit's `heap.verify()`); a difference fails the run.

pub mod avl;
pub mod bt;
pub mod concurrent;
pub mod hash;
pub mod ll;
pub mod lru;
pub mod mt;
pub mod ops;
pub mod pmdk_store;
pub mod pmkit_store;
pub mod rbt;
pub mod report;
pub mod ss;
pub mod store;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::thread::Scope;
use std::time::Instant;

use pmem_core::{ModeRequest, Pool, PoolOptions};
use pmem_defrag::{
    Collector, CollectorOptions, CollectorReport, CompactOptions, CompactReport, DefragHeap,
    HeapRoot, Protocol, Trigger,
};

use crate::pmdk::{Pmdk, PmdkHeap};
pub use ops::{apply, contents, run_op, setup, Ds, Op, Setup};
use store::Rng;

/// The paper's normal policy, the library's [`Trigger::normal`].
pub const POLICY: Trigger = Trigger::normal();
/// The paper's trigger: a compaction starts above this ratio.
pub const TRIGGER: f64 = POLICY.start();
/// The paper's target ratio of a compaction.
pub const TARGET: f64 = POLICY.target();

/// The DRAM model: the keys present and their tags, with random choice.
#[derive(Default)]
pub struct Model {
    keys: Vec<u64>,
    at: HashMap<u64, (usize, u8)>,
}

impl Model {
    /// Whether `k` is present.
    pub fn contains(&self, k: u64) -> bool {
        self.at.contains_key(&k)
    }

    /// `k`'s tag.
    pub fn tag(&self, k: u64) -> Option<u8> {
        self.at.get(&k).map(|e| e.1)
    }

    /// Sets `k` to `tag`.
    pub fn set(&mut self, k: u64, tag: u8) {
        if let Some(e) = self.at.get_mut(&k) {
            e.1 = tag;
        } else {
            self.at.insert(k, (self.keys.len(), tag));
            self.keys.push(k);
        }
    }

    /// Removes `k`; `false` if absent.
    pub fn remove(&mut self, k: u64) -> bool {
        let Some((i, _)) = self.at.remove(&k) else {
            return false;
        };
        self.keys.swap_remove(i);
        if let Some(&moved) = self.keys.get(i) {
            if let Some(e) = self.at.get_mut(&moved) {
                e.0 = i;
            }
        }
        true
    }

    /// A random present key (`None` if empty).
    pub fn pick(&self, rng: &mut Rng) -> Option<u64> {
        (!self.keys.is_empty()).then(|| self.keys[rng.below(self.keys.len() as u64) as usize])
    }

    /// Every (key, tag), sorted.
    pub fn sorted(&self) -> Vec<(u64, u8)> {
        let mut v: Vec<(u64, u8)> = self.at.iter().map(|(&k, e)| (k, e.1)).collect();
        v.sort_unstable();
        v
    }
}

/// A key not in `m`: a random 48-bit key, or for `ss` a random free slot.
pub fn fresh_key(w: Setup, rng: &mut Rng, m: &Model) -> u64 {
    loop {
        let k = if w.ds == Ds::Ss {
            rng.below(w.slots)
        } else {
            (rng.next_u64() >> 16) | 1
        };
        if !m.contains(k) {
            return k;
        }
    }
}

/// Sizes of a run: `n` inserts, then phases of `phase` operations, with a check
/// point every `phase / checks` (and `n / checks`) operations.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Initial inserts.
    pub n: u64,
    /// Operations of each later phase.
    pub phase: u64,
    /// Check points per phase.
    pub checks: u64,
}

/// One check point: operations so far, footprint and live bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Operations done.
    pub ops: u64,
    /// Heap footprint, bytes.
    pub footprint: u64,
    /// Live bytes.
    pub live: u64,
}

/// What a driver needs of a heap.
trait Exec {
    /// Runs one operation.
    fn op(&mut self, op: Op) -> Result<Option<u64>, String>;
    /// A check point after `ops` operations: a sample, perhaps a compaction.
    fn check(&mut self, ops: u64) -> Result<(), String>;
}

/// Runs the four phases of `plan` on `exec`, checking every result against the
/// DRAM model it returns.
fn drive(w: Setup, plan: Plan, seed: u64, exec: &mut dyn Exec) -> Result<Model, String> {
    let mut rng = Rng::new(seed);
    let mut m = Model::default();
    let mut ops = 0u64;
    let name = w.ds.name();
    for (insert, count) in [
        (true, plan.n),
        (false, plan.phase),
        (true, plan.phase),
        (false, plan.phase),
    ] {
        let every = (count / plan.checks.max(1)).max(1);
        for i in 0..count {
            if insert {
                let key = fresh_key(w, &mut rng, &m);
                let tag = rng.next_u64() as u8;
                exec.op(Op::Insert { key, tag })?;
                m.set(key, tag);
                if ops >= plan.n && w.ds == Ds::Ss {
                    if let Some(key) = m.pick(&mut rng) {
                        let tag = rng.next_u64() as u8;
                        exec.op(Op::Swap { key, tag })?;
                        m.set(key, tag);
                    }
                }
                if ops >= plan.n && w.ds == Ds::Lru {
                    if let Some(key) = m.pick(&mut rng) {
                        let got = exec.op(Op::Get { key })?;
                        if got != m.tag(key).map(u64::from) {
                            return Err(format!("{name}: get({key}) gave {got:?}"));
                        }
                    }
                }
            } else if w.ds == Ds::Ll {
                let skip = rng.below(4);
                let key = exec
                    .op(Op::DeleteNext { skip })?
                    .ok_or_else(|| format!("{name}: delete returned no key"))?;
                if !m.remove(key) {
                    return Err(format!("{name}: deleted key {key} was not present"));
                }
            } else if let Some(key) = m.pick(&mut rng) {
                exec.op(Op::Delete { key })?;
                m.remove(key);
            }
            ops += 1;
            if (i + 1) % every == 0 {
                exec.check(ops)?;
            }
        }
    }
    Ok(m)
}

/// Compares a structure's contents with the model.
fn same(name: &str, heap: &str, got: &[(u64, u8)], m: &Model) -> Result<(), String> {
    let want = m.sorted();
    if got != want.as_slice() {
        let first = got.iter().zip(&want).position(|(a, b)| a != b);
        return Err(format!(
            "{name} on {heap}: contents differ from the DRAM model ({} entries vs {}; first difference at {first:?})",
            got.len(),
            want.len()
        ));
    }
    Ok(())
}

/// One run of a workload on one heap.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    /// Check points.
    pub samples: Vec<Sample>,
    /// Compactions (pmkit) or `pmemobj_defrag` calls (PMDK) during the phases.
    pub compactions: u64,
    /// Objects they moved.
    pub moved: u64,
    /// PMDK's stop-the-world pauses during the phases, ms.
    pub pauses_ms: Vec<f64>,
    /// Ratio at the end of the phases.
    pub ratio_before: f64,
    /// Ratio after the final compaction (the same without the collector).
    pub ratio_after: f64,
    /// Wall-clock seconds of the phases.
    pub secs: f64,
    /// `lru`: the tail-latency stage.
    pub latency: Option<Latency>,
    /// pmkit with the collector: (p99 µs, count) of the workload's operations
    /// made while a compaction ran beside them.
    pub during: Option<(f64, u64)>,
    /// pmkit with the collector: seconds its compactions held the heap lock (the
    /// workload's transactions wait for it).
    pub locked_secs: f64,
}

/// The `lru` stage of §7.4: get/set beside a defragmentation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Latency {
    /// pmkit: p99 of the client's operations while an FFCCD compaction runs, µs.
    pub p99_us: f64,
    /// pmkit: the longest of them, µs.
    pub max_us: f64,
    /// pmkit: operations during the compaction.
    pub ops: u64,
    /// pmkit: objects the compaction moved.
    pub moved: u64,
    /// PMDK: the pause of `pmemobj_defrag` at the same point, ms.
    pub pmdk_pause_ms: f64,
}

/// Where pools go and how large the runs are.
#[derive(Clone, Debug)]
pub struct Env {
    /// Pool directory: forced-DAX pools (`/dev/shm`), or ordinary files if
    /// `durable`.
    pub dir: PathBuf,
    /// Sizes.
    pub plan: Plan,
    /// Seed of the operations.
    pub seed: u64,
    /// Ordinary files in pmem-core's msync mode instead of forced DAX.
    pub durable: bool,
    /// pmkit runs per side whose median time counts ([`report::TIMING_RUNS`]).
    pub timing_runs: usize,
}

impl Env {
    /// The collector's protocol: FFCCD, or SFCCD on durable pools (FFCCD needs
    /// eADR or the reached bitmap there, and would fall back to SFCCD anyway).
    pub fn protocol(&self) -> Protocol {
        if self.durable {
            Protocol::Sfccd
        } else {
            Protocol::Ffccd
        }
    }
}

/// A pool file (removed when dropped).
struct PoolFile(PathBuf);

impl Drop for PoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Bytes of pool for `n` keys (generous: pools are sparse files on `/dev/shm`).
fn pool_bytes(n: u64) -> u64 {
    (n * 1024 + (64 << 20)).next_power_of_two()
}

fn pool_path(dir: &Path, tag: &str) -> PathBuf {
    dir.join(format!("pmkit-defrag-wl-{tag}-{}.pool", std::process::id()))
}

/// A fresh pmkit heap for `n` keys: forced DAX, or an ordinary file in msync
/// mode if `durable`.
fn pmkit_heap(
    dir: &Path,
    tag: &str,
    n: u64,
    durable: bool,
) -> Result<(DefragHeap, PoolFile), String> {
    let file = PoolFile(pool_path(dir, tag));
    let _ = std::fs::remove_file(&file.0);
    let opts = PoolOptions::new("defrag-workloads", pool_bytes(n)).root::<HeapRoot>();
    let opts = if durable {
        opts
    } else {
        opts.mode(ModeRequest::ForceDax)
    };
    let pool = Pool::create(&file.0, &opts).map_err(|e| e.to_string())?;
    let heap = DefragHeap::create(pool, &pmkit_store::registry()).map_err(|e| e.to_string())?;
    Ok((heap, file))
}

/// The collector's options: the paper's normal target, `protocol`.
pub fn options(protocol: Protocol) -> CompactOptions {
    CompactOptions::new().target(TARGET).protocol(protocol)
}

/// The library's collector with the paper's normal policy and `protocol`,
/// sampling only when woken: the workloads wake it at their check points (every
/// 1 % of a phase), where the PMDK runs check too.
pub fn collector<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    heap: &'env DefragHeap,
    protocol: Protocol,
) -> Result<Collector<'scope>, String> {
    let opts = CollectorOptions::new(POLICY)
        .compact(options(protocol))
        .interval(None);
    Collector::start_scoped(scope, heap, opts).map_err(|e| e.to_string())
}

/// Stops a collector; its report, or its first error.
pub fn stop(c: Collector<'_>) -> Result<CollectorReport, String> {
    let r = c.stop().map_err(|e| e.to_string())?;
    match &r.last_error {
        Some(e) => Err(format!("the collector failed {} times: {e}", r.errors)),
        None => Ok(r),
    }
}

/// Begins and finishes one compaction (on the calling thread).
fn compact_once(heap: &DefragHeap, protocol: Protocol) -> Result<Option<CompactReport>, String> {
    match heap
        .begin_compaction(&options(protocol))
        .map_err(|e| e.to_string())?
    {
        Some(c) => c.finish().map(Some).map_err(|e| e.to_string()),
        None => Ok(None),
    }
}

/// pmkit's executor: each operation one transaction; at a check point, a sample
/// and (with the collector) a wake-up of the library's [`Collector`] when the
/// ratio is above [`TRIGGER`] (it compacts on its own thread, down to
/// [`TARGET`]).
struct PmkitExec<'scope> {
    heap: &'scope DefragHeap,
    w: Setup,
    collector: Option<Collector<'scope>>,
    out: RunResult,
    /// Latencies of the operations made while a compaction runs.
    during: hdrhistogram::Histogram<u64>,
}

impl PmkitExec<'_> {
    /// Stops the collector (finishing its compaction) and adds up its report.
    fn settle(&mut self) -> Result<(), String> {
        if let Some(c) = self.collector.take() {
            let r = stop(c)?;
            self.out.compactions += r.compactions;
            self.out.moved += r.moved;
            self.out.locked_secs += r.locked_ns as f64 / 1e9;
        }
        Ok(())
    }
}

impl Exec for PmkitExec<'_> {
    fn op(&mut self, op: Op) -> Result<Option<u64>, String> {
        let t0 = self
            .collector
            .as_ref()
            .is_some_and(Collector::compacting)
            .then(Instant::now);
        let r = run_op(self.heap, self.w, op)?;
        if let Some(t0) = t0 {
            let _ = self.during.record(t0.elapsed().as_nanos() as u64);
        }
        Ok(r)
    }

    fn check(&mut self, ops: u64) -> Result<(), String> {
        let st = self.heap.stats().map_err(|e| e.to_string())?;
        self.out.samples.push(Sample {
            ops,
            footprint: st.footprint_bytes,
            live: st.live_bytes,
        });
        if let Some(c) = &self.collector {
            if st.frag_ratio > TRIGGER && !c.compacting() {
                c.wake();
            }
        }
        Ok(())
    }
}

/// Runs workload `w` on a pmkit heap, with the collector or without; ends with a
/// final compaction (with the collector), the check of the contents and
/// `heap.verify()`, and for `lru` without the collector, the tail-latency stage.
pub fn run_pmkit(env: &Env, w: Setup, defrag: bool) -> Result<RunResult, String> {
    let tag = format!("{}-{}", w.ds.name(), if defrag { "on" } else { "off" });
    let (heap, _file) = pmkit_heap(&env.dir, &tag, env.plan.n, env.durable)?;
    let name = w.ds.name();
    let t0 = Instant::now();
    let (mut out, model) = std::thread::scope(|scope| {
        let collector = if defrag {
            Some(collector(scope, &heap, env.protocol())?)
        } else {
            None
        };
        let mut exec = PmkitExec {
            heap: &heap,
            w,
            collector,
            out: RunResult::default(),
            during: hdrhistogram::Histogram::new(3).map_err(|e| e.to_string())?,
        };
        let model = drive(w, env.plan, env.seed, &mut exec);
        // The collector is stopped whatever the workload's fate.
        let settled = exec.settle();
        let model = model?;
        settled?;
        let h = &exec.during;
        if !h.is_empty() {
            exec.out.during = Some((h.value_at_quantile(0.99) as f64 / 1e3, h.len()));
        }
        Ok::<_, String>((exec.out, model))
    })?;
    out.secs = t0.elapsed().as_secs_f64();
    let ratio = |h: &DefragHeap| h.stats().map(|s| s.frag_ratio).map_err(|e| e.to_string());
    out.ratio_before = ratio(&heap)?;
    if defrag {
        compact_once(&heap, env.protocol())?;
    }
    out.ratio_after = ratio(&heap)?;
    let check = |heap: &DefragHeap, m: &Model| -> Result<(), String> {
        let got = heap
            .transaction(|t| contents(&mut pmkit_store::Pm(t), w))
            .map_err(|e| format!("{name}: {e}"))?;
        same(name, "pmkit", &got, m)?;
        heap.verify().map_err(|e| format!("{name}: verify: {e}"))?;
        Ok(())
    };
    check(&heap, &model)?;
    if w.ds == Ds::Lru && !defrag {
        let mut model = model;
        out.latency = Some(lru_latency(&heap, w, env, &mut model)?);
        check(&heap, &model)?;
    }
    Ok(out)
}

/// The client's operation mix beside a defragmentation: 70 % gets of a random
/// cached key, 30 % sets of a new key with eviction (the cache stays full).
fn lru_client_op(w: Setup, rng: &mut Rng, m: &mut Model) -> Op {
    if rng.below(10) < 7 {
        if let Some(key) = m.pick(rng) {
            return Op::Get { key };
        }
    }
    let key = fresh_key(w, rng, m);
    Op::SetEvict {
        key,
        tag: rng.next_u64() as u8,
    }
}

/// Applies a client operation's effect to the model, checking a get.
fn lru_model(op: Op, got: Option<u64>, m: &mut Model) -> Result<(), String> {
    match op {
        Op::Get { key } if got != m.tag(key).map(u64::from) => {
            Err(format!("lru: get({key}) gave {got:?}"))
        }
        Op::SetEvict { key, tag } => {
            if let Some(old) = got {
                if !m.remove(old) {
                    return Err(format!("lru: evicted {old}, which was not cached"));
                }
            }
            m.set(key, tag);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// §7.4 on pmkit: the cache, full and fragmented, serves one client while an
/// FFCCD compaction runs on a defragmenter thread; the client's latencies during
/// it.
fn lru_latency(heap: &DefragHeap, w: Setup, env: &Env, m: &mut Model) -> Result<Latency, String> {
    let seed = env.seed;
    let mut rng = Rng::new(seed ^ 0x1a7e);
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut hist = hdrhistogram::Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let (report, ops) = std::thread::scope(|s| {
        let defragmenter = s.spawn(|| {
            let r = compact_once(heap, env.protocol());
            done.store(true, std::sync::atomic::Ordering::Release);
            r
        });
        let mut ops = 0u64;
        let mut failed = None;
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            let op = lru_client_op(w, &mut rng, m);
            let t = Instant::now();
            let got = run_op(heap, w, op);
            let _ = hist.record(t.elapsed().as_nanos() as u64);
            if let Err(e) = got.and_then(|g| lru_model(op, g, m)) {
                failed = Some(e);
                break;
            }
            ops += 1;
        }
        let r = defragmenter
            .join()
            .map_err(|_| "the defragmenter panicked".to_string())?;
        if let Some(e) = failed {
            return Err(e);
        }
        Ok::<_, String>((r?, ops))
    })?;
    Ok(Latency {
        p99_us: hist.value_at_quantile(0.99) as f64 / 1e3,
        max_us: hist.max() as f64 / 1e3,
        ops,
        moved: report.map_or(0, |r| r.moved),
        pmdk_pause_ms: 0.0,
    })
}

/// A PMDK check point: footprint, live bytes, and the pause (ms) and moves of a
/// `pmemobj_defrag` if one ran.
type Measured = (u64, u64, Option<(f64, u64)>);

/// PMDK's executor: direct stores; at a check point, a sample from a walk of the
/// graph and (with defragmentation) `pmemobj_defrag` over every oid the walk
/// found when the ratio is above [`TRIGGER`] (stop-the-world).
struct PmdkExec<'a> {
    heap: PmdkHeap<'a>,
    w: Setup,
    defrag: bool,
    out: RunResult,
}

impl PmdkExec<'_> {
    /// (footprint, live) now; with `defrag`, then `pmemobj_defrag` (its pause ms
    /// and objects moved).
    fn measure(&mut self, defrag: bool) -> Result<Measured, String> {
        let mut walk = pmdk_store::walk(&self.heap)?;
        let (fp, live) = PmdkHeap::footprint(&walk);
        if !defrag {
            return Ok((fp, live, None));
        }
        let t0 = Instant::now();
        let r = self.heap.defrag(&mut walk)?;
        Ok((
            fp,
            live,
            Some((t0.elapsed().as_secs_f64() * 1e3, r.relocated as u64)),
        ))
    }
}

fn ratio(fp: u64, live: u64) -> f64 {
    if live == 0 {
        1.0
    } else {
        fp as f64 / live as f64
    }
}

impl Exec for PmdkExec<'_> {
    fn op(&mut self, op: Op) -> Result<Option<u64>, String> {
        apply(&mut pmdk_store::Pd(&mut self.heap), self.w, op)
            .map_err(|e| format!("{} (PMDK): {e}", self.w.ds.name()))
    }

    fn check(&mut self, ops: u64) -> Result<(), String> {
        let (fp, live, _) = self.measure(false)?;
        self.out.samples.push(Sample {
            ops,
            footprint: fp,
            live,
        });
        if self.defrag && ratio(fp, live) > TRIGGER {
            if let (_, _, Some((ms, moved))) = self.measure(true)? {
                self.out.pauses_ms.push(ms);
                self.out.compactions += 1;
                self.out.moved += moved;
            }
        }
        Ok(())
    }
}

/// Runs workload `w` on a PMDK pool (see [`run_pmkit`]; the final step is a
/// `pmemobj_defrag`, and for `lru` without defragmentation, the pause of one at
/// the point where pmkit's tail-latency stage runs).
pub fn run_pmdk(lib: &Pmdk, env: &Env, w: Setup, defrag: bool) -> Result<RunResult, String> {
    let tag = format!("pmdk-{}-{}", w.ds.name(), if defrag { "on" } else { "off" });
    let heap = PmdkHeap::create(lib, &pool_path(&env.dir, &tag), pool_bytes(env.plan.n))?;
    let name = w.ds.name();
    let mut exec = PmdkExec {
        heap,
        w,
        defrag,
        out: RunResult::default(),
    };
    let t0 = Instant::now();
    let model = drive(w, env.plan, env.seed, &mut exec)?;
    exec.out.secs = t0.elapsed().as_secs_f64();
    let (fp, live, moved) = exec.measure(defrag || w.ds == Ds::Lru)?;
    exec.out.ratio_before = ratio(fp, live);
    if w.ds == Ds::Lru && !defrag {
        exec.out.latency = Some(Latency {
            pmdk_pause_ms: moved.map_or(0.0, |m| m.0),
            ..Latency::default()
        });
    }
    let (fp, live, _) = exec.measure(false)?;
    exec.out.ratio_after = if defrag {
        ratio(fp, live)
    } else {
        exec.out.ratio_before
    };
    let got = contents(&mut pmdk_store::Pd(&mut exec.heap), w)?;
    same(name, "PMDK", &got, &model)?;
    Ok(exec.out)
}
