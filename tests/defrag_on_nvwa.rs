//! The defrag heap on the NVWA allocator (`DefragHeap<Nvwa>`): slab pages are
//! nvwa's page-aligned large blocks. A list is built, two nodes of three freed, a
//! leak collected, a compaction run beside a reader; the heap verifies, and
//! reopening it (nvwa's log replay, then the transactions' and the heap's
//! recovery) gives the same list and the same live blocks.

use std::sync::Arc;

use nvwa::{Nvwa, NvwaOptions};
use pmem_core::{PPtr, Pool, PoolOptions};
use pmem_defrag::{persistent_type, CompactOptions, DefragHeap, HeapRoot, Protocol, Registry};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Node {
    value: [u64; 15],
    next: PPtr<Node>,
}
persistent_type!(Node, id = 1, pointers = [next: Node]);

fn sum(heap: &DefragHeap<Nvwa>) -> u64 {
    heap.transaction(|t| {
        let (mut p, mut sum) = (t.root::<Node>("list")?, 0);
        while !p.is_null() {
            let n = t.read(p)?;
            sum += n.value[0];
            p = n.next;
        }
        Ok(sum)
    })
    .expect("walk")
}

#[test]
fn the_defrag_heap_runs_on_nvwa() {
    let registry = Registry::new().with::<Node>();
    let path =
        std::env::temp_dir().join(format!("pmkit-defrag-on-nvwa-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(
        &path,
        &PoolOptions::new("defrag-nvwa", 16 << 20).root::<HeapRoot>(),
    )
    .expect("pool");
    let heap = DefragHeap::create_with(pool, &registry, |pool: Arc<Pool>, region| {
        // SAFETY: create_with gives the allocator its region alone.
        unsafe { Nvwa::format(pool, region, &NvwaOptions::default()) }
    })
    .expect("create");
    for v in 0..600 {
        heap.transaction(|t| {
            let head = t.root::<Node>("list")?;
            let n = t.alloc::<Node>()?;
            t.write(
                n,
                &Node {
                    value: [v; 15],
                    next: head,
                },
            )?;
            t.set_root("list", n)
        })
        .expect("push");
    }
    let mut keep = heap.root::<Node>("list").expect("root");
    while !keep.is_null() {
        keep = heap
            .transaction(|t| {
                let mut k = t.read(keep)?;
                for _ in 0..2 {
                    if k.next.is_null() {
                        break;
                    }
                    let gone = k.next;
                    k.next = t.read(gone)?.next;
                    t.free(gone)?;
                }
                t.write(keep, &k)?;
                Ok(k.next)
            })
            .expect("thin");
    }
    heap.transaction(|t| {
        let head = t.root::<Node>("list")?;
        let next = t.read(head)?.next;
        t.set_root("list", next)
    })
    .expect("leak");
    assert_eq!(heap.collect_leaks().expect("mark"), 1);
    let expect = sum(&heap);
    let before = heap.stats().expect("stats").frag_ratio;
    let opts = CompactOptions::new().target(1.25).protocol(Protocol::Sfccd);
    let (report, during) = std::thread::scope(|s| {
        let d = s.spawn(|| heap.compact_with(&opts));
        let during = sum(&heap);
        (d.join().expect("the defragmenter panicked"), during)
    });
    let report = report.expect("compact");
    assert_eq!(during, expect);
    assert!(
        report.ratio_after < before,
        "{before} -> {}",
        report.ratio_after
    );
    assert!(report.pages_freed > 0);
    heap.verify().expect("verify");
    assert_eq!(sum(&heap), expect);
    let live = heap.tx_heap().live_blocks().expect("live");
    drop(heap);
    let pool = Pool::open(&path, "defrag-nvwa").expect("reopen");
    let (heap, _) = DefragHeap::open_with(pool, &registry, |pool: Arc<Pool>, start| {
        // SAFETY: open_with gives the allocator its region alone.
        unsafe { Nvwa::open(pool, start, &NvwaOptions::default()) }
    })
    .expect("open");
    heap.verify().expect("verify after reopening");
    assert_eq!(sum(&heap), expect);
    assert_eq!(heap.tx_heap().live_blocks().expect("live"), live);
    drop(heap);
    let _ = std::fs::remove_file(&path);
}
