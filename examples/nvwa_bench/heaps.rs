//! The pools and heaps the workloads run on, and the counting of the allocator's own
//! flushes.
//!
//! * Pools are files in `--dir` (`/dev/shm` by default) mapped in pmem-core's
//!   forced-DAX mode ([`ModeRequest::ForceDax`]): every flush and fence is the
//!   instruction real PM would get, nothing is durable. The files are removed when
//!   the [`DaxPool`] is dropped (also when a run fails half way).
//! * [`Heap`] is one of the two allocators compared by counted flushes: NVWA
//!   ([`nvwa::Nvwa`], metadata in DRAM, an allocation log on the media) and the naive
//!   baseline ([`nvwa::NaiveHeap`], metadata on the media).
//! * [`Counted`] wraps an allocator and adds up, per call, the lines flushed and the
//!   fences issued on the calling thread ([`pmem_core::Counters::measure`]) around
//!   `alloc` and `free` only: the workloads' own data flushes are not in it.
//! * Keys and values: 64 bytes each, distinct per index by construction (the first
//!   word is a bijection of the index).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nvwa::{NaiveHeap, Nvwa, NvwaOptions};
use pmem_core::{splitmix64, Counters, ModeRequest, PPtr, PersistentAllocator, Pool, PoolOptions};

use crate::common::{unique_path, TempFile};

/// Layout name of every pool of the benchmark.
pub const LAYOUT: &str = "pmkit-nvwa-bench";

/// A pool file in forced-DAX mode, removed on drop (after the pool is unmapped:
/// the field order drops the pool first).
pub struct DaxPool {
    /// The pool (shared with the heap formatted on it).
    pub pool: Arc<Pool>,
    /// The file behind it (removed on drop).
    _file: TempFile,
}

impl DaxPool {
    /// A new pool of `bytes` bytes in `dir`, named after `what`.
    pub fn create(dir: &Path, what: &str, bytes: u64) -> Result<DaxPool, String> {
        let file = TempFile::new(unique_path(dir, what));
        let pool = create_file_pool(file.path(), bytes)?;
        Ok(DaxPool {
            pool: Arc::new(pool),
            _file: file,
        })
    }
}

/// Creates a forced-DAX pool file of `bytes` bytes at `path`.
pub fn create_file_pool(path: &Path, bytes: u64) -> Result<Pool, String> {
    Pool::create(
        path,
        &PoolOptions::new(LAYOUT, bytes).mode(ModeRequest::ForceDax),
    )
    .map_err(|e| format!("creating {}: {e}", path.display()))
}

/// Pool bytes for `objects` blocks of `slot` bytes: twice the data (room for the
/// naive baseline's metadata and the size classes' slack), the two log areas, and
/// 32 MiB, in whole MiB.
pub fn pool_bytes(objects: u64, slot: u64) -> u64 {
    let data = objects.saturating_mul(slot).saturating_mul(2);
    let logs = 2 * 8 * log_words(objects);
    (data + logs + (32 << 20)).div_ceil(1 << 20) << 20
}

/// Words of each NVWA log area for a heap that holds up to `objects` live blocks:
/// one word per object, one per run (a run holds at least 32 slots), and slack for
/// the records appended between two checkpoints.
pub fn log_words(objects: u64) -> u64 {
    objects + objects / 8 + 8192
}

/// NVWA's options for a heap of up to `objects` live blocks (everything else the
/// defaults: CAA-4 pages, one arena per core, frees by the exclude bit).
pub fn nvwa_options(objects: u64) -> NvwaOptions {
    NvwaOptions {
        log_words: Some(log_words(objects)),
        ..NvwaOptions::default()
    }
}

/// The two allocators compared by counted flushes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// NVWA.
    Nvwa,
    /// The naive baseline.
    Naive,
}

impl Kind {
    /// The name in tables and JSON keys.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Nvwa => "nvwa",
            Kind::Naive => "naive",
        }
    }
}

/// A formatted heap of either kind.
pub enum Heap {
    /// NVWA.
    Nvwa(Nvwa),
    /// The naive baseline.
    Naive(NaiveHeap),
}

impl Heap {
    /// Formats the heap area of `pool` as an empty heap of `kind`, for up to
    /// `objects` live blocks.
    pub fn format(kind: Kind, pool: Arc<Pool>, objects: u64) -> Result<Heap, String> {
        match kind {
            // SAFETY: the pool was just created for this heap; nothing else uses its
            // heap area.
            Kind::Nvwa => unsafe { Nvwa::format_heap(pool, &nvwa_options(objects)) }
                .map(Heap::Nvwa)
                .map_err(|e| format!("formatting nvwa: {e}")),
            // SAFETY: as above.
            Kind::Naive => unsafe { NaiveHeap::format_heap(pool) }
                .map(Heap::Naive)
                .map_err(|e| format!("formatting naive: {e}")),
        }
    }

    /// The allocator.
    pub fn allocator(&self) -> &dyn PersistentAllocator {
        match self {
            Heap::Nvwa(h) => h,
            Heap::Naive(h) => h,
        }
    }

    /// A line about the heap's state after a run (NVWA: its runs, log and
    /// checkpoints), if it has one to tell.
    pub fn note(&self) -> Option<String> {
        match self {
            Heap::Nvwa(h) => {
                let s = h.stats();
                Some(format!(
                    "live {} objects in {} runs; log {} of {} words; {} checkpoints",
                    s.live_objects, s.runs, s.log_used, s.log_capacity, s.checkpoints
                ))
            }
            Heap::Naive(_) => None,
        }
    }
}

/// The allocator's own line flushes and fences, summed over calls.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllocCost {
    /// Successful allocations.
    pub allocs: u64,
    /// Successful frees.
    pub frees: u64,
    /// Lines flushed inside `alloc` calls.
    pub alloc_lines: u64,
    /// Lines flushed inside `free` calls.
    pub free_lines: u64,
    /// Fences inside `alloc` calls.
    pub alloc_fences: u64,
    /// Fences inside `free` calls.
    pub free_fences: u64,
}

impl AllocCost {
    /// Lines flushed by the allocator in all.
    pub fn lines(&self) -> u64 {
        self.alloc_lines + self.free_lines
    }

    /// Lines flushed per allocation (`None` without allocations).
    pub fn lines_per_alloc(&self) -> Option<f64> {
        ratio(self.alloc_lines, self.allocs)
    }

    /// Lines flushed per free (`None` without frees).
    pub fn lines_per_free(&self) -> Option<f64> {
        ratio(self.free_lines, self.frees)
    }

    /// Fences per allocation.
    pub fn fences_per_alloc(&self) -> Option<f64> {
        ratio(self.alloc_fences, self.allocs)
    }

    /// Fences per free.
    pub fn fences_per_free(&self) -> Option<f64> {
        ratio(self.free_fences, self.frees)
    }
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// An allocator whose `alloc` and `free` calls are counted (single-threaded: the
/// counters are the calling thread's).
pub struct Counted<'a> {
    heap: &'a dyn PersistentAllocator,
    cost: Cell<AllocCost>,
}

impl<'a> Counted<'a> {
    /// Counts the calls made through it to `heap`.
    pub fn new(heap: &'a dyn PersistentAllocator) -> Counted<'a> {
        Counted {
            heap,
            cost: Cell::new(AllocCost::default()),
        }
    }

    /// The pool of the heap.
    pub fn pool(&self) -> &'a Pool {
        self.heap.pool()
    }

    /// `alloc(size)`, counted.
    pub fn alloc(&self, size: u64) -> Result<u64, String> {
        let (r, c) = Counters::measure(|| self.heap.alloc(size));
        let mut cost = self.cost.get();
        cost.alloc_lines += c.lines_flushed;
        cost.alloc_fences += c.fences;
        let p = r.map_err(|e| format!("{} alloc({size}): {e}", self.heap.name()))?;
        cost.allocs += 1;
        self.cost.set(cost);
        Ok(p.offset())
    }

    /// `free(block, size)`, counted.
    ///
    /// # Safety
    /// `block` was allocated with `size` here, is not freed yet, and nothing uses it
    /// after this call.
    pub unsafe fn free(&self, block: u64, size: u64) -> Result<(), String> {
        // SAFETY: the caller's contract is `free`'s.
        let (r, c) =
            Counters::measure(|| unsafe { self.heap.free(PPtr::from_offset(block), size) });
        let mut cost = self.cost.get();
        cost.free_lines += c.lines_flushed;
        cost.free_fences += c.fences;
        r.map_err(|e| format!("{} free({block:#x}, {size}): {e}", self.heap.name()))?;
        cost.frees += 1;
        self.cost.set(cost);
        Ok(())
    }

    /// `alloc(size)` outside the counts (set-up: a table's bucket array).
    pub fn alloc_uncounted(&self, size: u64) -> Result<u64, String> {
        self.heap
            .alloc(size)
            .map(PPtr::offset)
            .map_err(|e| format!("{} alloc({size}): {e}", self.heap.name()))
    }

    /// The counts so far.
    pub fn cost(&self) -> AllocCost {
        self.cost.get()
    }
}

/// Reads the u64 at pool offset `off`.
pub fn read_u64(pool: &Pool, off: u64) -> Result<u64, String> {
    pool.read(PPtr::<u64>::from_offset(off))
        .map_err(|e| format!("reading {off:#x}: {e}"))
}

/// Writes `bytes` at pool offset `off` and persists them (the workloads' own data
/// writes: counted in the totals, not in the allocator's figures).
///
/// # Safety
/// The bytes belong to a block the calling thread owns: no reference to them is live
/// and no other thread touches them.
pub unsafe fn write_persist(pool: &Pool, off: u64, bytes: &[u8]) -> Result<(), String> {
    // SAFETY: the caller's contract is `write_bytes_shared`'s.
    unsafe { pool.write_bytes_shared(off, bytes) }
        .and_then(|()| pool.persist(off, bytes.len() as u64))
        .map_err(|e| format!("writing {off:#x}: {e}"))
}

/// The workspace's one seeded generator, so every run draws the same operations.
pub use pmem_core::SplitMix64 as Rng;

/// 64 pseudo-random bytes for index `i` under `seed`; the first word is a bijection
/// of `i` (SplitMix64's finaliser), so distinct indices give distinct results.
fn bytes64(i: u64, seed: u64) -> [u8; 64] {
    let mut out = [0u8; 64];
    let mut state = i ^ seed;
    for w in out.chunks_exact_mut(8) {
        w.copy_from_slice(&splitmix64(&mut state).to_le_bytes());
    }
    out
}

/// Key `i` (64 bytes, distinct per `i`).
pub fn key(i: u64) -> [u8; 64] {
    bytes64(i, 0x6b65_795f_6e76_7761)
}

/// Value `i` (64 bytes).
pub fn value(i: u64) -> [u8; 64] {
    bytes64(i, 0x7661_6c5f_6e76_7761)
}

/// The directory the pools go to, checked.
pub fn check_dir(dir: &Path) -> Result<PathBuf, String> {
    if dir.is_dir() {
        Ok(dir.to_path_buf())
    } else {
        Err(format!("{} is not a directory", dir.display()))
    }
}
