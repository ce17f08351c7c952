//! Planning a compaction in slices, so transactions wait a few milliseconds at a
//! time instead of the whole planning (the paper's pause is marking only; this
//! crate does not mark to compact, its page index says what is live).
//!
//! 1. **Claim and snapshot** (one hold of the heap lock): no other compaction or
//!    marking may start; the page index is copied (page, slot size, capacity,
//!    occupancy).
//! 2. **Figures in slices**: live bytes and footprint, [`STATS_SLICE`] pages per
//!    hold (exact when no transaction runs meanwhile, as in the benchmarks'
//!    stop-the-world rows; beside transactions, a figure of a moving heap).
//! 3. **Summary** outside the lock, from the snapshot.
//! 4. **Plans in slices**: one plan per hold: its
//!    relocation pages are checked against the index as it is now (a page
//!    gone, reused or turned into a destination is skipped), excluded from
//!    allocation, their objects listed, and the plan persisted *pending*, with
//!    its destination pages, chained from the root as before. Transactions run
//!    between two slices. They cannot allocate in a relocation page; they may
//!    free one of its objects, and a relocation page they empty stays (empty,
//!    excluded) until the compaction releases it.
//! 5. **The barrier's DRAM maps** built outside the lock.
//! 6. **Commit** (one hold): the relocation pages a transaction freed an
//!    object of since their plan are read again; the barrier is switched on;
//!    each source freed meanwhile is moved by it and freed at its destination
//!    (a batch per transaction, the plans still pending); then one
//!    transaction clears the pending flag (only the newest plan carries it:
//!    each slice's transaction moves it from the plan before to its own).
//!
//! **The remaining pause** is the longest of these holds:
//! [`crate::CompactReport::plan_pause_ns`] (the sum of them is in
//! [`crate::CompactReport::locked_ns`]). A slice is bounded by the plan size
//! (at most ~1,000 relocation pages); the commit by the number of plans (one
//! 8-byte store each) and of sources freed during the planning.
//!
//! **Crashes.** A crash before the commit leaves a chain of pending plans,
//! which recovery *undoes*: the destination slots
//! are freed (a destination page left empty is freed), so are relocation pages
//! emptied meanwhile and the plan blocks; no object has moved (a move the
//! commit's transaction made went into a slot the undo frees). After the
//! commit, recovery finishes the compaction as before.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use pmem_core::{PPtr, PersistentAllocator};

use crate::barrier::Active;
use crate::compact::{free_and_unlink, Candidates, Plan};
use crate::heap::{DefragHeap, HeapStats, Shared};
use crate::layout::{pending_word, PageHeader, OBJ_HEADER, PAGE_HEADER, ROUND_PAGES};
use crate::protocol::{CompactOptions, Protocol};
use crate::DefragError;

/// Pages whose objects are counted per hold of the heap lock (a few
/// milliseconds at most).
pub const STATS_SLICE: usize = 512;

/// Relocation pages per plan, at most (a plan is persisted in one hold of the
/// lock: a few milliseconds).
pub const SLICE_PAGES: usize = 256;

/// Destination pages whose slots one undo transaction frees (within the log's
/// 64 object records).
const UNDO_PAGES: usize = 32;

/// Sources freed during the planning that one commit transaction frees again
/// (each writes a destination page header: within the log's object records).
const REFREE_BATCH: usize = 32;

/// Holds of the heap lock: the longest and their sum, ns.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pauses {
    pub longest: u64,
    pub total: u64,
}

impl Pauses {
    /// Counts a hold that began at `t0` and ends now.
    pub(crate) fn note(&mut self, t0: Instant) {
        let ns = t0.elapsed().as_nanos() as u64;
        self.longest = self.longest.max(ns);
        self.total += ns;
    }
}

/// A planned and committed compaction, its barrier on.
pub(crate) struct Planned {
    /// Newest first, as the root chains them.
    pub plans: Vec<Plan>,
    pub allocated: u64,
    pub before: HeapStats,
    pub active: Arc<Active>,
}

/// What the snapshot keeps of a page: (page, slot, capacity, used).
type Snap = (u64, u64, u64, u64);

impl<A: PersistentAllocator + 'static> DefragHeap<A> {
    /// Plans a compaction in slices (see the [module](self)) and switches its
    /// barrier on. `None` if the ratio is at or below the target or nothing
    /// would be freed. `between` runs after each plan's slice, outside the lock
    /// (tests put transactions there).
    pub(crate) fn plan_compaction(
        &self,
        opts: &CompactOptions,
        protocol: Protocol,
        tracked: bool,
        pauses: &mut Pauses,
        between: &mut dyn FnMut(&DefragHeap<A>),
    ) -> Result<Option<Planned>, DefragError> {
        let snap: Vec<Snap> = {
            let mut g = self.lock()?;
            let t0 = Instant::now();
            if g.active.is_some() || g.releasing {
                return Err(DefragError::Busy);
            }
            // Claimed: `releasing` keeps other compactions and marking out (a
            // pending plan's destination slots would look like leaks).
            g.releasing = true;
            let snap = g
                .pages
                .all
                .iter()
                .map(|(&p, i)| (p, i.slot, i.capacity, i.used))
                .collect();
            pauses.note(t0);
            snap
        };
        let mut plans = Vec::new();
        let r = self.plan_claimed(opts, protocol, tracked, &snap, pauses, between, &mut plans);
        if !matches!(r, Ok(Some(_))) {
            let mut g = self.lock()?;
            let t0 = Instant::now();
            if let Err(e) = &r {
                tracing::warn!(error = %e, plans = plans.len(), "planning failed: undoing its plans");
            }
            plans.reverse();
            let undone = self.undo_plans(&mut g, &plans);
            g.releasing = false;
            pauses.note(t0);
            undone?;
        }
        r
    }

    /// Steps 2 to 6 of the planning; `plans` collects the plans persisted (oldest
    /// first) for the caller to undo on failure.
    #[allow(clippy::too_many_arguments)]
    fn plan_claimed(
        &self,
        opts: &CompactOptions,
        protocol: Protocol,
        tracked: bool,
        snap: &[Snap],
        pauses: &mut Pauses,
        between: &mut dyn FnMut(&DefragHeap<A>),
        plans: &mut Vec<Plan>,
    ) -> Result<Option<Planned>, DefragError> {
        let before = self.stats_in_slices(snap, pauses)?;
        if before.frag_ratio <= opts.target {
            return Ok(None);
        }
        let pool = self.tx.pool();
        if tracked {
            // A fresh bitmap for this compacting phase (the paper's §4.2): no
            // move is tracked before the commit.
            pool.reset_reached();
        }
        let mut candidates = Candidates::new(snap.iter().copied());
        let round_pages = opts.plan_pages.clamp(2, ROUND_PAGES).min(SLICE_PAGES);
        // Moves change no object's size: the ratio follows the footprint, which
        // each plan changes by its destination pages less its relocation pages.
        let live = before.live_bytes.max(1) as f64;
        let mut footprint = before.footprint_bytes;
        let mut ratio = before.frag_ratio;
        let mut destinations = BTreeSet::new();
        let mut allocated = 0;
        while ratio > opts.target {
            let mut g = self.lock()?;
            let t0 = Instant::now();
            let r = self.plan(&mut g, &mut candidates, round_pages, &destinations);
            pauses.note(t0);
            Self::unlock_fair(g);
            let Some((plan, new_pages)) = r? else {
                break;
            };
            allocated += new_pages;
            destinations.extend(plan.destinations.iter().map(|&(p, _)| p));
            footprint += plan.destination_bytes;
            footprint -= plan.pages.iter().map(|&(_, b)| b).sum::<u64>();
            ratio = footprint as f64 / live;
            plans.push(plan);
            between(self);
        }
        if plans.is_empty() {
            return Ok(None);
        }
        plans.reverse();
        let moves = plans.iter().flat_map(|p| p.moves.iter().copied()).collect();
        let relocation = plans
            .iter()
            .flat_map(|p| p.pages.iter().map(|&(page, _)| page))
            .collect();
        let dests = plans
            .iter()
            .flat_map(|p| p.destinations.iter().copied())
            .collect::<Vec<_>>();
        let active = Arc::new(Active::new(protocol, moves, &dests, relocation));
        // Each relocation page's plan, first move and sources listed.
        let mut by_page = BTreeMap::new();
        for (k, plan) in plans.iter().enumerate() {
            let mut first = 0usize;
            for (i, &(page, _)) in plan.pages.iter().enumerate() {
                let listed = plan.sources.get(i).copied().unwrap_or(0);
                by_page.insert(page, (k, first, listed));
                first += listed as usize;
            }
        }
        let mut g = self.lock()?;
        let t0 = Instant::now();
        let committed = self.commit(&mut g, plans, tracked, &active, &by_page);
        if committed.is_ok() {
            g.releasing = false;
        }
        pauses.note(t0);
        committed?;
        Ok(Some(Planned {
            plans: std::mem::take(plans),
            allocated,
            before,
            active,
        }))
    }

    /// Live objects and footprint of the snapshot's pages still in the index,
    /// [`STATS_SLICE`] pages per hold of the lock.
    fn stats_in_slices(
        &self,
        snap: &[Snap],
        pauses: &mut Pauses,
    ) -> Result<HeapStats, DefragError> {
        let mut s = HeapStats {
            live_objects: 0,
            live_bytes: 0,
            footprint_bytes: 0,
            pages: 0,
            frag_ratio: 1.0,
        };
        for chunk in snap.chunks(STATS_SLICE) {
            let g = self.lock()?;
            let t0 = Instant::now();
            for &(page, ..) in chunk {
                let Some(info) = g.pages.all.get(&page) else {
                    continue;
                };
                s.pages += 1;
                s.footprint_bytes += info.bytes;
                self.for_each_object_in(page, &mut |_, _, size| {
                    s.live_objects += 1;
                    s.live_bytes += u64::from(size);
                })?;
            }
            pauses.note(t0);
            Self::unlock_fair(g);
        }
        if s.live_bytes > 0 {
            s.frag_ratio = s.footprint_bytes as f64 / s.live_bytes as f64;
        }
        Ok(s)
    }

    /// The commit (the caller holds the lock): sources freed since their plan
    /// marked live again and every pending flag cleared, in one transaction;
    /// the barrier on; then those sources freed through it.
    fn commit(
        &self,
        shared: &mut Shared,
        plans: &[Plan],
        tracked: bool,
        active: &Arc<Active>,
        by_page: &BTreeMap<u64, (usize, usize, u64)>,
    ) -> Result<(), DefragError> {
        let pool = self.tx.pool();
        // The sources freed since their plan listed them, by relocation page:
        // only pages the frees noted need a look.
        let noted = std::mem::take(&mut shared.pages.freed_in_excluded);
        let mut freed: Vec<(u64, Vec<u64>)> = Vec::new();
        for &page in &noted {
            let Some(&(k, first, listed)) = by_page.get(&page) else {
                continue;
            };
            let info = shared.pages.all.get(&page).copied().ok_or_else(|| {
                DefragError::Corrupt(format!("relocation page {page:#x} left the index"))
            })?;
            if info.used == listed {
                continue;
            }
            let h: PageHeader = pool.read(PPtr::from_offset(page))?;
            let gone: Vec<u64> = plans[k].moves[first..first + listed as usize]
                .iter()
                .map(|&(src, _)| src)
                .filter(|&src| slot_index(page, src, info.slot).is_some_and(|i| !h.is_live(i)))
                .collect();
            if !gone.is_empty() {
                freed.push((page, gone));
            }
        }
        // The barrier on, the plans still pending: the sources freed meanwhile
        // are moved by it and freed at their destinations (a source's slot
        // stays free, its forward word names its destination, whose slot is
        // freed), a batch per transaction. A crash in between undoes the
        // chain, which frees every destination slot anyway. Moves are tracked
        // from here (FFCCD on ADR).
        if tracked {
            crate::reached::flag_plans(pool, plans, true)?;
        }
        shared.active = Some(Arc::clone(active));
        let sources: Vec<u64> = freed.iter().flat_map(|(_, g)| g.iter().copied()).collect();
        let mut committed = Ok(());
        for batch in sources.chunks(REFREE_BATCH) {
            committed = self.transaction_locked(shared, Default::default(), |t| {
                for &src in batch {
                    t.free_any(src)?;
                }
                Ok(())
            });
            if committed.is_err() {
                break;
            }
        }
        if committed.is_ok() {
            // Only the newest plan is flagged (each plan's slice cleared the
            // flag of the one before).
            committed = self.transaction_locked(shared, Default::default(), |t| {
                if let Some(head) = plans.first() {
                    t.raw().write(pending_word(head.block), &0u64)?;
                }
                Ok(())
            });
        }
        if let Err(e) = committed {
            // Nothing committed: the plans are still pending (the moves the
            // barrier made went into slots the undo frees).
            shared.active = None;
            if tracked {
                crate::reached::flag_plans(pool, plans, false)?;
            }
            return Err(e);
        }
        if !sources.is_empty() {
            tracing::debug!(
                sources = sources.len(),
                "sources freed during the planning: moved and freed at their destinations"
            );
        }
        Ok(())
    }

    /// Undoes pending plans (newest first, as the root chains them; the caller
    /// holds the lock and no compaction is active): every destination slot
    /// freed (and a destination page left empty), every relocation page
    /// allowed again (and freed if a transaction emptied it), every block freed
    /// and unlinked. Idempotent: recovery may run it again after a crash.
    pub(crate) fn undo_plans(
        &self,
        shared: &mut Shared,
        plans: &[Plan],
    ) -> Result<(), DefragError> {
        let root = self.root;
        for plan in plans {
            let mut by_page: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
            for &(_, dst) in &plan.moves {
                if let Some((&page, info)) = shared.pages.all.range(..=dst).next_back() {
                    if dst < page + info.bytes {
                        // Undoing must free exactly the destination's slot: a
                        // plan naming no slot is damage, refused before any
                        // slot is freed.
                        let slot = slot_index(page, dst, info.slot)
                            .filter(|&i| i < info.capacity)
                            .ok_or_else(|| {
                                DefragError::Corrupt(format!(
                                    "compaction plan destination {dst:#x} is not a slot of page {page:#x}"
                                ))
                            })?;
                        by_page.entry(page).or_default().push(slot);
                    }
                }
            }
            let pages: Vec<(u64, Vec<u64>)> = by_page.into_iter().collect();
            for chunk in pages.chunks(UNDO_PAGES) {
                self.transaction_locked(shared, Default::default(), |t| {
                    for (page, slots) in chunk {
                        let mut h: PageHeader = t.raw().read(PPtr::from_offset(*page))?;
                        for &i in slots {
                            if h.is_live(i) {
                                h.set(i, false);
                                h.used -= 1;
                            }
                        }
                        if h.used == 0 {
                            t.raw().free(PPtr::from_offset(*page), h.bytes)?;
                            t.drop_page(*page);
                        } else {
                            t.raw().write(PPtr::from_offset(*page), &h)?;
                            t.add_page(*page, &h);
                        }
                    }
                    Ok(())
                })?;
            }
            for &(page, _) in &plan.pages {
                shared.pages.exclude(page, false);
            }
            // Relocation pages a transaction emptied meanwhile (kept, excluded,
            // until now).
            let emptied: Vec<(u64, u64)> = plan
                .pages
                .iter()
                .filter_map(|&(page, _)| {
                    let info = shared.pages.all.get(&page)?;
                    (info.used == 0).then_some((page, info.bytes))
                })
                .collect();
            self.transaction_locked(shared, Default::default(), |t| {
                free_and_unlink(t, root, plan, &emptied)?;
                if plan.next != 0 {
                    // The flag moves to the new head: a crash before the rest
                    // is undone leaves a chain recovery still undoes.
                    t.raw().write(pending_word(plan.next), &1u64)?;
                }
                Ok(())
            })?;
        }
        Ok(())
    }
}

/// The slot of `page` (slots of `slot` bytes) that holds the object at `obj`;
/// `None` if `obj` is not where a slot's object starts (a damaged plan's offset
/// inside the page header or between two slots).
fn slot_index(page: u64, obj: u64, slot: u64) -> Option<u64> {
    let rel = obj.checked_sub(page + PAGE_HEADER + OBJ_HEADER)?;
    let slot = slot.max(1);
    rel.is_multiple_of(slot).then_some(rel / slot)
}
