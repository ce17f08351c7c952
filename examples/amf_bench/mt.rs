//! Allocation from sections on one and two threads: does the PM side scale?
//!
//! A heap over four 128 MiB sections on tmpfs is put under Critical pressure by
//! a scripted sample (three sections integrated, every block served from PM).
//! Each thread then runs the same loop on its own working set of
//! [`WORKING_SET`] blocks: pick a slot at random, free the block in it if there
//! is one, allocate a new block of 16 to 1024 B there and write its first and
//! last byte. An operation is one allocation (with the free before it, once the
//! set is full). `t1` is one thread running `ops` of them; `t2` two threads
//! running `ops` each at once, against the same heap; each figure is total
//! operations over wall time, the median of three alternated runs;
//! `pm_alloc_scaling_2t` = t2 / t1. Every allocation must come from PM (no DRAM,
//! no miss): the run fails otherwise, since it would measure the system
//! allocator instead.
//!
//! Beside them, each thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`): the
//! cores the two threads really got (`cores_2t`, CPU seconds over wall seconds),
//! and allocations per CPU second on one and two threads. On a machine that
//! other work shares, wall-clock scaling is capped by the cores left over; the
//! per-CPU-second figures show whether the threads slowed each other down
//! (contention) whatever the load.

use std::alloc::Layout;
use std::path::Path;
use std::time::Instant;

use crate::thread_cpu::thread_cpu_secs;
use nvwa::fusion::{FusionConfig, FusionHeap, Level, Pressure, SectionSpace, SECTION_BYTES};

/// Blocks each thread keeps live.
pub const WORKING_SET: usize = 4096;

/// What the part measured.
pub struct MtFigures {
    /// Allocations per second on one thread (median).
    pub t1: f64,
    /// Allocations per second on two threads together (median).
    pub t2: f64,
    /// Allocations per CPU second of the worker threads, one thread (median).
    pub t1_cpu: f64,
    /// Allocations per CPU second of the worker threads, two threads (median).
    pub t2_cpu: f64,
    /// CPU seconds over wall seconds of the two-thread runs (median): the cores
    /// the threads got.
    pub cores_2t: f64,
    /// Operations per thread per run.
    pub ops: u64,
    /// Runs of each.
    pub runs: usize,
    /// The backing, described.
    pub backing: String,
}

impl MtFigures {
    /// t2 / t1.
    pub fn scaling(&self) -> f64 {
        self.t2 / self.t1
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One thread's loop: `ops` allocations over its working set, then frees all.
/// Returns the thread's CPU seconds.
fn worker(heap: &FusionHeap, ops: u64, seed: u64) -> Result<f64, String> {
    let cpu = thread_cpu_secs();
    let mut held: Vec<Option<(*mut u8, Layout)>> = vec![None; WORKING_SET];
    let mut rng = pmem_core::SplitMix64::new(seed);
    for _ in 0..ops {
        // The same stream on every run.
        let x = rng.next_u64();
        let slot = (x as usize) % WORKING_SET;
        if let Some((p, l)) = held[slot].take() {
            // SAFETY: a live block of this heap with this layout, not used again.
            unsafe { heap.dealloc(p, l) };
        }
        let size = 16 + ((x >> 32) as usize % 1009);
        let layout = Layout::from_size_align(size, 8).map_err(|e| e.to_string())?;
        let p = heap.alloc(layout);
        if p.is_null() {
            return Err("an allocation failed".into());
        }
        // SAFETY: a fresh block of `size` bytes, ours alone.
        unsafe {
            p.write(x as u8);
            p.add(size - 1).write(x as u8);
        }
        held[slot] = Some((p, layout));
    }
    for (p, l) in held.into_iter().flatten() {
        // SAFETY: as above.
        unsafe { heap.dealloc(p, l) };
    }
    Ok(thread_cpu_secs() - cpu)
}

/// One timed run on `threads` threads: (allocations per wall second, per CPU
/// second, CPU seconds over wall seconds).
fn timed(heap: &FusionHeap, threads: usize, ops: u64) -> Result<(f64, f64, f64), String> {
    let t = Instant::now();
    let cpu: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| s.spawn(move || worker(heap, ops, 0x9e37_79b9_7f4a_7c15 ^ i as u64)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a worker panicked".to_string())?)
            .collect::<Result<Vec<f64>, String>>()
    })?;
    let wall = t.elapsed().as_secs_f64();
    let cpu: f64 = cpu.iter().sum();
    let total = (threads as u64 * ops) as f64;
    Ok((total / wall, total / cpu, cpu / wall))
}

/// Runs the part with sections in `dir`: `ops` allocations per thread per run,
/// `runs` alternated runs of each thread count.
pub fn run(dir: &Path, ops: u64, runs: usize) -> Result<MtFigures, String> {
    let path = dir.join(format!("amf_bench-mt-{}", std::process::id()));
    let space = SectionSpace::create(&path, 4, SECTION_BYTES)
        .map_err(|e| e.to_string())?
        .remove_on_drop();
    let heap = FusionHeap::new(space, None, FusionConfig::default()).map_err(|e| e.to_string())?;
    let r = heap.apply(&Pressure::scripted_at(Level::Critical, SECTION_BYTES));
    if !r.serving_pm {
        return Err("Critical pressure did not make the heap serve PM".into());
    }
    // A warm-up on two threads: the sections' pages are faulted in once, and
    // each thread finds its home section.
    timed(&heap, 2, ops / 4)?;
    let (mut t1, mut t2) = (Vec::new(), Vec::new());
    let (mut t1_cpu, mut t2_cpu, mut cores) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (wall, cpu, _) = timed(&heap, 1, ops)?;
        t1.push(wall);
        t1_cpu.push(cpu);
        let (wall, cpu, used) = timed(&heap, 2, ops)?;
        t2.push(wall);
        t2_cpu.push(cpu);
        cores.push(used);
    }
    let s = heap.stats();
    if s.dram_allocs != 0 || s.pm_misses != 0 || s.pm_live_blocks != 0 {
        return Err(format!(
            "not every block came from PM, or one was lost: {} DRAM, {} misses, {} live",
            s.dram_allocs, s.pm_misses, s.pm_live_blocks
        ));
    }
    Ok(MtFigures {
        t1: median(&mut t1),
        t2: median(&mut t2),
        t1_cpu: median(&mut t1_cpu),
        t2_cpu: median(&mut t2_cpu),
        cores_2t: median(&mut cores),
        ops,
        runs,
        backing: s.backing,
    })
}
