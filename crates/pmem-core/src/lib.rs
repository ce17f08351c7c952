//! # pmem-core — the persistence contract of pmkit
//!
//! Everything else in pmkit stands on this crate:
//!
//! * [`flush`]: cache-line flush and fence primitives, the instruction chosen once at
//!   run time (`clwb` > `clflushopt` > `clflush` on x86-64, a portable fallback
//!   elsewhere), with PMDK-style environment overrides.
//! * [`pool`]: file-backed pools mapped into memory, with a checksummed header, an
//!   exclusive lock, and an honest [`DurabilityMode`]: `Dax` (a `MAP_SYNC` mapping,
//!   where flushing cache lines reaches media), `Msync` (a page-cache file, where
//!   making a range durable means `msync`), or `Volatile` (no durability at all).
//!   The lock is an advisory `flock`: it stops other pmkit opens, not another
//!   program's plain `write(2)` to the file. File pools are mapped `MAP_SHARED`, so
//!   after `fork()` parent and child write the same file, share the lock (it belongs
//!   to the open file description) and must not both use the pool; see
//!   [`pool`](pool#fork-while-a-pool-is-open) for the exact rules.
//! * [`ptr`]: [`PPtr`], a typed pool-relative offset that survives remapping at a new
//!   address, and [`AtomicPPtr`], the unit of failure-atomic publication. Types that
//!   live in a pool are bounded by zerocopy's traits, so torn or garbage bytes after a
//!   crash can never be undefined behaviour.
//! * [`alloc`]: the [`PersistentAllocator`] trait shared by every allocator in the
//!   workspace, and [`PageAllocator`], a simple crash-safe page allocator.
//! * [`counters`]: per-thread counts of lines flushed, fences, msyncs and bytes
//!   written, cheap enough to leave on in release builds.
//! * `sim` (cargo feature `sim`): the crash simulator — simulated pools that record
//!   every persistence event, crash images after the x86 persistency model, a
//!   crash-test harness, lints and proptest strategies. Enable it in
//!   dev-dependencies; without it nothing of it is compiled.
//! * [`tx`]: crash-atomic transactions with the NVWA paper's hybrid (word/object)
//!   logging, undo or redo, lanes for concurrent transactions, and a pool-resident
//!   lock ([`tx::PMutex`]).
//! * [`splitmix`]: [`splitmix64`], the seeded generator the simulator samples cuts
//!   with, for suites and examples that must replay a sequence from a seed.
//!
//! ```no_run
//! use pmem_core::{Pool, PoolOptions, PPtr, RootType};
//! use zerocopy::{FromBytes, IntoBytes, KnownLayout, Immutable};
//!
//! #[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
//! #[repr(C)]
//! struct Root { counter: u64, next: PPtr<u64> }
//!
//! // A stable identity: renaming or moving `Root` keeps its pools usable.
//! impl RootType for Root {
//!     const ROOT_ID: &'static str = "counter/root";
//!     const LAYOUT_VERSION: u32 = 1;
//! }
//!
//! # fn main() -> Result<(), pmem_core::PoolError> {
//! let mut pool = Pool::create("counter.pool", &PoolOptions::new("counter", 1 << 20).root::<Root>())?;
//! let root = pool.root::<Root>()?;
//! pool.get_mut(root)?.counter += 1;
//! pool.persist_ptr(root)?; // durable iff pool.is_durable()
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(target_endian = "big")]
compile_error!("pmkit's on-media formats are little-endian; big-endian targets are not supported");

pub mod alloc;
pub mod counters;
pub mod error;
pub mod flush;
#[doc(hidden)]
pub mod fuzzing;
pub mod platform;
pub mod pool;
pub mod ptr;
#[cfg(feature = "sim")]
pub mod sim;
#[doc(hidden)] // A test utility (mutation switches): not an API promise.
pub mod site_switch;
pub mod splitmix;
#[doc(hidden)] // The loom/std shim of pmkit's crates: not an API promise.
pub mod sync;
pub mod tx;

pub use alloc::{AllocError, PageAllocStats, PageAllocator, PersistentAllocator};
pub use counters::Counters;
pub use error::PoolError;
pub use flush::FlushKind;
pub use platform::{Detected, Platform, PlatformError};
pub use pool::grow::{grow as grow_pool, grow_path, GrowError};
pub use pool::{
    DomainSource, DrainPolicy, DrainSync, DurabilityMode, ModeRequest, ModeSource, OpenOptions,
    PersistenceDomain, Pool, PoolInfo, PoolOptions, RootType,
};
pub use ptr::{AtomicPPtr, PAtomicU64, PPtr};
pub use splitmix::{splitmix64, SplitMix64};

/// Size of a cache line, the unit of flushing and of the persistency model.
pub const CACHE_LINE: usize = 64;

/// The crate README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
