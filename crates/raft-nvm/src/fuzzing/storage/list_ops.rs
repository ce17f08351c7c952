//! The structure-aware `list_ops` target: a workload decoded from the fuzz input
//! with the `arbitrary` crate runs against a list store on a simulated pool
//! (pmem-core's crash simulator), is cut at a crash point and a choice of which
//! in-flight stores reached the media, both taken from the input, and the image is
//! recovered and compared with a model, as redb's fuzzer does with its countdown:
//! * the recovered log is the model's after some prefix of the appended records
//!   that includes every record a completed sync promised (nothing acknowledged
//!   is lost, nothing unacknowledged is half there: a prefix, record by record);
//!   an append that failed (a full store) ends the workload and counts as in
//!   flight, so a prefix of its records may be there too;
//! * the hard state is the last one whose update completed, or the one in flight;
//! * integrity: [`ListStore::inspect`] of the image passes and the recovered used
//!   and free page lists partition the pages (no page leaked or used twice);
//! * the store keeps working: an append, a sync and a reopen read it back.
//!
//! Failing a flush (an `msync` error) is not simulated: the crash cut covers what a
//! failed flush can leave, and the file-backed paths' error handling is not
//! reachable from the simulator.

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use pmem_core::sim::{CrashState, Model};
use pmem_core::Pool;

use crate::storage::list::{ListOptions, ListStore};
use crate::storage::store::{HardState, Op, Store, StoreOptions};

/// Bytes of the simulated pool.
const POOL_BYTES: u64 = 32 * 1024;
/// Most operations of a case.
const MAX_OPS: usize = 40;
/// Keys of the workload.
const KEYS: u8 = 6;

/// One step of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListOp {
    /// Put a value of this many bytes (some need fragments) to a key.
    Put {
        /// The key (modulo the workload's six keys).
        key: u8,
        /// The value's length.
        len: u16,
    },
    /// Delete a key.
    Delete(u8),
    /// Puts (`Some(len)`) and deletes (`None`) appended as one batch.
    Batch(Vec<(u8, Option<u16>)>),
    /// Discard up to this many of the newest unapplied entries.
    Truncate(u8),
    /// Make everything durable.
    Sync,
    /// Sync, apply everything durable, compact.
    Compact,
    /// Persist a new hard state (the term grows by one; the vote is this byte).
    HardState(u8),
}

impl<'a> Arbitrary<'a> for ListOp {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let len = |u: &mut Unstructured<'a>| Ok(u16::arbitrary(u)? % 1200);
        Ok(match u.int_in_range(0u8..=11)? {
            0..=3 => ListOp::Put {
                key: u8::arbitrary(u)? % KEYS,
                len: len(u)?,
            },
            4 => ListOp::Delete(u8::arbitrary(u)? % KEYS),
            5 => {
                let n = u.int_in_range(1u8..=4)?;
                let mut ops = Vec::with_capacity(usize::from(n));
                for _ in 0..n {
                    let key = u8::arbitrary(u)? % KEYS;
                    ops.push((
                        key,
                        if bool::arbitrary(u)? {
                            Some(len(u)?)
                        } else {
                            None
                        },
                    ));
                }
                ListOp::Batch(ops)
            }
            6 => ListOp::Truncate(u.int_in_range(1u8..=3)?),
            7 | 8 => ListOp::Sync,
            9 => ListOp::Compact,
            _ => ListOp::HardState(u8::arbitrary(u)?),
        })
    }
}

/// A workload and where it crashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListOpsCase {
    /// The steps (at most 40).
    pub ops: Vec<ListOp>,
    /// The crash point, as a fraction of the trace's events (`u16::MAX`: the end).
    pub crash: u16,
    /// Which in-flight units persist: one byte per unit, cycled.
    pub cut: Vec<u8>,
}

impl<'a> Arbitrary<'a> for ListOpsCase {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let crash = u16::arbitrary(u)?;
        let mut ops = Vec::new();
        while ops.len() < MAX_OPS && !u.is_empty() && bool::arbitrary(u)? {
            ops.push(ListOp::arbitrary(u)?);
        }
        let cut = u.bytes(u.len().min(64))?.to_vec();
        Ok(ListOpsCase { ops, crash, cut })
    }
}

/// A record of the model log.
#[derive(Clone, Debug)]
enum Rec {
    Put(u64, Vec<u8>, Vec<u8>),
    Delete(u64, Vec<u8>),
    Rollback(u64),
}

/// The last index and every key's newest value after replaying `log`.
type View = (u64, BTreeMap<Vec<u8>, Vec<u8>>);

/// An entry of the model: index, key, value (`None`: a delete).
type Entry<'a> = (u64, &'a [u8], Option<&'a [u8]>);

fn view_after(log: &[Rec]) -> View {
    let mut entries: Vec<Entry<'_>> = Vec::new();
    for r in log {
        match r {
            Rec::Put(i, k, v) => entries.push((*i, k, Some(v))),
            Rec::Delete(i, k) => entries.push((*i, k, None)),
            Rec::Rollback(after) => entries.retain(|(i, _, _)| i <= after),
        }
    }
    let mut map = BTreeMap::new();
    for (_, k, v) in &entries {
        match v {
            Some(v) => map.insert(k.to_vec(), v.to_vec()),
            None => map.remove(*k),
        };
    }
    (entries.last().map_or(0, |e| e.0), map)
}

/// What a run recorded for the checker.
#[derive(Default)]
struct Record {
    log: Vec<Rec>,
    /// `(events when a sync returned, records durable then)`.
    durable: Vec<(usize, usize)>,
    /// `(events when the update began, events when it returned, the state)`.
    hard: Vec<(usize, usize, HardState)>,
}

fn options() -> ListOptions {
    ListOptions {
        store: StoreOptions {
            group: 3,
            sync_interval: None,
        },
        page_size: 256,
        ..ListOptions::default()
    }
}

fn value(len: u16, key: u8, index: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ key ^ index as u8)
        .collect()
}

/// What a case did: how many steps ran and how the crash image recovered.
#[derive(Debug)]
pub struct ListOpsReport {
    /// Steps that ran before the first refused one (a full pool).
    pub steps_run: usize,
    /// Events of the trace.
    pub events: usize,
    /// The recovered last index.
    pub last_index: u64,
}

/// The `list_ops` target: decodes a [`ListOpsCase`] from `data` and runs it.
/// `None` if the input does not decode.
pub fn list_ops(data: &[u8]) -> Option<ListOpsReport> {
    let case = ListOpsCase::arbitrary_take_rest(Unstructured::new(data)).ok()?;
    Some(run_case(&case))
}

/// Runs `case`; panics if the crash image breaks a promise (see the module docs).
pub fn run_case(case: &ListOpsCase) -> ListOpsReport {
    let opts = options();
    let (pool, sim) =
        Pool::simulated(&ListStore::pool_options(POOL_BYTES, &opts)).expect("a simulated pool");
    ListStore::write_format(&pool, &opts).expect("formatting a simulated pool");
    sim.mark_durable();
    let store = ListStore::recover(pool, &opts).expect("opening a fresh store");
    let mut rec = Record {
        hard: vec![(0, 0, HardState::default())],
        ..Record::default()
    };
    let mut steps_run = 0;
    for op in &case.ops {
        let syncs = store.syncs();
        let began = sim.event_count();
        if apply(&store, op, &mut rec, began).is_err() {
            // The failed operation (a full store) stays in the model as the one in
            // flight: its records were never acknowledged, so the crash image may
            // hold any prefix of them, and none is required.
            break;
        }
        steps_run += 1;
        if let (ListOp::HardState(_), Some(h)) = (op, rec.hard.last_mut()) {
            h.1 = sim.event_count();
        }
        if store.syncs() != syncs || matches!(op, ListOp::Sync | ListOp::Compact) {
            rec.durable.push((sim.event_count(), rec.log.len()));
        }
    }
    let trace = sim.trace();
    drop(store);
    let events = trace.events.len();
    if trace.overflowed {
        return ListOpsReport {
            steps_run,
            events,
            last_index: 0,
        };
    }
    let point = events * usize::from(case.crash) / usize::from(u16::MAX);
    let state = CrashState::new(&trace, point, Model::Line);
    let cut: Vec<usize> = state
        .in_flight()
        .iter()
        .enumerate()
        .map(|(i, unit)| {
            let pick = case
                .cut
                .get(i % case.cut.len().max(1))
                .copied()
                .unwrap_or(0);
            unit.durable + usize::from(pick) % unit.choices()
        })
        .collect();
    let image = state.materialize(&cut);
    let last_index = check_image(&image, &rec, point);
    ListOpsReport {
        steps_run,
        events,
        last_index,
    }
}

/// Applies `op`, recording it in the model first: if the store fails it (a full
/// store), the model keeps it as the operation in flight.
fn apply(store: &ListStore, op: &ListOp, rec: &mut Record, began: usize) -> crate::Result<()> {
    let last = store.last_index();
    match op {
        ListOp::Put { key, len } => {
            let k = vec![b'k', *key];
            let v = value(*len, *key, last + 1);
            rec.log.push(Rec::Put(last + 1, k.clone(), v.clone()));
            store.append(last + 1, 1, Op::Put { key: &k, value: &v })?;
        }
        ListOp::Delete(key) => {
            let k = vec![b'k', *key];
            rec.log.push(Rec::Delete(last + 1, k.clone()));
            store.append(last + 1, 1, Op::Delete { key: &k })?;
        }
        ListOp::Batch(ops) => {
            let owned: Vec<(u64, Vec<u8>, Option<Vec<u8>>)> = (last + 1..)
                .zip(ops)
                .map(|(i, (key, len))| (i, vec![b'k', *key], len.map(|n| value(n, *key, i))))
                .collect();
            let batch: Vec<(u64, u64, Op<'_>)> = owned
                .iter()
                .map(|(i, key, v)| match v {
                    Some(value) => (*i, 1, Op::Put { key, value }),
                    None => (*i, 1, Op::Delete { key }),
                })
                .collect();
            rec.log.extend(owned.iter().map(|(i, k, v)| match v {
                Some(v) => Rec::Put(*i, k.clone(), v.clone()),
                None => Rec::Delete(*i, k.clone()),
            }));
            store.append_batch(&batch)?;
        }
        ListOp::Truncate(n) => {
            let after = last.saturating_sub(u64::from(*n)).max(store.applied());
            if after < last {
                rec.log.push(Rec::Rollback(after));
                store.truncate_after(after, 2)?;
            }
        }
        ListOp::Sync => store.sync()?,
        ListOp::Compact => {
            store.sync()?;
            store.set_applied(store.durable_index());
            store.compact()?;
        }
        ListOp::HardState(vote) => {
            let term = rec.hard.last().map_or(0, |h| h.2.term) + 1;
            let hs = HardState {
                term,
                vote: Some(u16::from(*vote)),
            };
            store.set_hard_state(hs)?;
            // Its end is set by the caller once the update returned.
            rec.hard.push((began, usize::MAX, hs));
        }
    }
    Ok(())
}

/// Recovers `image` and checks it against the model (crash after `point` events).
fn check_image(image: &[u8], rec: &Record, point: usize) -> u64 {
    let opts = options();
    let pool = Pool::from_image(image).expect("an image of a simulated pool");
    let summary =
        ListStore::inspect(pool).unwrap_or_else(|e| panic!("inspect of a crash image: {e}"));
    let pool = Pool::from_image(image).expect("an image of a simulated pool");
    let store = ListStore::recover(pool, &opts).unwrap_or_else(|e| panic!("recovery: {e}"));
    let lo = rec
        .durable
        .iter()
        .take_while(|(ev, _)| *ev <= point)
        .last()
        .map_or(0, |&(_, n)| n);
    let got: View = (
        store.last_index(),
        store
            .dump(u64::MAX)
            .expect("reading the recovered store")
            .into_iter()
            .collect(),
    );
    assert!(
        (lo..=rec.log.len()).any(|n| view_after(&rec.log[..n]) == got),
        "recovered {got:?}: no prefix of the {} records from the {lo} durable ones matches",
        rec.log.len()
    );
    assert_eq!(summary.last_index, got.0, "inspect and recovery disagree");
    check_hard_state(store.hard_state(), rec, point);
    let (used, free) = store.page_lists();
    let mut seen = vec![0u8; store.page_count() as usize];
    for &p in used.iter().chain(&free) {
        seen[p as usize] += 1;
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "pages not partitioned: used {used:?}, free {free:?}"
    );
    keeps_working(store, got)
}

/// The recovered hard state is the last one completed before the crash or the one
/// whose update was in flight.
fn check_hard_state(got: HardState, rec: &Record, point: usize) {
    let done = rec
        .hard
        .iter()
        .rposition(|&(_, end, _)| end <= point)
        .unwrap_or(0);
    let in_flight = rec.hard.get(done + 1).filter(|h| h.0 < point);
    assert!(
        got == rec.hard[done].2 || in_flight.is_some_and(|h| h.2 == got),
        "hard state {got:?} after {point} events: {:?}",
        rec.hard
    );
}

/// Appends to the recovered store, syncs, reopens its image, reads back.
fn keeps_working(store: ListStore, mut view: View) -> u64 {
    let last = store.last_index() + 1;
    let (k, v) = (b"after".to_vec(), b"the crash".to_vec());
    let put = |store: &ListStore| store.append(last, 9, Op::Put { key: &k, value: &v });
    if let Err(crate::StoreError::Full { .. }) = put(&store) {
        // The workload filled the pool: a compaction of what is applied makes
        // room, unless the live records fill it.
        store.set_applied(store.durable_index());
        store.compact().expect("a compaction after recovery");
        if let Err(crate::StoreError::Full { .. }) = put(&store) {
            return last - 1;
        }
    }
    assert_eq!(store.last_index(), last, "an append after recovery");
    store.sync().expect("a sync after recovery");
    view.0 = last;
    view.1.insert(k, v);
    let image = store
        .pool()
        .bytes(0, store.pool().len())
        .expect("the recovered pool's bytes")
        .to_vec();
    drop(store);
    let again = ListStore::recover(
        Pool::from_image(&image).expect("the continued image"),
        &options(),
    )
    .expect("reopening after the continuation");
    let got: View = (
        again.last_index(),
        again.dump(u64::MAX).expect("dump").into_iter().collect(),
    );
    assert_eq!(got, view, "the continuation was not read back");
    last
}
