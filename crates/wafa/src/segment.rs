//! The maximum free segment of a page's bitmap, with word bit tricks.
//!
//! Bit `i` of a page bitmap stands for unit `i` (set = allocated); unit 63 holds the
//! page metadata and is always set. A *segment* is a run of free units. The paper
//! finds the maximum segment with a 64 K-entry table of 16-bit slices; here it is a
//! constant number of word operations: with `y_k = AND_{i<k} (free >> i)`, bit `s` of
//! `y_k` is set iff units `s..s+k` are all free, and `y_{a+b} = y_a & (y_b >> a)`, so
//! the largest `k` with `y_k != 0` is found by a binary descent over `y_32, y_16, ...,
//! y_1` (five doublings, six probes). The lowest set bit of `y_k` is the first such
//! segment in clock order.

/// Units per page whose bits describe data (unit 63 is the metadata unit).
pub const DATA_UNITS: u32 = 63;
const DATA_MASK: u64 = (1u64 << DATA_UNITS) - 1;

/// The longest run of free units in `[from, 63)`: `(length, first unit)`; `(0, from)`
/// when there is none.
#[inline]
pub fn max_segment(bitmap: u64, from: u32) -> (u32, u32) {
    if from >= DATA_UNITS {
        return (0, DATA_UNITS);
    }
    let free = !bitmap & DATA_MASK & (u64::MAX << from);
    if free == 0 {
        return (0, from);
    }
    // y[j] = y_{2^j}: bit s set iff 2^j free units start at s.
    let mut y = [0u64; 6];
    y[0] = free;
    for j in 1..6 {
        y[j] = y[j - 1] & (y[j - 1] >> (1 << (j - 1)));
    }
    let mut k = 1u32;
    let mut cur = free;
    for j in (0..6).rev() {
        let step = 1u32 << j;
        if k + step > DATA_UNITS {
            continue;
        }
        let cand = cur & (y[j] >> k);
        if cand != 0 {
            cur = cand;
            k += step;
        }
    }
    (k, cur.trailing_zeros())
}

/// [`max_segment`] with a shortcut for the common case of an allocation at the
/// clock: when the free run starting exactly at `from` is at least as long as the
/// number of free units after it, that run is the maximum segment (and the first
/// of that length in clock order), found with one bit scan and one population
/// count. Otherwise it falls back to the full search. Same result as
/// [`max_segment`] for every input.
#[inline]
pub fn max_segment_at(bitmap: u64, from: u32) -> (u32, u32) {
    if from >= DATA_UNITS {
        return (0, DATA_UNITS);
    }
    let free = !bitmap & DATA_MASK & (u64::MAX << from);
    // `from < 63`, so the shifted word has bit 63 clear: `run <= 63 - from`.
    let run = (free >> from).trailing_ones();
    let after = free >> from >> run;
    if after.count_ones() <= run {
        return (run, from);
    }
    max_segment(bitmap, from)
}

/// Reference implementation by scanning, for tests and the benchmark.
pub fn max_segment_scan(bitmap: u64, from: u32) -> (u32, u32) {
    let mut best = (0u32, from.min(DATA_UNITS));
    let mut run_start = from;
    let mut run = 0u32;
    for u in from..DATA_UNITS {
        if bitmap & (1 << u) == 0 {
            if run == 0 {
                run_start = u;
            }
            run += 1;
            if run > best.0 {
                best = (run, run_start);
            }
        } else {
            run = 0;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn edge_cases() {
        let meta = 1u64 << 63;
        assert_eq!(max_segment(meta, 0), (63, 0));
        assert_eq!(max_segment(meta, 10), (53, 10));
        assert_eq!(max_segment(meta, 62), (1, 62));
        assert_eq!(max_segment(meta, 63), (0, 63));
        assert_eq!(max_segment(u64::MAX, 0), (0, 0));
        // Two runs of 3 (units 1..4 and 10..13): the first wins.
        let b = !((0b111u64 << 1) | (0b111u64 << 10));
        assert_eq!(max_segment(b, 0), (3, 1));
        assert_eq!(max_segment(b, 2), (3, 10));
        for (bm, from) in [
            (meta, 0),
            (meta, 62),
            (meta, 63),
            (u64::MAX, 5),
            (b, 0),
            (b, 2),
        ] {
            assert_eq!(max_segment_at(bm, from), max_segment(bm, from));
        }
    }

    proptest! {
        #[test]
        fn matches_the_scan(bitmap in any::<u64>(), from in 0u32..64) {
            let b = bitmap | (1 << 63);
            prop_assert_eq!(max_segment(b, from), max_segment_scan(b, from));
            prop_assert_eq!(max_segment_at(b, from), max_segment_scan(b, from));
        }

        #[test]
        fn shortcut_matches_on_clock_like_bitmaps(
            used in 0u32..63, tail in any::<u64>(), gap in 0u32..8, from in 0u32..64,
        ) {
            // Units below `used` allocated, a free stretch, then random bits: the
            // shapes the shortcut is for, on both of its branches.
            let b = (1 << 63) | crate::state::unit_mask_below(used)
                | ((tail << gap.min(62)) & !crate::state::unit_mask_below((used + gap).min(63)));
            prop_assert_eq!(max_segment_at(b, from), max_segment_scan(b, from));
        }
    }
}
