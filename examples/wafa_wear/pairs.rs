//! The pair-cost figures: one `alloc(64)` followed by its `free`, timed for WAFA in
//! two modes and for the DRAM allocators, plus the raw persist of one line, all
//! interleaved in one [`measure`] call.
//!
//! * `wafa_volatile`: WAFA (default options: reform daemon) on an anonymous
//!   `Volatile` pool — the allocator's compute, no flush reaches an instruction.
//! * `wafa_dax`: WAFA (default options) on a pool file forced into `Dax` mode (in
//!   `/dev/shm` unless `--dir`): each allocation flushes its page's metadata line
//!   and fences, as on real PM. On tmpfs this is the instruction cost only, not PM
//!   latency, and nothing is durable; the output says so.
//! * `glibc`, `jemalloc`, `mimalloc`: `malloc(64)` + `free` through their C symbols.
//! * the raw peer: one volatile store to a line of a forced-`Dax` pool, then the
//!   flush instruction pmem-core picked (`clwb` here) and `sfence`, in inline
//!   assembly (`benches/common`), i.e. the least a durable allocation can cost on
//!   top of its bookkeeping. Targets: `wafa_volatile <= 2 x mimalloc`, and
//!   `wafa_dax <= 1.25 x (raw + mimalloc)`.

use std::hint::black_box;
use std::path::Path;

use pmem_core::{flush, DurabilityMode, ModeSource};
use wafa::{Wafa, WafaOptions};

use crate::common::{self, RawSeq, TempFile, WithRaw, WorkPool, PERSIST_CASES};
use crate::timing::{measure, Stats, Timing, Variant};
use crate::wafa_peer::{dax_wafa, volatile_wafa};

/// Bytes per allocation in the pair figures.
pub const PAIR_BYTES: usize = 64;

/// The pair figures of one run.
pub struct PairResults {
    /// (name, statistics) in table order: the five allocators, then the raw peer.
    pub rows: Vec<(String, Stats)>,
    /// Name of the raw peer (`raw_clwb`, ...).
    pub raw_name: &'static str,
    /// Mode of the `wafa_dax` pool.
    pub dax_mode: DurabilityMode,
    /// Where that mode came from.
    pub dax_source: ModeSource,
    /// Whether that pool is durable.
    pub dax_durable: bool,
}

impl PairResults {
    /// The median of `name`, if measured.
    pub fn median(&self, name: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.median)
    }
}

/// Builds the raw-peer variant for the sequence `S` (generic: no dispatch inside).
struct RawLine {
    addr: *mut u8,
}

impl WithRaw for RawLine {
    type Out = Variant<'static>;

    fn call<S: RawSeq>(self) -> Variant<'static> {
        let addr = self.addr;
        let mut v = 0u64;
        Variant {
            name: S::NAME.to_owned(),
            run: Box::new(move |n| {
                for _ in 0..n {
                    v = v.wrapping_add(1);
                    // SAFETY: `addr` is a line-aligned 64 B range of the work pool's
                    // mapping, which outlives the variant, with no live reference; `S`
                    // is the sequence `raw_for` chose for pmem-core's own instruction.
                    unsafe { common::dirty_and_persist::<S>(addr, PAIR_BYTES, v) };
                }
                Ok(())
            }),
        }
    }
}

fn wafa_pair<'a>(name: &'static str, w: &'a Wafa) -> Variant<'a> {
    Variant::repeat(name, move || {
        let p = w
            .alloc(black_box(PAIR_BYTES as u64))
            .map_err(|e| format!("{name}: {e}"))?;
        // SAFETY: `p` was just allocated with this size; nothing references it.
        unsafe { w.free(black_box(p), PAIR_BYTES as u64) }.map_err(|e| format!("{name}: {e}"))
    })
}

fn glibc_pair() -> Result<(), String> {
    // SAFETY: malloc has no preconditions; null is checked before free.
    let p = unsafe { libc::malloc(black_box(PAIR_BYTES)) };
    if p.is_null() {
        return Err("malloc failed".to_owned());
    }
    // SAFETY: `p` came from malloc and is freed once.
    unsafe { libc::free(black_box(p)) };
    Ok(())
}

fn jemalloc_pair() -> Result<(), String> {
    // SAFETY: as for glibc_pair, with jemalloc's prefixed symbols.
    let p = unsafe { tikv_jemalloc_sys::malloc(black_box(PAIR_BYTES)) };
    if p.is_null() {
        return Err("jemalloc malloc failed".to_owned());
    }
    // SAFETY: `p` came from jemalloc's malloc and is freed once.
    unsafe { tikv_jemalloc_sys::free(black_box(p)) };
    Ok(())
}

fn mimalloc_pair() -> Result<(), String> {
    // SAFETY: mi_malloc has no preconditions; null is checked before free.
    let p = unsafe { libmimalloc_sys::mi_malloc(black_box(PAIR_BYTES)) };
    if p.is_null() {
        return Err("mi_malloc failed".to_owned());
    }
    // SAFETY: `p` came from mi_malloc and is freed once.
    unsafe { libmimalloc_sys::mi_free(black_box(p)) };
    Ok(())
}

/// Measures every pair variant and the raw peer, interleaved. Pool files are
/// created in `dir` and removed on return.
pub fn measure_pairs(dir: &Path, timing: &Timing) -> Result<PairResults, String> {
    // Declaration order matters: the heaps and pools drop before their files.
    let dax_file = TempFile::new(common::unique_path(dir, "wafa-dax"));
    let work = WorkPool::create(dir).map_err(|e| format!("pool in {}: {e}", dir.display()))?;
    let volatile = volatile_wafa(WafaOptions::default())?;
    let dax = dax_wafa(dax_file.path(), WafaOptions::default())?;
    let line = work
        .addr(&PERSIST_CASES[1])
        .map_err(|e| format!("work pool line: {e}"))?;
    debug_assert_eq!(PERSIST_CASES[1].len, PAIR_BYTES as u64);

    let kind = flush::kind();
    let mut variants = vec![
        wafa_pair("wafa_volatile", &volatile),
        wafa_pair("wafa_dax", &dax),
        Variant::repeat("glibc", glibc_pair),
        Variant::repeat("jemalloc", jemalloc_pair),
        Variant::repeat("mimalloc", mimalloc_pair),
        common::raw_for(kind, RawLine { addr: line }),
    ];
    let stats = measure(&mut variants, timing)?;
    let rows = variants.iter().map(|v| v.name.clone()).zip(stats).collect();
    drop(variants);
    let pool = dax.pool();
    Ok(PairResults {
        rows,
        raw_name: common::raw_name(kind),
        dax_mode: pool.mode(),
        dax_source: pool.mode_source(),
        dax_durable: pool.is_durable(),
    })
}
