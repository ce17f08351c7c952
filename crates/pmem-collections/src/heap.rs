//! [`PHeap`]: a pool with a transaction log, an allocator and a directory of named
//! roots, from which typed containers are opened; and the rules that make its
//! concurrent transactions safe.
//!
//! **One handle per structure.** Every container or box in a heap is reached through
//! exactly one DRAM handle at a time: opening a structure that already has a live
//! handle fails with [`Error::AlreadyOpen`]; dropping the handle lets it be opened
//! again. Reads take the handle by `&self`, writes by `&mut self`, so the borrow
//! checker keeps a reader away from a writer of the same structure, and two
//! structures never share bytes. That is what lets the heap run transactions of
//! different structures at once without the caller promising anything (the promise
//! that `TxHeap::transaction_shared` asks for is kept here, by construction).
//!
//! **Which heap.** Each handle remembers the opening of the heap it came from; used
//! with any other heap (or another opening of the same pool), an operation fails
//! with [`Error::WrongHeap`] before it reads a byte. We chose this typed error over
//! a branded lifetime (GhostCell's `'id`): a brand makes every handle borrow a
//! closure's scope, so handles could not live in structs, cross `thread::spawn`, or
//! outlive the function that opened the heap, and the check costs one pointer
//! comparison per operation. On media a handle is 8 bytes, its offset.
//!
//! **Lifetime.** A handle keeps its heap's pool open: the pool closes when the
//! heap and every handle opened from it are dropped.
//!
//! **Two kinds of transaction.** A structure owned by one handle commits with the
//! heap's exclusive mode ([`HeapOptions::mode`], [`LogMode::Lazy`] by default: one
//! fence per operation, the log's ring entry being the commit); the structures
//! inside a [`crate::PMutex`] or a [`crate::PConcurrentHashMap`] commit with undo
//! transactions on the log's lanes, several at once. Exclusive transactions take a
//! write lock on the heap, shared ones a read lock.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use pmem_core::tx::{LogMode, Tx, TxError, TxGeometry, TxHeap, TxOptions, TxStats};
use pmem_core::{Pool, PoolOptions};

use crate::roots::Roots;
use crate::tag::{Tag, TAG_BYTES};
use crate::{Error, Result};

/// How a heap is formatted and how its transactions log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapOptions {
    /// The transaction log's size (lanes bound the transactions that run at once).
    pub geometry: TxGeometry,
    /// The allocator's page size: a power of two from 64 B (every allocation takes
    /// whole pages).
    pub page_size: u64,
    /// How a structure owned by one handle commits: [`LogMode::Lazy`] (the default:
    /// one fence, durable on return, replayed by recovery), [`LogMode::Undo`] or
    /// [`LogMode::Redo`]. An operation too large for the lazy ring (a resize, say)
    /// runs as an undo transaction.
    pub mode: LogMode,
}

impl Default for HeapOptions {
    /// The default log geometry with 8 lanes and a 256 KiB lazy ring, 64-byte
    /// pages, lazy commits.
    fn default() -> Self {
        HeapOptions {
            geometry: TxGeometry {
                lanes: 8,
                lazy_ring_bytes: 256 * 1024,
                ..TxGeometry::default()
            },
            page_size: 64,
            mode: LogMode::Lazy,
        }
    }
}

/// How a structure's operations commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Through the heap's write lock, in [`HeapOptions::mode`].
    Exclusive,
    /// Through its read lock, an undo transaction on a lane of its own.
    Shared,
}

/// How large an operation is (whether it may fit the lazy ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Size {
    /// A few slots.
    Small,
    /// A whole array rewritten (a resize): undo, whose writes into fresh blocks
    /// are not logged.
    Bulk,
}

pub(crate) struct Shared {
    heap: RwLock<TxHeap>,
    /// The pool, for reads outside transactions.
    pool: Arc<Pool>,
    /// Offsets of the structures with a live handle.
    claims: Mutex<HashSet<u64>>,
    mode: LogMode,
}

/// A pool formatted for typed persistent containers. See the [module
/// documentation](self). `Sync`: share it by reference (or in an `Arc`) between
/// threads.
pub struct PHeap {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for PHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PHeap")
            .field("pool", &self.shared.pool.path())
            .field("mode", &self.shared.mode)
            .finish()
    }
}

/// A live handle's hold on its structure (released on drop).
#[doc(hidden)]
pub struct Claim {
    at: u64,
    heap: Arc<Shared>,
    access: Access,
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.at)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.heap.claims.lock().remove(&self.at);
    }
}

impl Claim {
    /// The structure's offset.
    pub(crate) fn at(&self) -> u64 {
        self.at
    }

    /// How its operations commit.
    pub(crate) fn access(&self) -> Access {
        self.access
    }

    /// Fails unless the handle belongs to `heap`'s opening.
    pub(crate) fn check(&self, heap: &PHeap, what: &'static str) -> Result<()> {
        if Arc::ptr_eq(&self.heap, &heap.shared) {
            Ok(())
        } else {
            Err(Error::WrongHeap {
                what,
                offset: self.at,
            })
        }
    }
}

/// The message of the abort that carries a container's own error out of a
/// transaction.
const CARRIED: &str = "pmem-collections: operation failed";

impl PHeap {
    /// Pool options for a heap's pool: `layout` names the application, `size` its
    /// bytes; the root is this crate's directory of named roots.
    pub fn pool_options(layout: &str, size: u64) -> PoolOptions {
        PoolOptions::new(layout, size).root::<Roots>()
    }

    /// Formats `pool` (made with [`PHeap::pool_options`]) with default options.
    pub fn create(pool: Pool) -> Result<PHeap> {
        PHeap::create_with(pool, HeapOptions::default())
    }

    /// Formats `pool` (made with [`PHeap::pool_options`]).
    pub fn create_with(pool: Pool, opts: HeapOptions) -> Result<PHeap> {
        pool.root::<Roots>().map_err(Error::NotAHeap)?;
        let heap = TxHeap::create(pool, &opts.geometry, opts.page_size)?;
        Ok(PHeap::wrap(heap, opts.mode))
    }

    /// Opens a heap formatted by [`PHeap::create`], finishing or rolling back every
    /// transaction a crash interrupted; commits as `opts.mode` says (the geometry
    /// and page size are the pool's own).
    pub fn open_with(pool: Pool, mode: LogMode) -> Result<PHeap> {
        pool.root::<Roots>().map_err(Error::NotAHeap)?;
        let (heap, report) = TxHeap::open(pool)?;
        tracing::debug!(?report, "pmem-collections heap recovered");
        Ok(PHeap::wrap(heap, mode))
    }

    /// Opens a heap formatted by [`PHeap::create`] with lazy commits.
    pub fn open(pool: Pool) -> Result<PHeap> {
        PHeap::open_with(pool, HeapOptions::default().mode)
    }

    fn wrap(heap: TxHeap, mode: LogMode) -> PHeap {
        // SAFETY: reads through this pool go only to structures whose handle is
        // borrowed for the read (`&self`), and their transactions need `&mut` of the
        // same handle: no read overlaps a running transaction's writes.
        let pool = unsafe { heap.pool_arc() };
        PHeap {
            shared: Arc::new(Shared {
                heap: RwLock::new(heap),
                pool,
                claims: Mutex::new(HashSet::new()),
                mode,
            }),
        }
    }

    /// How structures owned by one handle commit.
    pub fn mode(&self) -> LogMode {
        self.shared.mode
    }

    /// The pool, for the crate's reads.
    pub(crate) fn pool(&self) -> &Pool {
        &self.shared.pool
    }

    /// Whether the pool's writes are durable when a transaction returns (see
    /// [`pmem_core::Pool::is_durable`]).
    pub fn is_durable(&self) -> bool {
        self.shared.pool.is_durable()
    }

    /// The offsets of every allocated block, ascending: with the containers'
    /// `blocks`, an exact leak check.
    pub fn live_blocks(&self) -> Result<Vec<u64>> {
        Ok(self.shared.heap.read().live_blocks()?)
    }

    /// What the last exclusive transaction cost (log records, flushes, fences):
    /// benchmarks count with it after [`PHeap::run_with`].
    #[doc(hidden)]
    pub fn last_stats(&self) -> pmem_core::tx::TxStats {
        self.shared.heap.read().last_stats()
    }

    /// Makes every lazy commit's writes durable in place and empties the ring, so
    /// a reopening replays nothing (the heap does it by itself when the ring fills).
    pub fn checkpoint(&self) -> Result<()> {
        Ok(self.shared.heap.write().checkpoint()?)
    }

    /// Makes `site` (or none) of the log fail with an I/O error, as an `msync`
    /// failure would (see `pmem_core::tx::TxLog::fail_site`): for the fuzzer's
    /// and tests' error paths. Requires the `sim` feature.
    #[cfg(feature = "sim")]
    #[doc(hidden)]
    pub fn fail_site(&self, site: Option<pmem_core::tx::mutation::Site>) {
        self.shared.heap.read().log().fail_site(site);
    }

    /// Takes the handle of the structure at `at` (fails if one is live).
    pub(crate) fn claim(&self, at: u64, access: Access) -> Result<Claim> {
        if !self.shared.claims.lock().insert(at) {
            return Err(Error::AlreadyOpen { offset: at });
        }
        Ok(Claim {
            at,
            heap: Arc::clone(&self.shared),
            access,
        })
    }

    /// Reads the tag at `at` and compares it with `expected`.
    pub(crate) fn check_tag(&self, at: u64, expected: &Tag) -> Result<()> {
        let mut buf = [0u8; TAG_BYTES as usize];
        crate::element::Media::read_into(self.pool(), at, &mut buf)?;
        let found = <Tag as zerocopy::FromBytes>::read_from_bytes(&buf[..])
            .map_err(|_| crate::error::corrupt("tag", "short"))?;
        expected.expect(&found)
    }

    /// Runs `f` as one transaction of a structure with `access`: all of it or none
    /// of it, after a crash too.
    pub(crate) fn run<R>(
        &self,
        access: Access,
        size: Size,
        mut f: impl FnMut(&mut Tx<'_>) -> Result<R>,
    ) -> Result<R> {
        match access {
            Access::Exclusive => {
                let mut heap = self.shared.heap.write();
                let mode = match size {
                    Size::Small => self.shared.mode,
                    Size::Bulk => LogMode::Undo,
                };
                match attempt(TxOptions::from(mode), &mut f, |o, g| {
                    heap.transaction_with(o, g)
                }) {
                    // The operation did not fit the lazy ring: again, as undo.
                    Err(Error::Tx(TxError::LogFull { what: "lazy ring" }))
                        if mode == LogMode::Lazy =>
                    {
                        attempt(TxOptions::from(LogMode::Undo), &mut f, |o, g| {
                            heap.transaction_with(o, g)
                        })
                    }
                    r => r,
                }
            }
            Access::Shared => {
                let heap = self.shared.heap.read();
                attempt(TxOptions::from(LogMode::Undo), &mut f, |o, g| {
                    // SAFETY: a shared transaction writes only the structure of the
                    // handle it runs for, which its caller borrows `&mut` and which no
                    // other handle reaches (one claim per structure); the pool's reads
                    // go to structures borrowed `&self` (see `wrap`).
                    unsafe { heap.transaction_shared(o, g) }.map(|(r, _)| r)
                })
            }
        }
    }

    /// Runs `f` once as one exclusive transaction (no second try in undo mode:
    /// `f` may move values).
    pub(crate) fn run_once<R>(&self, f: impl FnOnce(&mut Tx<'_>) -> Result<R>) -> Result<R> {
        let mut heap = self.shared.heap.write();
        let mut f = Some(f);
        attempt(
            TxOptions::from(self.shared.mode),
            &mut |tx: &mut Tx<'_>| match f.take() {
                Some(f) => f(tx),
                None => Err(crate::error::corrupt("transaction", "ran twice")),
            },
            |o, g| heap.transaction_with(o, g),
        )
    }

    /// Runs `f` with explicit transaction options, exclusively (benchmarks compare
    /// log modes and hints with it).
    #[doc(hidden)]
    pub fn run_with<R>(
        &self,
        opts: TxOptions,
        f: impl FnMut(&mut Tx<'_>) -> Result<R>,
    ) -> Result<R> {
        self.run_stats(opts, f).map(|(r, _)| r)
    }
}

impl PHeap {
    /// Runs `f` with explicit transaction options, exclusively, and returns what
    /// the transaction cost (benchmarks).
    #[doc(hidden)]
    pub fn run_stats<R>(
        &self,
        opts: TxOptions,
        mut f: impl FnMut(&mut Tx<'_>) -> Result<R>,
    ) -> Result<(R, TxStats)> {
        let mut heap = self.shared.heap.write();
        let r = attempt(opts, &mut f, |o, g| heap.transaction_with(o, g))?;
        Ok((r, heap.last_stats()))
    }
}

/// One try of `f` through `tx` (a transaction runner), carrying `f`'s own error
/// out through the abort.
fn attempt<R>(
    opts: TxOptions,
    f: &mut impl FnMut(&mut Tx<'_>) -> Result<R>,
    tx: impl FnOnce(
        TxOptions,
        &mut dyn FnMut(&mut Tx<'_>) -> std::result::Result<R, TxError>,
    ) -> std::result::Result<R, TxError>,
) -> Result<R> {
    let mut carried: Option<Error> = None;
    let r = tx(opts, &mut |t: &mut Tx<'_>| match f(t) {
        Ok(r) => Ok(r),
        Err(Error::Tx(e)) => Err(e),
        Err(e) => {
            carried = Some(e);
            Err(TxError::Aborted(CARRIED.into()))
        }
    });
    match (r, carried) {
        (Ok(r), _) => Ok(r),
        (Err(TxError::Aborted(m)), Some(e)) if m == CARRIED => Err(e),
        (Err(e), _) => Err(e.into()),
    }
}
