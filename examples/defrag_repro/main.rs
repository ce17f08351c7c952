//! `defrag_repro`: the FFCCD paper's defragmentation workloads (ISCA'22, §7.1-7.4,
//! Table 3), pmkit's `defrag` against libpmemobj's `pmemobj_defrag` in the same run.
//!
//! **Workloads** ([`workloads`]): `ll`, `avl`, `ss`, `bt`, `rbt` and the Redis-like
//! `lru` cache, each written once against a small store abstraction with a pmkit
//! backend (one transaction per operation) and a PMDK one: `n` inserts of 128-byte
//! values, then delete / insert / delete phases of `0.8 n` operations (the paper's
//! 5 M and 4 M, times `--scale`), with the paper's normal collector parameters
//! (a compaction when the ratio exceeds 1.5, aiming at 1.25; FFCCD on a
//! defragmenter thread beside the workload); PMDK's `pmemobj_defrag` at the same
//! check points; and both without defragmentation as baselines. Reduction is the
//! paper's Eq. 1 time-average (see [`workloads`]); `lru` adds the tail latency of a
//! client during an FFCCD compaction against PMDK's stop-the-world pause; a
//! 4-thread concurrent hash map (pmkit only) runs beside a compaction too. A plot
//! of footprint over operations for every workload is written (`--plot DIR`,
//! default `target/defrag-plots`).
//!
//! **Protocols** (the `ll` list of before): N nodes pushed, every other freed, one
//! compaction per protocol (Espresso, SFCCD, FFCCD; no mutator) against PMDK's
//! list defragmented with every `PMEMoid` of the list handed to `pmemobj_defrag`;
//! their `reduction` is Eq. 1 on the one compaction, 100 × (ratio before − ratio
//! after) / (ratio before − 1) (the live bytes do not change). Then a mutator runs
//! beside an FFCCD compaction (its overhead and p99), the idle barrier is timed,
//! and a heap whose compaction stopped half-way is reopened (`recovery_ms`).
//!
//! Durable figures beside them (fewer nodes: every transaction is msyncs): ordinary
//! files in `target`, pmem-core in msync mode, PMDK on its msync path (a child
//! process with `PMEM_IS_PMEM_FORCE=0`; the forced-DAX runs set it to 1); and the
//! workloads again on durable pmkit pools (3,000 inserts, one run per side, the
//! collector running SFCCD; PMDK's durable workload runs are not built).
//!
//! Figures: fragmentation ratio (footprint / live bytes: pmkit's slab pages over
//! its objects' bytes; for PMDK, the 4 KiB pages holding a byte of a live object
//! over the objects' bytes, found by walking the graph), the reduction, the
//! relocation cost per moved object (the whole call divided by the objects moved),
//! fences per move. Forced-DAX pools on `/dev/shm` (the flush instructions of real
//! PM, not durable).
//!
//! ```sh
//! cargo run --release --example defrag_repro -- [--quick] [--scale F] [--json] [--plot DIR] [--only mt|mutator|workloads]
//! ```
//! With `--json`, one final line: per workload `W` in `ll avl ss bt rbt lru`,
//! `W.{frag_ratio_before, frag_ratio_after, reduction_pct, reduction_vs_pmdk_pct,
//! pmdk_frag_ratio_before, pmdk_frag_ratio_after, pmdk_reduction_pct, compactions,
//! moved, avg_footprint_mib, exec_overhead_pct, collector_locked_pct, ...}`,
//! `lru.{p99_op_us_during_defrag, pmdk_pause_ms}`, `avg_reduction_pct`,
//! `avg_exec_overhead_pct`, `chm4.{...}`, `scale`; and as before,
//! `ll.{p99_op_us_during_defrag, pmdk_pause_ms}` (the mutator beside FFCCD),
//! `ll.free_every_other.{...}` (the Espresso compaction of the protocol table),
//! `fences_per_move.{espresso, sfccd, ffccd}`,
//! `relocate_ns_per_object.{espresso, sfccd, ffccd, pmdk}`,
//! `mutator_overhead_pct.ffccd` (the paper's measure: the workloads' execution
//! time with the collector over without, the median of three alternated runs of
//! each, averaged; `avg_exec_overhead_pct`),
//! `mutator_overhead_pct.ffccd_during_compaction` (a mutator's throughput inside
//! one compaction of the 1M-node list, below the same with the barrier armed;
//! `.ffccd_during_compaction_per_cpu_second` the same per CPU second of the
//! mutator's thread; `.ffccd_during_compaction_median_slice` the same in the
//! median 10 ms slice of the window and of the run before it;
//! `.floor_beside_a_copier` and
//! `.floor_beside_a_persisting_copier`, `.floor_beside_lookups` the machine's
//! floors under it),
//! `mt.{tx_ops_per_sec.{t1, t2}, scaling_2t}` (the hash map's transactions on 1
//! and 2 threads, no collector; `--only mt` runs this and the line above alone),
//! `barrier_idle_ns`, `recovery_ms`, `planning_pause_ms` (the longest hold of
//! the heap lock while the 1M-node list's compaction was planned), and the durable figures (PMDK's `null` when
//! it is absent): `durable.{...}` for the protocols and
//! `durable_workloads.{W.{frag_ratio_before, frag_ratio_after, reduction_pct,
//! exec_overhead_pct, ...}, avg_reduction_pct, avg_exec_overhead_pct, protocol,
//! workload_inserts}`.

mod ll;
mod plot;
mod pmdk;
#[path = "../common/pmdk_lib.rs"]
mod pmdk_lib;
#[allow(dead_code)]
#[path = "../common/progress.rs"]
mod progress;
#[path = "../common/thread_cpu.rs"]
mod thread_cpu;
mod workloads;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use pmem_core::{ModeRequest, Pool};
use pmem_defrag::{CompactOptions, CompactReport, DefragHeap, Protocol};
use serde_json::{json, Value};

use ll::{build_ll, registry, values, Node, VALUE};

use thread_cpu::thread_cpu_secs;

struct Config {
    quick: bool,
    json: bool,
    /// Fraction of the paper's sizes for the workloads (`None`: the default of
    /// the mode).
    scale: Option<f64>,
    /// Where the plot goes.
    plot: PathBuf,
    /// Forced-DAX pools (`/dev/shm`).
    dir: PathBuf,
    /// Durable pools: ordinary files (`target`).
    durable_dir: PathBuf,
    /// `--only SECTION`: run one section (`mt`: the hash map's transactions on 1
    /// and 2 threads; `mutator`: the mutator beside a
    /// compaction of the 1M-node list, with the planning pause; `workloads`: the
    /// forced-DAX workloads and the 4-thread hash map) and print its JSON.
    only: Option<String>,
}

/// The FFCCD paper's defragmentation workloads (Table 3, the lru cache, a 4-thread
/// hash map) and move protocols, pmkit's defrag against libpmemobj's pmemobj_defrag.
#[derive(Parser, Debug)]
#[command(name = "defrag_repro")]
struct Args {
    /// Smaller sizes and shorter runs (a smoke run).
    #[arg(long)]
    quick: bool,
    /// Fraction of the paper's sizes for the workloads, in (0, 1] (default: that of
    /// the mode).
    #[arg(long, value_name = "F", value_parser = parse_scale)]
    scale: Option<f64>,
    /// End the output with one line of JSON holding the figures.
    #[arg(long)]
    json: bool,
    /// Where the footprint plot goes.
    #[arg(long, value_name = "DIR", default_value = "target/defrag-plots")]
    plot: PathBuf,
    /// Run one section alone and print its JSON (mt: the hash map's transactions on
    /// 1 and 2 threads; mutator: the mutator beside a compaction of the 1M-node
    /// list; workloads: the forced-DAX workloads and the 4-thread hash map).
    #[arg(long, value_name = "SECTION", value_parser = SECTIONS)]
    only: Option<String>,
}

/// `--scale`'s value: a number in (0, 1].
fn parse_scale(v: &str) -> Result<f64, String> {
    let f: f64 = v.parse().map_err(|_| format!("{v:?}: not a number"))?;
    if f > 0.0 && f <= 1.0 {
        Ok(f)
    } else {
        Err(format!("{v}: must be in (0, 1]"))
    }
}

impl Config {
    /// The run `args` ask for, with the pools' directories: forced-DAX pools on
    /// `/dev/shm` (else the temporary directory), durable ones in `./target` (else
    /// `.`).
    fn new(args: Args) -> Config {
        let shm = PathBuf::from("/dev/shm");
        Config {
            quick: args.quick,
            json: args.json,
            scale: args.scale,
            plot: args.plot,
            dir: if shm.is_dir() {
                shm
            } else {
                std::env::temp_dir()
            },
            durable_dir: ["target", "."]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_dir())
                .unwrap_or_else(|| PathBuf::from(".")),
            only: args.only,
        }
    }
}

/// The sections `--only` can run alone.
const SECTIONS: [&str; 3] = ["mt", "mutator", "workloads"];

/// One protocol's compaction of the `ll` workload.
#[derive(Clone, Copy, Debug)]
struct Run {
    before: f64,
    after: f64,
    /// The whole cycle (plan, moves, healing, release) over the objects moved.
    ns_per_move: f64,
    fences_per_move: f64,
    moved: u64,
}

/// Compacts a fresh `ll` heap with `protocol` (stop-the-world: no mutator runs).
fn pmkit_ll(dir: &Path, n: u64, durable: bool, protocol: Protocol) -> Result<Run, String> {
    let (heap, _file) = build_ll(dir, protocol.name(), n, durable)?;
    let before_values = values(&heap)?;
    let t0 = Instant::now();
    let r = heap
        .compact_with(&CompactOptions::new().protocol(protocol))
        .map_err(|e| e.to_string())?;
    let ns = t0.elapsed().as_nanos() as f64;
    if r.protocol != protocol {
        return Err(format!("{protocol} ran as {} on this pool", r.protocol));
    }
    if values(&heap)? != before_values {
        return Err("pmkit: the list changed across the compaction".into());
    }
    heap.verify().map_err(|e| e.to_string())?;
    let per = |x: f64| if r.moved > 0 { x / r.moved as f64 } else { 0.0 };
    Ok(Run {
        before: r.ratio_before,
        after: r.ratio_after,
        ns_per_move: per(ns),
        fences_per_move: per(r.move_fences as f64),
        moved: r.moved,
    })
}

/// Mutator transactions on the `ll` heap: each reads the first `DEPTH` nodes
/// and rewrites the value of one of them.
const DEPTH: usize = 16;

fn mutator_op(heap: &DefragHeap, i: u64) -> Result<(), String> {
    heap.transaction(|t| {
        let mut p = t.root::<Node>("ll")?;
        let target = (i % DEPTH as u64) as usize;
        for k in 0..DEPTH {
            if p.is_null() {
                break;
            }
            let mut node = t.read(p)?;
            if k == target {
                node.value = [i as u8; VALUE];
                t.write(p, &node)?;
            }
            p = node.next;
        }
        Ok(())
    })
    .map_err(|e| e.to_string())
}

/// A mutator beside an FFCCD compaction (see [`mutator_overhead`]).
struct MutatorRun {
    /// Throughput lost inside the compaction's window, in percent of the same
    /// mutator with the barrier armed and no defragmenter.
    overhead_pct: f64,
    /// The same per second of the mutator thread's CPU time: the loss without
    /// the time the thread spent descheduled (another process, the hypervisor).
    overhead_cpu_pct: f64,
    /// The same in the median 10 ms slice of each run ([`Rate::slice_median`]).
    overhead_slice_pct: f64,
    /// Throughput lost beside a thread that only copies memory for as long
    /// (the machine's floor: two cores sharing caches and memory), in percent.
    floor_pct: f64,
    /// The same beside a thread that copies and writes each piece back
    /// (`clwb`, a fence per 4,096 pieces), as a compaction's moves must.
    persisting_floor_pct: f64,
    /// The same beside a thread making dependent reads in a table as large as
    /// the compaction's move map ([`Sibling::Lookups`]).
    lookup_floor_pct: f64,
    /// Mutator transactions inside the window.
    ops: u64,
    /// Their p99 latency, µs.
    p99_us: f64,
    report: CompactReport,
}

/// A mutator's transactions per wall-clock second, per second of its thread's
/// CPU time, and in its median 10 ms slice.
#[derive(Clone, Copy)]
struct Rate {
    wall: f64,
    cpu: f64,
    /// Transactions per second in the median 10 ms slice of the run. This host
    /// stalls a thread now and then for a few ms and gives its speed back over
    /// the next 50-100 ms, with or without a defragmenter beside it (seen with
    /// the mutator alone), so a quarter-second run's mean takes zero, one or
    /// two such dips; the median slice does not.
    slice_median: f64,
}

/// Counts a mutator's transactions, in all and per 10 ms slice.
struct Meter {
    started: Instant,
    cpu_at_start: f64,
    ops: u64,
    slices: Vec<u32>,
}

impl Meter {
    const SLICE_US: u128 = 10_000;

    fn start() -> Meter {
        Meter {
            started: Instant::now(),
            cpu_at_start: thread_cpu_secs(),
            ops: 0,
            slices: Vec::with_capacity(64),
        }
    }

    /// Counts one transaction, ended now.
    fn tick(&mut self) {
        let slice = (self.started.elapsed().as_micros() / Self::SLICE_US) as usize;
        if slice >= self.slices.len() {
            self.slices.resize(slice + 1, 0);
        }
        self.slices[slice] += 1;
        self.ops += 1;
    }

    /// The rates so far (the last slice, still open, is left out of the
    /// median).
    fn rate(&self) -> Rate {
        let closed = &self.slices[..self.slices.len().saturating_sub(1)];
        let per_slice = median(closed.iter().map(|&n| f64::from(n)).collect());
        Rate {
            wall: self.ops as f64 / self.started.elapsed().as_secs_f64(),
            cpu: self.ops as f64 / (thread_cpu_secs() - self.cpu_at_start),
            slice_median: per_slice * 1e6 / Self::SLICE_US as f64,
        }
    }
}

/// The mutator's transaction rates over 300 ms, alone on `heap`'s side.
fn mutator_rate(heap: &DefragHeap) -> Result<Rate, String> {
    let mut meter = Meter::start();
    while meter.started.elapsed().as_millis() < 300 {
        mutator_op(heap, meter.ops)?;
        meter.tick();
    }
    Ok(meter.rate())
}

/// The median of `v` (the upper one of an even count); 0 if empty.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Compaction windows [`mutator_overhead`] measures (each figure's median is
/// reported): one window's mean moves by ±30 % with the host's stalls while it
/// lasts (a quarter of a second, see [`Rate::slice_median`]), whichever way the
/// defragmenter is built, so three windows left the median at their mercy.
const MUTATOR_WINDOWS: usize = 5;

/// [`mutator_overhead_once`] `reps` times (a fresh list each): the run of
/// median overhead, with the median floor. One window lasts about half a
/// second, and one run of either side moves by tens of percent with what the
/// other core's memory traffic happens to be.
fn mutator_overhead(dir: &Path, n: u64, reps: usize) -> Result<MutatorRun, String> {
    let mut runs = Vec::new();
    for _ in 0..reps.max(1) {
        runs.push(mutator_overhead_once(dir, n)?);
    }
    let floor = median(runs.iter().map(|r| r.floor_pct).collect());
    let persisting_floor = median(runs.iter().map(|r| r.persisting_floor_pct).collect());
    let lookup_floor = median(runs.iter().map(|r| r.lookup_floor_pct).collect());
    let cpu = median(runs.iter().map(|r| r.overhead_cpu_pct).collect());
    let slice = median(runs.iter().map(|r| r.overhead_slice_pct).collect());
    runs.sort_by(|a, b| a.overhead_pct.total_cmp(&b.overhead_pct));
    let mut middle = runs.swap_remove(runs.len() / 2);
    middle.floor_pct = floor;
    middle.persisting_floor_pct = persisting_floor;
    middle.lookup_floor_pct = lookup_floor;
    middle.overhead_cpu_pct = cpu;
    middle.overhead_slice_pct = slice;
    Ok(middle)
}

/// Mutator throughput alone and while an FFCCD compaction runs on another
/// thread, and the machine's floor beside it.
fn mutator_overhead_once(dir: &Path, n: u64) -> Result<MutatorRun, String> {
    let (heap, _file) = build_ll(dir, "mutator", n, false)?;
    let opts = CompactOptions::new().protocol(Protocol::Ffccd);
    let c = heap
        .begin_compaction(&opts)
        .map_err(|e| e.to_string())?
        .ok_or("nothing to compact")?;
    // Baseline with the compaction begun but not moving: the barrier is active
    // (the cost measured is the defragmenter's interference and the barrier's
    // moves, not the pause of planning, reported apart).
    let base_rate = mutator_rate(&heap)?;
    let done = std::sync::atomic::AtomicBool::new(false);
    let (report, ops, rate, p99) = std::thread::scope(|s| {
        let defragmenter = s.spawn(|| {
            let r = c.finish();
            done.store(true, std::sync::atomic::Ordering::Release);
            r
        });
        let mut lat = hdrhistogram::Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
        let mut meter = Meter::start();
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            let t = Instant::now();
            mutator_op(&heap, meter.ops)?;
            let _ = lat.record(t.elapsed().as_nanos() as u64);
            meter.tick();
        }
        let (rate, ops) = (meter.rate(), meter.ops);
        let report = defragmenter
            .join()
            .map_err(|_| "the defragmenter panicked".to_string())?
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((
            report,
            ops,
            rate,
            lat.value_at_quantile(0.99) as f64 / 1000.0,
        ))
    })?;
    heap.verify().map_err(|e| e.to_string())?;
    let moved_bytes = report.moved * std::mem::size_of::<Node>() as u64;
    let floor_pct = beside_a_sibling(&heap, moved_bytes, report.moved, Sibling::Copier)?;
    let persisting_floor_pct =
        beside_a_sibling(&heap, moved_bytes, report.moved, Sibling::PersistingCopier)?;
    let lookup_floor_pct = beside_a_sibling(&heap, moved_bytes, report.moved, Sibling::Lookups)?;
    Ok(MutatorRun {
        overhead_pct: 100.0 * (1.0 - rate.wall / base_rate.wall),
        overhead_cpu_pct: 100.0 * (1.0 - rate.cpu / base_rate.cpu),
        overhead_slice_pct: 100.0 * (1.0 - rate.slice_median / base_rate.slice_median),
        floor_pct,
        persisting_floor_pct,
        lookup_floor_pct,
        ops,
        p99_us: p99,
        report,
    })
}

/// What the other core does while [`beside_a_sibling`] measures the mutator: no
/// heap, only the kind of work a compaction's defragmenter does.
#[derive(Clone, Copy)]
enum Sibling {
    /// Copies the moved bytes from one buffer to another in object-sized pieces.
    Copier,
    /// The same, writing each piece back (`clwb`) and fencing every 4,096
    /// pieces, as the moves of a compaction must: the two cores then share the
    /// write-back path too.
    PersistingCopier,
    /// Dependent reads at pseudo-random places of a DRAM table as large as the
    /// compaction's move map (12 B a move), what the defragmenter's lookups of
    /// each object's destination spend their time on.
    Lookups,
}

/// The machine's floor under `mutator_overhead_pct.ffccd_during_compaction`: the
/// same mutator's throughput lost while another thread does `sibling`'s work
/// sized by the compaction (`bytes` moved, at most 256 MiB; `moves` objects),
/// touching no heap; 300 ms alone, 300 ms beside it, 300 ms alone again.
fn beside_a_sibling(
    heap: &DefragHeap,
    bytes: u64,
    moves: u64,
    sibling: Sibling,
) -> Result<f64, String> {
    const PIECE: usize = std::mem::size_of::<Node>();
    let len = match sibling {
        Sibling::Lookups => (moves.max(1 << 16) as usize) * 12,
        _ => (bytes.clamp(1 << 20, 256 << 20) as usize / PIECE) * PIECE,
    };
    let from = vec![7u8; len];
    let mut to = vec![0u8; len];
    let before = mutator_rate(heap)?.wall;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let beside = std::thread::scope(|s| {
        let worker = s.spawn(|| {
            // The flag is checked every 4,096 steps (about 0.5 MiB copied), so
            // the sibling stops soon after the mutator's run.
            let pieces = len / PIECE;
            let mut i = 0usize;
            let mut at = 0usize;
            while !i.is_multiple_of(4096) || !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match sibling {
                    Sibling::Lookups => {
                        // The next place depends on what was read: each read
                        // waits for the one before, as a hash probe chain does.
                        let word = u64::from(from[at]) ^ i as u64;
                        at = (word
                            .wrapping_add(at as u64)
                            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                            >> 20) as usize
                            % len;
                        std::hint::black_box(at);
                    }
                    Sibling::Copier | Sibling::PersistingCopier => {
                        let at = (i % pieces) * PIECE;
                        to[at..at + PIECE]
                            .copy_from_slice(std::hint::black_box(&from[at..at + PIECE]));
                        if matches!(sibling, Sibling::PersistingCopier) {
                            pmem_core::flush::flush(&to[at..at + PIECE]);
                            if i.is_multiple_of(4096) {
                                pmem_core::flush::drain();
                            }
                        }
                    }
                }
                i = i.wrapping_add(1);
            }
        });
        let r = mutator_rate(heap).map(|r| r.wall);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = worker.join();
        r
    })?;
    // Alone on both sides of the sibling's run, so a drift of the machine
    // during the three runs does not fall on one side.
    let alone = (before + mutator_rate(heap)?.wall) / 2.0;
    Ok(100.0 * (1.0 - beside / alone))
}

/// ns per call of the barrier alone on an idle heap, minus the loop's own cost.
fn barrier_idle_ns(dir: &Path) -> Result<f64, String> {
    let (heap, _file) = build_ll(dir, "barrier", 64, false)?;
    const CALLS: u64 = 20_000_000;
    heap.transaction(|t| {
        let p = t.root::<Node>("ll")?;
        let t0 = Instant::now();
        let mut acc = 0u64;
        for i in 0..CALLS {
            let q = std::hint::black_box(p);
            acc = acc.wrapping_add(t.resolve(q)?.offset() ^ i);
        }
        let with = t0.elapsed().as_nanos() as f64;
        let t0 = Instant::now();
        let mut acc2 = 0u64;
        for i in 0..CALLS {
            let q = std::hint::black_box(p);
            acc2 = acc2.wrapping_add(q.offset() ^ i);
        }
        let without = t0.elapsed().as_nanos() as f64;
        std::hint::black_box((acc, acc2));
        Ok(((with - without) / CALLS as f64).max(0.0))
    })
    .map_err(|e| e.to_string())
}

/// Milliseconds to open a heap whose compaction stopped half-way (its moves, the
/// healing and the release are finished by the opening).
fn recovery_ms(dir: &Path, n: u64) -> Result<f64, String> {
    let (heap, file) = build_ll(dir, "recovery", n, false)?;
    let values_before = values(&heap)?;
    let mut c = heap
        .begin_compaction(&CompactOptions::new())
        .map_err(|e| e.to_string())?
        .ok_or("nothing to compact")?;
    c.step(c.moves() / 2).map_err(|e| e.to_string())?;
    // A crash of the process here: the compaction is never finished, the pool is
    // unmapped as it is.
    std::mem::forget(c);
    drop(heap);
    let t0 = Instant::now();
    let pool = Pool::open_with(
        &file.0,
        &pmem_core::OpenOptions::new()
            .layout("defrag-repro")
            .mode(ModeRequest::ForceDax),
    )
    .map_err(|e| e.to_string())?;
    let (heap, _) = DefragHeap::open(pool, &registry()).map_err(|e| e.to_string())?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    if values(&heap)? != values_before {
        return Err("recovery changed the list".into());
    }
    heap.verify().map_err(|e| e.to_string())?;
    Ok(ms)
}

/// PMDK's run: (ratio before, after, ns per relocated object, relocated).
fn pmdk_ll(lib: &pmdk::Pmdk, dir: &Path, n: u64) -> Result<(f64, f64, f64, usize), String> {
    let path = dir.join(format!("pmdk-defrag-repro-{}.pool", std::process::id()));
    let size = (n * 2 * 4096 / 26 + (32 << 20)).next_power_of_two();
    let mut list = pmdk::PmdkList::create(lib, &path, size, VALUE)?;
    for i in 0..n {
        list.push(i as u8)?;
    }
    list.free_every_other();
    let before = list.frag_ratio();
    let values = list.values();
    let t0 = Instant::now();
    let r = list.defrag()?;
    let ns = t0.elapsed().as_nanos() as f64;
    if list.values() != values {
        return Err("PMDK: the list changed across pmemobj_defrag".into());
    }
    let per = if r.relocated > 0 {
        ns / r.relocated as f64
    } else {
        0.0
    };
    Ok((before, list.frag_ratio(), per, r.relocated))
}

/// Nodes of the durable run (each push and free is a transaction of msyncs).
fn durable_nodes(quick: bool) -> u64 {
    if quick {
        2_000
    } else {
        20_000
    }
}

/// The flag of the child process that measures PMDK durably (PMDK reads
/// `PMEM_IS_PMEM_FORCE` once, when it is loaded).
const CHILD_FLAG: &str = "--pmdk-durable-child";

/// The child: PMDK on an ordinary file in `args[0]`, `args[1]` nodes; prints one
/// JSON line `[before, after, ns, relocated]`.
fn pmdk_durable_child(args: &[String]) -> ExitCode {
    let run = || -> Result<Value, String> {
        let dir = PathBuf::from(args.first().ok_or("missing directory")?);
        let n: u64 = args
            .get(1)
            .ok_or("missing count")?
            .parse()
            .map_err(|e| format!("count: {e}"))?;
        let lib = pmdk::Pmdk::load()?;
        let (b, a, ns, rel) = pmdk_ll(&lib, &dir, n)?;
        Ok(json!([b, a, ns, rel]))
    };
    match run() {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("defrag_repro (PMDK durable child): {e}");
            ExitCode::FAILURE
        }
    }
}

/// PMDK's durable figures, from a child process on its msync path.
fn pmdk_durable(dir: &Path, n: u64) -> Result<(f64, f64, f64, usize), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .arg(CHILD_FLAG)
        .arg(dir)
        .arg(n.to_string())
        .env("PMEM_IS_PMEM_FORCE", "0")
        .output()
        .map_err(|e| format!("PMDK durable child: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "PMDK durable child failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str::<(f64, f64, f64, usize)>(text.lines().last().unwrap_or_default())
        .map_err(|e| format!("PMDK durable child: {e}"))
}

/// The paper's Eq. 1 for one compaction (the live bytes unchanged): the
/// footprint saved over the fragmentation before, 100 × (before − after) /
/// (before − 1), in ratios.
fn snapshot_reduction(before: f64, after: f64) -> f64 {
    if before <= 1.0 {
        0.0
    } else {
        100.0 * (before - after) / (before - 1.0)
    }
}

/// The paper's inserts (Table 3: 5 M; the phases 4 M operations).
const PAPER_INSERTS: f64 = 5_000_000.0;
/// `--scale` of a full run: 30,000 inserts per workload (the whole run about 9
/// minutes in a release build on 2 cores, 5 of them the durable workloads, whose
/// every transaction is msyncs).
const DEFAULT_SCALE: f64 = 0.006;
/// `--scale` of `--quick` (CI, debug build).
const QUICK_SCALE: f64 = 0.0004;

/// The workloads and the concurrent hash map, their table, plot and JSON fields.
fn run_workloads(
    cfg: &Config,
    lib: Option<&pmdk::Pmdk>,
) -> Result<serde_json::Map<String, Value>, String> {
    let scale = cfg.scale.unwrap_or(if cfg.quick {
        QUICK_SCALE
    } else {
        DEFAULT_SCALE
    });
    let n = ((PAPER_INSERTS * scale).round() as u64).max(400);
    let env = workloads::Env {
        dir: cfg.dir.clone(),
        plan: workloads::Plan {
            n,
            phase: n * 4 / 5,
            // The paper's check every 1 % of a phase; --quick (a debug build in
            // CI) every 2 %: each check scans pmkit's heap and walks PMDK's graph.
            checks: if cfg.quick { 50 } else { 100 },
        },
        seed: 0x00ff_ccd0,
        durable: false,
        timing_runs: workloads::report::TIMING_RUNS,
    };
    println!();
    println!(
        "workloads (Table 3): {n} inserts of 128 B values, then delete / insert / delete phases of {} ops (scale {scale}); collector: trigger {}, target {}, FFCCD on a defragmenter thread; PMDK: pmemobj_defrag at the same check points{}",
        env.plan.phase,
        workloads::TRIGGER,
        workloads::TARGET,
        if lib.is_none() { " (skipped: no libpmemobj)" } else { "" }
    );
    let section = progress::Section::new("workloads", workloads::Ds::ALL.len() as u64 + 2);
    let figs = workloads::report::run_all(&env, lib)?;
    section.step("chm4 with the collector");
    let on = workloads::concurrent::run(&env, true)?;
    section.step("chm4 without");
    let off = workloads::concurrent::run(&env, false)?;
    drop(section);
    println!();
    workloads::report::print_table(&figs);
    let chm_reduction = workloads::concurrent::reduction(&on, &off);
    let mib = |r: &workloads::concurrent::ChmRun, f: fn(&workloads::Sample) -> u64| {
        workloads::report::mean(&r.samples, f) / f64::from(1u32 << 20)
    };
    println!(
        "chm4 (4 client threads, pmkit only: PMDK would need its own locking): ratio {:.3} -> {:.3}, reduction {chm_reduction:.1}% of the footprint above the live bytes against the same run without the collector, {} compactions beside the clients ({} objects moved); {:.0} ops/s with the collector, {:.0} without",
        on.ratio_before, on.ratio_after, on.compactions, on.moved, on.ops_per_sec, off.ops_per_sec
    );
    if let Some(f) = figs.iter().find(|f| f.ds == workloads::Ds::Lru) {
        if let Some((p99, count)) = f.ours.during {
            println!(
                "lru during its phases: {count} operations made beside its {} compactions, p99 {p99:.1} us (PMDK's longest pmemobj_defrag there: {})",
                f.ours.compactions,
                f.pmdk
                    .as_ref()
                    .map_or("-".into(), |p| format!(
                        "{:.1} ms",
                        p.pauses_ms.iter().copied().fold(0.0, f64::max)
                    ))
            );
        }
        if let Some(l) = f.base.latency {
            println!(
                "lru beside an FFCCD compaction ({} objects moved): {} client ops (70% get, 30% set with eviction), p99 {:.1} us, max {:.1} us; PMDK's pmemobj_defrag at the same point stops the world for {}",
                l.moved,
                l.ops,
                l.p99_us,
                l.max_us,
                f.pmdk_base
                    .as_ref()
                    .and_then(|p| p.latency)
                    .map_or("-".into(), |p| format!("{:.1} ms", p.pmdk_pause_ms))
            );
        }
    }
    // The plot: footprint over operations, per workload.
    std::fs::create_dir_all(&cfg.plot).map_err(|e| format!("{}: {e}", cfg.plot.display()))?;
    let path = cfg.plot.join("footprint.svg");
    let mut panels: Vec<plot::Panel<'_>> = figs
        .iter()
        .map(|f| {
            let mut lines = vec![
                plot::Line {
                    name: "pmkit (FFCCD)",
                    samples: &f.ours.samples,
                    live: false,
                },
                plot::Line {
                    name: "pmkit, no defrag",
                    samples: &f.base.samples,
                    live: false,
                },
            ];
            if let (Some(p), Some(b)) = (&f.pmdk, &f.pmdk_base) {
                lines.push(plot::Line {
                    name: "PMDK (pmemobj_defrag)",
                    samples: &p.samples,
                    live: false,
                });
                lines.push(plot::Line {
                    name: "PMDK, no defrag",
                    samples: &b.samples,
                    live: false,
                });
            }
            lines.push(plot::Line {
                name: "live (pmkit)",
                samples: &f.ours.samples,
                live: true,
            });
            plot::Panel {
                title: format!("{}: footprint", f.ds.name()),
                lines,
            }
        })
        .collect();
    panels.push(plot::Panel {
        title: "chm4 (4 threads): footprint".into(),
        lines: vec![
            plot::Line {
                name: "pmkit (FFCCD)",
                samples: &on.samples,
                live: false,
            },
            plot::Line {
                name: "pmkit, no defrag",
                samples: &off.samples,
                live: false,
            },
            plot::Line {
                name: "live (pmkit)",
                samples: &on.samples,
                live: true,
            },
        ],
    });
    plot::write_svg(&path, &panels)?;
    println!("plot: {}", path.display());
    let mut m = workloads::report::json(&figs);
    if cfg.only.is_none() {
        m.insert(
            "durable_workloads".into(),
            Value::Object(durable_workloads(cfg, env.plan.checks)?),
        );
    }
    m.insert("scale".into(), json!(scale));
    m.insert("workload_inserts".into(), json!(n));
    m.insert(
        "chm4".into(),
        json!({
            "threads": workloads::concurrent::THREADS,
            "frag_ratio_before": on.ratio_before,
            "frag_ratio_after": on.ratio_after,
            "reduction_pct": chm_reduction,
            "compactions": on.compactions,
            "moved": on.moved,
            "ops_per_sec": on.ops_per_sec,
            "ops_per_sec_no_defrag": off.ops_per_sec,
            "avg_footprint_mib": {
                "pmkit": mib(&on, |s| s.footprint),
                "pmkit_no_defrag": mib(&off, |s| s.footprint),
                "live": mib(&on, |s| s.live),
                "live_no_defrag": mib(&off, |s| s.live),
            },
        }),
    );
    Ok(m)
}

/// Inserts of the durable workload runs (every operation is a transaction of
/// msyncs: the forced-DAX scale would take an hour).
fn durable_inserts(quick: bool) -> u64 {
    if quick {
        400
    } else {
        3_000
    }
}

/// The workloads on durable pools (ordinary files, msync mode), pmkit only, one
/// run per side; the collector runs SFCCD there (FFCCD needs eADR or the
/// reached bitmap).
fn durable_workloads(cfg: &Config, checks: u64) -> Result<serde_json::Map<String, Value>, String> {
    let n = durable_inserts(cfg.quick);
    let env = workloads::Env {
        dir: cfg.durable_dir.clone(),
        plan: workloads::Plan {
            n,
            phase: n * 4 / 5,
            checks,
        },
        seed: 0x00ff_ccd0,
        durable: true,
        timing_runs: 1,
    };
    println!();
    println!(
        "durable workloads: ordinary files in {} (pmem-core msync mode), {n} inserts, then phases of {} ops; collector: SFCCD (FFCCD needs eADR), one run per side; pmkit only (PMDK's durable runs are not built)",
        env.dir.display(),
        env.plan.phase
    );
    let section = progress::Section::new("durable workloads", workloads::Ds::ALL.len() as u64);
    let figs = workloads::report::run_all(&env, None)?;
    drop(section);
    workloads::report::print_durable_table(&figs);
    let mut m = workloads::report::durable_json(&figs);
    m.insert("workload_inserts".into(), json!(n));
    m.insert("protocol".into(), json!(env.protocol().name()));
    Ok(m)
}

/// `--only mutator`: the mutator beside an FFCCD compaction of the `n`-node
/// list, with the compaction's planning pause.
fn mutator_section(cfg: &Config, n: u64) -> Result<Value, String> {
    let section = progress::Section::new("mutator", 1);
    section.step("a mutator beside an FFCCD compaction");
    let m = mutator_overhead(&cfg.dir, n, if cfg.quick { 1 } else { MUTATOR_WINDOWS })?;
    drop(section);
    print_mutator(&m, n);
    Ok(json!({
        "nodes": n,
        "planning_pause_ms": m.report.plan_pause_ns as f64 / 1e6,
        "mutator_overhead_pct": mutator_json(&m),
        "ll": {"p99_op_us_during_defrag": m.p99_us},
        "locked_ms": m.report.locked_ns as f64 / 1e6,
        "window_locked_ms": m.report.locked_ns.saturating_sub(m.report.plan_locked_ns) as f64 / 1e6,
    }))
}

/// The mutator's line of the table.
fn print_mutator(m: &MutatorRun, n: u64) {
    let c = &m.report;
    println!(
        "beside a mutator (ffccd, {n} nodes): {} mutator transactions during the compaction, throughput {:+.1}% below the same mutator with the barrier armed ({:+.1}% per CPU second of the mutator's thread, {:+.1}% in the median 10 ms slice; the floor beside a thread that only copies memory: {:+.1}%, beside one that copies and writes back: {:+.1}%, beside one making dependent reads in a table the size of the move map: {:+.1}%); p99 {:.1} us; {} of {} moves by the barrier; planning pause {:.1} ms (the heap held alone {:.1} ms in all while planning, before the window); inside the window the heap held alone {:.2} ms (the deactivation; healing and releases run beside the mutator)",
        m.ops,
        m.overhead_pct,
        m.overhead_cpu_pct,
        m.overhead_slice_pct,
        m.floor_pct,
        m.persisting_floor_pct,
        m.lookup_floor_pct,
        m.p99_us,
        c.barrier_moves,
        c.moved,
        c.plan_pause_ns as f64 / 1e6,
        c.plan_locked_ns as f64 / 1e6,
        c.locked_ns.saturating_sub(c.plan_locked_ns) as f64 / 1e6,
    );
}

/// `mutator_overhead_pct`'s figures of a mutator run.
fn mutator_json(m: &MutatorRun) -> Value {
    json!({
        "ffccd_during_compaction": m.overhead_pct,
        "ffccd_during_compaction_per_cpu_second": m.overhead_cpu_pct,
        "ffccd_during_compaction_median_slice": m.overhead_slice_pct,
        "floor_beside_a_copier": m.floor_pct,
        "floor_beside_a_persisting_copier": m.persisting_floor_pct,
        "floor_beside_lookups": m.lookup_floor_pct,
    })
}

const PROTOCOLS: [Protocol; 3] = [Protocol::Espresso, Protocol::Sfccd, Protocol::Ffccd];

/// The hash map's transactions on 1 and 2 threads sharing a heap, and on 2
/// threads with a heap each (the machine's scaling): medians of three rounds
/// (one with `--quick`), the sides alternating. Prints its line; the `mt` JSON.
fn mt_figures(cfg: &Config) -> Result<Value, String> {
    use workloads::mt::{tx_ops_per_sec, Heaps};
    let total = workloads::mt::total_ops(cfg.quick);
    let rounds = if cfg.quick { 1 } else { 3 };
    let (mut t1, mut t2, mut apart) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        t1.push(tx_ops_per_sec(&cfg.dir, 1, total, Heaps::Shared)?);
        t2.push(tx_ops_per_sec(&cfg.dir, 2, total, Heaps::Shared)?);
        apart.push(tx_ops_per_sec(&cfg.dir, 2, total, Heaps::Apart)?);
    }
    let (t1, t2, apart) = (median(t1), median(t2), median(apart));
    progress::suspend(|| {
        println!(
            "mt (hash map, {total} inserts and deletes, no collector, median of {rounds}): {t1:.0} tx/s on 1 thread, {t2:.0} on 2: scaling {:.2} (2 threads with a heap each: {apart:.0}, scaling {:.2})",
            t2 / t1,
            apart / t1
        )
    });
    Ok(json!({
        "tx_ops_per_sec": {"t1": t1, "t2": t2, "t2_apart": apart},
        "scaling_2t": t2 / t1,
        "scaling_2t_apart": apart / t1,
    }))
}

/// The multi-threaded section: the hash map's transactions on 1 and 2 threads,
/// and a mutator's throughput inside an FFCCD compaction's window.
fn run_mt(cfg: &Config, n: u64) -> Result<Value, String> {
    let section = progress::Section::new("mt", 2);
    section.step("the hash map on 1 and 2 threads");
    let mt = mt_figures(cfg)?;
    section.step("a mutator beside an FFCCD compaction");
    let m = mutator_overhead(&cfg.dir, n, if cfg.quick { 1 } else { MUTATOR_WINDOWS })?;
    drop(section);
    print_mutator(&m, n);
    Ok(json!({
        "mt": mt,
        "mutator_overhead_pct": mutator_json(&m),
        "planning_pause_ms": m.report.plan_pause_ns as f64 / 1e6,
    }))
}

fn run(cfg: &Config) -> Result<Value, String> {
    // PMDK decides at load whether mappings count as PM; as pmem-core's forced mode,
    // the /dev/shm pools must get the flush instructions of real PM.
    if std::env::var_os("PMEM_IS_PMEM_FORCE").is_none() {
        std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
    }
    let n: u64 = if cfg.quick { 20_000 } else { 1_000_000 };
    if cfg.only.as_deref() == Some("mt") {
        return run_mt(cfg, n);
    }
    println!(
        "defrag_repro{}: ll, {n} nodes of {VALUE} B, every other freed, then compacted; forced-DAX pools in {} (NOT durable)",
        if cfg.quick { " --quick" } else { "" },
        cfg.dir.display()
    );
    match cfg.only.as_deref() {
        Some("mutator") => return mutator_section(cfg, n),
        Some("workloads") => {
            let lib = pmdk::Pmdk::load().map_err(|e| println!("PMDK peer skipped: {e}"));
            return run_workloads(cfg, lib.as_ref().ok()).map(Value::Object);
        }
        _ => {}
    }
    let section = progress::Section::new("protocols", PROTOCOLS.len() as u64 + 1);
    let mut runs = Vec::new();
    for protocol in PROTOCOLS {
        section.step(protocol.name());
        runs.push((protocol, pmkit_ll(&cfg.dir, n, false, protocol)?));
    }
    let lib = match pmdk::Pmdk::load() {
        Ok(l) => Some(l),
        Err(e) => {
            progress::suspend(|| println!("PMDK peer skipped: {e}"));
            None
        }
    };
    section.step("pmdk");
    let peer = match &lib {
        Some(l) => Some(pmdk_ll(l, &cfg.dir, n)?),
        None => None,
    };
    drop(section);
    println!();
    println!(
        "{:<10} {:>12} {:>12} {:>10} {:>10} {:>16} {:>14}",
        "", "ratio before", "ratio after", "reduction", "moved", "ns per moved", "fences/move"
    );
    for (protocol, r) in &runs {
        println!(
            "{:<10} {:>12.3} {:>12.3} {:>9.1}% {:>10} {:>16.0} {:>14.3}",
            protocol.name(),
            r.before,
            r.after,
            snapshot_reduction(r.before, r.after),
            r.moved,
            r.ns_per_move,
            r.fences_per_move
        );
    }
    if let Some((pb, pa, pns, prel)) = peer {
        println!(
            "{:<10} {:>12.3} {:>12.3} {:>9.1}% {:>10} {:>16.0} {:>14}",
            "pmdk",
            pb,
            pa,
            snapshot_reduction(pb, pa),
            prel,
            pns,
            "-"
        );
    }
    // Concurrent: a mutator beside an FFCCD compaction; the idle barrier; the
    // opening of a heap whose compaction stopped half-way.
    let section = progress::Section::new("concurrent", 4);
    section.step("a mutator beside an FFCCD compaction");
    let mutator = mutator_overhead(&cfg.dir, n, if cfg.quick { 1 } else { MUTATOR_WINDOWS })?;
    let p99_us = mutator.p99_us;
    section.step("the hash map on 1 and 2 threads");
    let mt = mt_figures(cfg)?;
    section.step("the idle barrier");
    let idle_ns = barrier_idle_ns(&cfg.dir)?;
    section.step("recovery");
    let recovery = recovery_ms(&cfg.dir, n)?;
    drop(section);
    let pmdk_pause_ms = peer.map(|p| p.2 * p.3 as f64 / 1e6);
    println!();
    print_mutator(&mutator, n);
    println!(
        "PMDK stops the world for {}",
        pmdk_pause_ms.map_or("-".to_string(), |ms| format!("{ms:.1} ms"))
    );
    println!("idle barrier: {idle_ns:.2} ns per pointer resolved");
    println!("recovery of a compaction stopped half-way ({n} nodes): {recovery:.1} ms");
    // Durable: ordinary files on the disk, pmem-core in msync mode, PMDK on its
    // msync path (a child process without the force variable). FFCCD needs eADR:
    // on these pools it would run as SFCCD.
    let dn = durable_nodes(cfg.quick);
    let section = progress::Section::new("durable", 3);
    let mut druns = Vec::new();
    for protocol in [Protocol::Espresso, Protocol::Sfccd] {
        section.step(protocol.name());
        druns.push((protocol, pmkit_ll(&cfg.durable_dir, dn, true, protocol)?));
    }
    section.step("pmdk");
    let dpeer = match &lib {
        Some(_) => Some(pmdk_durable(&cfg.durable_dir, dn)?),
        None => None,
    };
    drop(section);
    println!();
    println!(
        "durable: ordinary files in {} (pmem-core msync mode; PMDK its msync path), {dn} nodes",
        cfg.durable_dir.display()
    );
    for (protocol, r) in &druns {
        println!(
            "{:<10} {:>12.3} {:>12.3} {:>10} {:>10} {:>16.0}",
            protocol.name(),
            r.before,
            r.after,
            "",
            r.moved,
            r.ns_per_move
        );
    }
    if let Some((b, a, pns, rel)) = dpeer {
        println!(
            "{:<10} {:>12.3} {:>12.3} {:>10} {:>10} {:>16.0}",
            "pmdk", b, a, "", rel, pns
        );
    }
    let mut wl = run_workloads(cfg, lib.as_ref())?;
    let espresso = runs[0].1;
    let by = |f: fn(&Run) -> f64| -> Value {
        runs.iter()
            .map(|(p, r)| (p.name().to_string(), json!(f(r))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let mut relocate = by(|r| r.ns_per_move);
    relocate["pmdk"] = json!(peer.map(|p| p.2));
    let mut durable_relocate: Value = druns
        .iter()
        .map(|(p, r)| (p.name().to_string(), json!(r.ns_per_move)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    durable_relocate["pmdk"] = json!(dpeer.map(|p| p.2));
    let reduction = snapshot_reduction(espresso.before, espresso.after);
    // `ll`: the workload's figures, with the mutator's and the protocol table's
    // beside them.
    let mut ll = wl.remove("ll").unwrap_or_else(|| json!({}));
    ll["p99_op_us_during_defrag"] = json!(p99_us);
    ll["pmdk_pause_ms"] = json!(pmdk_pause_ms);
    ll["free_every_other"] = json!({
        "frag_ratio_before": espresso.before,
        "frag_ratio_after": espresso.after,
        "reduction_pct": reduction,
        "pmdk_frag_ratio_before": peer.map(|p| p.0),
        "pmdk_frag_ratio_after": peer.map(|p| p.1),
    });
    // The paper's measure (execution time of the workloads with the collector
    // over without), and the harsher ones of a mutator inside one compaction's
    // window.
    let mut mutator_figures = mutator_json(&mutator);
    mutator_figures["ffccd"] = wl
        .get("avg_exec_overhead_pct")
        .cloned()
        .unwrap_or(Value::Null);
    let mut out = json!({
        "quick": cfg.quick,
        "nodes": n,
        "pmdk": lib.as_ref().map(|_| pmdk::LIBRARY),
        "ll": ll,
        "fences_per_move": by(|r| r.fences_per_move),
        "relocate_ns_per_object": relocate,
        "mutator_overhead_pct": mutator_figures,
        "mt": mt,
        "barrier_idle_ns": idle_ns,
        "planning_pause_ms": mutator.report.plan_pause_ns as f64 / 1e6,
        "recovery_ms": recovery,
        "durable": {
            "nodes": dn,
            "frag_ratio_after": {"espresso": druns[0].1.after, "pmdk": dpeer.map(|p| p.1)},
            "relocate_ns_per_object": durable_relocate,
        },
    });
    if let Some(obj) = out.as_object_mut() {
        obj.extend(wl);
    }
    Ok(out)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(CHILD_FLAG) {
        return pmdk_durable_child(&args[2..]);
    }
    let cfg = Config::new(Args::parse());
    match run(&cfg) {
        Ok(v) => {
            if cfg.json {
                println!("{v}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("defrag_repro: {e}");
            ExitCode::FAILURE
        }
    }
}
