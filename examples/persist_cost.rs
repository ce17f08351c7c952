//! `persist_cost`: what making data durable and dereferencing an offset pointer cost
//! through pmem-core, next to the raw instruction sequences, measured in one run.
//!
//! Measures, with its own timing loop (warm-up, then batches of N operations timed
//! with `Instant`, the variants of one comparison interleaved batch by batch so drift
//! hits them alike; the figure is the median ns per operation over the batches):
//!
//! * persist of 8 B, 64 B (line aligned and straddling two lines) and 4 KiB through
//!   `Pool::persist`, through the `pmem_core::flush::persist_raw` primitive, and
//!   through an inline-assembly loop of the same flush instruction plus `sfence`;
//!   every variant first dirties each persisted line with the same volatile stores;
//! * 64 reads through `Pool::get(PPtr<u64>)` vs raw `*const u64`, independent and as a
//!   dependent pointer chase;
//! * `Pool::open` + drop of a sparse 1 GiB pool;
//! * the durable section (`persist_cost/durable.rs`): flush-and-drain of one line on
//!   an ordinary file in `Msync` mode, 1 thread and 8 threads at once, with group
//!   commit (`durable.*`) and with the old serialised drain (`durable.old.*`,
//!   what `PMKIT_GROUP_COMMIT=0` selects), and the two sync strategies
//!   (`durable.pieces.{msync,fdatasync}.*`, 2 and 16 scattered ranges per drain).
//!
//! The pools of the first part live in `/dev/shm` (or `--dir`) in forced `Dax` mode:
//! the flush and fence instructions are exactly those real PM would get, but nothing
//! is durable there, and the output says so. The durable section's pool is an
//! ordinary file in `./target` (or `--durable-dir`; not tmpfs, whose "device" has no
//! cache to flush). Pool files get unique names and are removed at exit.
//!
//! ```text
//! cargo run --release --example persist_cost -- [--json] [--quick] [--dir DIR] [--durable-dir DIR]
//! ```
//!
//! With `--json` the last line of output is one JSON object with the figures
//! (`persist_64b_ns`, `raw_clwb_sfence_64b_ns`, `deref_ns`, `raw_deref_ns`, ... and a
//! `met_targets` object). Targets are computed, never asserted: persist within 10 % of
//! the raw sequence (8 B, 64 B and 4 KiB), dereference within 1 ns of a raw pointer,
//! `durable.drains_per_sec.t8` at least 4 × `durable.drains_per_sec.t1`, and
//! `durable.device_flushes_per_drain.t8` at most 0.3.

#[path = "../benches/common/mod.rs"]
mod common;
#[path = "persist_cost/durable.rs"]
mod durable;
#[allow(dead_code)]
#[path = "common/progress.rs"]
mod progress;

use std::cell::RefCell;
use std::error::Error;
use std::hint::black_box;
use std::path::PathBuf;

use clap::Parser;
use common::{PersistCase, RawSeq, WithRaw, WorkPool, DEREFS_PER_CALL, PERSIST_CASES};
use pmem_core::{flush, Counters, PoolError};
use serde_json::{json, Map, Value};

/// Target: persist within this ratio of the raw sequence.
const PERSIST_TARGET_RATIO: f64 = 1.10;
/// Target: dereference within this many ns of a raw pointer.
const DEREF_TARGET_NS: f64 = 1.0;
/// Target: 8 threads drain at least this many times as often as 1 thread.
const DURABLE_T8_SPEEDUP: f64 = 4.0;
/// Target: at most this many device flushes per drain with 8 threads.
const DURABLE_T8_FLUSHES_PER_DRAIN: f64 = 0.3;

/// What making data durable and dereferencing an offset pointer cost through
/// pmem-core, next to the raw instruction sequences.
#[derive(Parser, Debug)]
#[command(name = "persist_cost")]
struct Config {
    /// End the output with one line of JSON holding the figures.
    #[arg(long)]
    json: bool,
    /// Fewer and shorter batches (a smoke run; noisier).
    #[arg(long)]
    quick: bool,
    /// Where to create the temporary pools (/dev/shm, else ./target, when not given).
    #[arg(long, value_name = "DIR", default_value_os_t = common::default_dir())]
    dir: PathBuf,
    /// Where the durable section's pool file goes (an ordinary file system, not tmpfs).
    #[arg(long, value_name = "DIR", default_value = "target")]
    durable_dir: PathBuf,
}

/// How long and how often to time.
struct Timing {
    /// Batches per variant (odd, so the median is one batch).
    batches: usize,
    /// Calibrate N so that one batch takes at least this long.
    batch_ns: u128,
    /// Every measured variant's statistics, for the JSON detail.
    log: RefCell<Vec<(String, Stats)>>,
}

// Shared with `wafa_wear`, which also uses `Variant::repeat`.
#[allow(dead_code)]
#[path = "../benches/common/interleave.rs"]
mod interleave;

use interleave::Stats;

/// One side of a comparison.
type Variant<'a> = interleave::Variant<'a, PoolError>;

/// Times the variants interleaved (see `benches/common/interleave.rs`) and logs each
/// figure under `what` for the JSON detail. `ops` is the number of operations one
/// iteration does.
fn measure(
    what: &str,
    variants: &mut [Variant<'_>],
    ops: u64,
    timing: &Timing,
) -> Result<Vec<Stats>, PoolError> {
    let stats = interleave::measure(variants, ops, timing.batches, timing.batch_ns)?;
    let mut log = timing.log.borrow_mut();
    for (v, s) in variants.iter().zip(&stats) {
        log.push((format!("{what} / {}", v.name), *s));
    }
    Ok(stats)
}

/// Builds the raw-baseline variant for the sequence `S` (generic: no dispatch in the
/// timed loop).
struct RawVariant {
    addr: *mut u8,
    len: usize,
}

impl WithRaw for RawVariant {
    type Out = Variant<'static>;

    fn call<S: RawSeq>(self) -> Variant<'static> {
        let RawVariant { addr, len } = self;
        let mut v = 0u64;
        Variant {
            name: S::NAME.to_owned(),
            run: Box::new(move |n| {
                for _ in 0..n {
                    v = v.wrapping_add(1);
                    // SAFETY: `addr..addr+len` is an 8-aligned range of the work pool,
                    // which outlives every variant (they are dropped first), and no
                    // reference to it is live; `S` is the sequence `raw_for` chose for
                    // pmem-core's own instruction.
                    unsafe { common::dirty_and_persist::<S>(addr, len, v) };
                }
                Ok(())
            }),
        }
    }
}

/// The three persist variants for one case.
fn persist_variants<'a>(
    wp: &'a WorkPool,
    case: &PersistCase,
) -> Result<Vec<Variant<'a>>, PoolError> {
    let pool = &wp.pool;
    let off = wp.offset(case);
    let addr = wp.addr(case)?;
    let len = case.len;
    let mut v1 = 0u64;
    let mut v2 = 0u64;
    Ok(vec![
        Variant {
            name: "Pool::persist".to_owned(),
            run: Box::new(move |n| {
                for _ in 0..n {
                    v1 = v1.wrapping_add(1);
                    // SAFETY: as in RawVariant.
                    unsafe { common::dirty(addr, len as usize, v1) };
                    pool.persist(black_box(off), black_box(len))?;
                }
                Ok(())
            }),
        },
        Variant {
            name: "flush::persist_raw".to_owned(),
            run: Box::new(move |n| {
                for _ in 0..n {
                    v2 = v2.wrapping_add(1);
                    // SAFETY: as in RawVariant.
                    unsafe { common::dirty(addr, len as usize, v2) };
                    // SAFETY: the range lies inside the mapped pool.
                    unsafe {
                        flush::persist_raw(black_box(addr).cast_const(), black_box(len as usize))
                    };
                }
                Ok(())
            }),
        },
        common::raw_for(
            flush::kind(),
            RawVariant {
                addr,
                len: len as usize,
            },
        ),
    ])
}

/// Results of one persist case.
struct PersistResult {
    case: PersistCase,
    pool: Stats,
    prim: Stats,
    raw: Stats,
    pool_counts: Counters,
    prim_counts: Counters,
}

impl PersistResult {
    fn ratio(&self) -> f64 {
        self.pool.median / self.raw.median
    }
}

/// Counters accumulated by one call of each pmem-core persist path on `case`.
fn persist_counts(wp: &WorkPool, case: &PersistCase) -> Result<(Counters, Counters), PoolError> {
    let off = wp.offset(case);
    let addr = wp.addr(case)?;
    let len = case.len;
    let (r, pool_counts) = Counters::measure(|| wp.pool.persist(off, len));
    r?;
    // SAFETY: the range lies inside the mapped pool.
    let ((), prim_counts) = Counters::measure(|| unsafe { flush::persist_raw(addr, len as usize) });
    Ok((pool_counts, prim_counts))
}

/// Results of the dereference comparisons (ns per dereference).
struct DerefResult {
    pool: Stats,
    raw: Stats,
    pool_chase: Stats,
    raw_chase: Stats,
}

fn measure_deref(wp: &mut WorkPool, timing: &Timing) -> Result<DerefResult, PoolError> {
    let set = common::DerefSet::build(wp)?;
    let pool = &wp.pool;
    let (pptrs, raws) = (&set.pptrs[..], &set.raws[..]);
    let mut reads = vec![
        Variant {
            name: "Pool::get".to_owned(),
            run: Box::new(move |n| {
                for _ in 0..n {
                    black_box(common::sum_pool(pool, black_box(pptrs))?);
                }
                Ok(())
            }),
        },
        Variant {
            name: "raw *const u64".to_owned(),
            run: Box::new(move |n| {
                for _ in 0..n {
                    // SAFETY: every pointer addresses an aligned u64 of the mapped pool.
                    black_box(unsafe { common::sum_raw(black_box(raws)) });
                }
                Ok(())
            }),
        },
    ];
    let r = measure(
        "deref u64 (indep)",
        &mut reads,
        DEREFS_PER_CALL as u64,
        timing,
    )?;
    drop(reads);

    let mut off = set.chase_off;
    let mut p = set.chase_raw;
    let mut chase = vec![
        Variant {
            name: "Pool::get chase".to_owned(),
            run: Box::new(move |n| {
                for _ in 0..n {
                    off = common::chase_pool(pool, black_box(off))?;
                }
                Ok(())
            }),
        },
        Variant {
            name: "raw chase".to_owned(),
            run: Box::new(move |n| {
                for _ in 0..n {
                    // SAFETY: `p` always points into the raw cycle of the mapped pool.
                    p = unsafe { common::chase_raw(black_box(p)) };
                }
                Ok(())
            }),
        },
    ];
    let c = measure(
        "deref u64 (chase)",
        &mut chase,
        DEREFS_PER_CALL as u64,
        timing,
    )?;
    Ok(DerefResult {
        pool: r[0],
        raw: r[1],
        pool_chase: c[0],
        raw_chase: c[1],
    })
}

fn measure_open(cfg: &Config, timing: &Timing) -> Result<Stats, PoolError> {
    let big = common::create_big_pool(&cfg.dir)?;
    let path = big.path().to_path_buf();
    let mut v = vec![Variant {
        name: "Pool::open + drop".to_owned(),
        run: Box::new(move |n| {
            for _ in 0..n {
                common::open_close(&path)?;
            }
            Ok(())
        }),
    }];
    let s = measure("open 1 GiB pool", &mut v, 1, timing)?;
    drop(v);
    drop(big);
    Ok(s[0])
}

fn fmt_stats(s: &Stats) -> String {
    format!("{:>9.2}  [{:>8.2} .. {:>8.2}]", s.median, s.q1, s.q3)
}

/// The first three fields of `/proc/loadavg` (Linux), if readable.
fn loadavg() -> Option<String> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn run(cfg: &Config) -> Result<(), Box<dyn Error>> {
    let timing = if cfg.quick {
        Timing {
            batches: 11,
            batch_ns: 200_000,
            log: RefCell::default(),
        }
    } else {
        Timing {
            batches: 31,
            batch_ns: 2_000_000,
            log: RefCell::default(),
        }
    };
    for dir in [&cfg.dir, &cfg.durable_dir] {
        if !dir.is_dir() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
    }
    let kind = flush::kind();
    let raw_name = common::raw_name(kind);
    let cpu = flush::cpu_support();

    let mut wp = WorkPool::create(&cfg.dir)
        .map_err(|e| format!("creating a pool in {}: {e}", cfg.dir.display()))?;
    let mode = wp.pool.mode();
    let source = wp.pool.mode_source();
    let durable = wp.pool.is_durable();

    // Everything is measured before the tables print: a step per measurement.
    let section = progress::Section::new("persist_cost", PERSIST_CASES.len() as u64 + 3);
    let mut persists = Vec::new();
    for case in PERSIST_CASES {
        section.step(format!("persist {}", case.label));
        let (pool_counts, prim_counts) = persist_counts(&wp, &case)?;
        let mut vars = persist_variants(&wp, &case)?;
        let s = measure(&format!("persist {}", case.label), &mut vars, 1, &timing)?;
        persists.push(PersistResult {
            case,
            pool: s[0],
            prim: s[1],
            raw: s[2],
            pool_counts,
            prim_counts,
        });
    }
    section.step("dereference");
    let deref = measure_deref(&mut wp, &timing)?;
    drop(wp);
    section.step("open a 1 GiB pool");
    let open = measure_open(cfg, &timing)?;
    // Drains take hundreds of microseconds: rounds of whole seconds, not batches.
    let (rounds, each) = if cfg.quick {
        (1, std::time::Duration::from_millis(60))
    } else {
        (3, std::time::Duration::from_secs(1))
    };
    section.step("durable drains");
    let dur = durable::measure(&cfg.durable_dir, rounds, each)
        .map_err(|e| format!("durable section in {}: {e}", cfg.durable_dir.display()))?;
    drop(section);

    // ---- the table ----
    println!("pmem-core: persist and dereference cost");
    println!(
        "flush instruction : {kind} (CPU offers clwb={}, clflushopt={}, clflush={})",
        cpu.clwb, cpu.clflushopt, cpu.clflush
    );
    println!(
        "pools             : in {}, mode {mode}, source {source:?}: {}{}",
        cfg.dir.display(),
        source.describe(),
        if durable {
            ""
        } else {
            " (timings show the instruction cost only)"
        }
    );
    println!(
        "raw peer          : {raw_name} (inline asm, one flush per 64 B line{})",
        if kind.needs_fence() { " + sfence" } else { "" }
    );
    let load = loadavg();
    println!(
        "load average      : {} (other processes on this machine perturb the figures)",
        load.as_deref().unwrap_or("unknown")
    );
    println!(
        "timing            : median of {} interleaved batches per variant{}; [q1 .. q3] across batches",
        timing.batches,
        if cfg.quick { " (--quick)" } else { "" }
    );
    println!();
    println!(
        "{:<21} {:<20} {:>9}  {:^22}  {:>7}  {:>6} {:>6}",
        "operation", "variant", "ns/op", "[q1 .. q3]", "vs raw", "lines", "fences"
    );
    for r in &persists {
        let what = format!("persist {}", r.case.label);
        let lines = flush::lines_spanned(r.case.rel as usize, r.case.len as usize);
        let rows: [(&str, &Stats, Option<Counters>); 3] = [
            ("Pool::persist", &r.pool, Some(r.pool_counts)),
            ("flush::persist_raw", &r.prim, Some(r.prim_counts)),
            (raw_name, &r.raw, None),
        ];
        for (i, (name, s, c)) in rows.iter().enumerate() {
            let (l, f) = match c {
                Some(c) => (c.lines_flushed.to_string(), c.fences.to_string()),
                // The raw loop is not counted by pmem-core: show what it issues.
                None => (
                    format!("{lines}*"),
                    format!("{}*", u8::from(kind.needs_fence())),
                ),
            };
            println!(
                "{:<21} {:<20} {}  {:>6.3}x  {:>6} {:>6}",
                if i == 0 { what.as_str() } else { "" },
                name,
                fmt_stats(s),
                s.median / r.raw.median,
                l,
                f
            );
        }
    }
    let d_over = deref.pool.median - deref.raw.median;
    let c_over = deref.pool_chase.median - deref.raw_chase.median;
    println!(
        "{:<21} {:<20} {}  {:>+6.2}ns",
        "deref u64 (indep)",
        "Pool::get",
        fmt_stats(&deref.pool),
        d_over
    );
    println!(
        "{:<21} {:<20} {}",
        "",
        "raw *const u64",
        fmt_stats(&deref.raw)
    );
    println!(
        "{:<21} {:<20} {}  {:>+6.2}ns",
        "deref u64 (chase)",
        "Pool::get",
        fmt_stats(&deref.pool_chase),
        c_over
    );
    println!(
        "{:<21} {:<20} {}",
        "",
        "raw *const u64",
        fmt_stats(&deref.raw_chase)
    );
    println!(
        "{:<21} {:<20} {}   (= {:.1} us)",
        "open 1 GiB pool",
        "Pool::open + drop",
        fmt_stats(&open),
        open.median / 1000.0
    );
    println!("(* issued by the raw loop, not counted by pmem-core's counters)");
    println!();
    println!(
        "durable section: pool file in {} (mode {}), flush one line + drain per op, median of {} rounds",
        dur.dir.display(),
        dur.mode,
        rounds
    );
    println!(
        "{:<28} {:>12} {:>12} {:>16}",
        "variant", "drain us", "drains/s", "dev flush/drain"
    );
    for (k, f) in dur.rows() {
        println!(
            "{:<28} {:>12.1} {:>12.0} {:>16.3}",
            k, f.drain_us, f.drains_per_sec, f.device_flushes_per_drain
        );
    }
    println!();

    // ---- targets (computed, not asserted) ----
    let worst = persists
        .iter()
        .filter(|r| r.case.label != "64B_straddle")
        .map(PersistResult::ratio)
        .fold(0.0f64, f64::max);
    let persist_met = worst <= PERSIST_TARGET_RATIO;
    let deref_met = d_over <= DEREF_TARGET_NS;
    let ratios: Vec<String> = persists
        .iter()
        .map(|r| format!("{} {:.3}", r.case.label, r.ratio()))
        .collect();
    println!(
        "target: Pool::persist within 10% of {raw_name} (8B, 64B, 4KiB): {} (ratios {})",
        if persist_met { "met" } else { "NOT met" },
        ratios.join(", ")
    );
    println!(
        "target: Pool::get within 1 ns of a raw pointer: {} (independent reads {:+.2} ns, dependent chase {:+.2} ns)",
        if deref_met { "met" } else { "NOT met" },
        d_over,
        c_over
    );

    let (d1, d8) = (dur.get("t1"), dur.get("t8"));
    let speedup = d8.drains_per_sec / d1.drains_per_sec.max(f64::MIN_POSITIVE);
    let speedup_met = speedup >= DURABLE_T8_SPEEDUP;
    let flushes_met = d8.device_flushes_per_drain <= DURABLE_T8_FLUSHES_PER_DRAIN;
    println!(
        "target: durable drains/s with 8 threads >= 4x 1 thread: {} ({:.0} vs {:.0}: {:.2}x)",
        if speedup_met { "met" } else { "NOT met" },
        d8.drains_per_sec,
        d1.drains_per_sec,
        speedup
    );
    println!(
        "target: durable device flushes per drain with 8 threads <= 0.3: {} ({:.3})",
        if flushes_met { "met" } else { "NOT met" },
        d8.device_flushes_per_drain
    );

    if cfg.json {
        let mut m = Map::new();
        m.insert("durable".into(), dur.json());
        for r in &persists {
            let k = r.case.key;
            m.insert(format!("persist_{k}_ns"), json!(round3(r.pool.median)));
            m.insert(
                format!("persist_raw_fn_{k}_ns"),
                json!(round3(r.prim.median)),
            );
            m.insert(
                format!("raw_clwb_sfence_{k}_ns"),
                json!(round3(r.raw.median)),
            );
            m.insert(format!("persist_{k}_ratio"), json!(round3(r.ratio())));
            m.insert(
                format!("persist_{k}_lines"),
                json!(r.pool_counts.lines_flushed),
            );
            m.insert(format!("persist_{k}_fences"), json!(r.pool_counts.fences));
        }
        m.insert("deref_ns".into(), json!(round3(deref.pool.median)));
        m.insert("raw_deref_ns".into(), json!(round3(deref.raw.median)));
        m.insert("deref_overhead_ns".into(), json!(round3(d_over)));
        m.insert(
            "deref_chase_ns".into(),
            json!(round3(deref.pool_chase.median)),
        );
        m.insert(
            "raw_deref_chase_ns".into(),
            json!(round3(deref.raw_chase.median)),
        );
        m.insert("deref_chase_overhead_ns".into(), json!(round3(c_over)));
        m.insert("open_1gib_ms".into(), json!(open.median.round() / 1e6));
        m.insert("flush_instruction".into(), json!(kind.name()));
        m.insert("raw_peer".into(), json!(raw_name));
        m.insert("pool_mode".into(), json!(mode.name()));
        m.insert("pool_mode_source".into(), json!(format!("{source:?}")));
        // `durable` is the durable section's object: this flag (are the first part's
        // forced-DAX pools durable?) is `pool_durable`.
        m.insert("pool_durable".into(), json!(durable));
        m.insert("batches".into(), json!(timing.batches));
        let detail: Map<String, Value> = timing
            .log
            .borrow()
            .iter()
            .map(|(k, s)| {
                (
                    k.clone(),
                    json!({
                        "median": round3(s.median),
                        "q1": round3(s.q1),
                        "q3": round3(s.q3),
                        "min": round3(s.min),
                        "max": round3(s.max),
                        "iters_per_batch": s.per_batch,
                    }),
                )
            })
            .collect();
        m.insert("detail_ns".into(), Value::Object(detail));
        m.insert("quick".into(), json!(cfg.quick));
        m.insert("loadavg".into(), json!(load));
        m.insert(
            "met_targets".into(),
            json!({
                "persist_within_10pct": persist_met,
                "deref_within_1ns": deref_met,
                "durable_drains_per_sec_t8_ge_4x_t1": speedup_met,
                "durable_device_flushes_per_drain_t8_le_0_3": flushes_met,
            }),
        );
        println!("{}", Value::Object(m));
    }
    Ok(())
}

fn main() {
    let cfg = Config::parse();
    if let Err(e) = run(&cfg) {
        eprintln!("persist_cost: error: {e}");
        std::process::exit(1);
    }
}
