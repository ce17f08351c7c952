//! The one generator of the integration tests' random schedules and inputs
//! (splitmix64): the whole-cluster simulation, the core's simulation and the
//! transport's fuzzing all draw from it, so a seed means one sequence everywhere.
//! Included by path (`#[path = "common/rng.rs"] mod rng;`), apart from the store
//! workloads in `common/mod.rs`.

#![allow(dead_code)]

/// A small deterministic generator (splitmix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (the whole-cluster simulation's seeding).
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5eed_c1a5_7e12_0b0b)
    }

    /// A generator whose state is `state` as given (the core simulation's seeding).
    pub fn from_state(state: u64) -> Rng {
        Rng(state)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        pmem_core::splitmix64(&mut self.0)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `0..n` (`n > 0`), as an index.
    pub fn index(&mut self, n: usize) -> usize {
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

    /// One element of a non-empty slice.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}
