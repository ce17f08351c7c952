//! Stop-the-world compaction with the Espresso protocol (the FFCCD paper's baseline,
//! §3.3.2): summary, a persisted plan (the forwarding table), moves of two fences
//! each, reference healing, and the release of the emptied pages; recovery finishes
//! an interrupted compaction.
//!
//! * **Summary.** Per slot size, the slab pages sorted by occupancy; the relocation
//!   set is the least-occupied prefix that frees the most pages when its objects
//!   are packed into new destination pages. The destinations are assigned in page
//!   and slot order, so the plan is deterministic.
//! * **Plans.** One transaction per plan (at most ~1,000 relocation pages, the
//!   log's allocation records) allocates the destination pages (their bitmaps
//!   already showing every planned slot), writes the plan block (the pairs, the
//!   relocation pages, a checksum, the previous plan) and points the heap root at
//!   it: a compaction's plans form a chain. A later plan never relocates an earlier
//!   plan's pages, destinations included, so no object moves twice.
//! * **Moves** (Espresso): copy the object to its destination, persist (fence 1);
//!   store the destination in the source header's `forward`, persist (fence 2).
//!   Until the second fence the source is authoritative; after it, the copy.
//! * **Healing.** Every pointer (roots, and the fields of every object outside the
//!   relocation pages, the copies included) that names a moved source is rewritten
//!   to its destination, then one fence.
//! * **Healing** happens once, after every plan's moves.
//! * **Release.** Per plan, newest first, one transaction frees its relocation
//!   pages and its block and unlinks it from the root's chain.
//!
//! Recovery (at open) walks the chain, redoes every move whose `forward` is not set
//! (the source is still authoritative: nothing wrote the copy), heals, and
//! releases: idempotent, since each step is. The concurrent protocols of the paper
//! (a read barrier in place of stop-the-world healing; SFCCD; FFCCD) are not built.
//!
//! In this stop-the-world form the second fence of a move is not needed: no mutator
//! can write a copy before healing ends, so a recovery that finds `forward` unset
//! and copies again writes the same bytes (the crash suite's mutant without that
//! fence survives, as it should; the one without the first is caught). It is kept so
//! that a move is the paper's Espresso move, whose second fence the concurrent
//! version (mutators writing through healed references) needs.

use std::collections::{BTreeMap, BTreeSet};

use pmem_core::{Counters, PPtr};
use zerocopy::IntoBytes;

use crate::heap::DefragHeap;
use crate::layout::{
    class_of, HeapRoot, ObjHeader, PageHeader, PlanHeader, OBJ_HEADER, PAGE_HEADER, PAGE_MAGIC,
    PLAN_HEADER, PLAN_MAGIC, ROOTS,
};
use crate::DefragError;

/// What a compaction did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CompactReport {
    /// Objects moved.
    pub moved: u64,
    /// Relocation page runs freed.
    pub pages_freed: u64,
    /// Destination pages allocated.
    pub pages_allocated: u64,
    /// Fences issued by the moves (2 per move under Espresso).
    pub move_fences: u64,
    /// Ratio before and after (footprint / live bytes).
    pub ratio_before: f64,
    /// See `ratio_before`.
    pub ratio_after: f64,
}

/// Relocation pages per plan: a plan allocates its destination pages in one
/// transaction and its release frees its relocation pages in another, each within
/// the log's allocation records (`heap::ALLOC_RECORDS`).
const ROUND_PAGES: usize = crate::heap::ALLOC_RECORDS as usize - 16;

/// A plan in DRAM: its block, moves, relocation pages and the plan before it.
struct Plan {
    block: u64,
    moves: Vec<(u64, u64)>,
    pages: Vec<(u64, u64)>,
    next: u64,
    /// The destination pages (DRAM only: a later plan of the same compaction must
    /// not relocate them, so no move is ever moved again).
    destinations: Vec<u64>,
}

impl DefragHeap {
    /// Compacts the heap if its fragmentation ratio is above `target` (the paper
    /// triggers at 1.5 with a target of 1.25): moves the objects of the
    /// least-occupied pages of each size into fresh pages, heals every reference and
    /// frees the emptied pages. Stop-the-world (`&mut self`); crash-consistent at
    /// every point (recovery finishes it).
    pub fn compact(&mut self, target: f64) -> Result<CompactReport, DefragError> {
        self.compact_in_plans_of(target, ROUND_PAGES)
    }

    /// [`DefragHeap::compact`] with at most `round_pages` relocation pages per plan
    /// (tests use small plans to crash compactions of several plans).
    #[doc(hidden)]
    pub fn compact_in_plans_of(
        &mut self,
        target: f64,
        round_pages: usize,
    ) -> Result<CompactReport, DefragError> {
        let round_pages = round_pages.clamp(2, ROUND_PAGES);
        let before = self.stats()?;
        let mut report = CompactReport {
            ratio_before: before.frag_ratio,
            ratio_after: before.frag_ratio,
            ..CompactReport::default()
        };
        // Plans of at most ROUND_PAGES relocation pages, each persisted and its
        // moves made, until the target or nothing to gain; then one healing pass
        // for all of them, and their release. Moves change no object's size: the
        // ratio follows the footprint left once the relocation pages are gone.
        let live = before.live_bytes.max(1) as f64;
        let mut excluded: BTreeSet<u64> = BTreeSet::new();
        let mut frozen: BTreeSet<u64> = BTreeSet::new();
        let mut plans = Vec::new();
        while report.ratio_after > target {
            let Some((plan, new_pages)) = self.plan(&frozen, round_pages)? else {
                break;
            };
            frozen.extend(plan.pages.iter().map(|&(p, _)| p));
            frozen.extend(plan.destinations.iter().copied());
            report.pages_allocated += new_pages;
            let (moved, fences) = self.make_moves(&plan)?;
            report.moved += moved;
            report.move_fences += fences;
            report.pages_freed += plan.pages.len() as u64;
            excluded.extend(plan.pages.iter().map(|&(p, _)| p));
            plans.push(plan);
            let footprint: u64 = self
                .pages
                .all
                .iter()
                .filter(|(p, _)| !excluded.contains(p))
                .map(|(_, i)| i.bytes)
                .sum();
            report.ratio_after = footprint as f64 / live;
        }
        if !plans.is_empty() {
            // Chain order: newest first, as the root links them.
            plans.reverse();
            self.heal_and_release(&plans)?;
        }
        tracing::info!(?report, "compacted");
        Ok(report)
    }

    /// Summary and plan: picks the relocation pages, persists the plan with its
    /// destination pages. `None` if nothing would be freed.
    fn plan(
        &mut self,
        frozen: &BTreeSet<u64>,
        round_pages: usize,
    ) -> Result<Option<(Plan, u64)>, DefragError> {
        // Per slot size, the pages with a live object that this compaction has not
        // planned yet (neither relocation nor destination), by occupancy.
        let mut by_slot: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
        for (&page, info) in &self.pages.all {
            if info.capacity > 1 && !frozen.contains(&page) {
                by_slot
                    .entry(info.slot)
                    .or_default()
                    .push((info.used, page));
            }
        }
        let mut chosen: Vec<(u64, Vec<u64>, u64)> = Vec::new();
        let mut room = round_pages;
        for (&slot, pages) in &mut by_slot {
            pages.sort_unstable();
            let capacity = self.pages.all[&pages[0].1].capacity;
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
                self.for_each_object_in(page, &mut |obj, _| objs.push(obj))?;
            }
            sources.push((*slot, objs));
        }
        let reloc: Vec<(u64, u64)> = chosen
            .iter()
            .flat_map(|(_, set, _)| set.iter().map(|&p| (p, self.pages.all[&p].bytes)))
            .collect();
        let new_pages: u64 = chosen.iter().map(|(_, _, n)| n).sum();
        let root = self.root;
        let plan = self.transaction(|t| {
            let mut moves = Vec::new();
            let mut destinations = Vec::new();
            for (slot, objs) in &sources {
                let (_, bytes, capacity) = class_of(slot - OBJ_HEADER);
                for chunk in objs.chunks(capacity as usize) {
                    let page = t.raw().alloc(bytes)?.offset();
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
                    destinations.push(page);
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
            let at = PPtr::<u64>::from_offset(
                root.offset() + std::mem::offset_of!(HeapRoot, compaction) as u64,
            );
            let next = t.raw().read(at)?;
            let header = PlanHeader {
                magic: PLAN_MAGIC,
                moves: moves.len() as u64,
                pages: reloc.len() as u64,
                crc: u64::from(crc32c::crc32c(&body)),
                next,
                reserved: [0; 3],
            };
            let block = t.raw().alloc(PLAN_HEADER + body.len() as u64)?.offset();
            t.raw().write_bytes(block, header.as_bytes())?;
            t.raw().write_bytes(block + PLAN_HEADER, &body)?;
            t.raw().write(at, &block)?;
            Ok(Plan {
                block,
                moves,
                pages: reloc.clone(),
                next,
                destinations,
            })
        })?;
        Ok(Some((plan, new_pages)))
    }

    /// Reads the plan the root names (recovery).
    fn read_plan(&self, block: u64) -> Result<Plan, DefragError> {
        let pool = self.tx.pool();
        let h: PlanHeader = pool.read(PPtr::from_offset(block))?;
        let len = (h.moves + h.pages)
            .checked_mul(16)
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
            next: h.next,
            destinations: Vec::new(),
        })
    }

    /// Finishes a compaction the root names, if any (open time): every plan of its
    /// chain has its missing moves made, then one healing pass and the release.
    pub(crate) fn finish_compaction(&mut self) -> Result<bool, DefragError> {
        let r: HeapRoot = self.tx.pool().read(self.root)?;
        let mut plans = Vec::new();
        let mut at = r.compaction;
        while at != 0 {
            if plans.len() > 1 << 20 {
                return Err(DefragError::Corrupt("compaction plan chain loops".into()));
            }
            let plan = self.read_plan(at)?;
            at = plan.next;
            plans.push(plan);
        }
        if plans.is_empty() {
            return Ok(false);
        }
        tracing::info!(plans = plans.len(), "finishing an interrupted compaction");
        for plan in &plans {
            self.make_moves(plan)?;
        }
        self.heal_and_release(&plans)?;
        Ok(true)
    }

    /// Makes the plan's moves not made yet (Espresso: copy, fence; forward word,
    /// fence). Returns the moves made and the fences they issued.
    fn make_moves(&mut self, plan: &Plan) -> Result<(u64, u64), DefragError> {
        let pool = self.tx.pool();
        let mut moved = 0;
        let c0 = Counters::current();
        for &(src, dst) in &plan.moves {
            let h: ObjHeader = pool.read(PPtr::from_offset(src - OBJ_HEADER))?;
            if h.forward == dst {
                continue;
            }
            let len = OBJ_HEADER + u64::from(h.size);
            let mut bytes = pool.bytes(src - OBJ_HEADER, len)?.to_vec();
            bytes[8..16].copy_from_slice(&0u64.to_le_bytes());
            // SAFETY: `&mut self` excludes every other access to the heap; the
            // destination slot is reserved by the persisted plan.
            unsafe { pool.write_bytes_shared(dst - OBJ_HEADER, &bytes)? };
            pool.persist(dst - OBJ_HEADER, len)?;
            let forward = src - OBJ_HEADER + 8;
            // SAFETY: as above; the source header belongs to the plan's move.
            unsafe { pool.write_bytes_shared(forward, &dst.to_le_bytes())? };
            pool.persist(forward, 8)?;
            moved += 1;
        }
        Ok((moved, Counters::since(c0).fences))
    }

    /// Heals every reference to the plans' moved objects, then releases the plans in
    /// chain order (`plans` newest first, as the root links them): each release
    /// frees its relocation pages and its block and unlinks it from the head of the
    /// root's chain, in one transaction.
    fn heal_and_release(&mut self, plans: &[Plan]) -> Result<(), DefragError> {
        let forwarding: BTreeMap<u64, u64> =
            plans.iter().flat_map(|p| p.moves.iter().copied()).collect();
        let reloc: BTreeSet<u64> = plans
            .iter()
            .flat_map(|p| p.pages.iter().map(|&(page, _)| page))
            .collect();
        self.heal(&forwarding, &reloc)?;
        let root = self.root;
        for plan in plans {
            self.transaction(|t| {
                for &(page, bytes) in &plan.pages {
                    t.raw().free(PPtr::from_offset(page), bytes)?;
                    t.drop_page(page);
                }
                let h: PlanHeader = t.raw().read(PPtr::from_offset(plan.block))?;
                t.raw().free(
                    PPtr::from_offset(plan.block),
                    PLAN_HEADER + 16 * (h.moves + h.pages),
                )?;
                let at = root.offset() + std::mem::offset_of!(HeapRoot, compaction) as u64;
                t.raw().write(PPtr::<u64>::from_offset(at), &plan.next)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Rewrites every pointer to a moved object (roots, and every object outside
    /// the relocation pages) to its destination, then fences.
    fn heal(
        &mut self,
        forwarding: &BTreeMap<u64, u64>,
        reloc: &BTreeSet<u64>,
    ) -> Result<(), DefragError> {
        let pool = self.tx.pool();
        let mut slots: Vec<u64> = Vec::new();
        let r: HeapRoot = pool.read(self.root)?;
        for i in 0..ROOTS {
            if forwarding.contains_key(&r.roots[i].ptr) {
                slots.push(self.root.offset() + 16 + i as u64 * 32 + 24);
            }
        }
        let pages: Vec<u64> = self
            .pages
            .all
            .keys()
            .copied()
            .filter(|p| !reloc.contains(p))
            .collect();
        for page in pages {
            let mut objs = Vec::new();
            self.for_each_object_in(page, &mut |obj, h| objs.push((obj, h.type_id)))?;
            for (obj, type_id) in objs {
                let desc = self
                    .registry
                    .get(type_id)
                    .ok_or(DefragError::Unregistered(type_id))?;
                for p in &desc.pointers {
                    let at = obj + u64::from(p.offset);
                    let v: u64 = pool.read(PPtr::from_offset(at))?;
                    if forwarding.contains_key(&v) {
                        slots.push(at);
                    }
                }
            }
        }
        for at in slots {
            let v: u64 = pool.read(PPtr::from_offset(at))?;
            // Plans never relocate a destination (`frozen`), so one step suffices.
            if let Some(&d) = forwarding.get(&v) {
                // SAFETY: `&mut self` excludes every other access; an aligned 8-byte
                // store is failure-atomic, and healing is idempotent.
                unsafe { pool.write_bytes_shared(at, &d.to_le_bytes())? };
                pool.flush(at, 8)?;
            }
        }
        pool.drain()?;
        Ok(())
    }
}
