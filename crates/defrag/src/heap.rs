//! The typed heap: objects in slab pages, named roots, allocation and free inside
//! pmem-core transactions, and the live fragmentation ratio.
//!
//! The heap is shared between threads (`&self`): one lock, the *heap lock*, is held
//! by every transaction and every read from outside a transaction, so transactions
//! run one at a time. A concurrent compaction's defragmenter moves objects without
//! that lock; while a compaction is active every object access of a transaction
//! goes through the read barrier ([`crate::barrier`]), so no transaction touches an
//! object the defragmenter may be copying.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use pmem_core::tx::{Hint, RecoveryReport, Tx, TxError, TxGeometry, TxHeap, TxOptions};
use pmem_core::{AllocError, PPtr, PageAllocator, PersistentAllocator, Pool};
use zerocopy::{FromBytes, IntoBytes};

use crate::barrier::Active;

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

    fn with_room(&self, slot: u64) -> Option<u64> {
        self.partial.get(&slot).and_then(|s| s.first().copied())
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

/// What the heap lock guards: the DRAM page index and the active compaction.
#[derive(Default)]
pub(crate) struct Shared {
    pub pages: Pages,
    pub active: Option<Arc<Active>>,
    /// Set while a transaction runs: still set at the next lock, a panic unwound
    /// through it (pmem-core rolled it back), and the page index is rebuilt.
    stale: bool,
    /// Set while a finished compaction's plans are released, one per hold of the
    /// lock (the barrier is off, the plans still chained from the root): no
    /// compaction or marking may start.
    pub releasing: bool,
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
    pub(crate) shared: Mutex<Shared>,
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

fn crc(bytes: &[u8]) -> u64 {
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

    /// Opens a heap made by [`DefragHeap::create`]: recovers interrupted
    /// transactions, checks the persisted type table against `registry` (same ids,
    /// sizes and pointer fields) and rebuilds the DRAM index of the pages.
    pub fn open(
        pool: Pool,
        registry: &Registry,
    ) -> Result<(DefragHeap, RecoveryReport), DefragError> {
        DefragHeap::open_with(pool, registry, |pool, start| {
            // SAFETY: open_with gives the allocator its region alone.
            unsafe { PageAllocator::open(pool, start) }
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
        Ok(DefragHeap {
            tx,
            registry: registry.clone(),
            root,
            shared: Mutex::new(Shared::default()),
        })
    }

    /// As [`DefragHeap::open`], with the allocator `open` recovers (see
    /// [`TxHeap::open_with`]).
    pub fn open_with(
        pool: Pool,
        registry: &Registry,
        open: impl FnOnce(Arc<Pool>, u64) -> Result<A, AllocError>,
    ) -> Result<(DefragHeap<A>, RecoveryReport), DefragError> {
        registry.validate()?;
        let root = pool.root::<HeapRoot>()?;
        // FFCCD's moves on ADR are decided from the reached bitmap before the
        // transactions are recovered (their undo and redo records land on the
        // copies as the program left them).
        let mut pool = pool;
        crate::reached::recover(&mut pool)?;
        let (tx, report) = TxHeap::open_with(pool, open)?;
        let r: HeapRoot = tx.pool().read(root)?;
        if r.magic != HEAP_MAGIC {
            return Err(DefragError::NotFormatted);
        }
        let header: TableHeader = tx.pool().read(PPtr::from_offset(r.type_table))?;
        let table = tx
            .pool()
            .bytes(r.type_table + 32, header.len)
            .map_err(|_| DefragError::Corrupt("type table outside the pool".into()))?;
        if header.magic != TABLE_MAGIC || header.crc != crc(table) {
            return Err(DefragError::Corrupt("type table checksum mismatch".into()));
        }
        let stored = Registry::decode(table)
            .ok_or_else(|| DefragError::Corrupt("type table malformed".into()))?;
        for t in stored.types() {
            match registry.get(t.id) {
                Some(mine) if mine.size == t.size && mine.pointers == t.pointers => {}
                Some(mine) => {
                    return Err(DefragError::Registry(format!(
                        "type {} ({}) is stored with {} bytes and pointers {:?}, the program has {} bytes and {:?}",
                        t.id, t.name, t.size, t.pointers, mine.size, mine.pointers
                    )))
                }
                None => {
                    return Err(DefragError::Registry(format!(
                        "type {} ({}) is stored in the heap but not registered",
                        t.id, t.name
                    )))
                }
            }
        }
        let pages = scan_pages(&tx)?;
        let heap = DefragHeap {
            tx,
            registry: registry.clone(),
            root,
            shared: Mutex::new(Shared {
                pages,
                active: None,
                stale: false,
                releasing: false,
            }),
        };
        // An interrupted compaction is finished before anyone sees the heap.
        heap.finish_compaction()?;
        Ok((heap, report))
    }

    /// Takes the heap lock (fair hand-offs: see [`DefragHeap::unlock_fair`]).
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, Shared>, DefragError> {
        let mut g = self.shared.lock();
        Self::refresh(&self.tx, &mut g)?;
        Ok(g)
    }

    /// Rebuilds the page index after a panic unwound through a transaction.
    fn refresh(tx: &TxHeap<A>, shared: &mut Shared) -> Result<(), DefragError> {
        if shared.stale {
            let mut pages = scan_pages(tx)?;
            for &p in &shared.pages.excluded {
                pages.exclude(p, true);
            }
            pages.freed_in_excluded = std::mem::take(&mut shared.pages.freed_in_excluded);
            shared.pages = pages;
            shared.stale = false;
        }
        Ok(())
    }

    /// Releases the heap lock to a waiting thread, if any, rather than letting
    /// the caller take it again at once (the defragmenter's batches, so a mutator
    /// waits for one batch at most).
    pub(crate) fn unlock_fair(g: MutexGuard<'_, Shared>) {
        MutexGuard::unlock_fair(g);
    }

    /// Runs `f` as one crash-atomic transaction (undo logging). An `Err` or a panic
    /// rolls it back. Threads' transactions run one at a time (the heap lock); a
    /// concurrent compaction's defragmenter runs beside them.
    pub fn transaction<R>(
        &self,
        f: impl FnOnce(&mut DefragTx<'_, '_>) -> Result<R, DefragError>,
    ) -> Result<R, DefragError> {
        let mut g = self.lock()?;
        self.transaction_locked(&mut g, TxOptions::new(), f)
    }

    /// Runs `f` as one transaction with pmem-core's `opts` (mode, hint). Through
    /// `&mut self`, so every mode is open to it, `LogMode::Lazy` included.
    pub fn transaction_with<R>(
        &mut self,
        opts: TxOptions,
        f: impl FnOnce(&mut DefragTx<'_, '_>) -> Result<R, DefragError>,
    ) -> Result<R, DefragError> {
        let shared = self.shared.get_mut();
        Self::refresh(&self.tx, shared)?;
        shared.stale = true;
        let failure: RefCell<Option<DefragError>> = RefCell::new(None);
        let touched: RefCell<Vec<u64>> = RefCell::new(Vec::new());
        let (registry, root) = (&self.registry, self.root);
        // `&mut self`: no compaction can be active (its handle borrows the heap).
        let result = self.tx.transaction_with(opts, |tx| {
            let mut d = DefragTx {
                tx,
                registry,
                root,
                pages: &mut shared.pages,
                active: None,
                touched: &touched,
                heals_left: HEALS_PER_TX,
            };
            f(&mut d).map_err(|e| {
                *failure.borrow_mut() = Some(e);
                TxError::Aborted("defrag transaction failed".into())
            })
        });
        settle(&self.tx, shared, result, failure, touched)
    }

    /// Runs a transaction under the heap lock the caller holds.
    pub(crate) fn transaction_locked<R>(
        &self,
        shared: &mut Shared,
        opts: TxOptions,
        f: impl FnOnce(&mut DefragTx<'_, '_>) -> Result<R, DefragError>,
    ) -> Result<R, DefragError> {
        let failure: RefCell<Option<DefragError>> = RefCell::new(None);
        let touched: RefCell<Vec<u64>> = RefCell::new(Vec::new());
        let (registry, root) = (&self.registry, self.root);
        shared.stale = true;
        let Shared { pages, active, .. } = shared;
        let active = active.as_deref();
        // SAFETY: the caller holds the heap lock, which every transaction and every
        // read of the heap takes, so no other transaction or reader is running. The
        // only writer without the lock is a concurrent compaction's defragmenter: it
        // writes destination slots of moves not yet published and the forward words
        // of their sources, which no transaction reads or writes while the
        // compaction is active (every object access goes through the barrier, which
        // waits for a move to be published).
        let result = unsafe {
            self.tx.transaction_shared(opts, |tx| {
                let mut d = DefragTx {
                    tx,
                    registry,
                    root,
                    pages: &mut *pages,
                    active: active.map(|a| (a, self.tx.pool())),
                    touched: &touched,
                    heals_left: HEALS_PER_TX,
                };
                f(&mut d).map_err(|e| {
                    *failure.borrow_mut() = Some(e);
                    TxError::Aborted("defrag transaction failed".into())
                })
            })
        }
        .map(|(r, _)| r);
        settle(&self.tx, shared, result, failure, touched)
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
    pub fn read<T: PersistentType>(&self, p: PPtr<T>) -> Result<T, DefragError> {
        let g = self.lock()?;
        let at = resolve(self.tx.pool(), g.active.as_deref(), p.offset())?;
        self.check_object(&g.pages, at, Some(T::TYPE_ID))?;
        Ok(self.tx.pool().read(PPtr::from_offset(at))?)
    }

    /// The root called `name` (null if unset), which must point to a `T`.
    pub fn root<T: PersistentType>(&self, name: &str) -> Result<PPtr<T>, DefragError> {
        let g = self.lock()?;
        let r: HeapRoot = self.tx.pool().read(self.root)?;
        let key = root_key(name)?;
        let ptr = r.roots.iter().find(|s| s.name == key).map_or(0, |s| s.ptr);
        if ptr == 0 {
            return Ok(PPtr::null());
        }
        let at = resolve(self.tx.pool(), g.active.as_deref(), ptr)?;
        self.check_object(&g.pages, at, Some(T::TYPE_ID))?;
        Ok(PPtr::from_offset(at))
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
    shared: &mut Shared,
    result: Result<R, TxError>,
    failure: RefCell<Option<DefragError>>,
    touched: RefCell<Vec<u64>>,
) -> Result<R, DefragError> {
    shared.stale = false;
    match result {
        Ok(r) => Ok(r),
        Err(e) => {
            reload_pages(tx, &mut shared.pages, &touched.into_inner())?;
            Err(failure.into_inner().unwrap_or(DefragError::Tx(e)))
        }
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
fn scan_pages<A: PersistentAllocator + 'static>(tx: &TxHeap<A>) -> Result<Pages, DefragError> {
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

/// The read barrier's resolution outside a transaction: `obj`, or where its
/// authoritative copy is during a compaction (moving it first if needed).
fn resolve(pool: &Pool, active: Option<&Active>, obj: u64) -> Result<u64, DefragError> {
    match active {
        None => Ok(obj),
        Some(a) => a.resolve(pool, obj),
    }
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

fn page_info(page: u64, h: &PageHeader) -> Result<PageInfo, DefragError> {
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

/// The handle of a running heap transaction: typed allocation, free, reads, writes
/// and roots, all crash-atomic together.
pub struct DefragTx<'t, 'a> {
    tx: &'t mut Tx<'a>,
    registry: &'t Registry,
    root: PPtr<HeapRoot>,
    pages: &'t mut Pages,
    /// The active compaction (and the pool its barrier moves objects in).
    active: Option<(&'t Active, &'t Pool)>,
    touched: &'t RefCell<Vec<u64>>,
    /// Pointer words this transaction may still heal in place (word records).
    heals_left: u32,
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

    /// Enters a slab page this transaction formatted into the DRAM index.
    pub(crate) fn add_page(&mut self, page: u64, h: &PageHeader) {
        self.touched.borrow_mut().push(page);
        self.pages.put(
            page,
            PageInfo {
                slot: u64::from(h.slot),
                capacity: u64::from(h.capacity),
                used: u64::from(h.used),
                bytes: h.bytes,
            },
        );
    }

    /// Takes a page this transaction frees out of the DRAM index.
    pub(crate) fn drop_page(&mut self, page: u64) {
        self.touched.borrow_mut().push(page);
        self.pages.remove(page);
    }

    /// Allocates a zeroed `T`.
    pub fn alloc<T: PersistentType>(&mut self) -> Result<PPtr<T>, DefragError> {
        let desc = self
            .registry
            .get(T::TYPE_ID)
            .ok_or(DefragError::Unregistered(T::TYPE_ID))?;
        let size = u64::from(desc.size);
        let (slot, bytes, capacity) = class_of(size);
        let page = match self.pages.with_room(slot) {
            Some(p) => p,
            None => {
                // Not zeroed: the header below says which slots hold data, and
                // an object is written whole when its slot is allocated.
                let p = self.tx.alloc_uninit(bytes)?.offset();
                let h = PageHeader {
                    magic: PAGE_MAGIC,
                    slot: slot as u32,
                    capacity: capacity as u32,
                    used: 0,
                    bytes,
                    ..PageHeader::default()
                };
                self.tx.write(PPtr::from_offset(p), &h)?;
                self.pages.put(
                    p,
                    PageInfo {
                        slot,
                        capacity,
                        used: 0,
                        bytes,
                    },
                );
                p
            }
        };
        self.touched.borrow_mut().push(page);
        let mut h: PageHeader = self.tx.read(PPtr::from_offset(page))?;
        let i = h.first_free().ok_or_else(|| {
            DefragError::Corrupt(format!("page {page:#x} indexed as free is full"))
        })?;
        h.set(i, true);
        h.used += 1;
        self.tx.write(PPtr::from_offset(page), &h)?;
        let at = page + PAGE_HEADER + i * slot;
        let oh = ObjHeader {
            type_id: T::TYPE_ID,
            size: size as u32,
            forward: 0,
        };
        self.tx.write(PPtr::from_offset(at), &oh)?;
        self.tx
            .write_bytes(at + OBJ_HEADER, &vec![0; size as usize])?;
        self.pages.put(
            page,
            PageInfo {
                slot,
                capacity,
                used: u64::from(h.used),
                bytes,
            },
        );
        Ok(PPtr::from_offset(at + OBJ_HEADER))
    }

    /// Frees the object at `obj` whatever its type, through the barrier (the
    /// planning's commit frees again the sources freed while it ran).
    pub(crate) fn free_any(&mut self, obj: u64) -> Result<(), DefragError> {
        let at = self.barrier(obj)?;
        let oh: ObjHeader = self.tx.read(PPtr::from_offset(at - OBJ_HEADER))?;
        self.free_object(at, oh.type_id)
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
        let (page, i) = locate(self.pages, obj)?;
        self.touched.borrow_mut().push(page);
        let mut h: PageHeader = self.tx.read(PPtr::from_offset(page))?;
        let oh: ObjHeader = self.tx.read(PPtr::from_offset(obj - OBJ_HEADER))?;
        check_slot(obj, &h, i, &oh, Some(type_id), "a free slot (double free?)")?;
        h.set(i, false);
        h.used -= 1;
        let info = self
            .pages
            .all
            .get(&page)
            .copied()
            .ok_or(DefragError::NotAnObject {
                offset: obj,
                reason: "not in a slab page",
            })?;
        // A relocation page of a compaction being planned stays, empty, until
        // the compaction releases it (its plan names it).
        let excluded = self.pages.excluded.contains(&page);
        if excluded {
            self.pages.freed_in_excluded.insert(page);
        }
        if h.used == 0 && !excluded {
            self.tx.free(PPtr::from_offset(page), info.bytes)?;
            self.pages.remove(page);
        } else {
            self.tx.write(PPtr::from_offset(page), &h)?;
            self.pages.put(
                page,
                PageInfo {
                    used: u64::from(h.used),
                    ..info
                },
            );
        }
        Ok(())
    }

    /// Reads the `T` at `p` as this transaction sees it. During a compaction the
    /// pointers it holds come back translated to their objects' new places; for
    /// the first few objects of a transaction they are healed in the object too,
    /// as part of this transaction (a bounded number, so reading cannot fill the
    /// log).
    pub fn read<T: PersistentType>(&mut self, p: PPtr<T>) -> Result<T, DefragError> {
        let at = self.barrier(p.offset())?;
        let p = PPtr::<T>::from_offset(at);
        self.check::<T>(p)?;
        let mut value: T = self.tx.read(p)?;
        if self.active.is_none() {
            return Ok(value);
        }
        let changed = self.translate::<T>(value.as_mut_bytes())?;
        if changed > 0 && changed <= self.heals_left {
            self.heals_left -= changed;
            let hint = self.tx.hint();
            self.tx.set_hint(Hint::Word);
            // Only the words that changed: each is one word record.
            let healed = T::POINTERS.iter().try_for_each(|f| {
                let o = f.offset as usize;
                let field = &value.as_bytes()[o..o + 8];
                let word = PPtr::<u64>::from_offset(at + u64::from(f.offset));
                if self.tx.read(word)?.to_le_bytes() == field {
                    return Ok(());
                }
                self.tx.write_bytes(word.offset(), field)
            });
            self.tx.set_hint(hint);
            healed?;
        }
        Ok(value)
    }

    /// Writes `value` at `p`, a live `T`. During a compaction the pointers written
    /// are translated to their objects' new places.
    pub fn write<T: PersistentType>(&mut self, p: PPtr<T>, value: &T) -> Result<(), DefragError> {
        let at = self.barrier(p.offset())?;
        let p = PPtr::<T>::from_offset(at);
        self.check::<T>(p)?;
        if self.active.is_some() {
            let mut bytes = value.as_bytes().to_vec();
            self.translate::<T>(&mut bytes)?;
            return Ok(self.tx.write_bytes(at, &bytes)?);
        }
        Ok(self.tx.write(p, value)?)
    }

    fn check<T: PersistentType>(&mut self, p: PPtr<T>) -> Result<(), DefragError> {
        let (page, i) = locate(self.pages, p.offset())?;
        let h: PageHeader = self.tx.read(PPtr::from_offset(page))?;
        let oh: ObjHeader = self.tx.read(PPtr::from_offset(p.offset() - OBJ_HEADER))?;
        check_slot(p.offset(), &h, i, &oh, Some(T::TYPE_ID), "a free slot")
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
        let r: HeapRoot = self.tx.read(self.root)?;
        let i = r
            .roots
            .iter()
            .position(|s| s.name == key)
            .or_else(|| r.roots.iter().position(|s| s.name == [0; ROOT_NAME]))
            .ok_or(DefragError::RootsFull)?;
        self.write_root_slot(i, key, p.offset())
    }

    fn write_root_slot(
        &mut self,
        i: usize,
        name: [u8; ROOT_NAME],
        ptr: u64,
    ) -> Result<(), DefragError> {
        let at = self.root.offset() + 16 + i as u64 * std::mem::size_of::<RootSlot>() as u64;
        let slot = RootSlot { name, ptr };
        self.tx.write(PPtr::<RootSlot>::from_offset(at), &slot)?;
        Ok(())
    }

    /// The root `name` as this transaction sees it (null if unset); during a
    /// compaction the root is healed.
    pub fn root<T: PersistentType>(&mut self, name: &str) -> Result<PPtr<T>, DefragError> {
        let key = root_key(name)?;
        let r: HeapRoot = self.tx.read(self.root)?;
        let Some(i) = r.roots.iter().position(|s| s.name == key) else {
            return Ok(PPtr::null());
        };
        let old = r.roots[i].ptr;
        if old == 0 {
            return Ok(PPtr::null());
        }
        let p = PPtr::from_offset(self.barrier(old)?);
        if p.offset() != old {
            self.write_root_slot(i, key, p.offset())?;
        }
        self.check::<T>(p)?;
        Ok(p)
    }
}
