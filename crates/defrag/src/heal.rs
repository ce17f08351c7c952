//! Healing beside running transactions: once every move of a compaction is
//! published, every pointer word (in the objects outside the relocation pages and
//! in the roots) that names a source is swapped to its destination, without the
//! gate, while other threads keep running transactions.
//!
//! A heal and a transaction's write of the same word must never lose each other,
//! rollbacks included: a transaction that wrote a word, or that will restore a
//! source pointer into it by rolling back, holds the word's object (or root slot)
//! locked until it ends ([`crate::locks`]). So the healer takes each slab page's
//! header lock and each object's lock with a `try`: what a running transaction
//! holds, shared or exclusive, is skipped and revisited after the others, until
//! every item has been visited unlocked. Once an item has been visited, no
//! transaction can put a source pointer back into it: transactions translate every
//! pointer they write while the compaction is active, and a later rollback
//! restores the healed word. Each word is swapped by CAS from the source read to
//! its destination (`Pool::cas_word_shared`), flushed if the protocol needs it,
//! and the pass ends with one fence, before the plans are released.
//!
//! Why skip-and-revisit rather than a barrier that translates undo records: the
//! undo log is pmem-core's, written before the heal and replayed by recovery
//! with no knowledge of forwarding; holding off the healer costs nothing on the
//! transactions' side and keeps recovery as it is (a crash before the release
//! leaves the plan chain, and recovery heals every word again).

use pmem_core::{PPtr, PersistentAllocator};

use crate::barrier::{removed, Site};
use crate::heap::DefragHeap;
use crate::layout::{PageHeader, OBJ_HEADER, PAGE_HEADER, ROOTS};
use crate::locks::Held;
use crate::DefragError;

/// What a concurrent healing pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Healed {
    /// Pointer words swapped to a destination.
    pub words: u64,
    /// Visits put off because a running transaction held the page, object or
    /// root slot.
    pub revisits: u64,
}

/// An item the healer visits: a slab page (its objects), or a root slot.
#[derive(Clone, Copy, Debug)]
enum Item {
    Page(u64),
    Root(usize),
}

impl<A: PersistentAllocator + 'static> DefragHeap<A> {
    /// Heals every pointer to a source (by `forwarding`) in the objects of
    /// `pages` still in the index and in the roots, beside running
    /// transactions, flushing each healed word if `flush`, then fences. Every
    /// move must be published.
    pub(crate) fn heal_concurrent(
        &self,
        forwarding: &dyn Fn(u64) -> Option<u64>,
        pages: &[u64],
        flush: bool,
    ) -> Result<Healed, DefragError> {
        let mut report = Healed::default();
        let mut pending: Vec<Item> = pages
            .iter()
            .map(|&p| Item::Page(p))
            .chain((0..ROOTS).map(Item::Root))
            .collect();
        while !pending.is_empty() {
            let mut later = Vec::new();
            for item in pending {
                let done = match item {
                    Item::Page(p) => self.heal_page(p, forwarding, flush, &mut report)?,
                    Item::Root(i) => self.heal_root(i, forwarding, flush, &mut report)?,
                };
                if !done {
                    report.revisits += 1;
                    later.push(item);
                }
            }
            pending = later;
            if !pending.is_empty() {
                // The holders are running transactions: let them finish.
                std::thread::yield_now();
            }
        }
        if report.words > 0 && !removed(Site::HealFence, true) {
            self.tx.pool().drain()?;
        }
        Ok(report)
    }

    /// Swaps the word at `at` from `v` to its destination, if `v` is a source.
    /// The caller holds the word's item exclusively. Returns false if the word
    /// changed under it (it is then revisited).
    fn heal_word(
        &self,
        at: u64,
        forwarding: &dyn Fn(u64) -> Option<u64>,
        flush: bool,
        report: &mut Healed,
    ) -> Result<bool, DefragError> {
        let pool = self.tx.pool();
        let v = pool.load_word(at)?;
        let Some(d) = forwarding(v) else {
            return Ok(true);
        };
        let swapped = if removed(Site::HealCas, true) {
            // SAFETY: the mutant's plain store, under the same lock.
            unsafe { pool.write_bytes_shared(at, &d.to_le_bytes())? };
            Ok(v)
        } else {
            // SAFETY: the word's item is locked by the healer, so no transaction
            // reads or writes it meanwhile; the only other writer could be
            // another CAS. No reference to the word is live.
            unsafe { pool.cas_word_shared(at, v, d)? }
        };
        match swapped {
            Ok(_) => {
                if flush && !removed(Site::HealFlush, true) {
                    pool.flush(at, 8)?;
                }
                report.words += 1;
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }

    /// Heals the objects of `page` that no running transaction holds; returns
    /// whether every one was visited (false: revisit the page).
    fn heal_page(
        &self,
        page: u64,
        forwarding: &dyn Fn(u64) -> Option<u64>,
        flush: bool,
        report: &mut Healed,
    ) -> Result<bool, DefragError> {
        let mut page_hold = HoldGuard::new(self);
        if self.locks.acquire(&mut page_hold.held, page, true).is_err() {
            return Ok(false);
        }
        // Looked up under the page's lock: a page freed meanwhile is gone from
        // the index, and no transaction frees it while the lock is held.
        if !self.shared.read().pages.all.contains_key(&page) {
            return Ok(true);
        }
        let pool = self.tx.pool();
        // The header lock keeps allocation and free off the page's header.
        let h: PageHeader = pool.read(PPtr::from_offset(page))?;
        let mut all = true;
        for i in 0..u64::from(h.capacity) {
            if !h.is_live(i) {
                continue;
            }
            let obj = page + PAGE_HEADER + i * u64::from(h.slot) + OBJ_HEADER;
            let type_id = pool.load_word(obj - OBJ_HEADER)? as u32;
            let desc = self
                .registry
                .get(type_id)
                .ok_or(DefragError::Unregistered(type_id))?;
            if desc.pointers.is_empty() {
                continue;
            }
            let mut obj_hold = HoldGuard::new(self);
            if self.locks.acquire(&mut obj_hold.held, obj, true).is_err()
                && !removed(Site::HealLocks, true)
            {
                all = false;
                continue;
            }
            for p in &desc.pointers {
                all &= self.heal_word(obj + u64::from(p.offset), forwarding, flush, report)?;
            }
        }
        Ok(all)
    }

    /// Heals root slot `i` unless a running transaction holds it.
    fn heal_root(
        &self,
        i: usize,
        forwarding: &dyn Fn(u64) -> Option<u64>,
        flush: bool,
        report: &mut Healed,
    ) -> Result<bool, DefragError> {
        // The slot's pointer word, as `DefragTx::root` locks it.
        let word = self.root.offset() + 16 + i as u64 * 32 + 24;
        let mut hold = HoldGuard::new(self);
        if self.locks.acquire(&mut hold.held, word, true).is_err()
            && !removed(Site::HealLocks, true)
        {
            return Ok(false);
        }
        self.heal_word(word, forwarding, flush, report)
    }
}

/// The healer's holds, released when dropped (errors included).
struct HoldGuard<'h, A: PersistentAllocator + 'static> {
    heap: &'h DefragHeap<A>,
    held: Held,
}

impl<'h, A: PersistentAllocator + 'static> HoldGuard<'h, A> {
    fn new(heap: &'h DefragHeap<A>) -> Self {
        HoldGuard {
            heap,
            held: heap.locks.holder(),
        }
    }
}

impl<A: PersistentAllocator + 'static> Drop for HoldGuard<'_, A> {
    fn drop(&mut self) {
        self.heap.locks.release_all(&mut self.held);
    }
}
