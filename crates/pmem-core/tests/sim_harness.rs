//! The harness end to end: proptest crash injection that shrinks to a small witness,
//! the model oracle, idempotence under a second crash, raw-reference writes, and
//! the lints.

use std::panic::Location;

use pmem_core::sim::strategy::{crash_point, deviations};
use pmem_core::sim::{
    lint, CrashInfo, CrashPoints, CrashTest, Event, EventKind, FlushOp, LintKind, Model, Trace,
};
use pmem_core::{PPtr, Pool, PoolError, PoolOptions};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

const HEAD: u64 = 4096;
const NODES: u64 = 8192;

fn e(err: PoolError) -> String {
    err.to_string()
}

/// A list push; `buggy` publishes the head before persisting the node.
fn push(pool: &mut Pool, i: u64, value: u64, buggy: bool) -> Result<(), PoolError> {
    let head: u64 = pool.read(PPtr::from_offset(HEAD))?;
    let node = NODES + 64 * i;
    pool.write(PPtr::<[u64; 2]>::from_offset(node), &[value, head])?;
    if !buggy {
        pool.persist(node, 16)?;
    }
    pool.write(PPtr::<u64>::from_offset(HEAD), &node)?;
    pool.persist(HEAD, 8)?;
    if buggy {
        pool.persist(node, 16)?;
    }
    Ok(())
}

fn walk(pool: &Pool) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    let mut p: u64 = pool.read(PPtr::from_offset(HEAD)).map_err(e)?;
    while p != 0 && out.len() < 100 {
        let [v, next]: [u64; 2] = pool.read(PPtr::from_offset(p)).map_err(e)?;
        out.push(v);
        p = next;
    }
    out.reverse();
    Ok(out)
}

fn list_test() -> CrashTest {
    CrashTest::new(PoolOptions::new("harness", 64 * 1024))
}

fn record(values: &[u64], buggy: bool) -> Trace {
    list_test()
        .record(
            |_| Ok(()),
            |mut pool, sim| {
                for (i, &v) in values.iter().enumerate() {
                    sim.op(i as u32, || push(&mut pool, i as u64, v, buggy))
                        .map_err(e)?;
                }
                Ok(())
            },
        )
        .expect("workload records")
}

fn check_values(values: Vec<u64>) -> impl Fn(&Vec<u64>, &CrashInfo) -> Result<(), String> {
    move |got: &Vec<u64>, crash: &CrashInfo| {
        crash.expect_model(got, |ops| values[..ops as usize].to_vec())
    }
}

#[test]
fn correct_list_survives_every_enumerated_crash() {
    let values = vec![5, 6, 7, 8];
    let report = list_test()
        .run(
            |_| Ok(()),
            |mut pool, sim| {
                for (i, &v) in values.iter().enumerate() {
                    sim.op(i as u32, || push(&mut pool, i as u64, v, false))
                        .map_err(e)?;
                }
                Ok(())
            },
            |pool| walk(&pool),
            check_values(values.clone()),
        )
        .expect("correct list passes");
    assert_eq!(report.crash_points, 9, "two fences per push, plus the end");
    assert!(report.images_checked >= 9);
    assert!(report.second_crash_images > 0);
    assert_eq!(report.exhaustive_points, report.crash_points);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The shape of a user's crash-injection suite: random operations, a random
    /// crash point and random lost stores.
    #[test]
    fn correct_list_survives_random_crashes(
        point in crash_point(),
        lost in deviations(4),
        values in proptest::collection::vec(1u64..1000, 1..6),
    ) {
        let trace = record(&values, false);
        let check = check_values(values.clone());
        list_test()
            .check_case(&trace, point, &lost, &|pool| walk(&pool), &check)
            .map_err(|f| TestCaseError::fail(f.to_string()))?;
    }
}

#[test]
fn a_bug_shrinks_to_a_small_witness() {
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        crash_point(),
        deviations(4),
        proptest::collection::vec(1u64..1000, 1..6),
    );
    let result = runner.run(&strategy, |(point, lost, values)| {
        let trace = record(&values, true);
        let check = check_values(values.clone());
        list_test()
            .deny_correctness_lints(false)
            .check_case(&trace, point, &lost, &|pool| walk(&pool), &check)
            .map_err(|f| TestCaseError::fail(f.to_string()))
    });
    let Err(TestError::Fail(reason, (point, lost, values))) = result else {
        panic!("the buggy list must fail: {result:?}");
    };
    assert_eq!(
        values.len(),
        1,
        "shrunk to one operation: {values:?} {point} {lost:?}"
    );
    assert_eq!(lost.len(), 1, "shrunk to one lost line: {lost:?}");
    let msg = reason.to_string();
    // Points: before the head's fence, before the node's fence, the end. Which of the
    // first two fails first depends on which line the shrunk deviation names; the
    // end (everything fenced) never fails.
    assert!(
        msg.contains("crash point 1 of 3: before event")
            || msg.contains("crash point 2 of 3: before event"),
        "a failing point before the end: {msg}"
    );
    assert!(msg.contains("first lost: store"), "{msg}");
    assert!(
        msg.contains("sim_harness.rs"),
        "witness names the source: {msg}"
    );
    assert!(msg.contains("crash point"), "{msg}");
}

#[test]
fn exhaustive_run_finds_the_bug_too() {
    let values = vec![1, 2];
    let err = list_test()
        .deny_correctness_lints(false)
        .run(
            |_| Ok(()),
            |mut pool, sim| {
                for (i, &v) in values.iter().enumerate() {
                    sim.op(i as u32, || push(&mut pool, i as u64, v, true))
                        .map_err(e)?;
                }
                Ok(())
            },
            |pool| walk(&pool),
            check_values(values.clone()),
        )
        .expect_err("publishing before persisting loses the node");
    assert!(err.witness.contains("deviations"), "{err}");
}

/// Recovery that clears its log before it has rolled back is correct when it runs
/// to completion, and wrong when it crashes in between: only a second crash finds it.
#[test]
fn non_idempotent_recovery_is_caught_by_a_second_crash() {
    const FLAG: u64 = 4096;
    const DATA: u64 = 8192;
    let workload = |mut pool: Pool, sim: &pmem_core::sim::SimDomain| -> Result<(), String> {
        sim.op(0, || -> Result<(), PoolError> {
            // "Log": set the flag meaning DATA must be reset to 7 on recovery.
            pool.write(PPtr::<u64>::from_offset(FLAG), &1)?;
            pool.persist(FLAG, 8)?;
            pool.write(PPtr::<u64>::from_offset(DATA), &99)?;
            pool.persist(DATA, 8)?;
            Ok(())
        })
        .map_err(e)
    };
    let recover = |buggy: bool| {
        move |mut pool: Pool| -> Result<u64, String> {
            let flag: u64 = pool.read(PPtr::from_offset(FLAG)).map_err(e)?;
            if flag == 1 {
                if buggy {
                    pool.write(PPtr::<u64>::from_offset(FLAG), &0).map_err(e)?;
                    pool.persist(FLAG, 8).map_err(e)?;
                }
                pool.write(PPtr::<u64>::from_offset(DATA), &7).map_err(e)?;
                pool.persist(DATA, 8).map_err(e)?;
                pool.write(PPtr::<u64>::from_offset(FLAG), &0).map_err(e)?;
                pool.persist(FLAG, 8).map_err(e)?;
            }
            pool.read(PPtr::from_offset(DATA)).map_err(e)
        }
    };
    let setup = |pool: &mut Pool| -> Result<(), String> {
        pool.write(PPtr::<u64>::from_offset(DATA), &7).map_err(e)?;
        pool.persist(DATA, 8).map_err(e)
    };
    let check = |v: &u64, _: &CrashInfo| {
        if *v == 7 {
            Ok(())
        } else {
            Err(format!("data {v}, expected 7"))
        }
    };
    let t = CrashTest::new(PoolOptions::new("idem", 16 * 1024)).idempotence_every(1);
    t.run(setup, workload, recover(false), check)
        .expect("correct recovery is idempotent");
    let err = t
        .run(setup, workload, recover(true), check)
        .expect_err("buggy recovery");
    assert!(
        err.witness.contains("second crash during recovery"),
        "{err}"
    );
}

/// Writes through `get_mut` are seen at the next persistence event.
#[test]
fn raw_reference_writes_are_recorded() {
    let t = CrashTest::new(PoolOptions::new("raw", 16 * 1024).root::<[u64; 2]>());
    let trace = t
        .record(
            |_| Ok(()),
            |mut pool, _| {
                let root = pool.root::<[u64; 2]>().map_err(e)?;
                pool.get_mut(root).map_err(e)?[1] = 42;
                pool.persist_ptr(root).map_err(e)
            },
        )
        .expect("records");
    let stores: Vec<_> = trace
        .events
        .iter()
        .filter_map(|ev| match ev.kind {
            EventKind::Store {
                offset, len, value, ..
            } => Some((offset, len, value[0], ev.loc.file())),
            _ => None,
        })
        .collect();
    assert_eq!(stores, vec![(4096 + 8, 1, 42, file!())]);
    assert!(matches!(
        trace.events.last().map(|ev| &ev.kind),
        Some(EventKind::Fence)
    ));
}

fn ev(kind: EventKind) -> Event {
    Event {
        kind,
        thread: 0,
        loc: Location::caller(),
    }
}

fn st(offset: u64) -> EventKind {
    EventKind::Store {
        offset,
        len: 8,
        value: [1; 8],
        nt: false,
        group: offset as u32,
    }
}

fn fl(offset: u64) -> EventKind {
    EventKind::Flush {
        line: offset / 64 * 64,
        op: FlushOp::Clwb,
    }
}

fn kinds(events: Vec<Event>) -> Vec<LintKind> {
    let t = Trace {
        base: vec![0; 256].into(),
        events,
        overflowed: false,
    };
    lint(&t).into_iter().map(|l| l.kind).collect()
}

#[test]
fn lints_fire_on_their_patterns_and_not_on_clean_code() {
    use EventKind::{Fence, OpBegin, OpEnd};
    // Clean: store, flush, fence.
    assert!(kinds(vec![
        ev(OpBegin(0)),
        ev(st(0)),
        ev(fl(0)),
        ev(Fence),
        ev(OpEnd(0))
    ])
    .is_empty());
    // Missing fence at op end.
    assert_eq!(
        kinds(vec![ev(OpBegin(0)), ev(st(0)), ev(fl(0)), ev(OpEnd(0))]),
        vec![LintKind::MissingFence]
    );
    // Never flushed by op end.
    assert_eq!(
        kinds(vec![ev(OpBegin(0)), ev(st(0)), ev(OpEnd(0))]),
        vec![LintKind::NotDurableAtOpEnd]
    );
    // A persist barrier (fence with another flush pending) over an unflushed store.
    let k = kinds(vec![
        ev(st(0)),
        ev(st(64)),
        ev(fl(64)),
        ev(Fence),
        ev(fl(0)),
        ev(Fence),
    ]);
    assert_eq!(k, vec![LintKind::MissingFlush]);
    // Performance: flushing a clean line, and a fence with nothing pending.
    let k = kinds(vec![ev(st(0)), ev(fl(0)), ev(fl(0)), ev(Fence), ev(Fence)]);
    assert_eq!(k, vec![LintKind::RedundantFlush, LintKind::EmptyFence]);
    // Volatile ranges are exempt from the correctness lints.
    let k = kinds(vec![
        ev(EventKind::Volatile { offset: 0, len: 64 }),
        ev(OpBegin(0)),
        ev(st(8)),
        ev(OpEnd(0)),
    ]);
    assert!(k.is_empty(), "{k:?}");
    // Stores a durable log recovers, and flushes left unfenced on purpose, are
    // exempt; a later flush of the covered line is not redundant, and a store to it
    // after the cover is linted again.
    let k = kinds(vec![
        ev(OpBegin(0)),
        ev(st(0)),
        ev(EventKind::LogCovered { offset: 0, len: 8 }),
        ev(st(64)),
        ev(fl(64)),
        ev(EventKind::DeferFlushes),
        ev(OpEnd(0)),
        ev(OpBegin(1)),
        ev(fl(0)),
        ev(Fence),
        ev(OpEnd(1)),
    ]);
    assert!(k.is_empty(), "{k:?}");
    let k = kinds(vec![
        ev(OpBegin(0)),
        ev(st(0)),
        ev(EventKind::LogCovered { offset: 0, len: 8 }),
        ev(st(0)),
        ev(OpEnd(0)),
    ]);
    assert_eq!(k, vec![LintKind::NotDurableAtOpEnd]);
}

#[test]
fn lints_deduplicate_by_location() {
    let mut events = Vec::new();
    for i in 0..5u64 {
        events.push(ev(EventKind::OpBegin(i as u32)));
        events.push(Event {
            kind: st(i * 64),
            thread: 0,
            loc: Location::caller(),
        });
        events.push(ev(EventKind::OpEnd(i as u32)));
    }
    // The five stores share one location only if created on one line: build them so.
    let loc = Location::caller();
    for e in events.iter_mut() {
        e.loc = loc;
    }
    let t = Trace {
        base: vec![0; 512].into(),
        events,
        overflowed: false,
    };
    let lints = lint(&t);
    assert_eq!(lints.len(), 1);
    assert_eq!(lints[0].count, 5);
}

#[test]
fn crash_point_kinds() {
    let t = record(&[1, 2], false);
    let fences = t.crash_points(CrashPoints::Fences);
    let flushes = t.crash_points(CrashPoints::Flushes);
    let ops = t.crash_points(CrashPoints::Ops);
    let every = t.crash_points(CrashPoints::Every);
    assert_eq!(fences.len(), 5);
    assert_eq!(flushes.len(), 9);
    assert_eq!(ops.len(), 5);
    assert_eq!(every.len(), t.events.len() + 1);
    assert_eq!(t.ops_at(t.events.len()).completed, vec![0, 1]);
    assert!(t.ops_at(t.events.len()).in_flight.is_empty());
    let labelled = list_test()
        .record(
            |_| Ok(()),
            |pool, sim| {
                pool.label("first");
                pool.label("second");
                assert!(pool.sim().is_some_and(|s| std::ptr::eq(s.as_ref(), sim)));
                Ok(())
            },
        )
        .expect("records");
    assert_eq!(labelled.crash_points(CrashPoints::Labels), vec![0, 1, 2]);
    assert!(matches!(
        labelled.events[1].kind,
        EventKind::Label("second")
    ));
    assert_eq!(
        labelled.events[0].loc.file(),
        file!(),
        "labels carry the caller's location"
    );
    assert_eq!(t.ops_at(1).in_flight, vec![0]);
    assert!(t.ops_at(1).completed.is_empty());
    for model in [Model::Line, Model::Word, Model::Eadr] {
        let r = list_test()
            .model(model)
            .crash_points(CrashPoints::Every)
            .run(
                |_| Ok(()),
                |mut pool, sim| {
                    sim.op(0, || push(&mut pool, 0, 9, false)).map_err(e)?;
                    Ok(())
                },
                |pool| walk(&pool),
                check_values(vec![9]),
            )
            .expect("every point passes");
        assert!(r.crash_points > 5);
    }
}

/// The README's register example, with the two mistakes its text says are caught.
mod readme_register {
    use super::*;

    const SELECT: u64 = 4096;
    const SLOTS: u64 = 4096 + 64;

    #[derive(Clone, Copy, PartialEq)]
    enum Variant {
        Correct,
        SelectorFirst,
        NoSlotPersist,
    }

    fn set(pool: &mut Pool, value: [u64; 4], v: Variant) -> Result<(), PoolError> {
        let live: u64 = pool.read(PPtr::from_offset(SELECT))?;
        let spare = SLOTS + 64 * (1 - live);
        if v == Variant::SelectorFirst {
            pool.write(PPtr::<u64>::from_offset(SELECT), &(1 - live))?;
            pool.persist(SELECT, 8)?;
        }
        pool.write(PPtr::<[u64; 4]>::from_offset(spare), &value)?;
        if v != Variant::NoSlotPersist {
            pool.persist(spare, 32)?;
        }
        if v != Variant::SelectorFirst {
            pool.write(PPtr::<u64>::from_offset(SELECT), &(1 - live))?;
            pool.persist(SELECT, 8)?;
        }
        Ok(())
    }

    fn run(v: Variant, deny_lints: bool) -> Result<(), String> {
        let values = [[1; 4], [2; 4], [3; 4]];
        CrashTest::new(PoolOptions::new("register", 16 * 1024))
            .deny_correctness_lints(deny_lints)
            .run(
                |_| Ok(()),
                |mut pool, sim| {
                    for (n, val) in values.iter().enumerate() {
                        sim.op(n as u32, || set(&mut pool, *val, v)).map_err(e)?;
                    }
                    Ok(())
                },
                |pool| {
                    let live: u64 = pool.read(PPtr::from_offset(SELECT)).map_err(e)?;
                    pool.read::<[u64; 4]>(PPtr::from_offset(SLOTS + 64 * (live & 1)))
                        .map_err(e)
                },
                |got: &[u64; 4], crash: &CrashInfo| {
                    crash.expect_model(got, |ops| {
                        if ops == 0 {
                            [0; 4]
                        } else {
                            values[ops as usize - 1]
                        }
                    })
                },
            )
            .map(|_| ())
            .map_err(|f| f.to_string())
    }

    #[test]
    fn mistakes_named_in_the_readme_are_caught() {
        run(Variant::Correct, true).expect("the README's version passes");
        for v in [Variant::SelectorFirst, Variant::NoSlotPersist] {
            assert!(run(v, true).is_err());
            // Also without the lints: the checker sees a lost or torn update.
            assert!(run(v, false).is_err());
        }
    }
}

/// `Pool::publish` makes the slot durable: after the publishing operation completes,
/// every crash image has the slot pointing at the (persisted) object. Without its
/// flush and fence the lint and the checker both fail this test.
#[test]
fn publish_is_durable_when_it_returns() {
    use pmem_core::AtomicPPtr;
    const SLOT: u64 = 4096;
    const OBJ: u64 = 8192;
    let t = CrashTest::new(PoolOptions::new("publish", 16 * 1024)).crash_points(CrashPoints::Every);
    t.run(
        |_| Ok(()),
        |mut pool, sim| {
            sim.op(0, || -> Result<(), PoolError> {
                pool.write(PPtr::<u64>::from_offset(OBJ), &77)?;
                pool.persist(OBJ, 8)?;
                pool.publish(
                    PPtr::<AtomicPPtr<u64>>::from_offset(SLOT),
                    PPtr::from_offset(OBJ),
                )
            })
            .map_err(e)
        },
        |pool| {
            let slot: u64 = pool.read(PPtr::from_offset(SLOT)).map_err(e)?;
            let obj = if slot == 0 {
                0
            } else {
                pool.read(PPtr::<u64>::from_offset(slot)).map_err(e)?
            };
            Ok((slot, obj))
        },
        |&(slot, obj): &(u64, u64), crash: &CrashInfo| {
            crash.expect_model(
                &(slot, obj),
                |ops| if ops == 0 { (0, 0) } else { (OBJ, 77) },
            )
        },
    )
    .expect("publication is failure-atomic and durable on return");
}
