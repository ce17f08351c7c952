//! SplitMix64 (Steele, Lea and Flood, 2014): the small seeded generator behind the
//! crash simulator's sampling of cuts, exported so that suites and examples which
//! must reproduce a sequence from a seed share one definition of it.

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

#[cfg(test)]
mod tests {
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
