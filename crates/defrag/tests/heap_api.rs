//! The heap as a user meets it: typed errors for wrong types, double frees, bad
//! root names and a registry that does not match the heap; the fragmentation ratio
//! of a known layout; reopening.

use pmem_core::{PPtr, Pool, PoolOptions};
use pmem_defrag::{persistent_type, DefragError, DefragHeap, HeapRoot, Registry};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

mod common;
use common::Node;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Blob {
    bytes: [u64; 14],
}
persistent_type!(Blob, id = 2, pointers = []);

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct NodeV2 {
    value: u64,
    extra: u64,
    next: PPtr<NodeV2>,
}
persistent_type!(NodeV2, id = 1, pointers = [next: NodeV2]);

fn heap() -> DefragHeap {
    let pool = Pool::anonymous(&PoolOptions::new("api", 4 << 20).root::<HeapRoot>()).expect("pool");
    DefragHeap::create(pool, &Registry::new().with::<Node>().with::<Blob>()).expect("heap")
}

#[test]
fn wrong_types_double_frees_and_bad_roots_are_typed_errors() {
    let h = heap();
    let n = h.transaction(|t| t.alloc::<Node>()).expect("alloc");
    // The same offset read as another type.
    let as_blob = PPtr::<Blob>::from_offset(n.offset());
    assert!(matches!(
        h.read(as_blob),
        Err(DefragError::WrongType {
            expected: 2,
            found: 1,
            ..
        })
    ));
    // Not an object at all.
    let inside = PPtr::<Node>::from_offset(n.offset() + 8);
    assert!(matches!(
        h.read(inside),
        Err(DefragError::NotAnObject { .. })
    ));
    // A double free in one transaction, and after a committed free.
    let r = h.transaction(|t| {
        t.free(n)?;
        t.free(n)
    });
    assert!(matches!(r, Err(DefragError::NotAnObject { .. })), "{r:?}");
    assert!(h.read(n).is_ok(), "the failed transaction freed nothing");
    h.transaction(|t| t.free(n)).expect("free");
    assert!(h.read(n).is_err());
    // Root names.
    for bad in ["", "a name longer than twenty-four bytes", "nul\0"] {
        let r = h.transaction(|t| t.set_root(bad, PPtr::<Node>::null()));
        assert!(matches!(r, Err(DefragError::BadRootName(_))), "{bad:?}");
    }
    // An unregistered type.
    #[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
    #[repr(C)]
    struct Other {
        x: u64,
    }
    persistent_type!(Other, id = 9, pointers = []);
    assert!(matches!(
        h.transaction(|t| t.alloc::<Other>()),
        Err(DefragError::Unregistered(9))
    ));
}

#[test]
fn a_registry_that_does_not_match_the_heap_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("h.pool");
    {
        let pool = Pool::create(&path, &PoolOptions::new("reg", 4 << 20).root::<HeapRoot>())
            .expect("pool");
        let h = DefragHeap::create(pool, &Registry::new().with::<Node>()).expect("heap");
        let n = h.transaction(|t| t.alloc::<Node>()).expect("alloc");
        h.transaction(|t| t.set_root("n", n)).expect("root");
    }
    // Same id, another layout.
    let r = DefragHeap::open(
        Pool::open(&path, "reg").expect("open"),
        &Registry::new().with::<NodeV2>(),
    );
    assert!(matches!(r, Err(DefragError::Registry(_))), "{r:?}");
    // The type missing.
    let r = DefragHeap::open(
        Pool::open(&path, "reg").expect("open"),
        &Registry::new().with::<Blob>(),
    );
    assert!(matches!(r, Err(DefragError::Registry(_))), "{r:?}");
    // Two types with one id.
    let r = DefragHeap::open(
        Pool::open(&path, "reg").expect("open"),
        &Registry::new().with::<Node>().with::<NodeV2>(),
    );
    assert!(matches!(r, Err(DefragError::Registry(_))), "{r:?}");
    // The right one: the root survived.
    let (h, _) = DefragHeap::open(
        Pool::open(&path, "reg").expect("open"),
        &Registry::new().with::<Node>(),
    )
    .expect("reopen");
    let n = h.root::<Node>("n").expect("root");
    assert_eq!(h.read(n).expect("read").value, 0);
}

#[test]
fn the_fragmentation_ratio_is_footprint_over_live_bytes() {
    let h = heap();
    assert_eq!(h.stats().expect("stats").frag_ratio, 1.0);
    // 126 nodes fill one page exactly (32-byte slots after a 64-byte header).
    let nodes: Vec<PPtr<Node>> = (0..126)
        .map(|_| h.transaction(|t| t.alloc::<Node>()).expect("alloc"))
        .collect();
    let s = h.stats().expect("stats");
    assert_eq!((s.pages, s.live_objects, s.live_bytes), (1, 126, 126 * 16));
    assert!((s.frag_ratio - 4096.0 / 2016.0).abs() < 1e-9);
    // Free all but one: the page stays, the ratio grows.
    for n in &nodes[1..] {
        h.transaction(|t| t.free(*n)).expect("free");
    }
    let s = h.stats().expect("stats");
    assert_eq!((s.pages, s.live_objects), (1, 1));
    assert!((s.frag_ratio - 4096.0 / 16.0).abs() < 1e-9);
    // The last free returns the page.
    h.transaction(|t| t.free(nodes[0])).expect("free");
    assert_eq!(h.stats().expect("stats").pages, 0);
}

#[test]
fn compaction_packs_sparse_pages_and_heals_every_reference() {
    // Simulated, so the fences are counted.
    let (pool, _sim) =
        Pool::simulated(&PoolOptions::new("compact", 4 << 20).root::<HeapRoot>()).expect("pool");
    let mut h =
        DefragHeap::create(pool, &Registry::new().with::<Node>().with::<Blob>()).expect("heap");
    // Two pages of nodes on a list, then every node but one in eight freed.
    for v in 0..252u64 {
        h.transaction(|t| common::push(t, "list", v)).expect("push");
    }
    h.transaction(|t| {
        let mut prev = t.root::<Node>("list")?;
        let mut i = 1;
        loop {
            let cur = t.read(prev)?.next;
            if cur.is_null() {
                break;
            }
            let next = t.read(cur)?.next;
            if i % 8 != 0 {
                let mut p = t.read(prev)?;
                p.next = next;
                t.write(prev, &p)?;
                t.free(cur)?;
            } else {
                prev = cur;
            }
            i += 1;
        }
        Ok(())
    })
    .expect("thin out");
    let before = h.stats().expect("stats");
    assert_eq!(before.pages, 2);
    let values = |h: &DefragHeap| {
        let mut out = Vec::new();
        let mut p = h.root::<Node>("list").expect("root");
        while !p.is_null() {
            let n = h.read(p).expect("node");
            out.push(n.value);
            p = n.next;
        }
        out
    };
    let list = values(&h);
    let r = h.compact(1.25).expect("compact");
    assert_eq!(r.moved, before.live_objects);
    assert_eq!(r.move_fences, 2 * r.moved, "Espresso: two fences per move");
    assert_eq!((r.pages_freed, r.pages_allocated), (2, 1));
    assert!(r.ratio_after < r.ratio_before / 1.9, "{r:?}");
    assert_eq!(values(&h), list, "same list after the moves");
    h.verify().expect("every reference healed");
    // Below the target: nothing to do.
    assert_eq!(h.compact(1000.0).expect("compact").moved, 0);
}

#[test]
fn a_pool_without_a_heap_or_with_a_torn_type_table_is_a_typed_error() {
    let dir = tempfile::tempdir().expect("dir");
    // A pool with the heap's root type, never formatted as a heap.
    let bare = dir.path().join("bare.pool");
    drop(Pool::create(&bare, &PoolOptions::new("bare", 4 << 20).root::<HeapRoot>()).expect("pool"));
    let r = DefragHeap::open(
        Pool::open(&bare, "bare").expect("open"),
        &Registry::new().with::<Node>(),
    );
    assert!(r.is_err(), "{r:?}");
    // A heap whose type table lost a byte.
    let path = dir.path().join("h.pool");
    let registry = Registry::new().with::<Node>();
    drop(
        DefragHeap::create(
            Pool::create(&path, &PoolOptions::new("torn", 4 << 20).root::<HeapRoot>())
                .expect("pool"),
            &registry,
        )
        .expect("heap"),
    );
    let mut pool = Pool::open(&path, "torn").expect("open");
    let root: HeapRoot = pool
        .read(pool.root::<HeapRoot>().expect("root"))
        .expect("read");
    let at = root.type_table + 32;
    let b = pool.bytes(at, 1).expect("byte")[0];
    pool.write_bytes(at, &[b ^ 0xff]).expect("write");
    drop(pool);
    let r = DefragHeap::open(Pool::open(&path, "torn").expect("open"), &registry);
    assert!(matches!(r, Err(DefragError::Corrupt(_))), "{r:?}");
}
