//! A set of disjoint byte ranges: what a transaction has already logged, and the
//! blocks it allocated. A sorted vector: transactions touch few ranges, and the
//! vector keeps its capacity from one transaction to the next (see `Scratch`).

/// Disjoint, non-adjacent half-open ranges `[start, end)`, sorted by start.
#[derive(Clone, Debug, Default)]
pub(crate) struct RangeSet {
    ranges: Vec<(u64, u64)>,
}

impl RangeSet {
    /// Empties the set, keeping its capacity.
    pub fn clear(&mut self) {
        self.ranges.clear();
    }

    /// Whether `[start, end)` lies entirely inside the set.
    pub fn covers(&self, start: u64, end: u64) -> bool {
        // The last range starting at or before `start` is the only candidate.
        let i = self.ranges.partition_point(|&(s, _)| s <= start);
        i > 0 && self.ranges[i - 1].1 >= end
    }

    /// Appends to `out` the parts of `[start, end)` not yet in the set, in address
    /// order.
    pub fn uncovered_into(&self, start: u64, end: u64, out: &mut Vec<(u64, u64)>) {
        let mut at = start;
        let mut i = self.ranges.partition_point(|&(s, _)| s <= start);
        // The range starting at or before `start` may cover its beginning.
        if i > 0 {
            at = at.max(self.ranges[i - 1].1);
        }
        while i < self.ranges.len() && self.ranges[i].0 < end {
            let (s, e) = self.ranges[i];
            if s > at {
                out.push((at, s.min(end)));
            }
            at = at.max(e);
            i += 1;
        }
        if at < end {
            out.push((at, end));
        }
    }

    /// The parts of `[start, end)` not yet in the set, in address order.
    #[cfg(test)]
    pub fn uncovered(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        self.uncovered_into(start, end, &mut out);
        out
    }

    /// Adds `[start, end)`, merging with overlapping or adjacent ranges.
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        // First range that could touch: the last one starting at or before `start`
        // if it reaches `start`, else the next one.
        let mut lo = self.ranges.partition_point(|&(s, _)| s <= start);
        if lo > 0 && self.ranges[lo - 1].1 >= start {
            lo -= 1;
        }
        // One past the last range starting at or before `end` (touching counts).
        let hi = self.ranges.partition_point(|&(s, _)| s <= end);
        if lo >= hi {
            self.ranges.insert(lo, (start, end));
            return;
        }
        let s = start.min(self.ranges[lo].0);
        let e = end.max(self.ranges[hi - 1].1);
        self.ranges[lo] = (s, e);
        self.ranges.drain(lo + 1..hi);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn matches_a_byte_model(ops in proptest::collection::vec((0u64..200, 1u64..40), 0..20), probe in (0u64..220, 0u64..60)) {
            let mut set = RangeSet::default();
            let mut bytes = [false; 300];
            for (s, l) in ops {
                set.insert(s, s + l);
                for b in &mut bytes[s as usize..(s + l) as usize] { *b = true; }
            }
            let (ps, pl) = probe;
            let unc = set.uncovered(ps, ps + pl);
            let mut want = Vec::new();
            let mut i = ps;
            while i < ps + pl {
                if !bytes[i as usize] {
                    let j = (i..ps + pl).find(|&j| bytes[j as usize]).unwrap_or(ps + pl);
                    want.push((i, j));
                    i = j;
                } else { i += 1; }
            }
            prop_assert_eq!(unc, want);
            let v = set.ranges.clone();
            for &(s, e) in &v { prop_assert_eq!(set.covers(s, e), true); }
            prop_assert_eq!(set.covers(ps, ps + pl.max(1)), (ps..ps + pl.max(1)).all(|b| bytes[b as usize]));
            for w in v.windows(2) { prop_assert!(w[0].1 < w[1].0); }
        }
    }
}
