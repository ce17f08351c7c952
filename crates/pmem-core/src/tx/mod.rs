//! Crash-atomic transactions with hybrid (word/object) logging.
//!
//! A transaction groups writes, allocations and frees of a pool so that after a
//! crash at any point either all of them happened or none did. The log format is the
//! NVWA paper's *hybrid logging* (dual-use NVM, §3.2.2 and §4.3): a transaction
//! takes a [`Hint`] — [`Hint::Word`] logs each changed 8-byte word with 24 bytes of
//! metadata, [`Hint::Object`] (the default) logs a changed range as one object with
//! 32 bytes of metadata — and the word log and the object log live apart, each with
//! its metadata apart from its data; records carry a transaction id (TID). Undo and
//! redo logging are offered, and a *lazy* commit with one fence per transaction
//! ([`LogMode`]); the on-media layout is in the module `layout` (hidden: not an API
//! promise).
//!
//! ```
//! use pmem_core::tx::{Hint, TxGeometry, TxHeap, TxOptions};
//! use pmem_core::{PPtr, Pool, PoolOptions};
//!
//! # fn main() -> Result<(), pmem_core::tx::TxError> {
//! let pool = Pool::anonymous(&PoolOptions::new("tx-doc", 4 << 20))?;
//! let mut heap = TxHeap::create(pool, &TxGeometry::default(), 256)?;
//! // A two-word record, allocated and filled in one transaction.
//! let rec = heap.transaction(|tx| {
//!     let rec = tx.alloc(16)?.cast::<[u64; 2]>();
//!     tx.write(rec, &[7, 8])?;
//!     Ok(rec)
//! })?;
//! // An error (or a panic) in the closure rolls everything back.
//! let r: Result<(), _> = heap.transaction_with(TxOptions::new().hint(Hint::Word), |tx| {
//!     tx.write(rec, &[9, 9])?;
//!     Err(pmem_core::tx::TxError::Aborted("changed my mind".into()))
//! });
//! assert!(r.is_err());
//! assert_eq!(heap.pool().read(rec)?, [7, 8]);
//! # Ok(()) }
//! ```
//!
//! **Safety of the API.** [`TxHeap`] owns its pool: its transactions take `&mut
//! self`, its readers `&self`, so the borrow checker keeps every reader away from a
//! running transaction. Concurrent transactions (one *lane* of the log per running
//! transaction, as PMDK's lanes) go through [`TxHeap::transaction_shared`], which is
//! `unsafe`: the caller promises that no two threads touch the same bytes at once —
//! for example by holding a [`PMutex`] over the data, a lock that lives in the pool
//! and is free again whenever the pool is reopened.
//!
//! **Lanes.** A thread takes the lane it used last if that one is free, so threads
//! running side by side each keep a lane of their own and share no lock word; one
//! that finds every lane busy waits for one (a loom model checks the hand-off,
//! `RUSTFLAGS="--cfg loom" cargo test -p pmem-core --lib --release loom_tests`).
//! A lane's TID moves on only past a transaction that wrote to the lane: the floor
//! a reopening sets above every TID the last run could have used depends on it.
//!
//! **Recovery** runs when a heap or log is opened ([`TxHeap::open`],
//! [`TxLog::open`]): an uncommitted transaction is rolled back and its allocations
//! released; a committed one is finished (redo records applied, frees carried out).
//! Recovery is idempotent, and an abort in this run takes the same path.
//!
//! **NVM-write economy.** Every transaction's [`TxStats`] — log metadata and data
//! bytes, lines flushed, fences, from the core counters — is returned by
//! [`TxHeap::transaction_stats`] and kept as the heap's last.

mod inspect;
mod lanes;
#[doc(hidden)] // On-media layout: public for the crash suites, not an API promise.
pub mod layout;
pub(crate) mod lazy;
mod lock;
mod log;
#[doc(hidden)]
pub mod mutation;
mod ranges;
mod txn;
mod writeset;

use std::sync::Arc;

pub use inspect::TxHeapSummary;
pub use lock::{PMutex, PMutexGuard};
pub use log::{RecoveryReport, TxLog};
pub use txn::Tx;

use crate::alloc::{AllocError, PageAllocator, PersistentAllocator};
use crate::{Counters, Pool, PoolError};

/// How a transaction logs what it changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Hint {
    /// One record per changed 8-byte word (24 B of metadata each): cheapest for a
    /// few scattered words (counters, pointers).
    Word,
    /// One record per changed range (32 B of metadata): cheapest for objects.
    #[default]
    Object,
}

/// How an operation's transactions log what they change (the NVWA paper's
/// comparison of word, object and hybrid logging): the hint a container picks per
/// write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Logging {
    /// Every write with [`Hint::Word`].
    Word,
    /// Every write with [`Hint::Object`].
    Object,
    /// [`Hint::Word`] for single 8-byte words (heads, counts, links), and
    /// [`Hint::Object`] for anything larger.
    #[default]
    Hybrid,
}

impl Logging {
    /// The hint for a write of `len` bytes.
    pub fn hint_for(self, len: u64) -> Hint {
        match self {
            Logging::Word => Hint::Word,
            Logging::Object => Hint::Object,
            Logging::Hybrid if len <= 8 => Hint::Word,
            Logging::Hybrid => Hint::Object,
        }
    }
}

/// Undo or redo logging.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LogMode {
    /// Old bytes are logged before each first write, which then goes in place.
    #[default]
    Undo,
    /// New bytes are staged in DRAM, logged at commit, then applied in place.
    Redo,
    /// Redo with one fence per transaction: the new bytes, allocations and frees
    /// go to the log's ring as one checksummed entry, and that entry's fence is the
    /// commit (the transaction is durable when it returns: recovery replays the
    /// entry). The writes in place and the allocator's marks are made durable later,
    /// by a checkpoint when the ring fills or before a transaction of another mode.
    /// Needs exclusive access ([`TxHeap::transaction_with`]; not
    /// [`TxHeap::transaction_shared`]) and a ring ([`TxGeometry::lazy_ring_bytes`]).
    Lazy,
}

/// Options of one transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TxOptions {
    /// Word or object records.
    pub hint: Hint,
    /// Undo or redo.
    pub mode: LogMode,
    /// Log writes into blocks this transaction allocated, like any other write.
    /// Off by default: such a block is freed if the transaction aborts, and nothing
    /// points into it before the commit, so its bytes need no log. On, the engine
    /// behaves like a word- or object-logging engine that does not know the
    /// allocator (the NVWA paper's baselines): the records cost log space, flushes
    /// and fences, and rollback skips them.
    pub log_fresh: bool,
}

impl TxOptions {
    /// Object hint, undo logging.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the hint.
    pub fn hint(mut self, hint: Hint) -> Self {
        self.hint = hint;
        self
    }

    /// Sets undo or redo logging.
    pub fn mode(mut self, mode: LogMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets whether writes into blocks this transaction allocated are logged.
    pub fn log_fresh(mut self, log_fresh: bool) -> Self {
        self.log_fresh = log_fresh;
        self
    }
}

impl From<LogMode> for TxOptions {
    /// The default options in `mode`.
    fn from(mode: LogMode) -> Self {
        TxOptions::new().mode(mode)
    }
}

/// The size of a log: lanes and the capacity of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TxGeometry {
    /// Transactions that can run at once.
    pub lanes: u32,
    /// Word records per lane (8 bytes of data each).
    pub word_records: u32,
    /// Object records per lane.
    pub object_records: u32,
    /// Object data bytes per lane.
    pub object_bytes: u64,
    /// Allocation and free records per lane.
    pub alloc_records: u32,
    /// Bytes of the ring of [`LogMode::Lazy`] transactions (0: no ring; lazy
    /// transactions then fail with [`TxError::NoRing`]). One entry takes 32 bytes,
    /// 16 per write or allocation and the written bytes, rounded up to 64.
    pub lazy_ring_bytes: u64,
}

impl Default for TxGeometry {
    /// 4 lanes of 256 word records, 64 object records with 64 KiB of object data,
    /// and 32 allocation records; a 64 KiB lazy ring.
    fn default() -> Self {
        TxGeometry {
            lanes: 4,
            word_records: 256,
            object_records: 64,
            object_bytes: 64 * 1024,
            alloc_records: 32,
            lazy_ring_bytes: 64 * 1024,
        }
    }
}

impl TxGeometry {
    fn validate(&self) -> Result<(), TxError> {
        let ok = (1..=1024).contains(&self.lanes)
            && self.word_records <= 1 << 20
            && self.object_records <= 1 << 20
            && self.object_bytes <= 1 << 32
            && self.alloc_records <= 1 << 16
            && self.lazy_ring_bytes <= 1 << 32;
        if ok {
            Ok(())
        } else {
            Err(TxError::InvalidGeometry(*self))
        }
    }
}

/// What one transaction cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Bytes of data-record metadata written: 24 per word record, 32 per object
    /// record (the paper's "log metadata").
    pub log_meta_bytes: u64,
    /// Bytes of logged data written (old bytes for undo, new bytes for redo).
    pub log_data_bytes: u64,
    /// Bytes of allocation and free records written (32 each).
    pub alloc_record_bytes: u64,
    /// Flushes of cache lines holding data-record metadata (each line of a batch of
    /// records is flushed once; the paper's "log flushes").
    pub meta_lines_flushed: u64,
    /// Cache lines flushed during the transaction (log and data).
    pub lines_flushed: u64,
    /// Fences issued during the transaction.
    pub fences: u64,
}

impl std::ops::AddAssign for TxStats {
    /// Sums two transactions' costs field by field (to total a workload).
    fn add_assign(&mut self, o: TxStats) {
        self.log_meta_bytes += o.log_meta_bytes;
        self.log_data_bytes += o.log_data_bytes;
        self.alloc_record_bytes += o.alloc_record_bytes;
        self.meta_lines_flushed += o.meta_lines_flushed;
        self.lines_flushed += o.lines_flushed;
        self.fences += o.fences;
    }
}

/// Errors of transactions and of the log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TxError {
    /// The closure asked to abort (any message).
    #[error("transaction aborted: {0}")]
    Aborted(String),
    /// An operation the transaction's log mode does not offer.
    #[error("not offered in this log mode: {0}")]
    Unsupported(&'static str),
    /// A lane's log section is full: the transaction is too large for the geometry.
    #[error("transaction log full: no room for more {what}")]
    LogFull {
        /// Which section.
        what: &'static str,
    },
    /// `alloc` or `free` on a log without an allocator.
    #[error("this transaction log has no allocator")]
    NoAllocator,
    /// No log is formatted at this offset.
    #[error("no transaction log is formatted at offset {offset}")]
    NotFormatted {
        /// Where the log was looked for.
        offset: u64,
    },
    /// The log region given to `format` is unusable.
    #[error("invalid log region at offset {offset}: {reason}")]
    InvalidRegion {
        /// The region's offset.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A geometry out of the supported ranges.
    #[error("invalid log geometry {0:?}")]
    InvalidGeometry(TxGeometry),
    /// The log's on-media state is inconsistent.
    #[error("transaction log: {0}")]
    Corrupt(String),
    /// The allocator failed.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// The pool failed.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The commit failed at or after its commit point (an msync error, say): whether
    /// the transaction took effect is decided by the next recovery, which finishes
    /// it or rolls it back. Its lane stays out of service until the log is reopened.
    #[error("transaction {tid} is in doubt until the log is reopened: {source}")]
    InDoubt {
        /// The transaction.
        tid: u64,
        /// What failed.
        source: Box<TxError>,
    },
    /// Every lane was retired by transactions in doubt (or the lazy ring is in
    /// doubt after a failed commit or checkpoint): reopen the log.
    #[error("no transaction lane is in service: reopen the log")]
    NoLane,
    /// A [`LogMode::Lazy`] transaction on a log formatted without a lazy ring.
    #[error("this transaction log has no lazy ring (TxGeometry::lazy_ring_bytes is 0)")]
    NoRing,
    /// A [`LogMode::Lazy`] transaction through [`TxHeap::transaction_shared`]: lazy
    /// transactions need exclusive access to the heap.
    #[error("lazy transactions need exclusive access (TxHeap::transaction_with)")]
    LazyNeedsExclusive,
}

/// Runs `f` as one transaction on a lane of `log`: commits if it returns `Ok`,
/// rolls back if it returns `Err` or panics (the panic then continues).
///
/// # Safety
/// No other thread may access the bytes the transaction writes while it runs.
pub(crate) unsafe fn run<R>(
    log: &TxLog,
    opts: TxOptions,
    f: impl FnOnce(&mut Tx<'_>) -> Result<R, TxError>,
) -> Result<(R, TxStats), TxError> {
    if opts.mode == LogMode::Lazy {
        return Err(TxError::LazyNeedsExclusive);
    }
    let before = Counters::current();
    // No entry of the lazy ring may be replayed over what this transaction writes.
    if let Some(ring) = &log.ring {
        ring.checkpoint_if_dirty(log)?;
    }
    let mut lane = log.take_lane()?;
    let tid = lane.tid();
    let scratch = lane.take_scratch();
    let mut tx = Tx::new(log, lane.lane(), tid, opts, scratch);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut tx)));
    // A rollback that failed (the media refused a write) leaves the lane's state on
    // media unknown, as a commit in doubt does: only recovery may decide it.
    let mut rollback_failed = false;
    let mut roll_back = |tx: &mut Tx<'_>, e: TxError| match tx.roll_back() {
        Ok(()) => e,
        Err(failed) => {
            tracing::error!(error = %failed, tid, "rollback failed; the lane is retired until the log is reopened");
            rollback_failed = true;
            failed
        }
    };
    let result = match outcome {
        Ok(Ok(r)) => match tx.commit() {
            Ok(()) => Ok(r),
            Err((e, false)) => {
                tracing::warn!(error = %e, tid, "commit failed before its commit point; rolling back");
                Err(roll_back(&mut tx, e))
            }
            Err((e, true)) => {
                // The lane's state on media is unknown: keep the lane out of service;
                // the next recovery finishes or rolls back the transaction.
                tracing::error!(error = %e, tid, lane = lane.lane(), "commit in doubt; the lane is retired until the log is reopened");
                lane.retire();
                return Err(TxError::InDoubt {
                    tid,
                    source: Box::new(e),
                });
            }
        },
        Ok(Err(e)) => Err(roll_back(&mut tx, e)),
        Err(panic) => {
            match tx.roll_back() {
                Ok(()) => lane.give_back(tx.wrote(), tx.into_scratch()),
                Err(e) => {
                    tracing::error!(error = %e, tid, "rollback after a panic failed; the lane is retired until the log is reopened");
                    lane.retire();
                }
            }
            std::panic::resume_unwind(panic);
        }
    };
    let stats = tx.finish_stats(before);
    if rollback_failed {
        lane.retire();
    } else {
        lane.give_back(tx.wrote(), tx.into_scratch());
    }
    result.map(|r| (r, stats))
}

/// Runs `f` as one [`LogMode::Lazy`] transaction (no lane: the ring's entry is its
/// log). Commits if `f` returns `Ok`, else (or on a panic) drops what it staged and
/// lets go of its blocks.
///
/// # Safety
/// No other transaction of `log` runs meanwhile, and no other thread accesses the
/// bytes it writes (exclusive access to the heap).
unsafe fn run_lazy<R>(
    log: &TxLog,
    opts: TxOptions,
    f: impl FnOnce(&mut Tx<'_>) -> Result<R, TxError>,
) -> Result<(R, TxStats), TxError> {
    let ring = log.ring.as_ref().ok_or(TxError::NoRing)?;
    let before = Counters::current();
    let (mut state, seq, scratch) = ring.begin()?;
    let mut tx = Tx::new(log, u32::MAX, seq, opts, scratch);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut tx)));
    let result = match outcome {
        Ok(Ok(r)) => match tx.commit_lazy(ring, &mut state) {
            Ok(()) => Ok(r),
            Err((e, false)) => {
                tx.drop_lazy();
                Err(e)
            }
            Err((e, true)) => {
                tracing::error!(error = %e, seq, "lazy commit in doubt; reopen the log");
                Err(TxError::InDoubt {
                    tid: seq,
                    source: Box::new(e),
                })
            }
        },
        Ok(Err(e)) => {
            tx.drop_lazy();
            Err(e)
        }
        Err(panic) => {
            tx.drop_lazy();
            lazy::Ring::end(&mut state, tx.into_scratch());
            std::panic::resume_unwind(panic);
        }
    };
    let stats = tx.finish_stats(before);
    lazy::Ring::end(&mut state, tx.into_scratch());
    result.map(|r| (r, stats))
}

/// A pool that owns its transaction log and an allocator (a [`PageAllocator`] by
/// default; any [`PersistentAllocator`] with the transactional operations through
/// [`TxHeap::create_with`]): the safe way to use transactions (see the
/// [module documentation](self)).
///
/// Layout: the log at the start of the pool's heap, the allocator's region after it
/// (from the next 4 KiB boundary).
pub struct TxHeap<A: PersistentAllocator + 'static = PageAllocator> {
    log: TxLog,
    alloc: Arc<A>,
    last: TxStats,
}

impl<A: PersistentAllocator + 'static> std::fmt::Debug for TxHeap<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxHeap")
            .field("log", &self.log)
            .field("allocator", &self.alloc.name())
            .finish()
    }
}

/// Where the allocator's region of a [`TxHeap`] starts: after a log of `log_size`
/// bytes at the heap's start, on a 4 KiB boundary.
fn allocator_start(heap_start: u64, log_size: u64) -> u64 {
    (heap_start + log_size).div_ceil(4096) * 4096
}

impl<A: PersistentAllocator + 'static> TxHeap<A> {
    /// Formats the pool's heap: a log of `geometry`, then the allocator `format`
    /// makes over the rest (it is given the pool and the allocator's region, which
    /// nothing else uses).
    pub fn create_with(
        pool: Pool,
        geometry: &TxGeometry,
        format: impl FnOnce(Arc<Pool>, std::ops::Range<u64>) -> Result<A, AllocError>,
    ) -> Result<TxHeap<A>, TxError> {
        let pool = Arc::new(pool);
        let heap = pool.heap();
        let alloc_start = allocator_start(heap.start, TxLog::region_size(geometry));
        if alloc_start >= heap.end {
            return Err(TxError::InvalidRegion {
                offset: heap.start,
                reason: "the log leaves no room for the allocator",
            });
        }
        let alloc = Arc::new(format(Arc::clone(&pool), alloc_start..heap.end)?);
        let dyn_alloc: Arc<dyn PersistentAllocator> = alloc.clone();
        // SAFETY: the heap belongs to this TxHeap alone (the pool was moved in and
        // its only handles are the ones given here); the log region precedes the
        // allocator's.
        let log =
            unsafe { TxLog::format(Arc::clone(&pool), heap.start, geometry, Some(dyn_alloc)) }?;
        Ok(TxHeap {
            log,
            alloc,
            last: TxStats::default(),
        })
    }

    /// Opens a heap made by [`TxHeap::create_with`]: `open` recovers the allocator
    /// (given the pool and its region's start), then every interrupted transaction
    /// is finished or rolled back.
    pub fn open_with(
        pool: Pool,
        open: impl FnOnce(Arc<Pool>, u64) -> Result<A, AllocError>,
    ) -> Result<(TxHeap<A>, RecoveryReport), TxError> {
        let pool = Arc::new(pool);
        let heap = pool.heap();
        let alloc_start = allocator_start(heap.start, log::region_size_at(&pool, heap.start)?);
        let alloc = Arc::new(open(Arc::clone(&pool), alloc_start)?);
        let dyn_alloc: Arc<dyn PersistentAllocator> = alloc.clone();
        // SAFETY: the heap belongs to this TxHeap alone (the pool was moved in).
        let (log, report) = unsafe { TxLog::open(Arc::clone(&pool), heap.start, Some(dyn_alloc)) }?;
        Ok((
            TxHeap {
                log,
                alloc,
                last: TxStats::default(),
            },
            report,
        ))
    }
}

impl TxHeap {
    /// Formats the pool's heap: a log of `geometry`, then a page allocator of
    /// `page_size`-byte pages (a power of two, at least 64) over the rest.
    pub fn create(pool: Pool, geometry: &TxGeometry, page_size: u64) -> Result<TxHeap, TxError> {
        TxHeap::create_with(pool, geometry, |pool, region| {
            // SAFETY: the region is the allocator's alone (create_with's promise).
            unsafe { PageAllocator::format(pool, region, page_size) }
        })
    }

    /// Reads and validates the heap of `pool` made by [`TxHeap::create`] without
    /// writing anything (no recovery; works on a read-only pool): the log header's
    /// checksum and geometry, every lane's state, the page allocator's metadata.
    /// The summary says which lanes the next [`TxHeap::open`] would recover.
    ///
    /// Takes `&mut Pool` so that no heap can be live on the pool while it reads.
    pub fn inspect(pool: &mut Pool) -> Result<TxHeapSummary, TxError> {
        inspect::inspect(pool)
    }

    /// Opens a heap made by [`TxHeap::create`], recovering the allocator and then
    /// every interrupted transaction.
    pub fn open(pool: Pool) -> Result<(TxHeap, RecoveryReport), TxError> {
        TxHeap::open_with(pool, |pool, start| {
            // SAFETY: the region is the allocator's alone (open_with's promise).
            unsafe { PageAllocator::open(pool, start) }
        })
    }
}

impl<A: PersistentAllocator + 'static> TxHeap<A> {
    /// The pool, for reads (no transaction can run while the borrow lives).
    pub fn pool(&self) -> &Pool {
        self.log.pool()
    }

    /// The pool as an `Arc`, for readers that run beside transactions (a container
    /// library reading one structure while another thread's transaction writes
    /// another).
    ///
    /// # Safety
    /// No read through the returned pool may touch bytes that a transaction of this
    /// heap writes while that transaction runs.
    pub unsafe fn pool_arc(&self) -> Arc<Pool> {
        Arc::clone(&self.log.pool)
    }

    /// The allocator.
    pub fn allocator(&self) -> &A {
        &self.alloc
    }

    /// The offsets of every live block of the allocator, ascending: compare them
    /// with the blocks a structure references to check that nothing leaked.
    pub fn live_blocks(&self) -> Result<Vec<u64>, TxError> {
        let mut live = Vec::new();
        self.alloc
            .for_each_live_block(&mut |p, _| live.push(p.offset()))?;
        Ok(live)
    }

    /// The log.
    pub fn log(&self) -> &TxLog {
        &self.log
    }

    /// Runs `f` as a transaction with the default options (object hint, undo).
    pub fn transaction<R>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.transaction_with(TxOptions::default(), f)
    }

    /// Runs `f` as a transaction with `opts`.
    pub fn transaction_with<R>(
        &mut self,
        opts: TxOptions,
        f: impl FnOnce(&mut Tx<'_>) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.transaction_stats(opts, f).map(|(r, _)| r)
    }

    /// Runs `f` as a transaction with `opts` and returns what it cost.
    pub fn transaction_stats<R>(
        &mut self,
        opts: TxOptions,
        f: impl FnOnce(&mut Tx<'_>) -> Result<R, TxError>,
    ) -> Result<(R, TxStats), TxError> {
        let (r, stats) = if opts.mode == LogMode::Lazy {
            // SAFETY: `&mut self`: no reader or other transaction of this heap is
            // live.
            unsafe { run_lazy(&self.log, opts, f) }?
        } else {
            // SAFETY: as above.
            unsafe { run(&self.log, opts, f) }?
        };
        self.last = stats;
        Ok((r, stats))
    }

    /// Makes every committed lazy transaction's writes durable in place and
    /// truncates the lazy ring, so reopening replays nothing (the heap does this by
    /// itself when the ring fills and before a transaction of another mode). A
    /// no-op without pending lazy transactions.
    pub fn checkpoint(&mut self) -> Result<(), TxError> {
        match &self.log.ring {
            Some(ring) => ring.checkpoint_if_dirty(&self.log),
            None => Ok(()),
        }
    }

    /// The cost of the last transaction run through `&mut self`.
    pub fn last_stats(&self) -> TxStats {
        self.last
    }

    /// Runs `f` as a transaction from `&self`, so threads can run transactions at
    /// once (each on its own lane; a thread waits when all lanes are busy).
    ///
    /// # Safety
    /// While it runs, no other thread may read or write the bytes this transaction
    /// writes (hold a [`PMutex`] over them, or partition the data), and no reference
    /// obtained from [`TxHeap::pool`] may point into them.
    pub unsafe fn transaction_shared<R>(
        &self,
        opts: TxOptions,
        f: impl FnOnce(&mut Tx<'_>) -> Result<R, TxError>,
    ) -> Result<(R, TxStats), TxError> {
        // SAFETY: forwarded to the caller.
        unsafe { run(&self.log, opts, f) }
    }
}
