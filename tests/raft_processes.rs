//! The real-process test of the Raft service: three `raft_node` processes on
//! loopback (list engine, pools on plain files: msync mode, durable). A client keeps
//! writing; the leader is killed with SIGKILL mid-load; writing goes on against the
//! new leader; the killed node is restarted and must catch up. Then every write
//! that was acknowledged must be readable through the cluster, and — after a clean
//! SIGTERM shutdown, which must exit 0 — present in every node's store on disk.
//!
//! The `raft_node` example binary comes from the same `cargo test` build (examples
//! are built with the tests); if it is missing, the test builds it.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use raft_nvm::resp::{info_field, ClusterClient, Reply, RespClient};
use raft_nvm::{ListOptions, ListStore, Store};

fn raft_node_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/raft_processes-<hash> → target/<profile>/examples/raft_node
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile directory");
    let bin = profile_dir.join("examples").join("raft_node");
    if !bin.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--example", "raft_node"])
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build --example raft_node failed");
    }
    assert!(bin.exists(), "{} not built", bin.display());
    bin
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    raft: Vec<SocketAddr>,
    client: Vec<SocketAddr>,
    procs: Vec<Option<Child>>,
}

impl Cluster {
    fn new() -> Cluster {
        let raft = (0..3)
            .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
            .collect();
        let client = (0..3)
            .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
            .collect();
        let mut c = Cluster {
            bin: raft_node_binary(),
            dir: tempfile::tempdir().expect("tempdir"),
            raft,
            client,
            procs: vec![None, None, None],
        };
        for i in 0..3 {
            c.spawn(i);
        }
        c
    }

    fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("node{}", i + 1))
    }

    fn spawn(&mut self, i: usize) {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--id")
            .arg((i + 1).to_string())
            .arg("--data-dir")
            .arg(self.data_dir(i))
            .args(["--engine", "list", "--pool-mode", "auto"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for j in 0..3 {
            cmd.arg("--member")
                .arg(format!("{}={}/{}", j + 1, self.raft[j], self.client[j]));
        }
        self.procs[i] = Some(cmd.spawn().expect("spawn raft_node"));
    }

    fn kill9(&mut self, i: usize) {
        if let Some(mut p) = self.procs[i].take() {
            p.kill().expect("SIGKILL");
            let _ = p.wait();
        }
    }

    /// SIGTERM every node; each must exit 0.
    fn stop(&mut self) {
        for (i, slot) in self.procs.iter_mut().enumerate() {
            if let Some(mut p) = slot.take() {
                let pid = i32::try_from(p.id()).expect("pid");
                // SAFETY: kill(2) with a pid this test spawned and still owns.
                let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
                assert_eq!(rc, 0, "SIGTERM node {}", i + 1);
                let status = p.wait().expect("wait");
                assert!(status.success(), "node {} exited with {status}", i + 1);
            }
        }
    }

    async fn info(&self, i: usize) -> Option<String> {
        let mut c = RespClient::connect(self.client[i]).await.ok()?;
        match c.command(&[b"INFO"]).await.ok()? {
            Reply::Bulk(b) => String::from_utf8(b).ok(),
            _ => None,
        }
    }

    async fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            for i in 0..3 {
                if let Some(info) = self.info(i).await {
                    if info_field(&info, "role") == Some("leader") {
                        return i;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no leader within 20 s");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in self.procs.iter_mut().flatten() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

async fn write(client: &mut ClusterClient, i: usize, acked: &mut Vec<usize>) {
    let key = format!("key{i:06}");
    let value = format!("value{i:06}");
    if client.set(key.as_bytes(), value.as_bytes()).await.is_ok() {
        acked.push(i);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_writes_then_catch_up() {
    let mut cluster = Cluster::new();
    let leader = cluster.leader().await;
    let mut client = ClusterClient::new(cluster.client.clone());
    client.max_attempts = 2000;
    let mut acked = Vec::new();
    let mut next = 0;
    while next < 300 {
        write(&mut client, next, &mut acked).await;
        next += 1;
    }
    // Kill the leader in the middle of a write burst.
    let burst = {
        let addrs = cluster.client.clone();
        tokio::spawn(async move {
            let mut c = ClusterClient::new(addrs);
            c.max_attempts = 2000;
            let mut acked = Vec::new();
            for i in 100_000..100_300 {
                write(&mut c, i, &mut acked).await;
            }
            acked
        })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    cluster.kill9(leader);
    while next < 600 {
        write(&mut client, next, &mut acked).await;
        next += 1;
    }
    acked.extend(burst.await.expect("burst task"));
    assert!(
        acked.len() >= 500,
        "only {} writes acknowledged",
        acked.len()
    );
    cluster.spawn(leader);
    while next < 900 {
        write(&mut client, next, &mut acked).await;
        next += 1;
    }
    // The restarted node catches up with the leader's commit index.
    let new_leader = cluster.leader().await;
    let commit: u64 = info_field(
        &cluster.info(new_leader).await.expect("info"),
        "commit_index",
    )
    .and_then(|v| v.parse().ok())
    .expect("commit index");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let applied: u64 = match cluster.info(leader).await {
            Some(info) => info_field(&info, "applied_index")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            None => 0,
        };
        if applied >= commit {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "restarted node stuck at {applied} < {commit}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every acknowledged write is readable through the cluster...
    for &i in &acked {
        let got = client
            .get(format!("key{i:06}").as_bytes())
            .await
            .expect("get");
        assert_eq!(got, Some(format!("value{i:06}").into_bytes()), "key{i:06}");
    }
    // ... and present in every node's store once they stopped cleanly.
    cluster.stop();
    for n in 0..3 {
        let path = cluster.data_dir(n).join(format!("node{}.pool", n + 1));
        let store = ListStore::open(&path, &ListOptions::default()).expect("open store");
        let last = store.last_index();
        for &i in &acked {
            let got = store
                .get(format!("key{i:06}").as_bytes(), last)
                .expect("get");
            assert_eq!(
                got,
                Some(format!("value{i:06}").into_bytes()),
                "node {} lost key{i:06}",
                n + 1
            );
        }
    }
}
