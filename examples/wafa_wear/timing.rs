//! The timing loop of the pair-cost figures (`alloc_free_pair_ns.*`), in the manner of
//! `examples/persist_cost.rs`: each variant is calibrated (doubling N until one batch
//! takes at least `batch_ns`, which also warms it up), then all variants are timed
//! batch by batch, interleaved, the order rotating every round, so drift hits them
//! alike. A figure is the median over the batches of ns per operation.

use std::time::Instant;

/// How long and how often to time.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Batches per variant (odd, so the median is one batch).
    pub batches: usize,
    /// Calibrate N so that one batch takes at least this long.
    pub batch_ns: u128,
}

impl Timing {
    /// The full run's timing (31 batches of >= 2 ms), or the quick one.
    pub fn new(quick: bool) -> Timing {
        if quick {
            Timing {
                batches: 11,
                batch_ns: 200_000,
            }
        } else {
            Timing {
                batches: 31,
                batch_ns: 2_000_000,
            }
        }
    }
}

/// Per-operation statistics over the batches of one variant, in ns.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// Median.
    pub median: f64,
    /// First quartile.
    pub q1: f64,
    /// Third quartile.
    pub q3: f64,
    /// Iterations per batch.
    pub per_batch: u64,
}

impl Stats {
    fn from_samples(mut v: Vec<f64>, per_batch: u64) -> Stats {
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
            per_batch,
        }
    }
}

/// Runs `n` iterations of one variant.
pub type BatchFn<'a> = Box<dyn FnMut(u64) -> Result<(), String> + 'a>;

/// One side of a comparison.
pub struct Variant<'a> {
    /// Name in the table and in JSON keys.
    pub name: &'static str,
    /// The timed loop.
    pub run: BatchFn<'a>,
}

impl<'a> Variant<'a> {
    /// A variant that runs `op` once per iteration (`op` is inlined into the loop).
    pub fn repeat(
        name: &'static str,
        mut op: impl FnMut() -> Result<(), String> + 'a,
    ) -> Variant<'a> {
        Variant {
            name,
            run: Box::new(move |n| {
                for _ in 0..n {
                    op()?;
                }
                Ok(())
            }),
        }
    }
}

fn time_batch(run: &mut BatchFn<'_>, n: u64) -> Result<u128, String> {
    let t = Instant::now();
    run(n)?;
    Ok(t.elapsed().as_nanos())
}

/// Calibrates, warms up and times the variants, interleaved batch by batch.
pub fn measure(variants: &mut [Variant<'_>], timing: &Timing) -> Result<Vec<Stats>, String> {
    let mut ns = Vec::with_capacity(variants.len());
    for v in variants.iter_mut() {
        // The faster of two timings decides, so one interrupted batch does not stop
        // the doubling early.
        let mut n = 1u64;
        while n < 1 << 30 {
            let t = time_batch(&mut v.run, n)?.min(time_batch(&mut v.run, n)?);
            if t >= timing.batch_ns {
                break;
            }
            n *= 2;
        }
        ns.push(n);
    }
    let k = variants.len();
    let mut samples = vec![Vec::with_capacity(timing.batches); k];
    for round in 0..timing.batches {
        for j in 0..k {
            let i = (round + j) % k;
            let t = time_batch(&mut variants[i].run, ns[i])?;
            samples[i].push(t as f64 / ns[i] as f64);
        }
    }
    Ok(samples
        .into_iter()
        .zip(ns)
        .map(|(s, n)| Stats::from_samples(s, n))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_pick_the_middle_batch() {
        let s = Stats::from_samples(vec![5.0, 1.0, 3.0, 2.0, 4.0], 7);
        assert_eq!((s.median, s.q1, s.q3, s.per_batch), (3.0, 2.0, 4.0, 7));
    }

    #[test]
    fn measure_runs_every_variant_and_reports_errors() {
        let t = Timing {
            batches: 3,
            batch_ns: 1_000,
        };
        let mut count = 0u64;
        let mut v = vec![Variant::repeat("count", || {
            count += 1;
            Ok(())
        })];
        let s = measure(&mut v, &t).expect("measure");
        assert_eq!(s.len(), 1);
        assert!(s[0].median >= 0.0);
        drop(v);
        assert!(count > 0);
        let mut bad = vec![Variant::repeat("bad", || Err("boom".to_owned()))];
        assert_eq!(measure(&mut bad, &t).err().as_deref(), Some("boom"));
    }
}
