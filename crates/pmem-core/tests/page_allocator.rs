//! The page allocator through the `PersistentAllocator` trait: allocation, free,
//! errors, persistence of the bitmap across reopen, publication, and two threads.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pmem_core::{
    AllocError, AtomicPPtr, Counters, PPtr, PageAllocator, PersistentAllocator, Pool, PoolOptions,
};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Root {
    slot: PPtr<u8>,
}

impl pmem_core::RootType for Root {
    const ROOT_ID: &'static str = "page-allocator-test/root";
    const LAYOUT_VERSION: u32 = 1;
}

const SIZE: u64 = 1 << 20;

fn fresh(dir: &std::path::Path) -> (std::path::PathBuf, PageAllocator) {
    let path = dir.join("alloc.pool");
    let pool =
        Pool::create(&path, &PoolOptions::new("alloc", SIZE).root::<Root>()).expect("create");
    // SAFETY: nothing else uses this fresh pool's heap.
    let a = unsafe { PageAllocator::format_heap(Arc::new(pool)) }.expect("format");
    (path, a)
}

fn reopen(path: &std::path::Path) -> PageAllocator {
    let pool = Pool::open(path, "alloc").expect("open");
    // SAFETY: this test is the only user of the pool.
    unsafe { PageAllocator::open_heap(Arc::new(pool)) }.expect("open allocator")
}

#[test]
fn blocks_are_disjoint_aligned_and_inside_the_heap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, a) = fresh(dir.path());
    let heap = a.pool().heap();
    let mut seen = BTreeSet::new();
    let mut blocks = Vec::new();
    for size in [1u64, 4096, 4097, 3 * 4096, 100, 8192] {
        let p = a.alloc(size).expect("alloc");
        assert_eq!(p.offset() % a.alignment(), 0);
        assert!(heap.contains(&p.offset()) && p.offset() + size <= heap.end);
        for page in 0..size.div_ceil(4096) {
            assert!(
                seen.insert(p.offset() + page * 4096),
                "page handed out twice"
            );
        }
        blocks.push((p, size));
    }
    assert_eq!(a.stats().pages_used, seen.len() as u64);
    for (p, size) in blocks {
        // SAFETY: the blocks were never referenced.
        unsafe { a.free(p, size) }.expect("free");
    }
    assert_eq!(a.stats().pages_used, 0);
}

#[test]
fn invalid_requests_are_typed_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, a) = fresh(dir.path());
    assert!(matches!(
        a.alloc(0),
        Err(AllocError::InvalidSize { size: 0 })
    ));
    assert!(matches!(
        a.alloc(SIZE * 2),
        Err(AllocError::InvalidSize { .. })
    ));
    let p = a.alloc(4096).expect("alloc");
    // SAFETY: the block is never referenced, so freeing it (or failing to) is sound.
    unsafe {
        assert!(matches!(
            a.free(p.byte_add(8).expect("add"), 4096),
            Err(AllocError::InvalidFree { .. })
        ));
        assert!(matches!(
            a.free(PPtr::from_offset(64), 4096),
            Err(AllocError::InvalidFree { .. })
        ));
        assert!(
            matches!(a.free(p, 8192), Err(AllocError::InvalidFree { .. })),
            "second page is free"
        );
        a.free(p, 4096).expect("free");
        assert!(
            matches!(a.free(p, 4096), Err(AllocError::InvalidFree { .. })),
            "double free"
        );
    }
    let total = a.stats().pages_total;
    let mut n = 0;
    while a.alloc(4096).is_ok() {
        n += 1;
    }
    assert_eq!(n, total);
    assert!(matches!(a.alloc(1), Err(AllocError::OutOfSpace { .. })));
}

#[test]
fn allocation_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, a) = fresh(dir.path());
    let kept: Vec<_> = (0..10).map(|_| a.alloc(4096).expect("alloc")).collect();
    let freed = a.alloc(8192).expect("alloc");
    // SAFETY: never referenced.
    unsafe { a.free(freed, 8192) }.expect("free");
    let used = a.stats().pages_used;
    drop(a);
    let b = reopen(&path);
    assert_eq!(b.stats().pages_used, used);
    // The freed run is free again, the kept pages are not handed out again.
    let mut again = BTreeSet::new();
    while let Ok(p) = b.alloc(4096) {
        again.insert(p.offset());
    }
    for p in &kept {
        assert!(
            !again.contains(&p.offset()),
            "a durable allocation was handed out again"
        );
    }
    assert!(again.contains(&freed.offset()));
}

#[test]
fn alloc_publish_initialises_persists_and_publishes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, a) = fresh(dir.path());
    let root = a.pool().root::<Root>().expect("root");
    let slot: PPtr<AtomicPPtr<u8>> = root.cast();
    let (r, d) = Counters::measure(|| {
        // SAFETY: the slot is only accessed atomically while this runs.
        unsafe { a.alloc_publish(100, slot, &mut |b: &mut [u8]| b.fill(0xab)) }
    });
    let block = r.expect("alloc_publish");
    // Block, intent, bitmap+slot, intent clear: four persistence points, so four
    // fences in DAX mode and four msyncs in msync mode (the root page holding the slot
    // is adjacent to the bitmap page, so those two merge into one msync).
    match a.pool().mode() {
        pmem_core::DurabilityMode::Msync => assert_eq!(d.msyncs, 4),
        pmem_core::DurabilityMode::Dax if pmem_core::flush::kind().needs_fence() => {
            assert_eq!(d.fences, 4)
        }
        _ => {}
    }
    // SAFETY: read-only atomic access, no other references.
    let published = unsafe { a.pool().get_shared(slot) }
        .expect("slot")
        .load(Ordering::Acquire);
    assert_eq!(published, block);
    drop(a);
    let b = reopen(&path);
    let pool = b.pool();
    assert_eq!(pool.read(root).expect("root").slot, block.cast());
    assert!(pool
        .bytes(block.offset(), 100)
        .expect("bytes")
        .iter()
        .all(|&x| x == 0xab));
    assert_eq!(b.stats().pages_used, 1);
    drop(b);
    let mut pool =
        Pool::open_with(&path, &pmem_core::OpenOptions::new().read_only(true)).expect("ro open");
    let heap = pool.heap().start;
    assert!(
        !PageAllocator::inspect(&mut pool, heap)
            .expect("inspect")
            .intent_pending
    );
}

#[test]
fn alloc_publish_rejects_bad_slots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, a) = fresh(dir.path());
    let heap = a.pool().heap().start;
    for off in [0u64, 8, 4088, 4097, heap, heap + 64, SIZE] {
        // SAFETY: the call fails before touching the slot.
        let r = unsafe { a.alloc_publish(10, PPtr::from_offset(off), &mut |_| {}) };
        assert!(
            matches!(r, Err(AllocError::InvalidSlot { .. })),
            "slot {off}: {r:?}"
        );
    }
    assert_eq!(
        a.stats().pages_used,
        0,
        "failed publications allocate nothing"
    );
}

#[test]
fn two_threads_never_share_a_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, a) = fresh(dir.path());
    let a = Arc::new(a);
    let per_thread = 60;
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..per_thread {
                    let p = a.alloc(4096).expect("alloc");
                    if i % 3 == 0 {
                        // SAFETY: never referenced.
                        unsafe { a.free(p, 4096) }.expect("free");
                    } else {
                        mine.push(p.offset());
                    }
                }
                mine
            })
        })
        .collect();
    let mut all = BTreeSet::new();
    for h in handles {
        for off in h.join().expect("thread") {
            assert!(all.insert(off), "page {off} handed to both threads");
        }
    }
    assert_eq!(a.stats().pages_used, all.len() as u64);
}

#[test]
fn inspect_reports_without_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, a) = fresh(dir.path());
    a.alloc(3 * 4096).expect("alloc");
    drop(a);
    let before = std::fs::read(&path).expect("read");
    let mut pool =
        Pool::open_with(&path, &pmem_core::OpenOptions::new().read_only(true)).expect("ro open");
    let heap = pool.heap().start;
    let s = PageAllocator::inspect(&mut pool, heap).expect("inspect");
    assert_eq!(s.pages_used, 3);
    assert_eq!(s.page_size, 4096);
    drop(pool);
    assert_eq!(std::fs::read(&path).expect("read"), before);
    let mut plain = Pool::anonymous(&PoolOptions::new("x", 1 << 16)).expect("anon");
    let heap = plain.heap().start;
    assert!(matches!(
        PageAllocator::inspect(&mut plain, heap),
        Err(AllocError::NotFormatted { .. })
    ));
}
