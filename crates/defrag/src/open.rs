//! Opening a heap, and the recovery that comes with it, in one place: the
//! reached bitmap's moves decided ([`crate::reached::recover`]), pmem-core's
//! transactions recovered, the type table checked against the program's
//! registry, the DRAM page index rebuilt, then an interrupted compaction
//! finished (its moves made, every reference healed, its plans released) or an
//! interrupted planning undone, before anyone sees the heap.
//!
//! It sits at the top of the crate's layers (layout → protocol → types →
//! barrier → locks → heap → heal → mark → compact → reached → planning → cycle →
//! open → collector): everything below is a step it may have to finish.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use pmem_core::tx::{RecoveryReport, TxHeap};
use pmem_core::{AllocError, PPtr, PageAllocator, PersistentAllocator, Pool};

use crate::barrier::{forward_word, move_espresso};
use crate::compact::read_plan;
use crate::heap::{crc, scan_pages, DefragHeap};
use crate::layout::{HeapRoot, TableHeader, HEAP_MAGIC, TABLE_MAGIC};
use crate::types::Registry;
use crate::DefragError;

impl DefragHeap {
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
        let heap = DefragHeap::assemble(tx, registry, root, pages);
        // An interrupted compaction is finished before anyone sees the heap.
        heap.finish_compaction()?;
        Ok((heap, report))
    }

    /// Finishes a compaction the root names, if any (open time): every plan of its
    /// chain has its missing moves made (Espresso's sequence), then one healing
    /// pass and the release.
    pub(crate) fn finish_compaction(&self) -> Result<bool, DefragError> {
        let mut g = self.lock()?;
        let r: HeapRoot = self.tx.pool().read(self.root)?;
        let mut plans = Vec::new();
        let mut at = r.compaction;
        while at != 0 {
            if plans.len() > 1 << 20 {
                return Err(DefragError::Corrupt("compaction plan chain loops".into()));
            }
            let plan = read_plan(self.tx.pool(), at)?;
            at = plan.next;
            plans.push(plan);
        }
        if plans.is_empty() {
            return Ok(false);
        }
        if plans.first().is_some_and(|p| p.pending) {
            // Interrupted while being planned: nothing has moved.
            tracing::info!(plans = plans.len(), "undoing an interrupted planning");
            self.undo_plans(&mut g, &plans)?;
            return Ok(true);
        }
        tracing::info!(plans = plans.len(), "finishing an interrupted compaction");
        let pool = self.tx.pool();
        for plan in &plans {
            for &(src, dst) in &plan.moves {
                let forward: u64 = pool.read(PPtr::from_offset(forward_word(src)))?;
                if forward != dst {
                    // The copy takes the source header's size: it must fit both
                    // slots, or a damaged header would copy over other objects
                    // (or onto its own source).
                    check_move(pool, &g.pages.all, src, dst)?;
                    move_espresso(pool, src, dst, false)?;
                }
            }
        }
        let forwarding: BTreeMap<u64, u64> =
            plans.iter().flat_map(|p| p.moves.iter().copied()).collect();
        let reloc: BTreeSet<u64> = plans
            .iter()
            .flat_map(|p| p.pages.iter().map(|&(page, _)| page))
            .collect();
        let pages: Vec<u64> = g
            .pages
            .all
            .keys()
            .copied()
            .filter(|p| !reloc.contains(p))
            .collect();
        self.heal(&g, &|v| forwarding.get(&v).copied(), &pages, true, true)?;
        self.release(&mut g, &plans)?;
        Ok(true)
    }
}

/// Checks that the object the move of `src` to `dst` copies (its header's size,
/// which no checksum covers) fits the slot of each, from the page index, and that
/// the two do not overlap: a plan's moves are redone from the source's header.
fn check_move(
    pool: &Pool,
    pages: &BTreeMap<u64, crate::heap::PageInfo>,
    src: u64,
    dst: u64,
) -> Result<(), DefragError> {
    let [_, size]: [u32; 2] = pool.read(PPtr::from_offset(src - crate::layout::OBJ_HEADER))?;
    let len = crate::layout::OBJ_HEADER + u64::from(size);
    let fits = |obj: u64| {
        pages
            .range(..=obj)
            .next_back()
            .is_some_and(|(&page, info)| len <= info.slot && obj < page + info.bytes)
    };
    if !fits(src) || !fits(dst) || src.abs_diff(dst) < len {
        return Err(DefragError::Corrupt(format!(
            "compaction move {src:#x} -> {dst:#x}: an object of {len} bytes fits no slot there"
        )));
    }
    Ok(())
}
