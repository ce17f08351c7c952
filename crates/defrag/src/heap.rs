//! The typed heap: objects in slab pages, named roots, allocation and free inside
//! pmem-core transactions, and the live fragmentation ratio.
//!
//! The heap is shared between threads (`&self`), and threads' transactions run at
//! once, each on its own log lane of pmem-core's `TxHeap`
//! (`transaction_shared`). What keeps them apart is not a heap-wide lock but the
//! items they touch: every object, slab page header, root slot and the root
//! table's names is locked at a transaction's first access, shared to read and
//! exclusive to write or free, and held to its commit or rollback
//! ([`crate::locks`]). A conflict is not waited for: the transaction rolls back
//! and [`DefragHeap::transaction`] runs its closure again after a short backoff
//! (hence `FnMut`). Why this design: it needs nothing from the user (no `PMutex`
//! to place over a structure), it lets threads working on different parts of one
//! structure (buckets of one hash table) commit together, and it gives the healer
//! a way to know which objects a running transaction holds.
//!
//! Two short locks remain. The DRAM page index ([`Pages`]) is behind a reader-writer
//! lock sharded per thread ([`IndexLock`]), read to look a page up and written
//! only while alloc and free choose a slot and update the index (and to reload
//! what a rolled-back transaction changed). The *gate*, a reader-writer lock, is taken shared by every transaction
//! and exclusively by whatever must see the heap still: marking and leak
//! collection, [`DefragHeap::stats`], a compaction's planning and activation, its
//! deactivation, and the release of an interrupted compaction's plans at open
//! (a finished compaction releases its plans as ordinary transactions).
//! [`DefragHeap::lock`] takes both.
//!
//! A concurrent compaction's defragmenter moves objects without either; while a
//! compaction is active every object access of a transaction goes through the
//! read barrier ([`crate::barrier`]), so no transaction touches an object the
//! defragmenter may be copying, and its healing ([`crate::heal`]) takes the object
//! locks with a `try`, revisiting what a running transaction holds.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Deref, DerefMut, Range};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, TryLockError};

use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};
use crossbeam_utils::CachePadded;
use parking_lot::{RwLock, RwLockWriteGuard};

use pmem_core::tx::{Tx, TxError, TxGeometry, TxHeap, TxOptions};
use pmem_core::{AllocError, PPtr, PageAllocator, PersistentAllocator, Pool};
use zerocopy::{FromBytes, IntoBytes};

use crate::barrier::Active;
use crate::locks::{Conflict, Held, LockTable};

use crate::layout::{
    class_of, HeapRoot, ObjHeader, PageHeader, RootSlot, TableHeader, HEAP_MAGIC, OBJ_HEADER, PAGE,
    PAGE_HEADER, PAGE_MAGIC, ROOTS, ROOT_NAME, TABLE_MAGIC,
};
use crate::types::{PersistentType, Registry};
use crate::DefragError;

/// A slab page as DRAM knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageInfo {
    pub slot: u64,
    pub capacity: u64,
    pub used: u64,
    pub bytes: u64,
}

/// The DRAM index of the slab pages: every page, and per slot size the pages with a
/// free slot. Rebuilt from media at open; pages a failed transaction touched are
/// reloaded from media.
#[derive(Debug, Default)]
pub(crate) struct Pages {
    pub all: BTreeMap<u64, PageInfo>,
    partial: BTreeMap<u64, BTreeSet<u64>>,
    /// Relocation pages of the active compaction: never allocated from.
    excluded: BTreeSet<u64>,
    /// Relocation pages a transaction freed an object of while the compaction
    /// was being planned (the commit frees those sources again: `planning`).
    pub freed_in_excluded: BTreeSet<u64>,
}

impl Pages {
    /// Stops (or resumes) allocation from `page`.
    pub(crate) fn exclude(&mut self, page: u64, excluded: bool) {
        if excluded {
            self.excluded.insert(page);
        } else {
            self.excluded.remove(&page);
        }
        if let Some(&info) = self.all.get(&page) {
            self.put(page, info);
        }
    }

    fn put(&mut self, page: u64, info: PageInfo) {
        self.all.insert(page, info);
        let set = self.partial.entry(info.slot).or_default();
        if info.used < info.capacity && !self.excluded.contains(&page) {
            set.insert(page);
        } else {
            set.remove(&page);
        }
    }

    fn remove(&mut self, page: u64) {
        if let Some(info) = self.all.remove(&page) {
            if let Some(set) = self.partial.get_mut(&info.slot) {
                set.remove(&page);
            }
        }
    }
}

/// Fragmentation figures (the FFCCD paper's Eq. 1: footprint over live bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeapStats {
    /// Live objects.
    pub live_objects: u64,
    /// Bytes of the live objects (without their headers).
    pub live_bytes: u64,
    /// Bytes of the slab pages holding them.
    pub footprint_bytes: u64,
    /// Slab pages (runs).
    pub pages: u64,
    /// `footprint_bytes / live_bytes` (1.0 for an empty heap).
    pub frag_ratio: f64,
}

/// What the page-index mutex guards: the DRAM page index and the active
/// compaction (which changes only under the gate held exclusively).
#[derive(Default)]
pub(crate) struct Shared {
    pub pages: Pages,
    pub active: Option<Arc<Active>>,
    /// Set while a finished compaction's plans are released, one per hold of the
    /// lock (the barrier is off, the plans still chained from the root): no
    /// compaction or marking may start.
    pub releasing: bool,
}

/// The lock over [`Shared`]: a reader-writer lock sharded per thread
/// (crossbeam's `ShardedLock`), because every object access of every
/// transaction looks its page up here while writes (a slot chosen, a page added
/// or dropped) are a few per transaction: a plain reader-writer lock would move
/// its one counter's line between cores at each lookup. A panic while holding it
/// does not poison the heap (the index is reloaded or marked stale instead), so
/// the guards are taken through poisoning.
pub(crate) struct IndexLock(ShardedLock<Shared>);

/// Tries of [`IndexLock::read`] before it sleeps: with a `pause` between tries
/// (about 40 ns here, 10 ns on older cores) they last 20 to 100 µs.
const READ_SPINS: u32 = 2048;

impl IndexLock {
    fn new(shared: Shared) -> IndexLock {
        IndexLock(ShardedLock::new(shared))
    }

    /// Shared access: a lookup. A writer holds the index for tens of
    /// microseconds at most (a plan's release drops a few hundred pages), while
    /// a reader put to sleep behind it is woken tens of microseconds after it
    /// lets go: so a reader first spins, re-trying without writing the lock's
    /// line, for about as long as the longest hold, and sleeps only past that
    /// (measured: inside a 1M-object compaction a mutator slept ~300 times,
    /// 5 % of its window, all of them here).
    pub(crate) fn read(&self) -> ShardedLockReadGuard<'_, Shared> {
        for _ in 0..READ_SPINS {
            match self.0.try_read() {
                Ok(g) => return g,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => std::hint::spin_loop(),
            }
        }
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Exclusive access: an update.
    pub(crate) fn write(&self) -> ShardedLockWriteGuard<'_, Shared> {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get_mut(&mut self) -> &mut Shared {
        self.0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A typed persistent heap on a pool (see the [crate documentation](crate)).
///
/// `DefragHeap` is `Sync`: share it between threads (`&DefragHeap` in scoped
/// threads, or an `Arc`) to run transactions from several threads and a
/// concurrent compaction ([`DefragHeap::begin_compaction`]) beside them.
///
/// Its slab pages come from pmem-core's page allocator by default; any
/// [`PersistentAllocator`] with the transactional operations that hands out
/// page-aligned blocks of a page or more (nvwa's does) can serve instead
/// ([`DefragHeap::create_with`]).
pub struct DefragHeap<A: PersistentAllocator + 'static = PageAllocator> {
    pub(crate) tx: TxHeap<A>,
    pub(crate) registry: Registry,
    pub(crate) root: PPtr<HeapRoot>,
    /// Transactions shared, marking, stats and a compaction's planning,
    /// deactivation (and, at open, recovery) exclusive. On cache lines of its
    /// own: every transaction writes its word twice, and beside it (the page
    /// index is inline in `shared`) the defragmenter's index updates made each
    /// of those writes a miss inside a compaction.
    pub(crate) gate: CachePadded<RwLock<()>>,
    /// The page index: held briefly, inside alloc/free/lookup.
    pub(crate) shared: IndexLock,
    /// The object locks of running transactions and the healer.
    pub(crate) locks: LockTable,
    /// A panic unwound through a transaction and its pages could not be reloaded:
    /// the next [`DefragHeap::lock`] rebuilds the index.
    stale: AtomicBool,
}

/// The heap held alone: the gate exclusively and the page index (marking,
/// stats, planning, release). Derefs to the index.
pub(crate) struct Exclusive<'h> {
    gate: RwLockWriteGuard<'h, ()>,
    shared: ShardedLockWriteGuard<'h, Shared>,
}

impl Deref for Exclusive<'_> {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl DerefMut for Exclusive<'_> {
    fn deref_mut(&mut self) -> &mut Shared {
        &mut self.shared
    }
}

impl<A: PersistentAllocator + 'static> std::fmt::Debug for DefragHeap<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefragHeap")
            .field("types", &self.registry.types().count())
            .finish()
    }
}

use crate::layout::ALLOC_RECORDS;

/// The log geometry of a heap: the default, with room for a compaction round.
fn geometry() -> TxGeometry {
    TxGeometry {
        alloc_records: ALLOC_RECORDS,
        ..TxGeometry::default()
    }
}

pub(crate) fn crc(bytes: &[u8]) -> u64 {
    u64::from(crc32c::crc32c(bytes))
}

impl DefragHeap {
    /// Formats `pool` (created with `PoolOptions::root::<HeapRoot>()`) as a heap of
    /// the types in `registry`, which is persisted and checked by every
    /// [`DefragHeap::open`].
    pub fn create(pool: Pool, registry: &Registry) -> Result<DefragHeap, DefragError> {
        DefragHeap::create_with(pool, registry, |pool, region| {
            // SAFETY: create_with gives the allocator its region alone.
            unsafe { PageAllocator::format(pool, region, PAGE) }
        })
    }
}

impl<A: PersistentAllocator + 'static> DefragHeap<A> {
    /// As [`DefragHeap::create`], with the allocator `format` makes over the
    /// region it is given (see [`TxHeap::create_with`]). Its blocks of
    /// [`PAGE`] bytes must be page aligned.
    pub fn create_with(
        pool: Pool,
        registry: &Registry,
        format: impl FnOnce(Arc<Pool>, Range<u64>) -> Result<A, AllocError>,
    ) -> Result<DefragHeap<A>, DefragError> {
        registry.validate()?;
        let root = pool.root::<HeapRoot>()?;
        let mut tx = TxHeap::create_with(pool, &geometry(), format)?;
        let table = registry.encode();
        tx.transaction(|t| {
            let block = t.alloc(32 + table.len() as u64)?;
            let header = TableHeader {
                magic: TABLE_MAGIC,
                len: table.len() as u64,
                crc: crc(&table),
                reserved: 0,
            };
            t.write_bytes(block.offset(), header.as_bytes())?;
            t.write_bytes(block.offset() + 32, &table)?;
            let r = HeapRoot {
                magic: HEAP_MAGIC,
                type_table: block.offset(),
                roots: [RootSlot::default(); ROOTS],
                compaction: 0,
            };
            t.write(root, &r)
        })?;
        Ok(DefragHeap::assemble(tx, registry, root, Pages::default()))
    }

    /// A heap over a recovered or new `tx`, with its page index `pages`, no
    /// compaction and no lock held.
    pub(crate) fn assemble(
        tx: TxHeap<A>,
        registry: &Registry,
        root: PPtr<HeapRoot>,
        pages: Pages,
    ) -> DefragHeap<A> {
        DefragHeap {
            tx,
            registry: registry.clone(),
            root,
            gate: CachePadded::new(RwLock::new(())),
            shared: IndexLock::new(Shared {
                pages,
                active: None,
                releasing: false,
            }),
            locks: LockTable::new(),
            stale: AtomicBool::new(false),
        }
    }

    /// Takes the heap alone: the gate exclusively (waiting for running
    /// transactions to end) and the page index (fair hand-offs: see
    /// [`DefragHeap::unlock_fair`]).
    pub(crate) fn lock(&self) -> Result<Exclusive<'_>, DefragError> {
        let gate = self.gate.write();
        let mut shared = self.shared.write();
        if self.stale.swap(false, Ordering::AcqRel) {
            Self::rescan(&self.tx, &mut shared)?;
        }
        Ok(Exclusive { gate, shared })
    }

    /// Rebuilds the page index from media (after a panic left it unsure),
    /// keeping the planning's DRAM notes (excluded pages, frees noted in them).
    fn rescan(tx: &TxHeap<A>, shared: &mut Shared) -> Result<(), DefragError> {
        let mut pages = scan_pages(tx)?;
        for &p in &shared.pages.excluded {
            pages.exclude(p, true);
        }
        pages.freed_in_excluded = std::mem::take(&mut shared.pages.freed_in_excluded);
        shared.pages = pages;
        Ok(())
    }

    /// Releases the heap to a waiting thread, if any, rather than letting the
    /// caller take it again at once.
    pub(crate) fn unlock_fair(g: Exclusive<'_>) {
        let Exclusive { gate, shared } = g;
        // Waiting transactions wait at the gate, so its fair hand-off is the
        // one that matters; the index's lock is free before it.
        drop(shared);
        RwLockWriteGuard::unlock_fair(gate);
    }

    /// Runs `f` as one crash-atomic transaction (undo logging). An `Err` or a panic
    /// rolls it back. Threads' transactions run at once; each locks the objects
    /// (and roots) it touches at first access, and if another running transaction
    /// holds one in a conflicting mode, this one rolls back and `f` runs again
    /// (after a short backoff): `f` must be ready to run more than once, and see
    /// its effects on DRAM state undone by itself. A concurrent compaction's
    /// defragmenter runs beside them.
    pub fn transaction<R>(
        &self,
        mut f: impl FnMut(&mut DefragTx<'_, '_>) -> Result<R, DefragError>,
    ) -> Result<R, DefragError> {
        let mut attempt = 0u32;
        loop {
            match self.attempt(&mut f)? {
                Some(r) => return Ok(r),
                None => {
                    attempt = attempt.saturating_add(1);
                    backoff(attempt);
                }
            }
        }
    }

    /// One run of a concurrent transaction: `None` if it met a conflict (rolled
    /// back).
    fn attempt<R>(
        &self,
        f: &mut impl FnMut(&mut DefragTx<'_, '_>) -> Result<R, DefragError>,
    ) -> Result<Option<R>, DefragError> {
        if self.stale.load(Ordering::Acquire) {
            drop(self.lock()?);
        }
        let _gate = self.gate.read();
        let active = self.shared.read().active.clone();
        let failure: RefCell<Option<DefragError>> = RefCell::new(None);
        let touched: RefCell<Vec<u64>> = RefCell::new(Vec::new());
        let conflict = Cell::new(false);
        let mut release = Release {
            heap: self,
            held: self.locks.holder(),
            touched: &touched,
        };
        let (registry, root) = (&self.registry, self.root);
        // SAFETY: every byte a transaction reads or writes belongs to an item it
        // holds in the lock table (shared to read, exclusive to write) until it
        // commits or rolls back, and the page index is behind its mutex; the
        // healer takes the same locks. The defragmenter writes, without locks,
        // destination slots of moves not yet published and the forward words of
        // their sources, which no transaction reads or writes while the
        // compaction is active (every object access goes through the barrier,
        // which waits for a move to be published). No reference into the pool is
        // kept across a transaction.
        let result = unsafe {
            self.tx.transaction_shared(TxOptions::new(), |tx| {
                let mut d = DefragTx {
                    tx,
                    registry,
                    root,
                    pages: PagesRef::Shared(&self.shared),
                    active: active.as_deref().map(|a| (a, self.tx.pool())),
                    touched: &touched,
                    heals_left: HEALS_PER_TX,
                    pool: Some(self.tx.pool()),
                    locks: Some((&self.locks, &mut release.held)),
                    conflict: &conflict,
                };
                f(&mut d).map_err(|e| {
                    *failure.borrow_mut() = Some(e);
                    TxError::Aborted("defrag transaction failed".into())
                })
            })
        }
        .map(|(r, _)| r);
        // The index is written only to undo what a rolled-back transaction did
        // to it: a commit leaves it as the transaction's own updates made it.
        let settled = match result {
            Ok(r) => Ok(r),
            // A rollback that touched no page (a conflict, most often) has
            // nothing to undo in the index: no write hold to stall the others.
            Err(_) if touched.borrow().is_empty() => {
                settle(&self.tx, &mut Pages::default(), result, failure, &touched)
            }
            Err(_) => {
                let mut g = self.shared.write();
                settle(&self.tx, &mut g.pages, result, failure, &touched)
            }
        };
        // Locks go after the index is settled (the pages they cover are reloaded).
        touched.borrow_mut().clear();
        drop(release);
        match settled {
            Err(_) if conflict.get() => Ok(None),
            r => r.map(Some),
        }
    }

    /// Runs `f` as one transaction with pmem-core's `opts` (mode, hint). Through
    /// `&mut self`, so every mode is open to it, `LogMode::Lazy` included.
    pub fn transaction_with<R>(
        &mut self,
        opts: TxOptions,
        f: impl FnOnce(&mut DefragTx<'_, '_>) -> Result<R, DefragError>,
    ) -> Result<R, DefragError> {
        let shared = self.shared.get_mut();
        if self.stale.swap(false, Ordering::AcqRel) {
            Self::rescan(&self.tx, shared)?;
        }
        let failure: RefCell<Option<DefragError>> = RefCell::new(None);
        let touched: RefCell<Vec<u64>> = RefCell::new(Vec::new());
        let conflict = Cell::new(false);
        let (registry, root) = (&self.registry, self.root);
        let guard = StaleOnPanic(&self.stale);
        // `&mut self`: no compaction can be active (its handle borrows the heap).
        let result = self.tx.transaction_with(opts, |tx| {
            let mut d = DefragTx {
                tx,
                registry,
                root,
                pages: PagesRef::Own(&mut shared.pages),
                active: None,
                touched: &touched,
                heals_left: HEALS_PER_TX,
                pool: None,
                locks: None,
                conflict: &conflict,
            };
            f(&mut d).map_err(|e| {
                *failure.borrow_mut() = Some(e);
                TxError::Aborted("defrag transaction failed".into())
            })
        });
        drop(guard);
        settle(&self.tx, &mut shared.pages, result, failure, &touched)
    }

    /// Runs a transaction with the heap held alone ([`DefragHeap::lock`]): no
    /// object locks are needed.
    pub(crate) fn transaction_locked<R>(
        &self,
        shared: &mut Shared,
        opts: TxOptions,
        f: impl FnOnce(&mut DefragTx<'_, '_>) -> Result<R, DefragError>,
    ) -> Result<R, DefragError> {
        let failure: RefCell<Option<DefragError>> = RefCell::new(None);
        let touched: RefCell<Vec<u64>> = RefCell::new(Vec::new());
        let conflict = Cell::new(false);
        let (registry, root) = (&self.registry, self.root);
        let Shared { pages, active, .. } = shared;
        let active = active.as_deref();
        let guard = StaleOnPanic(&self.stale);
        // SAFETY: the caller holds the gate exclusively, which every transaction
        // and every read of the heap takes, so no other transaction or reader is
        // running. The only writers without it are a concurrent compaction's
        // defragmenter, which writes destination slots of moves not yet published
        // and the forward words of their sources (no transaction reads or writes
        // them while the compaction is active: every object access goes through
        // the barrier, which waits for a move to be published), and its healer,
        // which runs only between the activation and the deactivation, never
        // beside planning or a release.
        let result = unsafe {
            self.tx.transaction_shared(opts, |tx| {
                let mut d = DefragTx {
                    tx,
                    registry,
                    root,
                    pages: PagesRef::Own(&mut *pages),
                    active: active.map(|a| (a, self.tx.pool())),
                    touched: &touched,
                    heals_left: HEALS_PER_TX,
                    pool: Some(self.tx.pool()),
                    locks: None,
                    conflict: &conflict,
                };
                f(&mut d).map_err(|e| {
                    *failure.borrow_mut() = Some(e);
                    TxError::Aborted("defrag transaction failed".into())
                })
            })
        }
        .map(|(r, _)| r);
        drop(guard);
        settle(&self.tx, pages, result, failure, &touched)
    }

    /// Reads the object at `p`, which must be a live object of type `T`. During a
    /// compaction it reads the object's authoritative copy (moving it first if
    /// needed, as the barrier does).
    ///
    /// A pointer kept in DRAM between two calls is a snapshot: a compaction that
    /// *finishes* in between may have moved its object and freed (or reused) the
    /// old place, since the collector heals only persistent pointers. While
    /// compactions may run on another thread, walk a structure inside one
    /// [`DefragHeap::transaction`], whose barrier keeps every pointer it loads
    /// valid until it ends.
    ///
    /// It runs as a small read-only transaction (it locks the object shared).
    pub fn read<T: PersistentType>(&self, p: PPtr<T>) -> Result<T, DefragError> {
        self.transaction(|t| t.read(p))
    }

    /// The root called `name` (null if unset), which must point to a `T`: a small
    /// transaction, like [`DefragHeap::read`].
    pub fn root<T: PersistentType>(&self, name: &str) -> Result<PPtr<T>, DefragError> {
        self.transaction(|t| t.root(name))
    }

    /// The registry the heap was opened with.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The transactional heap underneath (its pool, allocator and log).
    pub fn tx_heap(&self) -> &TxHeap<A> {
        &self.tx
    }

    /// Live objects, footprint and the fragmentation ratio, from the DRAM index.
    /// During a compaction an object is counted once (at its destination) and both
    /// its pages are in the footprint.
    pub fn stats(&self) -> Result<HeapStats, DefragError> {
        let g = self.lock()?;
        self.stats_locked(&g)
    }

    pub(crate) fn stats_locked(&self, shared: &Shared) -> Result<HeapStats, DefragError> {
        let mut s = HeapStats {
            live_objects: 0,
            live_bytes: 0,
            footprint_bytes: 0,
            pages: 0,
            frag_ratio: 1.0,
        };
        let active = shared.active.as_deref();
        for (&page, info) in &shared.pages.all {
            s.pages += 1;
            s.footprint_bytes += info.bytes;
            let mut count = |_: u64, _: u32, size: u32| {
                s.live_objects += 1;
                s.live_bytes += u64::from(size);
            };
            match active {
                // A relocation page not released yet (during the compaction or its
                // release): its objects are counted at their destinations.
                _ if shared.pages.excluded.contains(&page) => {}
                // A pending move's destination header is the defragmenter's to
                // write: its source's says the same.
                Some(a) => self.for_each_object_with(page, Some(a), &mut count)?,
                None => self.for_each_object_in(page, &mut count)?,
            }
        }
        if s.live_bytes > 0 {
            s.frag_ratio = s.footprint_bytes as f64 / s.live_bytes as f64;
        }
        Ok(s)
    }

    /// Calls `f(object, type id, size)` for each live object of `page`. Reads only
    /// the first word of each object header (not the forward word a defragmenter
    /// may be writing).
    pub(crate) fn for_each_object_in(
        &self,
        page: u64,
        f: &mut dyn FnMut(u64, u32, u32),
    ) -> Result<(), DefragError> {
        self.for_each_object_with(page, None, f)
    }

    fn for_each_object_with(
        &self,
        page: u64,
        active: Option<&Active>,
        f: &mut dyn FnMut(u64, u32, u32),
    ) -> Result<(), DefragError> {
        let h: PageHeader = self.tx.pool().read(PPtr::from_offset(page))?;
        let moves_in = active.and_then(|a| a.moves_into(page)).unwrap_or(&[]);
        for i in 0..u64::from(h.capacity) {
            if h.is_live(i) {
                let obj = page + PAGE_HEADER + i * u64::from(h.slot) + OBJ_HEADER;
                let header = moves_in.get(i as usize).map_or(obj, |&(src, _)| src);
                let [type_id, size]: [u32; 2] = self
                    .tx
                    .pool()
                    .read(PPtr::from_offset(header - OBJ_HEADER))?;
                f(obj, type_id, size);
            }
        }
        Ok(())
    }

    /// Checks that `obj` is a live object of type `type_id`.
    pub(crate) fn check_object(
        &self,
        pages: &Pages,
        obj: u64,
        want: Option<u32>,
    ) -> Result<ObjHeader, DefragError> {
        let (page, slot) = locate(pages, obj)?;
        let h: PageHeader = self.tx.pool().read(PPtr::from_offset(page))?;
        let oh: ObjHeader = self.tx.pool().read(PPtr::from_offset(obj - OBJ_HEADER))?;
        check_slot(obj, &h, slot, &oh, want, "a free slot")?;
        Ok(oh)
    }
}

/// The result of a transaction: on failure, the pages it touched are reloaded
/// as the rollback left them on media, and the heap's own error is returned.
fn settle<R, A: PersistentAllocator + 'static>(
    tx: &TxHeap<A>,
    pages: &mut Pages,
    result: Result<R, TxError>,
    failure: RefCell<Option<DefragError>>,
    touched: &RefCell<Vec<u64>>,
) -> Result<R, DefragError> {
    match result {
        Ok(r) => Ok(r),
        Err(e) => {
            reload_pages(tx, pages, &touched.borrow())?;
            Err(failure.into_inner().unwrap_or(DefragError::Tx(e)))
        }
    }
}

/// Sets the heap's stale flag if a panic unwinds past it (pmem-core rolled the
/// transaction back; the page index is rebuilt at the next exclusive hold).
struct StaleOnPanic<'h>(&'h AtomicBool);

impl Drop for StaleOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// A concurrent transaction's locks, released when it ends. If a panic unwinds
/// through the transaction (pmem-core rolled it back), the pages it touched are
/// reloaded first (or, failing that, the heap is marked stale).
struct Release<'h, 'r, A: PersistentAllocator + 'static> {
    heap: &'h DefragHeap<A>,
    held: Held,
    touched: &'r RefCell<Vec<u64>>,
}

impl<A: PersistentAllocator + 'static> Drop for Release<'_, '_, A> {
    fn drop(&mut self) {
        let touched = self.touched.take();
        if !touched.is_empty() {
            let mut g = self.heap.shared.write();
            if let Err(e) = reload_pages(&self.heap.tx, &mut g.pages, &touched) {
                tracing::error!(%e, "page index not reloaded after a panic; rebuilt at the next exclusive hold");
                self.heap.stale.store(true, Ordering::Release);
            }
        }
        self.heap.locks.release_all(&mut self.held);
    }
}

/// Waits before a transaction's next attempt after a conflict: spins a little
/// at first, then yields, so the holder can finish.
fn backoff(attempt: u32) {
    if attempt < 6 {
        for _ in 0..(1u32 << attempt) * 16 {
            std::hint::spin_loop();
        }
    } else {
        std::thread::yield_now();
    }
}

fn reload_pages<A: PersistentAllocator + 'static>(
    tx: &TxHeap<A>,
    index: &mut Pages,
    pages: &[u64],
) -> Result<(), DefragError> {
    for &page in pages {
        index.remove(page);
        let alloc = tx.allocator();
        let h: PageHeader = tx.pool().read(PPtr::from_offset(page))?;
        if h.magic == PAGE_MAGIC
            && alloc
                .tx_check_live(PPtr::from_offset(page), h.bytes)
                .is_ok()
        {
            let info = page_info(page, &h)?;
            index.put(page, info);
        }
    }
    Ok(())
}

/// Reads every slab page's header (open time, and after a poisoned lock).
pub(crate) fn scan_pages<A: PersistentAllocator + 'static>(
    tx: &TxHeap<A>,
) -> Result<Pages, DefragError> {
    let mut pages = Pages::default();
    for block in tx.live_blocks()? {
        let h: PageHeader = tx.pool().read(PPtr::from_offset(block))?;
        if h.magic == PAGE_MAGIC {
            let info = page_info(block, &h)?;
            pages.put(block, info);
        }
    }
    Ok(pages)
}

/// Checks that slot `i` of the page whose header is `h` is live and that its object
/// (`obj`, header `oh`) has the type `want` (any type if `None`). `free` says what
/// a free slot means to the caller.
fn check_slot(
    obj: u64,
    h: &PageHeader,
    i: u64,
    oh: &ObjHeader,
    want: Option<u32>,
    free: &'static str,
) -> Result<(), DefragError> {
    if !h.is_live(i) {
        return Err(DefragError::NotAnObject {
            offset: obj,
            reason: free,
        });
    }
    match want {
        Some(expected) if oh.type_id != expected => Err(DefragError::WrongType {
            offset: obj,
            expected,
            found: oh.type_id,
        }),
        _ => Ok(()),
    }
}

pub(crate) fn page_info(page: u64, h: &PageHeader) -> Result<PageInfo, DefragError> {
    let (slot, bytes, capacity) = class_of(u64::from(h.slot).saturating_sub(OBJ_HEADER));
    let used = h
        .bitmap
        .iter()
        .map(|w| u64::from(w.count_ones()))
        .sum::<u64>();
    if slot != u64::from(h.slot)
        || bytes != h.bytes
        || capacity != u64::from(h.capacity)
        || used != u64::from(h.used)
    {
        return Err(DefragError::Corrupt(format!(
            "slab page {page:#x}: inconsistent header"
        )));
    }
    Ok(PageInfo {
        slot,
        capacity,
        used,
        bytes,
    })
}

/// The page and slot of the object at `obj`.
fn locate(pages: &Pages, obj: u64) -> Result<(u64, u64), DefragError> {
    let not = |reason| DefragError::NotAnObject {
        offset: obj,
        reason,
    };
    let header = obj
        .checked_sub(OBJ_HEADER)
        .ok_or_else(|| not("below the heap"))?;
    let (&page, info) = pages
        .all
        .range(..=header)
        .next_back()
        .ok_or_else(|| not("not in a slab page"))?;
    let rel = (header - page)
        .checked_sub(PAGE_HEADER)
        .ok_or_else(|| not("in a page header"))?;
    if header >= page + info.bytes || rel % info.slot != 0 || rel / info.slot >= info.capacity {
        return Err(not("not at a slot"));
    }
    Ok((page, rel / info.slot))
}

fn root_key(name: &str) -> Result<[u8; ROOT_NAME], DefragError> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() > ROOT_NAME || b.contains(&0) {
        return Err(DefragError::BadRootName(name.to_owned()));
    }
    let mut key = [0u8; ROOT_NAME];
    key[..b.len()].copy_from_slice(b);
    Ok(key)
}

/// The page index as a transaction reaches it: its own (the heap held alone) or
/// behind the index mutex, taken for each lookup or update (concurrent
/// transactions).
pub(crate) enum PagesRef<'t> {
    Own(&'t mut Pages),
    Shared(&'t IndexLock),
}

impl PagesRef<'_> {
    fn with<R>(&mut self, f: impl FnOnce(&mut Pages) -> R) -> R {
        match self {
            PagesRef::Own(p) => f(p),
            PagesRef::Shared(m) => f(&mut m.write().pages),
        }
    }

    /// A lookup: lookups of several transactions run at once.
    fn read<R>(&self, f: impl FnOnce(&Pages) -> R) -> R {
        match self {
            PagesRef::Own(p) => f(p),
            PagesRef::Shared(m) => f(&m.read().pages),
        }
    }
}

/// Offset of a page header's bitmap word holding slot `i`'s bit.
fn bitmap_word(page: u64, i: u64) -> u64 {
    page + std::mem::offset_of!(PageHeader, bitmap) as u64 + (i / 64) * 8
}

/// Offset of a page header's used count.
fn used_field(page: u64) -> u64 {
    page + std::mem::offset_of!(PageHeader, used) as u64
}

/// Partial pages an allocation tries to take before it makes a new page (they
/// may all be held by other running transactions).
const PAGE_TRIES: usize = 8;

/// The handle of a running heap transaction: typed allocation, free, reads, writes
/// and roots, all crash-atomic together.
pub struct DefragTx<'t, 'a> {
    tx: &'t mut Tx<'a>,
    registry: &'t Registry,
    root: PPtr<HeapRoot>,
    pages: PagesRef<'t>,
    /// The pool, for atomic loads of words other transactions may swap (set
    /// whenever `locks` is).
    pool: Option<&'t Pool>,
    /// The active compaction (and the pool its barrier moves objects in).
    active: Option<(&'t Active, &'t Pool)>,
    touched: &'t RefCell<Vec<u64>>,
    /// Pointer words this transaction may still heal in place (word records).
    heals_left: u32,
    /// The lock table and this transaction's holds; `None` when the heap is held
    /// alone (or through `&mut`), where no lock is needed.
    locks: Option<(&'t LockTable, &'t mut Held)>,
    /// Set when an access met a lock held in a conflicting mode: the heap rolls
    /// the transaction back and runs it again.
    conflict: &'t Cell<bool>,
}

/// Pointer words per transaction that reads heal in place, each one word record of
/// the log (a quarter of a lane's 256): an object is healed whole or not at all,
/// and once the budget is spent reads return their references translated without
/// persisting them, so a long read-only walk during a compaction cannot fill the
/// transaction's log, and the transaction's own writes (object records) keep all
/// their room. The defragmenter's healing pass rewrites the rest.
const HEALS_PER_TX: u32 = 64;

impl<'a> DefragTx<'_, 'a> {
    /// The pmem-core transaction underneath (compaction's own bookkeeping).
    pub(crate) fn raw(&mut self) -> &mut Tx<'a> {
        self.tx
    }

    /// Locks the item at `key` for this transaction (shared, or exclusive to
    /// write), or fails with [`DefragError::Conflict`] if another running
    /// transaction holds it in a conflicting mode (the heap then retries).
    fn lock(&mut self, key: u64, exclusive: bool) -> Result<(), DefragError> {
        if let Some((table, held)) = &mut self.locks {
            if table.acquire(held, key, exclusive) == Err(Conflict) {
                self.conflict.set(true);
                return Err(DefragError::Conflict);
            }
        }
        Ok(())
    }

    /// Takes `key` exclusively if nobody else holds it (no conflict if not).
    fn try_exclusive(&mut self, key: u64) -> bool {
        match &mut self.locks {
            None => true,
            Some((table, held)) => table.acquire(held, key, true).is_ok(),
        }
    }

    /// Enters a slab page this transaction formatted into the DRAM index.
    pub(crate) fn add_page(&mut self, page: u64, h: &PageHeader) {
        self.touched.borrow_mut().push(page);
        let info = PageInfo {
            slot: u64::from(h.slot),
            capacity: u64::from(h.capacity),
            used: u64::from(h.used),
            bytes: h.bytes,
        };
        self.pages.with(|p| p.put(page, info));
    }

    /// Takes a page this transaction frees out of the DRAM index.
    pub(crate) fn drop_page(&mut self, page: u64) {
        self.drop_pages(&[page]);
    }

    /// Takes pages this transaction frees out of the DRAM index, under one hold
    /// of the index's write lock: a plan's release frees hundreds of pages beside
    /// running transactions, and a hold per page (each taking every shard of the
    /// lock) stalled their lookups hundreds of times a plan.
    pub(crate) fn drop_pages(&mut self, pages: &[u64]) {
        self.touched.borrow_mut().extend_from_slice(pages);
        self.pages.with(|index| {
            for &page in pages {
                index.remove(page);
            }
        });
    }

    /// Allocates a zeroed `T`.
    pub fn alloc<T: PersistentType>(&mut self) -> Result<PPtr<T>, DefragError> {
        let desc = self
            .registry
            .get(T::TYPE_ID)
            .ok_or(DefragError::Unregistered(T::TYPE_ID))?;
        let size = u64::from(desc.size);
        let (slot, bytes, capacity) = class_of(size);
        // The slot choice, under the index mutex: a page with room whose header
        // this transaction can lock (one another transaction holds is skipped, so
        // threads allocating at once fill pages of their own).
        let chosen = {
            let locks = &mut self.locks;
            self.pages.with(|pages| {
                let candidates = pages.partial.get(&slot)?;
                candidates
                    .iter()
                    .take(PAGE_TRIES)
                    .copied()
                    .find(|&p| match locks {
                        None => true,
                        Some((table, held)) => table.acquire(held, p, true).is_ok(),
                    })
            })
        };
        let page = match chosen {
            Some(p) => p,
            None => {
                // Not zeroed: the header below says which slots hold data, and
                // an object is written whole when its slot is allocated.
                let p = self.tx.alloc_uninit(bytes)?.offset();
                self.touched.borrow_mut().push(p);
                self.lock(p, true)?;
                let h = PageHeader {
                    magic: PAGE_MAGIC,
                    slot: slot as u32,
                    capacity: capacity as u32,
                    used: 0,
                    bytes,
                    ..PageHeader::default()
                };
                self.tx.write(PPtr::from_offset(p), &h)?;
                let info = PageInfo {
                    slot,
                    capacity,
                    used: 0,
                    bytes,
                };
                self.pages.with(|pages| pages.put(p, info));
                p
            }
        };
        self.touched.borrow_mut().push(page);
        // The header is this transaction's (locked): a plain read.
        let h: PageHeader = self.tx.read(PPtr::from_offset(page))?;
        let i = h.first_free().ok_or_else(|| {
            DefragError::Corrupt(format!("page {page:#x} indexed as free is full"))
        })?;
        let at = page + PAGE_HEADER + i * slot;
        self.lock(at + OBJ_HEADER, true)?;
        let used = h.used + 1;
        self.set_live(page, i, h.bitmap[(i / 64) as usize], true)?;
        self.tx
            .write(PPtr::<u32>::from_offset(used_field(page)), &used)?;
        let oh = ObjHeader {
            type_id: T::TYPE_ID,
            size: size as u32,
            forward: 0,
        };
        self.tx.write(PPtr::from_offset(at), &oh)?;
        self.tx
            .write_bytes(at + OBJ_HEADER, &vec![0; size as usize])?;
        let info = PageInfo {
            slot,
            capacity,
            used: u64::from(used),
            bytes,
        };
        self.pages.with(|pages| pages.put(page, info));
        Ok(PPtr::from_offset(at + OBJ_HEADER))
    }

    /// Frees the object at `obj` whatever its type, through the barrier (the
    /// planning's commit frees again the sources freed while it ran).
    pub(crate) fn free_any(&mut self, obj: u64) -> Result<(), DefragError> {
        let at = self.barrier(obj)?;
        let oh: ObjHeader = self.tx.read(PPtr::from_offset(at - OBJ_HEADER))?;
        self.free_object(at, oh.type_id)
    }

    /// Sets slot `i`'s bit of `page`'s bitmap (whose word holds `old`) to `live`:
    /// one logged word, swapped atomically, since other transactions load bitmap
    /// words of the page (to check their own objects) without its lock.
    fn set_live(&mut self, page: u64, i: u64, old: u64, live: bool) -> Result<(), DefragError> {
        let bit = 1u64 << (i % 64);
        let new = if live { old | bit } else { old & !bit };
        let word = bitmap_word(page, i);
        if self.locks.is_none() {
            // The heap is held alone (any log mode): a plain logged write.
            self.tx.write(PPtr::<u64>::from_offset(word), &new)?;
            return Ok(());
        }
        if !self.tx.cas_word(word, old, new)? {
            return Err(DefragError::Corrupt(format!(
                "bitmap word {word:#x} of a locked page changed under its holder"
            )));
        }
        Ok(())
    }

    /// Frees the `T` at `p` (when the transaction commits).
    pub fn free<T: PersistentType>(&mut self, p: PPtr<T>) -> Result<(), DefragError> {
        let at = self.barrier(p.offset())?;
        self.free_object(at, T::TYPE_ID)
    }

    /// Where the object `p` names is now: the read barrier alone (`read`, `write`,
    /// `free` and `root` apply it themselves). Idle, one load and a branch; during
    /// a compaction it may move the object first.
    #[inline]
    pub fn resolve<T: PersistentType>(&self, p: PPtr<T>) -> Result<PPtr<T>, DefragError> {
        Ok(PPtr::from_offset(self.barrier(p.offset())?))
    }

    /// The read barrier: where the object at `obj` is. Idle (no compaction), one
    /// load and a branch; during a compaction, an object of a relocation page is
    /// moved first if no one has moved it yet, and its destination is returned.
    #[inline]
    fn barrier(&self, obj: u64) -> Result<u64, DefragError> {
        match self.active {
            None => Ok(obj),
            Some((a, pool)) => a.resolve(pool, obj),
        }
    }

    /// Rewrites, in `bytes` (an object of type `T`), every pointer to a moved or
    /// moving object to its destination. Returns how many changed.
    fn translate<T: PersistentType>(&self, bytes: &mut [u8]) -> Result<u32, DefragError> {
        let mut changed = 0;
        for f in T::POINTERS {
            let at = f.offset as usize;
            let Some(field) = bytes.get_mut(at..at + 8) else {
                continue;
            };
            let old = u64::read_from_bytes(field).unwrap_or(0);
            if old == 0 {
                continue;
            }
            let new = self.barrier(old)?;
            if new != old {
                field.copy_from_slice(&new.to_le_bytes());
                changed += 1;
            }
        }
        Ok(changed)
    }

    pub(crate) fn free_object(&mut self, obj: u64, type_id: u32) -> Result<(), DefragError> {
        let (page, i) = self.pages.read(|pages| locate(pages, obj))?;
        self.lock(obj, true)?;
        self.lock(page, true)?;
        self.touched.borrow_mut().push(page);
        let h: PageHeader = self.tx.read(PPtr::from_offset(page))?;
        let oh: ObjHeader = self.tx.read(PPtr::from_offset(obj - OBJ_HEADER))?;
        check_slot(obj, &h, i, &oh, Some(type_id), "a free slot (double free?)")?;
        let used = h.used - 1;
        let info = self
            .pages
            .read(|pages| pages.all.get(&page).copied())
            .ok_or(DefragError::NotAnObject {
                offset: obj,
                reason: "not in a slab page",
            })?;
        // A relocation page of a compaction being planned stays, empty, until
        // the compaction releases it (its plan names it).
        let excluded = self.pages.with(|pages| {
            let excluded = pages.excluded.contains(&page);
            if excluded {
                pages.freed_in_excluded.insert(page);
            }
            excluded
        });
        if used == 0 && !excluded {
            self.tx.free(PPtr::from_offset(page), info.bytes)?;
            self.pages.with(|pages| pages.remove(page));
        } else {
            self.set_live(page, i, h.bitmap[(i / 64) as usize], false)?;
            self.tx
                .write(PPtr::<u32>::from_offset(used_field(page)), &used)?;
            let info = PageInfo {
                used: u64::from(used),
                ..info
            };
            self.pages.with(|pages| pages.put(page, info));
        }
        Ok(())
    }

    /// Reads the `T` at `p` as this transaction sees it (locking it shared).
    /// During a compaction the pointers it holds come back translated to their
    /// objects' new places; for the first few objects of a transaction they are
    /// healed in the object too, as part of this transaction (a bounded number,
    /// so reading cannot fill the log, and only if no other running transaction
    /// holds the object: healing takes it exclusively).
    pub fn read<T: PersistentType>(&mut self, p: PPtr<T>) -> Result<T, DefragError> {
        let at = self.barrier(p.offset())?;
        self.lock(at, false)?;
        let p = PPtr::<T>::from_offset(at);
        self.check::<T>(p)?;
        let mut value: T = self.tx.read(p)?;
        if self.active.is_none() {
            return Ok(value);
        }
        let raw = value.as_bytes().to_vec();
        let changed = self.translate::<T>(value.as_mut_bytes())?;
        if changed > 0 && changed <= self.heals_left && self.try_exclusive(at) {
            self.heals_left -= changed;
            // Only the words that changed: each is one word record, swapped by
            // CAS (the healer takes the object's lock too, so it never races
            // this; the CAS states that the word is the one read).
            for f in T::POINTERS {
                let o = f.offset as usize;
                let word = |b: &[u8]| u64::read_from_bytes(&b[o..o + 8]).unwrap_or(0);
                let (old, new) = (word(&raw), word(value.as_bytes()));
                if old != new && !self.tx.cas_word(at + u64::from(f.offset), old, new)? {
                    return Err(DefragError::Corrupt(format!(
                        "pointer word at {:#x} of a locked object changed under its holder",
                        at + u64::from(f.offset)
                    )));
                }
            }
        }
        Ok(value)
    }

    /// Writes `value` at `p`, a live `T` (locking it exclusively). During a
    /// compaction the pointers written are translated to their objects' new
    /// places.
    pub fn write<T: PersistentType>(&mut self, p: PPtr<T>, value: &T) -> Result<(), DefragError> {
        let at = self.barrier(p.offset())?;
        self.lock(at, true)?;
        let p = PPtr::<T>::from_offset(at);
        self.check::<T>(p)?;
        if self.active.is_some() {
            let mut bytes = value.as_bytes().to_vec();
            self.translate::<T>(&mut bytes)?;
            return Ok(self.tx.write_bytes(at, &bytes)?);
        }
        Ok(self.tx.write(p, value)?)
    }

    /// Checks that `p` is a live `T`. With other transactions running, the
    /// page's bitmap word and the object header's first word are loaded
    /// atomically (another transaction may be allocating or freeing a neighbour).
    fn check<T: PersistentType>(&mut self, p: PPtr<T>) -> Result<(), DefragError> {
        let (page, i) = self.pages.read(|pages| locate(pages, p.offset()))?;
        let (Some(pool), Some(_)) = (self.pool, &self.locks) else {
            let h: PageHeader = self.tx.read(PPtr::from_offset(page))?;
            let oh: ObjHeader = self.tx.read(PPtr::from_offset(p.offset() - OBJ_HEADER))?;
            return check_slot(p.offset(), &h, i, &oh, Some(T::TYPE_ID), "a free slot");
        };
        let live = pool.load_word(bitmap_word(page, i))?;
        let first = pool.load_word(p.offset() - OBJ_HEADER)?;
        if live & (1 << (i % 64)) == 0 {
            return Err(DefragError::NotAnObject {
                offset: p.offset(),
                reason: "a free slot",
            });
        }
        let found = first as u32;
        if found != T::TYPE_ID {
            return Err(DefragError::WrongType {
                offset: p.offset(),
                expected: T::TYPE_ID,
                found,
            });
        }
        Ok(())
    }

    /// The offset of root slot `i`.
    fn slot_at(&self, i: usize) -> u64 {
        self.root.offset() + 16 + i as u64 * std::mem::size_of::<RootSlot>() as u64
    }

    /// The index of the root slot named `key`, with the root table's names locked
    /// shared (exclusive if `exclusive`: a new name is about to be written).
    fn find_root(
        &mut self,
        key: &[u8; ROOT_NAME],
        exclusive: bool,
    ) -> Result<Option<usize>, DefragError> {
        self.lock(self.root.offset(), exclusive)?;
        for i in 0..ROOTS {
            let name: [u8; ROOT_NAME] = self.tx.read(PPtr::from_offset(self.slot_at(i)))?;
            if name == *key {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// Sets the root `name` (at most 24 bytes) to `p` (null clears it).
    pub fn set_root<T: PersistentType>(
        &mut self,
        name: &str,
        p: PPtr<T>,
    ) -> Result<(), DefragError> {
        let p = if p.is_null() {
            p
        } else {
            let p = PPtr::from_offset(self.barrier(p.offset())?);
            self.check::<T>(p)?;
            p
        };
        let key = root_key(name)?;
        if let Some(i) = self.find_root(&key, false)? {
            let ptr = self.slot_at(i) + ROOT_NAME as u64;
            self.lock(ptr, true)?;
            self.tx.write(PPtr::<u64>::from_offset(ptr), &p.offset())?;
            return Ok(());
        }
        // A new name: the names are locked exclusively while it is written.
        self.find_root(&key, true)?;
        let empty = [0u8; ROOT_NAME];
        let i = self
            .find_root(&empty, true)?
            .ok_or(DefragError::RootsFull)?;
        let at = self.slot_at(i);
        self.lock(at + ROOT_NAME as u64, true)?;
        let slot = RootSlot {
            name: key,
            ptr: p.offset(),
        };
        self.tx.write(PPtr::<RootSlot>::from_offset(at), &slot)?;
        Ok(())
    }

    /// The root `name` as this transaction sees it (null if unset); during a
    /// compaction the root is healed (if no other running transaction holds it).
    pub fn root<T: PersistentType>(&mut self, name: &str) -> Result<PPtr<T>, DefragError> {
        let key = root_key(name)?;
        let Some(i) = self.find_root(&key, false)? else {
            return Ok(PPtr::null());
        };
        let word = self.slot_at(i) + ROOT_NAME as u64;
        self.lock(word, false)?;
        let old: u64 = self.tx.read(PPtr::from_offset(word))?;
        if old == 0 {
            return Ok(PPtr::null());
        }
        let p = PPtr::from_offset(self.barrier(old)?);
        if p.offset() != old
            && self.try_exclusive(word)
            && !self.tx.cas_word(word, old, p.offset())?
        {
            return Err(DefragError::Corrupt(format!(
                "root word {word:#x} changed under its holder"
            )));
        }
        self.check::<T>(p)?;
        Ok(p)
    }
}
