//! Crash suite of the naive baseline (`NaiveHeap`): sequences of alloc / publish /
//! free on small and large blocks, crashed wherever the durable set can change
//! under the line and the word model, recovered by opening the heap. After every
//! crash every non-null slot points to a live block, the live blocks are exactly
//! the slots' (plus the one block of an in-flight plain `alloc` or `free`), none
//! overlap, and the slots follow the model. With the `mutation` feature, each of
//! its flushes and fences removed in turn must be caught.

use std::sync::Arc;

use nvwa::NaiveHeap;
use pmem_core::sim::{CrashInfo, CrashTest, Model, SimDomain};
use pmem_core::{PPtr, PersistentAllocator, Pool, PoolOptions};
use proptest::prelude::*;

mod common;
use common::{e, load, slot_ptr, store};

const SLOTS: usize = 4;
const SIZES: [u64; SLOTS] = [64, 64, 300, 6000];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Alloc(usize),
    Publish(usize),
    Free(usize),
}

/// Which slots are linked after `ops`.
fn model(ops: &[Op]) -> [bool; SLOTS] {
    let mut m = [false; SLOTS];
    for &op in ops {
        match op {
            Op::Alloc(i) | Op::Publish(i) => m[i] = true,
            Op::Free(i) => m[i] = false,
        }
    }
    m
}

fn apply(heap: &NaiveHeap, linked: &mut [bool; SLOTS], op: Op) -> Result<(), String> {
    let pool = heap.pool();
    match op {
        Op::Alloc(i) if !linked[i] => {
            let p = heap.alloc(SIZES[i]).map_err(e)?;
            store(pool, i, p)?;
            linked[i] = true;
        }
        Op::Publish(i) if !linked[i] => {
            // SAFETY: the slot is accessed only atomically; nothing else stores
            // to it meanwhile.
            unsafe { heap.alloc_publish(SIZES[i], slot_ptr(i), &mut |b: &mut [u8]| b.fill(7)) }
                .map_err(e)?;
            linked[i] = true;
        }
        Op::Free(i) if linked[i] => {
            let p = load(pool, i)?;
            store(pool, i, PPtr::null())?;
            // SAFETY: unlinked above.
            unsafe { heap.free(p, SIZES[i]) }.map_err(e)?;
            linked[i] = false;
        }
        _ => {}
    }
    Ok(())
}

/// Ops that change nothing (alloc of a linked slot, free of an empty one) are
/// dropped, so the model and the workload agree.
fn effective(ops: &[Op]) -> Vec<Op> {
    let mut linked = [false; SLOTS];
    ops.iter()
        .copied()
        .filter(|&op| match op {
            Op::Alloc(i) | Op::Publish(i) => !std::mem::replace(&mut linked[i], true),
            Op::Free(i) => std::mem::replace(&mut linked[i], false),
        })
        .collect()
}

fn workload(ops: &[Op]) -> impl FnOnce(Pool, &SimDomain) -> Result<(), String> + '_ {
    move |pool, sim| {
        // SAFETY: the test is the heap's only user.
        let heap = unsafe { NaiveHeap::format_heap(Arc::new(pool)) }.map_err(e)?;
        sim.mark_durable();
        let mut linked = [false; SLOTS];
        for (n, &op) in ops.iter().enumerate() {
            sim.op(n as u32, || apply(&heap, &mut linked, op))?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Found {
    slots: [Option<u64>; SLOTS],
    live: Vec<(u64, u64)>,
}

fn recover(pool: Pool) -> Result<Found, String> {
    let pool = Arc::new(pool);
    // SAFETY: recovery is the pool's only user.
    let heap = unsafe { NaiveHeap::open_heap(Arc::clone(&pool)) }.map_err(e)?;
    let mut slots = [None; SLOTS];
    for (i, s) in slots.iter_mut().enumerate() {
        let p = load(&pool, i)?;
        *s = (!p.is_null()).then_some(p.offset());
    }
    let mut live = Vec::new();
    heap.for_each_live_block(&mut |p, size| live.push((p.offset(), size)))
        .map_err(e)?;
    live.sort_unstable();
    Ok(Found { slots, live })
}

fn check<'a>(ops: &'a [Op]) -> impl Fn(&Found, &CrashInfo) -> Result<(), String> + 'a {
    move |f: &Found, crash: &CrashInfo| {
        for w in f.live.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!("live blocks overlap: {:?} and {:?}", w[0], w[1]));
            }
        }
        let done = crash.completed_ops as usize;
        let in_flight = crash
            .in_flight
            .first()
            .and_then(|&n| ops.get(n as usize).copied());
        let before = model(&ops[..done]);
        let after = model(&ops[..(done + usize::from(in_flight.is_some())).min(ops.len())]);
        let linked: Vec<bool> = f.slots.iter().map(Option::is_some).collect();
        if linked != before && linked != after {
            return Err(format!(
                "slots {:?}: neither {before:?} nor {after:?}",
                f.slots
            ));
        }
        for (i, s) in f.slots.iter().enumerate() {
            if let Some(b) = s {
                if !f.live.iter().any(|(l, size)| l == b && *size >= SIZES[i]) {
                    return Err(format!("slot {i} points to {b:#x}, not a live block"));
                }
            }
        }
        let unlinked = f
            .live
            .iter()
            .filter(|(b, _)| !f.slots.contains(&Some(*b)))
            .count();
        let may_leak = usize::from(matches!(in_flight, Some(Op::Alloc(_) | Op::Free(_))));
        if unlinked > may_leak {
            return Err(format!(
                "{unlinked} live blocks no slot holds (in flight: {in_flight:?}): {:?}",
                f.live
            ));
        }
        Ok(())
    }
}

fn run(ops: &[Op], model: Model, deny_lints: bool) -> Result<u64, String> {
    let ops = effective(ops);
    CrashTest::new(PoolOptions::new("naive-crash", 256 * 1024).root::<[u64; SLOTS]>())
        .model(model)
        .deny_correctness_lints(deny_lints)
        .run(|_| Ok(()), workload(&ops), recover, check(&ops))
        .map(|r| r.images_checked)
        .map_err(|f| f.to_string())
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const SCRIPT: [Op; 8] = [
    Op::Alloc(0),
    Op::Publish(1),
    Op::Publish(3),
    Op::Free(0),
    Op::Alloc(2),
    Op::Free(3),
    Op::Publish(0),
    Op::Free(1),
];

#[test]
fn the_script_survives_every_crash() {
    let _one = serial();
    for m in [Model::Line, Model::Word] {
        let images = run(&SCRIPT, m, true).unwrap_or_else(|f| panic!("{m:?}: {f}"));
        assert!(images > 50, "{m:?}: only {images} images");
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..SLOTS).prop_map(Op::Alloc),
        (0..SLOTS).prop_map(Op::Publish),
        (0..SLOTS).prop_map(Op::Free),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(8, 128), ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_survive_every_crash(ops in proptest::collection::vec(op(), 1..8)) {
        let _one = serial();
        run(&ops, Model::Line, true).map_err(TestCaseError::fail)?;
    }
}

/// Each of the naive heap's flushes and fences, removed, is caught by the checker.
#[cfg(feature = "mutation")]
#[test]
fn every_flush_and_fence_is_needed() {
    let _one = serial();
    let mut survivors = Vec::new();
    for site in nvwa::Site::NAIVE {
        nvwa::set_mutant(Some(site));
        let caught = [Model::Line, Model::Word]
            .into_iter()
            .any(|m| run(&SCRIPT, m, false).is_err());
        if !caught {
            survivors.push(site);
        }
    }
    nvwa::set_mutant(None);
    assert!(survivors.is_empty(), "mutants not caught: {survivors:?}");
}
