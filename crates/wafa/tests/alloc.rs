//! Allocation behaviour: Clockwise Best-Fit order, rotation, reform, whole pages,
//! errors, reopen, threads.

use std::collections::BTreeSet;
use std::sync::Arc;

use pmem_core::{AllocError, PPtr, PersistentAllocator, Pool, PoolOptions};
use wafa::{ReformMode, Wafa, WafaOptions, MAX_SMALL};

fn manual() -> WafaOptions {
    WafaOptions::default().reform(ReformMode::Manual)
}

fn heap(size: u64, opts: WafaOptions) -> Wafa {
    let pool = Arc::new(Pool::anonymous(&PoolOptions::new("wafa", size)).expect("pool"));
    // SAFETY: nothing else uses the fresh pool.
    unsafe { Wafa::format(pool, opts) }.expect("format")
}

/// Frees a block; the tests never hold references into blocks.
fn free(w: &Wafa, p: PPtr<u8>, size: u64) -> Result<(), AllocError> {
    // SAFETY: the tests never hold references into blocks.
    unsafe { w.free(p, size) }
}

fn unit_of(w: &Wafa, p: PPtr<u8>) -> (u64, u64) {
    let rel = p.offset() - w.page_offset(0);
    (rel / 4096, (rel % 4096) / 64)
}

#[test]
fn allocation_sweeps_the_page_clockwise() {
    let w = heap(1 << 20, manual());
    let mut units = Vec::new();
    for _ in 0..63 {
        units.push(unit_of(&w, w.alloc(10).expect("alloc")));
    }
    // One page, every data unit in turn, never the metadata unit 63.
    assert!(units.iter().all(|&(p, _)| p == 0));
    assert_eq!(
        units.iter().map(|&(_, u)| u).collect::<Vec<_>>(),
        (0..63).collect::<Vec<_>>()
    );
    // Freed units behind the clock are not reused before a reform: the next unit
    // comes from a fresh page.
    free(&w, PPtr::from_offset(w.page_offset(0)), 10).expect("free");
    assert_eq!(unit_of(&w, w.alloc(10).expect("alloc")), (1, 0));
}

#[test]
fn best_fit_prefers_the_smallest_segment_that_fits() {
    let w = heap(1 << 20, manual());
    // Page 0: one 60-unit block leaves a 3-unit rest of run (bucket 3).
    let big = w.alloc(60 * 64).expect("alloc");
    assert_eq!(unit_of(&w, big), (0, 0));
    // 4 units do not fit bucket 3: a fresh page 1 serves them (bucket 59 after).
    assert_eq!(unit_of(&w, w.alloc(4 * 64).expect("alloc")), (1, 0));
    // 3 units fit page 0's 3 exactly rather than page 1's 59.
    assert_eq!(unit_of(&w, w.alloc(3 * 64).expect("alloc")), (0, 60));
    // Page 0 is now used up (bucket 0): 1 unit goes to page 1's clock.
    assert_eq!(unit_of(&w, w.alloc(1).expect("alloc")), (1, 4));
}

/// While free pages remain, a used-up page waits (fresh pages spread the writes);
/// once they run low, reform starts its new run over the freed units.
#[test]
fn reform_starts_new_runs_when_free_pages_run_low() {
    let w = heap(64 * 1024, manual());
    let blocks: Vec<_> = (0..63).map(|_| w.alloc(64).expect("alloc")).collect();
    for b in &blocks[..20] {
        free(&w, *b, 64).expect("free");
    }
    assert_eq!(w.stats().free_units, 20);
    w.reform().expect("reform");
    // Plenty of free pages: the next unit comes from a fresh page.
    let next = w.alloc(64).expect("alloc");
    assert_eq!(unit_of(&w, next), (1, 0));
    free(&w, next, 64).expect("free");
    // Take every remaining free page with one run, so none is left.
    let free_pages = u64::from(w.stats().free_pages);
    w.alloc(free_pages * 4096).expect("run of the free pages");
    assert_eq!(w.stats().free_pages, 0);
    w.reform().expect("reform");
    // Page 0 starts a new run over its 20 freed units, served in order.
    let again: Vec<_> = (0..20)
        .map(|_| unit_of(&w, w.alloc(64).expect("alloc")))
        .collect();
    assert_eq!(again, (0..20).map(|u| (0, u)).collect::<Vec<_>>());
}

#[test]
fn large_requests_take_whole_pages() {
    let w = heap(1 << 20, manual());
    let small = w.alloc(MAX_SMALL).expect("63 units fit a divided page");
    assert_eq!(unit_of(&w, small), (0, 0));
    let big = w.alloc(MAX_SMALL + 1).expect("one whole page");
    assert_eq!(big.offset() % 4096, 0);
    let bigger = w.alloc(3 * 4096).expect("three pages");
    assert!(w.is_allocated(bigger, 3 * 4096));
    assert_eq!(w.stats().run_pages, 4);
    free(&w, bigger, 3 * 4096).expect("free run");
    assert_eq!(w.stats().run_pages, 1);
    assert!(!w.is_allocated(bigger, 3 * 4096));
}

#[test]
fn invalid_requests_are_typed_errors() {
    let w = heap(64 * 1024, manual());
    assert!(matches!(
        w.alloc(0),
        Err(AllocError::InvalidSize { size: 0 })
    ));
    assert!(matches!(
        w.alloc(1 << 40),
        Err(AllocError::InvalidSize { .. })
    ));
    let p = w.alloc(100).expect("alloc");
    // SAFETY: the block is never referenced; the invalid frees are refused.
    unsafe {
        assert!(matches!(
            w.free(p.byte_add(8).expect("add"), 100),
            Err(AllocError::InvalidFree { .. })
        ));
        assert!(matches!(
            w.free(PPtr::from_offset(8), 100),
            Err(AllocError::InvalidFree { .. })
        ));
        assert!(matches!(
            w.free(p, 5000),
            Err(AllocError::InvalidFree { .. })
        ));
        w.free(p, 100).expect("free");
        assert!(
            matches!(w.free(p, 100), Err(AllocError::InvalidFree { .. })),
            "double free"
        );
    }
    // Fill the heap with single units until it reports out of space.
    let mut n = 0u64;
    loop {
        match w.alloc(64) {
            Ok(_) => n += 1,
            Err(AllocError::OutOfSpace { .. }) => break,
            Err(e) => panic!("{e}"),
        }
        assert!(n < 100_000);
    }
    assert!(n >= 63 * 10);
}

#[test]
fn reopen_rebuilds_the_same_allocations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.pool");
    let pool = Arc::new(Pool::create(&path, &PoolOptions::new("wafa", 1 << 20)).expect("create"));
    // SAFETY: fresh pool.
    let w = unsafe { Wafa::format(pool, manual()) }.expect("format");
    let small: Vec<_> = (0..100)
        .map(|i| (w.alloc(10 + i * 7).expect("alloc"), 10 + i * 7))
        .collect();
    let big = w.alloc(10_000).expect("alloc");
    for (p, size) in &small[..30] {
        free(&w, *p, *size).expect("free");
    }
    // Make the frees durable (reform backs the cache up to media).
    w.reform().expect("reform");
    let before = w.stats();
    drop(w);
    let pool = Arc::new(Pool::open(&path, "wafa").expect("open"));
    // SAFETY: only this test uses the pool.
    let w = unsafe { Wafa::open(pool, manual()) }.expect("open wafa");
    let after = w.stats();
    assert_eq!(after.free_units, before.free_units);
    assert_eq!(after.run_pages, before.run_pages);
    for (p, size) in &small[30..] {
        assert!(w.is_allocated(*p, *size), "durable allocation {p:?} lost");
    }
    for (p, size) in &small[..30] {
        assert!(!w.is_allocated(*p, *size), "reformed free {p:?} came back");
    }
    assert!(w.is_allocated(big, 10_000));
}

#[test]
fn two_threads_never_share_a_unit() {
    let w = Arc::new(heap(4 << 20, WafaOptions::default()));
    let handles: Vec<_> = (0..2)
        .map(|t| {
            let w = Arc::clone(&w);
            std::thread::spawn(move || {
                let mut live = Vec::new();
                for i in 0..3000u64 {
                    let size = 1 + (i * 37 + t * 11) % 300;
                    live.push((w.alloc(size).expect("alloc"), size));
                    if i % 3 == 0 {
                        let (p, s) = live.swap_remove((i as usize * 7) % live.len());
                        // SAFETY: never referenced.
                        free(&w, p, s).expect("free");
                    }
                }
                live
            })
        })
        .collect();
    let mut units = BTreeSet::new();
    for h in handles {
        for (p, size) in h.join().expect("thread") {
            for u in 0..size.div_ceil(64) {
                assert!(
                    units.insert(p.offset() + 64 * u),
                    "unit {} handed out twice",
                    p.offset() + 64 * u
                );
            }
        }
    }
}

#[test]
fn implements_the_allocator_trait() {
    let w = heap(1 << 20, manual());
    let a: &dyn PersistentAllocator = &w;
    assert_eq!(a.name(), "wafa");
    assert_eq!(a.alignment(), 64);
    let p = a.alloc(128).expect("alloc");
    assert_eq!(p.offset() % 64, 0);
    // SAFETY: the block is never referenced.
    unsafe { a.free(p, 128) }.expect("free");
}

#[cfg(feature = "wear")]
#[test]
fn wear_counts_follow_allocations() {
    let w = heap(1 << 20, manual());
    for _ in 0..63 * 3 {
        let p = w.alloc(64).expect("alloc");
        free(&w, p, 64).expect("free");
        w.reform().expect("reform");
    }
    let counts = w.unit_counts();
    // Every data unit of the first three pages was written exactly once: clocks
    // sweep each page, and used-up pages wait while fresh pages remain.
    for page in 0..3 {
        let units = &counts[page * 64..page * 64 + 63];
        assert!(units.iter().all(|&c| c == 1), "page {page}: {units:?}");
        assert_eq!(
            counts[page * 64 + 63],
            0,
            "the metadata unit is never allocated"
        );
    }
    let s = w.wear_summary();
    assert_eq!(s.pages, 3);
    assert_eq!(s.total_page_writes, 3);
    assert_eq!(s.unit_write_max, 1);
}

/// A page whose clock sits near its end keeps a small bucket; a larger request must
/// still find the free space behind the clock rather than fail.
#[test]
fn free_space_behind_the_clocks_is_found_before_out_of_space() {
    let w = heap(16 * 1024, manual());
    let pages = w.stats().pages;
    for _ in 0..63 {
        let p = w.alloc(64).expect("alloc");
        free(&w, p, 64).expect("free");
    }
    for i in 0..(u64::from(pages) * 63) {
        let p = w
            .alloc(128)
            .unwrap_or_else(|e| panic!("pair {i}: {e} with every unit free"));
        free(&w, p, 128).expect("free");
    }
}

/// WAFA does not implement the optional operations of the allocator trait and says
/// so with a typed error instead of pretending; `usable_size` is the size asked for.
#[test]
fn optional_trait_operations_are_unsupported() {
    let w = heap(1 << 20, manual());
    let p = w.alloc(100).expect("alloc");
    let unsupported = |r: Result<_, AllocError>, what: &str| match r {
        Err(AllocError::Unsupported {
            allocator: "wafa",
            op,
        }) => assert_eq!(op, what),
        other => panic!("{what}: {other:?}"),
    };
    unsupported(
        PersistentAllocator::for_each_live_block(&w, &mut |_, _| {}),
        "for_each_live_block",
    );
    let slot = PPtr::from_offset(w.pool().heap().start);
    // SAFETY: the calls fail before touching the slot or the block.
    unsafe {
        unsupported(
            w.alloc_publish_if(64, slot, PPtr::null(), &mut |_| {})
                .map(|_| ()),
            "alloc_publish_if",
        );
        unsupported(w.free_unpublish(slot, p, 100), "free_unpublish");
    }
    assert_eq!(PersistentAllocator::usable_size(&w, p, 100), 100);
}
