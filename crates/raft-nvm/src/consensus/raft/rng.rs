//! The injected random source: pmem-core's seeded [`SplitMix64`](pmem_core::SplitMix64)
//! (the workspace's one generator), so a node's election timeouts are a pure function
//! of its configuration and inputs.

pub(crate) use pmem_core::SplitMix64 as Rng;

/// An election timeout in `lo..=hi` ticks (`lo <= hi`).
pub(crate) fn ticks_between(rng: &mut Rng, lo: u32, hi: u32) -> u32 {
    let ticks = rng.range(u64::from(lo), u64::from(hi));
    // Within lo..=hi, so it fits; `hi` is the bound if a caller broke `lo <= hi`.
    u32::try_from(ticks).unwrap_or(hi)
}
