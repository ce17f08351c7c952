//! Marking from the roots (the first phase of the paper's mark-and-compact
//! collector), leak reclamation, and the heap's invariant check.
//!
//! Marking follows exactly the pointer fields each type declares; it checks every
//! pointer it follows (null, or the start of a live object of the declared target
//! type), so a marking pass is also the invariant check the crash suites use.

use std::collections::BTreeSet;

use pmem_core::PPtr;

use crate::heap::{DefragHeap, Shared};
use crate::layout::HeapRoot;
use crate::DefragError;

/// What a marking pass found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarkReport {
    /// Offsets of the objects reachable from the roots.
    pub reachable: BTreeSet<u64>,
    /// Live objects that are not reachable (leaks): offset and type id.
    pub unreachable: Vec<(u64, u32)>,
}

/// Objects freed per transaction by [`DefragHeap::collect_leaks`].
const FREE_BATCH: usize = 16;

impl<A: pmem_core::PersistentAllocator + 'static> DefragHeap<A> {
    /// Marks every object reachable from the roots, checking each pointer on the
    /// way, and lists the live objects that are not reachable.
    pub fn mark(&self) -> Result<MarkReport, DefragError> {
        let g = self.lock()?;
        self.mark_locked(&g)
    }

    fn mark_locked(&self, shared: &Shared) -> Result<MarkReport, DefragError> {
        if shared.active.is_some() || shared.releasing {
            return Err(DefragError::Busy);
        }
        let r: HeapRoot = self.tx.pool().read(self.root)?;
        let mut report = MarkReport::default();
        let mut stack: Vec<(u64, Option<u32>, String)> = r
            .roots
            .iter()
            .filter(|s| s.ptr != 0)
            .map(|s| {
                (
                    s.ptr,
                    None,
                    format!("root {:?}", String::from_utf8_lossy(&s.name)),
                )
            })
            .collect();
        while let Some((obj, want, from)) = stack.pop() {
            let header = self
                .check_object(&shared.pages, obj, want)
                .map_err(|e| DefragError::Corrupt(format!("{from} -> {obj:#x}: {e}")))?;
            if !report.reachable.insert(obj) {
                continue;
            }
            let desc = self
                .registry
                .get(header.type_id)
                .ok_or(DefragError::Unregistered(header.type_id))?;
            for p in &desc.pointers {
                let target: u64 = self
                    .tx
                    .pool()
                    .read(PPtr::from_offset(obj + u64::from(p.offset)))?;
                if target != 0 {
                    stack.push((target, Some(p.target), format!("{obj:#x}+{}", p.offset)));
                }
            }
        }
        for &page in shared.pages.all.keys() {
            self.for_each_object_in(page, &mut |obj, type_id, _| {
                if !report.reachable.contains(&obj) {
                    report.unreachable.push((obj, type_id));
                }
            })?;
        }
        Ok(report)
    }

    /// Frees every live object not reachable from the roots (persistent leaks,
    /// which PMDK cannot find), a batch per transaction. Returns how many. A crash
    /// part-way leaves some leaks for the next call; nothing reachable is touched.
    pub fn collect_leaks(&self) -> Result<u64, DefragError> {
        let mut g = self.lock()?;
        let report = self.mark_locked(&g)?;
        let mut freed = 0;
        for batch in report.unreachable.chunks(FREE_BATCH) {
            self.transaction_locked(&mut g, Default::default(), |t| {
                for &(obj, type_id) in batch {
                    t.free_object(obj, type_id)?;
                }
                Ok(())
            })?;
            freed += batch.len() as u64;
        }
        if freed > 0 {
            tracing::info!(freed, "reclaimed unreachable objects");
        }
        Ok(freed)
    }

    /// Checks the heap's invariants: every root and every declared pointer of every
    /// reachable object is null or the start of a live object of its declared type,
    /// and every live object has a registered type. Returns the marking.
    pub fn verify(&self) -> Result<MarkReport, DefragError> {
        let report = self.mark()?;
        for &(obj, type_id) in &report.unreachable {
            if self.registry.get(type_id).is_none() {
                return Err(DefragError::Corrupt(format!(
                    "object {obj:#x} has unregistered type {type_id}"
                )));
            }
        }
        Ok(report)
    }
}
