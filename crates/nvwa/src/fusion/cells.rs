//! The heap's per-section side: [`Cells`], one [`SectionCell`] per section that
//! has ever been integrated, each with its own lock around the section's carver,
//! and [`Integrated`], a bitmap of the sections that have a carver, which
//! allocation reads without any lock.
//!
//! These are what lets allocation and free run on many threads at once (see the
//! concurrency section of [`super::heap`]): a thread allocating from section 3
//! and one freeing into section 5 take two different locks, on two different
//! cache lines, and neither takes the heap's structural lock.
//!
//! # Why a cell is a cache line, made on first integration
//!
//! Two threads working in neighbouring sections would write the same cache line
//! on every allocation if their lock words shared one, and the line would bounce
//! between their cores: the cost a per-section lock exists to avoid. So a cell is
//! aligned to 64 B, the line of x86-64. A section that was never integrated has
//! no cell, only a null pointer (8 B), so hidden PM still costs next to nothing;
//! the cell is made by the first integration of its section (under the heap's
//! structural lock, the only writer) and kept until the heap drops — a reclaimed
//! section keeps its 64 B cell but loses its carver — so that a thread may hold
//! a reference to a cell without any count or epoch: the cell outlives every
//! borrow of the heap.
//!
//! # What the bitmap promises
//!
//! A set bit says "this section had a carver when the bit was read"; it is a hint
//! for where to look, never a proof: the carver itself, read under the cell's
//! lock, is what counts. The structural side sets a bit after it has put the
//! carver in (release), and clears it while it holds the cell's lock and takes
//! the carver out, so a thread that sees the bit and then locks the cell finds
//! either the carver or nothing — never a carver of an unmapped section.

use super::carve::SectionCarver;
use super::global::Inside;
use crate::sync::{lock, try_lock, AtomicPtr, AtomicU64, Mutex, MutexGuard, Ordering};

/// What one section's lock guards: its carver while it is integrated into the
/// heap, and its allocation count, which outlives the carver (the heap's
/// `pm_allocs` is their sum, counted here so that the fast path writes no shared
/// counter).
#[derive(Debug, Default)]
pub(super) struct SectionLocal {
    /// The section's allocator metadata; `Some` exactly while the section is
    /// integrated into the heap.
    pub(super) carver: Option<Box<SectionCarver>>,
    /// Blocks handed out from this section, ever.
    pub(super) allocs: u64,
}

/// One section's lock and state, alone on its cache line.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(super) struct SectionCell {
    local: Mutex<SectionLocal>,
    /// Under loom only: holders of the lock, touched on entry and exit. Loom
    /// switches threads only at its own operations, and a critical section
    /// with none inside would look instantaneous to it: no thread would ever
    /// find the lock held, and the busy paths (a `try_lock` that fails, the
    /// allocation's second, waiting walk) would go unexplored. These two
    /// atomic operations are where the model may switch away from a holder.
    #[cfg(loom)]
    holders: crate::sync::AtomicUsize,
}

/// A cell's lock held, with the thread marked inside the heap (anything
/// allocated meanwhile, an error's message, goes to the system allocator and
/// never back to this lock). The guard drops before the mark.
pub(super) struct CellGuard<'a> {
    guard: MutexGuard<'a, SectionLocal>,
    _inside: Inside,
    #[cfg(loom)]
    holders: &'a crate::sync::AtomicUsize,
}

#[cfg(loom)]
impl Drop for CellGuard<'_> {
    fn drop(&mut self) {
        // Before the guard (a field) releases the lock.
        self.holders.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::ops::Deref for CellGuard<'_> {
    type Target = SectionLocal;
    fn deref(&self) -> &SectionLocal {
        &self.guard
    }
}

impl std::ops::DerefMut for CellGuard<'_> {
    fn deref_mut(&mut self) -> &mut SectionLocal {
        &mut self.guard
    }
}

impl SectionCell {
    /// Locks the cell, waiting for it.
    pub(super) fn lock(&self) -> CellGuard<'_> {
        let inside = Inside::enter();
        self.held(lock(&self.local), inside)
    }

    /// Locks the cell if no other thread holds it.
    pub(super) fn try_lock(&self) -> Option<CellGuard<'_>> {
        let inside = Inside::enter();
        try_lock(&self.local).map(|guard| self.held(guard, inside))
    }

    fn held<'a>(&'a self, guard: MutexGuard<'a, SectionLocal>, inside: Inside) -> CellGuard<'a> {
        #[cfg(loom)]
        assert_eq!(
            self.holders.fetch_add(1, Ordering::Relaxed),
            0,
            "two holders of one section's lock"
        );
        CellGuard {
            guard,
            _inside: inside,
            #[cfg(loom)]
            holders: &self.holders,
        }
    }
}

/// A cell per section, made on the section's first integration and kept until
/// the heap drops. See the module docs.
#[derive(Debug)]
pub(super) struct Cells {
    ptrs: Box<[AtomicPtr<SectionCell>]>,
}

impl Cells {
    /// No cell yet for any of `sections`.
    pub(super) fn new(sections: usize) -> Cells {
        Cells {
            ptrs: (0..sections)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        }
    }

    /// Section `index`'s cell, if it was ever integrated.
    pub(super) fn get(&self, index: usize) -> Option<&SectionCell> {
        let p = self.ptrs.get(index)?.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was stored by `make` from `Box::into_raw`
        // (release, paired with the acquire above, so the cell is initialized)
        // and is freed only by `Drop`, which takes `&mut self`: no borrow of
        // `self`, and so none of the cell, outlives it.
        unsafe { p.as_ref() }
    }

    /// Section `index`'s cell, made now if it has none. Only the heap's
    /// structural side calls it, under its lock: there is one maker at a time.
    pub(super) fn make(&self, index: usize) -> Option<&SectionCell> {
        if self.get(index).is_none() {
            let slot = self.ptrs.get(index)?;
            let p = Box::into_raw(Box::<SectionCell>::default());
            slot.store(p, Ordering::Release);
        }
        self.get(index)
    }

    /// The DRAM the cells take: a pointer per section and a line per cell.
    pub(super) fn metadata_bytes(&self) -> usize {
        let made = self
            .ptrs
            .iter()
            .filter(|p| !p.load(Ordering::Relaxed).is_null())
            .count();
        self.ptrs.len() * size_of::<AtomicPtr<SectionCell>>() + made * size_of::<SectionCell>()
    }
}

impl Drop for Cells {
    fn drop(&mut self) {
        for slot in self.ptrs.iter() {
            let p = slot.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: made by `Box::into_raw` in `make`, freed only here,
                // once; `&mut self` means no reference to the cell is left.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

/// One bit per section, set while the section has a carver. See the module docs.
#[derive(Debug)]
pub(super) struct Integrated {
    words: Box<[AtomicU64]>,
}

impl Integrated {
    /// A bitmap of `sections` clear bits.
    pub(super) fn new(sections: usize) -> Integrated {
        Integrated {
            words: (0..sections.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    /// Marks `index` as having a carver: after the carver is in its cell.
    pub(super) fn set(&self, index: usize) {
        if let Some(w) = self.words.get(index / 64) {
            w.fetch_or(1 << (index % 64), Ordering::Release);
        }
    }

    /// Marks `index` as having none: with the cell locked, as its carver goes.
    pub(super) fn clear(&self, index: usize) {
        if let Some(w) = self.words.get(index / 64) {
            w.fetch_and(!(1 << (index % 64)), Ordering::Release);
        }
    }

    /// The sections whose bit is set, lowest first: one load per 64 sections.
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(w, word)| {
            let mut bits = word.load(Ordering::Acquire);
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                Some(w * 64 + b)
            })
        })
    }

    /// The DRAM the bitmap takes.
    pub(super) fn metadata_bytes(&self) -> usize {
        self.words.len() * size_of::<AtomicU64>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bits_iterate_lowest_first_across_words() {
        let m = Integrated::new(130);
        for i in [129, 3, 64, 0, 63] {
            m.set(i);
        }
        assert_eq!(m.iter().collect::<Vec<_>>(), [0, 3, 63, 64, 129]);
        m.clear(64);
        m.clear(0);
        m.set(200); // out of range: ignored
        assert_eq!(m.iter().collect::<Vec<_>>(), [3, 63, 129]);
    }

    #[test]
    fn cells_are_made_once_and_counted() {
        let cells = Cells::new(3);
        assert!(cells.get(1).is_none());
        let base = cells.metadata_bytes();
        assert_eq!(base, 3 * 8);
        let a = std::ptr::from_ref(cells.make(1).expect("in range"));
        let b = std::ptr::from_ref(cells.make(1).expect("in range"));
        assert_eq!(a, b, "made once");
        assert!(cells.make(3).is_none(), "out of range");
        assert_eq!(cells.metadata_bytes(), base + 64);
        cells.get(1).expect("made").lock().allocs += 1;
        assert_eq!(cells.get(1).expect("made").lock().allocs, 1);
    }

    #[test]
    fn a_cell_is_one_cache_line() {
        assert_eq!(align_of::<SectionCell>(), 64);
        assert_eq!(size_of::<SectionCell>(), 64);
    }
}
