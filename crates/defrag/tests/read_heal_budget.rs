//! Reads heal a bounded number of pointer words per transaction: a read-only walk
//! over objects with many pointer fields, all of them to moved objects, fits one
//! transaction's log while a compaction is under way (it once failed with
//! `LogFull` after four such objects, each field one object record), and the
//! words it heals in place are the first objects' whole, the rest left to the
//! defragmenter's healing pass.

use pmem_core::{PPtr, Pool, PoolOptions};
use pmem_defrag::{persistent_type, CompactOptions, DefragHeap, HeapRoot, Protocol, Registry};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[allow(dead_code)]
mod common;
use common::Node;

/// An object with seventeen pointer fields: a chain link and sixteen leaves.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Wide {
    next: PPtr<Wide>,
    k: [PPtr<Node>; 16],
}

persistent_type!(Wide, id = 3, pointers = [next: Wide, k[16]: Node]);

const WIDE: u64 = 40;

#[test]
fn a_long_read_only_walk_of_wide_objects_fits_one_transaction_during_a_compaction() {
    assert_eq!(<Wide as pmem_defrag::PersistentType>::POINTERS.len(), 17);
    let pool =
        Pool::anonymous(&PoolOptions::new("budget", 8 << 20).root::<HeapRoot>()).expect("pool");
    let heap =
        DefragHeap::create(pool, &Registry::new().with::<Node>().with::<Wide>()).expect("heap");
    // Sparse leaf pages: 2,000 leaves, one in sixteen kept.
    let mut kept = Vec::new();
    for v in 0..2000u64 {
        let leaf = heap
            .transaction(|t| {
                let n = t.alloc::<Node>()?;
                t.write(
                    n,
                    &Node {
                        value: v,
                        next: PPtr::null(),
                    },
                )?;
                Ok(n)
            })
            .expect("leaf");
        kept.push((v, leaf));
    }
    let (keep, drop): (Vec<_>, Vec<_>) = kept.into_iter().partition(|(v, _)| v % 16 == 0);
    for (_, leaf) in drop {
        heap.transaction(|t| t.free(leaf)).expect("free");
    }
    // A chain of wide objects under the root, each naming sixteen kept leaves.
    let mut expected = 0u64;
    for w in 0..WIDE {
        let mut k = [PPtr::null(); 16];
        for (i, slot) in k.iter_mut().enumerate() {
            let (v, leaf) = keep[(w as usize * 16 + i) % keep.len()];
            *slot = leaf;
            expected += v;
        }
        heap.transaction(|t| {
            let next = t.root::<Wide>("wide")?;
            let n = t.alloc::<Wide>()?;
            t.write(n, &Wide { next, k })?;
            t.set_root("wide", n)
        })
        .expect("wide");
    }
    let mut c = heap
        .begin_compaction(&CompactOptions::new().protocol(Protocol::Ffccd))
        .expect("begin")
        .expect("the leaf pages are worth compacting");
    while c.step(1024).expect("moves") {}
    // Every leaf has moved: each wide object read has sixteen words to heal.
    let (sum, first, last) = heap
        .transaction(|t| {
            let mut sum = 0;
            let mut p = t.root::<Wide>("wide")?;
            let first = t.resolve(p)?;
            let mut last = first;
            while !p.is_null() {
                last = t.resolve(p)?;
                let w = t.read(p)?;
                for leaf in w.k {
                    sum += t.read(leaf)?.value;
                }
                p = w.next;
            }
            Ok((sum, first, last))
        })
        .expect("a read-only walk during a compaction fits its transaction");
    assert_eq!(sum, expected);
    // The first object's words were healed in place (they name destinations), the
    // last one's not (the budget was spent): its stored words are still sources.
    let pool = heap.tx_heap().pool();
    let stored = |p: PPtr<Wide>| pool.read(p).expect("raw read").k;
    let healed = |p: PPtr<Wide>| {
        heap.transaction(|t| {
            let mut out = Vec::new();
            for leaf in stored(p) {
                out.push(t.resolve(leaf)? == leaf);
            }
            Ok(out)
        })
        .expect("resolve")
    };
    assert!(healed(first).iter().all(|&h| h), "the first object healed");
    assert!(
        healed(last).iter().all(|&h| !h),
        "the last object left as it was"
    );
    let r = c.finish().expect("finish");
    assert!(r.moved > 0);
    heap.verify()
        .expect("every reference healed after the cycle");
}
