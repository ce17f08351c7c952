//! A store that never stops the cluster: a full pool refuses writes with
//! `OutOfMemory` (`-OOM` over RESP) while reads go on and every replica keeps
//! processing; deletes and a compaction make room again; the compaction policy
//! keeps an overwrite workload alive on a small pool that fills without it; a
//! follower whose pool is smaller than the leader's drops what does not fit and
//! catches up once its emergency compaction frees space.

#[cfg(feature = "server")]
mod single_node;

use std::collections::{BTreeMap, VecDeque};

use raft_nvm::raft::{Config, Message, Role};
use raft_nvm::replica::{
    CompactionPolicy, Engine, FileStoreProvider, Output, Replica, ReplicaConfig, StartMode,
};
use raft_nvm::service::{KvReply, KvRequest};
use raft_nvm::ListOptions;

/// One node's pool and policy.
#[derive(Clone)]
struct NodeSpec {
    pool_size: u64,
    page_size: u32,
    policy: CompactionPolicy,
    reserve: f64,
}

/// A lock-step cluster of list replicas, as in `tests/replica.rs`, whose driver
/// also runs the compactions the replicas ask for.
struct Cluster {
    dir: tempfile::TempDir,
    specs: BTreeMap<u16, NodeSpec>,
    nodes: BTreeMap<u16, Replica>,
    queue: VecDeque<Message>,
    replies: BTreeMap<u64, KvReply>,
    next_token: u64,
    compactions: BTreeMap<u16, u64>,
}

impl Cluster {
    fn new(specs: BTreeMap<u16, NodeSpec>) -> Cluster {
        let mut c = Cluster {
            dir: tempfile::tempdir().expect("tempdir"),
            specs,
            nodes: BTreeMap::new(),
            queue: VecDeque::new(),
            replies: BTreeMap::new(),
            next_token: 1,
            compactions: BTreeMap::new(),
        };
        let ids: Vec<u16> = c.specs.keys().copied().collect();
        for id in ids {
            let r = c.open(id);
            c.nodes.insert(id, r);
        }
        c
    }

    fn uniform(n: u16, spec: NodeSpec) -> Cluster {
        Cluster::new((1..=n).map(|id| (id, spec.clone())).collect())
    }

    fn open(&self, id: u16) -> Replica {
        let spec = &self.specs[&id];
        let ids: Vec<u16> = self.specs.keys().copied().collect();
        let mut raft = Config::new(id, ids.clone());
        raft.seed = u64::from(id) * 7919;
        let mut cfg = ReplicaConfig::new(
            raft,
            ids.iter()
                .map(|&i| (i, format!("127.0.0.1:{}", 7000 + i)))
                .collect(),
        );
        cfg.compaction = spec.policy.clone();
        cfg.write_reserve = spec.reserve;
        let engine = Engine::List {
            path: self.dir.path().join(format!("node{id}.pool")),
            pool_size: spec.pool_size,
            opts: ListOptions {
                page_size: spec.page_size,
                ..ListOptions::default()
            },
        };
        let provider = FileStoreProvider::with_start(engine, StartMode::Bootstrap);
        Replica::open(cfg, Box::new(provider)).expect("open replica")
    }

    fn node(&self, id: u16) -> &Replica {
        &self.nodes[&id]
    }

    /// Runs every node's output to quiescence; every `process` must succeed.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            let mut progressed = false;
            for (&id, r) in &mut self.nodes {
                let mut out = Output::default();
                r.process(&mut out)
                    .expect("process goes on whatever the store's fill");
                if out.compact {
                    r.compact_now().expect("compaction");
                    *self.compactions.entry(id).or_default() += 1;
                }
                progressed |= !out.messages.is_empty() || !out.replies.is_empty();
                self.queue.extend(out.messages);
                self.replies.extend(out.replies);
            }
            while let Some(m) = self.queue.pop_front() {
                progressed = true;
                if let Some(r) = self.nodes.get_mut(&m.to) {
                    r.step(m);
                }
            }
            if !progressed {
                return;
            }
        }
        panic!("cluster did not settle");
    }

    fn tick(&mut self, n: usize) {
        for _ in 0..n {
            for r in self.nodes.values_mut() {
                r.tick();
            }
            self.settle();
        }
    }

    fn leader(&mut self) -> u16 {
        for _ in 0..500 {
            self.tick(1);
            let leaders: Vec<u16> = self
                .nodes
                .iter()
                .filter(|(_, r)| r.core().role() == Role::Leader)
                .map(|(&id, _)| id)
                .collect();
            if let [l] = leaders[..] {
                let core = self.node(l).core();
                if core.commit_index() == core.last_index() {
                    return l;
                }
            }
        }
        panic!("no leader elected");
    }

    fn call(&mut self, id: u16, req: KvRequest) -> KvReply {
        let token = self.next_token;
        self.next_token += 1;
        let r = self.nodes.get_mut(&id).expect("node");
        if let Some(reply) = r.request(token, req) {
            return reply;
        }
        for _ in 0..100 {
            self.settle();
            if let Some(reply) = self.replies.remove(&token) {
                return reply;
            }
            self.tick(1);
        }
        panic!("no reply");
    }
}

fn set(k: &str, v: &[u8]) -> KvRequest {
    KvRequest::Set {
        key: k.into(),
        value: v.to_vec(),
    }
}

fn get(k: &str) -> KvRequest {
    KvRequest::Get { key: k.into() }
}

fn del(k: &str) -> KvRequest {
    KvRequest::Delete { key: k.into() }
}

fn info_field(text: &str, field: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no numeric {field} in INFO: {text}"))
}

#[test]
fn a_full_pool_refuses_writes_serves_reads_and_recovers_after_deletes() {
    let mut c = Cluster::uniform(
        3,
        NodeSpec {
            pool_size: 128 << 10,
            page_size: 1024,
            policy: CompactionPolicy::disabled(),
            // A quarter kept: deletes may use half of it, enough to delete every key.
            reserve: 0.25,
        },
    );
    let l = c.leader();
    // One value per page: the pool fills after about a hundred keys.
    let value = vec![b'x'; 700];
    let mut written = Vec::new();
    let refusal = loop {
        let key = format!("k{}", written.len());
        match c.call(l, set(&key, &value)) {
            KvReply::Done => written.push(key),
            KvReply::OutOfMemory(why) => break why,
            other => panic!("{key}: {other:?}"),
        }
        assert!(written.len() < 200, "the pool never filled");
    };
    assert!(written.len() >= 50, "only {} writes fit", written.len());
    assert!(refusal.contains("store full"), "{refusal}");
    // Refused again, by every kind of growing write; the cluster is up and reads go on.
    assert!(matches!(
        c.call(l, set("another", &value)),
        KvReply::OutOfMemory(_)
    ));
    assert!(matches!(
        c.call(
            l,
            KvRequest::Cas {
                key: "k0".into(),
                expected: Some(value.clone()),
                new: value.clone(),
            }
        ),
        KvReply::OutOfMemory(_)
    ));
    c.tick(20);
    assert_eq!(c.node(l).core().role(), Role::Leader);
    for key in &written {
        assert_eq!(c.call(l, get(key)), KvReply::Value(Some(value.clone())));
    }
    match c.call(l, KvRequest::Info) {
        KvReply::Info(text) => {
            assert!(info_field(&text, "oom_refusals") >= 3, "{text}");
            assert!(info_field(&text, "store_used_bytes") > 0, "{text}");
        }
        other => panic!("INFO: {other:?}"),
    }
    // Deletes may use half the reserve: the operator frees space, then compacts
    // (the list's compaction copies what stays into free pages: it needs few).
    let (keep, drop) = written.split_at(1);
    for key in drop {
        assert_eq!(c.call(l, del(key)), KvReply::Deleted(true), "{key}");
    }
    c.tick(5);
    for id in 1..=3u16 {
        let stats = c.node(id).store().compact().expect("compaction");
        assert!(stats.freed > 0, "n{id}: {stats:?}");
    }
    for i in 0..5 {
        assert_eq!(c.call(l, set(&format!("new{i}"), &value)), KvReply::Done);
    }
    assert_eq!(
        c.call(l, get(&keep[0])),
        KvReply::Value(Some(value.clone()))
    );
    assert_eq!(c.call(l, get(&drop[0])), KvReply::Value(None));
}

/// Overwrites 8 keys `writes` times on small pools; returns how many succeeded
/// before the first refusal, and the compactions the replicas asked for.
fn overwrite_workload(policy: CompactionPolicy, writes: usize) -> (usize, u64) {
    let mut c = Cluster::uniform(
        3,
        NodeSpec {
            pool_size: 128 << 10,
            page_size: 1024,
            policy,
            reserve: raft_nvm::replica::DEFAULT_WRITE_RESERVE,
        },
    );
    let l = c.leader();
    let value = vec![b'v'; 700];
    for i in 0..writes {
        match c.call(l, set(&format!("k{}", i % 8), &value)) {
            KvReply::Done => {}
            KvReply::OutOfMemory(_) => return (i, c.compactions.values().sum()),
            other => panic!("write {i}: {other:?}"),
        }
    }
    for i in 0..8 {
        assert_eq!(
            c.call(l, get(&format!("k{i}"))),
            KvReply::Value(Some(value.clone()))
        );
    }
    (writes, c.compactions.values().sum())
}

#[test]
fn the_policy_keeps_an_overwrite_workload_alive_where_without_it_the_pool_fills() {
    let writes = 600;
    let (done, compactions) = overwrite_workload(CompactionPolicy::default(), writes);
    assert_eq!(done, writes, "with the policy every write succeeds");
    assert!(compactions >= 3, "{compactions} compactions");
    let (done, compactions) = overwrite_workload(CompactionPolicy::disabled(), writes);
    assert!(
        done < writes / 2,
        "without it the pool fills ({done} writes)"
    );
    assert_eq!(compactions, 0);
}

#[test]
fn a_follower_with_a_smaller_pool_drops_appends_then_catches_up() {
    let spec = |pool_size, policy| NodeSpec {
        pool_size,
        page_size: 1024,
        policy,
        reserve: raft_nvm::replica::DEFAULT_WRITE_RESERVE,
    };
    let big = || spec(256 << 10, CompactionPolicy::default());
    // Who leads depends only on the seeds: find out, then give a follower a small
    // pool that nothing compacts until the end.
    let l = Cluster::uniform(3, big()).leader();
    let small = if l == 3 { 2 } else { 3 };
    let mut c = Cluster::new(
        (1..=3u16)
            .map(|id| match id == small {
                true => (id, spec(64 << 10, CompactionPolicy::disabled())),
                false => (id, big()),
            })
            .collect(),
    );
    assert_eq!(c.leader(), l);
    let value = vec![b'v'; 700];
    for i in 0..150 {
        // One key, overwritten: the other two commit every write (and compact).
        assert_eq!(c.call(l, set("k", &value)), KvReply::Done, "write {i}");
    }
    c.tick(10);
    let counts = c.node(small).compaction_counts();
    assert!(counts.full_appends > 0, "the small pool filled: {counts:?}");
    let commit = c.node(l).core().commit_index();
    let behind = c.node(small).store().last_index();
    assert!(
        behind < commit,
        "it holds what fitted: {behind} of {commit}"
    );
    // Compacting it makes room; the leader's retries then bring it up to date
    // (what a policy's emergency runs do, done here by hand).
    let mut freed = 0;
    for _ in 0..10 {
        if c.node(small).store().applied() == commit {
            break;
        }
        freed += c.node(small).store().compact().expect("compaction").freed;
        c.tick(10);
    }
    assert!(freed > 0);
    for id in 1..=3u16 {
        assert_eq!(c.node(id).store().applied(), commit, "n{id} caught up");
    }
    assert!(
        c.node(small).store().get(b"k", commit).expect("get") == Some(value.clone()),
        "the small pool holds the last value"
    );
}

/// The `-OOM` reply over RESP from a real single-node cluster with a small pool.
#[cfg(feature = "server")]
#[test]
fn a_real_node_answers_minus_oom_and_keeps_serving_reads() {
    use std::io::{Read, Write};

    use raft_nvm::node::Node;
    use raft_nvm::resp::{decode_reply, encode_command, Reply};

    let dir = tempfile::tempdir().expect("tempdir");
    let rt = single_node::runtime();
    let engine = Engine::List {
        path: dir.path().join("node1.pool"),
        pool_size: 128 << 10,
        opts: ListOptions {
            page_size: 4096,
            ..ListOptions::default()
        },
    };
    let mut cfg = single_node::single_node(engine);
    cfg.compaction = CompactionPolicy::disabled();
    let node = rt.block_on(Node::start(cfg)).expect("node starts");
    let mut stream = std::net::TcpStream::connect(node.client_addr()).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let mut input = Vec::new();
    let mut call = |args: &[&[u8]]| -> Reply {
        let mut out = Vec::new();
        encode_command(args, &mut out);
        stream.write_all(&out).expect("send");
        loop {
            if let Some((reply, used)) = decode_reply(&input).expect("a RESP reply") {
                input.drain(..used);
                return reply;
            }
            let mut buf = [0u8; 4096];
            let n = stream.read(&mut buf).expect("read");
            assert!(n > 0, "connection closed");
            input.extend_from_slice(&buf[..n]);
        }
    };
    let value = vec![b'x'; 3000];
    let mut oom = None;
    let mut written = Vec::new();
    for i in 0..200 {
        let key = format!("k{i}");
        match call(&[b"SET", key.as_bytes(), &value]) {
            Reply::Simple(s) if s == "OK" => written.push(key),
            // No leader yet: the single node elects itself within a few ticks.
            Reply::Error(e) if e.starts_with("TRYAGAIN") => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Reply::Error(e) if e.starts_with("OOM ") => {
                oom = Some(e.into_owned());
                break;
            }
            other => panic!("SET {key}: {other:?}"),
        }
    }
    let oom = oom.expect("the pool fills and SET gets -OOM");
    assert!(oom.starts_with("OOM store full:"), "{oom}");
    assert!(written.len() >= 10, "{} writes fit", written.len());
    for key in &written {
        assert!(
            call(&[b"GET", key.as_bytes()]) == Reply::Bulk(value.clone()),
            "GET {key} after -OOM"
        );
    }
    match call(&[b"INFO"]) {
        Reply::Bulk(text) => {
            let text = String::from_utf8(text).expect("utf-8");
            assert!(info_field(&text, "oom_refusals") >= 1, "{text}");
        }
        other => panic!("INFO: {other:?}"),
    }
    assert!(!node.is_finished(), "the node is still up");
    rt.block_on(node.shutdown()).expect("clean shutdown");
}
