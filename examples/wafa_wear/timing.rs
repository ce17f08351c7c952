//! The timing loop of the pair-cost figures (`alloc_free_pair_ns.*`), in the manner of
//! `examples/persist_cost.rs`: each variant is calibrated (doubling N until one batch
//! takes at least `batch_ns`, which also warms it up), then all variants are timed
//! batch by batch, interleaved, the order rotating every round, so drift hits them
//! alike. A figure is the median over the batches of ns per operation.

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

// Shared with `persist_cost`, which also reports each variant's min and max.
#[allow(dead_code)]
#[path = "../../benches/common/interleave.rs"]
mod interleave;

pub use interleave::Stats;

/// One side of a comparison (errors are one-line strings here).
pub type Variant<'a> = interleave::Variant<'a, String>;

/// Calibrates, warms up and times the variants, interleaved batch by batch.
pub fn measure(variants: &mut [Variant<'_>], timing: &Timing) -> Result<Vec<Stats>, String> {
    interleave::measure(variants, 1, timing.batches, timing.batch_ns)
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
