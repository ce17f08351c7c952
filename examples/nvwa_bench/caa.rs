//! Contiguity-aware allocation against just-in-time pages (the paper's Table 1):
//! four arenas allocate in strict round-robin (`Nvwa::alloc_in_arena`), so the
//! arenas take pages from the page source in turn, as co-running threads do. Each
//! arena takes `pages` pages. The page source counts a *contiguity miss* whenever
//! an arena's new run does not start right after that arena's previous one
//! (`PageStats::contiguity_misses`).
//!
//! Two object sizes: 4 KiB objects (each one a run of one page: one page request
//! per allocation — the headline figure) and 64-byte objects (a one-page run per
//! 64 allocations). The heap lives on an anonymous pool (misses are counted, not
//! timed) sized so the free share stays above the high watermark, where CAA is
//! active. Reduction = 100 × (1 − misses(CAA-N) / misses(JIT)).

use std::sync::Arc;

use nvwa::pages::PagePolicy;
use nvwa::{Nvwa, NvwaOptions};
use pmem_core::{Pool, PoolOptions};

use crate::heaps::{log_words, pool_bytes, LAYOUT};

/// Arenas interleaved.
pub const ARENAS: usize = 4;
/// The policies compared, in table order, with their JSON names.
pub const POLICIES: [(PagePolicy, &str); 3] = [
    (PagePolicy::Jit, "jit"),
    (PagePolicy::Caa { batch: 4 }, "caa4"),
    (PagePolicy::Caa { batch: 16 }, "caa16"),
];

/// One policy on one object size.
#[derive(Clone, Debug)]
pub struct PolicyRun {
    /// JSON name of the policy.
    pub policy: &'static str,
    /// Page requests served.
    pub takes: u64,
    /// Contiguity misses, all arenas.
    pub misses: u64,
    /// Per arena.
    pub misses_per_arena: Vec<u64>,
    /// Batches reserved.
    pub batches: u64,
}

/// The three policies on one object size.
#[derive(Clone, Debug)]
pub struct CaaRun {
    /// Bytes per object.
    pub object: u64,
    /// Allocations per arena.
    pub per_arena: u64,
    /// JIT, CAA-4, CAA-16.
    pub runs: Vec<PolicyRun>,
}

impl CaaRun {
    /// The miss reduction of policy `name` against JIT, in percent.
    pub fn reduction_pct(&self, name: &str) -> Option<f64> {
        let jit = self.runs.iter().find(|r| r.policy == "jit")?.misses;
        let caa = self.runs.iter().find(|r| r.policy == name)?.misses;
        (jit > 0).then(|| 100.0 * (1.0 - caa as f64 / jit as f64))
    }
}

fn one(
    policy: PagePolicy,
    name: &'static str,
    object: u64,
    per_arena: u64,
) -> Result<PolicyRun, String> {
    let objects = per_arena * ARENAS as u64;
    let pool = Pool::anonymous(&PoolOptions::new(LAYOUT, pool_bytes(objects, object)))
        .map_err(|e| format!("anonymous pool: {e}"))?;
    let opts = NvwaOptions {
        log_words: Some(log_words(objects)),
        arenas: ARENAS,
        policy,
        ..NvwaOptions::default()
    };
    // SAFETY: the pool was just created; nothing else uses its heap area.
    let heap = unsafe { Nvwa::format_heap(Arc::new(pool), &opts) }
        .map_err(|e| format!("formatting nvwa ({name}): {e}"))?;
    for _ in 0..per_arena {
        for a in 0..ARENAS {
            heap.alloc_in_arena(a, object)
                .map_err(|e| format!("nvwa ({name}) alloc({object}) in arena {a}: {e}"))?;
        }
    }
    let s = heap.stats().pages;
    Ok(PolicyRun {
        policy: name,
        takes: s.takes,
        misses: s.contiguity_misses,
        misses_per_arena: s.misses_per_arena,
        batches: s.batches,
    })
}

/// Runs the three policies with `pages` page requests per arena, for both object
/// sizes (4 KiB first).
pub fn measure(pages: u64) -> Result<Vec<CaaRun>, String> {
    let mut out = Vec::new();
    for (object, per_arena) in [(4096, pages), (64, pages * 64)] {
        let mut runs = Vec::new();
        for (policy, name) in POLICIES {
            runs.push(one(policy, name, object, per_arena)?);
        }
        out.push(CaaRun {
            object,
            per_arena,
            runs,
        });
    }
    Ok(out)
}
