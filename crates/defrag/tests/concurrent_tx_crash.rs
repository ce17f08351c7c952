//! Crash suite of two mutator threads and the defragmenter at once (the script
//! and checker are in `two_mutators/mod.rs`): for each protocol, in the line and
//! word models, overlapping transactions of two mutators, and healing racing a
//! transaction that holds a record (commit and rollback).

mod two_mutators;
use two_mutators::*;

use pmem_core::sim::Model;
use pmem_core::{Pool, PoolOptions};
use pmem_defrag::{CompactOptions, DefragHeap, HeapRoot, Protocol};

fn suite(protocol: Protocol) {
    let deep = std::env::var_os("PMKIT_DEEP").is_some();
    for model_kind in [Model::Line, Model::Word] {
        for rollback in [false, true] {
            // By default the line model crashes the commit and the word model the
            // rollback (PMKIT_DEEP=1: both in each).
            if !deep && rollback != (model_kind == Model::Word) {
                continue;
            }
            let images = crash_test(protocol, model_kind, rollback)
                .unwrap_or_else(|e| panic!("{protocol:?} {model_kind:?} rollback={rollback}: {e}"));
            assert!(images > 50, "{images} images");
        }
    }
}

#[test]
fn the_script_overlaps_two_mutators_and_heals_around_a_held_record() {
    let steps = script(false);
    let muts = mutations(&steps);
    let all: Vec<u32> = (0..muts.len() as u32).collect();
    assert_eq!(
        model(&muts, &all),
        [vec![300, 100, 600, 0], vec![500, 51, 41, 200]]
    );
    let (pool, sim) =
        Pool::simulated(&PoolOptions::new("defrag", 1 << 20).root::<HeapRoot>()).expect("pool");
    let heap = DefragHeap::create(pool, &registry()).expect("heap");
    setup(&heap).expect("setup");
    let before = heap.stats().expect("stats");
    assert_eq!((before.pages, before.live_objects), (2, 6), "{before:?}");
    run_script(&heap, &steps, CompactOptions::new().target(1.0), &sim).expect("script");
    let after = heap.stats().expect("stats");
    assert_eq!(after.live_objects, 8, "{after:?}");
    heap.verify().expect("healed");
}

#[test]
fn espresso_with_two_mutators_survives_every_crash() {
    suite(Protocol::Espresso);
}

#[test]
fn sfccd_with_two_mutators_survives_every_crash() {
    suite(Protocol::Sfccd);
}

#[test]
fn ffccd_with_two_mutators_survives_every_crash() {
    suite(Protocol::Ffccd);
}
