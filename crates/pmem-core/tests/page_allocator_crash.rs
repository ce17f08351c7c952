//! Crash-simulator suites for the page allocator: after a crash at any fence, under
//! the line and word models, recovery (`PageAllocator::open`) succeeds; no published
//! slot points to a free page; no page is both free and published; and the leak is
//! at most the documented bound (one page per in-flight `free` whose slot the caller
//! cleared first; none for `alloc_publish`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pmem_core::sim::{CrashInfo, CrashTest, Model, SimDomain};
use pmem_core::{AtomicPPtr, PPtr, PageAllocator, PersistentAllocator, Pool, PoolOptions};
use proptest::prelude::*;

const SLOTS: usize = 4;
/// Pages of the block each slot publishes (fixed per slot, so the checker knows).
const PAGES: [u64; SLOTS] = [1, 2, 1, 3];
const POOL: u64 = 64 * 1024;

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Allocate [`PAGES`]`[slot]` pages and publish them into slot `slot` (if it is
    /// empty).
    Publish { slot: usize },
    /// Clear slot `slot` (persisted), then free its block.
    Release { slot: usize },
}

fn slot_ptr(i: usize) -> PPtr<AtomicPPtr<u8>> {
    PPtr::from_offset(4096 + 8 * i as u64)
}

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

/// Sizes of the blocks currently published, per slot (DRAM bookkeeping of the test).
type Sizes = [u64; SLOTS];

fn apply(a: &PageAllocator, op: Op, sizes: &mut Sizes) -> Result<(), String> {
    let pool = a.pool();
    match op {
        Op::Publish { slot } => {
            if sizes[slot] != 0 {
                return Ok(());
            }
            let size = PAGES[slot] * 4096 - 100;
            // SAFETY: the slot is only accessed atomically by this test.
            unsafe {
                a.alloc_publish(size, slot_ptr(slot), &mut |b: &mut [u8]| {
                    b.fill(slot as u8 + 1)
                })
            }
            .map_err(e)?;
            sizes[slot] = size;
        }
        Op::Release { slot } => {
            if sizes[slot] == 0 {
                return Ok(());
            }
            // SAFETY: the slot is only accessed atomically by this test.
            let s = unsafe { pool.get_shared(slot_ptr(slot)) }.map_err(e)?;
            let block = s.swap(PPtr::null(), Ordering::AcqRel);
            pool.persist_ptr(slot_ptr(slot)).map_err(e)?;
            // SAFETY: unpublished above; nothing references the block.
            unsafe { a.free(block, sizes[slot]) }.map_err(e)?;
            sizes[slot] = 0;
        }
    }
    Ok(())
}

/// What recovery finds: pages used, and the published slots.
#[derive(Debug)]
struct Recovered {
    used: u64,
    published: Vec<(usize, u64)>,
    free_published: Vec<usize>,
}

fn recover(pool: Pool) -> Result<Recovered, String> {
    let pool = Arc::new(pool);
    // SAFETY: recovery is the only user of the pool.
    let a = unsafe { PageAllocator::open(Arc::clone(&pool), pool.heap().start) }.map_err(e)?;
    let mut published = Vec::new();
    let mut free_published = Vec::new();
    for i in 0..SLOTS {
        // SAFETY: single-threaded recovery, atomic access only.
        let p = unsafe { pool.get_shared(slot_ptr(i)) }
            .map_err(e)?
            .load(Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        published.push((i, p.offset()));
        if !a.is_allocated(p, 1) {
            free_published.push(i);
        }
    }
    Ok(Recovered {
        used: a.stats().pages_used,
        published,
        free_published,
    })
}

fn check<'a>(ops: &'a [Op]) -> impl Fn(&Recovered, &CrashInfo) -> Result<(), String> + 'a {
    move |r: &Recovered, crash: &CrashInfo| {
        if !r.free_published.is_empty() {
            return Err(format!("slots {:?} point to free pages", r.free_published));
        }
        // Distinct published blocks.
        let mut offs: Vec<u64> = r.published.iter().map(|p| p.1).collect();
        offs.sort_unstable();
        offs.dedup();
        if offs.len() != r.published.len() {
            return Err(format!("two slots share a block: {:?}", r.published));
        }
        let expected: u64 = r.published.iter().map(|&(i, _)| PAGES[i]).sum();
        // Only a release in flight may leak, and only its own block (the slot was
        // cleared before the free); an alloc_publish in flight leaks nothing.
        let bound = match crash.in_flight.first().and_then(|&n| ops.get(n as usize)) {
            Some(Op::Release { slot }) => PAGES[*slot],
            _ => 0,
        };
        if r.used < expected || r.used > expected + bound {
            return Err(format!(
                "{} pages used, {} published ({:?}); allowed leak {bound}",
                r.used, expected, r.published
            ));
        }
        Ok(())
    }
}

fn crash_test() -> CrashTest {
    CrashTest::new(PoolOptions::new("pages", POOL).root::<[u64; SLOTS]>())
}

/// Formats the heap of the simulated pool and makes that the durable starting state.
fn formatted(pool: Pool, sim: &SimDomain) -> Result<(Arc<Pool>, PageAllocator), String> {
    let pool = Arc::new(pool);
    // SAFETY: the test is the only user of the heap.
    let a = unsafe { PageAllocator::format_heap(Arc::clone(&pool)) }.map_err(e)?;
    sim.mark_durable();
    Ok((pool, a))
}

/// The workload: `ops` in order, each one operation of the trace.
fn replay(ops: &[Op]) -> impl FnOnce(Pool, &SimDomain) -> Result<(), String> + '_ {
    move |pool, sim| {
        let (_pool, a) = formatted(pool, sim)?;
        let mut sizes = [0u64; SLOTS];
        for (n, &op) in ops.iter().enumerate() {
            sim.op(n as u32, || apply(&a, op, &mut sizes))?;
        }
        Ok(())
    }
}

fn run(ops: &[Op], model: Model) -> Result<(), String> {
    crash_test()
        .model(model)
        .run(|_| Ok(()), replay(ops), recover, check(ops))
        .map(|_| ())
        .map_err(|f| f.to_string())
}

#[test]
fn publish_and_release_survive_every_crash() {
    let ops = [
        Op::Publish { slot: 0 },
        Op::Publish { slot: 1 },
        Op::Release { slot: 0 },
        Op::Publish { slot: 3 },
        Op::Release { slot: 1 },
        Op::Publish { slot: 0 },
    ];
    // Eadr: the pool's flushes are elided (domain CpuCache), only its fences remain.
    for model in [Model::Line, Model::Word, Model::Eadr] {
        run(&ops, model).unwrap_or_else(|f| panic!("{model:?}: {f}"));
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..SLOTS).prop_map(|slot| Op::Publish { slot }),
        (0..SLOTS).prop_map(|slot| Op::Release { slot }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_survive_every_crash(ops in proptest::collection::vec(op(), 1..6)) {
        run(&ops, Model::Line).map_err(TestCaseError::fail)?;
    }
}

/// The suite catches a broken protocol: publishing without the intent record.
#[test]
fn a_publication_without_intent_is_caught() {
    let r = crash_test().deny_correctness_lints(false).run(
        |_| Ok(()),
        |pool, sim| {
            let (pool, a) = formatted(pool, sim)?;
            sim.op(0, || -> Result<(), String> {
                // Broken: publish first, allocate afterwards.
                let block = PPtr::<u8>::from_offset(pool.heap().start + 4096 * 2);
                // SAFETY: test-only direct publication.
                let s = unsafe { pool.get_shared(slot_ptr(0)) }.map_err(e)?;
                s.store(block, Ordering::Release);
                pool.persist_ptr(slot_ptr(0)).map_err(e)?;
                a.alloc(4096).map(|_| ()).map_err(e)
            })
        },
        recover,
        check(&[Op::Publish { slot: 0 }]),
    );
    let err = r.expect_err("publishing before allocating must be caught");
    assert!(err.message.contains("point to free pages"), "{err}");
}

/// The allocator's protocol trips no lint at all: no missing flush or fence, and no
/// redundant flush or empty fence either.
#[test]
fn the_protocol_is_lint_clean() {
    let ops = [
        Op::Publish { slot: 0 },
        Op::Publish { slot: 1 },
        Op::Release { slot: 0 },
    ];
    let trace = crash_test()
        .record(|_| Ok(()), replay(&ops))
        .expect("records");
    let lints = pmem_core::sim::lint(&trace);
    assert!(lints.is_empty(), "{lints:#?}");
}
