//! Crash-simulator tests of the adapter's durable paths on the list: `append`
//! (with its `IOFlushed` callback), `save_vote`, `truncate_after` and `purge`,
//! against a model.
//!
//! A scripted workload runs openraft's storage calls on a simulated pool, each
//! call one numbered operation. Every crash image is recovered (the list's own
//! recovery, then the adapter over it) and read back through openraft's read
//! path (`read_vote`, `get_log_state`, `try_get_log_entries`). The checker holds
//! it to the model after the completed operations, or — for the operation in
//! flight — after any prefix of it (an append's batch becomes durable as a
//! prefix):
//!
//! - no entry of an append whose `IOFlushed` fired is lost (the workload checks
//!   that the callback fired, with success, before the call returned, so every
//!   completed append was acknowledged);
//! - no saved vote is lost (`save_vote` is durable when it returns);
//! - a truncated suffix never comes back (the recovered log above its base must
//!   equal the model's entry for entry: an old entry at a truncated index differs
//!   in its leader id or payload);
//! - the purged prefix is consistent: the recovered base (the last purged log
//!   id after a restart) is never above what openraft purged, and every entry
//!   above it is there.

use std::collections::BTreeMap;
use std::sync::Arc;

use openraft::impls::leader_id_adv::LeaderId;
use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage, RaftStateMachine};
use openraft::type_config::TypeConfigExt;
use openraft::EntryPayload;
use openraft_list::{Entry, ListRaftStore, LogId, Request, TypeConfig, Vote};
use pmem_core::sim::{CrashInfo, CrashTest, Model};
use pmem_core::Pool;
use raft_nvm::replica::CompactionPolicy;
use raft_nvm::{ListOptions, ListStore, Store, StoreOptions};

const POOL: u64 = 64 * 1024;

fn opts() -> ListOptions {
    ListOptions {
        // The adapter syncs once per append call; the store never syncs by itself
        // within the workload.
        store: StoreOptions {
            group: 1000,
            sync_interval: None,
        },
        page_size: 256,
        ..ListOptions::default()
    }
}

fn lid(term: u64, node: u64, index: u64) -> LogId {
    LogId::new(
        LeaderId {
            term,
            node_id: node,
        },
        index,
    )
}

fn set(term: u64, index: u64, key: &str) -> Entry {
    Entry {
        log_id: lid(term, 1, index),
        payload: EntryPayload::Normal(Request::Set {
            key: key.as_bytes().to_vec(),
            value: format!("{key}-value-at-{index}-term-{term}").into_bytes(),
        }),
    }
}

fn blank(term: u64, index: u64) -> Entry {
    Entry {
        log_id: lid(term, 1, index),
        payload: EntryPayload::Blank,
    }
}

fn vote(term: u64, node: u64, committed: bool) -> Vote {
    Vote {
        leader_id: LeaderId {
            term,
            node_id: node,
        },
        committed,
    }
}

/// One storage call of the workload.
#[derive(Clone, Debug)]
enum Call {
    Vote(Vote),
    Append(Vec<Entry>),
    Truncate(Option<LogId>),
    /// Applies the entries up to this index (DRAM only: no durable effect).
    Apply(u64),
    Purge(LogId),
}

fn script() -> Vec<Call> {
    use Call::*;
    vec![
        Vote(vote(1, 1, false)),
        Append(vec![blank(1, 0), set(1, 1, "a"), set(1, 2, "b")]),
        Append(vec![set(1, 3, "c"), set(1, 4, "a")]),
        Vote(vote(2, 2, true)),
        // A new leader discards 3 and 4 and writes its own.
        Truncate(Some(lid(1, 1, 2))),
        Append(vec![
            blank(2, 3),
            set(2, 4, "d"),
            set(2, 5, "b"),
            set(2, 6, "e"),
        ]),
        Append(
            (7..14)
                .map(|i| set(2, i, ["a", "b", "g"][i as usize % 3]))
                .collect(),
        ),
        // Applied well past what is purged: compaction could drop more than
        // openraft purged, and must not.
        Apply(12),
        Purge(lid(2, 1, 3)),
        Append(vec![set(2, 14, "a")]),
        Vote(vote(3, 1, true)),
        Truncate(Some(lid(2, 1, 13))),
        Append(vec![set(3, 14, "f")]),
    ]
}

/// What openraft reads back.
#[derive(Clone, Debug, PartialEq)]
struct View {
    vote: Option<Vote>,
    /// The index of the last purged entry.
    purged: Option<u64>,
    /// The entries above it.
    entries: Vec<Entry>,
}

/// The model after some calls (and, of the next call, its first `part` entries if
/// it is an append).
#[derive(Clone, Debug, Default)]
struct State {
    vote: Option<Vote>,
    log: BTreeMap<u64, Entry>,
    purged: Option<u64>,
}

impl State {
    fn step(&mut self, call: &Call, part: Option<usize>) {
        match call {
            Call::Vote(v) => self.vote = Some(*v),
            Call::Append(es) => {
                for e in es.iter().take(part.unwrap_or(es.len())) {
                    self.log.insert(e.log_id.index, e.clone());
                }
            }
            Call::Truncate(after) => {
                let keep = after.map_or(0, |l| l.index + 1);
                self.log.retain(|&i, _| i < keep);
            }
            Call::Apply(_) => {}
            Call::Purge(id) => self.purged = self.purged.max(Some(id.index)),
        }
    }

    /// Whether `v` is what this state may recover as.
    fn admits(&self, v: &View) -> Result<(), String> {
        if v.vote != self.vote {
            return Err(format!("vote {:?}, model {:?}", v.vote, self.vote));
        }
        // The recovered base may lag what was purged (compaction drops only what
        // it may), never pass it.
        if v.purged > self.purged {
            return Err(format!(
                "purged up to {:?}, past the model's {:?}",
                v.purged, self.purged
            ));
        }
        let above: Vec<&Entry> = self
            .log
            .values()
            .filter(|e| v.purged.is_none_or(|p| e.log_id.index > p))
            .collect();
        let got: Vec<&Entry> = v.entries.iter().collect();
        if got != above {
            return Err(format!(
                "log {:?}, model {:?}",
                got.iter().map(|e| e.log_id).collect::<Vec<_>>(),
                above.iter().map(|e| e.log_id).collect::<Vec<_>>()
            ));
        }
        Ok(())
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())
}

/// Runs `call` on the adapter; an append must have fired its callback, with
/// success, before it returns.
async fn run_call(s: &mut ListRaftStore, call: &Call) -> Result<(), String> {
    let e = |x: std::io::Error| x.to_string();
    match call {
        Call::Vote(v) => s.save_vote(v).await.map_err(e),
        Call::Append(es) => {
            // The call completes when openraft would learn that it is durable: when
            // IOFlushed fires (inline, before `append` returns; with the flusher,
            // from its thread after the sync).
            let (tx, rx) = TypeConfig::oneshot();
            s.append(es.clone(), IOFlushed::signal(tx))
                .await
                .map_err(e)?;
            match rx.await {
                Ok(Ok(())) => Ok(()),
                other => Err(format!("IOFlushed did not fire with success: {other:?}")),
            }
        }
        Call::Truncate(after) => s.truncate_after(*after).await.map_err(e),
        Call::Apply(upto) => {
            let mut log = s.get_log_reader().await;
            let entries = log.try_get_log_entries(..=*upto).await.map_err(e)?;
            let items = entries.into_iter().map(|x| Ok((x, None)));
            s.apply(futures_util::stream::iter(items)).await.map_err(e)
        }
        Call::Purge(id) => s.purge(*id).await.map_err(e),
    }
}

fn recover(pool: Pool) -> Result<View, String> {
    let store = ListStore::recover(pool, &opts()).map_err(|e| format!("recovery: {e}"))?;
    let mut s =
        ListRaftStore::from_store(Arc::new(store) as Arc<dyn Store>).map_err(|e| e.to_string())?;
    runtime()?.block_on(async move {
        let e = |x: std::io::Error| x.to_string();
        let vote = s.read_vote().await.map_err(e)?;
        let state = s.get_log_state().await.map_err(e)?;
        let entries = s.try_get_log_entries(..).await.map_err(e)?;
        Ok(View {
            vote,
            purged: state.last_purged_log_id.map(|l| l.index),
            entries,
        })
    })
}

fn check(calls: &[Call], got: &View, info: &CrashInfo) -> Result<(), String> {
    let mut before = State::default();
    for c in &calls[..info.completed_ops as usize] {
        before.step(c, None);
    }
    let mut errors = vec![("before the call in flight".to_string(), before.admits(got))];
    if let Some(&n) = info.in_flight.first() {
        let call = &calls[n as usize];
        let parts = match call {
            Call::Append(es) => (1..=es.len()).collect(),
            _ => vec![usize::MAX],
        };
        for part in parts {
            let mut after = before.clone();
            after.step(call, Some(part));
            errors.push((format!("{part} of call {n} ({call:?})"), after.admits(got)));
        }
    }
    if errors.iter().any(|(_, r)| r.is_ok()) {
        return Ok(());
    }
    Err(format!(
        "crash point {} (completed {}, in flight {:?}): {}",
        info.point_index,
        info.completed_ops,
        info.in_flight,
        errors
            .into_iter()
            .map(|(w, r)| format!("[{w}: {}]", r.err().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(" ")
    ))
}

/// `OPENRAFT_LIST_CHECKERS_ONLY=1`: the simulator's lints off (and the test's
/// check of its own premise that the purge compacts), so a broken adapter is shown
/// to be caught by the model checker alone.
fn checkers_only() -> bool {
    std::env::var_os("OPENRAFT_LIST_CHECKERS_ONLY").is_some_and(|v| v == "1")
}

fn crash_suite(model: Model, flusher: bool) -> Result<pmem_core::sim::Report, String> {
    let calls = script();
    let for_check = calls.clone();
    CrashTest::new(ListStore::pool_options(POOL, &opts()))
        .model(model)
        .deny_correctness_lints(!checkers_only())
        .run(
            |pool| ListStore::write_format(pool, &opts()).map_err(|e| e.to_string()),
            move |pool, sim| {
                let store = ListStore::recover(pool, &opts()).map_err(|e| e.to_string())?;
                let mut s =
                    ListRaftStore::from_store_with(Arc::new(store) as Arc<dyn Store>, flusher)
                        .map_err(|e| e.to_string())?;
                // With the flusher, its thread waits after each callback until the
                // workload has seen it (and ended the call): a callback fired before
                // its sync then ends the call before the fence, where a crash shows
                // the loss.
                s.set_ack_pause(std::time::Duration::from_millis(20));
                // Every purge compacts (the default policy would wait for a fuller
                // pool): the crash points inside compaction are the ones to cover.
                s.set_compaction_policy(CompactionPolicy {
                    min_fill: 0.0,
                    min_dead: 0.0,
                    check_every: 0,
                    ..CompactionPolicy::default()
                });
                let rt = runtime()?;
                for (n, call) in calls.iter().enumerate() {
                    sim.op(n as u32, || rt.block_on(run_call(&mut s, call)))?;
                    if matches!(call, Call::Purge(_)) && !checkers_only() {
                        // The purge compacted for real (else the checker's purge
                        // rule would hold vacuously): entry 0's record is gone.
                        let e = s.store().entry(1).map_err(|e| e.to_string())?;
                        if e.is_some() {
                            return Err("the purge compacted nothing".into());
                        }
                    }
                }
                Ok(())
            },
            recover,
            move |got, info| check(&for_check, got, info),
        )
        .map_err(|f| f.to_string())
}

#[test]
fn acknowledged_entries_and_votes_survive_and_truncations_stay() {
    let report = crash_suite(Model::Line, false).unwrap_or_else(|f| panic!("{f}"));
    eprintln!("{report:?}");
    assert!(report.images_checked >= 20, "{report:?}");
}

/// The same with the flusher thread making the groups durable (as on a file or
/// the WAL): the callback fires from that thread, after its sync.
#[test]
fn the_same_with_the_flusher_thread() {
    let report = crash_suite(Model::Line, true).unwrap_or_else(|f| panic!("{f}"));
    eprintln!("{report:?}");
    assert!(report.images_checked >= 20, "{report:?}");
}

#[test]
fn the_same_in_the_word_model() {
    let report = crash_suite(Model::Word, false).unwrap_or_else(|f| panic!("{f}"));
    assert!(report.images_checked >= 20, "{report:?}");
}
