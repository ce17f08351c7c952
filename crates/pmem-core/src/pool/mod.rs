//! File-backed persistent-memory pools.
//!
//! A pool is a file mapped into memory: a checksummed [`header`] in its first 4 KiB,
//! an optional typed root object, and a heap for allocators. New files are created
//! `0600`.
//!
//! # The lock is advisory
//!
//! While open, the file is held under a `flock`: exclusive for a read-write open,
//! shared for a read-only one. A second [`Pool::open`] or [`Pool::create`] of the
//! file — in this process or another — fails with [`PoolError::Locked`] (read-only
//! opens may share the file with each other, never with a read-write one). The lock
//! is *advisory*: it stops only openers that ask for it, that is pmkit itself (or
//! another program that takes `flock` the same way). Nothing stops another program
//! from `open(2)`ing the file and calling `write(2)`, `truncate(2)` or `mmap(2)` on
//! it; such writes land in the live mapping under the pool's feet, and a truncation
//! makes later accesses to the lost pages raise `SIGBUS`. Protect pool files with
//! their permissions (the `0600` default), not with the lock. On network file systems
//! `flock` may be local to one machine.
//!
//! # `fork()` while a pool is open
//!
//! A file pool is mapped `MAP_SHARED` (memmap2's raw shared mapping, or
//! `MAP_SHARED_VALIDATE | MAP_SYNC` in `Dax` mode); anonymous and simulated pools
//! are `MAP_PRIVATE | MAP_ANONYMOUS`. After `fork()`:
//!
//! * File pools: parent and child map the *same* file pages, not copies. A store by
//!   either is seen by the other and reaches the same file; nothing in pmkit
//!   synchronises the two processes.
//! * Anonymous pools: the child gets a copy-on-write copy; its writes are its own.
//! * The `flock` belongs to the open file description, which the child's inherited
//!   descriptor shares: the child holds the same lock (it is not a second opener and
//!   is not refused), and a fresh [`Pool::open`] in either process fails with
//!   [`PoolError::Locked`]. Dropping or closing the pool unlocks explicitly, so a
//!   child that drops its copy of the `Pool` releases the *parent's* lock while the
//!   parent still has the pool open.
//! * The child's copy of the `Pool` (and of any allocator over it) carries DRAM state
//!   — pending msync ranges, allocator bitmaps, locks — copied at the fork, possibly
//!   with a lock held by a thread that does not exist in the child.
//!
//! So the child must not use the pool while the parent does: two processes
//! allocating or writing through their own copies would hand out the same blocks and
//! tear each other's updates. Fork only to `exec` (the usual case; the descriptor is
//! close-on-exec), or have the child leave the pool alone and end with
//! `std::mem::forget(pool)` or `_exit` so its copy is never dropped. To hand a pool to
//! a child, close it in the parent first and let the child open it.
//!
//! Opening validates the header from a plain read before anything is mapped, and
//! a refused or read-only open never writes (a read-write open of a version-3 pool
//! writes only its [`shutdown_record`]): a file that is empty, truncated, not a pool, of another layout or
//! version, or with a bad checksum gets its own [`PoolError`] and stays byte-for-byte
//! unchanged.
//!
//! Access rules (what keeps this sound):
//! * `&Pool` hands out `&T` only for `T: Immutable` (no interior mutability), and all
//!   safe writes take `&mut Pool`, so the borrow checker proves no reference is
//!   written under.
//! * Concurrent structures (allocators, logs) that share a pool between threads use
//!   the `unsafe` shared-access methods, whose contracts say which bytes the caller
//!   must own.
//!
//! Durability is per [`DurabilityMode`]; see [`mode`].

mod access;
mod atomic;
mod devdax_create;
mod domain;
mod drain_policy;
mod env_choices;
mod group;
pub mod grow;
// The on-media header struct is not part of the API: `Pool::info` is its read-only,
// documented view. Tests, the fuzzer and the format docs still reach it.
#[doc(hidden)]
pub mod header;
mod info;
pub(crate) mod mapping;
pub mod mode;
pub(crate) mod open;
mod options;
mod persist;
mod platform_check;
mod prefault;
mod relocate;
pub mod root;
pub mod shutdown_record;
mod upgrade;

use std::fs::File;
use std::path::PathBuf;
use std::sync::Mutex;

pub use domain::DOMAIN_ENV;
pub use drain_policy::{DrainPolicy, DrainSync, DRAIN_SYNC_ENV, GROUP_COMMIT_ENV};
pub use header::{FORMAT_VERSION, HEADER_AREA, MAX_LAYOUT_LEN, MIN_FORMAT_VERSION};
pub use info::PoolInfo;
pub use mode::{DomainSource, DurabilityMode, ModeRequest, ModeSource, PersistenceDomain};
pub use options::{OpenOptions, PoolOptions};
pub use root::RootType;

pub(crate) use access::WriteOrder;
use group::GroupCommit;
use mapping::Mapping;
use persist::PendingPages;

use crate::PoolError;
use header::Header;

/// An open pool. See the [module documentation](self).
pub struct Pool {
    map: Mapping,
    /// Holds the flock; `None` for anonymous pools.
    file: Option<File>,
    path: PathBuf,
    header: Header,
    mode: DurabilityMode,
    source: ModeSource,
    /// The platform's persistence domain, decided once at open or create.
    domain: PersistenceDomain,
    domain_source: DomainSource,
    /// What flush and drain do: `mode` and `domain` folded into one value once, so
    /// a flush costs one match whatever the domain.
    flush_path: mode::FlushPath,
    read_only: bool,
    /// What sysfs said about the device, read once at open or create.
    platform: Box<crate::platform::Platform>,
    /// The shutdown record current before this read-write open rewrote it.
    opened_record: Option<shutdown_record::ShutdownRecord>,
    /// Whether this open wrote a shutdown record, so closing must mark it clean. A
    /// refused open (an unsafe shutdown) is dropped without touching the record.
    shutdown_recorded: bool,
    /// Msync mode: page ranges flushed but not yet drained.
    // Boxed: an UnsafeCell inline would stop the compiler from treating `&Pool` as
    // read-only memory, and reload `map` on every dereference in a loop.
    pending: Box<Mutex<PendingPages>>,
    /// Msync mode: held by a drain from taking the pending ranges until they are
    /// synced (or put back after a failure), so no drain returns while pages flushed
    /// before it began are still being synced by another thread.
    drain_lock: Box<Mutex<()>>,
    /// Msync mode: how drains sync (read from the environment or the open options
    /// once, at open).
    drain_policy: DrainPolicy,
    /// Msync mode: the generations of group-committed drains.
    group: Box<GroupCommit>,
    /// The crash simulator's recorder, for simulated pools.
    #[cfg(feature = "sim")]
    sim: Option<std::sync::Arc<crate::sim::SimDomain>>,
    /// A crash image's emulated reached bitmap (see [`Pool::reached`]).
    #[cfg(feature = "sim")]
    reached: Option<std::sync::Arc<crate::sim::Reached>>,
}

// SAFETY: the mapping is plain shared memory owned by the Pool and unmapped only on
// drop. Safe methods give out `&T` only for `T: Immutable` (no interior
// mutability) and write only through `&mut self`; the `unsafe` shared
// methods put the data-race obligations on their callers. The remaining state
// (`pending`, `drain_lock`, `group`) is behind Mutexes.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Pool {
    fn assemble(
        map: Mapping,
        file: Option<File>,
        path: PathBuf,
        header: Header,
        mode: DurabilityMode,
        source: ModeSource,
        read_only: bool,
    ) -> Pool {
        Pool {
            map,
            file,
            path,
            header,
            mode,
            source,
            domain: PersistenceDomain::MemoryController,
            domain_source: DomainSource::Default,
            flush_path: mode::FlushPath::of(mode, PersistenceDomain::MemoryController),
            read_only,
            platform: Box::new(crate::platform::Platform::not_detected(
                "no file: an anonymous or simulated pool",
            )),
            opened_record: None,
            shutdown_recorded: false,
            pending: Box::new(Mutex::new(PendingPages::default())),
            drain_lock: Box::new(Mutex::new(())),
            // The environment's choice is set by the open or create that read it
            // (`set_drain_policy`), once per pool: never per flush or drain.
            drain_policy: DrainPolicy::default(),
            group: Box::default(),
            #[cfg(feature = "sim")]
            sim: None,
            #[cfg(feature = "sim")]
            reached: None,
        }
    }

    /// Sets the drain policy, before anyone else can use the pool: `requested`
    /// ([`OpenOptions::drain`]) over the environment's `from_env`, in `Msync` mode
    /// only (the other modes never sync, and keep the default).
    pub(crate) fn set_drain_policy(
        &mut self,
        from_env: DrainPolicy,
        requested: Option<DrainPolicy>,
    ) {
        if self.mode == DurabilityMode::Msync {
            self.drain_policy = requested.unwrap_or(from_env);
        }
    }

    /// Sets the persistence domain, before anyone else can use the pool (at open or
    /// create, or when the simulator builds a pool), and the flush path with it.
    pub(crate) fn set_domain(&mut self, domain: PersistenceDomain, source: DomainSource) {
        self.flush_path = mode::FlushPath::of(self.mode, domain);
        if domain == PersistenceDomain::CpuCache {
            let effective = mode::domain_has_effect(self.mode, domain);
            tracing::debug!(
                path = %self.path.display(),
                mode = %self.mode,
                source = source.name(),
                effective,
                "persistence domain cpu_cache: flushes elided only in dax mode"
            );
        }
        self.domain = domain;
        self.domain_source = source;
    }

    /// The pool's on-media header (a copy read at open; it never changes). Not part
    /// of the API: [`Pool::info`] is the documented view of the same fields.
    #[doc(hidden)]
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Total size of the pool in bytes.
    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Always false: a pool has at least a header and one heap page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The file behind the pool (empty for anonymous pools).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// How ranges of this pool are made durable.
    pub fn mode(&self) -> DurabilityMode {
        self.mode
    }

    /// Why the pool has its mode.
    pub fn mode_source(&self) -> ModeSource {
        self.source
    }

    /// The persistence domain the pool assumes (decided once, when it was mapped).
    /// It changes what [`Pool::flush`] does only in [`DurabilityMode::Dax`]: see
    /// [`Pool::domain_effective`].
    pub fn persistence_domain(&self) -> PersistenceDomain {
        self.domain
    }

    /// Where [`Pool::persistence_domain`] came from.
    pub fn domain_source(&self) -> &DomainSource {
        &self.domain_source
    }

    /// Whether the domain changes how this pool persists: true only for
    /// [`PersistenceDomain::CpuCache`] in `Dax` mode (flushes elided, a drain is a
    /// fence). A `CpuCache` domain in `Msync` or `Volatile` mode is recorded and
    /// has no effect.
    pub fn domain_effective(&self) -> bool {
        mode::domain_has_effect(self.mode, self.domain)
    }

    /// Whether [`Pool::persist`] makes a range durable. False for `Volatile` pools and
    /// for forced `Dax` on a non-DAX file.
    pub fn is_durable(&self) -> bool {
        mode::is_durable(self.mode, self.source)
    }

    /// Whether the pool was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// What the platform reports about the pool's device (persistence domain,
    /// unsafe-shutdown state, bad blocks), detected once when the pool was opened or
    /// created. Anonymous and simulated pools detect nothing.
    pub fn platform(&self) -> &crate::platform::Platform {
        &self.platform
    }

    /// The heap: `heap_offset .. pool_size`, page aligned, for allocators.
    pub fn heap(&self) -> std::ops::Range<u64> {
        self.header.heap_off..self.header.heap_off + self.header.heap_size
    }

    /// The layout name.
    pub fn layout(&self) -> &str {
        self.header.layout_name()
    }

    /// A summary for display.
    pub fn info(&self) -> PoolInfo {
        let h = &self.header;
        PoolInfo {
            path: self.path.clone(),
            layout: h.layout_name().to_owned(),
            uuid: h.uuid_string(),
            version: h.version,
            pool_size: h.pool_size,
            header_size: u64::from(h.header_area),
            root_offset: h.root_off,
            root_size: h.root_size,
            root_id: h.root_id().to_owned(),
            root_layout_version: h.root_layout_version,
            heap_offset: h.heap_off,
            heap_size: h.heap_size,
            created_unix_s: h.created_unix_s,
            mode: self.mode,
            mode_source: self.source,
            durable: self.is_durable(),
            persistence_domain: self.domain,
            domain_source: self.domain_source.clone(),
            domain_effective: self.domain_effective(),
            flush_instruction: crate::flush::kind(),
            read_only: self.read_only,
            platform: (*self.platform).clone(),
        }
    }

    /// Attaches a crash-simulator recorder to this pool; from now on every store
    /// through the write API, flush and fence is recorded.
    #[cfg(feature = "sim")]
    pub(crate) fn attach_sim(
        &mut self,
        base: Option<crate::sim::Image>,
    ) -> std::sync::Arc<crate::sim::SimDomain> {
        let addr = self.map.base().as_ptr();
        // SAFETY: the mapping stays mapped while the Pool lives, and Drop detaches
        // the recorder before the mapping is unmapped.
        let sim = unsafe { crate::sim::SimDomain::attach(addr, self.map.len(), base) };
        self.sim = Some(std::sync::Arc::clone(&sim));
        sim
    }

    fn check_writable(&self) -> Result<(), PoolError> {
        if self.read_only {
            Err(PoolError::ReadOnly)
        } else {
            Ok(())
        }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("path", &self.path)
            .field("layout", &self.layout())
            .field("len", &self.len())
            .field("mode", &self.mode)
            .field("source", &self.source)
            .field("domain", &self.domain)
            .field("domain_source", &self.domain_source)
            .field("read_only", &self.read_only)
            .finish()
    }
}
