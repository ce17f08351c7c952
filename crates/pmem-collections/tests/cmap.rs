//! `PConcurrentHashMap` shared by threads: concurrent inserts, replacements and
//! removals end in the state the per-thread models add up to, the tables stay
//! sound, nothing leaks, and the map survives reopening.

use std::collections::BTreeMap;

use pmem_collections::{Container, Error, PConcurrentHashMap, PHeap, PString};
use pmem_core::Pool;

#[test]
fn two_threads_on_disjoint_keys_add_up() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("cmap.pool");
    let pool = Pool::create(&path, &PHeap::pool_options("cmap", 32 << 20)).expect("pool");
    let heap = PHeap::create(pool).expect("heap");
    let map: PConcurrentHashMap<u64, u64> = heap.root("m").expect("root");
    let models: Vec<BTreeMap<u64, u64>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2u64)
            .map(|t| {
                let (heap, map) = (&heap, &map);
                s.spawn(move || {
                    let mut model = BTreeMap::new();
                    let mut x = t + 1;
                    for i in 0..1000u64 {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let k = (x >> 40) % 300 * 2 + t; // thread t owns keys ≡ t (mod 2)
                        if i % 4 == 3 {
                            assert_eq!(map.remove(heap, &k).expect("remove"), model.remove(&k));
                        } else {
                            assert_eq!(
                                map.insert(heap, &k, &i).expect("insert"),
                                model.insert(k, i)
                            );
                        }
                    }
                    model
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let mut want: BTreeMap<u64, u64> = BTreeMap::new();
    for m in models {
        want.extend(m);
    }
    let got: BTreeMap<u64, u64> = map.entries(&heap).expect("entries").into_iter().collect();
    assert_eq!(got, want);
    assert_eq!(map.len(&heap).expect("len"), want.len() as u64);
    assert_eq!(map.check(&heap).expect("check"), want.len() as u64);
    assert_eq!(
        heap.live_blocks().expect("live"),
        map.blocks(&heap).expect("blocks")
    );
    drop(map);
    drop(heap);
    let heap = PHeap::open(Pool::open(&path, "cmap").expect("open")).expect("heap");
    let map: PConcurrentHashMap<u64, u64> = heap.root("m").expect("root");
    let got: BTreeMap<u64, u64> = map.entries(&heap).expect("entries").into_iter().collect();
    assert_eq!(got, want);
    heap.remove_root("m", map).expect("remove the map");
    assert!(heap.live_blocks().expect("live").is_empty(), "nothing left");
}

#[test]
fn byte_strings_and_type_checks() {
    let pool = Pool::anonymous(&PHeap::pool_options("cmap-str", 16 << 20)).expect("pool");
    let heap = PHeap::create(pool).expect("heap");
    let book: PConcurrentHashMap<PString, PString> = heap.root("book").expect("root");
    std::thread::scope(|s| {
        for t in 0..2 {
            let (heap, book) = (&heap, &book);
            s.spawn(move || {
                for i in 0..200 {
                    book.insert(heap, &format!("name-{t}-{i}"), &format!("+1 555 {i:04}"))
                        .expect("insert");
                }
            });
        }
    });
    assert_eq!(book.len(&heap).expect("len"), 400);
    assert_eq!(
        book.get(&heap, "name-1-42").expect("get").as_deref(),
        Some("+1 555 0042")
    );
    assert_eq!(
        heap.live_blocks().expect("live"),
        book.blocks(&heap).expect("blocks")
    );
    drop(book);
    let e = heap
        .root::<PConcurrentHashMap<PString, u64>>("book")
        .expect_err("another value type");
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("PConcurrentHashMap<PString (16 B), PString (16 B)>"),
        "{e}"
    );
}
