//! # nvwa — an NVM-write-aware allocator (NVWA) and contiguity-aware allocation
//!
//! The dual-use NVM allocator of the NVWA paper (seed
//! `nvwa-dual-use-nvm-allocator-logging.txt`, §4.1–4.2): the whole allocator lives in
//! DRAM — arenas (per-thread caches), size-class runs, slot bitmaps, an index from
//! object to its log record — and the media holds only an append-only allocation
//! log of one-word records (modules `record` and `log`), kept consistent by flushing: one
//! line flush per allocation (two when a run is announced by another thread's
//! transaction), one per free or in-place realloc.
//!
//! * [`Nvwa`] is the heap: it implements pmem-core's
//!   [`PersistentAllocator`](pmem_core::PersistentAllocator), including crash-atomic
//!   `alloc_publish` and the transactional operations, so `pmem_core::tx`, defrag
//!   and user structures can run on it.
//! * [`pages`] is its page source: just-in-time pages, or the paper's
//!   contiguity-aware batches (CAA-4, CAA-16) with two watermarks.
//! * [`NaiveHeap`] is the paper's comparison: the same classes, runs and pages,
//!   with jemalloc-style metadata on the media, every update undo-logged and
//!   flushed.
//!
//! * [`fusion`] is AMF, adaptive memory fusion (a separate paper): pressure
//!   sources, the Table 2 policy, a section space over a PM file (DAX, or tmpfs
//!   and disk files as emulated PM), a volatile heap that serves from DRAM until
//!   pressure and from integrated sections under it, a `GlobalAlloc` adapter, the
//!   daemon thread and pass-through mappings (Linux only).
//!
//! The hybrid logging of the paper's §4.3 is pmem-core's transaction log
//! (`pmem_core::tx`), which runs on [`Nvwa`] through `TxHeap::create_with`.
//!
//! ```
//! use std::sync::Arc;
//! use nvwa::{Nvwa, NvwaOptions};
//! use pmem_core::{PersistentAllocator, Pool, PoolOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = Arc::new(Pool::anonymous(&PoolOptions::new("nvwa-doc", 8 << 20))?);
//! // SAFETY: the pool's heap area is this heap's alone.
//! let heap = unsafe { Nvwa::format_heap(pool, &NvwaOptions::default())? };
//! let a = heap.alloc(64)?;
//! assert_eq!(heap.usable_size(a, 64), 64);
//! // SAFETY: `a` is not used again.
//! unsafe { heap.free(a, 64)? };
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod arena;
pub mod classes;
pub mod fusion;
#[doc(hidden)] // The fuzz targets' bodies: not an API promise.
pub mod fuzzing;
mod heap;
#[doc(hidden)] // On-media layout: public for the crash suites, not an API promise.
pub mod layout;
#[doc(hidden)] // On-media layout: public for the crash suites, not an API promise.
pub mod log;
pub mod naive;
pub mod pages;
#[doc(hidden)]
pub mod persist;
#[doc(hidden)] // On-media layout: public for the crash suites, not an API promise.
pub mod record;
#[doc(hidden)] // On-media layout: public for the crash suites, not an API promise.
pub mod recover;
mod run;
mod sync;

pub use heap::{FreeMode, Nvwa, NvwaOptions, NvwaStats, NvwaSummary};
pub use naive::NaiveHeap;
#[cfg(feature = "mutation")]
#[doc(hidden)]
pub use persist::set_mutant;
pub use persist::Site;

/// The crate README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
