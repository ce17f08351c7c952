//! Formatting a heap, and opening one: the log replayed ([`crate::recover`]), the
//! crash's loose ends made durable, and the DRAM arenas, runs and page table
//! rebuilt from it.

use std::ops::Range;
use std::sync::Arc;

use pmem_core::{AllocError, PPtr, Pool, PoolError};

use super::{log_error, owner_word, Nvwa, NvwaOptions, Padded};
use crate::arena::Arena;
use crate::layout::{self, Geometry};
use crate::log::AllocLog;
use crate::pages::PageSource;
use crate::persist::{fence, flush, Site};
use crate::record::Record;
use crate::recover::{replay, Replayed};
use crate::run::{Logged, Run};
use crate::sync::{AtomicU64, AtomicUsize, Mutex, Ordering};

/// What opening a heap reads before it writes anything: the geometry, the active
/// log area and its generation, the log, its records and their replay.
pub(super) struct Scanned {
    pub(super) geo: Geometry,
    pub(super) generation: u64,
    pub(super) area: usize,
    pub(super) log: AllocLog,
    /// Each record with its position and encoded word.
    pub(super) records: Vec<(u64, Record, u64)>,
    pub(super) replayed: Replayed,
}

/// Reads the heap at `region_start` and replays its log, writing nothing: the
/// first half of [`Nvwa::open`], and all of [`Nvwa::inspect`]'s reading.
pub(super) fn scan(pool: &Pool, region_start: u64) -> Result<Scanned, AllocError> {
    let (geo, generation, area) = layout::read(pool, region_start)?;
    let (log, found) =
        AllocLog::scan(pool, geo.log_base(area), geo.log_words).map_err(log_error)?;
    let records: Vec<(u64, Record, u64)> = found
        .into_iter()
        .map(|(p, r)| (p, r, r.encode().unwrap_or(0)))
        .collect();
    let replayed = replay(&records, geo.heap_start, geo.heap_pages, |slot, block| {
        if slot.checked_add(8).is_none_or(|e| e > pool.len()) || !slot.is_multiple_of(8) {
            return Ok(false);
        }
        Ok(pool.read(PPtr::<u64>::from_offset(slot))? == block)
    })?;
    Ok(Scanned {
        geo,
        generation,
        area,
        log,
        records,
        replayed,
    })
}

impl Nvwa {
    /// Formats `region` of the pool as an empty heap and opens it.
    ///
    /// # Safety
    /// Nothing else uses the region, now or later, except through this heap.
    pub unsafe fn format(
        pool: Arc<Pool>,
        region: Range<u64>,
        opts: &NvwaOptions,
    ) -> Result<Nvwa, AllocError> {
        if pool.is_read_only() {
            return Err(PoolError::ReadOnly.into());
        }
        if region.end > pool.len() {
            return Err(AllocError::Corrupt {
                reason: format!("region end {:#x} is past the pool", region.end),
            });
        }
        let probe = Geometry::plan(&region, 1)?;
        let words = opts
            .log_words
            .unwrap_or_else(|| (probe.heap_pages * 64).max(4096));
        let g = Geometry::plan(&region, words)?;
        // SAFETY: the region is the caller's alone (this function's contract).
        unsafe { layout::format(&pool, &g)? };
        // SAFETY: as above.
        unsafe { Nvwa::open(pool, region.start, opts) }
    }

    /// Formats the pool's whole heap area (`Pool::heap`, from a 64-byte boundary).
    ///
    /// # Safety
    /// As [`Nvwa::format`].
    pub unsafe fn format_heap(pool: Arc<Pool>, opts: &NvwaOptions) -> Result<Nvwa, AllocError> {
        let heap = pool.heap();
        let start = heap.start.div_ceil(64) * 64;
        // SAFETY: the caller's contract is format's.
        unsafe { Nvwa::format(pool, start..heap.end, opts) }
    }

    /// Opens the heap formatted at `region_start`: replays its log, makes the
    /// crash's loose ends durable (an unfinished publication decided from its
    /// slot, a half-written allocation dropped) and rebuilds the DRAM state.
    ///
    /// # Safety
    /// As [`Nvwa::format`]; and one `Nvwa` at a time per region.
    pub unsafe fn open(
        pool: Arc<Pool>,
        region_start: u64,
        opts: &NvwaOptions,
    ) -> Result<Nvwa, AllocError> {
        let Scanned {
            geo,
            generation,
            area,
            log,
            records: _,
            replayed,
        } = scan(&pool, region_start)?;
        if !replayed.fixes.is_empty() {
            if pool.is_read_only() {
                return Err(PoolError::ReadOnly.into());
            }
            for &(pos, word) in &replayed.fixes {
                // SAFETY: recovery runs before the heap is shared.
                unsafe { log.put(&pool, pos, word) }.map_err(log_error)?;
                flush(&pool, Site::RecoveryFlush, log.offset_of(pos), 8)?;
            }
            fence(&pool, Site::RecoveryFence)?;
            tracing::debug!(
                fixes = replayed.fixes.len(),
                "nvwa recovery decided records a crash left open"
            );
        }
        let tail = log.tail().div_ceil(8) * 8;
        log.reset(tail);
        let n = if opts.arenas == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            opts.arenas
        }
        .clamp(1, 1024);
        let mut arenas: Vec<Arena> = (0..n).map(Arena::new).collect();
        let mut pages = PageSource::new(geo.heap_pages, opts.policy, n, opts.watermarks);
        let owners: Box<[AtomicU64]> = (0..geo.heap_pages).map(|_| AtomicU64::new(0)).collect();
        for (i, r) in replayed.runs.into_iter().enumerate() {
            pages
                .mark_used(r.first_page, r.pages)
                .map_err(|e| AllocError::Corrupt {
                    reason: e.to_string(),
                })?;
            let a = i % n;
            let mut run = Run::new(r.first_page, r.pages, r.kind);
            if let Some(p) = r.run_pos {
                run.logged = Logged::Durable(p as u32);
            }
            for (offset, pos, len) in r.objects {
                let slot = run.slot_at(offset).ok_or_else(|| AllocError::Corrupt {
                    reason: format!("object {offset:#x} is not a slot of its run"),
                })?;
                run.take_at(slot);
                run.set_live(slot, pos as u32, len);
            }
            let id = arenas[a].insert(run);
            for p in r.first_page..r.first_page + r.pages {
                owners[p as usize].store(owner_word(a, id), Ordering::Relaxed);
            }
        }
        let other = geo.log_words;
        let logs = [
            AllocLog::empty(geo.log_base(0), geo.log_words),
            AllocLog::empty(geo.log_base(1), geo.log_words),
        ];
        logs[area].reset(tail);
        let dirty = [AtomicU64::new(other), AtomicU64::new(other)];
        dirty[area].store(tail, Ordering::Relaxed);
        Ok(Nvwa {
            pool,
            geo,
            logs,
            area: AtomicUsize::new(area),
            generation: AtomicU64::new(generation),
            dirty,
            arenas: arenas.into_iter().map(|a| Padded(Mutex::new(a))).collect(),
            pages: Mutex::new(pages),
            owners,
            checkpointing: Mutex::new(()),
            checkpoints: AtomicU64::new(0),
            free_mode: opts.free_mode,
        })
    }

    /// Opens the heap formatted by [`Nvwa::format_heap`].
    ///
    /// # Safety
    /// As [`Nvwa::open`].
    pub unsafe fn open_heap(pool: Arc<Pool>, opts: &NvwaOptions) -> Result<Nvwa, AllocError> {
        let start = pool.heap().start.div_ceil(64) * 64;
        // SAFETY: the caller's contract is open's.
        unsafe { Nvwa::open(pool, start, opts) }
    }
}
