//! The pair figure: one 64-byte allocation followed by its free, in ns, for every
//! peer, timed in one interleaved measurement (`benches/common/interleave.rs`:
//! calibration, then batches in rotating order; a figure is the median over the
//! batches).
//!
//! * `nvwa_volatile`: NVWA (default options) on an anonymous pool (`Volatile`: its
//!   flushes and fences reach no instruction) — the allocator's compute;
//! * `nvwa_dax`, `naive_dax`, `wafa_dax`: on pool files in forced-DAX mode (the
//!   instructions of real PM, not durable on tmpfs);
//! * `pmdk`: `pmemobj_alloc` / `pmemobj_free` ([`crate::pmdk`]);
//! * `mimalloc`: `mi_malloc` / `mi_free` (DRAM);
//! * `raw_persist_pair`: the instructions NVWA's pair issues on the media, and
//!   nothing else — an 8-byte store, a flush of its line and a fence, twice (the
//!   allocation's record, then its exclude bit in the same line), with the flush
//!   instruction pmem-core picked, in inline assembly (`benches/common`), on a
//!   line of a forced-DAX pool.
//!
//! A peer that fails a short trial (the naive baseline before it is built, PMDK
//! when libpmemobj is absent) is left out with its error; the others still run.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use nvwa::{NaiveHeap, Nvwa, NvwaOptions};
use pmem_core::{DurabilityMode, ModeSource, PPtr, PersistentAllocator, Pool, PoolOptions};
use wafa::{Wafa, WafaOptions};

use crate::common::{self, RawSeq, WithRaw, WorkPool, PERSIST_CASES};
use crate::heaps::{DaxPool, LAYOUT};
use crate::interleave::{self, Stats, Variant};
use crate::pmdk::PmdkHeap;

/// Bytes per allocation.
pub const PAIR_BYTES: u64 = 64;
/// Bytes of each allocator's pool.
const POOL_BYTES: u64 = 64 << 20;
/// Pairs of the trial run that decides whether a peer takes part.
const TRIAL_PAIRS: u64 = 1000;

/// How long and how often to time.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Batches per variant (odd).
    pub batches: usize,
    /// Calibrate a batch to take at least this long.
    pub batch_ns: u128,
}

/// The pair figures.
pub struct PairResults {
    /// (name, statistics), in table order.
    pub rows: Vec<(String, Stats)>,
    /// Peers left out, with why.
    pub skipped: Vec<(String, String)>,
    /// The raw sequence's instruction name (`raw_clwb_sfence`, ...).
    pub raw_seq: &'static str,
    /// Mode and its source of the `nvwa_volatile` and `nvwa_dax` pools.
    pub volatile_mode: (DurabilityMode, ModeSource),
    /// See `volatile_mode`.
    pub dax_mode: (DurabilityMode, ModeSource),
    /// Whether the `nvwa_dax` pool is durable (forced DAX on tmpfs is not).
    pub dax_durable: bool,
}

impl PairResults {
    /// The median of `name`, if it ran.
    pub fn median(&self, name: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.median)
    }
}

/// The name of the raw row.
pub const RAW: &str = "raw_persist_pair";

/// The raw pair on `addr` (a line of a forced-DAX pool), generic over the
/// instruction sequence so nothing is dispatched inside the loop.
struct RawPair {
    addr: *mut u8,
}

impl WithRaw for RawPair {
    type Out = Variant<'static, String>;

    fn call<S: RawSeq>(self) -> Variant<'static, String> {
        let addr = self.addr;
        let mut v = 0u64;
        Variant {
            name: RAW.to_owned(),
            run: Box::new(move |n| {
                for _ in 0..n {
                    v = v.wrapping_add(1);
                    // SAFETY: `addr` is a line-aligned 64-byte range of the work
                    // pool's mapping, which outlives the variant, with no live
                    // reference; `S` is the sequence `raw_for` chose for pmem-core's
                    // own flush instruction.
                    unsafe {
                        common::dirty_and_persist::<S>(addr, 8, v);
                        common::dirty_and_persist::<S>(addr, 8, !v);
                    }
                }
                Ok(())
            }),
        }
    }
}

/// `alloc(PAIR_BYTES)` + `free` on `h`, as the variant `name` (also the durable
/// workload's).
pub fn allocator_pair<'a>(name: &'a str, h: &'a dyn PersistentAllocator) -> Variant<'a, String> {
    Variant::repeat(name, move || {
        let p = h
            .alloc(black_box(PAIR_BYTES))
            .map_err(|e| format!("{name}: {e}"))?;
        // SAFETY: `p` was just allocated with this size; nothing references it.
        unsafe { h.free(black_box(p), PAIR_BYTES) }.map_err(|e| format!("{name}: {e}"))
    })
}

/// The pair on WAFA, as the variant `name` (`wafa_dax`; `wafa_file` in the
/// durable workload).
pub fn wafa_pair<'a>(name: &'a str, w: &'a Wafa) -> Variant<'a, String> {
    Variant::repeat(name, move || {
        let p = w
            .alloc(black_box(PAIR_BYTES))
            .map_err(|e| format!("{name}: {e}"))?;
        // SAFETY: as in `allocator_pair`.
        unsafe { w.free(black_box(p), PAIR_BYTES) }.map_err(|e| format!("{name}: {e}"))
    })
}

fn mimalloc_pair() -> Result<(), String> {
    // SAFETY: mi_malloc has no preconditions; null is checked before free.
    let p = unsafe { libmimalloc_sys::mi_malloc(black_box(PAIR_BYTES as usize)) };
    if p.is_null() {
        return Err("mi_malloc failed".into());
    }
    // SAFETY: `p` came from mi_malloc and is freed once.
    unsafe { libmimalloc_sys::mi_free(black_box(p)) };
    Ok(())
}

/// Runs a short trial of `v`: `Err` if it fails.
fn trial(v: &mut Variant<'_, String>) -> Result<(), String> {
    (v.run)(TRIAL_PAIRS)
}

/// Measures every pair variant, interleaved. Pool files go to `dir` and are
/// removed on return; `pmdk` is the PMDK heap, or why it is absent.
pub fn measure(
    dir: &Path,
    timing: Timing,
    pmdk: Result<PmdkHeap, String>,
) -> Result<PairResults, String> {
    let volatile_pool = Pool::anonymous(&PoolOptions::new(LAYOUT, POOL_BYTES))
        .map_err(|e| format!("anonymous pool: {e}"))?;
    let volatile_mode = (volatile_pool.mode(), volatile_pool.mode_source());
    // SAFETY: the pool was just created; nothing else uses its heap area.
    let nvwa_volatile = unsafe { Nvwa::format_heap(Arc::new(volatile_pool), &defaults()) }
        .map_err(|e| format!("formatting nvwa (volatile): {e}"))?;
    let nvwa_pool = DaxPool::create(dir, "nvwa-pair", POOL_BYTES)?;
    let dax_mode = (nvwa_pool.pool.mode(), nvwa_pool.pool.mode_source());
    let dax_durable = nvwa_pool.pool.is_durable();
    // SAFETY: as above.
    let nvwa_dax = unsafe { Nvwa::format_heap(nvwa_pool.pool.clone(), &defaults()) }
        .map_err(|e| format!("formatting nvwa (dax): {e}"))?;
    let naive_pool = DaxPool::create(dir, "naive-pair", POOL_BYTES)?;
    // SAFETY: as above.
    let naive = unsafe { NaiveHeap::format_heap(naive_pool.pool.clone()) }
        .map_err(|e| format!("formatting naive: {e}"));
    let wafa_pool = DaxPool::create(dir, "wafa-pair", POOL_BYTES)?;
    // SAFETY: as above.
    let wafa = unsafe { Wafa::format(wafa_pool.pool.clone(), WafaOptions::default()) }
        .map_err(|e| format!("formatting WAFA: {e}"))?;
    let work = WorkPool::create(dir).map_err(|e| format!("work pool in {}: {e}", dir.display()))?;
    let line = work
        .addr(&PERSIST_CASES[1])
        .map_err(|e| format!("work pool line: {e}"))?;

    let mut skipped = Vec::new();
    let mut variants = vec![
        allocator_pair("nvwa_volatile", &nvwa_volatile),
        allocator_pair("nvwa_dax", &nvwa_dax),
    ];
    match &naive {
        Ok(h) => variants.push(allocator_pair("naive_dax", h)),
        Err(e) => skipped.push(("naive_dax".to_owned(), e.clone())),
    }
    variants.push(wafa_pair("wafa_dax", &wafa));
    match &pmdk {
        Ok(p) => variants.push(Variant::repeat("pmdk", move || p.pair(PAIR_BYTES as usize))),
        Err(e) => skipped.push(("pmdk".to_owned(), e.clone())),
    }
    variants.push(Variant::repeat("mimalloc", mimalloc_pair));
    let kind = pmem_core::flush::kind();
    variants.push(common::raw_for(kind, RawPair { addr: line }));

    let mut kept = Vec::new();
    for mut v in variants {
        match trial(&mut v) {
            Ok(()) => kept.push(v),
            Err(e) => skipped.push((v.name.clone(), e)),
        }
    }
    let stats = interleave::measure(&mut kept, 1, timing.batches, timing.batch_ns)?;
    let rows = kept.iter().map(|v| v.name.clone()).zip(stats).collect();
    Ok(PairResults {
        rows,
        skipped,
        raw_seq: common::raw_name(kind),
        volatile_mode,
        dax_mode,
        dax_durable,
    })
}

/// NVWA's default options (the pair heaps: what a user gets).
fn defaults() -> NvwaOptions {
    NvwaOptions::default()
}

/// A block of the pair size in `heap`, freed at once (used by the scaling run to
/// touch each arena before timing).
pub fn warm(heap: &Nvwa, arena: usize) -> Result<(), String> {
    let p: PPtr<u8> = heap
        .alloc_in_arena(arena, PAIR_BYTES)
        .map_err(|e| format!("nvwa alloc: {e}"))?;
    // SAFETY: just allocated with this size; nothing references it.
    unsafe { heap.free(p, PAIR_BYTES) }.map_err(|e| format!("nvwa free: {e}"))
}
