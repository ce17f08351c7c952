//! `Nvwa` as pmem-core's [`PersistentAllocator`]: the trait's operations over the
//! heap's own (`alloc`, `free`, the three-fence `alloc_publish`, enumeration),
//! and the transactional ones, whose marks are flushed without a fence of their
//! own (the transaction's commit fence makes them durable).

use pmem_core::alloc::check_publication_slot;
use pmem_core::{AllocError, AtomicPPtr, PPtr, PersistentAllocator, Pool, PoolError};

use super::{invalid_free, lock, my_arena, owner_word, vanished, Nvwa};
use crate::arena::Arena;
use crate::classes::{large_pages, record_len, Class};
use crate::persist::{fence, flush, Site};
use crate::record::{Record, PAGE};
use crate::run::{Logged, Run, RunKind};

// SAFETY: blocks are slots of runs on the heap's pages, which lie after the
// metadata and inside the region (geometry checked at format and open); a run's
// pages come from the page source, which hands each page to one run at a time, and
// a slot is handed out only while its bit is available; recovery rebuilds the same
// runs from the log and refuses overlapping ones.
unsafe impl PersistentAllocator for Nvwa {
    fn metadata_range(&self) -> Option<std::ops::Range<u64>> {
        Some(self.geo.metadata())
    }

    fn name(&self) -> &'static str {
        "nvwa"
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn alignment(&self) -> u64 {
        crate::record::UNIT
    }

    fn alloc(&self, size: u64) -> Result<PPtr<u8>, AllocError> {
        self.alloc_in(my_arena(self.arenas.len()), size)
    }

    unsafe fn free(&self, ptr: PPtr<u8>, size: u64) -> Result<(), AllocError> {
        if self.pool.is_read_only() {
            return Err(PoolError::ReadOnly.into());
        }
        self.free_in(ptr, size)
    }

    unsafe fn alloc_publish(
        &self,
        size: u64,
        slot: PPtr<AtomicPPtr<u8>>,
        init: &mut dyn FnMut(&mut [u8]),
    ) -> Result<PPtr<u8>, AllocError> {
        if size == 0 || size > crate::record::MAX_LEN {
            return Err(AllocError::InvalidSize { size });
        }
        if self.pool.is_read_only() {
            return Err(PoolError::ReadOnly.into());
        }
        check_publication_slot(&self.pool, slot.offset(), self.geo.metadata())?;
        let publish = Record::Pub {
            slot: slot.offset(),
        }
        .encode()
        .map_err(|e| AllocError::Corrupt {
            reason: e.to_string(),
        })?;
        let mut data = vec![0u8; size as usize];
        init(&mut data);
        self.with_arena(my_arena(self.arenas.len()), size, |a| {
            let (id, slot_index) = self.place(a, size)?;
            let block = a
                .run(id)
                .map_or(0, |r| self.geo.heap_start + r.offset(slot_index));
            if slot.offset() + 8 > block && slot.offset() < block + size {
                self.unplace(a, id, slot_index);
                return Err(AllocError::InvalidSlot {
                    offset: slot.offset(),
                    reason: "inside the block being allocated",
                }
                .into());
            }
            let logged = self.log_object(
                a,
                (id, slot_index),
                size,
                Some(publish),
                Site::PublishRecordFlush,
            );
            let (pos, run_pos) = match logged {
                Ok(p) => p,
                Err(e) => {
                    self.unplace(a, id, slot_index);
                    return Err(e);
                }
            };
            // 1. The block's contents and the records, durable together.
            // SAFETY: the block was just taken under the arena's lock; nothing
            // else references it.
            unsafe { self.pool.write_bytes_shared(block, &data)? };
            flush(&self.pool, Site::PublishDataFlush, block, size)?;
            fence(&self.pool, Site::PublishRecordFence)?;
            let run = a.run_mut(id).ok_or_else(vanished)?;
            if let Some(p) = run_pos {
                run.logged = Logged::Durable(p as u32);
            } else if let Logged::Unfenced(p) = run.logged {
                run.logged = Logged::Durable(p);
            }
            // 2. The slot: from here recovery finds the block in it.
            // SAFETY: the caller keeps all other access to the slot atomic.
            let slot_ref = unsafe { self.pool.get_shared(slot)? };
            slot_ref.store(
                PPtr::from_offset(block),
                std::sync::atomic::Ordering::Release,
            );
            flush(&self.pool, Site::PublishSlotFlush, slot.offset(), 8)?;
            fence(&self.pool, Site::PublishSlotFence)?;
            // 3. No longer pending: recovery will not look at the slot again.
            let run = a.run_mut(id).ok_or_else(vanished)?;
            run.set_live(slot_index, pos as u32, record_len(size));
            let w = self.obj_word(run, slot_index, false, false)?;
            self.rewrite(pos, w, Site::PublishClearFlush)?;
            fence(&self.pool, Site::PublishClearFence)?;
            Ok(PPtr::from_offset(block))
        })
    }

    fn for_each_live_block(&self, f: &mut dyn FnMut(PPtr<u8>, u64)) -> Result<(), AllocError> {
        let mut blocks = Vec::new();
        for a in self.arenas.iter() {
            let a = lock(a);
            for (_, run) in a.runs() {
                for (slot, _) in run.live_slots() {
                    blocks.push((self.geo.heap_start + run.offset(slot), run.slot_size));
                }
            }
        }
        blocks.sort_unstable();
        for (b, size) in blocks {
            f(PPtr::from_offset(b), size);
        }
        Ok(())
    }

    fn usable_size(&self, _ptr: PPtr<u8>, size: u64) -> u64 {
        crate::classes::usable_size(size)
    }

    fn tx_reserve(&self, size: u64) -> Result<PPtr<u8>, AllocError> {
        if size == 0 || size > crate::record::MAX_LEN {
            return Err(AllocError::InvalidSize { size });
        }
        self.with_arena(my_arena(self.arenas.len()), size, |a| {
            let (id, slot) = self.place(a, size)?;
            let run = a.run_mut(id).ok_or_else(vanished)?;
            run.hold(slot, true);
            Ok(PPtr::from_offset(self.geo.heap_start + run.offset(slot)))
        })
    }

    fn tx_check_live(&self, block: PPtr<u8>, size: u64) -> Result<(), AllocError> {
        let (index, id) = self.locate(block, size)?;
        let a = lock(&self.arenas[index]);
        let slot = self.slot_of(&a, id, block, size)?;
        match a.run(id).and_then(|r| r.pos(slot)) {
            Some(_) => Ok(()),
            None => Err(invalid_free(block.offset(), size, "not allocated")),
        }
    }

    unsafe fn tx_mark(
        &self,
        block: PPtr<u8>,
        size: u64,
        allocated: bool,
    ) -> Result<(), AllocError> {
        let off = self
            .heap_offset(block)
            .ok_or_else(|| invalid_free(block.offset(), size, "outside the heap"))?;
        let (index, id) = match self.owner_of(off) {
            Some(o) => o,
            // Nothing to mark free where nothing is.
            None if !allocated => return Ok(()),
            // Redoing an allocation (or undoing a free) after a crash whose run's
            // record did not persist: its pages are free, and a run comes back.
            None => self.revive(off, size)?,
        };
        self.with_arena(index, size, |a| {
            let slot = self.slot_of(a, id, block, size)?;
            let run = a.run(id).ok_or_else(vanished)?;
            match (allocated, run.pos(slot)) {
                (true, Some(pos)) => {
                    // Already marked: the same state again (idempotent).
                    let w = self.obj_word(run, slot, false, false)?;
                    self.rewrite(u64::from(pos), w, Site::MarkFlush)?;
                }
                (true, None) => {
                    let (pos, run_pos) =
                        self.log_object(a, (id, slot), size, None, Site::MarkFlush)?;
                    let run = a.run_mut(id).ok_or_else(vanished)?;
                    if let Some(p) = run_pos {
                        run.logged = Logged::Unfenced(p as u32);
                    }
                    run.set_live(slot, pos as u32, record_len(size));
                }
                (false, Some(pos)) => {
                    let w = self.obj_word(run, slot, true, false)?;
                    self.rewrite(u64::from(pos), w, Site::MarkFlush)?;
                    if let Some(run) = a.run_mut(id) {
                        run.clear_live(slot);
                    }
                }
                (false, None) => {}
            }
            if let Some(run) = a.run_mut(id) {
                run.hold(slot, true);
            }
            Ok(())
        })
    }

    fn tx_release(&self, block: PPtr<u8>, size: u64) {
        let Ok((index, id)) = self.locate(block, size) else {
            return;
        };
        let mut a = lock(&self.arenas[index]);
        let Ok(slot) = self.slot_of(&a, id, block, size) else {
            return;
        };
        if let Some(run) = a.run_mut(id) {
            run.hold(slot, false);
            // The releasing thread fenced after its marks, which flushed the run's
            // record (written or flushed again): it is durable now.
            if let Logged::Unfenced(p) = run.logged {
                run.logged = Logged::Durable(p);
            }
        }
        self.unplace_if_free(&mut a, id, slot);
    }
}

impl Nvwa {
    /// After a hold ends: a free slot becomes available (a large run goes).
    fn unplace_if_free(&self, a: &mut Arena, id: u32, slot: u32) {
        if a.run(id).is_some_and(|r| r.pos(slot).is_none()) {
            self.unplace(a, id, slot);
        }
    }

    /// Brings back a run holding the block at heap offset `off` of `size` bytes
    /// whose pages are free: a transaction's recovery redoing its allocation (or
    /// undoing its free) after a crash lost the run's record. A large block gets
    /// its own pages; a small one a run of its class starting at the latest page
    /// that makes it a slot and whose pages are all free (nothing else lives
    /// there: objects whose run record was lost were excluded by recovery).
    fn revive(&self, off: u64, size: u64) -> Result<(usize, u32), AllocError> {
        let index = my_arena(self.arenas.len());
        let mut a = lock(&self.arenas[index]);
        let (kind, pages, candidates) = match Class::of(size) {
            None if off.is_multiple_of(PAGE) => {
                (RunKind::Large, large_pages(size), vec![off / PAGE])
            }
            None => return Err(invalid_free(off, size, "a large block is page aligned")),
            Some(c) => {
                let page = off / PAGE;
                let starts = (page.saturating_sub(c.run_pages() - 1)..=page)
                    .rev()
                    .filter(|s| {
                        let rel = off - s * PAGE;
                        rel.is_multiple_of(c.size()) && rel / c.size() < c.slots()
                    })
                    .collect();
                (RunKind::Small(c), c.run_pages(), starts)
            }
        };
        let mut source = lock(&self.pages);
        let first = candidates
            .into_iter()
            .find(|&s| source.mark_used(s, pages).is_ok())
            .ok_or_else(|| AllocError::Corrupt {
                reason: format!(
                    "no free pages can hold the block at heap offset {off:#x} of {size} bytes again"
                ),
            })?;
        drop(source);
        let run = Run::new(first, pages, kind);
        let id = a.insert(run);
        if let Some(run) = a.run(id) {
            self.set_owner(run, owner_word(index, id));
        }
        Ok((index, id))
    }
}
