//! AMF — adaptive memory fusion (seed `amf-adaptive-memory-fusion.txt`): the
//! capacity side of dual-use PM.
//!
//! AMF (§3.2, §4) boots on DRAM alone and keeps the PM hidden: detectable, but not
//! yet managed, so the DRAM holds no page descriptors for it. A daemon (the paper's
//! kpmemd, sitting in front of kswapd) watches memory pressure against the kernel's
//! watermarks and integrates PM in sections when free memory runs low, in the
//! amounts of Table 2 ("relaxed PM allocation", §4.3.1); when the pressure is gone
//! it gives back sections no one uses, but only when the DRAM their descriptors
//! take passes a threshold — 3 % of DRAM — so that memory does not thrash in and
//! out ("lazy PM reclamation", §4.3.2). Regions of PM can also be mapped straight
//! into a program ("direct PM pass-through", §4.3.3). The paper does this in the
//! kernel; here it is to be a user-space heap over PM sections.
//!
//! # What is here
//!
//! * [`pressure`]: where pressure readings come from — [`ZoneInfo`]
//!   (`/proc/zoneinfo`, the kernel's own watermarks, so Table 2 applies literally),
//!   [`MemInfo`] (`/proc/meminfo` with watermarks derived from
//!   `vm.min_free_kbytes`), [`Cgroup`] (v2 or v1 memory limits, with PSI on v2), and
//!   [`Scripted`] traces for tests — behind the [`PressureSource`] trait.
//! * [`policy`]: the decision core, pure — Table 2 as [`level`] and
//!   [`target_bytes`] in the paper's scale (watermarks × 1024) or ours (the same
//!   boundaries as fractions of DRAM, for machines smaller than the paper's), and
//!   one daemon round as [`decide`]: integrate up to the target, or reclaim fully
//!   free sections past the threshold, never both.
//! * [`section`] (Linux only, as everything below): the section space — a PM file
//!   (DAX when there is one, otherwise tmpfs or disk, reported as emulated) cut
//!   into sections of [`SECTION_BYTES`] inside one `PROT_NONE` reservation.
//!   [`SectionSpace`] keeps a section hidden (no mapping, no metadata but a state
//!   byte) until [`integrate`](SectionSpace::integrate) maps it, and
//!   [`reclaim`](SectionSpace::reclaim) unmaps it and punches its hole; it reports
//!   its real metadata beside the paper's page-descriptor cost
//!   ([`paper_descriptor_bytes`]).
//! * [`heap`]: [`FusionHeap`], the volatile heap over the space — DRAM (the system
//!   allocator) while there is no pressure, integrated sections under pressure,
//!   frees routed by address; each integrated section gets its allocator metadata
//!   ([`carve::SectionCarver`]) when it is integrated and loses it when it is
//!   reclaimed. Allocation and free take one section's lock, found without a
//!   scan (a thread's home section, a bitmap of integrated sections, address
//!   arithmetic for frees), never a heap-wide one; `cells` and `home` hold
//!   those parts, the heap's module docs say why reclaim stays safe beside them. Rounds of the policy run from the daemon, from the allocation
//!   path when DRAM grows, or by hand; [`FusionMode::Unified`] is the paper's
//!   baseline (everything integrated at start).
//! * [`FusionAlloc`]: a `GlobalAlloc` over the heap (`#[global_allocator]`), with
//!   the reentrancy guard that keeps the heap's own allocations off it.
//! * [`Daemon`]: the kpmemd analog, a thread running a round per period, and at
//!   each memory-stall event of a kernel PSI trigger ([`PsiTrigger`]) when asked.
//! * [`PassThrough`]: direct PM pass-through (§4.3.3), hidden sections mapped
//!   straight into the program, outside the heap.
//!
//! # What is emulated, and what is not the paper's
//!
//! Without persistent memory the section file is on tmpfs (the "PM" is DRAM: the
//! mechanism runs, no memory is relieved) or on disk (the page cache stands in for
//! PM, and its write-back relieves memory the way real PM capacity would); every
//! report says which ([`Backing::emulated`]). The paper works in the kernel, with
//! page descriptors and `ZONE_NORMAL`; this is a user-space heap, so the
//! "metadata" it saves is its own per-section allocator metadata, reported beside
//! the paper's 56 B per page, and memory it does not manage (other heaps, the
//! kernel) is only seen through the pressure readings.
//!
//! ```
//! use nvwa::fusion::{decide, FusionState, Level, PolicyConfig, Pressure, PressureSource, Scripted};
//!
//! const GIB: u64 = 1 << 30;
//! // 64 GiB of DRAM, 1 GiB free: below 1/4 of DRAM, above `high`.
//! let sample = Pressure {
//!     free_bytes: GIB,
//!     min: 16 << 20,
//!     low: 20 << 20,
//!     high: 24 << 20,
//!     total: 64 * GIB,
//!     psi_some_avg10: None,
//!     source: "scripted",
//! };
//! let mut source = Scripted::new(vec![sample]);
//! let p = source.sample()?;
//! let state = FusionState { hidden: 4096, ..FusionState::new(64 * GIB) };
//! let d = decide(&state, &p, &PolicyConfig::default());
//! assert_eq!(d.level, Level::Severe);
//! assert_eq!(d.integrate, 3 * 64 * 8); // DRAM × 3 in sections of 128 MiB
//! assert!(d.reclaim.is_empty());
//! # Ok::<(), nvwa::fusion::PressureError>(())
//! ```

#[cfg(target_os = "linux")]
pub mod carve;
#[cfg(target_os = "linux")]
mod cells;
#[cfg(target_os = "linux")]
mod daemon;
#[cfg(target_os = "linux")]
mod global;
#[cfg(target_os = "linux")]
pub mod heap;
#[cfg(target_os = "linux")]
mod home;
#[cfg(target_os = "linux")]
mod passthrough;
pub mod policy;
pub mod pressure;
#[cfg(target_os = "linux")]
pub mod section;

#[cfg(target_os = "linux")]
pub use daemon::{Daemon, DEFAULT_PERIOD};
#[cfg(target_os = "linux")]
pub use global::{is_internal, mark_thread_internal, FusionAlloc};
#[cfg(target_os = "linux")]
pub use heap::{FusionConfig, FusionError, FusionHeap, FusionMode, FusionStats, RoundReport};
#[cfg(target_os = "linux")]
pub use passthrough::PassThrough;
pub use policy::{
    decide, level, target_bytes, Decision, FusionState, Level, PolicyConfig, Scale, SectionView,
    Thresholds,
};
pub use pressure::{
    limit_watermarks, Cgroup, CgroupVersion, FreeMeasure, MemInfo, Pressure, PressureError,
    PressureSource, Scripted, ZoneInfo,
};
#[cfg(target_os = "linux")]
pub use pressure::{PsiTrigger, PROC_PRESSURE_MEMORY};
#[cfg(target_os = "linux")]
pub use section::{
    paper_descriptor_bytes, Backing, BackingKind, HolePunch, Reclaimed, SectionError, SectionRange,
    SectionSpace, SectionState, SpaceReport, MIN_PAGE_BYTES, SECTION_BYTES,
};
