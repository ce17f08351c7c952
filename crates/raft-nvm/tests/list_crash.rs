//! Crash-simulator suites for the list engine.
//!
//! Workloads are sequences of put / delete / truncate / sync / compaction steps on a
//! simulated pool (small pages, so records cross pages and compaction has work).
//! After every selected crash image, recovery must succeed and:
//! * the recovered log equals the model after some prefix of the appended records
//!   that includes every record appended before the last completed sync (checked on
//!   the last index and on every key's newest version);
//! * the used and free page lists partition the pages;
//! * the store keeps working: on a copy of the image, more appends, a sync, a
//!   compaction and a reopen read back the recovered contents plus the new records
//!   (a page wrongly on the free list would be overwritten and caught here).
//!
//! Three more suites crash the remaining writers of the pool: formatting (all or
//! nothing, durable once done), the hard state (every completed update survives) and
//! snapshot installation (all or nothing, durable once done). Each fails if its flush
//! or fence is removed, by its checker alone (lints off) as well as by the lints.
//!
//! Durable points are recorded while the workload runs (the event count at which
//! each sync, explicit or by group, returned), so the checker knows the lower bound
//! for any crash point. `PMKIT_SIM_DEPTH` deepens the image budget; `PROPTEST_CASES`
//! the number of random workloads.

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use common::{apply, step, value, view_after, Rec, Step, View};
use pmem_core::sim::{strategy, CrashInfo, CrashTest};
use pmem_core::Pool;
use proptest::prelude::*;
use raft_nvm::{ListOptions, ListStore, Op, Store, StoreOptions};

const POOL: u64 = 64 * 1024;

fn opts() -> ListOptions {
    ListOptions {
        store: StoreOptions {
            group: 3,
            sync_interval: None,
        },
        page_size: 256,
        ..ListOptions::default()
    }
}

/// What a workload leaves for the checker.
#[derive(Default)]
struct Record {
    log: Vec<Rec>,
    /// `(events when a sync returned, records durable then)`, in order.
    durable: Vec<(usize, usize)>,
}

fn run_steps(
    store: &ListStore,
    steps: &[Step],
    rec: &mut Record,
    events: &dyn Fn() -> usize,
) -> Result<(), String> {
    let e = |x: raft_nvm::StoreError| x.to_string();
    for s in steps {
        let syncs = store.syncs();
        apply(store, s, &mut rec.log).map_err(e)?;
        let synced = store.syncs() != syncs;
        if synced {
            rec.durable.push((events(), rec.log.len()));
        }
    }
    store.sync().map_err(e)?;
    rec.durable.push((events(), rec.log.len()));
    Ok(())
}

fn lower_bound(rec: &Record, info: &CrashInfo) -> usize {
    rec.durable
        .iter()
        .take_while(|(ev, _)| *ev <= info.events_before)
        .last()
        .map_or(0, |&(_, n)| n)
}

fn observe(pool: Pool) -> Result<(View, Vec<u8>), String> {
    let image = pool
        .bytes(0, pool.len())
        .map_err(|e| e.to_string())?
        .to_vec();
    let store = ListStore::recover(pool, &opts()).map_err(|e| format!("recovery: {e}"))?;
    let (used, free) = store.page_lists();
    let mut seen = vec![0u8; store.page_count() as usize];
    for &p in used.iter().chain(&free) {
        seen[p as usize] += 1;
    }
    if let Some(p) = seen.iter().position(|&c| c != 1) {
        return Err(format!(
            "page {p} appears {} times in used {used:?} + free {free:?}",
            seen[p]
        ));
    }
    let map = store
        .dump(u64::MAX)
        .map_err(|e| e.to_string())?
        .into_iter()
        .collect();
    Ok(((store.last_index(), map), image))
}

/// On a copy of the recovered image: append, sync, compact, reopen, and compare.
fn keeps_working(image: &[u8], before: &View) -> Result<(), String> {
    let e = |x: raft_nvm::StoreError| x.to_string();
    let pool = Pool::from_image(image).map_err(|x| x.to_string())?;
    let store = ListStore::recover(pool, &opts()).map_err(e)?;
    let mut expect = before.1.clone();
    let mut last = store.last_index();
    for i in 0..12u8 {
        last += 1;
        let (key, val) = (vec![b'n', i % 4], value(40, i));
        store
            .append(
                last,
                3,
                Op::Put {
                    key: &key,
                    value: &val,
                },
            )
            .map_err(e)?;
        expect.insert(key, val);
    }
    store.sync().map_err(e)?;
    store.set_applied(last);
    store.compact().map_err(e)?;
    let got: BTreeMap<_, _> = store.dump(u64::MAX).map_err(e)?.into_iter().collect();
    if got != expect {
        return Err(format!(
            "after recovery + 12 appends + compaction: {got:?} != {expect:?}"
        ));
    }
    let image = store
        .pool()
        .bytes(0, store.pool().len())
        .map_err(|x| x.to_string())?
        .to_vec();
    drop(store);
    let again = ListStore::recover(
        Pool::from_image(&image).map_err(|x| x.to_string())?,
        &opts(),
    )
    .map_err(e)?;
    let got: BTreeMap<_, _> = again.dump(u64::MAX).map_err(e)?.into_iter().collect();
    if got != expect || again.last_index() != last {
        return Err("reopen after the continuation lost records".into());
    }
    Ok(())
}

fn check(rec: &Record, got: &(View, Vec<u8>), info: &CrashInfo) -> Result<(), String> {
    let lo = lower_bound(rec, info);
    let (view, image) = got;
    let matching = (lo..=rec.log.len()).find(|&n| view_after(&rec.log[..n]) == *view);
    let Some(_) = matching else {
        return Err(format!(
            "recovered {view:?}: no prefix of {} records from the {lo} durable ones matches",
            rec.log.len()
        ));
    };
    if !info.second_crash && info.point_index.is_multiple_of(4) {
        keeps_working(image, view)?;
    }
    Ok(())
}

fn crash_test() -> CrashTest {
    CrashTest::new(ListStore::pool_options(POOL, &opts()))
}

fn record(steps: &[Step]) -> (pmem_core::sim::Trace, Rc<RefCell<Record>>) {
    let rec = Rc::new(RefCell::new(Record::default()));
    let out = Rc::clone(&rec);
    let trace = crash_test()
        .record(
            |pool| ListStore::write_format(pool, &opts()).map_err(|e| e.to_string()),
            move |pool, sim| {
                let store = ListStore::recover(pool, &opts()).map_err(|e| e.to_string())?;
                run_steps(&store, steps, &mut out.borrow_mut(), &|| sim.event_count())
            },
        )
        .expect("workload records");
    (trace, rec)
}

#[test]
fn every_crash_of_a_fixed_workload_recovers_a_durable_prefix() {
    use Step::*;
    let steps = [
        Put(0, 50),
        Put(1, 50),
        Put(2, 50),
        Put(0, 9),
        Delete(1),
        Put(3, 59),
        Put(4, 59),
        Truncate(2),
        Put(1, 30),
        Sync,
        Put(2, 58),
        Put(2, 57),
        Compact,
        Put(0, 1),
        Delete(0),
        Put(4, 40),
        Truncate(1),
        Put(3, 20),
        Compact,
        Put(1, 3),
    ];
    let (trace, rec) = record(&steps);
    let rec = rec.borrow();
    assert!(
        rec.durable.len() > 5,
        "durable points recorded: {:?}",
        rec.durable
    );
    let report = crash_test()
        .check_trace(&trace, &observe, &|got, info| check(&rec, got, info))
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.images_checked > 100, "{report:?}");
    eprintln!(
        "list crash suite: {} crash points, {} images, {} second-crash images",
        report.crash_points, report.images_checked, report.second_crash_images
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)
    ))]

    #[test]
    fn random_workloads_survive_random_crashes(
        point in strategy::crash_point(),
        deviations in strategy::deviations(3),
        steps in proptest::collection::vec(step(5, 60), 1..30),
    ) {
        let (trace, rec) = record(&steps);
        let rec = rec.borrow();
        let result = crash_test().check_case(&trace, point, &deviations, &observe, &|got, info| check(&rec, got, info));
        prop_assert!(result.is_ok(), "{}", result.err().map(|f| f.to_string()).unwrap_or_default());
    }
}

/// The recovered store, or `None` if the pool holds no store yet (a crash during
/// formatting); any other recovery error fails the test.
type Recovered = Option<(raft_nvm::HardState, View)>;

fn recover_maybe(pool: Pool) -> Result<Recovered, String> {
    match ListStore::recover(pool, &opts()) {
        Ok(s) => {
            let view = common::observe(&s, 5).map_err(|e| e.to_string())?;
            Ok(Some((s.hard_state(), view)))
        }
        Err(raft_nvm::StoreError::Corrupt(_)) => Ok(None),
        Err(e) => Err(format!("recovery: {e}")),
    }
}

#[test]
fn formatting_is_all_or_nothing_and_durable_once_done() {
    let report = crash_test()
        .run(
            |_pool| Ok(()),
            |pool, sim| {
                sim.op(0, || ListStore::format(pool, &opts()).map(drop))
                    .map_err(|e| e.to_string())
            },
            recover_maybe,
            |got: &Recovered, info: &CrashInfo| match (got, info.completed_ops) {
                (Some((hs, view)), _)
                    if *hs == raft_nvm::HardState::default() && *view == view_after(&[]) =>
                {
                    Ok(())
                }
                (None, 0) => Ok(()),
                _ => Err(format!(
                    "after {} completed ops: {got:?}",
                    info.completed_ops
                )),
            },
        )
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.images_checked > 1, "{report:?}");
}

#[test]
fn every_completed_hard_state_update_survives() {
    use raft_nvm::HardState;
    let states = [
        HardState {
            term: 1,
            vote: Some(1),
        },
        HardState {
            term: 2,
            vote: None,
        },
        HardState {
            term: 2,
            vote: Some(3),
        },
        HardState {
            term: 9,
            vote: Some(0),
        },
    ];
    let report = crash_test()
        .run(
            |pool| ListStore::write_format(pool, &opts()).map_err(|e| e.to_string()),
            |pool, sim| {
                let s = ListStore::recover(pool, &opts()).map_err(|e| e.to_string())?;
                for (n, hs) in states.iter().enumerate() {
                    sim.op(n as u32, || s.set_hard_state(*hs))
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            },
            recover_maybe,
            |got: &Recovered, info: &CrashInfo| {
                let hs = got
                    .as_ref()
                    .map(|(hs, _)| *hs)
                    .ok_or("the store vanished")?;
                info.expect_model(&hs, |ops| {
                    ops.checked_sub(1)
                        .map_or(HardState::default(), |i| states[i as usize])
                })
            },
        )
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.images_checked > 3, "{report:?}");
}

#[test]
fn a_snapshot_installs_all_or_nothing_and_durably() {
    use raft_nvm::{SnapshotItem, SnapshotMeta};
    let items: Vec<SnapshotItem> = (0..12u8)
        .map(|i| SnapshotItem {
            key: vec![b'k', i % 5],
            value: value(40, i),
            index: 20 + u64::from(i),
        })
        .collect();
    let meta = SnapshotMeta { index: 40, term: 3 };
    let full: View = {
        let mut map = BTreeMap::new();
        for it in &items {
            map.insert(it.key.clone(), it.value.clone());
        }
        (40, map)
    };
    let (items_w, full_c) = (items.clone(), full.clone());
    let report = crash_test()
        .run(
            |pool| ListStore::write_format(pool, &opts()).map_err(|e| e.to_string()),
            move |pool, sim| {
                let s = ListStore::recover(pool, &opts()).map_err(|e| e.to_string())?;
                sim.op(0, || {
                    s.install_snapshot(meta, &mut items_w.clone().into_iter())
                })
                .map_err(|e| e.to_string())
            },
            recover_maybe,
            move |got: &Recovered, info: &CrashInfo| {
                let view = got
                    .as_ref()
                    .map(|(_, v)| v.clone())
                    .ok_or("the store vanished")?;
                info.expect_model(&view, |ops| {
                    if ops == 0 {
                        view_after(&[])
                    } else {
                        full_c.clone()
                    }
                })
            },
        )
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.images_checked > 3, "{report:?}");
    assert_eq!(full.1.len(), 5, "the snapshot holds five keys");
}
