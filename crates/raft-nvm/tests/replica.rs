//! The replica driver on real file stores (both engines), in a lock-step cluster
//! without faults: writes, conditional writes, deletes and reads come back with the
//! right answers on every replica; followers redirect; a lagging follower whose
//! needed entries left the leader's window catches up from the leader's store, or
//! through a snapshot that replaces its store once the leader compacted them away;
//! everything survives reopening.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use raft_nvm::machine::{Applied, KvMachine, MachineCall, MachineReply, StateMachine, StateView};
use raft_nvm::raft::{Config, Message, Role};
use raft_nvm::replica::{
    Engine, FileStoreProvider, Output, Replica, ReplicaConfig, ReplicaError, StartMode, Streamed,
};
use raft_nvm::service::{KvReply, KvRequest};
use raft_nvm::StoreError;
use raft_nvm::{ListOptions, WalOptions};

fn engine(kind: &str, dir: &Path, id: u16) -> Engine {
    match kind {
        "list" => Engine::List {
            path: dir.join(format!("node{id}.pool")),
            pool_size: 8 << 20,
            opts: ListOptions::default(),
        },
        _ => Engine::Wal {
            dir: dir.join(format!("node{id}.wal")),
            opts: WalOptions::default(),
        },
    }
}

struct Cluster {
    kind: &'static str,
    /// The state machine every replica runs, except `without_machine`.
    machine: Option<Arc<dyn StateMachine>>,
    without_machine: Option<u16>,
    /// Replicas that stopped with an error, and why.
    failed: BTreeMap<u16, String>,
    dir: tempfile::TempDir,
    nodes: BTreeMap<u16, Option<Replica>>,
    queue: VecDeque<Message>,
    replies: BTreeMap<u64, KvReply>,
    next_token: u64,
    window: usize,
}

impl Cluster {
    fn new(kind: &'static str, window: usize) -> Cluster {
        Cluster::with_machine(kind, window, None, None)
    }

    fn with_machine(
        kind: &'static str,
        window: usize,
        machine: Option<Arc<dyn StateMachine>>,
        without_machine: Option<u16>,
    ) -> Cluster {
        let mut c = Cluster {
            kind,
            machine,
            without_machine,
            failed: BTreeMap::new(),
            dir: tempfile::tempdir().expect("tempdir"),
            nodes: BTreeMap::new(),
            queue: VecDeque::new(),
            replies: BTreeMap::new(),
            next_token: 1,
            window,
        };
        for id in 1..=3 {
            let r = c.open(id);
            c.nodes.insert(id, Some(r));
        }
        c
    }

    fn open(&self, id: u16) -> Replica {
        // Bootstrap: the first open creates the store, later ones reopen it.
        self.open_with(id, StartMode::Bootstrap)
            .expect("open replica")
    }

    fn open_with(&self, id: u16, start: StartMode) -> Result<Replica, ReplicaError> {
        let mut raft = Config::new(id, vec![1, 2, 3]);
        raft.window_entries = self.window;
        raft.seed = u64::from(id) * 7919;
        let mut cfg = ReplicaConfig::new(
            raft,
            (1..=3)
                .map(|i| (i, format!("127.0.0.1:{}", 7000 + i)))
                .collect(),
        );
        if self.without_machine != Some(id) {
            cfg.machine = self.machine.clone();
        }
        let provider = FileStoreProvider::with_start(engine(self.kind, self.dir.path(), id), start);
        Replica::open(cfg, Box::new(provider))
    }

    /// Runs every node's output to quiescence (messages to stopped nodes are lost).
    fn settle(&mut self) {
        for _ in 0..10_000 {
            let mut progressed = false;
            let ids: Vec<u16> = self.nodes.keys().copied().collect();
            for id in ids {
                let Some(Some(r)) = self.nodes.get_mut(&id) else {
                    continue;
                };
                let mut out = Output::default();
                if let Err(e) = r.process(&mut out) {
                    assert!(
                        matches!(e, ReplicaError::NoMachine { .. }),
                        "node {id}: {e}"
                    );
                    self.failed.insert(id, e.to_string());
                    self.nodes.insert(id, None);
                    progressed = true;
                    continue;
                }
                for req in out.snapshots {
                    let store = r.store();
                    let (from, term) = (r.core().id(), r.core().term());
                    let streamed =
                        raft_nvm::replica::stream_snapshot(&*store, from, term, &req, 4096, |m| {
                            self.queue.push_back(m);
                            true
                        })
                        .expect("snapshot");
                    if streamed == Streamed::Stale {
                        r.report_snapshot_stale(req.to);
                    }
                    progressed = true;
                }
                progressed |= !out.messages.is_empty() || !out.replies.is_empty();
                self.queue.extend(out.messages);
                self.replies.extend(out.replies);
            }
            while let Some(m) = self.queue.pop_front() {
                progressed = true;
                if let Some(Some(r)) = self.nodes.get_mut(&m.to) {
                    r.step(m);
                }
            }
            if !progressed {
                return;
            }
        }
        panic!("cluster did not settle");
    }

    fn tick_until_leader(&mut self) -> u16 {
        for _ in 0..500 {
            for r in self.nodes.values_mut().flatten() {
                r.tick();
            }
            self.settle();
            let leaders: Vec<u16> = self
                .nodes
                .iter()
                .filter(|(_, r)| r.as_ref().is_some_and(|r| r.core().role() == Role::Leader))
                .map(|(&id, _)| id)
                .collect();
            if let [l] = leaders[..] {
                // Its no-op committed: reads may be served.
                if self.nodes[&l]
                    .as_ref()
                    .is_some_and(|r| r.core().commit_index() == r.core().last_index())
                {
                    return l;
                }
            }
        }
        panic!("no leader elected");
    }

    /// Reopens the stopped node `lagging` and ticks the cluster (at most `rounds`
    /// times) until it applied the last index of `leader`, which it returns.
    fn restart_and_catch_up(&mut self, lagging: u16, leader: u16, rounds: usize) -> u64 {
        let r = self.open(lagging);
        self.nodes.insert(lagging, Some(r));
        let leader_last = self.nodes[&leader]
            .as_ref()
            .map_or(0, |r| r.core().last_index());
        for _ in 0..rounds {
            for r in self.nodes.values_mut().flatten() {
                r.tick();
            }
            self.settle();
            if self.nodes[&lagging]
                .as_ref()
                .is_some_and(|r| r.store().applied() >= leader_last)
            {
                break;
            }
        }
        leader_last
    }

    fn call(&mut self, id: u16, req: KvRequest) -> KvReply {
        let token = self.next_token;
        self.next_token += 1;
        let r = self
            .nodes
            .get_mut(&id)
            .and_then(Option::as_mut)
            .expect("node up");
        if let Some(reply) = r.request(token, req) {
            return reply;
        }
        for _ in 0..100 {
            self.settle();
            if let Some(reply) = self.replies.remove(&token) {
                return reply;
            }
            for r in self.nodes.values_mut().flatten() {
                r.tick();
            }
        }
        panic!("no reply");
    }
}

fn set(k: &str, v: &str) -> KvRequest {
    KvRequest::Set {
        key: k.into(),
        value: v.into(),
    }
}

fn get(k: &str) -> KvRequest {
    KvRequest::Get { key: k.into() }
}

fn value(v: &str) -> KvReply {
    KvReply::Value(Some(v.into()))
}

fn semantics(kind: &'static str) {
    let mut c = Cluster::new(kind, 4096);
    let l = c.tick_until_leader();
    let follower = if l == 1 { 2 } else { 1 };
    assert_eq!(c.call(l, set("a", "1")), KvReply::Done);
    assert_eq!(c.call(l, get("a")), value("1"));
    assert_eq!(c.call(l, get("missing")), KvReply::Value(None));
    let cas = |expected: Option<&str>, new: &str| KvRequest::Cas {
        key: b"a".to_vec(),
        expected: expected.map(Into::into),
        new: new.into(),
    };
    assert_eq!(c.call(l, cas(Some("0"), "2")), KvReply::Swapped(false));
    assert_eq!(c.call(l, cas(Some("1"), "2")), KvReply::Swapped(true));
    assert_eq!(c.call(l, get("a")), value("2"));
    assert_eq!(
        c.call(
            l,
            KvRequest::Cas {
                key: b"new".to_vec(),
                expected: None,
                new: b"x".to_vec()
            }
        ),
        KvReply::Swapped(true)
    );
    assert_eq!(
        c.call(l, KvRequest::Delete { key: "a".into() }),
        KvReply::Deleted(true)
    );
    assert_eq!(
        c.call(l, KvRequest::Delete { key: "a".into() }),
        KvReply::Deleted(false)
    );
    assert_eq!(c.call(l, get("a")), KvReply::Value(None));
    match c.call(follower, set("b", "1")) {
        KvReply::NotLeader { leader } => {
            assert_eq!(leader, Some(format!("127.0.0.1:{}", 7000 + l)))
        }
        other => panic!("follower answered {other:?}"),
    }
    c.settle();
    match c.call(l, KvRequest::Info) {
        KvReply::Info(text) => {
            assert!(text.contains("role:leader"), "{text}");
            assert!(text.contains(&format!("storage_engine:{kind}")), "{text}");
            // Every follower, caught up: its match is the leader's last index.
            let last = c.nodes[&l].as_ref().expect("leader").core().last_index();
            for f in (1..=3u16).filter(|&f| f != l) {
                let line = format!("follower_{f}:match={last},lag=0");
                assert!(text.contains(&line), "{line} in {text}");
            }
        }
        other => panic!("{other:?}"),
    }
    match c.call(follower, KvRequest::Info) {
        KvReply::Info(text) => assert!(!text.contains("follower_"), "{text}"),
        other => panic!("{other:?}"),
    }
    let huge = "x".repeat(1 << 20);
    if kind == "list" {
        assert!(matches!(c.call(l, set("big", &huge)), KvReply::Rejected(_)));
    }
    // Every replica applied the same state; it survives reopening every node.
    c.settle();
    for id in 1..=3u16 {
        let r = c.nodes.get_mut(&id).and_then(Option::take).expect("node");
        drop(r);
        let r = c.open(id);
        let store = r.store();
        assert_eq!(store.get(b"a", store.last_index()).expect("get"), None);
        assert_eq!(
            store.latest(b"new").expect("latest").and_then(|v| v.value),
            Some(b"x".to_vec())
        );
        c.nodes.insert(id, Some(r));
    }
    let l = c.tick_until_leader();
    assert_eq!(c.call(l, get("new")), value("x"));
}

#[test]
fn list_replicas_answer_every_request_kind() {
    semantics("list");
}

#[test]
fn wal_replicas_answer_every_request_kind() {
    semantics("wal");
}

/// A follower stopped while the leader's window moved on catches up: from the
/// leader's store when it still holds the entries (the store is the log), through a
/// snapshot that replaces the follower's store when the leader compacted them away.
fn lagging_follower_catches_up(kind: &'static str, leader_compacts: bool) {
    let mut c = Cluster::new(kind, 16);
    let l = c.tick_until_leader();
    let lagging = if l == 3 { 2 } else { 3 };
    for i in 0..20 {
        assert_eq!(c.call(l, set(&format!("k{i}"), "old")), KvReply::Done);
    }
    c.settle();
    let stopped = c
        .nodes
        .get_mut(&lagging)
        .and_then(Option::take)
        .expect("node");
    drop(stopped);
    for i in 0..200 {
        assert_eq!(
            c.call(l, set(&format!("k{}", i % 50), &format!("v{i}"))),
            KvReply::Done
        );
    }
    if leader_compacts {
        let leader = c.nodes[&l].as_ref().expect("leader");
        let stats = leader.store().compact().expect("compact");
        assert!(stats.records_dropped > 0, "overwritten versions dropped");
    }
    let r = c.open(lagging);
    c.nodes.insert(lagging, Some(r));
    let leader_last = c.nodes[&l]
        .as_ref()
        .map(|r| r.core().last_index())
        .unwrap_or(0);
    for _ in 0..200 {
        for r in c.nodes.values_mut().flatten() {
            r.tick();
        }
        c.settle();
        let caught = c.nodes[&lagging]
            .as_ref()
            .is_some_and(|r| r.store().applied() >= leader_last);
        if caught {
            break;
        }
    }
    let r = c.nodes[&lagging].as_ref().expect("node");
    let store = r.store();
    assert!(store.applied() >= leader_last, "follower did not catch up");
    if leader_compacts {
        assert_eq!(
            store.entry(1).expect("entry"),
            None,
            "the follower's old log is gone: a snapshot replaced its store"
        );
    } else {
        assert!(
            store.entry(1).expect("entry").is_some(),
            "the follower kept its log and appended the leader's entries"
        );
        assert_eq!(
            store.entry(leader_last).expect("entry").map(|e| e.index),
            Some(leader_last)
        );
    }
    for i in 150..200 {
        assert_eq!(
            store
                .get(format!("k{}", i % 50).as_bytes(), store.applied())
                .expect("get"),
            Some(format!("v{i}").into_bytes())
        );
    }
    // The installed store is the one on disk.
    drop(store);
    let reopened = c
        .nodes
        .get_mut(&lagging)
        .and_then(Option::take)
        .expect("node");
    drop(reopened);
    let r = c.open(lagging);
    assert!(r.store().last_index() >= leader_last);
}

#[test]
fn list_lagging_follower_gets_entries_from_the_leaders_store() {
    lagging_follower_catches_up("list", false);
}

#[test]
fn wal_lagging_follower_gets_entries_from_the_leaders_store() {
    lagging_follower_catches_up("wal", false);
}

#[test]
fn list_lagging_follower_installs_a_snapshot() {
    lagging_follower_catches_up("list", true);
}

#[test]
fn wal_lagging_follower_installs_a_snapshot() {
    lagging_follower_catches_up("wal", true);
}

/// A follower whose store is deleted is refused without a start mode; told to
/// join, it comes back empty and passive, catches up (from the leader's store, or
/// through a snapshot once the leader compacted), and only then is a voter again,
/// on disk too.
fn wiped_follower_rejoins(kind: &'static str, leader_compacts: bool) {
    let mut c = Cluster::new(kind, 16);
    let l = c.tick_until_leader();
    let wiped = if l == 3 { 2 } else { 3 };
    for i in 0..100 {
        assert_eq!(
            c.call(l, set(&format!("k{}", i % 30), &format!("v{i}"))),
            KvReply::Done
        );
    }
    c.settle();
    drop(c.nodes.get_mut(&wiped).and_then(Option::take));
    let e = engine(kind, c.dir.path(), wiped);
    let path = e.store_path().to_path_buf();
    if path.is_dir() {
        std::fs::remove_dir_all(&path).expect("wipe");
    } else {
        std::fs::remove_file(&path).expect("wipe");
    }
    match c.open_with(wiped, StartMode::Existing) {
        Err(ReplicaError::Store(StoreError::NoStore { path: p })) => assert_eq!(p, path),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a wiped node started without being told to"),
    }
    assert!(!path.exists(), "the refusal wrote nothing");
    if leader_compacts {
        let leader = c.nodes[&l].as_ref().expect("leader");
        leader.store().compact().expect("compact");
    }
    let r = c.open_with(wiped, StartMode::Join).expect("join");
    assert!(r.core().is_catching_up());
    c.nodes.insert(wiped, Some(r));
    // The cluster goes on; a write makes the leader find the empty log.
    assert_eq!(c.call(l, set("after", "join")), KvReply::Done);
    let leader_last = c.nodes[&l].as_ref().map_or(0, |r| r.core().last_index());
    for _ in 0..200 {
        let done = c.nodes[&wiped]
            .as_ref()
            .is_some_and(|r| !r.core().is_catching_up() && r.store().applied() >= leader_last);
        if done {
            break;
        }
        for r in c.nodes.values_mut().flatten() {
            r.tick();
        }
        c.settle();
    }
    let r = c.nodes[&wiped].as_ref().expect("node");
    assert!(!r.core().is_catching_up(), "caught up");
    let store = r.store();
    assert!(store.applied() >= leader_last, "has the whole log");
    for i in 70..100 {
        assert_eq!(
            store
                .get(format!("k{}", i % 30).as_bytes(), store.applied())
                .expect("get"),
            Some(format!("v{i}").into_bytes())
        );
    }
    assert_eq!(
        store.get(b"after", store.applied()).expect("get"),
        Some(b"join".to_vec())
    );
    drop(store);
    // A member again, on disk: it reopens as an ordinary existing store.
    drop(c.nodes.get_mut(&wiped).and_then(Option::take));
    let r = c.open_with(wiped, StartMode::Existing).expect("reopen");
    assert!(!r.core().is_catching_up(), "the join is over for good");
}

#[test]
fn list_wiped_follower_rejoins_from_the_leaders_store() {
    wiped_follower_rejoins("list", false);
}

#[test]
fn wal_wiped_follower_rejoins_from_the_leaders_store() {
    wiped_follower_rejoins("wal", false);
}

#[test]
fn list_wiped_follower_rejoins_through_a_snapshot() {
    wiped_follower_rejoins("list", true);
}

#[test]
fn wal_wiped_follower_rejoins_through_a_snapshot() {
    wiped_follower_rejoins("wal", true);
}

/// Values larger than a list page (1 KiB here) go through the replicated service:
/// stored, read back, replicated from the leader's store to a lagging follower and
/// carried by a snapshot once the leader compacted; a value larger than the
/// engine (or a replication message) takes is refused with an error reply, and the
/// replica goes on.
#[test]
fn list_replicas_store_values_larger_than_a_page() {
    let big = |i: usize, n: usize| -> String {
        (0..n)
            .map(|j| char::from(b'a' + ((i * 7 + j * 13) % 26) as u8))
            .collect()
    };
    for leader_compacts in [false, true] {
        let mut c = Cluster::new("list", 16);
        let l = c.tick_until_leader();
        let lagging = if l == 3 { 2 } else { 3 };
        drop(c.nodes.get_mut(&lagging).and_then(Option::take));
        let sizes = [5_000, 50_000, 2_000, 20_000];
        // Six rounds: more entries than the leader's DRAM window (16) holds, so the
        // follower's catch-up reads them back from the leader's store.
        for round in 0..6 {
            for (i, &n) in sizes.iter().enumerate() {
                let reply = c.call(l, set(&format!("big{i}"), &big(round + i, n)));
                assert_eq!(reply, KvReply::Done, "round {round} value {i}");
            }
        }
        let refused = c.call(l, set("huge", &big(0, 400_000)));
        assert!(matches!(refused, KvReply::Rejected(_)), "{refused:?}");
        if leader_compacts {
            let leader = c.nodes[&l].as_ref().expect("leader");
            let stats = leader.store().compact().expect("compact");
            assert!(stats.records_dropped > 0, "{stats:?}");
        }
        let leader_last = c.restart_and_catch_up(lagging, l, 300);
        for (i, &n) in sizes.iter().enumerate() {
            let want = big(5 + i, n).into_bytes();
            assert_eq!(
                c.call(l, get(&format!("big{i}"))),
                KvReply::Value(Some(want.clone()))
            );
            let store = c.nodes[&lagging].as_ref().expect("follower").store();
            assert!(store.applied() >= leader_last, "the follower caught up");
            assert_eq!(
                store
                    .get(format!("big{i}").as_bytes(), store.applied())
                    .expect("get"),
                Some(want),
                "the follower holds value {i} (leader compacted: {leader_compacts})"
            );
        }
    }
}

/// `INCR key` (the write's bytes are the key) and `COUNT key` (the query's).
#[derive(Debug)]
struct Counter;

impl StateMachine for Counter {
    fn name(&self) -> &str {
        "counter"
    }
    fn parse(&self, _: &[Vec<u8>]) -> Option<Result<MachineCall, String>> {
        None
    }
    fn apply(&self, state: &StateView<'_>, key: &[u8]) -> Result<Applied, StoreError> {
        let now: u64 = state
            .get(key)?
            .and_then(|v| String::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(0);
        // The entry's own index is what `StateView::index` reports while applying.
        assert!(state.index() > 0);
        Ok(Applied::put(
            key,
            (now + 1).to_string(),
            MachineReply::Integer(now as i64 + 1),
        ))
    }
    fn query(&self, state: &StateView<'_>, key: &[u8]) -> Result<MachineReply, StoreError> {
        let v = state.get(key)?;
        Ok(MachineReply::Integer(v.map_or(0, |v| {
            String::from_utf8_lossy(&v).parse().unwrap_or(-1)
        })))
    }
}

fn incr(k: &str) -> KvRequest {
    KvRequest::Machine(MachineCall::Write(k.as_bytes().to_vec()))
}

fn count(k: &str) -> KvRequest {
    KvRequest::Machine(MachineCall::Read(k.as_bytes().to_vec()))
}

/// A reply of the native key-value path as the [`KvMachine`] path words it.
fn as_machine_reply(reply: KvReply) -> KvReply {
    KvReply::Machine(match reply {
        KvReply::Done => MachineReply::Ok,
        KvReply::Deleted(b) | KvReply::Swapped(b) => MachineReply::Integer(i64::from(b)),
        KvReply::Value(Some(v)) => MachineReply::Bulk(v),
        KvReply::Value(None) => MachineReply::Nil,
        other => panic!("unexpected native reply {other:?}"),
    })
}

/// The built-in key-value commands and [`KvMachine`] (the same commands through
/// the generic state machine path) give the same reply to every request of a
/// seeded random workload and leave the same map.
fn kv_machine_matches_native(kind: &'static str) {
    let mut native = Cluster::new(kind, 4096);
    let mut generic = Cluster::with_machine(kind, 4096, Some(Arc::new(KvMachine)), None);
    let (ln, lg) = (native.tick_until_leader(), generic.tick_until_leader());
    let mut rng = pmem_core::SplitMix64::new(0x9e37_79b9_7f4a_7c15);
    let mut next = move |n: u64| rng.below(n);
    let mut swaps = 0;
    for i in 0..400 {
        let key = format!("k{}", next(12)).into_bytes();
        let req = match next(5) {
            0 => KvRequest::Get { key },
            1 => KvRequest::Delete { key },
            2 => KvRequest::Cas {
                key,
                expected: Some(format!("v{}", next(40)).into_bytes()),
                new: format!("c{i}").into_bytes(),
            },
            _ => KvRequest::Set {
                key,
                value: format!("v{}", next(40)).into_bytes(),
            },
        };
        let want = as_machine_reply(native.call(ln, req.clone()));
        swaps += u32::from(matches!(
            (&req, &want),
            (
                KvRequest::Cas { .. },
                KvReply::Machine(MachineReply::Integer(1))
            )
        ));
        let call = KvMachine::call(&req).expect("a key-value call");
        assert_eq!(generic.call(lg, KvRequest::Machine(call)), want, "{req:?}");
    }
    assert!(swaps > 0, "the workload exercised successful swaps");
    native.settle();
    generic.settle();
    for k in 0..12 {
        let key = format!("k{k}").into_bytes();
        for id in 1..=3u16 {
            let a = native.nodes[&id].as_ref().expect("node").store();
            let b = generic.nodes[&id].as_ref().expect("node").store();
            assert_eq!(
                a.latest(&key).expect("latest").and_then(|v| v.value),
                b.latest(&key).expect("latest").and_then(|v| v.value),
                "node {id} key k{k}"
            );
        }
    }
    match generic.call(lg, KvRequest::Info) {
        KvReply::Info(text) => assert!(text.contains("state_machine:kv"), "{text}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn list_kv_machine_matches_the_native_commands() {
    kv_machine_matches_native("list");
}

#[test]
fn wal_kv_machine_matches_the_native_commands() {
    kv_machine_matches_native("wal");
}

/// A custom machine's writes reach a follower that was stopped while they were
/// made, from the leader's store (decided entries) or through a snapshot of the
/// compacted store; every replica holds the same counts, which survive
/// reopening, and queries are served at the applied index.
fn machine_writes_reach_a_lagging_follower(kind: &'static str, leader_compacts: bool) {
    let mut c = Cluster::with_machine(kind, 16, Some(Arc::new(Counter)), None);
    let l = c.tick_until_leader();
    let lagging = if l == 3 { 2 } else { 3 };
    assert_eq!(
        c.call(l, incr("a")),
        KvReply::Machine(MachineReply::Integer(1))
    );
    c.settle();
    let stopped = c.nodes.get_mut(&lagging).and_then(Option::take);
    drop(stopped);
    for i in 0..150 {
        let key = ["a", "b", "c"][i % 3];
        assert!(matches!(
            c.call(l, incr(key)),
            KvReply::Machine(MachineReply::Integer(_))
        ));
    }
    assert_eq!(
        c.call(l, count("a")),
        KvReply::Machine(MachineReply::Integer(51))
    );
    assert_eq!(
        c.call(l, count("zzz")),
        KvReply::Machine(MachineReply::Integer(0))
    );
    if leader_compacts {
        let leader = c.nodes[&l].as_ref().expect("leader");
        let stats = leader.store().compact().expect("compact");
        assert!(stats.records_dropped > 0, "overwritten counts dropped");
    }
    let leader_last = c.restart_and_catch_up(lagging, l, 200);
    let first = c.nodes[&lagging].as_ref().expect("node").store().entry(1);
    assert_eq!(
        first.expect("entry").is_none(),
        leader_compacts,
        "a snapshot replaced the follower's log exactly when the leader compacted"
    );
    for id in 1..=3u16 {
        let applied = c.nodes[&id].as_ref().expect("node").store().applied();
        assert!(applied >= leader_last, "node {id} caught up");
        let r = c.nodes.get_mut(&id).and_then(Option::take).expect("node");
        drop(r);
        // Reopened: the counts are in the store (the applied index is learned
        // again from the leader, so read at the last entry).
        let r = c.open(id);
        let store = r.store();
        assert!(
            store.last_index() >= leader_last,
            "node {id} kept its entries"
        );
        for (key, want) in [("a", "51"), ("b", "50"), ("c", "50")] {
            assert_eq!(
                store.get(key.as_bytes(), store.last_index()).expect("get"),
                Some(want.as_bytes().to_vec()),
                "node {id} key {key}"
            );
        }
        c.nodes.insert(id, Some(r));
    }
    let l = c.tick_until_leader();
    assert_eq!(
        c.call(l, incr("a")),
        KvReply::Machine(MachineReply::Integer(52))
    );
    assert!(c.failed.is_empty(), "{:?}", c.failed);
}

#[test]
fn list_machine_writes_reach_a_lagging_follower_from_the_store() {
    machine_writes_reach_a_lagging_follower("list", false);
}

#[test]
fn list_machine_writes_reach_a_lagging_follower_through_a_snapshot() {
    machine_writes_reach_a_lagging_follower("list", true);
}

#[test]
fn wal_machine_writes_reach_a_lagging_follower_through_a_snapshot() {
    machine_writes_reach_a_lagging_follower("wal", true);
}

/// A replica without the cluster's machine stops at the first machine entry it
/// must append (it cannot know what the entry writes) instead of diverging; a
/// node without a machine refuses machine calls from clients.
#[test]
fn a_replica_without_the_machine_stops_instead_of_diverging() {
    let mut c = Cluster::with_machine("list", 4096, Some(Arc::new(Counter)), Some(3));
    let l = c.tick_until_leader();
    if l == 3 {
        assert!(matches!(c.call(3, incr("a")), KvReply::Rejected(_)));
        return;
    }
    assert_eq!(
        c.call(l, incr("a")),
        KvReply::Machine(MachineReply::Integer(1))
    );
    c.settle();
    let why = c.failed.get(&3).expect("node 3 stopped");
    assert!(why.contains("no state machine"), "{why}");
    // The two replicas with the machine go on.
    assert_eq!(
        c.call(l, incr("a")),
        KvReply::Machine(MachineReply::Integer(2))
    );

    let mut plain = Cluster::new("list", 4096);
    let l = plain.tick_until_leader();
    assert!(matches!(plain.call(l, incr("a")), KvReply::Rejected(_)));
}
