//! `defrag_repro`: the FFCCD paper's defragmentation workloads (ISCA'22, Table 3),
//! pmkit's `defrag` against libpmemobj's `pmemobj_defrag` in the same run.
//!
//! **Partial.** Of the paper's workloads only `ll` (a linked list of 128-byte
//! values) is here, and of its protocols only Espresso, run stop-the-world
//! (`DefragHeap::compact`): the concurrent compaction, SFCCD, FFCCD and the other
//! workloads are not built (see the README). The workload inserts N nodes, frees
//! every other one, and compacts; PMDK's list is built the same way and defragmented
//! with every `PMEMoid` of the list handed to `pmemobj_defrag`.
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
//! reduction_pct, pmdk_frag_ratio_after}`, `fences_per_move.espresso`,
//! `relocate_ns_per_object.{espresso, pmdk}` (PMDK's figures `null` when it is
//! absent).

mod pmdk;
#[path = "../common/pmdk_lib.rs"]
mod pmdk_lib;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use defrag::{persistent_type, DefragHeap, HeapRoot, Registry};
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

/// pmkit's run: (ratio before, after, ns per moved object, fences per move, moved).
/// `durable`: an ordinary file in pmem-core's msync mode instead of forced DAX.
fn pmkit_ll(dir: &Path, n: u64, durable: bool) -> Result<(f64, f64, f64, f64, u64), String> {
    let path = dir.join(format!("pmkit-defrag-repro-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let size = (n * 2 * 4096 / 26 + (16 << 20)).next_power_of_two();
    let opts = PoolOptions::new("defrag-repro", size).root::<HeapRoot>();
    let opts = if durable {
        opts
    } else {
        opts.mode(ModeRequest::ForceDax)
    };
    let pool = Pool::create(&path, &opts).map_err(|e| e.to_string())?;
    let result = (|| {
        let mut heap =
            DefragHeap::create(pool, &Registry::new().with::<Node>()).map_err(|e| e.to_string())?;
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
        // Free every other node, one transaction each.
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
        let values = |h: &DefragHeap| -> Result<Vec<u8>, String> {
            let mut out = Vec::new();
            let mut p = h.root::<Node>("ll").map_err(|e| e.to_string())?;
            while !p.is_null() {
                let node = h.read(p).map_err(|e| e.to_string())?;
                out.push(node.value[0]);
                p = node.next;
            }
            Ok(out)
        };
        let before_values = values(&heap)?;
        let t0 = Instant::now();
        let r = heap.compact(1.25).map_err(|e| e.to_string())?;
        let ns = t0.elapsed().as_nanos() as f64;
        if values(&heap)? != before_values {
            return Err("pmkit: the list changed across the compaction".into());
        }
        heap.verify().map_err(|e| e.to_string())?;
        let per = if r.moved > 0 {
            ns / r.moved as f64
        } else {
            0.0
        };
        let fences = if r.moved > 0 {
            r.move_fences as f64 / r.moved as f64
        } else {
            0.0
        };
        Ok((r.ratio_before, r.ratio_after, per, fences, r.moved))
    })();
    let _ = std::fs::remove_file(&path);
    result
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
    let (before, after, ns, fences, moved) = pmkit_ll(&cfg.dir, n, false)?;
    let reduction = 100.0 * (1.0 - after / before);
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
    println!(
        "{:<10} {:>12.3} {:>12.3} {:>9.1}% {:>10} {:>16.0} {:>14.2}",
        "espresso", before, after, reduction, moved, ns, fences
    );
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
    // Durable: ordinary files on the disk, pmem-core in msync mode, PMDK on its
    // msync path (a child process without the force variable).
    let dn = durable_nodes(cfg.quick);
    let (dbefore, dafter, dns, _, dmoved) = pmkit_ll(&cfg.durable_dir, dn, true)?;
    let dpeer = match &lib {
        Some(_) => Some(pmdk_durable(&cfg.durable_dir, dn)?),
        None => None,
    };
    println!();
    println!(
        "durable: ordinary files in {} (pmem-core msync mode; PMDK its msync path), {dn} nodes",
        cfg.durable_dir.display()
    );
    println!(
        "{:<10} {:>12.3} {:>12.3} {:>10} {:>10} {:>16.0}",
        "espresso", dbefore, dafter, "", dmoved, dns
    );
    if let Some((b, a, pns, rel)) = dpeer {
        println!(
            "{:<10} {:>12.3} {:>12.3} {:>10} {:>10} {:>16.0}",
            "pmdk", b, a, "", rel, pns
        );
    }
    let pmdk_after = peer.map(|p| p.1);
    let pmdk_ns = peer.map(|p| p.2);
    Ok(json!({
        "quick": cfg.quick,
        "nodes": n,
        "pmdk": lib.as_ref().map(|_| pmdk::LIBRARY),
        "ll": {
            "frag_ratio_before": before,
            "frag_ratio_after": after,
            "reduction_pct": reduction,
            "pmdk_frag_ratio_before": peer.map(|p| p.0),
            "pmdk_frag_ratio_after": pmdk_after,
        },
        "fences_per_move": {"espresso": fences},
        "relocate_ns_per_object": {"espresso": ns, "pmdk": pmdk_ns},
        "durable": {
            "nodes": dn,
            "frag_ratio_after": {"espresso": dafter, "pmdk": dpeer.map(|p| p.1)},
            "relocate_ns_per_object": {"espresso": dns, "pmdk": dpeer.map(|p| p.2)},
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
