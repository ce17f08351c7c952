//! WAFA behind [`WearTarget`], and the pools of the study.
//!
//! Wear runs use a 32 MiB anonymous (`Volatile`) pool — wear depends on which units
//! are handed out, not on flushes — and by default `ReformMode::Inline { frees: 4096 }`:
//! the reform pass the default daemon runs after 64 frees, done synchronously at the
//! 64th free so the replay is deterministic (the daemon's timing would make every
//! run's placement differ). `--wafa-reform` picks another mode ([`parse_reform`]).
//!
//! A block's wear is counted from the pool offset `alloc` returns, exactly as for the
//! peers (unit = offset >> 6, page = offset >> 12; the heap is page aligned in the
//! pool). With the root feature `wafa-wear`, [`cross_check`] also compares those
//! counts with WAFA's own `Wafa::unit_counts`.

use std::path::Path;
use std::sync::Arc;

use pmem_core::{ModeRequest, PPtr, Pool, PoolOptions};
use wafa::{ReformMode, Wafa, WafaOptions};

use crate::workloads::WearTarget;

/// Size of the pools of the study (the simulated peers have as many pages).
pub const POOL_BYTES: u64 = 32 << 20;
/// Layout name of the pools.
const LAYOUT: &str = "wafa";

/// Reform mode of the wear runs unless `--wafa-reform` says otherwise: inline after
/// as many frees as the default daemon waits for.
pub const DEFAULT_WEAR_REFORM: ReformMode = ReformMode::Inline { frees: 4096 };

/// Parses `inline:N`, `daemon:N`, `daemon` (the default daemon) or `manual`.
pub fn parse_reform(s: &str) -> Result<ReformMode, String> {
    let frees = |n: &str| {
        n.parse::<u64>()
            .ok()
            .filter(|&f| f > 0)
            .ok_or_else(|| format!("--wafa-reform: {n:?} is not a positive number of frees"))
    };
    match s.split_once(':') {
        None if s == "manual" => Ok(ReformMode::Manual),
        None if s == "daemon" => Ok(ReformMode::Daemon { frees: 64 }),
        Some(("inline", n)) => Ok(ReformMode::Inline { frees: frees(n)? }),
        Some(("daemon", n)) => Ok(ReformMode::Daemon { frees: frees(n)? }),
        _ => Err(format!(
            "--wafa-reform: {s:?} is not inline:N, daemon[:N] or manual"
        )),
    }
}

/// A reform mode as `parse_reform` reads it.
pub fn reform_name(m: ReformMode) -> String {
    match m {
        ReformMode::Inline { frees } => format!("inline:{frees}"),
        ReformMode::Daemon { frees } => format!("daemon:{frees}"),
        ReformMode::Manual => "manual".to_owned(),
    }
}

/// A WAFA heap driven by the traces.
pub struct WafaTarget {
    /// The allocator.
    pub wafa: Wafa,
}

impl WafaTarget {
    /// A freshly formatted WAFA heap on a 32 MiB anonymous pool.
    pub fn new(reform: ReformMode) -> Result<WafaTarget, String> {
        Ok(WafaTarget {
            wafa: volatile_wafa(WafaOptions::default().reform(reform))?,
        })
    }
}

impl WearTarget for WafaTarget {
    fn name(&self) -> &'static str {
        "wafa"
    }

    fn alloc(&mut self, size: u32) -> Result<u64, String> {
        self.wafa
            .alloc(u64::from(size))
            .map(PPtr::offset)
            .map_err(|e| e.to_string())
    }

    unsafe fn free(&mut self, addr: u64, size: u32) -> Result<(), String> {
        // SAFETY: the replay holds no reference into the block (it never touches
        // the block's bytes).
        unsafe { self.wafa.free(PPtr::from_offset(addr), u64::from(size)) }
            .map_err(|e| e.to_string())
    }
}

/// A WAFA heap formatted on a fresh anonymous (`Volatile`) pool of [`POOL_BYTES`].
pub fn volatile_wafa(opts: WafaOptions) -> Result<Wafa, String> {
    let pool = Pool::anonymous(&PoolOptions::new(LAYOUT, POOL_BYTES))
        .map_err(|e| format!("anonymous pool: {e}"))?;
    // SAFETY: the pool was just created and nothing else uses its heap.
    unsafe { Wafa::format(Arc::new(pool), opts) }.map_err(|e| format!("formatting WAFA: {e}"))
}

/// A WAFA heap formatted on a pool file at `path` in forced `Dax` mode: every
/// allocation issues the `clwb`+`sfence` real PM would get (not durable on a
/// non-DAX file system; the caller reports the pool's mode).
pub fn dax_wafa(path: &Path, opts: WafaOptions) -> Result<Wafa, String> {
    let pool = Pool::create(
        path,
        &PoolOptions::new(LAYOUT, POOL_BYTES).mode(ModeRequest::ForceDax),
    )
    .map_err(|e| format!("creating {}: {e}", path.display()))?;
    // SAFETY: the pool was just created and nothing else uses its heap.
    unsafe { Wafa::format(Arc::new(pool), opts) }.map_err(|e| format!("formatting WAFA: {e}"))
}

/// Compares the offset-derived unit counts of a replay with WAFA's own counters:
/// `Ok(units compared)` when every unit agrees.
#[cfg(feature = "wafa-wear")]
pub fn cross_check(
    wafa: &Wafa,
    from_offsets: &std::collections::HashMap<u64, u64>,
) -> Result<usize, String> {
    use crate::workloads::UNIT_SHIFT;
    let counts = wafa.unit_counts();
    let per_page = wafa::wear::UNITS_PER_PAGE;
    let mut own = std::collections::HashMap::new();
    for (i, &c) in counts.iter().enumerate() {
        if c > 0 {
            let page = u32::try_from(i / per_page).map_err(|e| e.to_string())?;
            let off = wafa.page_offset(page) + ((i % per_page) as u64) * 64;
            own.insert(off >> UNIT_SHIFT, c);
        }
    }
    if &own != from_offsets {
        let differ = own
            .iter()
            .filter(|(u, c)| from_offsets.get(u) != Some(c))
            .count()
            + from_offsets.keys().filter(|u| !own.contains_key(u)).count();
        return Err(format!(
            "WAFA's unit_counts disagree with the returned offsets on {differ} units"
        ));
    }
    Ok(own.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::{replay, unit_counts, ycsb};

    #[test]
    fn wafa_replays_a_short_trace_and_returns_page_aligned_units() {
        let mut t = WafaTarget::new(DEFAULT_WEAR_REFORM).expect("wafa");
        let trace = ycsb(20_000, 11);
        let allocs = replay(&trace, &mut t).expect("replay");
        assert_eq!(allocs.len(), trace.allocs);
        // Small blocks never straddle a page and never use the metadata unit.
        for &(a, s) in &allocs {
            assert_eq!(a % 64, 0);
            assert_eq!(a >> 12, (a + u64::from(s) - 1) >> 12);
            assert_ne!((a >> 6) % 64, 63);
        }
        assert!(t.wafa.check_consistency().is_ok());
        assert_eq!(t.wafa.allocated_units(), (0, 0));
        #[cfg(feature = "wafa-wear")]
        {
            let n = cross_check(&t.wafa, &unit_counts(&allocs)).expect("cross-check");
            assert!(n > 0);
        }
        #[cfg(not(feature = "wafa-wear"))]
        assert!(!unit_counts(&allocs).is_empty());
    }

    #[test]
    fn reform_modes_parse_and_print_back() {
        for s in ["inline:64", "daemon:8", "manual"] {
            let m = parse_reform(s).expect("parse");
            assert_eq!(reform_name(m), s);
        }
        assert_eq!(
            parse_reform("daemon").expect("parse"),
            ReformMode::Daemon { frees: 64 }
        );
        for bad in ["inline", "inline:0", "inline:x", "sometimes", "manual:3"] {
            assert!(parse_reform(bad).is_err(), "{bad}");
        }
    }
}
