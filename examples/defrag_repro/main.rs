//! `defrag_repro`: the FFCCD paper's defragmentation workloads (ISCA'22, Table 3),
//! pmkit's `defrag` against libpmemobj's `pmemobj_defrag` in the same run.
//!
//! **Partial.** Of the paper's workloads only `ll` (a linked list of 128-byte
//! values) is here: the workload inserts N nodes, frees every other one, and
//! compacts it once per protocol (Espresso, SFCCD, FFCCD; no mutator); PMDK's list
//! is built the same way and defragmented with every `PMEMoid` of the list handed to
//! `pmemobj_defrag`. Then a mutator runs beside an FFCCD compaction (its overhead
//! and p99), the idle barrier is timed, and a heap whose compaction stopped
//! half-way is reopened (`recovery_ms`).
//!
//! Durable figures beside them (fewer nodes: every transaction is msyncs): ordinary
//! files in `target`, pmem-core in msync mode, PMDK on its msync path (a child
//! process with `PMEM_IS_PMEM_FORCE=0`; the forced-DAX runs set it to 1).
//!
//! Figures: fragmentation ratio before and after (footprint / live bytes: pmkit's
//! slab pages over its objects' bytes; for PMDK, the 4 KiB pages holding a byte of
//! a live node over the nodes' bytes), the reduction, the relocation cost per moved
//! object (the whole call divided by the objects moved), fences per move. Forced-DAX pools on `/dev/shm` (the
//! flush instructions of real PM, not durable).
//!
//! ```sh
//! cargo run --release --example defrag_repro -- [--quick] [--json]
//! ```
//! With `--json`, one final line: `ll.{frag_ratio_before, frag_ratio_after,
//! reduction_pct, pmdk_frag_ratio_after, p99_op_us_during_defrag, pmdk_pause_ms}`,
//! `fences_per_move.{espresso, sfccd, ffccd}`,
//! `relocate_ns_per_object.{espresso, sfccd, ffccd, pmdk}`,
//! `mutator_overhead_pct.ffccd`, `barrier_idle_ns`, `recovery_ms`, and the durable
//! figures (PMDK's `null` when it is absent).

mod pmdk;
#[path = "../common/pmdk_lib.rs"]
mod pmdk_lib;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use defrag::{
    persistent_type, CompactOptions, CompactReport, DefragHeap, HeapRoot, Protocol, Registry,
};
use pmem_core::{ModeRequest, PPtr, Pool, PoolOptions};
use serde_json::{json, Value};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Bytes of a value (the paper's 128 B).
const VALUE: usize = 128;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Node {
    value: [u8; VALUE],
    next: PPtr<Node>,
}
persistent_type!(Node, id = 1, pointers = [next: Node]);

struct Config {
    quick: bool,
    json: bool,
    /// Forced-DAX pools (`/dev/shm`).
    dir: PathBuf,
    /// Durable pools: ordinary files (`target`).
    durable_dir: PathBuf,
}

fn parse() -> Result<Config, String> {
    let mut cfg = Config {
        quick: false,
        json: false,
        dir: PathBuf::from("/dev/shm"),
        durable_dir: ["target", "."]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_dir())
            .unwrap_or_else(|| PathBuf::from(".")),
    };
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--quick" => cfg.quick = true,
            "--json" => cfg.json = true,
            other => return Err(format!("unknown argument {other:?} (use --quick, --json)")),
        }
    }
    if !cfg.dir.is_dir() {
        cfg.dir = std::env::temp_dir();
    }
    Ok(cfg)
}

/// A pool file of the run (removed when dropped).
struct PoolFile(PathBuf);

impl Drop for PoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn registry() -> Registry {
    Registry::new().with::<Node>()
}

/// Builds the `ll` workload: `n` nodes pushed, then every other freed (one
/// transaction each). `durable`: an ordinary file in pmem-core's msync mode
/// instead of forced DAX.
fn build_ll(
    dir: &Path,
    tag: &str,
    n: u64,
    durable: bool,
) -> Result<(DefragHeap, PoolFile), String> {
    let path = dir.join(format!(
        "pmkit-defrag-repro-{tag}-{}.pool",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let file = PoolFile(path);
    let size = (n * 2 * 4096 / 26 + (16 << 20)).next_power_of_two();
    let opts = PoolOptions::new("defrag-repro", size).root::<HeapRoot>();
    let opts = if durable {
        opts
    } else {
        opts.mode(ModeRequest::ForceDax)
    };
    let pool = Pool::create(&file.0, &opts).map_err(|e| e.to_string())?;
    let heap = DefragHeap::create(pool, &registry()).map_err(|e| e.to_string())?;
    for i in 0..n {
        heap.transaction(|t| {
            let next = t.root::<Node>("ll")?;
            let node = t.alloc::<Node>()?;
            t.write(
                node,
                &Node {
                    value: [i as u8; VALUE],
                    next,
                },
            )?;
            t.set_root("ll", node)
        })
        .map_err(|e| e.to_string())?;
    }
    let mut keep = heap.root::<Node>("ll").map_err(|e| e.to_string())?;
    while !keep.is_null() {
        let gone = heap.read(keep).map_err(|e| e.to_string())?.next;
        if gone.is_null() {
            break;
        }
        let after = heap.read(gone).map_err(|e| e.to_string())?.next;
        heap.transaction(|t| {
            let mut k = t.read(keep)?;
            k.next = after;
            t.write(keep, &k)?;
            t.free(gone)
        })
        .map_err(|e| e.to_string())?;
        keep = after;
    }
    Ok((heap, file))
}

/// The list's first value bytes, in order.
fn values(h: &DefragHeap) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut p = h.root::<Node>("ll").map_err(|e| e.to_string())?;
    while !p.is_null() {
        let node = h.read(p).map_err(|e| e.to_string())?;
        out.push(node.value[0]);
        p = node.next;
    }
    Ok(out)
}

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

/// Mutator throughput alone and while an FFCCD compaction runs on another
/// thread: (overhead %, ops during, p99 µs during, compaction report).
fn mutator_overhead(dir: &Path, n: u64) -> Result<(f64, u64, f64, CompactReport), String> {
    let (heap, _file) = build_ll(dir, "mutator", n, false)?;
    let opts = CompactOptions::new().protocol(Protocol::Ffccd);
    let c = heap
        .begin_compaction(&opts)
        .map_err(|e| e.to_string())?
        .ok_or("nothing to compact")?;
    // Baseline with the compaction begun but not moving: the barrier is active
    // (the cost measured is the defragmenter's interference and the barrier's
    // moves, not the pause of planning, reported apart).
    let window = Instant::now();
    let mut base_ops = 0u64;
    while window.elapsed().as_millis() < 300 {
        mutator_op(&heap, base_ops)?;
        base_ops += 1;
    }
    let base_rate = base_ops as f64 / window.elapsed().as_secs_f64();
    let done = std::sync::atomic::AtomicBool::new(false);
    let (report, ops, rate, p99) = std::thread::scope(|s| {
        let defragmenter = s.spawn(|| {
            let r = c.finish();
            done.store(true, std::sync::atomic::Ordering::Release);
            r
        });
        let mut lat = hdrhistogram::Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        let mut ops = 0u64;
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            let t = Instant::now();
            mutator_op(&heap, ops)?;
            let _ = lat.record(t.elapsed().as_nanos() as u64);
            ops += 1;
        }
        let rate = ops as f64 / t0.elapsed().as_secs_f64();
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
    Ok((100.0 * (1.0 - rate / base_rate), ops, p99, report))
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

const PROTOCOLS: [Protocol; 3] = [Protocol::Espresso, Protocol::Sfccd, Protocol::Ffccd];

fn run(cfg: &Config) -> Result<Value, String> {
    // PMDK decides at load whether mappings count as PM; as pmem-core's forced mode,
    // the /dev/shm pools must get the flush instructions of real PM.
    if std::env::var_os("PMEM_IS_PMEM_FORCE").is_none() {
        std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
    }
    let n: u64 = if cfg.quick { 20_000 } else { 1_000_000 };
    println!(
        "defrag_repro{}: ll, {n} nodes of {VALUE} B, every other freed, then compacted; forced-DAX pools in {} (NOT durable)",
        if cfg.quick { " --quick" } else { "" },
        cfg.dir.display()
    );
    let mut runs = Vec::new();
    for protocol in PROTOCOLS {
        runs.push((protocol, pmkit_ll(&cfg.dir, n, false, protocol)?));
    }
    let lib = match pmdk::Pmdk::load() {
        Ok(l) => Some(l),
        Err(e) => {
            println!("PMDK peer skipped: {e}");
            None
        }
    };
    let peer = match &lib {
        Some(l) => Some(pmdk_ll(l, &cfg.dir, n)?),
        None => None,
    };
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
            100.0 * (1.0 - r.after / r.before),
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
            100.0 * (1.0 - pa / pb),
            prel,
            pns,
            "-"
        );
    }
    // Concurrent: a mutator beside an FFCCD compaction; the idle barrier; the
    // opening of a heap whose compaction stopped half-way.
    let (overhead, mutator_ops, p99_us, concurrent) = mutator_overhead(&cfg.dir, n)?;
    let idle_ns = barrier_idle_ns(&cfg.dir)?;
    let recovery = recovery_ms(&cfg.dir, n)?;
    let pmdk_pause_ms = peer.map(|p| p.2 * p.3 as f64 / 1e6);
    println!();
    println!(
        "beside a mutator (ffccd): {mutator_ops} mutator transactions during the compaction, throughput {overhead:+.1}% below the same mutator with the barrier armed and no defragmenter; p99 {p99_us:.1} us (PMDK stops the world for {}); {} of {} moves made by the barrier; planning pause {:.1} ms, longest healing pause {:.2} ms",
        pmdk_pause_ms.map_or("-".to_string(), |ms| format!("{ms:.1} ms")),
        concurrent.barrier_moves,
        concurrent.moved,
        concurrent.plan_pause_ns as f64 / 1e6,
        concurrent.heal_pause_max_ns as f64 / 1e6,
    );
    println!("idle barrier: {idle_ns:.2} ns per pointer resolved");
    println!("recovery of a compaction stopped half-way ({n} nodes): {recovery:.1} ms");
    // Durable: ordinary files on the disk, pmem-core in msync mode, PMDK on its
    // msync path (a child process without the force variable). FFCCD needs eADR:
    // on these pools it would run as SFCCD.
    let dn = durable_nodes(cfg.quick);
    let mut druns = Vec::new();
    for protocol in [Protocol::Espresso, Protocol::Sfccd] {
        druns.push((protocol, pmkit_ll(&cfg.durable_dir, dn, true, protocol)?));
    }
    let dpeer = match &lib {
        Some(_) => Some(pmdk_durable(&cfg.durable_dir, dn)?),
        None => None,
    };
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
    let reduction = 100.0 * (1.0 - espresso.after / espresso.before);
    Ok(json!({
        "quick": cfg.quick,
        "nodes": n,
        "pmdk": lib.as_ref().map(|_| pmdk::LIBRARY),
        "ll": {
            "frag_ratio_before": espresso.before,
            "frag_ratio_after": espresso.after,
            "reduction_pct": reduction,
            "pmdk_frag_ratio_before": peer.map(|p| p.0),
            "pmdk_frag_ratio_after": peer.map(|p| p.1),
            "p99_op_us_during_defrag": p99_us,
            "pmdk_pause_ms": pmdk_pause_ms,
        },
        "fences_per_move": by(|r| r.fences_per_move),
        "relocate_ns_per_object": relocate,
        "mutator_overhead_pct": {"ffccd": overhead},
        "barrier_idle_ns": idle_ns,
        "recovery_ms": recovery,
        "durable": {
            "nodes": dn,
            "frag_ratio_after": {"espresso": druns[0].1.after, "pmdk": dpeer.map(|p| p.1)},
            "relocate_ns_per_object": durable_relocate,
        },
    }))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(CHILD_FLAG) {
        return pmdk_durable_child(&args[2..]);
    }
    let cfg = match parse() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("defrag_repro: {e}");
            return ExitCode::from(2);
        }
    };
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
