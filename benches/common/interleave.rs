//! The interleaved timing loop shared by the examples that report medians
//! (`persist_cost`, `wafa_wear`): each variant is calibrated (doubling N until one
//! batch takes at least `batch_ns`, which also warms it up), then all variants are
//! timed batch by batch, interleaved, the order rotating every round, so drift on a
//! noisy machine hits every side of a comparison alike. A figure is the median over
//! the batches of ns per operation.
//!
//! For workloads whose operations change state (a map's inserts, then its gets),
//! [`chunked`] runs operations `0..n` once per variant instead, in chunks
//! interleaved the same way (`tx_bench`, `collections_bench`).

use std::time::Instant;

/// Per-operation statistics over the batches of one variant, in ns.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// Median.
    pub median: f64,
    /// First quartile.
    pub q1: f64,
    /// Third quartile.
    pub q3: f64,
    /// Fastest batch.
    pub min: f64,
    /// Slowest batch.
    pub max: f64,
    /// Iterations per batch.
    pub per_batch: u64,
}

impl Stats {
    /// Quartiles of `v` (ns per operation, one per batch).
    pub fn from_samples(mut v: Vec<f64>, per_batch: u64) -> Stats {
        v.sort_by(f64::total_cmp);
        let at = |q: f64| {
            v.get(((v.len().saturating_sub(1)) as f64 * q).round() as usize)
                .copied()
                .unwrap_or(f64::NAN)
        };
        Stats {
            median: at(0.5),
            q1: at(0.25),
            q3: at(0.75),
            min: at(0.0),
            max: at(1.0),
            per_batch,
        }
    }
}

/// Runs `n` iterations of one variant.
pub type BatchFn<'a, E> = Box<dyn FnMut(u64) -> Result<(), E> + 'a>;

/// One side of a comparison.
pub struct Variant<'a, E> {
    /// Name in tables and JSON keys.
    pub name: String,
    /// The timed loop.
    pub run: BatchFn<'a, E>,
}

impl<'a, E: 'a> Variant<'a, E> {
    /// A variant that runs `op` once per iteration (`op` is inlined into the loop).
    pub fn repeat(name: &str, mut op: impl FnMut() -> Result<(), E> + 'a) -> Variant<'a, E> {
        Variant {
            name: name.to_owned(),
            run: Box::new(move |n| {
                for _ in 0..n {
                    op()?;
                }
                Ok(())
            }),
        }
    }
}

fn time_batch<E>(run: &mut BatchFn<'_, E>, n: u64) -> Result<u128, E> {
    let t = Instant::now();
    run(n)?;
    Ok(t.elapsed().as_nanos())
}

/// Calibrates, warms up and times the variants, interleaved batch by batch.
/// `ops` is the number of operations one iteration does.
pub fn measure<E>(
    variants: &mut [Variant<'_, E>],
    ops: u64,
    batches: usize,
    batch_ns: u128,
) -> Result<Vec<Stats>, E> {
    let mut ns = Vec::with_capacity(variants.len());
    for v in variants.iter_mut() {
        // The faster of two timings decides, so one interrupted batch does not stop
        // the doubling early.
        let mut n = 1u64;
        while n < 1 << 30 {
            let t = time_batch(&mut v.run, n)?.min(time_batch(&mut v.run, n)?);
            if t >= batch_ns {
                break;
            }
            n *= 2;
        }
        ns.push(n);
    }
    let k = variants.len();
    let mut samples = vec![Vec::with_capacity(batches); k];
    for round in 0..batches {
        for j in 0..k {
            let i = (round + j) % k;
            let t = time_batch(&mut variants[i].run, ns[i])?;
            samples[i].push(t as f64 / (ns[i] * ops) as f64);
        }
    }
    Ok(samples
        .into_iter()
        .zip(ns)
        .map(|(s, n)| Stats::from_samples(s, n))
        .collect())
}

/// One side of a chunked comparison: runs operations `start..end`.
pub struct ChunkVariant<'a> {
    /// Name, for errors and tables.
    pub name: String,
    /// The operations of one chunk.
    pub run: Box<dyn FnMut(u64, u64) -> Result<(), String> + 'a>,
}

impl<'a> ChunkVariant<'a> {
    /// A variant running `op(i)` for each operation of a chunk.
    pub fn each(name: &str, mut op: impl FnMut(u64) -> Result<(), String> + 'a) -> Self {
        ChunkVariant {
            name: name.to_owned(),
            run: Box::new(move |start, end| (start..end).try_for_each(&mut op)),
        }
    }
}

/// Runs operations `0..n` on every variant in chunks of `chunk`, the variants
/// interleaved chunk by chunk (the order rotating), so drift on a shared machine
/// hits every side alike; returns per variant the statistics over chunks of ns per
/// operation.
pub fn chunked(
    variants: &mut [ChunkVariant<'_>],
    n: u64,
    chunk: u64,
) -> Result<Vec<Stats>, String> {
    let chunk = chunk.max(1);
    let k = variants.len();
    let mut samples = vec![Vec::new(); k];
    let mut start = 0;
    let mut round = 0;
    while start < n {
        let end = (start + chunk).min(n);
        for j in 0..k {
            let i = (round + j) % k;
            let v = &mut variants[i];
            let t = Instant::now();
            (v.run)(start, end).map_err(|e| format!("{}: {e}", v.name))?;
            samples[i].push(t.elapsed().as_nanos() as f64 / (end - start) as f64);
        }
        start = end;
        round += 1;
    }
    Ok(samples
        .into_iter()
        .map(|s| Stats::from_samples(s, chunk))
        .collect())
}

/// The median ns per operation of `op` over `0..n`, timed in ten chunks (a single
/// variant: the durable runs, where each side runs on its own).
pub fn median_ns(n: u64, op: impl FnMut(u64) -> Result<(), String>) -> Result<f64, String> {
    let stats = chunked(&mut [ChunkVariant::each("run", op)], n, (n / 10).max(1))?;
    Ok(stats[0].median)
}
