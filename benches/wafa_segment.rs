//! The maximum-free-segment computation of WAFA, three ways, on the same random
//! page bitmaps: pmem-kit's word bit tricks (`wafa::segment::max_segment`), the
//! paper's 64 K-entry table of 16-bit slices (implemented here as the peer), and a
//! unit-by-unit scan.
//!
//! ```text
//! cargo bench --bench wafa_segment
//! ```

use std::hint::black_box;
use std::sync::OnceLock;

use criterion::{criterion_main, Criterion};
use wafa::segment::{max_segment, max_segment_scan};

/// Per 16-bit slice of *free* bits: free run at the low end, at the high end, the
/// longest run inside and where it starts. Packed: prefix | suffix << 5 | max << 10 | pos << 15.
fn table() -> &'static [u32] {
    static T: OnceLock<Vec<u32>> = OnceLock::new();
    T.get_or_init(|| {
        (0u32..65536)
            .map(|free| {
                let prefix = (!free & 0xffff).trailing_zeros().min(16);
                let suffix = ((!free & 0xffff) << 16).leading_zeros().min(16);
                let (mut best, mut pos, mut run, mut start) = (0, 0, 0, 0);
                for b in 0..16 {
                    if free & (1 << b) != 0 {
                        if run == 0 {
                            start = b;
                        }
                        run += 1;
                        if run > best {
                            best = run;
                            pos = start;
                        }
                    } else {
                        run = 0;
                    }
                }
                prefix | suffix << 5 | best << 10 | pos << 15
            })
            .collect()
    })
}

/// The paper's approach: four table lookups, carrying a run across slice borders.
fn max_segment_table(bitmap: u64, from: u32) -> (u32, u32) {
    let t = table();
    let free_all = !bitmap & ((1u64 << 63) - 1) & (u64::MAX << from.min(63));
    let (mut best, mut best_pos) = (0u32, from);
    let (mut carry, mut carry_start) = (0u32, 0u32);
    for s in 0..4u32 {
        let slice = ((free_all >> (16 * s)) & 0xffff) as usize;
        let e = t[slice];
        let (prefix, suffix, max, pos) = (e & 31, (e >> 5) & 31, (e >> 10) & 31, (e >> 15) & 15);
        if prefix == 16 {
            if carry == 0 {
                carry_start = 16 * s;
            }
            carry += 16;
            continue;
        }
        let joined = carry + prefix;
        if joined > best {
            best = joined;
            best_pos = if carry > 0 { carry_start } else { 16 * s };
        }
        if max > best {
            best = max;
            best_pos = 16 * s + pos;
        }
        carry = suffix;
        carry_start = 16 * (s + 1) - suffix;
    }
    if carry > best {
        best = carry;
        best_pos = carry_start;
    }
    (best, best_pos)
}

fn bitmaps() -> Vec<(u64, u32)> {
    let mut rng = pmem_core::SplitMix64::new(0x9e37_79b9_7f4a_7c15);
    (0..1024)
        .map(|i| {
            let x = rng.next_u64();
            // Mix dense and sparse pages: AND/OR with a second draw.
            let y = x.rotate_left(17);
            let b = match i % 3 {
                0 => x & y,
                1 => x | y,
                _ => x,
            };
            (b | (1 << 63), (x % 63) as u32)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let inputs = bitmaps();
    for &(b, f) in &inputs {
        assert_eq!(
            max_segment_table(b, f).0,
            max_segment(b, f).0,
            "table peer disagrees on {b:#x} from {f}"
        );
        assert_eq!(max_segment(b, f), max_segment_scan(b, f));
    }
    let mut g = c.benchmark_group("wafa_max_segment");
    g.bench_function("bit_tricks", |bch| {
        bch.iter(|| {
            inputs
                .iter()
                .map(|&(b, f)| max_segment(black_box(b), black_box(f)).0)
                .sum::<u32>()
        })
    });
    g.bench_function("slice_table_paper", |bch| {
        bch.iter(|| {
            inputs
                .iter()
                .map(|&(b, f)| max_segment_table(black_box(b), black_box(f)).0)
                .sum::<u32>()
        })
    });
    g.bench_function("scan", |bch| {
        bch.iter(|| {
            inputs
                .iter()
                .map(|&(b, f)| max_segment_scan(black_box(b), black_box(f)).0)
                .sum::<u32>()
        })
    });
    g.finish();
}

/// The criterion group (a macro-generated function, documented here).
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(group::benches);
