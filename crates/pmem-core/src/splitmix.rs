//! SplitMix64 (Steele, Lea and Flood, 2014): the small seeded generator behind the
//! crash simulator's sampling of cuts, exported so that suites and examples which
//! must reproduce a sequence from a seed share one definition of it.
//!
//! [`splitmix64`] is the step function; [`SplitMix64`] wraps a state with the draws
//! a randomised suite or workload needs (a bound, a range, a chance, a pick, a
//! shuffle). It is the workspace's one generator: a seed names one sequence in every
//! crate, test and example. It is not cryptographic.

/// Advances `state` and returns the next 64 random bits.
///
/// ```
/// let mut state = 7;
/// let (a, b) = (pmem_core::splitmix64(&mut state), pmem_core::splitmix64(&mut state));
/// assert_ne!(a, b);
/// let mut again = 7;
/// assert_eq!(pmem_core::splitmix64(&mut again), a);
/// ```
#[inline]
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A seeded SplitMix64 generator: deterministic, small, not cryptographic.
///
/// ```
/// use pmem_core::SplitMix64;
/// let mut a = SplitMix64::new(42);
/// let mut b = SplitMix64::new(42);
/// assert_eq!(a.next_u64(), b.next_u64());
/// let die = a.range(1, 6);
/// assert!((1..=6).contains(&die));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose state is `state` (any value, zero included).
    pub const fn new(state: u64) -> SplitMix64 {
        SplitMix64 { state }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        splitmix64(&mut self.state)
    }

    /// A value in `0..n` (`n == 0` is read as 1, so the answer is 0). Reduced by
    /// modulo: the bias is below `n / 2^64`, and a seed keeps naming the sequences
    /// suites have recorded.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A value in `lo..=hi` (`lo <= hi`; otherwise `lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// An index in `0..n` (`n == 0` gives 0).
    pub fn index(&mut self, n: usize) -> usize {
        // usize fits u64 on every target we build, and the result is below n.
        self.below(n as u64) as usize
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }

    /// True with probability `percent / 100`.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One element of `items`.
    ///
    /// # Panics
    /// If `items` is empty.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.index(items.len())]
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.index(i + 1);
            items.swap(i, j);
        }
    }

    /// Fills `buf` with random bytes (eight per draw, little-endian).
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn the_struct_draws_the_step_functions_sequence() {
        let mut s = 9;
        let mut g = SplitMix64::new(9);
        for _ in 0..4 {
            assert_eq!(g.next_u64(), super::splitmix64(&mut s));
        }
    }

    #[test]
    fn draws_stay_in_their_bounds() {
        let mut g = SplitMix64::new(1);
        for _ in 0..1000 {
            assert!(g.below(7) < 7);
            assert!((3..=5).contains(&g.range(3, 5)));
            assert_eq!(g.below(0), 0);
            assert_eq!(g.range(4, 4), 4);
        }
        let mut v: Vec<u32> = (0..50).collect();
        g.shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_ne!(
            v, sorted,
            "50 elements left in order: the shuffle did nothing"
        );
        let mut buf = [0u8; 13];
        g.fill(&mut buf);
        assert!(buf.iter().any(|&b| b != 0));
    }

    /// The published first outputs for seed 0 (the reference implementation's).
    #[test]
    fn matches_the_reference_sequence() {
        let mut s = 0;
        let got: Vec<u64> = (0..3).map(|_| super::splitmix64(&mut s)).collect();
        assert_eq!(
            got,
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
    }
}
