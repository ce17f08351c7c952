//! `amf_bench`: the AMF paper's (adaptive memory fusion) workloads — a
//! Redis-like key-value store of 4 KiB values ([`kv`], Table 5), an SQLite-like
//! in-memory table under a 17 : 3 : 3 : 3 insert : update : select : delete mix
//! ([`sql`], §6.4) and the STREAM triad ([`stream`], §5) — run in child processes
//! under a memory limit the kernel enforces ([`child`]).
//!
//! ```text
//! cargo run --release --example amf_bench -- --selftest
//! amf_bench --child kv|sql --footprint BYTES --ops N [--seed S]
//! amf_bench --child-anon BYTES
//! ```
//!
//! The child modes ([`dispatch_child`]) print one last stdout line, either
//! `ok ops=<n> ops_per_sec=<f> verified=<n> peak=<bytes>` (exit 0, parsed by
//! [`parse_ok_line`]) or `error <what>: <why>` (exit 1). `BYTES` takes a binary
//! suffix (`K`, `M`, `G`, `T`: KiB…TiB). `--child-anon` allocates and touches
//! `BYTES` in 1 MiB `Vec<u8>` chunks and keeps them (the selftest's limit check).
//! `--selftest` (hidden) checks the cgroup limit, the workloads and the triad,
//! one line per check, and exits non-zero on any failure.

mod bench;
mod child;
mod fused;
mod kv;
mod levels;
mod metadata;
mod mt;
#[allow(dead_code)]
#[path = "../common/progress.rs"]
mod progress;
mod selftest;
mod sql;
mod stream;
#[path = "../common/thread_cpu.rs"]
mod thread_cpu;
mod timing;
mod verify;

use std::process::ExitCode;

use fused::{AllocArgs, AllocKind, BenchAlloc};
use kv::{run_kv, KvConfig};
use sql::{run_sql, SqlConfig};

/// The program's allocator: the system allocator until a fusion child installs
/// its heap ([`fused`]).
#[global_allocator]
static GLOBAL: BenchAlloc = BenchAlloc::new();

/// The flag of a workload child.
pub const CHILD_FLAG: &str = "--child";
/// The flag of the anonymous-memory child.
pub const ANON_FLAG: &str = "--child-anon";
/// The flag of the selftest.
pub const SELFTEST_FLAG: &str = "--selftest";
/// Bytes of each chunk of the anonymous-memory child.
const ANON_CHUNK: usize = 1 << 20;
/// The seed when `--seed` is not given.
const DEFAULT_SEED: u64 = 1;

/// A workload a child runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// [`kv::run_kv`].
    Kv,
    /// [`sql::run_sql`].
    Sql,
}

impl Workload {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Kv => "kv",
            Workload::Sql => "sql",
        }
    }
}

/// The arguments of a workload child.
#[derive(Clone, Copy, Debug)]
pub struct ChildArgs {
    /// Which workload.
    pub workload: Workload,
    /// Its footprint, bytes.
    pub footprint: u64,
    /// Its operations (after the fill or preload).
    pub ops: u64,
    /// Its seed.
    pub seed: u64,
}

impl ChildArgs {
    /// The arguments that make a child run `self` (for [`child::run_limited`]).
    pub fn to_args(self) -> Vec<String> {
        vec![
            CHILD_FLAG.to_owned(),
            self.workload.name().to_owned(),
            "--footprint".to_owned(),
            self.footprint.to_string(),
            "--ops".to_owned(),
            self.ops.to_string(),
            "--seed".to_owned(),
            self.seed.to_string(),
        ]
    }

    /// Parses `kv|sql --footprint BYTES --ops N [--seed S]`.
    ///
    /// # Errors
    ///
    /// A readable message for a missing, unknown or malformed argument.
    pub fn parse(args: &[String]) -> Result<ChildArgs, String> {
        let workload = match args.first().map(String::as_str) {
            Some("kv") => Workload::Kv,
            Some("sql") => Workload::Sql,
            Some(other) => return Err(format!("unknown workload {other:?} (kv or sql)")),
            None => return Err("missing workload (kv or sql)".to_owned()),
        };
        let (mut footprint, mut ops, mut seed) = (None, None, DEFAULT_SEED);
        let mut rest = args[1..].iter();
        while let Some(flag) = rest.next() {
            let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--footprint" => footprint = Some(parse_bytes(value)?),
                "--ops" => ops = Some(parse_u64(flag, value)?),
                "--seed" => seed = parse_u64(flag, value)?,
                _ => return Err(format!("unknown argument {flag:?}")),
            }
        }
        Ok(ChildArgs {
            workload,
            footprint: footprint.ok_or("missing --footprint")?,
            ops: ops.ok_or("missing --ops")?,
            seed,
        })
    }
}

/// The figures of a child's `ok` line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OkLine {
    /// Operations timed.
    pub ops: u64,
    /// Their rate.
    pub ops_per_sec: f64,
    /// Values or rows verified.
    pub verified: u64,
    /// Approximate live bytes at the peak.
    pub peak: u64,
}

impl OkLine {
    /// The line: `ok ops=<n> ops_per_sec=<f> verified=<n> peak=<bytes>`.
    pub fn render(&self) -> String {
        format!(
            "ok ops={} ops_per_sec={:.1} verified={} peak={}",
            self.ops, self.ops_per_sec, self.verified, self.peak
        )
    }
}

/// Parses the last `ok` line of a child's stdout; `None` when there is none (an
/// `error` line, or no output: the child was killed).
pub fn parse_ok_line(stdout: &str) -> Option<OkLine> {
    // The last `ok` line: a fusion child prints its heap's figures after it.
    let line = stdout.lines().rev().find(|l| l.starts_with("ok "))?;
    let mut words = line.split_whitespace();
    if words.next() != Some("ok") {
        return None;
    }
    let (mut ops, mut rate, mut verified, mut peak) = (None, None, None, None);
    for w in words {
        let (k, v) = w.split_once('=')?;
        match k {
            "ops" => ops = v.parse().ok(),
            "ops_per_sec" => rate = v.parse().ok(),
            "verified" => verified = v.parse().ok(),
            "peak" => peak = v.parse().ok(),
            _ => {}
        }
    }
    Some(OkLine {
        ops: ops?,
        ops_per_sec: rate?,
        verified: verified?,
        peak: peak?,
    })
}

/// Parses a decimal `u64` given to `flag`.
fn parse_u64(flag: &str, value: &str) -> Result<u64, String> {
    value.parse().map_err(|e| format!("{flag} {value:?}: {e}"))
}

/// Parses a byte count with an optional binary suffix (`K`, `M`, `G`, `T`,
/// optionally followed by `iB` or `B`).
pub fn parse_bytes(value: &str) -> Result<u64, String> {
    let v = value.trim();
    let v = v
        .strip_suffix("iB")
        .or_else(|| v.strip_suffix('B'))
        .unwrap_or(v);
    let (digits, shift) = match v.as_bytes().last() {
        Some(b'K' | b'k') => (&v[..v.len() - 1], 10),
        Some(b'M' | b'm') => (&v[..v.len() - 1], 20),
        Some(b'G' | b'g') => (&v[..v.len() - 1], 30),
        Some(b'T' | b't') => (&v[..v.len() - 1], 40),
        _ => (v, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|e| format!("byte count {value:?}: {e}"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("byte count {value:?} overflows"))
}

/// Runs a workload child and prints its last line.
fn workload_child(args: &[String]) -> ExitCode {
    let (alloc, args) = match split_alloc_args(args) {
        Ok(x) => x,
        Err(e) => {
            println!("error usage: {e}");
            return ExitCode::FAILURE;
        }
    };
    let installed = match fused::install(&GLOBAL, &alloc) {
        Ok(i) => i,
        Err(e) => {
            println!("error {}: {e}", alloc.kind.name());
            return ExitCode::FAILURE;
        }
    };
    let code = run_workload_child(&args);
    if let Some(heap) = installed.heap {
        println!("fusion: {}", heap.stats());
    }
    if let Some(d) = installed.daemon {
        d.stop();
    }
    code
}

/// Takes the allocator flags (`--alloc`, `--limit`, `--limit-source`,
/// `--sections-file`) out of a child's arguments; the rest are the workload's.
fn split_alloc_args(args: &[String]) -> Result<(AllocArgs, Vec<String>), String> {
    let mut alloc = AllocArgs {
        kind: AllocKind::System,
        sections_file: None,
        limit: 0,
        limit_source: "none".to_owned(),
        precharge: false,
    };
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--alloc" => alloc.kind = AllocKind::parse(&value()?)?,
            "--limit" => alloc.limit = parse_bytes(&value()?)?,
            "--limit-source" => alloc.limit_source = value()?,
            "--sections-file" => alloc.sections_file = Some(value()?.into()),
            "--precharge" => alloc.precharge = true,
            _ => rest.push(a.clone()),
        }
    }
    Ok((alloc, rest))
}

fn run_workload_child(args: &[String]) -> ExitCode {
    let a = match ChildArgs::parse(args) {
        Ok(a) => a,
        Err(e) => {
            println!("error usage: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (footprint_bytes, ops, seed) = (a.footprint, a.ops, a.seed);
    let line = match a.workload {
        Workload::Kv => run_kv(&KvConfig {
            footprint_bytes,
            ops,
            seed,
        })
        .map(|r| (r.ops, r.ops_per_sec, r.values_verified, r.peak_live_bytes)),
        Workload::Sql => run_sql(&SqlConfig {
            footprint_bytes,
            ops,
            seed,
        })
        .map(|r| (r.ops, r.ops_per_sec, r.rows_verified, r.peak_live_bytes)),
    }
    .map(|(ops, ops_per_sec, verified, peak)| OkLine {
        ops,
        ops_per_sec,
        verified,
        peak,
    });
    match line {
        Ok(l) => {
            println!("{}", l.render());
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("error {}: {e}", a.workload.name());
            ExitCode::FAILURE
        }
    }
}

/// Allocates and touches `args[0]` bytes in 1 MiB `Vec<u8>` chunks, keeps them,
/// and prints `ok anon=<bytes>`.
fn anon_child(args: &[String]) -> ExitCode {
    let bytes = match args.first().map(|v| parse_bytes(v)) {
        Some(Ok(b)) => b,
        Some(Err(e)) => {
            println!("error usage: {e}");
            return ExitCode::FAILURE;
        }
        None => {
            println!("error usage: {ANON_FLAG} BYTES");
            return ExitCode::FAILURE;
        }
    };
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(ANON_CHUNK as u64) as usize;
        // Every page written: a zeroed allocation alone may stay unbacked.
        let chunk = vec![(chunks.len() as u8) | 1; n];
        chunks.push(std::hint::black_box(chunk));
        left -= n as u64;
    }
    let sum: u64 = chunks.iter().map(|c| u64::from(c[0])).sum();
    println!("ok anon={bytes} chunks={} sum={sum}", chunks.len());
    ExitCode::SUCCESS
}

/// Runs the child mode `args[1]` names (`args[0]` is the program) and returns
/// its exit code; `None` when `args` are not a child's, for the caller's own
/// dispatch.
pub fn dispatch_child(args: &[String]) -> Option<ExitCode> {
    let rest = args.get(2..).unwrap_or(&[]);
    match args.get(1).map(String::as_str) {
        Some(CHILD_FLAG) => Some(workload_child(rest)),
        Some(ANON_FLAG) => Some(anon_child(rest)),
        _ => None,
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if let Some(code) = dispatch_child(&argv) {
        return code;
    }
    match argv.get(1).map(String::as_str) {
        Some(SELFTEST_FLAG) => selftest::run(),
        _ => bench::main(&argv[1..]),
    }
}
