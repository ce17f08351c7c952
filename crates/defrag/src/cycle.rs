//! A compaction cycle beside running mutators: [`DefragHeap::begin_compaction`]
//! plans in slices, each a short hold of the heap lock ([`crate::planning`]),
//! and activates the barrier; [`Compaction::step`] makes moves on the calling thread (the
//! defragmenter) without the lock while other threads run transactions;
//! [`Compaction::finish`] heals beside running transactions (by CAS, skipping
//! and revisiting what a running transaction holds: [`crate::heal`]), takes
//! the heap briefly to deactivate the barrier, then releases each plan in a
//! transaction of its own beside the running ones.
//! [`CompactReport::locked_ns`] says how long the cycle kept transactions out.

use std::sync::Arc;
use std::time::Instant;

use pmem_core::Counters;

use crate::barrier::Active;
use crate::compact::{CompactReport, Plan};
use pmem_core::{PageAllocator, PersistentAllocator};

use crate::heap::DefragHeap;
use crate::planning::Pauses;
use crate::protocol::{CompactOptions, Protocol};
use crate::DefragError;

/// A compaction in progress (see [`DefragHeap::begin_compaction`]). Dropping it
/// unfinished finishes it (errors are logged); recovery finishes it after a crash.
#[must_use = "a compaction holds the heap's relocation pages until finished"]
pub struct Compaction<'h, A: PersistentAllocator + 'static = PageAllocator> {
    heap: &'h DefragHeap<A>,
    active: Arc<Active>,
    plans: Vec<Plan>,
    next: usize,
    report: CompactReport,
    /// The moves are tracked by the reached bitmap (FFCCD on ADR).
    tracked: bool,
    /// Live bytes when the compaction began (its `ratio_after` is over them, so
    /// the release need not scan every object under the heap lock).
    live_bytes: u64,
    finished: bool,
}

impl<A: PersistentAllocator + 'static> std::fmt::Debug for Compaction<'_, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compaction")
            .field("protocol", &self.active.protocol)
            .field("moves", &self.active.moves.len())
            .field("next", &self.next)
            .finish()
    }
}

impl<A: PersistentAllocator + 'static> DefragHeap<A> {
    /// Starts a compaction if the fragmentation ratio is above `opts.target`:
    /// plans it in slices, a plan per short hold of the heap lock (summary,
    /// forwarding table, destination pages, all persisted; see
    /// [`crate::planning`]), then commits the plans and activates the barrier.
    /// `None` if there is nothing to gain. Run the returned [`Compaction`] on a
    /// defragmenter thread while other threads keep running transactions.
    pub fn begin_compaction(
        &self,
        opts: &CompactOptions,
    ) -> Result<Option<Compaction<'_, A>>, DefragError> {
        self.begin_compaction_between(opts, &mut |_| {})
    }

    /// [`DefragHeap::begin_compaction`] running `between` after each planning
    /// slice, outside the heap lock (crash tests put transactions there).
    #[doc(hidden)]
    pub fn begin_compaction_between(
        &self,
        opts: &CompactOptions,
        between: &mut dyn FnMut(&DefragHeap<A>),
    ) -> Result<Option<Compaction<'_, A>>, DefragError> {
        let pool = self.tx.pool();
        let protocol = opts.protocol.effective(pool, opts.eadr);
        let tracked = crate::protocol::tracked(protocol, pool, opts.eadr);
        let mut pauses = Pauses::default();
        let Some(planned) = self.plan_compaction(opts, protocol, tracked, &mut pauses, between)?
        else {
            return Ok(None);
        };
        let active = planned.active;
        let ratio_before = planned.before.frag_ratio;
        let report = CompactReport {
            protocol,
            tracked,
            ratio_before,
            ratio_after: ratio_before,
            pages_allocated: planned.allocated,
            pages_freed: active.relocation.len() as u64,
            plan_pause_ns: pauses.longest,
            plan_locked_ns: pauses.total,
            locked_ns: pauses.total,
            ..CompactReport::default()
        };
        tracing::info!(%protocol, moves = active.moves.len(), "compaction started");
        Ok(Some(Compaction {
            heap: self,
            active,
            plans: planned.plans,
            next: 0,
            report,
            tracked,
            live_bytes: planned.before.live_bytes,
            finished: false,
        }))
    }

    /// A whole compaction on the calling thread ([`DefragHeap::begin_compaction`],
    /// every move, [`Compaction::finish`]); other threads may run transactions
    /// meanwhile. Returns an empty report (ratios only) if there was nothing to do.
    pub fn compact_with(&self, opts: &CompactOptions) -> Result<CompactReport, DefragError> {
        match self.begin_compaction(opts)? {
            Some(c) => c.finish(),
            None => {
                let ratio = self.stats()?.frag_ratio;
                Ok(CompactReport {
                    protocol: opts.protocol.effective(self.tx.pool(), opts.eadr),
                    ratio_before: ratio,
                    ratio_after: ratio,
                    ..CompactReport::default()
                })
            }
        }
    }

    /// Compacts the heap with Espresso if its fragmentation ratio is above
    /// `target` (the paper triggers at 1.5 with a target of 1.25): moves the
    /// objects of the least-occupied pages of each size into fresh pages, heals
    /// every reference and frees the emptied pages. Crash-consistent at every
    /// point (recovery finishes it).
    pub fn compact(&mut self, target: f64) -> Result<CompactReport, DefragError> {
        self.compact_with(&CompactOptions::new().target(target))
    }

    /// [`DefragHeap::compact`] with at most `round_pages` relocation pages per plan
    /// (tests use small plans to crash compactions of several plans).
    #[doc(hidden)]
    pub fn compact_in_plans_of(
        &mut self,
        target: f64,
        round_pages: usize,
    ) -> Result<CompactReport, DefragError> {
        self.compact_with(&CompactOptions::new().target(target).plan_pages(round_pages))
    }
}

impl<A: PersistentAllocator + 'static> Compaction<'_, A> {
    /// The protocol in effect.
    pub fn protocol(&self) -> Protocol {
        self.active.protocol
    }

    /// Objects this compaction moves.
    pub fn moves(&self) -> usize {
        self.active.moves.len()
    }

    /// Makes up to `n` more moves on the calling thread (skipping those a
    /// mutator's barrier made). Returns whether any are left.
    pub fn step(&mut self, n: usize) -> Result<bool, DefragError> {
        let end = self.next.saturating_add(n).min(self.active.moves.len());
        let pool = self.heap.tx.pool();
        let c0 = Counters::current();
        let moved = self.active.defragment(pool, self.next..end)?;
        self.report.move_fences += Counters::since(c0).fences;
        self.report.moved += moved;
        self.next = end;
        Ok(self.next < self.active.moves.len())
    }

    /// Makes the moves left, heals every reference beside running transactions
    /// (by CAS under each object's lock, revisiting what a transaction holds),
    /// deactivates the barrier (the heap held alone briefly) and frees the
    /// relocation pages (a transaction per plan, beside running ones).
    pub fn finish(mut self) -> Result<CompactReport, DefragError> {
        self.finish_inner()
    }

    fn finish_inner(&mut self) -> Result<CompactReport, DefragError> {
        self.finished = true;
        self.step(usize::MAX)?;
        let heap = self.heap;
        let pool = heap.tx.pool();
        self.active.publish_all(pool)?;
        let barrier = self
            .active
            .barrier_moves
            .load(std::sync::atomic::Ordering::Relaxed);
        self.report.barrier_moves = barrier;
        self.report.moved = self.active.moves.len() as u64;
        if self.tracked {
            // The copies and forward words made durable, the flags cleared:
            // recovery trusts the forward words again, and healed references
            // are flushed below.
            crate::reached::settle(pool, &self.active, &self.plans)?;
        }
        // The pages to heal, read under the index mutex alone (a page made later
        // holds only translated pointers: transactions translate what they write).
        let pages: Vec<u64> = heap
            .shared
            .read()
            .pages
            .all
            .keys()
            .copied()
            .filter(|p| !self.active.is_relocation_page(*p))
            .collect();
        let active = Arc::clone(&self.active);
        let forwarding = |v: u64| active.destination_of(v);
        // Untracked FFCCD runs where the caches are persistent (eADR) or only the
        // process may crash: its reference stores need no flush, as in its
        // barrier. Tracked, a healed reference must be durable before the
        // relocation page it named is freed.
        let flush = self.active.protocol != Protocol::Ffccd || self.tracked;
        // Without the heap: transactions keep running.
        let healed = heap.heal_concurrent(&forwarding, &pages, flush)?;
        tracing::debug!(words = healed.words, revisits = healed.revisits, "healed");
        let mut g = heap.lock()?;
        let t0 = Instant::now();
        // Every reference names a destination: the barrier goes off. The
        // relocation pages stay excluded from allocation until their plan is
        // released, one plan per transaction beside the running ones (newest
        // first, as the root chains them, so a crash in between leaves a shorter
        // chain that recovery finishes the same way).
        g.active = None;
        g.releasing = true;
        DefragHeap::<A>::unlock_fair(g);
        self.note_pause(t0);
        for plan in &self.plans {
            heap.release_beside_transactions(plan)?;
        }
        let mut g = heap.lock()?;
        let t0 = Instant::now();
        g.releasing = false;
        let footprint: u64 = g.pages.all.values().map(|i| i.bytes).sum();
        drop(g);
        self.note_pause(t0);
        if self.live_bytes > 0 {
            self.report.ratio_after = footprint as f64 / self.live_bytes as f64;
        }
        tracing::info!(report = ?self.report, "compacted");
        Ok(self.report)
    }

    fn note_pause(&mut self, t0: Instant) {
        let ns = t0.elapsed().as_nanos() as u64;
        self.report.heal_pause_max_ns = self.report.heal_pause_max_ns.max(ns);
        self.report.locked_ns += ns;
    }
}

impl<A: PersistentAllocator + 'static> Drop for Compaction<'_, A> {
    fn drop(&mut self) {
        if !self.finished {
            if let Err(e) = self.finish_inner() {
                tracing::error!(%e, "an unfinished compaction could not be finished; reopening the heap will");
            }
        }
    }
}
