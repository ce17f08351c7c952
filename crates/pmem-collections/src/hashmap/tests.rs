//! Unit tests of [`super::PHashMap`]: against std's map over random operations,
//! growth, iteration, damage and type mismatches. (Crash atomicity is proven by
//! `tests/hashmap_crash.rs`.)

use std::collections::HashMap;

use pmem_core::tx::LogMode;
use pmem_core::{splitmix64, Pool};

use super::table;
use crate::element::write_u64;
use crate::heap::{Access, Size};
use crate::{Error, HeapOptions, PBytes, PHashMap, PHeap, PString};

fn heap(mode: LogMode) -> PHeap {
    let pool = Pool::anonymous(&PHeap::pool_options("hashmap-unit", 16 << 20)).expect("pool");
    PHeap::create_with(
        pool,
        HeapOptions {
            mode,
            ..HeapOptions::default()
        },
    )
    .expect("heap")
}

#[test]
fn u64_map_matches_std_over_random_operations_in_every_mode() {
    for mode in [LogMode::Lazy, LogMode::Undo, LogMode::Redo] {
        let heap = heap(mode);
        let mut m: PHashMap<u64, u64> = heap.root("m").expect("map");
        let mut model = HashMap::new();
        let mut seed = 11u64;
        for _ in 0..3000 {
            let r = splitmix64(&mut seed);
            let k = r % 300;
            if r % 5 < 3 {
                assert_eq!(m.insert(&heap, &k, &r).expect("insert"), model.insert(k, r));
            } else {
                assert_eq!(m.remove(&heap, &k).expect("remove"), model.remove(&k));
            }
        }
        assert_eq!(m.len(&heap).expect("len"), model.len() as u64);
        assert_eq!(m.check(&heap).expect("check"), model.len() as u64);
        for k in 0..310 {
            assert_eq!(m.get(&heap, &k).expect("get"), model.get(&k).copied());
        }
        let mut got: Vec<(u64, u64)> = m.iter(&heap).map(|e| e.expect("entry")).collect();
        got.sort_unstable();
        let mut want: Vec<(u64, u64)> = model.into_iter().collect();
        want.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(heap.live_blocks().expect("live"), all_blocks(&heap, &m));
    }
}

/// The map's blocks plus the heap's own (none besides the roots directory, which
/// is the pool root, not an allocator block).
fn all_blocks<K: crate::Element, V: crate::Element>(heap: &PHeap, m: &PHashMap<K, V>) -> Vec<u64> {
    use crate::Container;
    m.blocks(heap).expect("blocks")
}

#[test]
fn byte_string_map_grows_replaces_and_frees() {
    let heap = heap(LogMode::Lazy);
    let mut m: PHashMap<PBytes, PBytes> = heap.root("b").expect("map");
    assert_eq!(m.capacity(&heap).expect("cap"), 8);
    for i in 0..100u64 {
        let k = format!("key-{i}");
        assert_eq!(
            m.insert(&heap, k.as_bytes(), &[i as u8; 30])
                .expect("insert"),
            None
        );
    }
    assert_eq!(m.capacity(&heap).expect("cap"), 128);
    for i in 0..100u64 {
        let k = format!("key-{i}");
        assert_eq!(
            m.insert(&heap, k.as_bytes(), &[1; 3]).expect("replace"),
            Some(vec![i as u8; 30])
        );
    }
    for i in 0..50u64 {
        let k = format!("key-{i}");
        assert_eq!(
            m.remove(&heap, k.as_bytes()).expect("remove"),
            Some(vec![1; 3])
        );
    }
    assert_eq!(m.len(&heap).expect("len"), 50);
    assert_eq!(m.get(&heap, b"key-70").expect("get"), Some(vec![1; 3]));
    assert_eq!(m.get(&heap, b"key-7").expect("get"), None);
    assert_eq!(heap.live_blocks().expect("live"), all_blocks(&heap, &m));
    m.clear(&heap).expect("clear");
    assert!(m.is_empty(&heap).expect("empty"));
    assert_eq!(m.capacity(&heap).expect("cap"), 8);
    assert_eq!(heap.live_blocks().expect("live"), all_blocks(&heap, &m));
    m.reserve(&heap, 1000).expect("reserve");
    assert_eq!(m.capacity(&heap).expect("cap"), 2048);
    heap.remove_root("b", m).expect("remove root");
    assert_eq!(heap.live_blocks().expect("live"), Vec::<u64>::new());
}

#[test]
fn opening_as_another_type_names_both() {
    let heap = heap(LogMode::Lazy);
    drop(heap.root::<PHashMap<u64, u64>>("m").expect("map"));
    let e = heap
        .root::<PHashMap<u64, PString>>("m")
        .expect_err("another value type");
    match e {
        Error::TypeMismatch { expected, found } => {
            assert!(
                expected.contains("PHashMap<u64 (8 B), PString (16 B)>"),
                "{expected}"
            );
            assert!(found.contains("PHashMap<u64 (8 B), u64 (8 B)>"), "{found}");
        }
        e => panic!("{e}"),
    }
    let e = heap.root::<crate::PBox<u64>>("m").expect_err("a box");
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e}");
}

#[test]
fn a_handle_of_another_heap_is_refused() {
    let (a, b) = (heap(LogMode::Lazy), heap(LogMode::Lazy));
    let mut m: PHashMap<u64, u64> = a.root("m").expect("map");
    let _other: PHashMap<u64, u64> = b.root("m").expect("map");
    assert!(matches!(m.insert(&b, &1, &1), Err(Error::WrongHeap { .. })));
    assert!(matches!(m.get(&b, &1), Err(Error::WrongHeap { .. })));
    let items: Vec<_> = m.iter(&b).collect();
    assert!(matches!(items[..], [Err(Error::WrongHeap { .. })]));
    assert_eq!(m.len(&a).expect("len"), 0);
}

/// Writes `v` at `off` of the map's header (a damaged pool).
fn damage(heap: &PHeap, at: u64, off: u64, v: u64) {
    heap.run(Access::Exclusive, Size::Small, |tx| {
        write_u64(tx, at + off, v)
    })
    .expect("damage");
}

fn is_corrupt<T, E: std::borrow::Borrow<Error>>(r: Result<T, E>) -> bool {
    matches!(
        r.map_err(|e| matches!(e.borrow(), Error::Corrupt { .. })),
        Err(true)
    )
}

#[test]
fn a_damaged_header_gives_typed_errors() {
    use crate::roots::sealed::Structure;
    let cases: [(u64, u64); 5] = [
        (table::CAPACITY, 12),   // not a power of two
        (table::CAPACITY, 4),    // below the minimum
        (table::LEN, 9),         // more entries than slots
        (table::TABLE, 3),       // misaligned table
        (table::TABLE, 1 << 50), // outside the pool
    ];
    for (off, v) in cases {
        let heap = heap(LogMode::Undo);
        let mut m: PHashMap<u64, u64> = heap.root("m").expect("map");
        m.insert(&heap, &1, &1).expect("insert");
        damage(&heap, m.offset(), off, v);
        let r = m.get(&heap, &1);
        assert!(is_corrupt(r.as_ref().map(|_| ())), "{off} = {v}: {r:?}");
        assert!(is_corrupt(m.get(&heap, &2)), "{off} = {v}");
        assert!(is_corrupt(m.insert(&heap, &2, &2)), "{off} = {v}");
        assert!(is_corrupt(m.remove(&heap, &1)), "{off} = {v}");
        // The header is checked when the iteration begins, the table as it goes.
        let walk = m.iter(&heap).collect::<crate::Result<Vec<_>>>();
        assert!(is_corrupt(walk), "{off} = {v}");
        assert!(
            is_corrupt(crate::Container::blocks(&m, &heap)),
            "{off} = {v}"
        );
    }
}

#[test]
fn a_full_table_without_an_empty_slot_ends_every_probe() {
    use crate::roots::sealed::Structure;
    let heap = heap(LogMode::Undo);
    let mut m: PHashMap<u64, u64> = heap.root("m").expect("map");
    m.insert(&heap, &1, &1).expect("insert");
    // Mark every control word occupied (with a hash no key has).
    let h = table::header::<u64, u64>(heap.pool(), m.offset()).expect("header");
    let stride = table::stride::<u64, u64>();
    for i in 0..h.capacity {
        let ctrl = (1u64 << 63) | 0x5555_0000 | i;
        let slot = h.table + i * stride;
        let occupied = crate::element::read_u64(heap.pool(), slot).expect("read") != 0;
        if !occupied {
            damage(&heap, slot, 0, ctrl);
        }
    }
    assert!(is_corrupt(m.get(&heap, &12345)));
    assert!(is_corrupt(m.insert(&heap, &12345, &0)));
    assert!(is_corrupt(m.remove(&heap, &1)));
    // The count says 1: a walk finds more and says so.
    assert!(is_corrupt(m.check(&heap)));
    let items: Vec<_> = m.iter(&heap).collect();
    assert!(items.len() <= 2 && items.last().is_some_and(|r| r.is_err()));
}

#[test]
fn a_clear_of_many_byte_strings_drains_in_small_transactions() {
    // 200 entries own 400 blocks: far more than one undo transaction may free.
    let heap = heap(LogMode::Undo);
    let mut m: PHashMap<PBytes, PBytes> = heap.root("b").expect("map");
    for i in 0..200u64 {
        m.insert(&heap, &i.to_le_bytes(), &[7; 20]).expect("insert");
    }
    m.clear(&heap).expect("clear");
    assert_eq!(m.len(&heap).expect("len"), 0);
    assert_eq!(m.iter(&heap).count(), 0);
    assert_eq!(heap.live_blocks().expect("live"), all_blocks(&heap, &m));
    assert_eq!(
        heap.live_blocks().expect("live").len(),
        2,
        "header and table"
    );
}

#[test]
fn a_cleared_table_left_undrained_is_counted_and_drained_on_opening() {
    use crate::roots::sealed::Structure;
    let heap = heap(LogMode::Lazy);
    let mut m: PHashMap<PString, PString> = heap.root("s").expect("map");
    for i in 0..30u64 {
        m.insert(&heap, &format!("k{i}"), "value").expect("insert");
    }
    let at = m.offset();
    // The clear's first transaction only, as a crash after it leaves it.
    heap.run(Access::Exclusive, Size::Small, |tx| {
        table::clear::<PString, PString>(tx, at)
    })
    .expect("swap");
    assert!(table::retired::<PString, PString>(heap.pool(), at)
        .expect("retired")
        .is_some());
    assert_eq!(m.len(&heap).expect("len"), 0);
    // The retired table and its 60 strings are still the map's: no leak.
    let blocks = all_blocks(&heap, &m);
    assert_eq!(blocks.len(), 2 + 1 + 60);
    assert_eq!(heap.live_blocks().expect("live"), blocks);
    drop(m);
    let m: PHashMap<PString, PString> = heap.root("s").expect("reopened");
    assert!(table::retired::<PString, PString>(heap.pool(), at)
        .expect("retired")
        .is_none());
    assert_eq!(heap.live_blocks().expect("live"), all_blocks(&heap, &m));
    assert_eq!(heap.live_blocks().expect("live").len(), 2);
}

#[test]
fn a_damaged_retired_table_gives_typed_errors() {
    use crate::roots::sealed::Structure;
    let heap = heap(LogMode::Undo);
    let m: PHashMap<PBytes, PBytes> = heap.root("b").expect("map");
    let at = m.offset();
    damage(&heap, at, table::RETIRED, 3);
    damage(&heap, at, table::RETIRED + 8, 16);
    assert!(is_corrupt(crate::Container::blocks(&m, &heap)));
    drop(m);
    assert!(is_corrupt(heap.root::<PHashMap<PBytes, PBytes>>("b")));
}

#[test]
fn reserve_and_growth_keep_every_entry() {
    let heap = heap(LogMode::Lazy);
    let mut m: PHashMap<u64, [u8; 24]> = heap.root("m").expect("map");
    for i in 0..100u64 {
        m.insert(&heap, &i, &[i as u8; 24]).expect("insert");
    }
    // Room for 10 more: a table of 128 holds 111 entries, so nothing changes.
    m.reserve(&heap, 10).expect("reserve");
    assert_eq!(m.capacity(&heap).expect("cap"), 128);
    m.reserve(&heap, 100).expect("reserve");
    assert_eq!(m.capacity(&heap).expect("cap"), 256);
    assert_eq!(m.check(&heap).expect("check"), 100);
    for i in 0..100u64 {
        assert_eq!(m.get(&heap, &i).expect("get"), Some([i as u8; 24]));
    }
}

#[test]
fn a_map_in_a_mutex_takes_inserts_from_two_threads() {
    let heap = heap(LogMode::Lazy);
    let m: crate::PMutex<PHashMap<u64, u64>> = heap.root("shared").expect("mutex");
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (heap, m) = (&heap, &m);
            s.spawn(move || {
                for i in 0..200u64 {
                    let k = t * 1000 + i;
                    m.lock().insert(heap, &k, &(k * 2)).expect("insert");
                }
            });
        }
    });
    let g = m.lock();
    assert_eq!(g.len(&heap).expect("len"), 400);
    assert_eq!(g.check(&heap).expect("check"), 400);
    assert_eq!(g.get(&heap, &1199).expect("get"), Some(2398));
    drop(g);
    use crate::Container;
    assert_eq!(
        heap.live_blocks().expect("live"),
        m.blocks(&heap).expect("blocks")
    );
}

/// A rough timing of gets against std's map (`cargo test --release -p
/// pmem-collections --lib -- --ignored get_timing --nocapture`); the benchmark
/// proper is `collections_bench`.
#[test]
#[ignore]
fn get_timing() {
    let n = 1_000_000u64;
    let pool = Pool::anonymous(&PHeap::pool_options("hashmap-timing", 256 << 20)).expect("pool");
    let heap = PHeap::create(pool).expect("heap");
    let mut m: PHashMap<u64, u64> = heap.root("m").expect("map");
    let mut std_map = HashMap::new();
    let mut seed = 5u64;
    let keys: Vec<u64> = (0..n).map(|_| splitmix64(&mut seed)).collect();
    let t = std::time::Instant::now();
    for &k in &keys {
        m.insert(&heap, &k, &k).expect("insert");
    }
    let ins = t.elapsed().as_nanos() as f64 / n as f64;
    for &k in &keys {
        std_map.insert(k, k);
    }
    let t = std::time::Instant::now();
    let mut sum = 0u64;
    for &k in keys.iter().rev() {
        sum = sum.wrapping_add(m.get(&heap, &k).expect("get").unwrap_or(0));
    }
    let get = t.elapsed().as_nanos() as f64 / n as f64;
    let t = std::time::Instant::now();
    for &k in keys.iter().rev() {
        sum = sum.wrapping_add(std_map.get(&k).copied().unwrap_or(0));
    }
    let std_get = t.elapsed().as_nanos() as f64 / n as f64;
    println!(
        "insert {ins:.0} ns (lazy, anonymous pool); get {get:.0} ns, std {std_get:.0} ns ({sum})"
    );
}

/// A removal logs the span it shifts as at most two ranges and the count, however
/// many separate runs of slots move: with three object records a transaction, a
/// 7/8-full table empties (logging each run apart took more records than a lane
/// holds once clusters grew; `tx_bench` met it at 1.5 M entries).
#[test]
fn a_removal_in_long_clusters_fits_three_records() {
    let pool = Pool::anonymous(&PHeap::pool_options("log-bounds", 8 << 20)).expect("pool");
    let heap = PHeap::create_with(
        pool,
        HeapOptions {
            geometry: pmem_core::tx::TxGeometry {
                object_records: 3,
                ..pmem_core::tx::TxGeometry::default()
            },
            mode: LogMode::Undo,
            ..HeapOptions::default()
        },
    )
    .expect("heap");
    let mut m: PHashMap<u64, u64> = heap.root("m").expect("root");
    m.reserve(&heap, 3500).expect("reserve");
    let cap = m.capacity(&heap).expect("capacity");
    let n = cap / 8 * 7 - 1;
    let mut x = 7u64;
    let mut keys = Vec::new();
    for _ in 0..n {
        let k = pmem_core::splitmix64(&mut x);
        m.insert(&heap, &k, &k).expect("insert");
        keys.push(k);
    }
    assert_eq!(m.capacity(&heap).expect("capacity"), cap, "no growth");
    for k in &keys {
        assert_eq!(
            m.remove(&heap, k).expect("remove within 3 records"),
            Some(*k)
        );
    }
    assert_eq!(m.len(&heap).expect("len"), 0);
}
