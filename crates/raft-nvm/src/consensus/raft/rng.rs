//! The injected random source: a seeded xorshift64* generator, so a node's election
//! timeouts are a pure function of its configuration and inputs.

/// A small deterministic pseudo-random generator (xorshift64*).
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value; zero is remapped).
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x2545_f491_4f6c_dd1d
        } else {
            seed
        })
    }

    /// The next value.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (`n > 0`).
    #[cfg(all(test, feature = "server"))]
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A value in `lo..=hi` (`lo <= hi`).
    pub(crate) fn range(&mut self, lo: u32, hi: u32) -> u32 {
        let span = u64::from(hi - lo) + 1;
        lo + (self.next_u64() % span) as u32
    }
}
