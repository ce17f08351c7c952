//! Crash-simulator suites for the page allocator's compare-and-publish
//! (`alloc_publish_if`) and crash-atomic free-and-unpublish (`free_unpublish`),
//! checked against a model oracle: after a crash at any fence, under the line and
//! word models, recovery (`PageAllocator::open`) succeeds; the published slots are
//! those of the model after the completed operations, or after the in-flight one
//! too; every published slot points to a live block of its size; the live blocks
//! enumerated by `for_each_live_block` are exactly the published ones (nothing
//! leaks, no block is split or merged); and the page count agrees.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pmem_core::sim::{Budget, CrashInfo, CrashTest, Model, SimDomain};
use pmem_core::{
    AllocError, AtomicPPtr, PPtr, PageAllocator, PersistentAllocator, Pool, PoolOptions,
};
use proptest::prelude::*;

const SLOTS: usize = 4;
/// Pages of the block each slot publishes (fixed per slot, so the checker knows).
const PAGES: [u64; SLOTS] = [1, 2, 1, 3];
const POOL: u64 = 64 * 1024;
const PAGE: u64 = 4096;

#[derive(Clone, Copy, Debug)]
enum Op {
    /// `alloc_publish_if(expected = null)` into `slot`: publishes if the slot is
    /// empty, is refused with `SlotMismatch` (and changes nothing) otherwise.
    PublishIf { slot: usize },
    /// `free_unpublish` of the slot's block, if it has one.
    FreeUnpublish { slot: usize },
}

fn slot_ptr(i: usize) -> PPtr<AtomicPPtr<u8>> {
    PPtr::from_offset(4096 + 8 * i as u64)
}

fn size_of_slot(i: usize) -> u64 {
    PAGES[i] * PAGE - 100
}

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

/// Which slots are published after the first `n` operations.
fn model(ops: &[Op], n: usize) -> [bool; SLOTS] {
    let mut m = [false; SLOTS];
    for op in &ops[..n.min(ops.len())] {
        match *op {
            Op::PublishIf { slot } => m[slot] = true,
            Op::FreeUnpublish { slot } => m[slot] = false,
        }
    }
    m
}

fn apply(a: &PageAllocator, op: Op) -> Result<(), String> {
    let pool = a.pool();
    // SAFETY: the slots are accessed only atomically and, for stores, only through
    // the allocator, by this single-threaded test.
    let current =
        |slot| unsafe { pool.get_shared(slot_ptr(slot)) }.map(|s| s.load(Ordering::Acquire));
    match op {
        Op::PublishIf { slot } => {
            let before = current(slot).map_err(e)?;
            // SAFETY: as above.
            let r = unsafe {
                a.alloc_publish_if(size_of_slot(slot), slot_ptr(slot), PPtr::null(), &mut |b| {
                    b.fill(slot as u8 + 1)
                })
            };
            match (r, before.is_null()) {
                (Ok(_), true) => {}
                (Err(AllocError::SlotMismatch { .. }), false) => {}
                (r, _) => return Err(format!("publish_if into slot {slot}: {r:?}")),
            }
        }
        Op::FreeUnpublish { slot } => {
            let block = current(slot).map_err(e)?;
            if block.is_null() {
                return Ok(());
            }
            // SAFETY: as above; nothing references the block.
            unsafe { a.free_unpublish(slot_ptr(slot), block, size_of_slot(slot)) }.map_err(e)?;
        }
    }
    Ok(())
}

/// What recovery finds.
#[derive(Debug)]
struct Recovered {
    slots: [u64; SLOTS],
    live: Vec<(u64, u64)>,
    used: u64,
}

fn recover(pool: Pool) -> Result<Recovered, String> {
    let pool = Arc::new(pool);
    // SAFETY: recovery is the only user of the pool.
    let a = unsafe { PageAllocator::open(Arc::clone(&pool), pool.heap().start) }.map_err(e)?;
    let mut slots = [0u64; SLOTS];
    for (i, s) in slots.iter_mut().enumerate() {
        // SAFETY: single-threaded recovery, atomic access only.
        *s = unsafe { pool.get_shared(slot_ptr(i)) }
            .map_err(e)?
            .load(Ordering::Acquire)
            .offset();
    }
    let mut live = Vec::new();
    a.for_each_live_block(&mut |p, size| live.push((p.offset(), size)))
        .map_err(e)?;
    Ok(Recovered {
        slots,
        live,
        used: a.stats().pages_used,
    })
}

fn check<'a>(ops: &'a [Op]) -> impl Fn(&Recovered, &CrashInfo) -> Result<(), String> + 'a {
    move |r: &Recovered, crash: &CrashInfo| {
        let published: [bool; SLOTS] = std::array::from_fn(|i| r.slots[i] != 0);
        let done = crash.completed_ops as usize;
        // One thread runs the operations, so at most one is in flight.
        let allowed_models = if crash.in_flight.is_empty() {
            vec![model(ops, done)]
        } else {
            vec![model(ops, done), model(ops, done + 1)]
        };
        if !allowed_models.contains(&published) {
            return Err(format!(
                "published {published:?}, model allows {allowed_models:?} ({r:?})"
            ));
        }
        let mut expected: Vec<(u64, u64)> = (0..SLOTS)
            .filter(|&i| published[i])
            .map(|i| (r.slots[i], PAGES[i] * PAGE))
            .collect();
        expected.sort_unstable();
        if r.live != expected {
            return Err(format!(
                "live blocks {:?} are not the published ones {expected:?} (slots {:?})",
                r.live, r.slots
            ));
        }
        let pages: u64 = expected.iter().map(|b| b.1 / PAGE).sum();
        if r.used != pages {
            return Err(format!("{} pages used, {pages} published", r.used));
        }
        Ok(())
    }
}

fn crash_test() -> CrashTest {
    CrashTest::new(PoolOptions::new("pages", POOL).root::<[u64; SLOTS]>())
}

fn replay(ops: &[Op]) -> impl FnOnce(Pool, &SimDomain) -> Result<(), String> + '_ {
    move |pool, sim| {
        let pool = Arc::new(pool);
        // SAFETY: the test is the only user of the heap.
        let a = unsafe { PageAllocator::format_heap(Arc::clone(&pool)) }.map_err(e)?;
        sim.mark_durable();
        for (n, &op) in ops.iter().enumerate() {
            sim.op(n as u32, || apply(&a, op))?;
        }
        Ok(())
    }
}

/// A quarter of the default budget (still scaled by `PMKIT_SIM_DEPTH`), so the suite
/// takes seconds in debug builds: each crash point still gets "nothing more" and
/// "everything" persisted, the 1- and 2-deviation cuts up to the budget, and random
/// ones.
fn budget() -> Budget {
    let b = Budget::from_env();
    Budget {
        exhaustive_up_to: b.exhaustive_up_to / 4,
        random: b.random / 4,
        ..b
    }
}

fn run(ops: &[Op], model: Model) -> Result<(), String> {
    crash_test()
        .model(model)
        .budget(budget())
        .run(|_| Ok(()), replay(ops), recover, check(ops))
        .map(|_| ())
        .map_err(|f| f.to_string())
}

/// Adjacent blocks of different sizes (next-fit packs them), a refused publication,
/// unpublications in the middle, and a republication into the hole.
const SEQUENCE: [Op; 7] = [
    Op::PublishIf { slot: 0 },
    Op::PublishIf { slot: 1 },
    Op::PublishIf { slot: 3 },
    Op::PublishIf { slot: 1 },
    Op::FreeUnpublish { slot: 1 },
    Op::PublishIf { slot: 2 },
    Op::FreeUnpublish { slot: 0 },
];

#[test]
fn publish_if_and_free_unpublish_survive_every_crash_line_model() {
    run(&SEQUENCE, Model::Line).unwrap_or_else(|f| panic!("{f}"));
}

#[test]
fn publish_if_and_free_unpublish_survive_every_crash_word_model() {
    run(&SEQUENCE, Model::Word).unwrap_or_else(|f| panic!("{f}"));
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..SLOTS).prop_map(|slot| Op::PublishIf { slot }),
        (0..SLOTS).prop_map(|slot| Op::FreeUnpublish { slot }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_survive_every_crash(ops in proptest::collection::vec(op(), 1..5)) {
        run(&ops, Model::Line).map_err(TestCaseError::fail)?;
    }
}

/// The new operations trip no lint: no missing flush or fence, no redundant flush or
/// empty fence.
#[test]
fn the_new_protocols_are_lint_clean() {
    let trace = crash_test()
        .record(|_| Ok(()), replay(&SEQUENCE))
        .expect("records");
    let lints = pmem_core::sim::lint(&trace);
    assert!(lints.is_empty(), "{lints:#?}");
}
