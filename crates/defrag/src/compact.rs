//! Compaction: summary, persisted plans (the forwarding table), moves, healing and
//! release. The recovery of an interrupted compaction is in [`crate::open`].
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
//!   compaction are persisted, each in a short hold of the heap lock, pending,
//!   then committed at once, before its first move ([`crate::planning`]).
//! * **Moves** by the protocol chosen ([`crate::Protocol`]), on the defragmenter
//!   thread ([`crate::Compaction`]) or inside a mutator's barrier.
//! * **Healing.** Once every move is published, every pointer (roots, and the
//!   fields of every object outside the relocation pages) that names a source is
//!   swapped to its destination by CAS, beside running transactions
//!   ([`crate::heal`]); at open, by [`DefragHeap::heal`] with the heap alone.
//! * **Release.** Under the heap lock, the compaction is deactivated (the barrier
//!   goes off; no compaction or marking may start until the release is done).
//!   Then each plan, newest first, is released in one transaction beside the
//!   running ones (at open, with the heap alone): its relocation pages (excluded
//!   from allocation until it commits) and its block are freed and it is
//!   unlinked from the head of the root's chain. A crash between two releases
//!   leaves a shorter chain, which recovery finishes alike.
//!
//! Recovery (at open, [`crate::open`]) walks the chain, makes every move whose forward word is not
//! set (the source is still authoritative: no one wrote the copy or holds a
//! pointer to it, see [`crate::barrier`]) with Espresso's sequence, heals, and
//! releases: idempotent, since each step is.

use std::collections::{BTreeMap, BTreeSet};

use pmem_core::{PPtr, Pool};
use zerocopy::IntoBytes;

use crate::heap::{DefragHeap, DefragTx, Shared};
use crate::layout::{
    class_of, HeapRoot, ObjHeader, PageHeader, PlanHeader, OBJ_HEADER, PAGE_HEADER, PAGE_MAGIC,
    PLAN_HEADER, PLAN_MAGIC, ROOTS,
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
    /// The longest hold of the heap lock while planning (one slice of
    /// [`crate::planning`]: the snapshot, a slice of the figures, one plan, or
    /// the commit), ns: the longest time planning kept transactions out.
    pub plan_pause_ns: u64,
    /// The longest hold of the heap (alone) after planning: the deactivation
    /// and its bookkeeping (healing holds only object locks, one at a time, and
    /// the releases are transactions beside the mutators').
    pub heal_pause_max_ns: u64,
    /// Nanoseconds the heap was held alone while planning, all slices together.
    pub plan_locked_ns: u64,
    /// Nanoseconds the heap was held alone in all, planning and deactivation
    /// together: the time mutators' transactions could not run.
    pub locked_ns: u64,
    /// Ratio before (footprint / live bytes).
    pub ratio_before: f64,
    /// Ratio after: the footprint left over the live bytes when the compaction
    /// began (exact when no mutator ran; [`DefragHeap::stats`] counts anew).
    pub ratio_after: f64,
}

/// The summary of a compaction's planning: per slot size, the candidate pages
/// (occupancy, page) by occupancy, and how many of them earlier plans took.
#[derive(Default)]
pub(crate) struct Candidates {
    by_slot: BTreeMap<u64, (Vec<(u64, u64)>, usize)>,
}

impl Candidates {
    /// The summary of `pages` (page, slot, capacity, used): per slot size the
    /// pages with a live object, by occupancy. A plan takes the best prefix of
    /// what earlier plans left, so no page is relocated twice, and no
    /// destination (not in these lists) is ever relocated.
    pub(crate) fn new(pages: impl Iterator<Item = (u64, u64, u64, u64)>) -> Candidates {
        let mut c = Candidates::default();
        for (page, slot, capacity, used) in pages {
            if capacity > 1 {
                c.by_slot.entry(slot).or_default().0.push((used, page));
            }
        }
        for (pages, _) in c.by_slot.values_mut() {
            pages.sort_unstable();
        }
        c
    }
}

/// A slot size's share of a plan: (slot, relocation pages with their
/// occupancy, destination pages needed).
type Chosen = (u64, Vec<(u64, u64)>, u64);

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
    /// The plan is pending: its compaction is still being planned (the
    /// header's flag, set on the newest plan of a chain only; recovery undoes
    /// a chain whose newest plan is pending).
    pub pending: bool,
    /// Bytes of the destination pages (DRAM only: the planning's running
    /// footprint).
    pub destination_bytes: u64,
    /// Objects each relocation page held when the plan was made, in the order
    /// of `pages` (DRAM only: the commit's revalidation).
    pub sources: Vec<u64>,
}

impl<A: pmem_core::PersistentAllocator + 'static> DefragHeap<A> {
    /// One plan (one slice of the planning, under the heap lock the caller
    /// holds): picks the relocation pages from what `candidates` has left,
    /// skipping those that changed since the summary (gone, of another slot
    /// size, or a destination of an earlier plan: `destinations`), excludes them
    /// from allocation, and persists the plan, pending, with its destination
    /// pages. `None` if nothing would be freed.
    pub(crate) fn plan(
        &self,
        shared: &mut Shared,
        candidates: &mut Candidates,
        round_pages: usize,
        destinations: &BTreeSet<u64>,
    ) -> Result<Option<(Plan, u64)>, DefragError> {
        let mut chosen: Vec<Chosen> = Vec::new();
        let mut room = round_pages;
        for (&slot, (pages, taken)) in &mut candidates.by_slot {
            // The next candidates still as the summary saw them, with their
            // occupancy now and how many entries each one consumes.
            let mut valid: Vec<(u64, u64, usize)> = Vec::new();
            let mut capacity = 0;
            for (k, &(_, page)) in pages[*taken..].iter().enumerate() {
                if valid.len() >= room {
                    break;
                }
                match shared.pages.all.get(&page) {
                    Some(info)
                        if info.slot == slot
                            && info.capacity > 1
                            && info.used > 0
                            && !destinations.contains(&page) =>
                    {
                        capacity = info.capacity;
                        valid.push((info.used, page, k + 1));
                    }
                    _ => {}
                }
            }
            let (mut best, mut best_m, mut live) = (0i64, 0, 0);
            for (m, &(used, _, _)) in valid.iter().enumerate() {
                live += used;
                let saved = (m as i64 + 1) - live.div_ceil(capacity) as i64;
                if saved > best {
                    (best, best_m) = (saved, m + 1);
                }
            }
            if best > 0 {
                room -= best_m;
                *taken += valid[best_m - 1].2;
                let set: Vec<(u64, u64)> =
                    valid[..best_m].iter().map(|&(u, p, _)| (p, u)).collect();
                let live: u64 = set.iter().map(|&(_, u)| u).sum();
                chosen.push((slot, set, live.div_ceil(capacity)));
            }
        }
        if chosen.is_empty() {
            return Ok(None);
        }
        // No transaction allocates in a relocation page from here on: its
        // objects, listed now, are exactly the plan's sources (a transaction
        // may still free one before the commit: see `planning`).
        for (_, set, _) in &chosen {
            for &(page, _) in set {
                shared.pages.exclude(page, true);
            }
        }
        // The objects to move, in page and slot order, with their headers
        // (copied to their destinations, so the heap's figures count them there
        // while the plan is pending).
        let mut sources: Vec<(u64, Vec<(u64, ObjHeader)>)> = Vec::new();
        let mut counts = Vec::new();
        for (slot, set, _) in &chosen {
            let mut objs = Vec::new();
            for &(page, _) in set {
                let before = objs.len();
                self.for_each_object_in(page, &mut |obj, type_id, size| {
                    objs.push((
                        obj,
                        ObjHeader {
                            type_id,
                            size,
                            forward: 0,
                        },
                    ))
                })?;
                counts.push((objs.len() - before) as u64);
            }
            sources.push((*slot, objs));
        }
        let reloc: Vec<(u64, u64)> = chosen
            .iter()
            .flat_map(|(_, set, _)| {
                set.iter()
                    .map(|&(p, _)| (p, shared.pages.all.get(&p).map_or(0, |i| i.bytes)))
            })
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
                    for (i, &(src, oh)) in chunk.iter().enumerate() {
                        h.set(i as u64, true);
                        let dst = page + PAGE_HEADER + i as u64 * slot + OBJ_HEADER;
                        moves.push((src, dst));
                        t.raw().write(PPtr::from_offset(dst - OBJ_HEADER), &oh)?;
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
            if next != 0 {
                // The newest plan alone says the chain is pending.
                t.raw().write(crate::layout::pending_word(next), &0u64)?;
            }
            let header = PlanHeader {
                magic: PLAN_MAGIC,
                moves: moves.len() as u64,
                pages: reloc.len() as u64,
                crc: u64::from(crc32c::crc32c(&body)),
                next,
                tracked: 0,
                pending: 1,
                reserved: 0,
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
                pending: true,
                destination_bytes,
                sources: counts.clone(),
            })
        })?;
        Ok(Some((plan, new_pages)))
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
                free_and_unlink(t, root, plan, &plan.pages)
            })?;
        }
        Ok(())
    }

    /// Releases `plan`, the newest of the root's chain, as an ordinary
    /// transaction beside running ones: frees its relocation pages and its
    /// block and unlinks it. Nothing can reach those pages (every reference was
    /// healed and the barrier is off), and they stay excluded from allocation
    /// until the transaction that frees them has committed (a rollback reloads
    /// them, still excluded).
    pub(crate) fn release_beside_transactions(&self, plan: &Plan) -> Result<(), DefragError> {
        let root = self.root;
        self.transaction(|t| free_and_unlink(t, root, plan, &plan.pages))?;
        let mut g = self.shared.write();
        for &(page, _) in &plan.pages {
            g.pages.exclude(page, false);
        }
        Ok(())
    }
}

/// In one transaction `t`: frees `pages` (relocation pages, or those an undo
/// emptied) and `plan`'s block, and unlinks `plan` from the head of the root's
/// chain: the body of a plan's release and of its undo.
pub(crate) fn free_and_unlink(
    t: &mut DefragTx<'_, '_>,
    root: PPtr<HeapRoot>,
    plan: &Plan,
    pages: &[(u64, u64)],
) -> Result<(), DefragError> {
    for &(page, bytes) in pages {
        t.raw().free(PPtr::from_offset(page), bytes)?;
    }
    let freed: Vec<u64> = pages.iter().map(|&(page, _)| page).collect();
    t.drop_pages(&freed);
    let h: PlanHeader = t.raw().read(PPtr::from_offset(plan.block))?;
    t.raw().free(
        PPtr::from_offset(plan.block),
        PLAN_HEADER + 16 * (h.moves + h.pages),
    )?;
    t.raw().write(compaction_slot(root), &plan.next)?;
    Ok(())
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
    // Every offset a move names is an object's: past a page header and an object
    // header, 16-byte aligned. Recovery computes header words below them, so a
    // damaged plan is refused here rather than met as an underflow there.
    let object = |at: u64| at >= PAGE_HEADER + OBJ_HEADER && at.is_multiple_of(16);
    if let Some(&(src, dst)) = moves.iter().find(|&&(s, d)| !object(s) || !object(d)) {
        return Err(DefragError::Corrupt(format!(
            "compaction plan moves {src:#x} to {dst:#x}: not object offsets"
        )));
    }
    Ok(Plan {
        block,
        moves: moves.to_vec(),
        pages: pages.to_vec(),
        destinations: Vec::new(),
        next: h.next,
        tracked: h.tracked != 0,
        pending: h.pending != 0,
        destination_bytes: 0,
        sources: Vec::new(),
    })
}

/// The root's word that names the newest plan of the compaction in progress.
pub(crate) fn compaction_slot(root: PPtr<HeapRoot>) -> PPtr<u64> {
    PPtr::from_offset(root.offset() + std::mem::offset_of!(HeapRoot, compaction) as u64)
}
