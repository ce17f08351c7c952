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
//! The fixed workload runs in the line and the word models (8-byte words of a line
//! tearing independently: the torn seals and records recovery must see through).
//! More suites crash the remaining writers of the pool: formatting (all or nothing,
//! durable once done), the hard state (every completed update survives), snapshot
//! installation (all or nothing, durable once done) and opening (the new epoch is
//! durable before the first record of the run); and one checks that the
//! `durable_tail` hint keeps up, so a damaged record before the previous sync is
//! reported, not cut. With the feature `mutation`, every flush and fence site of the
//! engine is removed in turn and some suite's checker alone (lints off) must fail.
//!
//! Every other run of two to four puts and deletes is appended as one batch
//! (`Store::append_batch`: gathered, then copied a run of bytes at a time). Every
//! other explicit sync runs beside the next two steps (appends, truncations,
//! compactions): they are applied
//! between its flushes and its fence (`ListStore::sync_with`), as another thread's
//! appends and truncations run while the node's sync thread waits for `msync`.
//!
//! Durable points are recorded while the workload runs (the event count at which
//! each sync, explicit or by group, returned, and what it promised), so the checker
//! knows the lower bound for any crash point. `PMKIT_SIM_DEPTH` deepens the image budget; `PROPTEST_CASES`
//! the number of random workloads.

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use common::{apply, apply_batch, step, value, view_after, Rec, Step, View};
use pmem_core::sim::{strategy, CrashInfo, CrashState, CrashTest, Model};
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
    let mut syncs_seen = 0;
    let mut runs_seen = 0;
    let mut i = 0;
    while i < steps.len() {
        let s = &steps[i];
        let run = steps[i..]
            .iter()
            .take(4)
            .take_while(|s| matches!(s, Step::Put(..) | Step::Delete(_)))
            .count();
        if run > 1 {
            runs_seen += 1;
            if runs_seen % 2 == 1 {
                // Every other run of puts and deletes goes in as one batch: its
                // records and page headers gathered and copied a run at a time.
                let syncs = store.syncs();
                apply_batch(store, &steps[i..i + run], &mut rec.log).map_err(e)?;
                if store.syncs() != syncs {
                    rec.durable.push((events(), rec.log.len()));
                }
                i += run;
                continue;
            }
        }
        i += 1;
        if matches!(s, Step::Sync) {
            syncs_seen += 1;
            if syncs_seen % 2 == 0 {
                // Every other explicit sync runs beside the next (up to) two steps
                // that are not syncs, applied between its flushes and its fence as
                // another writer's would be (see `ListStore::sync_with`).
                let beside = steps[i..]
                    .iter()
                    .take(2)
                    .take_while(|s| !matches!(s, Step::Sync))
                    .count();
                let between = &steps[i..i + beside];
                i += beside;
                sync_beside(store, between, rec, events).map_err(e)?;
                continue;
            }
        }
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

/// One sync with `between` applied between its flushes and its fence, on a thread
/// of its own as in a node (where the event loop appends and the compactor
/// compacts while the sync thread waits for `msync`): it promises the records appended before it; those appended
/// between are promised only by a group sync among them (one that runs under the
/// tail lock, covering all).
fn sync_beside(
    store: &ListStore,
    between: &[Step],
    rec: &mut Record,
    events: &dyn Fn() -> usize,
) -> Result<(), raft_nvm::StoreError> {
    let before = rec.log.len();
    let mut promised = before;
    let log = &mut rec.log;
    store.sync_with(&mut || {
        // Each step on a thread of its own, one after the other: the appends of the
        // event loop, the compaction of the compactor thread.
        for s in between {
            let syncs = store.syncs();
            std::thread::scope(|scope| {
                scope
                    .spawn(|| {
                        if matches!(s, Step::Compact) {
                            // Without the sync `apply` starts a compaction with (one
                            // sync at a time: it would wait for this one).
                            store.set_applied(store.durable_index());
                            store.compact().map(|_| ())
                        } else {
                            apply(store, s, log)
                        }
                    })
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })?;
            if store.syncs() != syncs {
                promised = log.len();
            }
        }
        Ok(())
    })?;
    // Recorded late (at the sync's end, not at the group sync's): a weaker bound
    // for the crash points between the two, never a wrong one.
    rec.durable.push((events(), promised));
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

/// Serialises this binary's tests: the mutation test removes a flush or fence from
/// every store of the process.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Set by the mutation test: the checkers alone must notice a missing flush or
/// fence, without the simulator's lints.
static CHECKERS_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn crash_test_in(model: Model) -> CrashTest {
    let lints = !CHECKERS_ONLY.load(std::sync::atomic::Ordering::Relaxed);
    CrashTest::new(ListStore::pool_options(POOL, &opts()))
        .model(model)
        .deny_correctness_lints(lints)
}

fn crash_test() -> CrashTest {
    crash_test_in(Model::Line)
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

/// The fixed workload: puts, deletes, rollbacks, an explicit sync, compactions and
/// appends into the pages compaction freed.
fn fixed_steps() -> Vec<Step> {
    use Step::*;
    vec![
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
        Put(2, 250),
        // The second explicit sync: it runs beside the put and the compaction after
        // it.
        Sync,
        Put(3, 90),
        Compact,
        Truncate(1),
        Put(2, 57),
        Put(0, 240),
        Compact,
        Put(0, 1),
        Delete(0),
        Put(4, 40),
        Truncate(1),
        Put(3, 20),
        Compact,
        Put(1, 3),
    ]
}

/// Every crash of the fixed workload in `model`.
fn fixed_workload(model: Model) -> Result<pmem_core::sim::Report, String> {
    let steps = fixed_steps();
    let (trace, rec) = record(&steps);
    let rec = rec.borrow();
    if rec.durable.len() <= 5 {
        return Err(format!("durable points recorded: {:?}", rec.durable));
    }
    let report = crash_test_in(model)
        .check_trace(&trace, &observe, &|got, info| check(&rec, got, info))
        .map_err(|f| f.to_string())?;
    if report.images_checked <= 100 {
        return Err(format!("too few images: {report:?}"));
    }
    Ok(report)
}

/// A compaction that frees pages while a sync waits for its fence (the node's
/// compactor beside its sync thread): every crash recovers a durable prefix. (The
/// sync moves the control block's hint only once fenced, for compaction to trust
/// only what is durable; with the hint published before the fence this workload
/// still recovers, because the hint shares its cache line with the head that
/// compaction flushes and fences itself.)
#[test]
fn a_compaction_beside_a_sync_recovers_a_durable_prefix() {
    let _one = serial();
    use Step::*;
    // One record per page (200-byte values on 256-byte pages), all of one key: the
    // first sync makes six pages durable, the second (run beside the compaction
    // after it) moves the hint past them while the compaction could free them.
    let mut steps = vec![Put(0, 200); 6];
    steps.push(Sync);
    steps.extend([Put(0, 200), Put(0, 200)]);
    steps.extend([Sync, Compact, Put(0, 1)]);
    let (trace, rec) = record(&steps);
    let rec = rec.borrow();
    let report = crash_test()
        .check_trace(&trace, &observe, &|got, info| check(&rec, got, info))
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.images_checked > 20, "{report:?}");
}

#[test]
fn every_crash_of_a_fixed_workload_recovers_a_durable_prefix() {
    let _one = serial();
    for model in [Model::Line, Model::Word] {
        let report = fixed_workload(model).unwrap_or_else(|f| panic!("{model:?}: {f}"));
        eprintln!(
            "list crash suite ({model:?}): {} crash points, {} images, {} second-crash images",
            report.crash_points, report.images_checked, report.second_crash_images
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)
    ))]

    #[test]
    fn random_workloads_survive_random_crashes(
        point in strategy::crash_point(),
        deviations in strategy::deviations(3),
        // Values up to 250 bytes: some larger than a 256-byte page's room.
        steps in proptest::collection::vec(step(5, 250), 1..30),
    ) {
        let _one = serial();
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
    let _one = serial();
    formatting().unwrap_or_else(|f| panic!("{f}"));
}

fn formatting() -> Result<(), String> {
    let report = crash_test()
        .run(
            |_pool| Ok(()),
            |pool, sim| {
                // Formatting alone (as crash-test setups use it) must be durable
                // once it returns; then the first open.
                sim.op(0, || ListStore::write_format(&pool, &opts()))
                    .map_err(|e| e.to_string())?;
                sim.op(1, || ListStore::recover(pool, &opts()).map(drop))
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
        .map_err(|f| f.to_string())?;
    at_least(&report, 2)
}

/// Fails unless the suite checked at least `n` images.
fn at_least(report: &pmem_core::sim::Report, n: u64) -> Result<(), String> {
    if report.images_checked < n {
        return Err(format!("fewer than {n} images: {report:?}"));
    }
    Ok(())
}

#[test]
fn every_completed_hard_state_update_survives() {
    let _one = serial();
    hard_states().unwrap_or_else(|f| panic!("{f}"));
}

fn hard_states() -> Result<(), String> {
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
        .map_err(|f| f.to_string())?;
    at_least(&report, 4)
}

#[test]
fn a_snapshot_installs_all_or_nothing_and_durably() {
    let _one = serial();
    snapshot_install().unwrap_or_else(|f| panic!("{f}"));
}

fn snapshot_install() -> Result<(), String> {
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
        .map_err(|f| f.to_string())?;
    if full.1.len() != 5 {
        return Err("the snapshot must hold five keys".into());
    }
    at_least(&report, 4)
}

/// The control block's epoch word in a pool.
fn epoch_of(pool: &Pool) -> Result<u64, String> {
    raft_nvm::list::pool_epoch(pool).map_err(|e| e.to_string())
}

#[test]
fn the_new_epoch_is_durable_before_the_first_record_of_a_run() {
    let _one = serial();
    epochs().unwrap_or_else(|f| panic!("{f}"));
}

/// An open, then a synced append: once the open has returned, its epoch is durable
/// (so no later run can take the generations it took, whatever happens next).
fn epochs() -> Result<(), String> {
    let report = crash_test()
        .run(
            |pool| ListStore::write_format(pool, &opts()).map_err(|e| e.to_string()),
            |pool, sim| {
                let e = |x: raft_nvm::StoreError| x.to_string();
                let store = sim.op(0, || ListStore::recover(pool, &opts())).map_err(e)?;
                sim.op(1, || {
                    let op = Op::Put {
                        key: b"k",
                        value: b"v",
                    };
                    store.append(1, 1, op)?;
                    store.sync()
                })
                .map_err(e)
            },
            |pool| epoch_of(&pool),
            |epoch: &u64, info: &CrashInfo| {
                // Formatting leaves epoch 1; the open takes epoch 2.
                let least = if info.completed_ops >= 1 { 2 } else { 1 };
                if *epoch < least {
                    return Err(format!(
                        "epoch {epoch} after {} completed ops",
                        info.completed_ops
                    ));
                }
                Ok(())
            },
        )
        .map_err(|f| f.to_string())?;
    at_least(&report, 2)
}

#[test]
fn a_damaged_record_before_the_previous_sync_is_reported_not_cut() {
    let _one = serial();
    hint_keeps_up().unwrap_or_else(|f| panic!("{f}"));
}

/// Three synced groups of appends; in the image where nothing but what was fenced
/// survived, a damaged record of the first group must fail recovery as corrupt
/// (the hint covers it), while the same damage to a record of the last group,
/// past the hint, is a torn tail: cut.
fn hint_keeps_up() -> Result<(), String> {
    let e = |x: raft_nvm::StoreError| x.to_string();
    let trace = crash_test()
        .record(
            |_pool| Ok(()),
            move |pool, _sim| {
                let store = ListStore::format(pool, &opts()).map_err(e)?;
                for (i, key) in [b"GROUP-1", b"GROUP-2", b"GROUP-3"].iter().enumerate() {
                    let op = Op::Put {
                        key: &key[..],
                        value: b"value",
                    };
                    store.append(i as u64 + 1, 1, op).map_err(e)?;
                    store.sync().map_err(e)?;
                }
                Ok(())
            },
        )
        .map_err(|f| f.to_string())?;
    let end = trace.events.len();
    let state = CrashState::new(&trace, end, Model::Line);
    let fenced = state.materialize(&state.minimal());
    let damaged = |key: &[u8]| -> Result<Vec<u8>, String> {
        let at = fenced
            .windows(key.len())
            .position(|w| w == key)
            .ok_or_else(|| format!("{} not in the image", String::from_utf8_lossy(key)))?;
        let mut bad = fenced.clone();
        bad[at] ^= 0x20;
        Ok(bad)
    };
    let open = |image: &[u8]| {
        let pool = Pool::from_image(image).map_err(|x| x.to_string())?;
        Ok::<_, String>(ListStore::recover(pool, &opts()))
    };
    let whole = open(&fenced)?.map_err(e)?;
    if whole.last_index() != 3 {
        return Err(format!(
            "the fenced image holds {} entries",
            whole.last_index()
        ));
    }
    match open(&damaged(b"GROUP-1")?)? {
        Err(raft_nvm::StoreError::Corrupt(_)) => {}
        Ok(s) => {
            return Err(format!(
                "a damaged record before the previous sync was cut ({} entries left)",
                s.last_index()
            ))
        }
        Err(other) => return Err(format!("unexpected error: {other}")),
    }
    let cut = open(&damaged(b"GROUP-3")?)?.map_err(e)?;
    if cut.last_index() != 2 {
        return Err(format!(
            "a damaged last record: {} entries recovered, 2 expected",
            cut.last_index()
        ));
    }
    Ok(())
}

/// Every suite of this binary (the fixed workload in both models), cheapest first,
/// for the mutation test.
#[cfg(feature = "mutation")]
type Suite = (&'static str, fn() -> Result<(), String>);

/// Every suite of this binary, cheapest first.
#[cfg(feature = "mutation")]
const EVERY_SUITE: [Suite; 7] = [
    ("formatting", formatting),
    ("hard states", hard_states),
    ("snapshot install", snapshot_install),
    ("epochs", epochs),
    ("hint", hint_keeps_up),
    ("fixed workload, line", || {
        fixed_workload(Model::Line).map(drop)
    }),
    ("fixed workload, word", || {
        fixed_workload(Model::Word).map(drop)
    }),
];

/// Removing any one flush or fence of the engine makes some suite's checker fail
/// with the simulator's lints off: every one is needed, and the suites would see
/// it missing.
#[cfg(feature = "mutation")]
#[test]
fn every_flush_and_fence_is_needed() {
    let _one = serial();
    CHECKERS_ONLY.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut unnoticed = Vec::new();
    for site in raft_nvm::list::Site::ALL {
        raft_nvm::list::set_mutant(Some(site));
        // The first suite that notices is enough.
        let noticed = EVERY_SUITE.iter().find(|(_, suite)| suite().is_err());
        eprintln!(
            "without {site:?}: noticed by {:?}",
            noticed.map(|(name, _)| name)
        );
        if noticed.is_none() {
            unnoticed.push(site);
        }
    }
    raft_nvm::list::set_mutant(None);
    let clean: Vec<_> = EVERY_SUITE
        .iter()
        .filter_map(|(name, suite)| suite().err().map(|e| format!("{name}: {e}")))
        .collect();
    CHECKERS_ONLY.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(clean.is_empty(), "unmutated, with lints off: {clean:?}");
    assert!(
        unnoticed.is_empty(),
        "no suite noticed the removal of {unnoticed:?}"
    );
}
