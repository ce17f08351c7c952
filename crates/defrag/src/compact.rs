//! Compaction: summary, persisted plans (the forwarding table), moves, healing and
//! release; and the recovery of an interrupted compaction.
//!
//! * **Summary.** Per slot size, the slab pages sorted by occupancy (once per
//!   compaction); each plan's relocation set is the least-occupied prefix of what
//!   earlier plans left that frees the most pages when its objects are packed
//!   into new destination pages. The destinations are assigned in page
//!   and slot order, so the plan is deterministic.
//! * **Plans.** One transaction per plan (at most ~1,000 relocation pages, the
//!   log's allocation records) allocates the destination pages (their bitmaps
//!   already showing every planned slot), writes the plan block (the pairs, the
//!   relocation pages, a checksum, the previous plan) and points the heap root at
//!   it: a compaction's plans form a chain. A later plan never relocates an earlier
//!   plan's pages, destinations included, so no object moves twice. All plans of a
//!   compaction are persisted, under the heap lock, before its first move.
//! * **Moves** by the protocol chosen ([`crate::Protocol`]), on the defragmenter
//!   thread ([`crate::Compaction`]) or inside a mutator's barrier.
//! * **Healing.** Once every move is published, every pointer (roots, and the
//!   fields of every object outside the relocation pages) that names a source is
//!   swapped to its destination by CAS, beside running transactions
//!   ([`crate::heal`]); at open, by [`DefragHeap::heal`] with the heap alone.
//! * **Release.** Under the heap lock, the compaction is deactivated (the barrier
//!   goes off; no compaction or marking may start until the release is done).
//!   Then each plan, newest first, is released in one transaction per hold of the
//!   lock: its relocation pages (excluded from allocation until then) and its
//!   block are freed and it is unlinked from the head of the root's chain. A crash
//!   between two releases leaves a shorter chain, which recovery finishes alike.
//!
//! Recovery (at open) walks the chain, makes every move whose forward word is not
//! set (the source is still authoritative: no one wrote the copy or holds a
//! pointer to it, see [`crate::barrier`]) with Espresso's sequence, heals, and
//! releases: idempotent, since each step is.

use std::collections::{BTreeMap, BTreeSet};

use pmem_core::{PPtr, Pool};
use zerocopy::IntoBytes;

use crate::barrier::{forward_word, move_espresso};
use crate::heap::{DefragHeap, HeapStats, Shared};
use crate::layout::{
    class_of, HeapRoot, PageHeader, PlanHeader, OBJ_HEADER, PAGE_HEADER, PAGE_MAGIC, PLAN_HEADER,
    PLAN_MAGIC, ROOTS,
};
use crate::protocol::Protocol;
use crate::DefragError;

/// What a compaction did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CompactReport {
    /// The protocol the moves used (SFCCD when FFCCD was asked for on a durable
    /// pool not declared eADR and without a reached bitmap).
    pub protocol: Protocol,
    /// The moves were tracked by the reached bitmap (FFCCD on ADR, on a pool
    /// that emulates the bitmap: [`crate::reached`]).
    pub tracked: bool,
    /// Objects moved.
    pub moved: u64,
    /// Of those, the moves mutators made inside the barrier.
    pub barrier_moves: u64,
    /// Relocation page runs freed.
    pub pages_freed: u64,
    /// Destination pages allocated.
    pub pages_allocated: u64,
    /// Fences the defragmenter's moves issued (2 per move under Espresso, 1 under
    /// SFCCD plus one per [`crate::Compaction::step`], 0 under FFCCD).
    pub move_fences: u64,
    /// Nanoseconds the heap lock was held to plan (summary and plans).
    pub plan_pause_ns: u64,
    /// The longest hold of the heap (alone) after planning: the deactivation or
    /// one plan's release (healing holds only object locks, one at a time).
    pub heal_pause_max_ns: u64,
    /// Nanoseconds the heap was held alone in all, planning, deactivation and
    /// releases together: the time mutators' transactions could not run.
    pub locked_ns: u64,
    /// Ratio before (footprint / live bytes).
    pub ratio_before: f64,
    /// Ratio after: the footprint left over the live bytes when the compaction
    /// began (exact when no mutator ran; [`DefragHeap::stats`] counts anew).
    pub ratio_after: f64,
}

/// Relocation pages per plan: a plan allocates its destination pages in one
/// transaction and its release frees its relocation pages in another, each within
/// the log's allocation records (`heap::ALLOC_RECORDS`).
pub(crate) const ROUND_PAGES: usize = crate::heap::ALLOC_RECORDS as usize - 16;

/// The summary of a compaction's planning: per slot size, the candidate pages
/// (occupancy, page) by occupancy, and how many of them earlier plans took.
#[derive(Default)]
struct Candidates {
    by_slot: BTreeMap<u64, (Vec<(u64, u64)>, usize)>,
}

/// A plan in DRAM: its block, moves, relocation pages and the plan before it.
pub(crate) struct Plan {
    pub block: u64,
    pub moves: Vec<(u64, u64)>,
    pub pages: Vec<(u64, u64)>,
    /// Destination pages and how many moves fill each, in the order of `moves`
    /// (DRAM only: empty for a plan read back at open).
    pub destinations: Vec<(u64, u32)>,
    pub next: u64,
    /// The moves are tracked by the reached bitmap (the header's flag).
    pub tracked: bool,
    /// Bytes of the destination pages (DRAM only: the planning's running
    /// footprint).
    destination_bytes: u64,
}

impl<A: pmem_core::PersistentAllocator + 'static> DefragHeap<A> {
    /// Summary and plans, under the heap lock the caller holds: plans of at most
    /// `round_pages` relocation pages, each persisted with its destination pages,
    /// until the ratio left once the relocation pages are gone reaches `target` or
    /// nothing more would be freed. `before`: the heap's stats, taken under the
    /// same hold of the lock. Returns them in chain order (newest first).
    pub(crate) fn make_plans(
        &self,
        shared: &mut Shared,
        before: &HeapStats,
        target: f64,
        round_pages: usize,
    ) -> Result<(Vec<Plan>, u64), DefragError> {
        let round_pages = round_pages.clamp(2, ROUND_PAGES);
        // Moves change no object's size: the ratio follows the footprint, which
        // each plan changes by its destination pages less its relocation pages.
        let live = before.live_bytes.max(1) as f64;
        let mut footprint = before.footprint_bytes;
        let mut ratio = before.frag_ratio;
        // The summary, once: per slot size the pages with a live object, by
        // occupancy. A plan takes the best prefix of what earlier plans left, so
        // no page is relocated twice and no destination (not in these lists) is
        // ever relocated.
        let mut candidates = Candidates::default();
        for (&page, info) in &shared.pages.all {
            if info.capacity > 1 {
                candidates
                    .by_slot
                    .entry(info.slot)
                    .or_default()
                    .0
                    .push((info.used, page));
            }
        }
        for (pages, _) in candidates.by_slot.values_mut() {
            pages.sort_unstable();
        }
        let mut plans = Vec::new();
        let mut allocated = 0;
        while ratio > target {
            let Some((plan, new_pages)) = self.plan(shared, &mut candidates, round_pages)? else {
                break;
            };
            allocated += new_pages;
            footprint += plan.destination_bytes;
            footprint -= plan.pages.iter().map(|&(_, b)| b).sum::<u64>();
            plans.push(plan);
            ratio = footprint as f64 / live;
        }
        plans.reverse();
        Ok((plans, allocated))
    }

    /// Summary and plan: picks the relocation pages, persists the plan with its
    /// destination pages. `None` if nothing would be freed.
    fn plan(
        &self,
        shared: &mut Shared,
        candidates: &mut Candidates,
        round_pages: usize,
    ) -> Result<Option<(Plan, u64)>, DefragError> {
        let mut chosen: Vec<(u64, Vec<u64>, u64)> = Vec::new();
        let mut room = round_pages;
        for (&slot, (pages, taken)) in &mut candidates.by_slot {
            let pages = &pages[*taken..];
            let Some(&(_, first)) = pages.first() else {
                continue;
            };
            let capacity = shared.pages.all[&first].capacity;
            let (mut best, mut best_m, mut live) = (0i64, 0, 0);
            for (m, &(used, _)) in pages.iter().enumerate().take(room) {
                live += used;
                let saved = (m as i64 + 1) - live.div_ceil(capacity) as i64;
                if saved > best {
                    (best, best_m) = (saved, m + 1);
                }
            }
            if best > 0 {
                room -= best_m;
                *taken += best_m;
                let set: Vec<u64> = pages[..best_m].iter().map(|&(_, p)| p).collect();
                let live: u64 = pages[..best_m].iter().map(|&(u, _)| u).sum();
                chosen.push((slot, set, live.div_ceil(capacity)));
            }
        }
        if chosen.is_empty() {
            return Ok(None);
        }
        // The objects to move, in page and slot order.
        let mut sources: Vec<(u64, Vec<u64>)> = Vec::new();
        for (slot, set, _) in &chosen {
            let mut objs = Vec::new();
            for &page in set {
                self.for_each_object_in(page, &mut |obj, _, _| objs.push(obj))?;
            }
            sources.push((*slot, objs));
        }
        let reloc: Vec<(u64, u64)> = chosen
            .iter()
            .flat_map(|(_, set, _)| set.iter().map(|&p| (p, shared.pages.all[&p].bytes)))
            .collect();
        let new_pages: u64 = chosen.iter().map(|(_, _, n)| n).sum();
        let root = self.root;
        let plan = self.transaction_locked(shared, Default::default(), |t| {
            let mut moves = Vec::new();
            let mut destinations = Vec::new();
            let mut destination_bytes = 0;
            for (slot, objs) in &sources {
                let (_, bytes, capacity) = class_of(slot - OBJ_HEADER);
                for chunk in objs.chunks(capacity as usize) {
                    // Not zeroed: the header says which slots hold data, and
                    // each planned slot is written whole by its move.
                    let page = t.raw().alloc_uninit(bytes)?.offset();
                    let mut h = PageHeader {
                        magic: PAGE_MAGIC,
                        slot: *slot as u32,
                        capacity: capacity as u32,
                        used: chunk.len() as u32,
                        bytes,
                        ..PageHeader::default()
                    };
                    for (i, &src) in chunk.iter().enumerate() {
                        h.set(i as u64, true);
                        moves.push((src, page + PAGE_HEADER + i as u64 * slot + OBJ_HEADER));
                    }
                    t.raw().write(PPtr::from_offset(page), &h)?;
                    t.add_page(page, &h);
                    destinations.push((page, chunk.len() as u32));
                    destination_bytes += bytes;
                }
            }
            let mut body = Vec::new();
            for &(s, d) in &moves {
                body.extend_from_slice(&s.to_le_bytes());
                body.extend_from_slice(&d.to_le_bytes());
            }
            for &(p, b) in &reloc {
                body.extend_from_slice(&p.to_le_bytes());
                body.extend_from_slice(&b.to_le_bytes());
            }
            let at = compaction_slot(root);
            let next = t.raw().read(at)?;
            let header = PlanHeader {
                magic: PLAN_MAGIC,
                moves: moves.len() as u64,
                pages: reloc.len() as u64,
                crc: u64::from(crc32c::crc32c(&body)),
                next,
                tracked: 0,
                reserved: [0; 2],
            };
            // Written whole just below.
            let block = t
                .raw()
                .alloc_uninit(PLAN_HEADER + body.len() as u64)?
                .offset();
            t.raw().write_bytes(block, header.as_bytes())?;
            t.raw().write_bytes(block + PLAN_HEADER, &body)?;
            t.raw().write(at, &block)?;
            Ok(Plan {
                block,
                moves,
                pages: reloc.clone(),
                destinations,
                next,
                tracked: false,
                destination_bytes,
            })
        })?;
        Ok(Some((plan, new_pages)))
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
        tracing::info!(plans = plans.len(), "finishing an interrupted compaction");
        let pool = self.tx.pool();
        for plan in &plans {
            for &(src, dst) in &plan.moves {
                let forward: u64 = pool.read(PPtr::from_offset(forward_word(src)))?;
                if forward != dst {
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

    /// Rewrites every pointer to a source (by `forwarding`) in the objects of
    /// `pages` that are still in the index (and in the roots if `roots`), flushing
    /// each rewritten word if `flush`, then fences. The caller holds the heap lock
    /// and every move is published.
    pub(crate) fn heal(
        &self,
        shared: &Shared,
        forwarding: &dyn Fn(u64) -> Option<u64>,
        pages: &[u64],
        roots: bool,
        flush: bool,
    ) -> Result<(), DefragError> {
        let pool = self.tx.pool();
        let mut slots: Vec<(u64, u64)> = Vec::new();
        if roots {
            let r: HeapRoot = pool.read(self.root)?;
            for i in 0..ROOTS {
                if let Some(d) = forwarding(r.roots[i].ptr) {
                    slots.push((self.root.offset() + 16 + i as u64 * 32 + 24, d));
                }
            }
        }
        for &page in pages {
            if !shared.pages.all.contains_key(&page) {
                continue;
            }
            let mut objs = Vec::new();
            self.for_each_object_in(page, &mut |obj, type_id, _| objs.push((obj, type_id)))?;
            for (obj, type_id) in objs {
                let desc = self
                    .registry
                    .get(type_id)
                    .ok_or(DefragError::Unregistered(type_id))?;
                for p in &desc.pointers {
                    let at = obj + u64::from(p.offset);
                    let v: u64 = pool.read(PPtr::from_offset(at))?;
                    // Plans never relocate a destination, so one step suffices.
                    if let Some(d) = forwarding(v) {
                        slots.push((at, d));
                    }
                }
            }
        }
        for &(at, d) in &slots {
            // SAFETY: the caller holds the heap lock, so no transaction or reader is
            // running, and the defragmenter (the caller) has no move in progress; an
            // aligned 8-byte store is failure-atomic, and healing is idempotent.
            unsafe { pool.write_bytes_shared(at, &d.to_le_bytes())? };
            if flush {
                pool.flush(at, 8)?;
            }
        }
        if !slots.is_empty() {
            pool.drain()?;
        }
        Ok(())
    }

    /// Releases the plans (`plans` newest first, as the root links them): each
    /// release frees its relocation pages and its block and unlinks it from the
    /// head of the root's chain, in one transaction. The caller holds the heap
    /// lock and no compaction is active.
    pub(crate) fn release(&self, shared: &mut Shared, plans: &[Plan]) -> Result<(), DefragError> {
        let root = self.root;
        for plan in plans {
            for &(page, _) in &plan.pages {
                shared.pages.exclude(page, false);
            }
            self.transaction_locked(shared, Default::default(), |t| {
                for &(page, bytes) in &plan.pages {
                    t.raw().free(PPtr::from_offset(page), bytes)?;
                    t.drop_page(page);
                }
                let h: PlanHeader = t.raw().read(PPtr::from_offset(plan.block))?;
                t.raw().free(
                    PPtr::from_offset(plan.block),
                    PLAN_HEADER + 16 * (h.moves + h.pages),
                )?;
                t.raw().write(compaction_slot(root), &plan.next)?;
                Ok(())
            })?;
        }
        Ok(())
    }
}

/// Reads the plan block at `block` (recovery), checking its magic and checksum.
pub(crate) fn read_plan(pool: &Pool, block: u64) -> Result<Plan, DefragError> {
    let h: PlanHeader = pool.read(PPtr::from_offset(block))?;
    let len = (h.moves.checked_add(h.pages))
        .and_then(|n| n.checked_mul(16))
        .ok_or_else(|| DefragError::Corrupt("compaction plan size".into()))?;
    let body = pool
        .bytes(block + PLAN_HEADER, len)
        .map_err(|_| DefragError::Corrupt("compaction plan outside the pool".into()))?;
    if h.magic != PLAN_MAGIC || h.crc != u64::from(crc32c::crc32c(body)) {
        return Err(DefragError::Corrupt(
            "compaction plan checksum mismatch".into(),
        ));
    }
    let pairs: Vec<(u64, u64)> = body
        .chunks_exact(16)
        .map(|c| {
            let w = |i: usize| u64::from_le_bytes(c[i..i + 8].try_into().unwrap_or([0; 8]));
            (w(0), w(8))
        })
        .collect();
    let (moves, pages) = pairs.split_at(h.moves as usize);
    Ok(Plan {
        block,
        moves: moves.to_vec(),
        pages: pages.to_vec(),
        destinations: Vec::new(),
        next: h.next,
        tracked: h.tracked != 0,
        destination_bytes: 0,
    })
}

/// The root's word that names the newest plan of the compaction in progress.
pub(crate) fn compaction_slot(root: PPtr<HeapRoot>) -> PPtr<u64> {
    PPtr::from_offset(root.offset() + std::mem::offset_of!(HeapRoot, compaction) as u64)
}
