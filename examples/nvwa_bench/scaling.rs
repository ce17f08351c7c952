//! Pair throughput on one and two threads sharing one NVWA heap
//! (`pair_ops_per_sec_2t.nvwa_dax`): a forced-DAX heap with two arenas; thread `t`
//! allocates in arena `t` (`Nvwa::alloc_in_arena`, so the assignment does not
//! depend on which threads touched the heap before) and frees what it allocated.
//! A round starts every thread at a barrier and ends when the last one is done;
//! its figure is all the pairs over that wall time. Rounds of one and of two
//! threads alternate; a figure is the median over its rounds.

use std::path::Path;
use std::sync::Barrier;
use std::time::Instant;

use nvwa::{Nvwa, NvwaOptions};
use pmem_core::{PPtr, PersistentAllocator};

use crate::heaps::{DaxPool, LAYOUT};
use crate::pairs::{warm, PAIR_BYTES};

/// Pool bytes of the heap.
const POOL_BYTES: u64 = 64 << 20;

/// Pairs per second with one and with two threads.
#[derive(Clone, Copy, Debug)]
pub struct Scaling {
    /// One thread.
    pub one: f64,
    /// Two threads, both together.
    pub two: f64,
    /// Pairs per thread per round.
    pub pairs_per_thread: u64,
    /// Rounds of each.
    pub rounds: usize,
}

fn pairs(heap: &Nvwa, arena: usize, n: u64) -> Result<(), String> {
    for _ in 0..n {
        let p: PPtr<u8> = heap
            .alloc_in_arena(arena, PAIR_BYTES)
            .map_err(|e| format!("nvwa alloc: {e}"))?;
        // SAFETY: just allocated with this size by this thread; nothing references it.
        unsafe { heap.free(std::hint::black_box(p), PAIR_BYTES) }
            .map_err(|e| format!("nvwa free: {e}"))?;
    }
    Ok(())
}

/// One round of `threads` threads, `n` pairs each: pairs per second.
fn round(heap: &Nvwa, threads: usize, n: u64) -> Result<f64, String> {
    let start = Barrier::new(threads + 1);
    let elapsed = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    pairs(heap, t, n)
                })
            })
            .collect();
        start.wait();
        let clock = Instant::now();
        let mut result = Ok(());
        for h in handles {
            let r = h
                .join()
                .unwrap_or_else(|_| Err("a pair thread panicked".into()));
            if result.is_ok() {
                result = r;
            }
        }
        result.map(|()| clock.elapsed())
    })?;
    Ok((threads as u64 * n) as f64 / elapsed.as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Measures (see the module docs) on a heap in a pool file in `dir`.
pub fn measure(dir: &Path, pairs_per_thread: u64, rounds: usize) -> Result<Scaling, String> {
    let file = DaxPool::create(dir, "nvwa-2t", POOL_BYTES)?;
    let opts = NvwaOptions {
        arenas: 2,
        ..NvwaOptions::default()
    };
    // SAFETY: the pool was just created; nothing else uses its heap area.
    let heap = unsafe { Nvwa::format_heap(file.pool.clone(), &opts) }
        .map_err(|e| format!("formatting nvwa: {e}"))?;
    debug_assert_eq!(heap.pool().layout(), LAYOUT);
    warm(&heap, 0)?;
    warm(&heap, 1)?;
    // One warm-up round of each before the timed ones.
    round(&heap, 1, pairs_per_thread / 4)?;
    round(&heap, 2, pairs_per_thread / 4)?;
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        one.push(round(&heap, 1, pairs_per_thread)?);
        two.push(round(&heap, 2, pairs_per_thread)?);
    }
    Ok(Scaling {
        one: median(one),
        two: median(two),
        pairs_per_thread,
        rounds,
    })
}
