//! Transaction throughput of the concurrent hash map (the [`super::hash`] table
//! the 4-thread run of [`super::concurrent`] uses) on 1 and 2 client threads,
//! without the collector: what threads gain now that their transactions run at
//! once (each on its own log lane, disjoint buckets locked per object) instead of
//! one at a time behind a heap lock. The same total of operations either way:
//! each thread inserts its share of fresh keys (key mod 4 = its index), then
//! deletes them, one transaction each.
//!
//! Beside it, the machine's own scaling: two threads each running the whole
//! one-thread workload on a heap of its own (nothing shared, not even a cache
//! line of the heap), which is the most two threads of it can gain here.

use std::path::Path;
use std::time::Instant;

use super::{run_op, setup, Ds, Op};

/// Operations (inserts and deletes, all threads together) per run.
pub fn total_ops(quick: bool) -> u64 {
    if quick {
        40_000
    } else {
        400_000
    }
}

/// Whether the clients share one heap or each has its own.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Heaps {
    /// One heap for every client (the figure the issue names).
    Shared,
    /// A heap per client, each running the whole one-thread workload: the
    /// machine's scaling with nothing shared.
    Apart,
}

/// Transactions per second of `threads` clients on one heap or on heaps of
/// their own.
pub fn tx_ops_per_sec(dir: &Path, threads: u64, total: u64, heaps: Heaps) -> Result<f64, String> {
    let keys = total / 2;
    let w = setup(Ds::Lru, keys);
    let count = if heaps == Heaps::Shared { 1 } else { threads };
    let mut made = Vec::new();
    for h in 0..count {
        let (heap, file) = super::pmkit_heap(dir, &format!("mt-t{threads}-h{h}"), keys, false)?;
        // The directory (top, middle and leaf levels) made beforehand by one
        // thread, so the timed runs measure bucket operations, not the first
        // inserts' conflicts on the shared top levels.
        for b in 0..4096u64 {
            let key = (b << 2) | 3;
            run_op(&heap, w, Op::HashInsert { key, tag: 1 })?;
            run_op(&heap, w, Op::HashDelete { key })?;
        }
        made.push((heap, file));
    }
    // Apart, each thread runs the whole one-thread workload on its own heap
    // (two copies of it at once, each heap as full as the one-thread run's).
    let per = match heaps {
        Heaps::Shared => keys / threads,
        Heaps::Apart => keys,
    };
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let clients: Vec<_> = (0..threads)
            .map(|id| {
                let heap = &made[(id % count) as usize].0;
                s.spawn(move || -> Result<(), String> {
                    let key = |i: u64| ((i + 4096) << 2) | id;
                    for i in 0..per {
                        run_op(
                            heap,
                            w,
                            Op::HashInsert {
                                key: key(i),
                                tag: i as u8,
                            },
                        )?;
                    }
                    for i in 0..per {
                        run_op(heap, w, Op::HashDelete { key: key(i) })?;
                    }
                    Ok(())
                })
            })
            .collect();
        clients
            .into_iter()
            .try_for_each(|c| c.join().map_err(|_| "a client panicked".to_string())?)
    })?;
    let secs = t0.elapsed().as_secs_f64();
    for (heap, _) in &made {
        heap.verify().map_err(|e| format!("mt: verify: {e}"))?;
        let left = heap.stats().map_err(|e| e.to_string())?.live_objects;
        // The directory nodes only (1 top, 16 middles, 256 leaves).
        if left != 1 + 16 + 256 {
            return Err(format!("mt: {left} objects left after deleting every key"));
        }
    }
    Ok((2 * per * threads) as f64 / secs)
}
