//! The parent run of `amf_bench`: every part in turn, a table per part, the
//! targets with whether each is met, and with `--json` one final line.
//!
//! ```text
//! cargo run --release --example amf_bench -- [--json] [--quick] [--dir DIR] [--shm DIR]
//!     [--only levels,metadata,oversub,fits,stream,section,mt] [--oversub-mib N] [--no-cgroup]
//! ```
//!
//! `--dir` holds the disk-file sections (default `./target` when it exists, else
//! the temporary directory); `--shm` the tmpfs ones (default `/dev/shm`). Parts:
//!
//! * `levels` ([`crate::levels`]): Table 2 replayed; `levels_exact`.
//! * `metadata` ([`crate::metadata`]): AMF against Unified at PM = ×1, ×2, ×3,
//!   ×5 of a 512 MiB "DRAM" (128 MiB with `--quick`); `metadata_bytes.{amf,unified}`
//!   at ×5, after the workload.
//! * `oversub`: each workload (kv, sql) at 256 MiB (32 MiB quick, or
//!   `--oversub-mib`) in a child limited to half of that — by a memory cgroup when one can be made
//!   (`limit_source` `cgroup-v1`/`cgroup-v2`), otherwise (or with `--no-cgroup`)
//!   by a cap the child's allocator enforces (`heap`) — once on the system allocator and once on the
//!   fusion heap with disk-file sections in `--dir` (pressure from the cgroup, or
//!   its own DRAM against the cap). Under a cgroup the parent reads the section
//!   file through before the fusion child uses it, so its page-cache pages are
//!   charged outside the child's limit, as real PM (not DRAM) would be; without
//!   that, the page cache standing in for PM is charged to the same limit and
//!   the run thrashes. `oversubscribed.{system,fusion}.completed`
//!   is true when both workloads completed with every value verified.
//! * `fits`: the same workloads at 256 MiB (32 MiB quick) with no limit, three
//!   alternated runs (one quick) on each allocator, medians; the fusion heap
//!   takes its pressure from `/proc/zoneinfo` and, with memory to spare, serves
//!   from DRAM. `fusion_pm` (one run, tmpfs sections, scripted Critical
//!   pressure: every block from PM) is shown beside them, not in the target.
//! * `stream`: the STREAM triad on a pass-through mapping (tmpfs sections) and on
//!   DRAM `Vec`s, alternated three times, STREAM's best-of; `stream_triad_ratio`
//!   = pass-through / DRAM.
//! * `section`: integrating and reclaiming one 128 MiB section (disk file, with
//!   tmpfs beside it); `integrate_section_ms`, `reclaim_section_ms` are the disk
//!   file's medians.
//! * `mt` ([`crate::mt`]): allocation under pressure, served from sections
//!   (tmpfs), on one and on two threads: `pm_alloc_ops_per_sec.{t1,t2}` and
//!   `pm_alloc_scaling_2t` = t2 / t1.
//!
//! Without persistent memory every "PM" here is emulated: tmpfs is DRAM, a disk
//! file is the page cache written back to disk. The report says so.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use nvwa::fusion::{FusionConfig, FusionHeap, SectionSpace, SECTION_BYTES};
use serde_json::{json, Value};

use crate::child::{cgroup_available, run_limited_with, run_plain, ChildOutcome};
use crate::fused::{AllocArgs, AllocKind};
use crate::metadata::MetaRow;
use crate::progress::outln;
use crate::stream::{check, init, triad_stats};
use crate::timing::SectionTimes;
use crate::{parse_ok_line, ChildArgs, OkLine, Workload};

const MIB: u64 = 1 << 20;
const PARTS: [&str; 7] = [
    "levels", "metadata", "oversub", "fits", "stream", "section", "mt",
];

/// AMF (adaptive memory fusion): the paper's Redis-like, SQLite-like and STREAM
/// workloads, Table 2 replayed, metadata, section integration and allocation under
/// pressure; every "PM" here is emulated.
#[derive(Parser, Debug)]
#[command(name = "amf_bench")]
struct Opts {
    /// End the output with one line of JSON holding the figures.
    #[arg(long)]
    json: bool,
    /// Smaller footprints and fewer runs (a smoke run).
    #[arg(long)]
    quick: bool,
    /// Where the disk-file sections go (./target when it exists, else the temporary
    /// directory, when not given).
    #[arg(long, value_name = "DIR", default_value_os_t = dir_or_temp("target"))]
    dir: PathBuf,
    /// Where the tmpfs sections go (/dev/shm, else the temporary directory, when not
    /// given).
    #[arg(long, value_name = "DIR", default_value_os_t = dir_or_temp("/dev/shm"))]
    shm: PathBuf,
    /// The parts to run (comma-separated).
    #[arg(long, value_name = "PARTS", value_delimiter = ',', value_parser = PARTS,
          default_values_t = PARTS.map(String::from))]
    only: Vec<String>,
    /// The oversubscribed workloads' footprint in MiB (default 256, 32 with --quick).
    #[arg(long, value_name = "N")]
    oversub_mib: Option<u64>,
    /// Limit the oversubscribed children by a cap their allocator enforces, not by a
    /// memory cgroup.
    #[arg(long)]
    no_cgroup: bool,
}

/// `dir` when it is a directory, else the temporary directory.
fn dir_or_temp(dir: &str) -> PathBuf {
    if Path::new(dir).is_dir() {
        PathBuf::from(dir)
    } else {
        std::env::temp_dir()
    }
}

impl Opts {
    fn runs(&self, part: &str) -> bool {
        self.only.iter().any(|p| p == part)
    }
}

/// The parent's entry point.
pub fn main(args: &[String]) -> ExitCode {
    // clap prints the help, or the error with exit status 2, and exits.
    let opts =
        Opts::parse_from(std::iter::once("amf_bench").chain(args.iter().map(String::as_str)));
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("amf_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Opts) -> Result<(), String> {
    let start = Instant::now();
    let mut j = serde_json::Map::new();
    outln!(
        "amf_bench{}: sections on disk in {}, on tmpfs in {}; every PM here is emulated \
         (tmpfs = DRAM, disk = page cache written back)",
        if o.quick { " --quick" } else { "" },
        o.dir.display(),
        o.shm.display()
    );
    let mut targets: Vec<(String, Option<bool>)> = Vec::new();
    // A step per part; the tables print through `outln!`, with the bar off the screen.
    let section = crate::progress::Section::new("amf_bench", o.only.len() as u64);

    if o.runs("levels") {
        section.step("levels");
        let r = crate::levels::run(&o.dir)?;
        outln!("\n## Table 2 levels and decisions (scripted)\n");
        outln!(
            "{} samples and rounds checked, {} mismatches",
            r.checked,
            r.mismatches.len()
        );
        for m in &r.mismatches {
            outln!("  MISMATCH {m}");
        }
        j.insert("levels_exact".into(), json!(r.exact()));
        j.insert(
            "levels".into(),
            json!({ "checked": r.checked, "mismatches": r.mismatches }),
        );
        targets.push(("levels exact".into(), Some(r.exact())));
    }

    if o.runs("metadata") {
        section.step("metadata");
        let dram = if o.quick { 128 * MIB } else { 512 * MIB };
        let rows = crate::metadata::run(&o.shm, dram, &[1, 2, 3, 5])?;
        print_metadata(dram, &rows);
        let x5 = rows.iter().find(|r| r.multiple == 5);
        let ratio = x5.map(|r| r.amf.after_bytes as f64 / r.unified.after_bytes as f64);
        j.insert(
            "metadata_bytes".into(),
            json!({
                "amf": x5.map(|r| r.amf.after_bytes),
                "unified": x5.map(|r| r.unified.after_bytes),
                "ratio_x5": ratio,
                "dram_bytes": dram,
                "configs": rows.iter().map(meta_json).collect::<Vec<_>>(),
            }),
        );
        targets.push((
            format!(
                "metadata at x5 <= 1/5 of Unified's (ratio {})",
                ratio.map_or("-".into(), |r| format!("{r:.4}"))
            ),
            ratio.map(|r| r <= 0.2),
        ));
    }

    if o.runs("oversub") {
        section.step("oversub");
        let v = oversubscribed(o)?;
        let sys = v["system"]["completed"].as_bool();
        let fus = v["fusion"]["completed"].as_bool();
        targets.push((
            "oversubscribed: fusion completes where the system allocator does not".into(),
            match (sys, fus) {
                (Some(s), Some(f)) => Some(f && !s),
                _ => None,
            },
        ));
        j.insert("oversubscribed".into(), v);
    }

    if o.runs("fits") {
        section.step("fits");
        let (kv, sql) = fits(o)?;
        for (name, v) in [("kv", &kv), ("sql", &sql)] {
            let ratio = match (v["fusion"].as_f64(), v["system"].as_f64()) {
                (Some(f), Some(s)) if s > 0.0 => Some(f / s),
                _ => None,
            };
            targets.push((
                format!(
                    "{name} throughput when memory fits: fusion >= 0.9 x system ({})",
                    ratio.map_or("-".into(), |r| format!("{r:.3}"))
                ),
                ratio.map(|r| r >= 0.9),
            ));
        }
        j.insert("kv_ops_per_sec".into(), kv);
        j.insert("sql_ops_per_sec".into(), sql);
    }

    if o.runs("stream") {
        section.step("stream");
        let (ratio, detail) = stream(o)?;
        targets.push((
            format!("STREAM triad on pass-through >= 0.99 x DRAM ({ratio:.4})"),
            Some(ratio >= 0.99),
        ));
        j.insert("stream_triad_ratio".into(), json!(ratio));
        j.insert("stream".into(), detail);
    }

    if o.runs("section") {
        section.step("section");
        let reps = if o.quick { 3 } else { 7 };
        let disk = crate::timing::run(&o.dir, reps)?;
        let tmpfs = crate::timing::run(&o.shm, reps)?;
        outln!("\n## One 128 MiB section: integrate and reclaim (median of {reps})\n");
        outln!("| backing | integrate ms | reclaim ms (written, then freed) |");
        outln!("|---|---:|---:|");
        for t in [&disk, &tmpfs] {
            outln!(
                "| {} | {:.3} | {:.3} |",
                t.backing,
                t.integrate_ms,
                t.reclaim_ms
            );
        }
        targets.push((
            format!(
                "integrate one section <= 5 ms ({:.3} ms)",
                disk.integrate_ms
            ),
            Some(disk.integrate_ms <= 5.0),
        ));
        j.insert(
            "integrate_section_ms".into(),
            json!(round3(disk.integrate_ms)),
        );
        j.insert("reclaim_section_ms".into(), json!(round3(disk.reclaim_ms)));
        j.insert(
            "section_timing".into(),
            json!({ "disk": times_json(&disk), "tmpfs": times_json(&tmpfs) }),
        );
    }

    if o.runs("mt") {
        section.step("mt");
        let (ops, runs) = if o.quick {
            (200_000, 1)
        } else {
            (4_000_000, 3)
        };
        let m = crate::mt::run(&o.shm, ops, runs)?;
        outln!(
            "\n## Allocation from sections on 1 and 2 threads (Critical pressure, median of {})\n",
            m.runs
        );
        outln!(
            "{} ops per thread, working set {} blocks of 16-1024 B per thread, {}",
            m.ops,
            crate::mt::WORKING_SET,
            m.backing
        );
        outln!();
        outln!("| threads | allocations/s | per CPU second | cores used |");
        outln!("|---:|---:|---:|---:|");
        outln!("| 1 | {:.0} | {:.0} | - |", m.t1, m.t1_cpu);
        outln!("| 2 | {:.0} | {:.0} | {:.2} |", m.t2, m.t2_cpu, m.cores_2t);
        targets.push((
            format!(
                "PM allocation scales on 2 threads >= 1.6 ({:.3})",
                m.scaling()
            ),
            Some(m.scaling() >= 1.6),
        ));
        j.insert(
            "pm_alloc_ops_per_sec".into(),
            json!({ "t1": m.t1.round(), "t2": m.t2.round() }),
        );
        j.insert("pm_alloc_scaling_2t".into(), json!(round3(m.scaling())));
        j.insert(
            "pm_alloc_cpu".into(),
            json!({
                "ops_per_cpu_sec": { "t1": m.t1_cpu.round(), "t2": m.t2_cpu.round() },
                "cores_2t": round3(m.cores_2t),
            }),
        );
    }

    drop(section);
    outln!("\n## Targets (computed, not asserted)\n");
    for (name, met) in &targets {
        let mark = match met {
            Some(true) => "met",
            Some(false) => "NOT MET",
            None => "not measured",
        };
        outln!("- {name}: {mark}");
    }
    outln!("\n(total {:.1} s)", start.elapsed().as_secs_f64());
    j.insert("emulated".into(), json!(true));
    j.insert("quick".into(), json!(o.quick));
    j.insert("dir".into(), json!(o.dir.display().to_string()));
    j.insert("shm".into(), json!(o.shm.display().to_string()));
    if o.json {
        outln!("{}", Value::Object(j));
    }
    Ok(())
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn times_json(t: &SectionTimes) -> Value {
    json!({
        "integrate_ms": round3(t.integrate_ms),
        "reclaim_ms": round3(t.reclaim_ms),
        "reps": t.reps,
        "backing": t.backing,
    })
}

fn print_metadata(dram: u64, rows: &[MetaRow]) {
    outln!(
        "\n## Metadata: AMF against Unified (DRAM = {} MiB limit, 128 MiB sections on tmpfs, \
         workload holds 1.25 x DRAM in 4 KiB blocks)\n",
        dram / MIB
    );
    outln!(
        "| PM | sections | AMF launch B | AMF after B | AMF integrated | level | Unified launch B | \
         Unified after B | AMF / Unified | paper's descriptors AMF / Unified B |"
    );
    outln!("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|");
    for r in rows {
        outln!(
            "| x{} | {} | {} | {} | {} | {} | {} | {} | {:.4} | {} / {} |",
            r.multiple,
            r.sections,
            r.amf.launch_bytes,
            r.amf.after_bytes,
            r.amf.integrated,
            r.amf.level,
            r.unified.launch_bytes,
            r.unified.after_bytes,
            r.amf.after_bytes as f64 / r.unified.after_bytes as f64,
            r.amf.paper_bytes,
            r.unified.paper_bytes,
        );
    }
}

fn meta_json(r: &MetaRow) -> Value {
    let f = |m: &crate::metadata::MetaFigures| {
        json!({
            "launch_bytes": m.launch_bytes,
            "after_bytes": m.after_bytes,
            "integrated": m.integrated,
            "level": m.level.to_string(),
            "paper_descriptor_bytes": m.paper_bytes,
        })
    };
    json!({
        "pm_multiple": r.multiple,
        "sections": r.sections,
        "amf": f(&r.amf),
        "unified": f(&r.unified),
    })
}

/// Runs one child; its outcome and parsed `ok` line.
fn child(
    workload: ChildArgs,
    alloc: &AllocArgs,
    cgroup: Option<&'static str>,
) -> Result<(ChildOutcome, Option<OkLine>), String> {
    let mut args = workload.to_args();
    args.extend(alloc.to_args());
    // A child killed by the OOM killer cannot remove its section file.
    let _cleanup = alloc.sections_file.clone().map(RemoveOnDrop);
    let out = match cgroup {
        Some(_) if alloc.limit > 0 => run_limited_with(
            &args,
            alloc.limit,
            alloc.sections_file.as_deref().filter(|_| alloc.precharge),
        ),
        _ => run_plain(&args, if alloc.limit > 0 { "heap" } else { "none" }),
    }
    .map_err(|e| e.to_string())?;
    let ok = parse_ok_line(&out.stdout);
    Ok((out, ok))
}

/// Removes a file when dropped, if it is there.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A fresh section file name in `dir` for a child.
fn sections_file(dir: &Path, tag: &str) -> PathBuf {
    dir.join(format!("amf_bench-sections-{}-{tag}", std::process::id()))
}

fn fusion_line(out: &ChildOutcome) -> Option<String> {
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("fusion: ").map(str::to_owned))
}

fn outcome_json(out: &ChildOutcome, ok: Option<&OkLine>) -> Value {
    json!({
        "completed": out.completed && ok.is_some(),
        "exit_code": out.exit_code,
        "signal": out.signal,
        "oom_killed": out.oom_killed,
        "peak_bytes": out.peak_bytes,
        "ops_per_sec": ok.map(|l| l.ops_per_sec),
        "verified": ok.map(|l| l.verified),
        "fusion": fusion_line(out),
        "error": if ok.is_none() {
            out.stdout.lines().rev().find(|l| l.starts_with("error")).map(str::to_owned)
                .or_else(|| Some(out.stderr_tail.lines().rev().take(2).collect::<Vec<_>>().join(" | ")))
        } else { None },
    })
}

fn oversubscribed(o: &Opts) -> Result<Value, String> {
    let footprint = o.oversub_mib.unwrap_or(if o.quick { 32 } else { 256 }) * MIB;
    let limit = footprint / 2;
    let cgroup = if o.no_cgroup {
        None
    } else {
        cgroup_available()
    };
    let limit_source = cgroup.unwrap_or("heap");
    let ops = footprint / 4096 / 4;
    outln!(
        "\n## Oversubscribed: {} MiB workloads under a {} MiB limit ({limit_source})\n",
        footprint / MIB,
        limit / MIB
    );
    outln!("| workload | allocator | completed | how it ended | ops/s | values verified | limit peak |");
    outln!("|---|---|---|---|---:|---:|---:|");
    let mut by_alloc = serde_json::Map::new();
    for kind in [AllocKind::System, AllocKind::Fusion] {
        let alloc = AllocArgs {
            kind,
            sections_file: (kind != AllocKind::System).then(|| sections_file(&o.dir, "oversub")),
            limit,
            limit_source: limit_source.to_owned(),
            // Under a cgroup, the sections' pages are charged outside it, as
            // real PM's would be (see `child::run_limited_with`).
            precharge: kind != AllocKind::System && cgroup.is_some(),
        };
        let mut all = true;
        let mut per = serde_json::Map::new();
        for workload in [Workload::Kv, Workload::Sql] {
            let args = ChildArgs {
                workload,
                footprint,
                ops,
                seed: 7,
            };
            let (out, ok) = child(args, &alloc, cgroup)?;
            let done = out.completed && ok.is_some();
            all &= done;
            let ended = match (out.exit_code, out.signal) {
                (Some(0), _) => "exit 0".to_owned(),
                (_, Some(9)) => "killed (SIGKILL, OOM)".to_owned(),
                (_, Some(6)) => "aborted (allocation refused)".to_owned(),
                (_, Some(s)) => format!("signal {s}"),
                (Some(c), _) => format!("exit {c}"),
                _ => "?".to_owned(),
            };
            outln!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                workload.name(),
                kind.name(),
                done,
                ended,
                ok.map_or("-".into(), |l| format!("{:.0}", l.ops_per_sec)),
                ok.map_or("-".into(), |l| l.verified.to_string()),
                out.peak_bytes
                    .map_or("-".into(), |b| format!("{} MiB", b / MIB)),
            );
            if let Some(f) = fusion_line(&out) {
                outln!("|   | ({f}) | | | | | |");
            }
            per.insert(workload.name().into(), outcome_json(&out, ok.as_ref()));
        }
        per.insert("completed".into(), json!(all));
        by_alloc.insert(kind.name().into(), Value::Object(per));
    }
    by_alloc.insert("limit_source".into(), json!(limit_source));
    by_alloc.insert(
        "pm_pages_charged".into(),
        json!(if cgroup.is_some() {
            "outside the child's cgroup (the parent reads the section file through first), as real PM is not DRAM"
        } else {
            "not limited (the heap caps its own DRAM)"
        }),
    );
    by_alloc.insert("limit_bytes".into(), json!(limit));
    by_alloc.insert("footprint_bytes".into(), json!(footprint));
    Ok(Value::Object(by_alloc))
}

fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

fn fits(o: &Opts) -> Result<(Value, Value), String> {
    let footprint = if o.quick { 32 * MIB } else { 256 * MIB };
    let ops = if o.quick { 20_000 } else { 400_000 };
    let reps = if o.quick { 1 } else { 3 };
    outln!(
        "\n## When memory fits: {} MiB workloads, no limit (median of {reps} alternated runs)\n",
        footprint / MIB
    );
    outln!("| workload | system ops/s | fusion ops/s | fusion / system | fusion_pm ops/s (tmpfs, every block from PM) |");
    outln!("|---|---:|---:|---:|---:|");
    let mut out = Vec::new();
    for workload in [Workload::Kv, Workload::Sql] {
        let args = ChildArgs {
            workload,
            footprint,
            ops,
            seed: 11,
        };
        let mut sys = Vec::new();
        let mut fus = Vec::new();
        for _ in 0..reps {
            for (kind, into) in [(AllocKind::System, &mut sys), (AllocKind::Fusion, &mut fus)] {
                let alloc = AllocArgs {
                    kind,
                    sections_file: Some(sections_file(&o.dir, "fits")),
                    limit: 0,
                    limit_source: "none".into(),
                    precharge: false,
                };
                let (c, ok) = child(args, &alloc, None)?;
                let ok = ok.ok_or_else(|| {
                    format!(
                        "{} on {} did not complete: {}",
                        workload.name(),
                        kind.name(),
                        c.stdout.lines().last().unwrap_or("")
                    )
                })?;
                into.push(ok.ops_per_sec);
            }
        }
        let pm_alloc = AllocArgs {
            kind: AllocKind::FusionPm,
            sections_file: Some(sections_file(&o.shm, "fits-pm")),
            limit: footprint * 2,
            limit_source: "none".into(),
            precharge: false,
        };
        let (_, pm) = child(args, &pm_alloc, None)?;
        let (s, f) = (median(&mut sys), median(&mut fus));
        let pm = pm.map(|l| l.ops_per_sec);
        outln!(
            "| {} | {:.0} | {:.0} | {:.3} | {} |",
            workload.name(),
            s.unwrap_or(f64::NAN),
            f.unwrap_or(f64::NAN),
            f.unwrap_or(f64::NAN) / s.unwrap_or(f64::NAN),
            pm.map_or("-".into(), |x| format!("{x:.0}")),
        );
        out.push(json!({
            "system": s.map(|x| x.round()),
            "fusion": f.map(|x| x.round()),
            "fusion_pm": pm.map(|x| x.round()),
            "system_runs": sys,
            "fusion_runs": fus,
            "footprint_bytes": footprint,
            "ops": ops,
        }));
    }
    let sql = out.pop().unwrap_or(Value::Null);
    let kv = out.pop().unwrap_or(Value::Null);
    Ok((kv, sql))
}

fn stream(o: &Opts) -> Result<(f64, Value), String> {
    let n: usize = if o.quick { 1 << 20 } else { 16 << 20 };
    let reps = if o.quick { 5 } else { 10 };
    let bytes = (3 * n * size_of::<f64>()) as u64;
    let sections = usize::try_from(bytes.div_ceil(SECTION_BYTES) + 1).map_err(|e| e.to_string())?;
    let path = o
        .shm
        .join(format!("amf_bench-stream-{}", std::process::id()));
    let space = SectionSpace::create(&path, sections, SECTION_BYTES)
        .map_err(|e| e.to_string())?
        .remove_on_drop();
    let heap = FusionHeap::new(space, None, FusionConfig::default()).map_err(|e| e.to_string())?;
    let mut pt = heap.pass_through(bytes).map_err(|e| e.to_string())?;
    let name = pt.name();
    let emulated = pt.emulated();
    let mut dram = (vec![0f64; n], vec![0f64; n], vec![0f64; n]);
    let (mut best_pt, mut best_dram) = (0f64, 0f64);
    let (mut med_pt, mut med_dram) = (Vec::new(), Vec::new());
    {
        let all = pt.as_mut_slice_of::<f64>();
        if all.len() < 3 * n {
            return Err("the pass-through mapping is shorter than asked".into());
        }
        let (a, rest) = all.split_at_mut(n);
        let (b, c) = rest.split_at_mut(n);
        let c = &mut c[..n];
        init(a, b, c);
        init(&mut dram.0, &mut dram.1, &mut dram.2);
        for _ in 0..3 {
            let d = triad_stats(&mut dram.0, &dram.1, &dram.2, reps);
            let p = triad_stats(a, b, c, reps);
            best_dram = best_dram.max(d.best_gbps);
            best_pt = best_pt.max(p.best_gbps);
            med_dram.push(d.median_gbps);
            med_pt.push(p.median_gbps);
        }
        check(a, b, c).map_err(|e| format!("pass-through triad check: {e}"))?;
        check(&dram.0, &dram.1, &dram.2).map_err(|e| format!("DRAM triad check: {e}"))?;
    }
    let ratio = best_pt / best_dram;
    let (md, mp) = (
        median(&mut med_dram).unwrap_or(f64::NAN),
        median(&mut med_pt).unwrap_or(f64::NAN),
    );
    outln!(
        "\n## STREAM triad: {n} doubles per array ({} MiB in all), {reps} reps x 3 alternations\n",
        bytes / MIB
    );
    outln!("| arrays | best GB/s | median GB/s |");
    outln!("|---|---:|---:|");
    outln!("| DRAM Vec<f64> | {best_dram:.2} | {md:.2} |");
    outln!(
        "| pass-through {name} ({}) | {best_pt:.2} | {mp:.2} |",
        if emulated {
            "tmpfs: emulated PM"
        } else {
            "DAX"
        }
    );
    outln!("ratio (best): {ratio:.4}; ratio (median): {:.4}", mp / md);
    drop(pt);
    Ok((
        round3(ratio * 10.0) / 10.0,
        json!({
            "elements": n,
            "reps": reps,
            "dram_best_gbps": round3(best_dram),
            "passthrough_best_gbps": round3(best_pt),
            "dram_median_gbps": round3(md),
            "passthrough_median_gbps": round3(mp),
            "median_ratio": round3(mp / md * 10.0) / 10.0,
            "device": name,
            "emulated": emulated,
        }),
    ))
}
