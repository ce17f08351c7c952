//! The heap's rules, without crashes: named roots survive reopening, a structure
//! has one handle at a time, a handle works only with its own heap, a structure
//! opened as another type is refused with both types named, a pool that is not a
//! heap is refused, and a transaction is all or nothing.

use pmem_collections::{Error, PBox, PHeap};
use pmem_core::{Pool, PoolOptions};

fn anon(name: &str) -> PHeap {
    let pool = Pool::anonymous(&PHeap::pool_options(name, 4 << 20)).expect("pool");
    PHeap::create(pool).expect("heap")
}

#[test]
fn a_root_box_survives_reopening() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("boxes.pool");
    {
        let pool = Pool::create(&path, &PHeap::pool_options("boxes", 4 << 20)).expect("pool");
        let heap = PHeap::create(pool).expect("heap");
        let mut b: PBox<u64> = heap.root("counter").expect("root");
        assert_eq!(b.get(&heap).expect("get"), 0, "a new box holds zeroes");
        b.set(&heap, &41).expect("set");
        b.set(&heap, &42).expect("set");
    }
    let heap = PHeap::open(Pool::open(&path, "boxes").expect("open")).expect("heap");
    let b: PBox<u64> = heap.root("counter").expect("root");
    assert_eq!(b.get(&heap).expect("get"), 42);
    assert_eq!(
        heap.root_names().expect("names"),
        vec!["counter".to_string()]
    );
    assert_eq!(heap.live_blocks().expect("live"), b.blocks_of(&heap));
}

trait BlocksOf {
    fn blocks_of(&self, heap: &PHeap) -> Vec<u64>;
}
impl<C: pmem_collections::Container> BlocksOf for C {
    fn blocks_of(&self, heap: &PHeap) -> Vec<u64> {
        self.blocks(heap).expect("blocks")
    }
}

#[test]
fn one_handle_per_structure() {
    let heap = anon("one-handle");
    let b: PBox<u64> = heap.root("b").expect("root");
    let again = heap.root::<PBox<u64>>("b");
    assert!(matches!(again, Err(Error::AlreadyOpen { .. })), "{again:?}");
    drop(b);
    heap.root::<PBox<u64>>("b")
        .expect("free again once the handle is dropped");
}

#[test]
fn a_handle_of_another_heap_is_refused_before_any_read() {
    let a = anon("heap-a");
    let b = anon("heap-b");
    let mut in_a: PBox<u64> = a.root("x").expect("root");
    in_a.set(&a, &7).expect("set");
    let _in_b: PBox<u64> = b.root("x").expect("root");
    assert!(matches!(in_a.get(&b), Err(Error::WrongHeap { .. })));
    assert!(matches!(in_a.set(&b, &1), Err(Error::WrongHeap { .. })));
    assert_eq!(in_a.get(&a).expect("get"), 7);
}

#[test]
fn a_structure_opened_as_another_type_names_both() {
    let heap = anon("mismatch");
    drop(heap.root::<PBox<u64>>("x").expect("root"));
    let e = heap.root::<PBox<[u8; 8]>>("x").expect_err("another type");
    let msg = e.to_string();
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e:?}");
    assert!(msg.contains("PBox<u64 (8 B)>"), "{msg}");
    assert!(msg.contains("PBox<[u8; 8] (8 B)>"), "{msg}");
}

#[test]
fn a_pool_that_is_not_a_heap_is_refused() {
    let pool = Pool::anonymous(&PoolOptions::new("plain", 1 << 20)).expect("pool");
    assert!(matches!(PHeap::create(pool), Err(Error::NotAHeap(_))));
}

#[test]
fn bad_root_names_are_refused() {
    let heap = anon("names");
    for name in ["", "a\0b", &"x".repeat(49)] {
        assert!(matches!(
            heap.root::<PBox<u64>>(name),
            Err(Error::InvalidRootName { .. })
        ));
    }
}

#[test]
fn a_transaction_is_all_or_nothing() {
    let heap = anon("tx");
    let mut b: PBox<u64> = heap.root("b").expect("root");
    let before = heap.live_blocks().expect("live");
    let r: Result<(), Error> = heap.transaction(|tx| {
        tx.set(&mut b, &5)?;
        let nb = tx.alloc_box(&9u64)?;
        tx.set_root("nb", &nb)?;
        Err(Error::TooLarge("changed my mind".into()))
    });
    assert!(matches!(r, Err(Error::TooLarge(_))), "{r:?}");
    assert_eq!(b.get(&heap).expect("get"), 0);
    assert_eq!(
        heap.live_blocks().expect("live"),
        before,
        "the new box was freed"
    );
    assert_eq!(heap.root_names().expect("names"), vec!["b".to_string()]);

    heap.transaction(|tx| {
        tx.set(&mut b, &5)?;
        let nb = tx.alloc_box(&9u64)?;
        tx.set_root("nb", &nb)?;
        assert_eq!(tx.get(&nb)?, 9);
        Ok(())
    })
    .expect("commit");
    let nb: PBox<u64> = heap.root("nb").expect("root");
    assert_eq!(nb.get(&heap).expect("get"), 9);
    assert_eq!(b.get(&heap).expect("get"), 5);
    heap.remove_root("nb", nb).expect("remove");
    assert_eq!(heap.live_blocks().expect("live"), b.blocks_of(&heap));
    assert_eq!(heap.root_names().expect("names"), vec!["b".to_string()]);
}

#[test]
fn a_taken_root_name_is_refused() {
    let heap = anon("taken");
    let _b: PBox<u64> = heap.root("b").expect("root");
    let r = heap.transaction(|tx| {
        let nb = tx.alloc_box(&1u64)?;
        tx.set_root("b", &nb)
    });
    assert!(matches!(r, Err(Error::RootTaken { .. })), "{r:?}");
}

#[test]
fn a_box_left_without_a_root_rolls_the_transaction_back() {
    let heap = anon("unrooted");
    let before = heap.live_blocks().expect("live");
    let r = heap.transaction(|tx| {
        let b = tx.alloc_box(&1u64)?;
        Ok(b)
    });
    assert!(matches!(r, Err(Error::Unrooted { .. })), "{r:?}");
    assert_eq!(heap.live_blocks().expect("live"), before, "nothing leaked");
    // Freed in the same transaction: fine.
    heap.transaction(|tx| {
        let b = tx.alloc_box(&1u64)?;
        tx.free_box(b)
    })
    .expect("alloc and free");
    assert_eq!(heap.live_blocks().expect("live"), before);
}

#[test]
fn a_named_box_is_not_freed_behind_its_name() {
    let heap = anon("rooted");
    let b: PBox<u64> = heap.root("b").expect("root");
    let r = heap.transaction(|tx| tx.free_box(b));
    assert!(matches!(r, Err(Error::Rooted { .. })), "{r:?}");
    let b: PBox<u64> = heap.root("b").expect("still there");
    heap.remove_root("b", b).expect("remove");
    assert!(heap.live_blocks().expect("live").is_empty());
}
