//! [`FusionAlloc`]: a [`GlobalAlloc`] over a [`FusionHeap`], so that a whole
//! program runs on it (`#[global_allocator]`), and the reentrancy guard that keeps
//! the heap's own work off the heap.
//!
//! The adapter starts empty: until [`FusionAlloc::install`] gives it a heap, every
//! call goes to the system allocator, so a program can declare it statically and
//! decide at run time (from its arguments, say) whether to fuse. Once installed,
//! allocations go through the heap and frees are routed by address: a block inside
//! the heap's section reservation to its section, anything else — including
//! blocks allocated before the heap was installed — to the system allocator.
//!
//! # The guard
//!
//! The heap allocates on its own account: a section's metadata when it is
//! integrated, the strings a pressure source reads, the daemon's logs. Through the
//! global allocator those would come back into the heap while it holds its lock
//! (a deadlock) or while it decides (a round inside a round). So the heap marks
//! the thread wherever it could allocate on its own account — while it holds its
//! PM lock, and for a whole round — and a marked thread's allocations go to the
//! system allocator directly. The plain allocation path (the system allocator and
//! two counters, or a section's carver under the lock) takes no mark, so the
//! common case costs one thread-local read; [`mark_thread_internal`] marks a thread for good
//! (the daemon's), so the daemon never allocates through the heap. The mark is a
//! thread-local `Cell<bool>` with a constant initializer and no destructor, which
//! itself never allocates.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, Ordering};

use super::heap::FusionHeap;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is inside the heap (or marked internal for good): its
/// allocations bypass the heap. `true` where the thread-local is gone (thread
/// teardown), the safe answer.
pub fn is_internal() -> bool {
    INSIDE.try_with(Cell::get).unwrap_or(true)
}

/// Marks the calling thread internal for the rest of its life: every allocation
/// it makes through [`FusionAlloc`] goes to the system allocator. The daemon
/// thread calls it first thing.
pub fn mark_thread_internal() {
    let _ = INSIDE.try_with(|c| c.set(true));
}

/// Marks the thread internal while it lives; restores the previous mark on drop.
/// The adapter enters it around every call into the heap, and the heap's own
/// entry points that allocate while holding its lock (rounds, pass-through
/// mappings) enter it too, for callers that come in directly.
pub(super) struct Inside {
    was: bool,
}

impl Inside {
    pub(super) fn enter() -> Inside {
        let was = INSIDE.try_with(|c| c.replace(true)).unwrap_or(true);
        Inside { was }
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let was = self.was;
        let _ = INSIDE.try_with(|c| c.set(was));
    }
}

/// A global allocator over a [`FusionHeap`]; the system allocator until one is
/// installed. See the module docs.
///
/// ```no_run
/// use nvwa::fusion::{FusionAlloc, FusionConfig, FusionHeap, SectionSpace};
///
/// #[global_allocator]
/// static GLOBAL: FusionAlloc = FusionAlloc::new();
///
/// fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let space = SectionSpace::create("/mnt/pmem/sections", 8, 128 << 20)?;
///     let config = FusionConfig { dram_limit: Some(1 << 30), ..FusionConfig::default() };
///     let heap = Box::leak(Box::new(FusionHeap::new(space, None, config)?));
///     GLOBAL.install(heap).map_err(|_| "installed twice")?;
///     let v = vec![0u8; 1 << 20]; // from DRAM, or from PM past the limit
///     drop(v);
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct FusionAlloc {
    heap: AtomicPtr<FusionHeap>,
}

impl Default for FusionAlloc {
    fn default() -> Self {
        FusionAlloc::new()
    }
}

impl FusionAlloc {
    /// An adapter with no heap: the system allocator.
    pub const fn new() -> FusionAlloc {
        FusionAlloc {
            heap: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Installs `heap`; from now on allocations go through it. A heap is
    /// installed once: a second call returns its argument back.
    pub fn install(&self, heap: &'static FusionHeap) -> Result<(), &'static FusionHeap> {
        let p = std::ptr::from_ref(heap).cast_mut();
        self.heap
            .compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
            .map_err(|_| heap)
    }

    /// The installed heap.
    pub fn heap(&self) -> Option<&'static FusionHeap> {
        let p = self.heap.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was stored by `install` from a `&'static
        // FusionHeap` and is never replaced or freed.
        unsafe { p.as_ref() }
    }
}

// SAFETY: every block comes from the system allocator or from the heap, both of
// which return blocks fitting the layout or null; frees are routed to whichever
// handed the block out: the heap's blocks are exactly those inside its
// reservation (`owns`), which the system allocator never returns (the range is
// our own mapping).
unsafe impl GlobalAlloc for FusionAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.heap() {
            // The heap marks the thread itself wherever it could allocate on
            // its own account (under its locks, in a round).
            Some(heap) if !is_internal() => heap.alloc(layout),
            // SAFETY: GlobalAlloc's contract, passed on.
            _ => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match self.heap() {
            Some(heap) if heap.owns(ptr) || !is_internal() => {
                // SAFETY: the block is the heap's (inside its reservation) or a
                // system block the heap frees with `System` (GlobalAlloc's
                // contract gives the layout it was allocated with).
                unsafe { heap.dealloc(ptr, layout) }
            }
            // SAFETY: a system block (not the heap's), GlobalAlloc's contract.
            _ => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match self.heap() {
            Some(heap) if heap.owns(ptr) || !is_internal() => {
                // SAFETY: GlobalAlloc's contract, passed on; the heap routes the
                // block by address as `dealloc` does.
                unsafe { heap.realloc(ptr, layout, new_size) }
            }
            // SAFETY: a system block, GlobalAlloc's contract.
            _ => unsafe { System.realloc(ptr, layout, new_size) },
        }
    }
}
