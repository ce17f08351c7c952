//! A set of disjoint byte ranges: what a transaction has already logged.

use std::collections::BTreeMap;

/// Disjoint, non-adjacent half-open ranges `[start, end)`, keyed by start.
#[derive(Clone, Debug, Default)]
pub(crate) struct RangeSet {
    ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// The parts of `[start, end)` not yet in the set, in address order.
    pub fn uncovered(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = start;
        // The range starting at or before `start` may cover its beginning.
        if let Some((_, &e)) = self.ranges.range(..=start).next_back() {
            at = at.max(e);
        }
        for (&s, &e) in self.ranges.range(start..end) {
            if s > at {
                out.push((at, s.min(end)));
            }
            at = at.max(e);
        }
        if at < end {
            out.push((at, end));
        }
        out
    }

    /// Adds `[start, end)`, merging with overlapping or adjacent ranges.
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        if let Some((&ps, &pe)) = self.ranges.range(..=start).next_back() {
            if pe >= start {
                s = ps;
                e = e.max(pe);
            }
        }
        let inside: Vec<(u64, u64)> = self.ranges.range(s..=e).map(|(&a, &b)| (a, b)).collect();
        for (a, b) in inside {
            self.ranges.remove(&a);
            e = e.max(b);
        }
        self.ranges.insert(s, e);
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
            let v: Vec<(u64, u64)> = set.ranges.iter().map(|(&s, &e)| (s, e)).collect();
            for w in v.windows(2) { prop_assert!(w[0].1 < w[1].0); }
        }
    }
}
