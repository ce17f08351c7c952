//! Snapshot installation streams into the staging store and resumes, on
//! real file stores of both engines, in a lock-step cluster that delivers one
//! message at a time and processes its recipient at once (as a node steps one
//! snapshot chunk per process):
//!
//! - the follower installs a snapshot of many chunks while holding at most two of
//!   them in DRAM (the provider's [`ChunkGauge`]);
//! - a chunk lost mid-stream makes the follower ask for the missing chunk, and the
//!   leader's next stream starts there, not at chunk 0;
//! - a stream cut short (a lost connection: the leader's driver stops and reports
//!   the failure) resumes at the first chunk the follower lacks, from the progress
//!   the follower reported;
//! - a follower restarted mid-installation holds nothing of it any more: it refuses
//!   the resumed stream, the leader starts over, and no staging store is left.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use raft_nvm::raft::{Config, Message, MessageBody, Role};
use raft_nvm::replica::{
    stream_snapshot, ChunkGauge, Engine, FileStoreProvider, Output, Replica, ReplicaConfig,
    StartMode, Streamed,
};
use raft_nvm::service::{KvReply, KvRequest};
use raft_nvm::{ListOptions, WalOptions};

/// Bytes per snapshot chunk: small, so the snapshot has dozens of chunks.
const CHUNK_BYTES: usize = 2048;

/// Keys in the snapshot (values of about 400 bytes: some 30 chunks).
const KEYS: usize = 150;

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

/// What the harness does to the next snapshot stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Deliver every chunk.
    None,
    /// Lose chunk `n` (the rest of the stream arrives).
    Lose(u32),
    /// The connection breaks after `n` chunks: the driver stops and reports it.
    CutAfter(u32),
}

/// One snapshot stream the leader's driver ran.
#[derive(Debug)]
struct StreamLog {
    /// The chunk it resumed at (`None`: a whole snapshot).
    resumed_at: Option<u32>,
    /// The sequence numbers it sent.
    seqs: Vec<u32>,
}

struct Cluster {
    kind: &'static str,
    dir: tempfile::TempDir,
    nodes: BTreeMap<u16, Option<Replica>>,
    gauges: BTreeMap<u16, Arc<ChunkGauge>>,
    queue: VecDeque<Message>,
    replies: BTreeMap<u64, KvReply>,
    next_token: u64,
    fault: Fault,
    streams: Vec<StreamLog>,
    /// Restart this node once its installer took this many chunks.
    restart_after: Option<(u16, usize)>,
    /// Whether its staging store existed when it was restarted.
    staged_at_restart: Option<bool>,
}

impl Cluster {
    fn new(kind: &'static str) -> Cluster {
        let mut c = Cluster {
            kind,
            dir: tempfile::tempdir().expect("tempdir"),
            nodes: BTreeMap::new(),
            gauges: BTreeMap::new(),
            queue: VecDeque::new(),
            replies: BTreeMap::new(),
            next_token: 1,
            fault: Fault::None,
            streams: Vec::new(),
            restart_after: None,
            staged_at_restart: None,
        };
        for id in 1..=3 {
            c.start(id);
        }
        c
    }

    /// Opens node `id` (creating its store the first time).
    fn start(&mut self, id: u16) {
        let mut raft = Config::new(id, vec![1, 2, 3]);
        raft.window_entries = 16;
        raft.seed = u64::from(id) * 7919;
        let cfg = ReplicaConfig::new(
            raft,
            (1..=3)
                .map(|i| (i, format!("127.0.0.1:{}", 7000 + i)))
                .collect(),
        );
        let provider = FileStoreProvider::with_start(
            engine(self.kind, self.dir.path(), id),
            StartMode::Bootstrap,
        );
        self.gauges.insert(id, provider.chunk_gauge());
        let r = Replica::open(cfg, Box::new(provider)).expect("open replica");
        self.nodes.insert(id, Some(r));
    }

    fn stop(&mut self, id: u16) {
        let r = self.nodes.get_mut(&id).and_then(Option::take);
        drop(r);
    }

    fn staging(&self, id: u16) -> PathBuf {
        let store = engine(self.kind, self.dir.path(), id)
            .store_path()
            .to_path_buf();
        let mut name = store.file_name().expect("store name").to_os_string();
        name.push(".incoming");
        store.with_file_name(name)
    }

    /// Processes node `id` and carries out its output (snapshot streams through
    /// the current fault).
    fn process(&mut self, id: u16) {
        let Some(Some(r)) = self.nodes.get_mut(&id) else {
            return;
        };
        let mut out = Output::default();
        r.process(&mut out).expect("process");
        self.queue.extend(out.messages);
        self.replies.extend(out.replies);
        for req in out.snapshots {
            let store = r.store();
            let (from, term) = (r.core().id(), r.core().term());
            let fault = std::mem::replace(&mut self.fault, Fault::None);
            let mut log = StreamLog {
                resumed_at: req.resume.map(|x| x.seq),
                seqs: Vec::new(),
            };
            let queue = &mut self.queue;
            let streamed = stream_snapshot(&*store, from, term, &req, CHUNK_BYTES, |m| {
                let MessageBody::SnapshotChunk { seq, .. } = &m.body else {
                    panic!("a snapshot stream sends chunks");
                };
                let seq = *seq;
                match fault {
                    Fault::CutAfter(n) if log.seqs.len() as u32 >= n => return false,
                    Fault::Lose(n) if seq == n => {}
                    _ => queue.push_back(m),
                }
                log.seqs.push(seq);
                true
            })
            .expect("snapshot stream");
            match streamed {
                Streamed::Sent { .. } => {}
                Streamed::Stopped { .. } => r.report_snapshot_failed(req.to),
                Streamed::Stale => r.report_snapshot_stale(req.to),
            }
            self.streams.push(log);
        }
    }

    /// Delivers messages one at a time, processing each recipient at once, until
    /// nothing moves.
    fn settle(&mut self) {
        for id in 1..=3 {
            self.process(id);
        }
        for _ in 0..100_000 {
            let Some(m) = self.queue.pop_front() else {
                return;
            };
            let to = m.to;
            if let Some(Some(r)) = self.nodes.get_mut(&to) {
                r.step(m);
                self.process(to);
            }
            if let Some((id, n)) = self.restart_after {
                if id == to && self.gauges[&id].chunks() >= n {
                    self.restart_after = None;
                    self.staged_at_restart = Some(self.staging(id).exists());
                    self.stop(id);
                    self.start(id);
                }
            }
        }
        panic!("cluster did not settle");
    }

    fn tick(&mut self) {
        for r in self.nodes.values_mut().flatten() {
            r.tick();
        }
        self.settle();
    }

    fn tick_until_leader(&mut self) -> u16 {
        for _ in 0..500 {
            self.tick();
            let leaders: Vec<u16> = self
                .nodes
                .iter()
                .filter(|(_, r)| r.as_ref().is_some_and(|r| r.core().role() == Role::Leader))
                .map(|(&id, _)| id)
                .collect();
            if let [l] = leaders[..] {
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

    fn set(&mut self, id: u16, key: String, value: Vec<u8>) {
        let token = self.next_token;
        self.next_token += 1;
        let r = self
            .nodes
            .get_mut(&id)
            .and_then(Option::as_mut)
            .expect("node up");
        if let Some(reply) = r.request(
            token,
            KvRequest::Set {
                key: key.into_bytes(),
                value,
            },
        ) {
            panic!("immediate reply {reply:?}");
        }
        for _ in 0..100 {
            self.settle();
            if let Some(reply) = self.replies.remove(&token) {
                assert_eq!(reply, KvReply::Done);
                return;
            }
            self.tick();
        }
        panic!("no reply");
    }

    fn applied(&self, id: u16) -> u64 {
        self.nodes[&id].as_ref().map_or(0, |r| r.store().applied())
    }
}

fn value(i: usize, round: usize) -> Vec<u8> {
    format!("{round}:{i}:{}", "x".repeat(400)).into_bytes()
}

/// A cluster whose follower `lagging` was down while every key was overwritten
/// twice and the leader compacted: it needs a snapshot of [`KEYS`] keys (dozens of chunks),
/// which starts streaming once it is back and the leader ticks.
fn lagging_follower(kind: &'static str) -> (Cluster, u16, u16) {
    let mut c = Cluster::new(kind);
    let l = c.tick_until_leader();
    let lagging = if l == 3 { 2 } else { 3 };
    for i in 0..KEYS {
        c.set(l, format!("k{i:04}"), value(i, 0));
    }
    c.stop(lagging);
    // Two rounds: the entries of the first are overwritten, and compacted away.
    for round in 1..=2 {
        for i in 0..KEYS {
            c.set(l, format!("k{i:04}"), value(i, round));
        }
    }
    let leader = c.nodes[&l].as_ref().expect("leader");
    let stats = leader.store().compact().expect("compact");
    assert!(stats.records_dropped > 0, "overwritten versions dropped");
    c.start(lagging);
    (c, l, lagging)
}

/// Ticks until `lagging` applied the leader's last index; returns the ticks.
fn catch_up(c: &mut Cluster, l: u16, lagging: u16) -> usize {
    let last = c.nodes[&l].as_ref().map_or(0, |r| r.core().last_index());
    for ticks in 0..300 {
        if c.applied(lagging) >= last {
            return ticks;
        }
        c.tick();
    }
    panic!(
        "follower stuck at {} < {last}; streams: {:?}",
        c.applied(lagging),
        c.streams
    );
}

/// Every key holds its last (round-2) value in `id`'s store.
fn check_data(c: &Cluster, id: u16) {
    let store = c.nodes[&id].as_ref().expect("up").store();
    assert_eq!(
        store.entry(1).expect("entry"),
        None,
        "a snapshot replaced the log"
    );
    for i in 0..KEYS {
        let got = store
            .get(format!("k{i:04}").as_bytes(), store.applied())
            .expect("get");
        assert_eq!(got, Some(value(i, 2)), "k{i:04}");
    }
}

fn streams_in_dram(kind: &'static str) {
    let (mut c, l, lagging) = lagging_follower(kind);
    catch_up(&mut c, l, lagging);
    check_data(&c, lagging);
    assert_eq!(c.streams.len(), 1, "one whole stream: {:?}", c.streams);
    let n = c.streams[0].seqs.len();
    assert!(n >= 20, "a snapshot of many chunks ({n})");
    let gauge = &c.gauges[&lagging];
    assert_eq!(gauge.chunks(), n, "every chunk went through the installer");
    assert!(
        (1..=2).contains(&gauge.peak()),
        "at most two of {n} chunks held at once (peak {})",
        gauge.peak()
    );
    assert_eq!(gauge.held(), 0);
    assert!(
        !c.staging(lagging).exists(),
        "the staging store became the store"
    );
}

#[test]
fn list_follower_holds_at_most_two_chunks() {
    streams_in_dram("list");
}

#[test]
fn wal_follower_holds_at_most_two_chunks() {
    streams_in_dram("wal");
}

fn resumes_after_a_lost_chunk(kind: &'static str) {
    let (mut c, l, lagging) = lagging_follower(kind);
    c.fault = Fault::Lose(7);
    catch_up(&mut c, l, lagging);
    check_data(&c, lagging);
    assert_eq!(c.streams.len(), 2, "one resumed stream: {:?}", c.streams);
    let n = c.streams[0].seqs.len() as u32;
    assert_eq!(c.streams[0].resumed_at, None);
    assert_eq!(
        c.streams[1].resumed_at,
        Some(7),
        "resumed at the lost chunk"
    );
    assert_eq!(
        c.streams[1].seqs,
        (7..n).collect::<Vec<u32>>(),
        "the second stream sends chunks 7.. only"
    );
    let sent: usize = c.streams.iter().map(|s| s.seqs.len()).sum();
    assert!(
        sent < 2 * n as usize - 6,
        "{sent} chunks sent for a snapshot of {n}"
    );
    assert!(c.gauges[&lagging].peak() <= 2);
    assert!(!c.staging(lagging).exists());
}

#[test]
fn list_lost_chunk_resumes_there() {
    resumes_after_a_lost_chunk("list");
}

#[test]
fn wal_lost_chunk_resumes_there() {
    resumes_after_a_lost_chunk("wal");
}

fn resumes_after_a_broken_stream(kind: &'static str) {
    let (mut c, l, lagging) = lagging_follower(kind);
    c.fault = Fault::CutAfter(10);
    catch_up(&mut c, l, lagging);
    check_data(&c, lagging);
    assert_eq!(c.streams.len(), 2, "one resumed stream: {:?}", c.streams);
    assert_eq!(c.streams[0].seqs, (0..10).collect::<Vec<u32>>());
    // The leader resumes at the last progress it heard of: here it may decide
    // before the follower's reports of all ten chunks arrived (the follower skips
    // what it already holds), never at 0.
    let at = c.streams[1].resumed_at.expect("resumed");
    assert!((1..=10).contains(&at), "resumed at {at}");
    let n = c.streams[1].seqs.last().map_or(0, |l| l + 1);
    assert_eq!(c.streams[1].seqs, (at..n).collect::<Vec<u32>>());
    assert!(!c.staging(lagging).exists());
}

#[test]
fn list_broken_stream_resumes_where_it_broke() {
    resumes_after_a_broken_stream("list");
}

#[test]
fn wal_broken_stream_resumes_where_it_broke() {
    resumes_after_a_broken_stream("wal");
}

/// A follower restarted mid-installation: the resumed stream is refused, the
/// leader starts over, and the staging store left by the first attempt is gone.
#[test]
fn list_restarted_follower_starts_over() {
    let (mut c, l, lagging) = lagging_follower("list");
    c.fault = Fault::CutAfter(10);
    c.restart_after = Some((lagging, 10));
    catch_up(&mut c, l, lagging);
    assert_eq!(
        c.staged_at_restart,
        Some(true),
        "restarted during the installation"
    );
    check_data(&c, lagging);
    let resumed: Vec<Option<u32>> = c.streams.iter().map(|s| s.resumed_at).collect();
    assert_eq!(
        resumed.first(),
        Some(&None),
        "the first stream is whole: {resumed:?}"
    );
    assert_eq!(
        resumed.last(),
        Some(&None),
        "the installing stream started over: {resumed:?}"
    );
    assert!(!c.staging(lagging).exists(), "no staging store left");
    assert!(
        resumed.iter().any(Option::is_some),
        "the leader tried to resume first: {resumed:?}"
    );
}
