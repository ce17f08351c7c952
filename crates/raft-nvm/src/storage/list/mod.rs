//! The thesis's store: the Raft log and the state machine as one persistent,
//! append-only singly linked list of records in pages of about 1 KiB, indexed by a
//! DRAM `BTreeMap<(key, index), location>`.
//!
//! * **Append** writes the record after the tail page's last record (or into a fresh
//!   page linked from the tail) and publishes its location in the index; nothing is
//!   flushed. A value too large for one page goes into fragment records followed by
//!   a small record naming them (module `large`), so values of up
//!   to about `(page / 8)` pages are stored.
//! * **Sync** (every [`StoreOptions::group`] appends, on the optional timer, or when
//!   asked) flushes only the bytes written since the previous sync, with the
//!   `durable_tail` hint set to where the previous sync ended, and fences **once**
//!   (one `msync` of the file in msync mode). Every record's checksum is seeded with
//!   its page's generation, so recovery reads on past the hint exactly as far as
//!   this generation's records are intact: what survives a crash is always a prefix
//!   of what was appended that includes every synced record.
//! * **Compaction** ([`Store::compact`]) rewrites the durable pages before the tail page into
//!   fresh pages holding only live records, links them to the rest of the list and
//!   switches `head` with one 8-byte store; the old pages are reused only after the
//!   index no longer points into them.
//! * **Recovery** ([`ListStore::open`]) walks the list from `head`, verifying every
//!   record's checksum, and rebuilds the index, the Raft metadata and the free list.
//!
//! The on-media layout (control block, page headers, records; module `layout` in
//! the source) is private: a pool is read and written only through [`ListStore`].
//! Crash semantics are proven by `tests/list_crash.rs`.

pub(crate) mod layout;

mod append;
mod compact;
mod inspect;
pub(crate) mod large;
mod persist;
mod recover;
mod snapshot;

#[cfg(feature = "mutation")]
#[doc(hidden)]
pub use persist::set_mutant;
#[doc(hidden)]
pub use persist::Site;

pub use inspect::ListSummary;
pub use layout::LAYOUT;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pmem_core::{ModeRequest, PPtr, Pool, PoolOptions};
use zerocopy::IntoBytes;

use crate::storage::error::{Result, StoreError};
use crate::storage::index::Index;
use crate::storage::record::{decode_unverified, Kind, RecordHeader, HEADER_LEN};
use crate::storage::store::{
    CompactStats, HardState, LogEntry, Op, OwnedOp, SnapshotItem, SnapshotMeta, Store,
    StoreOptions, StoreUsage, Version,
};
use crate::storage::sync::{lock, read, AtomicU64, Mutex, Ordering, RwLock};

use crate::storage::ticker::Ticker;
use append::Tail;
use layout::{ControlBlock, Loc, MAX_PAGE, MIN_PAGE, PAGE_HEADER};

/// Options of a list store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListOptions {
    /// Group durability and the sync timer.
    pub store: StoreOptions,
    /// Bytes per page (the thesis: about 1 KiB). Used at creation only.
    pub page_size: u32,
    /// How the pool is mapped.
    pub mode: ModeRequest,
    /// A background thread compacts this often (`None`: only [`Store::compact`]).
    pub compact_interval: Option<Duration>,
    /// A background thread keeps this many of the pages the writer will take next
    /// mapped writable ([`pmem_core::Pool::prefault`]), so appends into fresh pages
    /// take no page fault on the writer's path (0: none, the default). On a
    /// page-cache file the prefaulted pages are dirty until written back.
    pub prefault_pages: u32,
}

impl Default for ListOptions {
    fn default() -> Self {
        ListOptions {
            store: StoreOptions::default(),
            page_size: 1024,
            mode: ModeRequest::Auto,
            compact_interval: None,
            prefault_pages: 0,
        }
    }
}

/// Page geometry, fixed at creation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub page_size: u32,
    pub page_count: u32,
    pub pages_off: u64,
}

impl Geometry {
    pub fn page_off(&self, page: u32) -> u64 {
        self.pages_off + u64::from(page) * u64::from(self.page_size)
    }

    /// The page holding pool offset `off` (`u32::MAX` if it is none).
    pub fn page_of(&self, off: u64) -> u32 {
        off.checked_sub(self.pages_off)
            .map(|rel| rel / u64::from(self.page_size))
            .and_then(|p| u32::try_from(p).ok())
            .unwrap_or(u32::MAX)
    }
}

/// State shared by the store's handle, its timer thread and compaction.
pub(crate) struct Shared {
    pub pool: Pool,
    pub cb: PPtr<ControlBlock>,
    pub geo: Geometry,
    pub opts: StoreOptions,
    pub tail: Mutex<Tail>,
    pub index: RwLock<Index<Loc>>,
    /// Snapshot streams hold it shared; compaction takes it exclusively.
    pub gc_gate: RwLock<()>,
    pub compaction: Mutex<()>,
    /// Held by a sync from start to end (see `Shared::sync_with`): one at a time.
    pub sync_lock: Mutex<()>,
    pub hard: Mutex<HardState>,
    pub durable_index: AtomicU64,
    /// Syncs that published a new durable tail.
    pub syncs: AtomicU64,
}

/// The persistent-list engine. Share it between threads in an `Arc`: every method
/// takes `&self`.
///
/// Dropping the store stops its background threads but does not sync: appends
/// since the last sync are lost exactly as in a crash. Call [`ListStore::close`] (or
/// [`Store::sync`]) to keep them.
pub struct ListStore {
    shared: Arc<Shared>,
    /// The sync timer and the background compactor, when configured.
    tickers: Vec<Ticker>,
}

impl std::fmt::Debug for ListStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListStore")
            .field("path", &self.shared.pool.path())
            .field("mode", &self.shared.pool.mode())
            .field("page_size", &self.shared.geo.page_size)
            .field("page_count", &self.shared.geo.page_count)
            .finish()
    }
}

/// The epoch word of the list pool `pool`'s control block: the high half of every
/// page generation the last open took. For crash suites that check, on a crash
/// image, that an open made its epoch durable before any record of its run; reads
/// only.
///
/// # Errors
///
/// The pool's, if it has no root object.
pub fn pool_epoch(pool: &Pool) -> Result<u64> {
    let cb_ptr: PPtr<ControlBlock> = pool.root()?;
    let cb: ControlBlock = pool.read(cb_ptr)?;
    Ok(cb.epoch)
}

impl ListStore {
    /// Creates a pool file of `size` bytes at `path` and formats an empty store in it.
    pub fn create(path: impl AsRef<Path>, size: u64, opts: &ListOptions) -> Result<ListStore> {
        let pool = Pool::create(path, &Self::pool_options(size, opts))?;
        Self::format(pool, opts)
    }

    /// Opens the store at `path`, rebuilding the index by walking the list.
    pub fn open(path: impl AsRef<Path>, opts: &ListOptions) -> Result<ListStore> {
        Self::open_checked(path, opts, &mut |_| Ok(()))
    }

    /// [`ListStore::open`], calling `check` on the recovered store before anything
    /// is written to the pool (an open writes the new epoch), so a caller that
    /// refuses what it finds (a node checking its Raft facts) leaves the file byte
    /// for byte as it was. `check` must only read. Anything at `path` but a
    /// regular file is refused before it is opened ([`StoreError::NotRegular`]);
    /// damage is [`StoreError::Corrupt`], its message naming the file.
    pub fn open_checked(
        path: impl AsRef<Path>,
        opts: &ListOptions,
        check: &mut dyn FnMut(&dyn Store) -> Result<()>,
    ) -> Result<ListStore> {
        let path = path.as_ref();
        crate::storage::ondisk::regular_file(path)?;
        let pool = Pool::open_with(
            path,
            &pmem_core::OpenOptions::new().layout(LAYOUT).mode(opts.mode),
        )?;
        let (shared, settle) = recover::recover(pool, &opts.store).map_err(|e| match e {
            StoreError::Corrupt(msg) => StoreError::Corrupt(format!("{}: {msg}", path.display())),
            e => e,
        })?;
        // Not started: no timer or compactor thread writes while `check` looks.
        let unsettled = ListStore {
            shared: Arc::new(shared),
            tickers: Vec::new(),
        };
        check(&unsettled)?;
        recover::settle(&unsettled.shared.pool, unsettled.shared.cb, &settle)?;
        Ok(Self::start(
            unsettled.shared,
            opts.compact_interval,
            opts.prefault_pages,
        ))
    }

    /// Grows the (closed) store at `path` to a pool of `new_size` bytes, offline
    /// and crash-safely: a grown copy is built beside it and renamed over it (see
    /// [`pmem_core::grow_pool`]), with the control block's page count raised to
    /// what the larger heap holds; recovery then finds the new pages free. The
    /// store's contents, page size and durability are unchanged. Fails (leaving the
    /// file as it was) if the store is open, corrupt, or `new_size` is not larger.
    pub fn grow(path: impl AsRef<Path>, new_size: u64) -> Result<()> {
        let path = path.as_ref();
        let adapted = pmem_core::grow_pool(path, LAYOUT, new_size, |pool, _| -> Result<()> {
            let cb_ptr: PPtr<ControlBlock> = pool.root()?;
            let mut cb: ControlBlock = pool.read(cb_ptr)?;
            // Magic, version, checksum, and a page size and count that fit: a
            // page size of 0 was once divided by here.
            recover::geometry(&cb, pool)?;
            let pages = (pool.heap().end.saturating_sub(cb.pages_off)) / u64::from(cb.page_size);
            let pages = pages.min(u64::from(u32::MAX));
            if pages < cb.page_count {
                return Err(StoreError::Corrupt(format!(
                    "the grown heap holds {pages} pages, fewer than the store's {}",
                    cb.page_count
                )));
            }
            cb.page_count = pages;
            cb.geometry_crc = cb.compute_geometry_crc();
            // SAFETY: the pool is the grown copy, opened by `grow_pool` for this
            // call only: nothing else maps it.
            unsafe { pool.write_bytes_shared(cb_ptr.offset(), &cb.as_bytes()[..40])? };
            pool.persist(cb_ptr.offset(), 40)?;
            Ok(())
        });
        adapted.map_err(|e| match e {
            pmem_core::GrowError::Pool(p) => StoreError::Pool(p),
            pmem_core::GrowError::Adapt(s) => s,
        })
    }

    /// The pool options a store of `size` bytes is created with (for callers that
    /// create the pool themselves, such as crash tests on simulated pools).
    pub fn pool_options(size: u64, opts: &ListOptions) -> PoolOptions {
        PoolOptions::new(LAYOUT, size)
            .root::<ControlBlock>()
            .mode(opts.mode)
    }

    /// Formats an empty store in a pool created with [`ListStore::pool_options`].
    pub fn format(pool: Pool, opts: &ListOptions) -> Result<ListStore> {
        recover::write_format(&pool, opts)?;
        let store = Self::recover(pool, opts)?;
        // The first page was written whole, header and zeros: appending into it
        // cannot meet bytes of its own generation (recovery cannot know that).
        lock(&store.shared.tail).must_advance = false;
        Ok(store)
    }

    /// Writes an empty store's format into `pool` without opening it (for callers
    /// that format a pool, then hand it over, such as crash-test setups).
    pub fn write_format(pool: &Pool, opts: &ListOptions) -> Result<()> {
        recover::write_format(pool, opts)
    }

    /// Opens the store in `pool`, rebuilding its DRAM state.
    pub fn recover(pool: Pool, opts: &ListOptions) -> Result<ListStore> {
        let (shared, settle) = recover::recover(pool, &opts.store)?;
        recover::settle(&shared.pool, shared.cb, &settle)?;
        Ok(Self::start(
            Arc::new(shared),
            opts.compact_interval,
            opts.prefault_pages,
        ))
    }

    fn start(shared: Arc<Shared>, compact_interval: Option<Duration>, prefault: u32) -> ListStore {
        let mut tickers = Vec::new();
        if let Some(every) = shared.opts.sync_interval {
            let s = Arc::clone(&shared);
            tickers.push(Ticker::start("raft-nvm-sync", every, move || {
                if let Err(e) = s.sync() {
                    tracing::error!(error = %e, "timed sync failed");
                }
            }));
        }
        if let Some(every) = compact_interval {
            let s = Arc::clone(&shared);
            tickers.push(Ticker::start(
                "raft-nvm-compact",
                every,
                move || match compact::compact(&s, u64::MAX) {
                    Ok(stats) if stats.freed > 0 => {
                        tracing::debug!(?stats, "background compaction")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::error!(error = %e, "background compaction failed"),
                },
            ));
        }
        if prefault > 0 {
            let s = Arc::clone(&shared);
            let mut ahead = Prefaulter::new(s.geo.page_count, prefault);
            tickers.push(Ticker::start(
                "raft-nvm-prefault",
                PREFAULT_EVERY,
                move || ahead.run(&s),
            ));
        }
        ListStore { shared, tickers }
    }

    /// The pool the store lives in.
    pub fn pool(&self) -> &Pool {
        &self.shared.pool
    }

    /// Pages in the used list and on the free list, in order (for checks and stats).
    /// While a compaction runs, the pages it is filling are on neither list.
    pub fn page_lists(&self) -> (Vec<u32>, Vec<u32>) {
        let t = lock(&self.shared.tail);
        (t.pages.iter().copied().collect(), t.free.clone())
    }

    /// How many syncs (explicit, by group or by timer) published a new durable tail.
    pub fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Acquire)
    }

    /// Records appended (entries, rollbacks, fragments) that no finished sync has
    /// covered yet: for tests of syncs that run beside appends.
    #[doc(hidden)]
    pub fn unsynced_records(&self) -> u32 {
        lock(&self.shared.tail).unsynced
    }

    /// Total pages of the pool.
    pub fn page_count(&self) -> u32 {
        self.shared.geo.page_count
    }

    /// Number of versions in the index (all keys, all timestamps).
    pub fn versions(&self) -> usize {
        read(&self.shared.index).versions()
    }

    /// Every visible key and value at `at`, in key order (for tests and tools).
    pub fn dump(&self, at: u64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let index = read(&self.shared.index);
        let mut out = Vec::new();
        for (k, loc) in index.visible_chunk(None, at, usize::MAX) {
            let (key, _) = crate::storage::index::split_vkey(&k);
            out.push((key.to_vec(), self.shared.read_value(loc)?));
        }
        Ok(out)
    }

    /// [`Store::sync`], running `between` after the sync's flushes and before its
    /// fence, without the tail lock, where appends and truncations of other
    /// threads may run: for tests that interleave them deterministically (the
    /// crash suites). What `between` appends is not promised durable.
    #[doc(hidden)]
    pub fn sync_with(&self, between: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        self.shared.sync_with(between)
    }

    /// Stops the background threads (if any), makes every append durable and
    /// records the exact end as the `durable_tail` hint (so the next open reads
    /// nothing past it and any damaged record is reported rather than cut).
    pub fn close(mut self) -> Result<()> {
        for t in &mut self.tickers {
            t.stop();
        }
        self.shared.sync()?;
        self.shared.publish_hint()
    }
}

/// How often the prefaulter looks at the free list.
const PREFAULT_EVERY: Duration = Duration::from_millis(2);

/// The prefaulter's state: which pages it has mapped (a page, once written, stays
/// mapped; the kernel may evict it, which only costs a fault again).
struct Prefaulter {
    done: Vec<bool>,
    ahead: usize,
}

impl Prefaulter {
    fn new(pages: u32, ahead: u32) -> Prefaulter {
        Prefaulter {
            done: vec![false; pages as usize],
            ahead: ahead as usize,
        }
    }

    /// Maps the next `ahead` pages of the free list (the writer takes them from its
    /// end) that are not mapped yet, in runs of adjacent pages.
    fn run(&mut self, s: &Shared) {
        let mut next: Vec<u32> = {
            let t = lock(&s.tail);
            t.free.iter().rev().take(self.ahead).copied().collect()
        };
        next.retain(|&p| !self.done[p as usize]);
        next.sort_unstable();
        let page = u64::from(s.geo.page_size);
        let mut i = 0;
        while i < next.len() {
            let mut j = i + 1;
            while j < next.len() && next[j] == next[j - 1] + 1 {
                j += 1;
            }
            let (first, n) = (next[i], (j - i) as u64);
            match s.pool.prefault(s.geo.page_off(first), n * page) {
                Ok(_) => next[i..j]
                    .iter()
                    .for_each(|&p| self.done[p as usize] = true),
                Err(e) => tracing::debug!(error = %e, "prefault failed"),
            }
            i = j;
        }
    }
}

impl Shared {
    /// The bytes of the record at pool offset `off` (header, key and value; its
    /// lengths are bounds-checked against the pool, its checksum is not verified).
    fn record_bytes(&self, off: u64) -> Result<&[u8]> {
        let h: RecordHeader = self.pool.read(PPtr::from_offset(off))?;
        let len = HEADER_LEN as u64 + u64::from(h.key_len) + u64::from(h.value_len);
        Ok(self.pool.bytes(off, len)?)
    }

    /// Copies the value of the record at `loc` (assembling a large one from its
    /// fragments).
    pub fn read_value(&self, loc: Loc) -> Result<Vec<u8>> {
        let bytes = self.record_bytes(loc.offset())?;
        let value = crate::storage::record::value_of(bytes).ok_or_else(|| {
            StoreError::Corrupt(format!("record at offset {} is cut short", loc.offset()))
        })?;
        let h: RecordHeader = self.pool.read(PPtr::from_offset(loc.offset()))?;
        if h.kind == Kind::PutLarge as u8 {
            return self.large_value(h.index, value);
        }
        Ok(value.to_vec())
    }
}

impl Store for ListStore {
    fn engine(&self) -> &'static str {
        "list"
    }

    fn max_payload(&self) -> usize {
        let max = max_record(self.shared.geo.page_size) & !7;
        usize::try_from(max).unwrap_or(usize::MAX) - crate::storage::record::HEADER_LEN
    }

    fn fits(&self, key_len: usize, value_len: usize) -> bool {
        key_len.saturating_add(value_len) <= self.max_payload()
            || (key_len + crate::storage::record::HEADER_LEN + 64 <= self.max_payload()
                && value_len <= large::max_large_value(self.shared.geo.page_size, key_len))
    }

    fn append(&self, index: u64, term: u64, op: Op<'_>) -> Result<()> {
        self.shared.append(index, term, op)
    }

    fn append_batch(&self, entries: &[(u64, u64, Op<'_>)]) -> Result<()> {
        self.shared.append_batch(entries)
    }

    fn truncate_after(&self, after: u64, term: u64) -> Result<()> {
        self.shared.truncate_after(after, term)
    }

    fn sync(&self) -> Result<()> {
        self.shared.sync()
    }

    fn sync_waits_for_io(&self) -> bool {
        self.shared.pool.mode() == pmem_core::DurabilityMode::Msync
    }

    fn get(&self, key: &[u8], at: u64) -> Result<Option<Vec<u8>>> {
        let index = read(&self.shared.index);
        match index.get(key, at) {
            // The value is copied while the index is read-locked: compaction cannot
            // retire the page under us (it remaps under the write lock first).
            Some(&loc) => self.shared.read_value(loc).map(Some),
            None => Ok(None),
        }
    }

    fn latest(&self, key: &[u8]) -> Result<Option<Version>> {
        use crate::storage::index::Version as _;
        let index = read(&self.shared.index);
        match index.version_at(key, u64::MAX) {
            Some((at, &loc)) if loc.is_tombstone() => Ok(Some(Version {
                index: at,
                value: None,
            })),
            Some((at, &loc)) => Ok(Some(Version {
                index: at,
                value: Some(self.shared.read_value(loc)?),
            })),
            None => Ok(None),
        }
    }

    fn set_applied(&self, index: u64) {
        crate::storage::sync::write(&self.shared.index).set_applied(index);
    }

    fn applied(&self) -> u64 {
        read(&self.shared.index).applied()
    }

    fn last_index(&self) -> u64 {
        read(&self.shared.index).last_index()
    }

    fn last_term(&self) -> u64 {
        read(&self.shared.index).last_term()
    }

    fn durable_index(&self) -> u64 {
        self.shared.durable_index.load(Ordering::Acquire)
    }

    fn term_at(&self, index: u64) -> Option<u64> {
        read(&self.shared.index).term_at(index)
    }

    fn terms(&self, from: u64, to: u64) -> Option<Vec<u64>> {
        read(&self.shared.index).terms(from, to)
    }

    fn entry(&self, index: u64) -> Result<Option<LogEntry>> {
        let ix = read(&self.shared.index);
        let Some(meta) = ix.entry(index) else {
            return Ok(None);
        };
        if meta.loc == 0 {
            return Ok(None);
        }
        // Read while the index is locked: compaction cannot recycle the page.
        let bytes = self.shared.record_bytes(meta.loc)?;
        // Verified when it was indexed (recovery or append), like the read path.
        let (rec, _) =
            decode_unverified(bytes, &|| format!("entry {index} at offset {}", meta.loc))?;
        if rec.index != index {
            return Err(StoreError::Corrupt(format!(
                "entry {index}: the record at offset {} is entry {}",
                meta.loc, rec.index
            )));
        }
        let op = match rec.kind {
            Kind::Put => OwnedOp::Put {
                key: rec.key.to_vec(),
                value: rec.value.to_vec(),
            },
            Kind::PutLarge => OwnedOp::Put {
                key: rec.key.to_vec(),
                value: self.shared.large_value(index, rec.value)?,
            },
            Kind::Delete => OwnedOp::Delete {
                key: rec.key.to_vec(),
            },
            _ => OwnedOp::Noop,
        };
        Ok(Some(LogEntry {
            index,
            term: rec.term,
            op,
        }))
    }

    fn hard_state(&self) -> HardState {
        *lock(&self.shared.hard)
    }

    fn sync_clean(&self) -> Result<()> {
        self.shared.sync()?;
        self.shared.publish_hint()
    }

    fn set_hard_state(&self, hs: HardState) -> Result<()> {
        let word = hs.pack()?;
        let mut hard = lock(&self.shared.hard);
        // The checksum first, covering the word on media and the new one, fenced
        // before the word is written (see `layout`): no crash leaves a word it
        // does not vouch for.
        let previous = hard.pack()?;
        self.shared.store_control_word(
            layout::field::HARD_CHECK,
            layout::hard_check(word, previous),
            (persist::Site::HardCheckFlush, persist::Site::HardCheckFence),
        )?;
        self.shared.store_control_word(
            layout::field::HARD_STATE,
            word,
            (persist::Site::HardStateFlush, persist::Site::HardStateFence),
        )?;
        *hard = hs;
        Ok(())
    }

    fn compact(&self) -> Result<CompactStats> {
        compact::compact(&self.shared, u64::MAX)
    }

    fn compact_to(&self, limit: u64) -> Result<CompactStats> {
        compact::compact(&self.shared, limit)
    }

    fn usage(&self) -> StoreUsage {
        let page = u64::from(self.shared.geo.page_size);
        let (used_pages, free_pages, tail_room) = {
            let t = lock(&self.shared.tail);
            // Pages a running compaction is filling are on neither list: they count
            // as neither used nor free until it links or returns them.
            (
                t.pages.len() as u64,
                t.free.len() as u64,
                page.saturating_sub(u64::from(t.used)),
            )
        };
        StoreUsage {
            capacity: Some(u64::from(self.shared.geo.page_count) * page),
            used: used_pages * page,
            free: Some(free_pages * page + tail_room),
            versions: read(&self.shared.index).versions() as u64,
        }
    }

    fn snapshot(
        &self,
        at: u64,
    ) -> Result<(SnapshotMeta, crate::storage::store::SnapshotStream<'_>)> {
        snapshot::stream(&self.shared, at)
    }

    fn install_snapshot(
        &self,
        meta: SnapshotMeta,
        items: &mut dyn Iterator<Item = SnapshotItem>,
    ) -> Result<()> {
        snapshot::install(&self.shared, meta, items)
    }
}

/// Checks page-size bounds.
pub(crate) fn check_page_size(page_size: u32) -> Result<()> {
    if !(MIN_PAGE..=MAX_PAGE).contains(&page_size) || !page_size.is_multiple_of(64) {
        return Err(StoreError::Invalid(format!(
            "page size {page_size}: must be a multiple of 64 in {MIN_PAGE}..={MAX_PAGE}"
        )));
    }
    Ok(())
}

/// The largest record a page holds.
pub(crate) fn max_record(page_size: u32) -> u64 {
    u64::from(page_size - PAGE_HEADER)
}
