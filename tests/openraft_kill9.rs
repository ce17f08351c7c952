//! openraft over pmkit's list, as processes: three `openraft_kv --node` processes
//! on loopback, each over a list pool on a plain file (msync mode), and clients in
//! this test writing through openraft.
//!
//! 1. Mid-load, the leader gets SIGKILL; writing goes on against the new leader;
//!    the killed node restarts on its pool and must catch up (its applied index
//!    reaches the leader's) and hold every acknowledged write.
//! 2. Mid-load again, all three get SIGKILL at once, and only the two that were
//!    not leading restart on their pools: every write acknowledged before the kill
//!    must be read back (linearizable read on the new leader). Only what those
//!    two stores kept brings an acknowledged write back: a store that acknowledges
//!    a group before it is in the pool, loses one at a process crash, or does not
//!    recover its log, fails here.
//!
//! A SIGKILL keeps the page cache: this test checks what a process crash can
//! lose (anything acknowledged but not yet in the pool's mapping, any state that
//! is not recovered), not what a power failure can; pmem-core's simulator tests in
//! `crates/openraft-list/tests/crash.rs` cover that.

#[path = "../examples/common/openraft_app.rs"]
mod openraft_app;
#[path = "../examples/common/openraft_net.rs"]
mod openraft_net;

#[allow(dead_code)] // this test does not read a --json line
mod example_bin;

#[path = "../crates/raft-nvm/tests/loopback/port.rs"]
mod port;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft_app::{ClientReply, ClientReq, KvClient};

/// Lines of each node's log shown on a failure.
const KEEP_LINES: usize = 15;

/// Entries between snapshots of the nodes (each purges the log below it).
const SNAPSHOT_EVERY: u64 = 100;

/// Writer tasks of the load.
const WRITERS: usize = 4;

struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    raft: Vec<SocketAddr>,
    client: Vec<SocketAddr>,
    procs: Vec<Option<Child>>,
}

impl Cluster {
    fn new() -> Cluster {
        let bin = example_bin::example_binary(
            "openraft_kv",
            &[
                "examples/openraft_kv.rs",
                "examples/common",
                "crates/openraft-list/src",
                "crates/raft-nvm/src/storage",
            ],
        );
        // Plain files on the target's disk: the pools are msync'd, not on tmpfs.
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
        let addr = |_| SocketAddr::from(([127, 0, 0, 1], port::free_port()));
        let mut c = Cluster {
            bin,
            dir,
            raft: (0..3).map(addr).collect(),
            client: (0..3).map(addr).collect(),
            procs: vec![None, None, None],
        };
        for i in 0..3 {
            c.spawn(i, i == 0);
        }
        c
    }

    fn spawn(&mut self, i: usize, init: bool) {
        let peers: Vec<String> = self
            .raft
            .iter()
            .enumerate()
            .map(|(j, a)| format!("{}={a}", j + 1))
            .collect();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("node{}.log", i + 1)))
            .expect("log file");
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--node")
            .arg((i + 1).to_string())
            .arg("--dir")
            .arg(self.dir.path().join(format!("node{}", i + 1)))
            .arg("--client")
            .arg(self.client[i].to_string())
            .arg("--peers")
            .arg(peers.join(","))
            // Snapshots and purges often: the restarted node is brought back by a
            // snapshot (the network's chunks, the store's installation), not only
            // by log entries.
            .arg("--snapshot-every")
            .arg(SNAPSHOT_EVERY.to_string())
            .stdout(Stdio::null())
            .stderr(log);
        if init {
            cmd.arg("--init");
        }
        self.procs[i] = Some(cmd.spawn().expect("spawn openraft_kv --node"));
    }

    fn kill9(&mut self, i: usize) {
        if let Some(mut p) = self.procs[i].take() {
            p.kill().expect("SIGKILL");
            let _ = p.wait();
        }
    }

    /// The nodes' logs, for a failure message. With `KILL9_HOLD` set, the nodes
    /// are left running for a minute first (to inspect them).
    fn logs(&self) -> String {
        if std::env::var_os("KILL9_HOLD").is_some() {
            let pids: Vec<_> = self.procs.iter().flatten().map(Child::id).collect();
            eprintln!("holding nodes {pids:?} in {}", self.dir.path().display());
            std::thread::sleep(Duration::from_secs(60));
        }
        (1..=3)
            .map(|i| {
                let p = self.dir.path().join(format!("node{i}.log"));
                let text = std::fs::read_to_string(p).unwrap_or_default();
                let keep = std::env::var("KILL9_LOG_LINES")
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(KEEP_LINES);
                let tail: Vec<&str> = text.lines().rev().take(keep).collect();
                format!(
                    "--- node {i}:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill9(i);
        }
    }
}

async fn call(addr: SocketAddr, req: &ClientReq) -> Option<ClientReply> {
    let mut c = KvClient::connect(addr).await.ok()?;
    tokio::time::timeout(Duration::from_secs(2), c.call(req))
        .await
        .ok()?
        .ok()
}

/// Node `i`'s (leader, applied index), if it answers.
async fn status(addr: SocketAddr) -> Option<(Option<u64>, Option<u64>)> {
    match call(addr, &ClientReq::Status).await? {
        ClientReply::Status { leader, applied } => Some((leader, applied)),
        _ => None,
    }
}

/// The index (0-based) of the leader all answering nodes agree on and that
/// itself answers, waiting up to `limit`.
async fn leader(client: &[SocketAddr], limit: Duration) -> Option<usize> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        for &a in client {
            if let Some((Some(l), _)) = status(a).await {
                let li = usize::try_from(l).ok()? - 1;
                if let Some((Some(l2), _)) = status(client[li]).await {
                    if l2 == l {
                        return Some(li);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Writers: each writes `w{t}-{n}` = `v{n}` in turn, following the leader,
/// and records every key whose write was acknowledged.
struct Load {
    acked: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(client: Vec<SocketAddr>, tag: &str) -> Load {
        let acked = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..WRITERS)
            .map(|t| {
                let (client, acked, stop) = (client.clone(), acked.clone(), stop.clone());
                let tag = tag.to_owned();
                tokio::spawn(async move { writer(t, &tag, client, acked, stop).await })
            })
            .collect();
        Load { acked, stop, tasks }
    }

    fn count(&self) -> usize {
        self.acked.lock().expect("acked").len()
    }

    async fn wait_for(&self, n: usize, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while self.count() < n {
            if Instant::now() > end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    async fn stop(self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            let _ = t.await;
        }
        Arc::try_unwrap(self.acked)
            .map(|m| m.into_inner().expect("acked"))
            .unwrap_or_default()
    }
}

async fn writer(
    t: usize,
    tag: &str,
    client: Vec<SocketAddr>,
    acked: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
) {
    let mut target = t % client.len();
    let mut conn: Option<KvClient> = None;
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        if conn.is_none() {
            conn = KvClient::connect(client[target]).await.ok();
            if conn.is_none() {
                target = (target + 1) % client.len();
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        }
        let key = format!("{tag}{t}-{n}").into_bytes();
        let req = ClientReq::Set {
            key: key.clone(),
            value: format!("v{n}").into_bytes(),
        };
        let Some(c) = conn.as_mut() else { continue };
        match tokio::time::timeout(Duration::from_secs(3), c.call(&req)).await {
            Ok(Ok(ClientReply::Written)) => {
                acked.lock().expect("acked").push(key);
                n += 1;
            }
            Ok(Ok(ClientReply::NotLeader(Some(l)))) => {
                target = usize::try_from(l).map_or(0, |l| l - 1) % client.len();
                conn = None;
            }
            // No leader known yet, an error, a dead node: try the next one. The
            // key is not reused: an unacknowledged write may still be applied.
            other => {
                if std::env::var_os("KILL9_DEBUG").is_some() {
                    eprintln!("writer {t} -> node {}: {other:?}", target + 1);
                }
                n += 1;
                target = (target + 1) % client.len();
                conn = None;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Every key of `keys` reads back as written (`v{n}` for key `...-{n}`): by a
/// linearizable read on the leader (`node: None`; a node that is not, or not yet,
/// serving as leader is asked again until `limit`) or from node `Some(i)`'s local
/// state.
async fn check_all(
    client: &[SocketAddr],
    node: Option<usize>,
    keys: &[Vec<u8>],
    limit: Duration,
) -> Result<(), String> {
    let end = Instant::now() + limit;
    let mut target = node.unwrap_or(0);
    let mut conn: Option<KvClient> = None;
    for key in keys {
        let k = String::from_utf8_lossy(key).into_owned();
        let n = k.rsplit('-').next().unwrap_or("");
        let want = format!("v{n}").into_bytes();
        let req = match node {
            None => ClientReq::Get { key: key.clone() },
            Some(_) => ClientReq::LocalGet { key: key.clone() },
        };
        loop {
            if conn.is_none() {
                conn = KvClient::connect(client[target]).await.ok();
            }
            let reply = match conn.as_mut() {
                Some(c) => tokio::time::timeout(Duration::from_secs(3), c.call(&req))
                    .await
                    .ok()
                    .and_then(Result::ok),
                None => None,
            };
            match reply {
                Some(ClientReply::Value(Some(v))) if v == want => break,
                Some(ClientReply::Value(other)) => {
                    return Err(format!("acknowledged {k}: read {other:?}"))
                }
                Some(ClientReply::NotLeader(Some(l))) if node.is_none() => {
                    target = usize::try_from(l).map_or(0, |l| l - 1) % client.len();
                    conn = None;
                }
                other => {
                    if Instant::now() > end {
                        return Err(format!("acknowledged {k}: no read ({other:?})"));
                    }
                    if node.is_none() {
                        target = (target + 1) % client.len();
                    }
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_leader_then_all_loses_no_acknowledged_write() {
    let mut c = Cluster::new();
    let client = c.client.clone();
    let first = leader(&client, Duration::from_secs(15)).await;
    let Some(first) = first else {
        panic!("no leader elected\n{}", c.logs());
    };

    // 1. The leader dies mid-load and comes back.
    let load = Load::start(client.clone(), "a");
    assert!(
        load.wait_for(150, Duration::from_secs(15)).await,
        "no load\n{}",
        c.logs()
    );
    c.kill9(first);
    let before = load.count();
    assert!(
        load.wait_for(before + 150, Duration::from_secs(15)).await,
        "no writes after the leader's death\n{}",
        c.logs()
    );
    c.spawn(first, false);
    let before = load.count();
    assert!(
        load.wait_for(before + 100, Duration::from_secs(15)).await,
        "no writes while the node restarts\n{}",
        c.logs()
    );
    let keys = load.stop().await;
    let Some(now) = leader(&client, Duration::from_secs(10)).await else {
        panic!("no leader after the restart\n{}", c.logs());
    };
    let target = status(client[now]).await.and_then(|s| s.1).unwrap_or(0);
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let applied = status(client[first]).await.and_then(|s| s.1).unwrap_or(0);
        if applied >= target {
            break;
        }
        assert!(
            Instant::now() < end,
            "node {} applied {applied}, leader {target}\n{}",
            first + 1,
            c.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Err(e) = check_all(&client, None, &keys, Duration::from_secs(10)).await {
        panic!(
            "after the leader's restart, on the leader: {e}\n{}",
            c.logs()
        );
    }
    if let Err(e) = check_all(&client, Some(first), &keys, Duration::from_secs(10)).await {
        panic!("on the restarted node {}: {e}\n{}", first + 1, c.logs());
    }

    // 2. All three die at once mid-load; only the two that were not leading come
    // back. A committed write is durable on a majority, so it is on at least one of
    // those two, whoever acknowledged it (the leader applies an entry only once it
    // is in its own store: a follower that acknowledges a group before storing it
    // shows here, not with the old leader back).
    let load = Load::start(client.clone(), "b");
    assert!(
        load.wait_for(200, Duration::from_secs(15)).await,
        "no load\n{}",
        c.logs()
    );
    let Some(last) = leader(&client, Duration::from_secs(5)).await else {
        panic!("no leader under load\n{}", c.logs());
    };
    for i in 0..3 {
        c.kill9(i);
    }
    let keys_b = load.stop().await;
    for i in (0..3).filter(|&i| i != last) {
        c.spawn(i, false);
    }
    if leader(&client, Duration::from_secs(15)).await.is_none() {
        panic!("no leader after two restarted\n{}", c.logs());
    }
    for (what, keys) in [("before", &keys), ("during", &keys_b)] {
        if let Err(e) = check_all(&client, None, keys, Duration::from_secs(15)).await {
            panic!(
                "after nodes {:?} restarted ({} writes acknowledged {what} the kill): {e}\n{}",
                (0..3)
                    .filter(|&i| i != last)
                    .map(|i| i + 1)
                    .collect::<Vec<_>>(),
                keys.len(),
                c.logs()
            );
        }
    }
    if std::env::var_os("KILL9_SHOW_LOGS").is_some() {
        println!("{}", c.logs());
    }
}
