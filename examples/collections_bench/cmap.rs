//! The concurrent map workload: `PConcurrentHashMap<u64, u64>` driven by 1 and by 2
//! threads sharing the handle by reference. Each thread owns a disjoint slice of
//! the keys and, in turn, inserts each of them, updates each, and removes each
//! (three operations per key, each its own transaction). A round's figure is all
//! threads' operations over the wall time from the common start to the last
//! thread's end; the rounds alternate the thread counts (so drift hits both) and
//! the figure is the median over rounds. The map is empty again after each round.

use std::sync::Barrier;
use std::time::Instant;

use pmem_collections::{PConcurrentHashMap, PHeap};

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
}

/// Runs the workload in a new forced-DAX heap in `dir`.
pub fn run_cmap(dir: &std::path::Path, n: u64, rounds: usize) -> Result<CmapRun, String> {
    let file = PoolFile::new(dir, "cmap");
    let (heap, _) = pmkit_heap(&file, map_pool_size(n, 8) * 2, false)?;
    let map: PConcurrentHashMap<u64, u64> = heap.root("cmap").map_err(err)?;
    let ks = keys(n, 0xc0c0);
    let (mut t1, mut t2) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let order: [usize; 2] = if r % 2 == 0 { [1, 2] } else { [2, 1] };
        for threads in order {
            let ops = round(&heap, &map, &ks, threads)?;
            if threads == 1 {
                t1.push(ops)
            } else {
                t2.push(ops)
            }
        }
    }
    Ok(CmapRun {
        keys: n,
        rounds,
        t1: median(t1),
        t2: median(t2),
    })
}

/// One round on `threads` threads: operations per second.
fn round(
    heap: &PHeap,
    map: &PConcurrentHashMap<u64, u64>,
    ks: &[u64],
    threads: usize,
) -> Result<f64, String> {
    let per = ks.len().div_ceil(threads);
    let start = Barrier::new(threads + 1);
    let (t0, results) = std::thread::scope(|s| {
        let handles: Vec<_> = ks
            .chunks(per)
            .map(|mine| {
                let start = &start;
                s.spawn(move || -> Result<(), String> {
                    start.wait();
                    work(heap, map, mine)
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
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    Ok(3.0 * ks.len() as f64 / t0.as_secs_f64())
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}
