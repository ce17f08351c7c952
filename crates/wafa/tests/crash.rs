//! Crash-simulator suites: after a crash at any fence (line and word models),
//! `Wafa::open` recovers; every allocation that completed before the crash and was
//! not freed is still allocated, and no unit of it is handed out again; the
//! recovered metadata is self-consistent; and what leaks is exactly bounded by the
//! documented semantics: units freed since their page's last metadata write (its
//! last allocation or reform), plus the operation in flight.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pmem_core::sim::{CrashInfo, CrashTest, Model};
use pmem_core::{AllocError, AtomicPPtr, PPtr, PersistentAllocator, Pool, PoolOptions};
use proptest::prelude::*;
use wafa::{ReformMode, Wafa, WafaOptions, MAX_SMALL};

const POOL: u64 = 14 * 4096;
const SLOTS: usize = 4;

#[derive(Clone, Copy, Debug)]
enum Op {
    Alloc(u64),
    /// Free the `n`-th live block (wrapped).
    Free(usize),
    Reform,
    /// alloc_publish into a root slot.
    Publish(u64, usize),
}

/// What an operation did, recorded by the workload for the checker.
#[derive(Clone, Copy, Debug, Default)]
struct Done {
    alloc: Option<(u64, u64)>,
    freed: Option<(u64, u64)>,
    /// Slot index, for an `alloc_publish`.
    slot: Option<usize>,
}

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

fn opts() -> WafaOptions {
    WafaOptions::default().reform(ReformMode::Manual)
}

fn slot(i: usize) -> PPtr<AtomicPPtr<u8>> {
    PPtr::from_offset(4096 + 8 * i as u64)
}

fn units(size: u64) -> u64 {
    if size > MAX_SMALL {
        0
    } else {
        size.div_ceil(64)
    }
}

fn page_of(w_first_page: u64, off: u64) -> u64 {
    (off - w_first_page) / 4096
}

fn run(ops: &[Op], model: Model) -> Result<(), String> {
    let log: RefCell<Vec<Done>> = RefCell::new(Vec::new());
    let first_page: RefCell<u64> = RefCell::new(0);
    let test = CrashTest::new(PoolOptions::new("wafa", POOL).root::<[u64; SLOTS]>()).model(model);
    test.run(
        |_| Ok(()),
        |pool, sim| {
            let pool = Arc::new(pool);
            // SAFETY: the test is the only user of the heap.
            let w = unsafe { Wafa::format(Arc::clone(&pool), opts()) }.map_err(e)?;
            *first_page.borrow_mut() = w.page_offset(0);
            sim.mark_durable();
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (n, &op) in ops.iter().enumerate() {
                let mut done = Done::default();
                sim.op(n as u32, || -> Result<(), String> {
                    match op {
                        Op::Alloc(size) => match w.alloc(size) {
                            Ok(p) => {
                                live.push((p.offset(), size));
                                done.alloc = Some((p.offset(), size));
                            }
                            // A full heap is a legal outcome of a random sequence.
                            Err(AllocError::OutOfSpace { .. }) => {}
                            Err(err) => return Err(e(err)),
                        },
                        Op::Free(i) if !live.is_empty() => {
                            let (off, size) = live.swap_remove(i % live.len());
                            // SAFETY: the block is never referenced.
                            unsafe { w.free(PPtr::from_offset(off), size) }.map_err(e)?;
                            done.freed = Some((off, size));
                        }
                        Op::Free(_) => {}
                        Op::Reform => {
                            w.reform().map_err(e)?;
                        }
                        Op::Publish(size, i) => {
                            // SAFETY: slots are only accessed atomically.
                            let cur = unsafe { pool.get_shared(slot(i)) }
                                .map_err(e)?
                                .load(Ordering::Acquire);
                            if cur.is_null() {
                                // SAFETY: as above.
                                match unsafe { w.alloc_publish(size, slot(i), &mut |b| b.fill(7)) }
                                {
                                    Ok(p) => {
                                        live.push((p.offset(), size));
                                        done.alloc = Some((p.offset(), size));
                                        done.slot = Some(i);
                                    }
                                    // A full heap is a legal outcome.
                                    Err(AllocError::OutOfSpace { .. }) => {}
                                    Err(err) => return Err(e(err)),
                                }
                            }
                        }
                    }
                    Ok(())
                })?;
                log.borrow_mut().push(done);
            }
            Ok(())
        },
        |pool: Pool| {
            let pool = Arc::new(pool);
            // SAFETY: recovery is the only user of the pool.
            unsafe { Wafa::open(pool, opts()) }.map_err(e)
        },
        |w: &Wafa, crash: &CrashInfo| check(w, crash, &log.borrow(), *first_page.borrow()),
    )
    .map(|_| ())
    .map_err(|f| f.to_string())
}

fn check(w: &Wafa, crash: &CrashInfo, log: &[Done], first_page: u64) -> Result<(), String> {
    w.check_consistency()?;
    let completed = crash.completed_ops as usize;
    // Blocks live after the completed operations, and small frees whose page saw no
    // later metadata write (allocation in that page, or a reform) before the crash.
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut unpersisted: Vec<(u64, u64)> = Vec::new();
    for d in &log[..completed] {
        if let Some(b) = d.alloc {
            // An allocation in a page writes the page's whole cached bitmap.
            unpersisted.retain(|&(off, _)| page_of(first_page, off) != page_of(first_page, b.0));
            live.push(b);
        }
        if let Some(b) = d.freed {
            live.retain(|&x| x != b);
            if b.1 <= MAX_SMALL {
                unpersisted.push(b);
            }
        }
        // A reform backs up only the buckets it reforms, so a reformed page's frees
        // may or may not be durable: they stay in the bound.
    }
    let in_flight = crash
        .in_flight
        .first()
        .and_then(|&n| log.get(n as usize))
        .copied()
        .unwrap_or_default();
    // An in-flight plain alloc may leak its units; an in-flight alloc_publish may
    // not: its units count only if its slot was published.
    let published_in_flight = in_flight.slot.is_some_and(|i| {
        // SAFETY: the checker is the only user of the recovered pool.
        let p = unsafe { w.pool().get_shared(slot(i)) }.map(|s| s.load(Ordering::Acquire));
        p.ok().map(|p| p.offset()) == in_flight.alloc.map(|b| b.0)
    });
    for &(off, size) in &live {
        // The block an in-flight free is releasing may be either.
        if in_flight.freed == Some((off, size)) {
            continue;
        }
        if !w.is_allocated(PPtr::from_offset(off), size) {
            return Err(format!("completed allocation {off:#x}+{size} lost"));
        }
    }
    let (units_now, run_pages) = w.allocated_units();
    let pages = |b: (u64, u64)| {
        if b.1 > MAX_SMALL {
            b.1.div_ceil(4096)
        } else {
            0
        }
    };
    let live_pages: u64 = live.iter().map(|&b| pages(b)).sum();
    let in_flight_alloc_pages = match (in_flight.slot, in_flight.alloc) {
        (None, Some(b)) => pages(b),
        (Some(_), Some(b)) if published_in_flight => pages(b),
        _ => 0,
    };
    let (lo, hi) = (
        live_pages - in_flight.freed.map_or(0, pages),
        live_pages + in_flight_alloc_pages,
    );
    if !(lo..=hi).contains(&u64::from(run_pages)) {
        return Err(format!(
            "{run_pages} run pages after recovery; expected {lo}..={hi}"
        ));
    }
    let live_units: u64 = live.iter().map(|b| units(b.1)).sum();
    let in_flight_free_units = in_flight.freed.map_or(0, |b| units(b.1));
    let in_flight_alloc_units = match (in_flight.slot, in_flight.alloc) {
        (None, Some(b)) => units(b.1),
        (Some(_), Some(b)) if published_in_flight => units(b.1),
        _ => 0,
    };
    let leak_bound: u64 =
        unpersisted.iter().map(|b| units(b.1)).sum::<u64>() + in_flight_alloc_units;
    if units_now + in_flight_free_units < live_units || units_now > live_units + leak_bound {
        return Err(format!(
            "{units_now} units allocated after recovery; {live_units} live, leak bound {leak_bound}"
        ));
    }
    // No unit of a live block is handed out again: fill the heap with single units.
    // (The block an in-flight free releases may be reused.)
    live.retain(|&b| in_flight.freed != Some(b));
    let mut taken = 0;
    while let Ok(p) = w.alloc(64) {
        if live.iter().any(|&(off, size)| {
            size <= MAX_SMALL && p.offset() >= off && p.offset() < off + size.div_ceil(64) * 64
        }) || live
            .iter()
            .any(|&(off, size)| size > MAX_SMALL && p.offset() >= off && p.offset() < off + size)
        {
            return Err(format!(
                "unit {:#x} of a live block handed out again",
                p.offset()
            ));
        }
        taken += 1;
        if taken > 14 * 64 {
            return Err("heap never filled".into());
        }
    }
    Ok(())
}

#[test]
fn fixed_sequence_survives_every_crash() {
    let ops = [
        Op::Alloc(10),
        Op::Alloc(256),
        Op::Publish(100, 0),
        Op::Free(0),
        Op::Alloc(5000),
        Op::Alloc(30),
        Op::Free(1),
        Op::Reform,
        Op::Alloc(64),
        Op::Free(2),
        Op::Publish(9000, 1),
    ];
    for model in [Model::Line, Model::Word] {
        run(&ops, model).unwrap_or_else(|f| panic!("{model:?}: {f}"));
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop_oneof![1u64..200, 200u64..4032, 4033u64..9000].prop_map(Op::Alloc),
        3 => (0usize..16).prop_map(Op::Free),
        1 => Just(Op::Reform),
        1 => (1u64..600, 0..SLOTS).prop_map(|(s, i)| Op::Publish(s, i)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_survive_every_crash(ops in proptest::collection::vec(op(), 1..10)) {
        run(&ops, Model::Line).map_err(TestCaseError::fail)?;
    }
}
