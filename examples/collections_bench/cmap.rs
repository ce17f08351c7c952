//! The concurrent map workload: `PConcurrentHashMap<u64, u64>` driven by 1 and by 2
//! threads sharing the handle by reference. Each thread owns a disjoint slice of
//! the keys and, in turn, inserts each of them, updates each, and removes each
//! (three operations per key, each its own transaction). A round's figure is all
//! threads' operations over the wall time from the common start to the last
//! thread's end; the rounds alternate the thread counts (so drift hits both) and
//! the figure is the median over rounds. The map is empty again after each round.
//!
//! Beside it, the CPU time the workers got over the wall time (`cpu_per_wall`, up
//! to the thread count): on a machine other processes load, two threads that got
//! one core between them cannot scale, and this figure says so. And the machine's
//! idle cores meanwhile (`/proc/stat`, Linux): two workers that got one core
//! between them while a core stood idle were serialized by the map (or the heap
//! under it), not by the machine.
//!
//! And two floors beside it, the same thread counts doing only what an undo
//! transaction must do at least: three ordered persists (a store, its flush and a
//! fence, three times) per operation, each thread on lines of its own. `floor`
//! persists the same three lines again and again (all in cache: the instructions'
//! cost alone); `floor_random` makes the second of the three a random line of a
//! 32 MiB region per thread, as a map's slot is (a log line, a slot line not in
//! cache, a state line): what memory adds. How far they scale on this machine
//! bounds what an undo-logged map can scale to.

use std::sync::Barrier;
use std::time::Instant;

use pmem_collections::{PConcurrentHashMap, PHeap};

use crate::thread_cpu::thread_cpu_secs;
use crate::workloads::{err, keys, map_pool_size, pmkit_heap, PoolFile, Val};

/// Operations per second on 1 and on 2 threads (medians over rounds).
pub struct CmapRun {
    /// Keys per round (all threads together).
    pub keys: u64,
    /// Rounds per thread count.
    pub rounds: usize,
    /// ops/s on one thread.
    pub t1: f64,
    /// ops/s on two threads.
    pub t2: f64,
    /// The workers' CPU time over the wall time, one thread.
    pub cpu1: f64,
    /// The same, two threads.
    pub cpu2: f64,
    /// The machine's idle cores during the two-thread rounds (`None`: no
    /// `/proc/stat`).
    pub idle2: Option<f64>,
    /// The floor's operations (three ordered persists each) per second on one and
    /// on two threads (medians over rounds).
    pub floor: (f64, f64),
    /// The same with the middle persist on a random line of a large region.
    pub floor_random: (f64, f64),
}

/// Runs the workload in a new forced-DAX heap in `dir`.
pub fn run_cmap(dir: &std::path::Path, n: u64, rounds: usize) -> Result<CmapRun, String> {
    let file = PoolFile::new(dir, "cmap");
    let (heap, _) = pmkit_heap(&file, map_pool_size(n, 8) * 2, false)?;
    let map: PConcurrentHashMap<u64, u64> = heap.root("cmap").map_err(err)?;
    let ks = keys(n, 0xc0c0);
    let (mut t1, mut t2, mut c1, mut c2) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut idle2 = Vec::new();
    let (mut f1, mut f2) = (Vec::new(), Vec::new());
    let (mut r1, mut r2) = (Vec::new(), Vec::new());
    let floor_pool = floor_pool(dir)?;
    for r in 0..rounds {
        let order: [usize; 2] = if r % 2 == 0 { [1, 2] } else { [2, 1] };
        for threads in order {
            let before = machine_jiffies();
            let (ops, cpu) = round(&heap, &map, &ks, threads)?;
            let idle = idle_cores(before, machine_jiffies());
            let floor = floor_round(&floor_pool.1, 3 * n, threads, false)?;
            let random = floor_round(&floor_pool.1, 3 * n, threads, true)?;
            if threads == 1 {
                f1.push(floor);
                r1.push(random);
            } else {
                f2.push(floor);
                r2.push(random);
            }
            if threads == 1 {
                t1.push(ops);
                c1.push(cpu);
            } else {
                t2.push(ops);
                c2.push(cpu);
                idle2.extend(idle);
            }
        }
    }
    Ok(CmapRun {
        keys: n,
        rounds,
        t1: median(t1),
        t2: median(t2),
        cpu1: median(c1),
        cpu2: median(c2),
        idle2: (!idle2.is_empty()).then(|| median(idle2)),
        floor: (median(f1), median(f2)),
        floor_random: (median(r1), median(r2)),
    })
}

/// Bytes of the floor's random region, per thread.
const FLOOR_REGION: u64 = 32 << 20;
/// The floor's pool: a page of hot lines per thread, then each thread's region.
const FLOOR_POOL: u64 = 3 * FLOOR_REGION;

/// A forced-DAX pool for the floor (its file removed on drop).
fn floor_pool(dir: &std::path::Path) -> Result<(PoolFile, pmem_core::Pool), String> {
    let file = PoolFile::new(dir, "floor");
    let pool = pmem_core::Pool::create(
        &file.0,
        &pmem_core::PoolOptions::new("pmkit-coll-floor", FLOOR_POOL)
            .mode(pmem_core::ModeRequest::ForceDax),
    )
    .map_err(|e| format!("{}: {e}", file.0.display()))?;
    Ok((file, pool))
}

/// `ops` operations of three ordered one-line persists, split between `threads`
/// threads each on a 4 KiB page of its own (with `random`, the middle one on a
/// random line of the thread's region): operations per second.
fn floor_round(
    pool: &pmem_core::Pool,
    ops: u64,
    threads: usize,
    random: bool,
) -> Result<f64, String> {
    let base = pool.heap().start;
    let regions = (base + 2 * 4096).div_ceil(4096) * 4096;
    let per = ops / threads as u64;
    let start = Barrier::new(threads + 1);
    let (t0, results) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let start = &start;
                s.spawn(move || -> Result<(), String> {
                    start.wait();
                    let mut x = t + 1;
                    for i in 0..per {
                        let r = pmem_core::splitmix64(&mut x);
                        for line in 0..3u64 {
                            let at = if random && line == 1 {
                                regions + t * FLOOR_REGION + (r % (FLOOR_REGION / 64)) * 64
                            } else {
                                base + t * 4096 + line * 64
                            };
                            // SAFETY: each thread writes only its own page.
                            unsafe { pool.write_bytes_shared(at, &i.to_le_bytes()) }
                                .map_err(|e| e.to_string())?;
                            pool.persist(at, 8).map_err(|e| e.to_string())?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let r: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a floor worker panicked".into()))
            })
            .collect();
        (t0.elapsed(), r)
    });
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    Ok((per * threads as u64) as f64 / t0.as_secs_f64())
}

/// One round on `threads` threads: operations per second, and the workers' CPU
/// time over the wall time.
pub fn round(
    heap: &PHeap,
    map: &PConcurrentHashMap<u64, u64>,
    ks: &[u64],
    threads: usize,
) -> Result<(f64, f64), String> {
    let per = ks.len().div_ceil(threads);
    let start = Barrier::new(threads + 1);
    let (t0, results) = std::thread::scope(|s| {
        let handles: Vec<_> = ks
            .chunks(per)
            .map(|mine| {
                let start = &start;
                s.spawn(move || -> Result<f64, String> {
                    start.wait();
                    let cpu = thread_cpu_secs();
                    work(heap, map, mine)?;
                    Ok(thread_cpu_secs() - cpu)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let r: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a worker panicked".into())))
            .collect();
        (t0.elapsed(), r)
    });
    let cpu: f64 = results.into_iter().sum::<Result<f64, String>>()?;
    let wall = t0.as_secs_f64();
    Ok((3.0 * ks.len() as f64 / wall, cpu / wall))
}

/// One thread's operations: insert, update, remove each of `mine`.
fn work(heap: &PHeap, map: &PConcurrentHashMap<u64, u64>, mine: &[u64]) -> Result<(), String> {
    for (i, k) in mine.iter().enumerate() {
        if map
            .insert(heap, k, &u64::make(i as u64))
            .map_err(err)?
            .is_some()
        {
            return Err(format!("cmap: key {k:#x} was present"));
        }
    }
    for (i, k) in mine.iter().enumerate() {
        if map
            .insert(heap, k, &u64::make(i as u64 + 1))
            .map_err(err)?
            .is_none()
        {
            return Err(format!("cmap: key {k:#x} lost before its update"));
        }
    }
    for (i, k) in mine.iter().enumerate() {
        if map.remove(heap, k).map_err(err)? != Some(u64::make(i as u64 + 1)) {
            return Err(format!("cmap: key {k:#x} lost its update"));
        }
    }
    Ok(())
}

/// The machine's idle and total CPU time so far, in clock ticks summed over its
/// cores (the first line of `/proc/stat`; `None` elsewhere).
fn machine_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal (guest time is in user).
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    let total = v.iter().take(8).sum();
    Some((idle, total))
}

/// Idle cores between two [`machine_jiffies`] readings.
fn idle_cores(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    let ((i0, t0), (i1, t1)) = (before?, after?);
    let cores = std::thread::available_parallelism().ok()?.get() as f64;
    let dt = t1.checked_sub(t0).filter(|&d| d > 0)?;
    Some(i1.saturating_sub(i0) as f64 / dt as f64 * cores)
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}
