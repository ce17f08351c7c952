//! A read-only look at an NVWA heap: what `pmkit pool info` and `pmkit pool
//! check` report about it.
//!
//! [`Nvwa::open`] makes the decisions of recovery durable (an unfinished
//! publication, a half-written allocation). [`Nvwa::inspect`] runs the same checks
//! and the same replay — the header's checksum and geometry, the active word,
//! every log record's encoding, runs and large objects that overlap or run past
//! the heap, objects that are no slot of their run — and reports how many
//! decisions the next open would write, writing nothing.

use pmem_core::{AllocError, Pool};

use super::open::{scan, Scanned};
use super::Nvwa;
use crate::record::PAGE;
use crate::run::RunKind;

/// What [`Nvwa::inspect`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NvwaSummary {
    /// Pages of the heap.
    pub heap_pages: u64,
    /// Pages in runs and large objects.
    pub pages_used: u64,
    /// Small-class runs.
    pub small_runs: u64,
    /// Large objects (each on pages of its own).
    pub large_objects: u64,
    /// Live objects, small and large.
    pub objects: u64,
    /// Bytes of live objects (small ones at their class's size, large ones at
    /// their pages).
    pub bytes_used: u64,
    /// Records in the active log area, and its capacity in words.
    pub log_records: u64,
    /// Words of each log area.
    pub log_words: u64,
    /// Which log area is active, and its generation.
    pub log_area: usize,
    /// The generation of the active log area (checkpoints taken, plus one).
    pub generation: u64,
    /// Records the next open would rewrite (an exclusion or a cleared pending
    /// bit each): loose ends of a crash.
    pub pending_fixes: u64,
    /// Free bytes in the slots of small runs over all free bytes (free slots plus
    /// free pages): the share of free space held by runs of one class.
    pub fragmentation: f64,
}

impl Nvwa {
    /// Reads and checks the heap formatted at `region_start` of `pool` without
    /// writing anything (works on a read-only pool): what [`Nvwa::open`] checks
    /// and replays, and how much of it the next open would make durable.
    ///
    /// Takes `&mut Pool` so that no heap can be live on the pool while it reads.
    ///
    /// # Errors
    /// [`AllocError::NotFormatted`] if no NVWA heap is there,
    /// [`AllocError::Corrupt`] naming the damage.
    pub fn inspect(pool: &mut Pool, region_start: u64) -> Result<NvwaSummary, AllocError> {
        let pool: &Pool = pool;
        let Scanned {
            geo,
            generation,
            area,
            records,
            replayed,
            ..
        } = scan(pool, region_start)?;
        let mut s = NvwaSummary {
            heap_pages: geo.heap_pages,
            log_records: records.len() as u64,
            log_words: geo.log_words,
            log_area: area,
            generation,
            pending_fixes: replayed.fixes.len() as u64,
            ..NvwaSummary::default()
        };
        let mut free_in_runs = 0u64;
        for r in &replayed.runs {
            s.pages_used += r.pages;
            s.objects += r.objects.len() as u64;
            match r.kind {
                RunKind::Small(c) => {
                    s.small_runs += 1;
                    let live = r.objects.len() as u64;
                    s.bytes_used += live * c.size();
                    free_in_runs += c.slots().saturating_sub(live) * c.size();
                }
                RunKind::Large => {
                    s.large_objects += 1;
                    s.bytes_used += r.pages * PAGE;
                }
            }
        }
        let free = free_in_runs + geo.heap_pages.saturating_sub(s.pages_used) * PAGE;
        if free > 0 {
            s.fragmentation = free_in_runs as f64 / free as f64;
        }
        Ok(s)
    }

    /// The live blocks of the heap formatted at `region_start` of `pool`, as the
    /// next open would recover them: each block's pool offset and its recorded
    /// length, in offset order. Reads only, with [`Nvwa::inspect`]'s checks; for
    /// tools that walk what lives in the blocks (`pmkit pool check` walks a
    /// defragmenting heap's slab pages through it).
    ///
    /// # Errors
    /// As [`Nvwa::inspect`].
    pub fn inspect_blocks(
        pool: &mut Pool,
        region_start: u64,
    ) -> Result<Vec<(u64, u64)>, AllocError> {
        let pool: &Pool = pool;
        let Scanned { geo, replayed, .. } = scan(pool, region_start)?;
        let mut blocks: Vec<(u64, u64)> = replayed
            .runs
            .iter()
            .flat_map(|r| r.objects.iter())
            .map(|&(offset, _, len)| (geo.heap_start + offset, len))
            .collect();
        blocks.sort_unstable();
        Ok(blocks)
    }
}
