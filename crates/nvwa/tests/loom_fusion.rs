//! Loom model of the fusion heap integrating (and reclaiming) sections while
//! other threads allocate (run with
//! `RUSTFLAGS="--cfg loom" cargo test -p nvwa --test loom_fusion --release`).
//!
//! Under `--cfg loom` the heap's locks and atomics (the PM lock around the
//! section space and the carvers, the source lock, the serving-PM flag, the
//! counters) are loom's, so every interleaving of them (up to two preemptions) is
//! explored. The heap is over two sections of 64 KiB (one chunk each). One thread
//! applies a critical sample (integrates both sections and starts serving PM),
//! then a no-pressure sample with a zero threshold (reclaims the highest section
//! with no live block); another allocates a 64 B and a 3000 B block (two classes:
//! two chunks, so one in each section once they are in), and the main thread a
//! 100 B block (a third class: no chunk left, so DRAM when both are taken). In
//! every interleaving:
//!
//! * every block is DRAM (not in the reservation) or a live block of an
//!   integrated section (`usable_size` knows it) while it is held — a section is
//!   never reclaimed under it;
//! * live blocks never overlap, across threads;
//! * every block keeps its bytes until it is freed;
//! * at the end nothing is live in PM, the counters add up (three allocations,
//!   each from PM or DRAM), and a section was reclaimed exactly when the round
//!   says so. (Since allocation takes no heap-wide lock, a block may land in
//!   the section the round chose after its view of the sections: the round
//!   then skips that section, and says so.)
//!
//! A third model (up to two preemptions), for allocation without a global lock:
//! both sections integrated before the threads start, and a 3000 B block held in
//! section 0 (its only chunk is then a slab of another class), so that the 64 B
//! blocks two threads allocate and free (one two in turn, the other one) all go
//! to section 1, each under that section's lock, found by walking the bitmap —
//! while the main thread runs a reclaiming round (no pressure, threshold 0: the
//! highest section with no live block goes, and only section 1 can). In every interleaving no block is handed
//! out twice (no overlap), no section is reclaimed under a held block (it stays
//! a live block of an integrated section, bytes intact), and no free is lost:
//! afterwards nothing is live, the counts add up, and further rounds reclaim
//! every section — a section left holding a lost block could not be.
//!
//! A second model (up to three preemptions): a heap with a DRAM limit, its only
//! integrated section full, its DRAM at the limit, a section still hidden; two
//! threads each ask for 64 B. Each request passes the limit, so each runs a
//! round counting it; in every interleaving both are served from PM — neither
//! is refused because the other thread was running the round that integrates.
#![cfg(loom)]
#![cfg(target_os = "linux")]

use std::alloc::Layout;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use loom::thread;
use nvwa::fusion::{FusionConfig, FusionHeap, Level, PolicyConfig, Pressure, SectionSpace};

static ITER: AtomicUsize = AtomicUsize::new(0);

const SECTION: u64 = 64 << 10;

/// A heap over two hidden sections of an unlinked file, reclaim threshold 0.
fn heap() -> FusionHeap {
    let space =
        SectionSpace::create_unlinked(std::env::temp_dir(), 2, SECTION).expect("section space");
    let config = FusionConfig {
        policy: PolicyConfig {
            reclaim_threshold_bp: 0,
            ..PolicyConfig::default()
        },
        ..FusionConfig::default()
    };
    FusionHeap::new(space, None, config).expect("heap")
}

/// A sample on a machine of one section's worth of DRAM.
fn sample(level: Level) -> Pressure {
    Pressure::scripted_at(level, SECTION)
}

/// The blocks live now, across threads: (address, length). A std lock, held
/// with no loom operation inside, so loom never switches while it is held.
type Live = Arc<Mutex<Vec<(usize, usize)>>>;

/// A held block filled with `fill`.
struct Held {
    ptr: *mut u8,
    layout: Layout,
    fill: u8,
}

fn alloc(heap: &FusionHeap, live: &Live, size: usize, fill: u8) -> Held {
    let layout = Layout::from_size_align(size, 8).expect("layout");
    let ptr = heap.alloc(layout);
    assert!(!ptr.is_null(), "no PM limit: never refused");
    {
        let mut l = live.lock().expect("live");
        for &(a, n) in l.iter() {
            assert!(
                ptr.addr() + size <= a || a + n <= ptr.addr(),
                "block {:#x}+{size} overlaps live {a:#x}+{n}",
                ptr.addr()
            );
        }
        l.push((ptr.addr(), size));
    }
    // SAFETY: a live block of `size` bytes, ours alone.
    unsafe { std::ptr::write_bytes(ptr, fill, size) };
    let held = Held { ptr, layout, fill };
    check(heap, &held);
    held
}

/// The block is DRAM or a live block of an integrated section, and keeps its
/// bytes.
fn check(heap: &FusionHeap, b: &Held) {
    if heap.owns(b.ptr) {
        let usable = heap.usable_size(b.ptr);
        assert!(
            usable.is_some_and(|u| u >= b.layout.size() as u64),
            "a PM block at {:#x} is not a live block of an integrated section",
            b.ptr.addr()
        );
    }
    // SAFETY: the block is live (freed only by `free`) and ours.
    let got = unsafe { std::slice::from_raw_parts(b.ptr, b.layout.size()) };
    assert!(
        got.iter().all(|&x| x == b.fill),
        "block at {:#x} lost its bytes",
        b.ptr.addr()
    );
}

fn free(heap: &FusionHeap, live: &Live, b: Held) {
    check(heap, &b);
    {
        let mut l = live.lock().expect("live");
        let at = l
            .iter()
            .position(|&(a, _)| a == b.ptr.addr())
            .expect("registered");
        l.swap_remove(at);
    }
    // SAFETY: a live block of this heap with this layout, not used again.
    unsafe { heap.dealloc(b.ptr, b.layout) };
}

#[test]
fn integrating_and_reclaiming_while_others_allocate() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let heap = Arc::new(heap());
        let live: Live = Arc::default();

        let rounds = {
            let heap = Arc::clone(&heap);
            thread::spawn(move || {
                let critical = heap.apply(&sample(Level::Critical));
                assert_eq!(critical.integrated, [0, 1]);
                assert!(critical.serving_pm);
                let calm = heap.apply(&sample(Level::NoPressure));
                assert_eq!(calm.decision.level, Level::NoPressure);
                // Allocation does not wait for rounds: a block may land in the
                // section the policy chose between its view and the reclaim,
                // which then skips the section instead of taking it.
                assert!(calm.integrated.is_empty());
                assert!(calm.reclaimed.len() + calm.skipped.len() <= 1);
                assert!(!calm.serving_pm);
                calm.reclaimed
            })
        };
        let allocator = {
            let (heap, live) = (Arc::clone(&heap), Arc::clone(&live));
            thread::spawn(move || {
                let a = alloc(&heap, &live, 64, 0xa1);
                let b = alloc(&heap, &live, 3000, 0xb2);
                check(&heap, &a);
                let pm = usize::from(heap.owns(a.ptr)) + usize::from(heap.owns(b.ptr));
                free(&heap, &live, a);
                check(&heap, &b);
                free(&heap, &live, b);
                pm
            })
        };
        let c = alloc(&heap, &live, 100, 0xc3);
        check(&heap, &c);
        let c_pm = usize::from(heap.owns(c.ptr));
        free(&heap, &live, c);

        let reclaimed = rounds.join().expect("round thread");
        let pm = allocator.join().expect("allocating thread") + c_pm;
        assert!(live.lock().expect("live").is_empty());
        let s = heap.stats();
        assert_eq!((s.pm_live_blocks, s.pm_live_bytes), (0, 0), "{s}");
        assert_eq!(s.pm_allocs, pm as u64, "{s}");
        assert_eq!(s.pm_allocs + s.dram_allocs, 3, "{s}");
        assert_eq!(s.dram_live_bytes, 0, "{s}");
        assert_eq!(s.integrations, 2);
        assert!(reclaimed.len() <= 1, "the fewest that pass: one");
        assert_eq!(s.reclaims, reclaimed.len() as u64);
        assert_eq!(
            (s.integrated, s.hidden),
            (2 - reclaimed.len(), reclaimed.len())
        );
        assert_eq!(s.level, Level::NoPressure);
        assert!(!s.serving_pm);
        ITER.fetch_add(1, Ordering::Relaxed);
    });
    let n = ITER.load(Ordering::Relaxed);
    eprintln!("{n} interleavings explored");
    assert!(n > 1, "loom explored {n} interleavings");
}

/// A heap with a DRAM limit, serving PM from one full section, its DRAM 16 B
/// short of the limit, a second section hidden.
fn limited_heap_at_the_limit() -> (FusionHeap, *mut u8, Layout, *mut u8, Layout) {
    let limit = 1 << 20;
    let space =
        SectionSpace::create_unlinked(std::env::temp_dir(), 2, SECTION).expect("section space");
    let config = FusionConfig {
        dram_limit: Some(limit),
        check_every: Some(1 << 40),
        ..FusionConfig::default()
    };
    let heap = FusionHeap::new(space, None, config).expect("heap");
    // Light pressure on one section's worth of DRAM: section 0 comes in.
    assert_eq!(heap.apply(&sample(Level::Light)).integrated, [0]);
    let whole = Layout::from_size_align(SECTION as usize, 8).expect("layout");
    let pm = heap.alloc(whole);
    assert!(heap.owns(pm), "section 0 serves");
    let near = Layout::from_size_align(limit as usize - 16, 8).expect("layout");
    let dram = heap.alloc(near);
    assert!(!dram.is_null() && !heap.owns(dram), "PM is full: DRAM");
    (heap, pm, whole, dram, near)
}

/// Two threads each ask for 64 B past the DRAM limit while the only integrated
/// section is full and a hidden one remains: both are served from PM, whichever
/// of them runs the round; neither is refused because the other one was running
/// it.
#[test]
fn requests_past_the_limit_wait_for_the_round_that_integrates() {
    static LIMIT_ITER: AtomicUsize = AtomicUsize::new(0);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let (heap, pm, whole, dram, near) = limited_heap_at_the_limit();
        let heap = Arc::new(heap);
        let small = Layout::from_size_align(64, 8).expect("layout");
        let other = {
            let heap = Arc::clone(&heap);
            thread::spawn(move || heap.alloc(small).addr())
        };
        let mine = heap.alloc(small);
        let theirs: *mut u8 = std::ptr::with_exposed_provenance_mut(other.join().expect("thread"));
        let s = heap.stats();
        assert!(
            !mine.is_null() && !theirs.is_null(),
            "refused with a hidden section: {s}"
        );
        assert!(heap.owns(mine) && heap.owns(theirs) && mine != theirs);
        assert_eq!((s.refused, s.integrated, s.pm_live_blocks), (0, 2, 3));
        // SAFETY: live blocks of this heap with these layouts, not used again.
        unsafe {
            heap.dealloc(mine, small);
            heap.dealloc(theirs, small);
            heap.dealloc(pm, whole);
            heap.dealloc(dram, near);
        }
        assert_eq!(heap.stats().pm_live_blocks, 0);
        LIMIT_ITER.fetch_add(1, Ordering::Relaxed);
    });
    let n = LIMIT_ITER.load(Ordering::Relaxed);
    eprintln!("{n} interleavings explored");
    assert!(n > 1, "loom explored {n} interleavings");
}

/// Two allocating threads and a reclaiming round: no double allocation, no lost
/// free, no reclaim of a section in use. See the module docs.
#[test]
fn two_allocating_threads_and_a_reclaiming_round() {
    static MT_ITER: AtomicUsize = AtomicUsize::new(0);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let heap = heap();
        assert_eq!(heap.apply(&sample(Level::Critical)).integrated, [0, 1]);
        let heap = Arc::new(heap);
        let live: Live = Arc::default();
        let pinned = alloc(&heap, &live, 3000, 0x5e);
        assert!(heap.owns(pinned.ptr));

        let first = {
            let (heap, live) = (Arc::clone(&heap), Arc::clone(&live));
            thread::spawn(move || {
                let a = alloc(&heap, &live, 64, 0xa1);
                let a_pm = heap.owns(a.ptr);
                free(&heap, &live, a);
                let b = alloc(&heap, &live, 64, 0xb2);
                let b_pm = heap.owns(b.ptr);
                free(&heap, &live, b);
                usize::from(a_pm) + usize::from(b_pm)
            })
        };
        let second = {
            let (heap, live) = (Arc::clone(&heap), Arc::clone(&live));
            thread::spawn(move || {
                let c = alloc(&heap, &live, 64, 0xc3);
                let c_pm = heap.owns(c.ptr);
                free(&heap, &live, c);
                usize::from(c_pm)
            })
        };
        let calm = heap.apply(&sample(Level::NoPressure));
        assert!(calm.integrated.is_empty());
        assert!(calm.reclaimed.len() + calm.skipped.len() <= 1, "{calm:?}");
        assert!(calm.reclaimed.len() <= 1, "the fewest that pass: one");

        let pm = first.join().expect("first thread") + second.join().expect("second thread");
        check(&heap, &pinned);
        free(&heap, &live, pinned);
        assert!(live.lock().expect("live").is_empty());
        let s = heap.stats();
        assert_eq!(
            (s.pm_live_blocks, s.pm_live_bytes),
            (0, 0),
            "a lost free: {s}"
        );
        assert_eq!(s.pm_allocs, 1 + pm as u64, "{s}");
        assert_eq!(s.pm_allocs + s.dram_allocs, 4, "{s}");
        assert_eq!(s.reclaims, calm.reclaimed.len() as u64);
        // Every section can go now: none holds a block whose free was lost.
        let mut rounds = 0;
        while heap.stats().integrated > 0 {
            rounds += 1;
            assert!(rounds <= 2, "a section stays: {}", heap.stats());
            assert_eq!(heap.apply(&sample(Level::NoPressure)).reclaimed.len(), 1);
        }
        assert_eq!(heap.stats().reclaims, 2);
        MT_ITER.fetch_add(1, Ordering::Relaxed);
    });
    let n = MT_ITER.load(Ordering::Relaxed);
    eprintln!("{n} interleavings explored");
    assert!(n > 1, "loom explored {n} interleavings");
}
