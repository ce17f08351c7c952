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
