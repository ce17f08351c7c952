//! `PVec`, `PBytes` and `PString` against `std`: every operation's result, reopening
//! a pool, the typed errors (out of bounds, another heap, another type, a damaged
//! header, a cut inside a character) and the exact block accounting.

use pmem_collections::{Container, Error, PBytes, PHeap, PMutex, PString, PVec};
use pmem_core::Pool;

const LAYOUT: &str = "vec-api";

fn file_heap(dir: &tempfile::TempDir) -> PHeap {
    let pool = Pool::create(
        dir.path().join("p.pool"),
        &PHeap::pool_options(LAYOUT, 4 << 20),
    )
    .expect("pool");
    PHeap::create(pool).expect("heap")
}

fn reopen(dir: &tempfile::TempDir) -> PHeap {
    PHeap::open(Pool::open(dir.path().join("p.pool"), LAYOUT).expect("pool")).expect("heap")
}

fn anon_heap() -> PHeap {
    PHeap::create(Pool::anonymous(&PHeap::pool_options(LAYOUT, 4 << 20)).expect("pool"))
        .expect("heap")
}

/// The allocator holds exactly `c`'s blocks.
fn no_leak(heap: &PHeap, c: &impl Container) {
    assert_eq!(
        heap.live_blocks().expect("live"),
        c.blocks(heap).expect("blocks")
    );
}

#[test]
fn a_vec_of_u64_follows_std() {
    let heap = anon_heap();
    let mut v: PVec<u64> = heap.root("v").expect("root");
    let mut m: Vec<u64> = Vec::new();
    assert!(v.is_empty(&heap).expect("empty"));
    for i in 0..100u64 {
        v.push(&heap, &(i * 3)).expect("push");
        m.push(i * 3);
    }
    assert!(v.capacity(&heap).expect("cap") >= 100);
    assert_eq!(v.set(&heap, 7, &700).expect("set"), m[7]);
    m[7] = 700;
    v.insert(&heap, 0, &1).expect("insert");
    m.insert(0, 1);
    v.insert(&heap, 50, &2).expect("insert");
    m.insert(50, 2);
    v.insert(&heap, m.len() as u64, &3)
        .expect("insert at the end");
    m.insert(m.len(), 3);
    assert_eq!(v.remove(&heap, 10).expect("remove"), m.remove(10));
    assert_eq!(v.pop(&heap).expect("pop"), m.pop());
    v.extend(&heap, &[9, 8, 7]).expect("extend");
    m.extend([9, 8, 7]);
    v.truncate(&heap, 60).expect("truncate");
    m.truncate(60);
    assert_eq!(v.to_vec(&heap).expect("all"), m);
    assert_eq!(v.get(&heap, 59).expect("get"), Some(m[59]));
    assert_eq!(v.get(&heap, 60).expect("get"), None);
    assert_eq!(v.len(&heap).expect("len"), 60);
    no_leak(&heap, &v);
    let cap = v.capacity(&heap).expect("cap");
    v.clear(&heap).expect("clear");
    assert_eq!(
        v.capacity(&heap).expect("cap"),
        cap,
        "clear keeps the capacity"
    );
    assert_eq!(v.pop(&heap).expect("pop"), None);
    v.reserve(&heap, 1000).expect("reserve");
    assert!(v.capacity(&heap).expect("cap") >= 1000);
    no_leak(&heap, &v);
}

#[test]
fn shifts_beyond_four_kib_rebuild_and_stay_exact() {
    // 4,000 elements: inserting or removing near the front shifts ~32 KiB, which
    // goes to a fresh array rather than the log.
    let heap = anon_heap();
    let mut v: PVec<u64> = heap.root("v").expect("root");
    let mut m: Vec<u64> = (0..4000).collect();
    v.extend(&heap, &m).expect("extend");
    v.insert(&heap, 1, &77).expect("insert");
    m.insert(1, 77);
    assert_eq!(v.remove(&heap, 3).expect("remove"), m.remove(3));
    v.insert(&heap, 3990, &5)
        .expect("insert near the end: in place");
    m.insert(3990, 5);
    assert_eq!(v.to_vec(&heap).expect("all"), m);
    no_leak(&heap, &v);
}

#[test]
fn a_vec_of_strings_owns_and_frees_its_strings() {
    let heap = anon_heap();
    let mut v: PVec<PString> = heap.root("v").expect("root");
    let mut m: Vec<String> = Vec::new();
    for i in 0..20 {
        let s = format!("name-{i}-{}", "x".repeat(i));
        v.push(&heap, &s).expect("push");
        m.push(s);
    }
    assert_eq!(v.set(&heap, 3, "three").expect("set"), m[3]);
    m[3] = "three".into();
    assert_eq!(v.remove(&heap, 0).expect("remove"), m.remove(0));
    v.insert(&heap, 5, "").expect("insert an empty string");
    m.insert(5, String::new());
    v.truncate(&heap, 12).expect("truncate");
    m.truncate(12);
    assert_eq!(v.to_vec(&heap).expect("all"), m);
    // Header, array and one block per non-empty string.
    assert_eq!(v.blocks(&heap).expect("blocks").len(), 2 + 11);
    no_leak(&heap, &v);
    heap.remove_root("v", v).expect("remove root");
    assert_eq!(heap.live_blocks().expect("live"), Vec::<u64>::new());
}

#[test]
fn bytes_and_strings_follow_std() {
    let heap = anon_heap();
    let mut b: PBytes = heap.root("b").expect("root");
    let mut mb: Vec<u8> = Vec::new();
    for i in 0..300u32 {
        b.push(&heap, i as u8).expect("push");
        mb.push(i as u8);
    }
    b.extend_from_slice(&heap, &[1; 5000])
        .expect("a long append");
    mb.extend_from_slice(&[1; 5000]);
    b.truncate(&heap, 4000).expect("truncate");
    mb.truncate(4000);
    assert_eq!(b.to_vec(&heap).expect("read"), mb);
    b.set(&heap, b"short").expect("set");
    assert_eq!(b.to_vec(&heap).expect("read"), b"short");
    b.set(&heap, &[7; 9000])
        .expect("set, longer than the capacity");
    assert_eq!(b.len(&heap).expect("len"), 9000);
    no_leak(&heap, &b);
    b.clear(&heap).expect("clear");
    assert!(b.is_empty(&heap).expect("empty"));
    b.reserve(&heap, 20_000).expect("reserve");
    assert!(b.capacity(&heap).expect("cap") >= 20_000);
    drop(b);

    let mut s: PString = heap.root("s").expect("root");
    s.push_str(&heap, "héllo").expect("push_str");
    s.push(&heap, '→').expect("push");
    assert_eq!(s.to_string(&heap).expect("read"), "héllo→");
    assert!(matches!(
        s.truncate(&heap, 2),
        Err(Error::NotCharBoundary { index: 2 })
    ));
    assert!(matches!(
        s.truncate(&heap, 7),
        Err(Error::NotCharBoundary { index: 7 })
    ));
    s.truncate(&heap, 6).expect("at a boundary");
    assert_eq!(s.to_string(&heap).expect("read"), "héllo");
    s.set(&heap, "replaced").expect("set");
    assert_eq!(s.to_string(&heap).expect("read"), "replaced");
    assert_eq!(s.len(&heap).expect("len"), 8);
}

#[test]
fn contents_survive_reopening() {
    let dir = tempfile::tempdir().expect("dir");
    {
        let heap = file_heap(&dir);
        let mut v: PVec<[u8; 64]> = heap.root("v").expect("root");
        for i in 0..40u8 {
            v.push(&heap, &[i; 64]).expect("push");
        }
        let mut s: PString = heap.root("s").expect("root");
        s.push_str(&heap, "kept").expect("push");
        let mut vs: PVec<PString> = heap.root("vs").expect("root");
        vs.extend(&heap, ["a", "bb", "ccc"]).expect("extend");
    }
    let heap = reopen(&dir);
    let v: PVec<[u8; 64]> = heap.root("v").expect("root");
    let all = v.to_vec(&heap).expect("all");
    assert_eq!(all.len(), 40);
    assert!(all.iter().enumerate().all(|(i, e)| *e == [i as u8; 64]));
    let s: PString = heap.root("s").expect("root");
    assert_eq!(s.to_string(&heap).expect("read"), "kept");
    let vs: PVec<PString> = heap.root("vs").expect("root");
    assert_eq!(vs.to_vec(&heap).expect("all"), ["a", "bb", "ccc"]);
    let mut all = v.blocks(&heap).expect("blocks");
    all.extend(s.blocks(&heap).expect("blocks"));
    all.extend(vs.blocks(&heap).expect("blocks"));
    all.sort_unstable();
    assert_eq!(heap.live_blocks().expect("live"), all);
}

#[test]
fn out_of_bounds_is_a_typed_error_and_changes_nothing() {
    let heap = anon_heap();
    let mut v: PVec<u64> = heap.root("v").expect("root");
    v.extend(&heap, &[1, 2, 3]).expect("extend");
    let oob = |r: pmem_collections::Result<()>| {
        assert!(matches!(r, Err(Error::OutOfBounds { len: 3, .. })), "{r:?}")
    };
    oob(v.set(&heap, 3, &9).map(|_| ()));
    oob(v.insert(&heap, 4, &9));
    oob(v.remove(&heap, 3).map(|_| ()));
    oob(v.remove(&heap, u64::MAX).map(|_| ()));
    assert!(matches!(
        v.reserve(&heap, u64::MAX),
        Err(Error::TooLarge(_))
    ));
    assert_eq!(v.to_vec(&heap).expect("all"), [1, 2, 3]);
    no_leak(&heap, &v);
}

#[test]
fn a_handle_used_with_another_heap_is_refused() {
    let (a, b) = (anon_heap(), anon_heap());
    let mut v: PVec<u64> = a.root("v").expect("root");
    let _w: PVec<u64> = b.root("v").expect("root");
    assert!(matches!(
        v.push(&b, &1),
        Err(Error::WrongHeap { what: "PVec", .. })
    ));
    assert!(matches!(v.len(&b), Err(Error::WrongHeap { .. })));
    let mut s: PString = a.root("s").expect("root");
    assert!(matches!(
        s.push_str(&b, "x"),
        Err(Error::WrongHeap {
            what: "PString",
            ..
        })
    ));
    assert!(matches!(s.to_string(&b), Err(Error::WrongHeap { .. })));
    let mut by: PBytes = a.root("b").expect("root");
    assert!(matches!(by.set(&b, b"x"), Err(Error::WrongHeap { .. })));
    // `b`'s own "v" is open through `_w`: a second handle is refused.
    assert!(matches!(
        b.root::<PVec<u64>>("v"),
        Err(Error::AlreadyOpen { .. })
    ));
}

#[test]
fn opening_as_another_type_names_both() {
    let heap = anon_heap();
    drop(heap.root::<PVec<u64>>("v").expect("root"));
    let msg = |e: Error| match e {
        Error::TypeMismatch { expected, found } => (expected, found),
        e => panic!("not a type mismatch: {e}"),
    };
    let (expected, found) = msg(heap.root::<PVec<u32>>("v").expect_err("u32"));
    assert_eq!(expected, "PVec<u32 (4 B)> layout v1");
    assert_eq!(found, "PVec<u64 (8 B)> layout v1");
    let (expected, _) = msg(heap.root::<PVec<PString>>("v").expect_err("strings"));
    assert_eq!(expected, "PVec<PString (16 B)> layout v1");
    let (expected, _) = msg(heap.root::<PString>("v").expect_err("a string"));
    assert_eq!(expected, "PString<> layout v1");
    drop(heap.root::<PString>("s").expect("root"));
    let (expected, found) = msg(heap.root::<PBytes>("s").expect_err("bytes"));
    assert_eq!(
        (expected.as_str(), found.as_str()),
        ("PBytes<> layout v1", "PString<> layout v1")
    );
    assert!(heap.root::<PVec<u64>>("v").is_ok());
}

#[test]
fn zero_sized_elements_are_refused() {
    let heap = anon_heap();
    assert!(matches!(
        heap.root::<PVec<()>>("v"),
        Err(Error::TooLarge(_))
    ));
    assert!(heap.root_names().expect("names").is_empty());
}

/// Writes `words` over the header words (length, capacity, array) of the only
/// structure of the pool, then reopens (the heap was checkpointed, so recovery
/// replays nothing over the damage).
fn damage(dir: &tempfile::TempDir, at: u64, words: [u64; 3]) -> PHeap {
    let mut pool = Pool::open(dir.path().join("p.pool"), LAYOUT).expect("pool");
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    pool.write_bytes(at + 64, &bytes).expect("write");
    drop(pool);
    reopen(dir)
}

#[test]
fn a_damaged_header_is_a_typed_error() {
    let dir = tempfile::tempdir().expect("dir");
    let at = {
        let heap = file_heap(&dir);
        let v: PVec<u64> = heap.root("v").expect("root");
        // Nothing left for recovery to replay over the damage.
        heap.checkpoint().expect("checkpoint");
        v.blocks(&heap).expect("blocks")[0]
    };
    let pool_len = 4u64 << 20;
    for words in [
        [5, 0, 0],               // len > capacity
        [0, 4, 0],               // a capacity without an array
        [0, 0, 4096],            // an array without a capacity
        [0, u64::MAX / 4, 4096], // a capacity overflowing
        [0, 4, u64::MAX - 8],    // an array wrapping around
        [0, 4, 4100],            // a misaligned array
    ] {
        let heap = damage(&dir, at, words);
        let e = heap.root::<PVec<u64>>("v").expect_err("damaged");
        assert!(
            matches!(e, Error::Corrupt { what: "PVec", .. }),
            "{words:?}: {e}"
        );
    }
    // An array past the pool's end: the header is plausible, the read fails.
    let heap = damage(&dir, at, [2, 2, pool_len + 4096]);
    let v: PVec<u64> = heap.root("v").expect("plausible");
    assert!(
        matches!(v.get(&heap, 1), Err(Error::Pool(_))),
        "{:?}",
        v.get(&heap, 1)
    );
    assert!(v.iter(&heap).any(|r| r.is_err()));
    assert!(v.blocks(&heap).is_err());
    drop(v);
    drop(heap);

    let dir = tempfile::tempdir().expect("dir");
    let at = {
        let heap = file_heap(&dir);
        let mut s: PString = heap.root("s").expect("root");
        s.push_str(&heap, "ok").expect("push");
        heap.checkpoint().expect("checkpoint");
        s.blocks(&heap).expect("blocks")
    };
    let (header, data) = (at[0].min(at[1]), at[0].max(at[1]));
    let heap = damage(&dir, header, [1u64 << 39, 1 << 39, data]);
    let s: PString = heap.root("s").expect("plausible");
    assert!(matches!(s.to_string(&heap), Err(Error::Pool(_))));
    drop(s);
    drop(heap);
    // Bytes that are not UTF-8.
    let mut pool = Pool::open(dir.path().join("p.pool"), LAYOUT).expect("pool");
    pool.write_bytes(header + 64, &2u64.to_le_bytes())
        .expect("len");
    pool.write_bytes(data, &[0xff, 0xfe]).expect("bytes");
    drop(pool);
    let heap = reopen(&dir);
    let s: PString = heap.root("s").expect("plausible");
    assert!(matches!(s.to_string(&heap), Err(Error::NotUtf8 { offset }) if offset == data));
}

#[test]
fn a_vec_behind_a_mutex_is_shared_by_threads() {
    let heap = anon_heap();
    let m: PMutex<PVec<u64>> = heap.root("m").expect("root");
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (heap, m) = (&heap, &m);
            s.spawn(move || {
                for i in 0..50 {
                    m.lock().push(heap, &(t * 1000 + i)).expect("push");
                }
            });
        }
    });
    let mut all = m.lock().to_vec(&heap).expect("all");
    all.sort_unstable();
    let mut want: Vec<u64> = (0..50).chain(1000..1050).collect();
    want.sort_unstable();
    assert_eq!(all, want);
    no_leak(&heap, &m);
}

#[test]
fn a_change_too_big_for_a_small_log_falls_back_to_a_rebuild() {
    // 1 KiB of object data and a 1 KiB ring: one 2 KiB slot written in place
    // overflows both, so the push rebuilds into a fresh array (not logged).
    let opts = pmem_collections::HeapOptions {
        geometry: pmem_core::tx::TxGeometry {
            lanes: 2,
            word_records: 32,
            object_records: 8,
            object_bytes: 1024,
            alloc_records: 8,
            lazy_ring_bytes: 1024,
        },
        page_size: 64,
        mode: pmem_core::tx::LogMode::Lazy,
    };
    let heap = PHeap::create_with(
        Pool::anonymous(&PHeap::pool_options(LAYOUT, 4 << 20)).expect("pool"),
        opts,
    )
    .expect("heap");
    let mut v: PVec<[u64; 256]> = heap.root("v").expect("root");
    v.reserve(&heap, 4).expect("reserve");
    for i in 0..4u64 {
        v.push(&heap, &[i; 256]).expect("push");
    }
    assert_eq!(v.set(&heap, 1, &[9; 256]).expect("set")[0], 1);
    let mut b: PBytes = heap.root("b").expect("root");
    b.reserve(&heap, 3000).expect("reserve");
    b.extend_from_slice(&heap, &[5; 3000]).expect("append");
    assert_eq!(b.to_vec(&heap).expect("read"), vec![5; 3000]);
    let all = v.to_vec(&heap).expect("all");
    assert_eq!(all.iter().map(|e| e[255]).collect::<Vec<_>>(), [0, 9, 2, 3]);
    let mut live = v.blocks(&heap).expect("blocks");
    live.extend(b.blocks(&heap).expect("blocks"));
    live.sort_unstable();
    assert_eq!(heap.live_blocks().expect("live"), live);
}

/// Flushes and fences per operation on a forced-DAX pool (the counters see every
/// flush and fence): a push with room is one lazy transaction, one fence.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_push_with_room_costs_one_fence() {
    use pmem_core::{Counters, ModeRequest};
    let dir = tempfile::tempdir().expect("dir");
    let opts = PHeap::pool_options(LAYOUT, 8 << 20).mode(ModeRequest::ForceDax);
    let heap =
        PHeap::create(Pool::create(dir.path().join("p.pool"), &opts).expect("pool")).expect("heap");
    let mut v: PVec<u64> = heap.root("v").expect("root");
    const N: u64 = 1000;
    v.reserve(&heap, N).expect("reserve");
    heap.checkpoint().expect("checkpoint");
    let before = Counters::current();
    for i in 0..N {
        v.push(&heap, &i).expect("push");
    }
    let after = Counters::current();
    let fences = (after.fences - before.fences) as f64 / N as f64;
    let lines = (after.lines_flushed - before.lines_flushed) as f64 / N as f64;
    eprintln!("push with room: {fences:.2} fences, {lines:.2} lines flushed per push");
    // One fence each, and the ring's checkpoints (every few hundred pushes).
    assert!(fences <= 1.05, "{fences} fences per push");
    let mut s: PString = heap.root("s").expect("root");
    s.reserve(&heap, N).expect("reserve");
    heap.checkpoint().expect("checkpoint");
    let before = Counters::current();
    for _ in 0..N {
        s.push(&heap, 'x').expect("push");
    }
    let fences = (Counters::current().fences - before.fences) as f64 / N as f64;
    eprintln!("string push with room: {fences:.2} fences per push");
    assert!(fences <= 1.05, "{fences} fences per push");
}

/// Freeing one block per element, a truncate of more strings than an undo
/// transaction can record (32 allocation records in the default geometry) fails
/// with a typed error and changes nothing; in steps it succeeds. Under the heap's
/// lazy mode the ring holds thousands of frees.
#[test]
fn a_truncate_beyond_the_log_is_refused_whole() {
    let heap = anon_heap();
    let names: Vec<String> = (0..40).map(|i| format!("name {i}")).collect();
    let m: PMutex<PVec<PString>> = heap.root("m").expect("root");
    let mut v = m.lock();
    // 20 allocations per transaction: within the lane's 32 records.
    for half in names.chunks(20) {
        v.extend(&heap, half.iter().map(String::as_str))
            .expect("extend");
    }
    let e = v
        .clear(&heap)
        .expect_err("40 frees in one undo transaction");
    assert!(
        matches!(e, Error::Tx(pmem_core::tx::TxError::LogFull { .. })),
        "{e}"
    );
    assert_eq!(v.to_vec(&heap).expect("all"), names);
    v.truncate(&heap, 20).expect("20 frees");
    v.clear(&heap).expect("20 more");
    drop(v);
    no_leak(&heap, &m);

    let mut v: PVec<PString> = heap.root("v").expect("root");
    v.extend(&heap, names.iter().map(String::as_str))
        .expect("extend");
    v.clear(&heap).expect("lazy: one ring entry");
    let mut live = v.blocks(&heap).expect("blocks");
    live.extend(m.blocks(&heap).expect("blocks"));
    live.sort_unstable();
    assert_eq!(heap.live_blocks().expect("live"), live);
}
