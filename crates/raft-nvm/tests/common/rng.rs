//! The integration tests' random schedules and inputs draw from pmem-core's
//! [`SplitMix64`](pmem_core::SplitMix64), the workspace's one generator: the
//! whole-cluster simulation, the core's simulation and the transport's fuzzing
//! alike, so a seed means one sequence everywhere. Included by path
//! (`#[path = "common/rng.rs"] mod rng;`), apart from the store workloads in
//! `common/mod.rs`.

#![allow(dead_code)]

pub use pmem_core::SplitMix64 as Rng;

/// Mixed into the whole-cluster simulation's seeds, so its sequences differ from
/// the core simulation's, which seeds the generator's state directly.
const CLUSTER_SALT: u64 = 0x5eed_c1a5_7e12_0b0b;

/// The generator for `seed` of the whole-cluster simulation (and the suites seeded
/// the same way).
pub fn seeded(seed: u64) -> Rng {
    Rng::new(seed ^ CLUSTER_SALT)
}
