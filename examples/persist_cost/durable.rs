//! The durable section of `persist_cost`: flush-and-drain on an ordinary file in
//! `Msync` mode (the mode most users run), where every drain ends in a device cache
//! flush.
//!
//! Each thread loops: write 8 bytes into each of its ranges through the pool's write
//! API (dirtying the page), flush the line, then drain; one iteration is one timed
//! drain. Threads use pages of their own. Variants, interleaved round by round so
//! disk noise hits them alike (the figure of a variant is its median over rounds):
//!
//! * `durable.*`: [`DrainPolicy::default`] (group commit), 1 thread and 8 threads;
//! * `durable.old.*`: [`DrainPolicy::serial`], the drain before group commit (what
//!   `PMKIT_GROUP_COMMIT=0` selects), opened with [`OpenOptions::drain`] on the same
//!   file in the same run;
//! * `durable.pieces.{msync,fdatasync}.*`: the two sync strategies
//!   ([`DrainSync`]), group commit on, 1 thread with 2 and 16 scattered ranges per
//!   drain (64 KiB apart) and 8 threads with one range each.
//!
//! Counters are per thread: device flushes per drain sum every thread's delta.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use pmem_core::{
    Counters, DrainPolicy, DrainSync, DurabilityMode, OpenOptions, Pool, PoolError, PoolOptions,
};
use serde_json::{json, Value};

use crate::common::{unique_path, TempFile};

const PAGE: u64 = 4096;
/// Distance between the scattered ranges of one drain (16 pages).
const SCATTER_STRIDE: u64 = 16 * PAGE;
/// Scattered ranges of the largest case.
const MAX_RANGES: u64 = 16;
/// Threads of the concurrent case.
pub const THREADS: usize = 8;
/// The pool: a header page plus room for 16 ranges 64 KiB apart.
const POOL_SIZE: u64 = 2 << 20;

/// What one variant measured in one round.
#[derive(Clone, Copy, Debug, Default)]
pub struct Figures {
    /// Median microseconds of one flush-and-drain (over every thread's samples).
    pub drain_us: f64,
    /// Drains completed per second, all threads together.
    pub drains_per_sec: f64,
    /// Device flushes (msync/fdatasync calls) per drain, summed over the threads.
    pub device_flushes_per_drain: f64,
}

/// A workload: how many threads, and ranges per drain.
#[derive(Clone, Copy, Debug)]
struct Load {
    threads: usize,
    ranges: u64,
}

/// One measured variant: a policy and a load, and its figures per round.
struct Variant {
    key: String,
    policy: DrainPolicy,
    load: Load,
    rounds: Vec<Figures>,
}

/// The durable section's results.
pub struct Durable {
    /// Where the pool file was.
    pub dir: PathBuf,
    /// The pool's mode (`msync` unless the environment forces DAX).
    pub mode: DurabilityMode,
    variants: Vec<Variant>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl Durable {
    /// The median over rounds of a variant's figures (zeros if it does not exist).
    pub fn get(&self, key: &str) -> Figures {
        let Some(v) = self.variants.iter().find(|v| v.key == key) else {
            return Figures::default();
        };
        let pick = |f: fn(&Figures) -> f64| median(v.rounds.iter().map(f).collect());
        Figures {
            drain_us: pick(|f| f.drain_us),
            drains_per_sec: pick(|f| f.drains_per_sec),
            device_flushes_per_drain: pick(|f| f.device_flushes_per_drain),
        }
    }

    /// Every variant's figures, for the table.
    pub fn rows(&self) -> Vec<(String, Figures)> {
        self.variants
            .iter()
            .map(|v| (v.key.clone(), self.get(&v.key)))
            .collect()
    }

    /// The JSON object `durable`: `drain_us.{t1,t8}`, `drains_per_sec.{t1,t8}`,
    /// `device_flushes_per_drain.{t1,t8}`, the same under `old`, and the piece
    /// strategies under `pieces.<name>`.
    pub fn json(&self) -> Value {
        let r = |x: f64| (x * 1000.0).round() / 1000.0;
        let group = |prefix: &str| {
            let (t1, t8) = (
                self.get(&format!("{prefix}t1")),
                self.get(&format!("{prefix}t8")),
            );
            json!({
                "drain_us": { "t1": r(t1.drain_us), "t8": r(t8.drain_us) },
                "drains_per_sec": { "t1": r(t1.drains_per_sec), "t8": r(t8.drains_per_sec) },
                "device_flushes_per_drain": {
                    "t1": r(t1.device_flushes_per_drain),
                    "t8": r(t8.device_flushes_per_drain),
                },
            })
        };
        let piece = |name: &str| {
            let f = |k: &str| self.get(&format!("pieces.{name}.{k}"));
            let (r2, r16, t8) = (f("t1_r2"), f("t1_r16"), f("t8"));
            json!({
                "drain_us": { "t1_r2": r(r2.drain_us), "t1_r16": r(r16.drain_us), "t8": r(t8.drain_us) },
                "drains_per_sec": { "t8": r(t8.drains_per_sec) },
                "device_flushes_per_drain": { "t8": r(t8.device_flushes_per_drain) },
            })
        };
        let mut m = match group("") {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        m.insert("old".into(), group("old."));
        m.insert(
            "pieces".into(),
            json!({ "msync": piece("msync"), "fdatasync": piece("fdatasync") }),
        );
        m.insert(
            "default_sync".into(),
            json!(DrainPolicy::default().sync.name()),
        );
        m.insert("dir".into(), json!(self.dir.display().to_string()));
        m.insert("mode".into(), json!(self.mode.name()));
        m.insert(
            "rounds".into(),
            json!(self.variants.first().map_or(0, |v| v.rounds.len())),
        );
        Value::Object(m)
    }
}

/// Measures the durable section in `dir`: `rounds` rounds of every variant, each
/// running for `each`.
pub fn measure(dir: &Path, rounds: usize, each: Duration) -> Result<Durable, PoolError> {
    let file = TempFile::new(unique_path(dir, "durable"));
    drop(Pool::create(
        file.path(),
        &PoolOptions::new(crate::common::LAYOUT, POOL_SIZE),
    )?);
    let one = Load {
        threads: 1,
        ranges: 1,
    };
    let eight = Load {
        threads: THREADS,
        ranges: 1,
    };
    let group = |sync| DrainPolicy {
        group_commit: true,
        sync,
    };
    let mut variants = Vec::new();
    let mut add = |key: &str, policy, load| {
        variants.push(Variant {
            key: key.to_owned(),
            policy,
            load,
            rounds: Vec::new(),
        });
    };
    add("t1", DrainPolicy::default(), one);
    add("t8", DrainPolicy::default(), eight);
    add("old.t1", DrainPolicy::serial(), one);
    add("old.t8", DrainPolicy::serial(), eight);
    for sync in [DrainSync::MsyncSpan, DrainSync::WriteThenFdatasync] {
        let n = sync.name();
        for ranges in [2, MAX_RANGES] {
            add(
                &format!("pieces.{n}.t1_r{ranges}"),
                group(sync),
                Load { threads: 1, ranges },
            );
        }
        add(&format!("pieces.{n}.t8"), group(sync), eight);
    }
    let mut mode = DurabilityMode::Msync;
    for _ in 0..rounds {
        for v in &mut variants {
            let pool = Arc::new(Pool::open_with(
                file.path(),
                &OpenOptions::new()
                    .layout(crate::common::LAYOUT)
                    .drain(v.policy),
            )?);
            mode = pool.mode();
            v.rounds.push(run(&pool, v.load, each)?);
            // Every thread has joined, so this is the last handle: close reports a
            // failed final drain, which a drop could only log.
            if let Ok(p) = Arc::try_unwrap(pool) {
                p.close()?;
            }
        }
    }
    Ok(Durable {
        dir: dir.to_path_buf(),
        mode,
        variants,
    })
}

/// Runs `load` on `pool` for `each`; every thread flushes and drains in a loop.
fn run(pool: &Arc<Pool>, load: Load, each: Duration) -> Result<Figures, PoolError> {
    let start_line = Arc::new(Barrier::new(load.threads));
    let handles: Vec<_> = (0..load.threads as u64)
        .map(|t| {
            let pool = Arc::clone(pool);
            let start_line = Arc::clone(&start_line);
            std::thread::spawn(move || -> Result<(Vec<f64>, u64, Instant), PoolError> {
                // Thread t's ranges: line 0 of page t + i * 16 pages, past the header.
                let base = pool.heap().start + t * PAGE;
                let offs: Vec<u64> = (0..load.ranges)
                    .map(|i| base + i * SCATTER_STRIDE)
                    .collect();
                let mut lat = Vec::new();
                start_line.wait();
                let t0 = Instant::now();
                let before = Counters::current();
                let mut v = 0u64;
                while t0.elapsed() < each || lat.is_empty() {
                    let s = Instant::now();
                    v += 1;
                    for &off in &offs {
                        // SAFETY: thread t alone writes its own pages (distinct for
                        // every thread), nothing reads them, and no reference to
                        // them exists.
                        unsafe { pool.write_bytes_shared(off, &v.to_le_bytes())? };
                        pool.flush(off, 64)?;
                    }
                    pool.drain()?;
                    lat.push(s.elapsed().as_secs_f64() * 1e6);
                }
                Ok((lat, Counters::since(before).device_flushes, t0))
            })
        })
        .collect();
    let mut lat = Vec::new();
    let mut flushes = 0;
    let mut first_start: Option<Instant> = None;
    for h in handles {
        // A panicking thread is a bug of this benchmark: pass its panic on.
        let (l, f, t0) = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        lat.extend(l);
        flushes += f;
        first_start = Some(first_start.map_or(t0, |s| s.min(t0)));
    }
    let elapsed = first_start.map_or(0.0, |s| s.elapsed().as_secs_f64());
    let drains = lat.len() as f64;
    Ok(Figures {
        drain_us: median(lat),
        drains_per_sec: if elapsed > 0.0 { drains / elapsed } else { 0.0 },
        device_flushes_per_drain: flushes as f64 / drains.max(1.0),
    })
}
