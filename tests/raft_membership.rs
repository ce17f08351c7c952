//! Membership changes on a real cluster of `raft_node`
//! processes on loopback (list engine, pools on plain files: durable), under
//! concurrent clients that keep writing and reading back.
//!
//! Three founders start, and two spare processes as learners-to-be. The cluster
//! grows to four (node 4 added as a learner, then promoted), the old leader is
//! removed (and its process stopped), and a node is replaced: node 5 is added,
//! its promotion is asked and the leader is killed with SIGKILL right after; the
//! killed node restarts, the promotion is finished (or asked again, if the kill
//! lost it), and one more founder is removed. Throughout, every value read back
//! must be the one its (unique) key was written with; at the end every
//! acknowledged write must be readable, and the nodes that stay stop cleanly.

mod proc_cluster;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proc_cluster::{find_leader, free_port, info_at, raft_node_binary, sigkill, stop_cleanly};
use raft_nvm::resp::{info_field, ClusterClient, Reply};

const FLAGS: [&str; 4] = ["--bootstrap", "--join", "--learner", "--pool-size"];
/// Small pools: the test writes a few MB, and a pool is allocated in full.
const POOL_SIZE: &str = "33554432";
const NODES: usize = 5;

struct Procs {
    bin: std::path::PathBuf,
    dir: tempfile::TempDir,
    raft: Vec<SocketAddr>,
    client: Vec<SocketAddr>,
    procs: Vec<Option<Child>>,
}

impl Procs {
    fn new() -> Procs {
        let addrs = || {
            (0..NODES)
                .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
                .collect::<Vec<_>>()
        };
        Procs {
            bin: raft_node_binary(&FLAGS),
            dir: tempfile::tempdir().expect("tempdir"),
            raft: addrs(),
            client: addrs(),
            procs: (0..NODES).map(|_| None).collect(),
        }
    }

    /// Starts node `i` (0-based) with `extra` flags: a founder knows the three
    /// founders; a spare knows them and itself.
    fn spawn(&mut self, i: usize, extra: &[&str]) {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--id")
            .arg((i + 1).to_string())
            .arg("--data-dir")
            .arg(self.dir.path().join(format!("node{}", i + 1)))
            .args(["--engine", "list", "--pool-mode", "auto"])
            .args(["--pool-size", POOL_SIZE])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let known: Vec<usize> = if i < 3 {
            vec![0, 1, 2]
        } else {
            vec![0, 1, 2, i]
        };
        for j in known {
            cmd.arg("--member")
                .arg(format!("{}={}/{}", j + 1, self.raft[j], self.client[j]));
        }
        self.procs[i] = Some(cmd.spawn().expect("spawn raft_node"));
    }

    fn kill9(&mut self, i: usize) {
        if let Some(p) = self.procs[i].take() {
            sigkill(p).expect("SIGKILL");
        }
    }

    /// SIGTERM node `i`; it must exit 0.
    fn stop(&mut self, i: usize) {
        if let Some(p) = self.procs[i].take() {
            stop_cleanly(p, i + 1);
        }
    }

    /// The running node that says it leads (0-based), once one does.
    async fn leader(&self) -> usize {
        let clients: Vec<Option<SocketAddr>> = (0..NODES)
            .map(|i| self.procs[i].as_ref().map(|_| self.client[i]))
            .collect();
        find_leader(&clients).await
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for p in self.procs.iter_mut().filter_map(Option::take) {
            let _ = sigkill(p);
        }
    }
}

/// Runs a membership command on the leader until it answers `+OK`, retrying
/// while another change is under way or a learner still catches up.
async fn change(client: &mut ClusterClient, args: &[&str]) {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = client.command(&args).await;
        match &reply {
            Ok(Reply::Simple(s)) if s == "OK" => return,
            Ok(Reply::Error(e))
                if e.contains("under way") || e.contains("behind") || e.contains("lately") => {}
            // The leader went away with the request: its fate is unknown; asking
            // again either repeats it or is refused as done.
            Err(_) => {}
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(args[0])),
        }
        assert!(
            Instant::now() < deadline,
            "{:?} never went through: {reply:?}",
            String::from_utf8_lossy(args[0])
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Node `i`'s view of the voters (`INFO membership_voters`), if it answers.
async fn voters(client: SocketAddr) -> Option<String> {
    let info = info_at(client).await?;
    info_field(&info, "membership_voters").map(str::to_string)
}

fn value_of(key: &str) -> Vec<u8> {
    format!("value-of-{key}").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_under_load_lose_no_acknowledged_write() {
    let mut c = Procs::new();
    for i in 0..3 {
        c.spawn(i, &["--bootstrap"]);
    }
    for i in 3..5 {
        c.spawn(i, &["--join", "--learner"]);
    }
    let first_leader = c.leader().await;
    let addrs = c.client.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut tasks = Vec::new();
    for w in 0..3 {
        let (addrs, stop, acked) = (addrs.clone(), Arc::clone(&stop), Arc::clone(&acked));
        tasks.push(tokio::spawn(async move {
            let mut client = ClusterClient::new(addrs);
            client.max_attempts = 5000;
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("w{w}-{i:06}");
                if client.set(key.as_bytes(), &value_of(&key)).await.is_ok() {
                    acked.lock().expect("acked").push(key);
                }
                i += 1;
            }
        }));
    }
    // A reader checks, as it goes, that what it reads is what was written.
    let reads = {
        let (addrs, stop, acked) = (addrs.clone(), Arc::clone(&stop), Arc::clone(&acked));
        tokio::spawn(async move {
            let mut client = ClusterClient::new(addrs);
            client.max_attempts = 5000;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = {
                    let acked = acked.lock().expect("acked");
                    if acked.is_empty() {
                        None
                    } else {
                        Some(acked[(n as usize * 7919) % acked.len()].clone())
                    }
                };
                if let Some(key) = key {
                    if let Ok(got) = client.get(key.as_bytes()).await {
                        assert_eq!(got, Some(value_of(&key)), "read {key}");
                        n += 1;
                    }
                } else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            n
        })
    };
    let mut admin = ClusterClient::new(addrs.clone());
    admin.max_attempts = 5000;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Grow to four.
    let (r4, c4) = (c.raft[3].to_string(), c.client[3].to_string());
    change(&mut admin, &["RAFT.ADD-LEARNER", "4", &r4, &c4]).await;
    change(&mut admin, &["RAFT.PROMOTE", "4"]).await;
    // Remove the old leader, then stop its process.
    let old = (first_leader + 1).to_string();
    change(&mut admin, &["RAFT.REMOVE-NODE", &old]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.stop(first_leader);

    // Replace a node: add 5, ask its promotion, and SIGKILL the leader at once.
    let (r5, c5) = (c.raft[4].to_string(), c.client[4].to_string());
    change(&mut admin, &["RAFT.ADD-LEARNER", "5", &r5, &c5]).await;
    let victim = c.leader().await;
    let promote = {
        let addrs = addrs.clone();
        tokio::spawn(async move {
            let mut client = ClusterClient::new(addrs);
            client.max_attempts = 5000;
            client.command(&[b"RAFT.PROMOTE", b"5"]).await
        })
    };
    tokio::time::sleep(Duration::from_millis(2)).await;
    c.kill9(victim);
    let _ = promote.await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.spawn(victim, &[]);
    // Finish the promotion: asked again unless node 5 already votes. (A failure
    // reports what the promotions answered and what the leader saw.)
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut answers = Vec::new();
    loop {
        let l = c.leader().await;
        let v = voters(c.client[l]).await.unwrap_or_default();
        if v.split(',').any(|id| id == "5") {
            break;
        }
        let mut client = ClusterClient::new(addrs.clone());
        client.max_attempts = 5000;
        answers.push(format!(
            "{:?}",
            client.command(&[b"RAFT.PROMOTE", b"5"]).await
        ));
        if Instant::now() >= deadline {
            let info = info_at(c.client[l]).await.unwrap_or_default();
            panic!(
                "node 5 never became a voter ({v}); node {} leads; the promotions answered \
                 {answers:?}; its INFO:\n{info}",
                l + 1
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // ... and remove one more founder: the one replaced.
    let replaced = (0..3).find(|&i| i != first_leader).expect("a founder");
    change(
        &mut admin,
        &["RAFT.REMOVE-NODE", &(replaced + 1).to_string()],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("writer");
    }
    let checked_live = reads.await.expect("reader");
    let acked = acked.lock().expect("acked").clone();
    assert!(
        acked.len() > 200,
        "only {} writes acknowledged",
        acked.len()
    );
    assert!(
        checked_live > 50,
        "only {checked_live} reads during the changes"
    );
    // Every acknowledged write is there, with its value.
    let mut client = ClusterClient::new(addrs.clone());
    client.max_attempts = 5000;
    for key in &acked {
        assert_eq!(
            client.get(key.as_bytes()).await.expect("get"),
            Some(value_of(key)),
            "{key}"
        );
    }
    // The members agree on the final voters: neither removed founder, both spares.
    let expect: Vec<String> = (0..NODES)
        .filter(|&i| i != first_leader && i != replaced)
        .map(|i| (i + 1).to_string())
        .collect();
    let expect = expect.join(",");
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..NODES {
        if i == first_leader || i == replaced {
            continue;
        }
        while voters(c.client[i]).await.as_deref() != Some(expect.as_str()) {
            assert!(
                Instant::now() < deadline,
                "node {} never saw voters {expect}",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for i in 0..NODES {
        c.stop(i);
    }
}
