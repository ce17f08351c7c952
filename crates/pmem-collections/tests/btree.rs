//! `PBTreeMap` without crashes: random operations and range scans against a std
//! `BTreeMap`, every invariant checked after each operation; rebalancing shrinks
//! the tree back; typed errors for another type, another order, another heap and a
//! damaged pool; no block leaked by removal or teardown.

use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};

use pmem_collections::{Container, Error, PBTreeMap, PBox, PBytes, PHeap, PString};
use pmem_core::Pool;
use proptest::prelude::*;

fn heap() -> PHeap {
    let pool = Pool::anonymous(&PHeap::pool_options("btree", 16 << 20)).expect("pool");
    PHeap::create(pool).expect("heap")
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u64),
    Remove(u16),
}

fn op(keys: u16) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..keys, any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (0..keys).prop_map(Op::Remove),
    ]
}

/// Applies `ops` to a tree of order `B` and to the model, comparing every result
/// and checking the tree after each operation; then compares scans.
fn run_u64<const B: usize>(ops: &[Op]) -> Result<(), TestCaseError> {
    let heap = heap();
    let mut t: PBTreeMap<u64, u64, B> = heap.root("t").expect("root");
    let mut m = BTreeMap::new();
    for op in ops {
        match *op {
            Op::Insert(k, v) => {
                let k = u64::from(k);
                prop_assert_eq!(t.insert(&heap, &k, &v).expect("insert"), m.insert(k, v));
            }
            Op::Remove(k) => {
                let k = u64::from(k);
                prop_assert_eq!(t.remove(&heap, &k).expect("remove"), m.remove(&k));
            }
        }
        prop_assert_eq!(t.check(&heap).expect("check"), m.len() as u64);
    }
    prop_assert_eq!(t.len(&heap).expect("len"), m.len() as u64);
    for k in 0..64u64 {
        prop_assert_eq!(t.get(&heap, &k).expect("get"), m.get(&k).copied());
    }
    let all: Vec<(u64, u64)> = t
        .iter(&heap)
        .expect("iter")
        .map(|e| e.expect("entry"))
        .collect();
    prop_assert_eq!(all, m.iter().map(|(&k, &v)| (k, v)).collect::<Vec<_>>());
    prop_assert_eq!(
        t.first(&heap).expect("first"),
        m.first_key_value().map(|(&k, &v)| (k, v))
    );
    prop_assert_eq!(
        t.last(&heap).expect("last"),
        m.last_key_value().map(|(&k, &v)| (k, v))
    );
    prop_assert_eq!(
        heap.live_blocks().expect("live"),
        t.blocks(&heap).expect("blocks")
    );
    Ok(())
}

fn scan<const B: usize>(
    t: &PBTreeMap<u64, u64, B>,
    heap: &PHeap,
    lo: Bound<u64>,
    hi: Bound<u64>,
) -> Vec<(u64, u64)> {
    t.range(heap, (lo, hi))
        .expect("range")
        .map(|e| e.expect("entry"))
        .collect()
}

fn bound() -> impl Strategy<Value = Bound<u64>> {
    prop_oneof![
        Just(Bound::Unbounded),
        (0u64..70).prop_map(Bound::Included),
        (0u64..70).prop_map(Bound::Excluded),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_match_the_model_order_3(ops in proptest::collection::vec(op(48), 1..300)) {
        run_u64::<3>(&ops)?;
    }

    #[test]
    fn random_operations_match_the_model_order_4(ops in proptest::collection::vec(op(64), 1..300)) {
        run_u64::<4>(&ops)?;
    }

    #[test]
    fn random_operations_match_the_model_default_order(ops in proptest::collection::vec(op(64), 1..300)) {
        run_u64::<16>(&ops)?;
    }

    #[test]
    fn range_scans_match_the_model(
        keys in proptest::collection::btree_set(0u64..64, 0..60),
        removed in proptest::collection::vec(0u64..64, 0..30),
        scans in proptest::collection::vec((bound(), bound()), 1..12),
    ) {
        let heap = heap();
        let mut t: PBTreeMap<u64, u64, 3> = heap.root("t").expect("root");
        let mut m = BTreeMap::new();
        for &k in &keys {
            t.insert(&heap, &k, &(k * 7)).expect("insert");
            m.insert(k, k * 7);
        }
        for k in removed {
            t.remove(&heap, &k).expect("remove");
            m.remove(&k);
        }
        for (lo, hi) in scans {
            let want: Vec<(u64, u64)> = m
                .iter()
                .filter(|(k, _)| (lo, hi).contains(k))
                .map(|(&k, &v)| (k, v))
                .collect();
            prop_assert_eq!(scan(&t, &heap, lo, hi), want, "{:?}..{:?}", lo, hi);
        }
    }
}

fn keys(it: impl Iterator<Item = pmem_collections::Result<(u64, u64)>>) -> Vec<u64> {
    it.map(|e| e.expect("entry").0).collect()
}

#[test]
fn the_range_forms_all_work() {
    let heap = heap();
    let mut t: PBTreeMap<u64, u64> = heap.root("t").expect("root");
    for k in 0..100u64 {
        t.insert(&heap, &k, &k).expect("insert");
    }
    assert_eq!(keys(t.range(&heap, 10..13).expect("a..b")), [10, 11, 12]);
    assert_eq!(keys(t.range(&heap, 97..).expect("a..")), [97, 98, 99]);
    assert_eq!(keys(t.range(&heap, ..=2).expect("..=b")), [0, 1, 2]);
    assert_eq!(keys(t.range(&heap, ..2).expect("..b")), [0, 1]);
    assert_eq!(t.iter(&heap).expect("..").count(), 100);
    assert_eq!(t.range(&heap, 200..).expect("empty").count(), 0);
}

#[test]
fn removal_rebalances_the_tree_back_to_a_root_leaf() {
    let heap = heap();
    let mut t: PBTreeMap<u64, u64, 4> = heap.root("t").expect("root");
    let before = heap.live_blocks().expect("live").len();
    for k in 0..2000u64 {
        t.insert(&heap, &(k * 7919 % 2003), &k).expect("insert");
    }
    let grown = heap.live_blocks().expect("live").len();
    assert!(grown > 500, "2000 keys in nodes of 4: {grown} blocks");
    for k in 0..2000u64 {
        assert!(t
            .remove(&heap, &(k * 7919 % 2003))
            .expect("remove")
            .is_some());
        if k % 97 == 0 {
            t.check(&heap).expect("check");
        }
    }
    assert_eq!(t.check(&heap).expect("check"), 0);
    // Merges freed every node but the root leaf.
    assert_eq!(heap.live_blocks().expect("live").len(), before);
}

#[test]
fn byte_string_keys_and_values_own_their_blocks() {
    let heap = heap();
    let mut t: PBTreeMap<PString, PBytes, 3> = heap.root("t").expect("root");
    let mut m = BTreeMap::new();
    for i in 0..300u32 {
        let k = format!("key-{:05}", i * 37 % 301);
        let v = vec![i as u8; (i % 40) as usize];
        assert_eq!(t.insert(&heap, &k, &v).expect("insert"), m.insert(k, v));
    }
    for i in 0..200u32 {
        let k = format!("key-{:05}", i * 11 % 301);
        assert_eq!(t.remove(&heap, &k).expect("remove"), m.remove(&k));
        t.check(&heap).expect("check");
    }
    assert_eq!(t.check(&heap).expect("check"), m.len() as u64);
    let got: Vec<(String, Vec<u8>)> = t
        .range(&heap, "key-00100"..)
        .expect("range")
        .map(|e| e.expect("entry"))
        .collect();
    let want: Vec<(String, Vec<u8>)> = m
        .range("key-00100".to_string()..)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        heap.live_blocks().expect("live"),
        t.blocks(&heap).expect("blocks")
    );
    // Teardown is one transaction, bounded by the log's allocation records: empty
    // the tree down to a few blocks first.
    for k in m.keys().skip(2) {
        t.remove(&heap, k).expect("remove");
    }
    heap.remove_root("t", t).expect("remove root");
    assert_eq!(heap.live_blocks().expect("live"), Vec::<u64>::new());
}

#[test]
fn opening_as_another_type_or_order_is_a_typed_error() {
    let heap = heap();
    let t: PBTreeMap<u64, u64> = heap.root("t").expect("root");
    drop(t);
    let e = heap
        .root::<PBTreeMap<u64, u32>>("t")
        .expect_err("another value type");
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e}");
    assert!(
        e.to_string().contains("PBTreeMap<u64 (8 B), u32 (4 B)>"),
        "{e}"
    );
    assert!(
        e.to_string().contains("PBTreeMap<u64 (8 B), u64 (8 B)>"),
        "{e}"
    );
    let e = heap
        .root::<PBTreeMap<u64, u64, 4>>("t")
        .expect_err("another order");
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e}");
    assert!(
        e.to_string().contains("of order 16") && e.to_string().contains("of order 4"),
        "{e}"
    );
    let e = heap.root::<PBox<u64>>("t").expect_err("a box");
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e}");
    let _b: PBox<u64> = heap.root("b").expect("box");
    let e = heap
        .root::<PBTreeMap<u64, u64>>("b")
        .expect_err("not a tree");
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e}");
    heap.root::<PBTreeMap<u64, u64>>("t").expect("its own type");
}

#[test]
fn a_handle_used_with_another_heap_is_refused() {
    let (a, b) = (heap(), heap());
    let mut t: PBTreeMap<u64, u64> = a.root("t").expect("root");
    let _other: PBTreeMap<u64, u64> = b.root("t").expect("root");
    assert!(matches!(t.insert(&b, &1, &1), Err(Error::WrongHeap { .. })));
    assert!(matches!(t.get(&b, &1), Err(Error::WrongHeap { .. })));
    assert!(matches!(t.iter(&b), Err(Error::WrongHeap { .. })));
    assert!(matches!(
        b.root::<PBTreeMap<u64, u64>>("t"),
        Err(Error::AlreadyOpen { .. })
    ));
}

/// Restores the pool at `path` from `clean`, runs `f` on it (to damage it), then
/// reopens the heap.
fn damaged(path: &std::path::Path, clean: &std::path::Path, f: impl FnOnce(&mut Pool)) -> PHeap {
    std::fs::copy(clean, path).expect("restore");
    let mut pool = Pool::open(path, "btree").expect("open pool");
    f(&mut pool);
    drop(pool);
    PHeap::open(Pool::open(path, "btree").expect("reopen")).expect("heap")
}

fn read_word(pool: &Pool, at: u64) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(pool.bytes(at, 8).expect("read"));
    u64::from_le_bytes(w)
}

fn is_corrupt<T: std::fmt::Debug>(r: pmem_collections::Result<T>) {
    assert!(matches!(r, Err(Error::Corrupt { .. })), "{r:?}");
}

fn put(p: &mut Pool, at: u64, v: u64) {
    p.write_bytes(at, &v.to_le_bytes()).expect("write");
}

#[test]
fn a_damaged_pool_gives_corrupt_not_a_panic_or_a_hang() {
    type T = PBTreeMap<u64, u64, 3>;
    let dir = tempfile::tempdir().expect("dir");
    let (path, clean) = (dir.path().join("pool"), dir.path().join("clean"));
    let header = {
        let pool = Pool::create(&path, &PHeap::pool_options("btree", 8 << 20)).expect("pool");
        let heap = PHeap::create(pool).expect("heap");
        let mut t: T = heap.root("t").expect("root");
        for k in 0..50u64 {
            t.insert(&heap, &k, &k).expect("insert");
        }
        heap.checkpoint().expect("checkpoint");
        t.header_offset()
    };
    std::fs::copy(&path, &clean).expect("copy");
    // Header words after the 64-byte tag: len, root, height, first.
    let (root_w, height_w, first_w) = (header + 72, header + 80, header + 88);
    let (mut root, mut height, mut first) = (0, 0, 0);
    drop(damaged(&path, &clean, |p| {
        root = read_word(p, root_w);
        height = read_word(p, height_w);
        first = read_word(p, first_w);
    }));
    assert!(height >= 3, "50 keys in nodes of 3: height {height}");

    // A height beyond any tree: refused at opening.
    let heap = damaged(&path, &clean, |p| put(p, height_w, 1000));
    is_corrupt(heap.root::<T>("t"));
    drop(heap);
    // A height one short: the walk meets an inner node where a leaf must be.
    let heap = damaged(&path, &clean, |p| put(p, height_w, height - 1));
    let t: T = heap.root("t").expect("opens");
    is_corrupt(t.get(&heap, &7));
    is_corrupt(t.check(&heap));
    drop((t, heap));
    // The root's key count beyond the order.
    let heap = damaged(&path, &clean, |p| {
        let w = read_word(p, root);
        put(p, root, w | 0xfff0);
    });
    let mut t: T = heap.root("t").expect("opens");
    is_corrupt(t.get(&heap, &7));
    is_corrupt(t.insert(&heap, &7, &7));
    is_corrupt(t.remove(&heap, &7));
    is_corrupt(t.blocks(&heap));
    drop((t, heap));
    // The root's first child is the root: a cycle (children start at byte 40 of
    // a node of order 3: 16 bytes of head, 3 keys).
    let heap = damaged(&path, &clean, |p| put(p, root + 40, root));
    let t: T = heap.root("t").expect("opens");
    is_corrupt(t.get(&heap, &0));
    is_corrupt(t.check(&heap));
    is_corrupt(t.range(&heap, 0..).and_then(|mut r| r.next().transpose()));
    drop((t, heap));
    // The first leaf links to itself: a scan ends in an error, not a loop.
    let heap = damaged(&path, &clean, |p| put(p, first + 8, first));
    let t: T = heap.root("t").expect("opens");
    let r: pmem_collections::Result<Vec<(u64, u64)>> = t.iter(&heap).expect("iter").collect();
    is_corrupt(r);
    is_corrupt(t.check(&heap));
    drop((t, heap));
    // The undamaged copy is sound.
    let heap = damaged(&path, &clean, |_| {});
    let t: T = heap.root("t").expect("opens");
    assert_eq!(t.check(&heap).expect("check"), 50);
}
