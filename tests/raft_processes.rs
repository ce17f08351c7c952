//! The real-process test of the Raft service: three `raft_node` processes on
//! loopback (list engine, pools on plain files: msync mode, durable). A client keeps
//! writing; the leader is killed with SIGKILL mid-load; writing goes on against the
//! new leader; the killed node is restarted and must catch up. Then every write
//! that was acknowledged must be readable through the cluster, and — after a clean
//! SIGTERM shutdown, which must exit 0 — present in every node's store on disk.
//!
//! A node over an empty data directory, started without `--bootstrap` or
//! `--join`, is refused (exit 1, one line, nothing written); a follower killed with
//! SIGKILL whose data directory is then deleted is refused the same way on restart,
//! and once restarted with `--join` catches up while the cluster keeps serving,
//! every acknowledged write then readable through it and present in its own pool.
//!
//! Snapshots: a follower killed with SIGKILL in the middle of installing a
//! snapshot (it lagged behind entries the leader compacted away) restarts, installs
//! the snapshot again, holds every acknowledged write, and leaves no staging pool.
//!
//! The `raft_node` example binary comes from the same `cargo test` build (examples
//! are built with the tests); if it is missing or lacks a flag, the test builds it
//! (`proc_cluster::raft_node_binary`, shared with the other process tests).

mod proc_cluster;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proc_cluster::{find_leader, free_port, info_at, raft_node_binary, sigkill, stop_cleanly};
use raft_nvm::resp::{info_field, ClusterClient};
use raft_nvm::{ListOptions, ListStore, Store};

/// The `raft_node` flags these tests pass (a build that lacks one is rebuilt).
const FLAGS: [&str; 6] = [
    "--bootstrap",
    "--pool-size",
    "--join",
    "--compact-ms",
    "--window-entries",
    "--snapshot-chunk-bytes",
];

/// Each node's pool, in bytes. These tests write a few MB; the pools are on the
/// temporary directory's disk and allocated in full when created (`fallocate`), so
/// the default 256 MiB would ask for 768 MiB per cluster, two clusters at a time:
/// more than a CI machine's disk may have free.
const POOL_SIZE: &str = "33554432";

struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    raft: Vec<SocketAddr>,
    client: Vec<SocketAddr>,
    procs: Vec<Option<Child>>,
    /// Flags every node gets.
    flags: Vec<String>,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster::with_flags(&[])
    }

    /// A cluster whose nodes all get `flags`.
    fn with_flags(flags: &[&str]) -> Cluster {
        let raft = (0..3)
            .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
            .collect();
        let client = (0..3)
            .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
            .collect();
        let mut c = Cluster {
            bin: raft_node_binary(&FLAGS),
            dir: tempfile::tempdir().expect("tempdir"),
            raft,
            client,
            procs: vec![None, None, None],
            flags: flags.iter().map(|f| f.to_string()).collect(),
        };
        for i in 0..3 {
            c.spawn_with(i, &["--bootstrap"]);
        }
        c
    }

    fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("node{}", i + 1))
    }

    /// The command line of node `i` (list engine), plus `extra` flags.
    fn command(&self, i: usize, extra: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--id")
            .arg((i + 1).to_string())
            .arg("--data-dir")
            .arg(self.data_dir(i))
            .args(["--engine", "list", "--pool-mode", "auto"])
            .args(["--pool-size", POOL_SIZE])
            .args(&self.flags)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for j in 0..3 {
            cmd.arg("--member")
                .arg(format!("{}={}/{}", j + 1, self.raft[j], self.client[j]));
        }
        cmd
    }

    /// Restarts node `i` on its existing store.
    fn spawn(&mut self, i: usize) {
        self.spawn_with(i, &[]);
    }

    fn spawn_with(&mut self, i: usize, extra: &[&str]) {
        let child = self.command(i, extra).spawn().expect("spawn raft_node");
        self.procs[i] = Some(child);
    }

    fn kill9(&mut self, i: usize) {
        if let Some(p) = self.procs[i].take() {
            sigkill(p).expect("SIGKILL");
        }
    }

    /// SIGTERM every node; each must exit 0.
    fn stop(&mut self) {
        for (i, slot) in self.procs.iter_mut().enumerate() {
            if let Some(p) = slot.take() {
                stop_cleanly(p, i + 1);
            }
        }
    }

    async fn info(&self, i: usize) -> Option<String> {
        info_at(self.client[i]).await
    }

    async fn leader(&self) -> usize {
        let clients: Vec<Option<SocketAddr>> = self.client.iter().copied().map(Some).collect();
        find_leader(&clients).await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in self.procs.iter_mut().filter_map(Option::take) {
            let _ = sigkill(p);
        }
    }
}

/// Runs `cmd` to its end (at most 20 s) with stderr captured: its status and stderr.
fn run_to_end(mut cmd: Command) -> (std::process::ExitStatus, String) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn raft_node");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("raft_node without a store did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        std::io::Read::read_to_string(&mut pipe, &mut stderr).expect("read stderr");
    }
    (status, stderr)
}

/// A node refused for want of a store: exit status 1 and exactly one line on
/// stderr that names the path and the two ways out.
fn assert_refused(status: std::process::ExitStatus, stderr: &str, path: &Path) {
    assert_eq!(status.code(), Some(1), "exit status; stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr:?}");
    let line = lines[0];
    assert!(line.starts_with("raft_node: node "), "{line}");
    assert!(
        line.contains(&path.display().to_string()),
        "names {}: {line}",
        path.display()
    );
    assert!(
        line.contains("--bootstrap") && line.contains("--join"),
        "{line}"
    );
}

/// Every file under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            out.extend(files_under(&p));
        }
        out.push(p);
    }
    out
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
    wait_caught_up(&cluster, leader).await;
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

#[test]
fn a_node_over_an_empty_data_dir_is_refused() {
    let bin = raft_node_binary(&FLAGS);
    let dir = tempfile::tempdir().expect("tempdir");
    let member = |id: u16| format!("{id}=127.0.0.1:{}/127.0.0.1:{}", free_port(), free_port());
    for (engine, store) in [("list", "node1.pool"), ("wal", "node1.wal")] {
        // A data directory that exists but is empty (wiped), and one that is gone.
        for existing in [true, false] {
            let data = dir.path().join(format!("{engine}-{existing}"));
            if existing {
                std::fs::create_dir(&data).expect("mkdir");
            }
            let mut cmd = Command::new(&bin);
            cmd.args(["--id", "1", "--engine", engine, "--data-dir"])
                .arg(&data)
                .args(["--member", &member(1), "--member", &member(2)])
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null());
            let (status, stderr) = run_to_end(cmd);
            assert_refused(status, &stderr, &data.join(store));
            assert_eq!(
                data.exists(),
                existing,
                "{engine}: the directory is as it was"
            );
            assert_eq!(
                files_under(&data),
                Vec::<PathBuf>::new(),
                "{engine}: nothing written"
            );
        }
    }
}

/// Every file under `dir` with its contents (none of them is a FIFO here).
fn contents_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<(PathBuf, Vec<u8>)> = files_under(dir)
        .into_iter()
        .map(|p| {
            let bytes = if p.is_dir() {
                Vec::new()
            } else {
                std::fs::read(&p).expect("read")
            };
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

/// A one-member cluster of each engine acknowledges keys and stops cleanly; its
/// last record is flipped (and, for the WAL, its log deleted): the restart
/// without `--bootstrap` exits 1 with one `raft_node:` line naming the file, and
/// writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_store_is_refused_with_one_line_and_nothing_written() {
    let bin = raft_node_binary(&FLAGS);
    let dir = tempfile::tempdir().expect("tempdir");
    for engine in ["list", "wal"] {
        let data = dir.path().join(engine);
        let (raft, client) = (free_port(), free_port());
        let command = |extra: &[&str]| {
            let mut cmd = Command::new(&bin);
            cmd.args(["--id", "1", "--engine", engine, "--pool-size", POOL_SIZE])
                .arg("--data-dir")
                .arg(&data)
                .arg("--member")
                .arg(format!("1=127.0.0.1:{raft}/127.0.0.1:{client}"))
                .args(extra)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null());
            cmd
        };
        let node = command(&["--bootstrap"])
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn raft_node");
        let addr = SocketAddr::from(([127, 0, 0, 1], client));
        find_leader(&[Some(addr)]).await;
        let mut c = ClusterClient::new(vec![addr]);
        c.max_attempts = 2000;
        for i in 0..20 {
            let (key, value) = (format!("key{i:03}"), format!("value{i:03}-acked"));
            c.set(key.as_bytes(), value.as_bytes()).await.expect("SET");
        }
        stop_cleanly(node, 1);

        // The last acknowledged value, one byte flipped.
        let store = match engine {
            "list" => data.join("node1.pool"),
            _ => files_under(&data.join("node1.wal"))
                .into_iter()
                .find(|p| p.extension().is_some_and(|x| x == "log"))
                .expect("a log file"),
        };
        let pristine = std::fs::read(&store).expect("read store");
        let mut bytes = pristine.clone();
        let at = bytes
            .windows(12)
            .rposition(|w| w == b"value019-ack")
            .expect("the last value");
        bytes[at + 3] ^= 1;
        std::fs::write(&store, &bytes).expect("write");
        let mut damages = vec![("a flipped byte", "corrupt store")];
        if engine == "wal" {
            damages.push(("a deleted log", "missing"));
        }
        for (damage, says) in damages {
            if damage == "a deleted log" {
                std::fs::remove_file(&store).expect("remove the log");
            }
            let before = contents_under(&data);
            let (status, stderr) = run_to_end(command(&[]));
            assert_eq!(status.code(), Some(1), "{engine}, {damage}: {stderr}");
            let lines: Vec<&str> = stderr.lines().collect();
            assert_eq!(lines.len(), 1, "{engine}, {damage}: one line: {stderr:?}");
            assert!(lines[0].starts_with("raft_node: "), "{}", lines[0]);
            assert!(lines[0].contains(says), "{engine}, {damage}: {}", lines[0]);
            assert!(
                lines[0].contains(&store.display().to_string()),
                "{engine}, {damage}: names the file: {}",
                lines[0]
            );
            assert!(
                before == contents_under(&data),
                "{engine}, {damage}: the refused start wrote"
            );
        }
    }
}

/// The restarted node's applied index reaches the leader's commit index within 30 s.
async fn wait_caught_up(cluster: &Cluster, node: usize) {
    let leader = cluster.leader().await;
    let commit: u64 = info_field(&cluster.info(leader).await.expect("info"), "commit_index")
        .and_then(|v| v.parse().ok())
        .expect("commit index");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let applied: u64 = match cluster.info(node).await {
            Some(info) => info_field(&info, "applied_index")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            None => 0,
        };
        if applied >= commit {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {} stuck at {applied} < {commit}",
            node + 1
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_follower_is_refused_then_rejoins_with_join() {
    let mut cluster = Cluster::new();
    let leader = cluster.leader().await;
    let mut client = ClusterClient::new(cluster.client.clone());
    client.max_attempts = 2000;
    let mut acked = Vec::new();
    for i in 0..200 {
        write(&mut client, i, &mut acked).await;
    }
    // A follower loses its data: killed, its data directory deleted.
    let f = (leader + 1) % 3;
    cluster.kill9(f);
    std::fs::remove_dir_all(cluster.data_dir(f)).expect("wipe the follower");
    let pool = cluster.data_dir(f).join(format!("node{}.pool", f + 1));
    // Restarted as usual (no flag): refused, nothing written.
    let (status, stderr) = run_to_end(cluster.command(f, &[]));
    assert_refused(status, &stderr, &pool);
    assert!(!cluster.data_dir(f).exists(), "nothing written");
    // The other two go on serving.
    for i in 200..300 {
        write(&mut client, i, &mut acked).await;
    }
    // Told to join: it starts empty, catches up while writes go on.
    cluster.spawn_with(f, &["--join"]);
    for i in 300..400 {
        write(&mut client, i, &mut acked).await;
    }
    assert_eq!(
        acked.len(),
        400,
        "the cluster served every write throughout"
    );
    wait_caught_up(&cluster, f).await;
    // The join is over once it caught up: its marker is gone.
    let marker = cluster
        .data_dir(f)
        .join(format!("node{}.pool.joining", f + 1));
    let deadline = Instant::now() + Duration::from_secs(10);
    while marker.exists() {
        assert!(
            Instant::now() < deadline,
            "still joining: {}",
            marker.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every acknowledged write is readable, through the rejoined node (asked
    // first, it names the leader, which serves the read) ...
    let leader_addr = cluster.client[cluster.leader().await].to_string();
    let info = cluster.info(f).await.expect("info of the rejoined node");
    assert_eq!(info_field(&info, "leader_addr"), Some(leader_addr.as_str()));
    let mut addrs = vec![cluster.client[f]];
    addrs.extend((0..3).filter(|&j| j != f).map(|j| cluster.client[j]));
    let mut via_f = ClusterClient::new(addrs);
    via_f.max_attempts = 2000;
    for &i in &acked {
        let got = via_f
            .get(format!("key{i:06}").as_bytes())
            .await
            .expect("get");
        assert_eq!(got, Some(format!("value{i:06}").into_bytes()), "key{i:06}");
    }
    // ... and in its own pool once the cluster stopped cleanly.
    cluster.stop();
    let store = ListStore::open(&pool, &ListOptions::default()).expect("open store");
    let last = store.last_index();
    for &i in &acked {
        let got = store
            .get(format!("key{i:06}").as_bytes(), last)
            .expect("get");
        assert_eq!(
            got,
            Some(format!("value{i:06}").into_bytes()),
            "rejoined node {} lacks key{i:06}",
            f + 1
        );
    }
}

/// Writes `value` under every key of `keys` through its own client, one task per
/// `tasks` share of the keys (each key written by one task, in order); returns the
/// keys acknowledged.
async fn write_keys(
    addrs: &[SocketAddr],
    keys: std::ops::Range<usize>,
    value: impl Fn(usize) -> Vec<u8> + Send + Sync + Clone + 'static,
    tasks: usize,
) -> Vec<usize> {
    let mut handles = Vec::new();
    for t in 0..tasks {
        let addrs = addrs.to_vec();
        let value = value.clone();
        let keys = keys.clone();
        handles.push(tokio::spawn(async move {
            let mut c = ClusterClient::new(addrs);
            c.max_attempts = 2000;
            let mut acked = Vec::new();
            for i in keys.filter(|i| i % tasks == t) {
                if c.set(format!("key{i:06}").as_bytes(), &value(i))
                    .await
                    .is_ok()
                {
                    acked.push(i);
                }
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for h in handles {
        acked.extend(h.await.expect("writer task"));
    }
    acked
}

/// The value of key `i` in round `round`: about 3 KiB.
fn round_value(i: usize, round: usize) -> Vec<u8> {
    let mut v = format!("r{round}:k{i}:").into_bytes();
    v.resize(3000, b'a' + (round % 26) as u8);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_snapshot_install_then_catch_up() {
    // Frequent compaction, a small leader window and small chunks: a follower that
    // misses a few hundred overwrites needs a snapshot of a few hundred chunks.
    let mut cluster = Cluster::with_flags(&[
        "--compact-ms",
        "50",
        "--window-entries",
        "64",
        "--snapshot-chunk-bytes",
        "4096",
    ]);
    let leader = cluster.leader().await;
    let addrs = cluster.client.clone();
    const KEYS: usize = 400;
    // The last acknowledged round of every key.
    let mut expect: std::collections::BTreeMap<usize, usize> = Default::default();
    for i in write_keys(&addrs, 0..KEYS, |i| round_value(i, 0), 8).await {
        expect.insert(i, 0);
    }
    let f = (leader + 1) % 3;
    cluster.kill9(f);
    // Every key overwritten, then the first ones again: the entries the follower
    // needs first are compacted away on the leader.
    for i in write_keys(&addrs, 0..KEYS, |i| round_value(i, 1), 8).await {
        expect.insert(i, 1);
    }
    for i in write_keys(&addrs, 0..40, |i| round_value(i, 2), 8).await {
        expect.insert(i, 2);
    }
    assert_eq!(expect.len(), KEYS, "every key acknowledged");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Back: it gets a snapshot; killed while installing it.
    let pool = cluster.data_dir(f).join(format!("node{}.pool", f + 1));
    let staging = cluster
        .data_dir(f)
        .join(format!("node{}.pool.incoming", f + 1));
    cluster.spawn(f);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !staging.exists() {
        assert!(
            Instant::now() < deadline,
            "no snapshot installation started"
        );
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    // Killed at once: the installation of these few hundred chunks takes a few
    // milliseconds at most on a quiet machine.
    cluster.kill9(f);
    assert!(
        staging.exists(),
        "killed during the installation (its staging pool is there)"
    );
    // Restarted: the unfinished installation is removed, a snapshot installed.
    cluster.spawn(f);
    let more = write_keys(&addrs, 40..80, |i| round_value(i, 3), 4).await;
    for i in more {
        expect.insert(i, 3);
    }
    wait_caught_up(&cluster, f).await;
    assert!(!staging.exists(), "the staging pool does not leak");
    // Every acknowledged write is readable through the cluster ...
    let mut client = ClusterClient::new(addrs.clone());
    client.max_attempts = 2000;
    for (&i, &round) in &expect {
        let got = client
            .get(format!("key{i:06}").as_bytes())
            .await
            .expect("get");
        assert_eq!(got, Some(round_value(i, round)), "key{i:06}");
    }
    // ... and in the restarted follower's own pool after a clean stop.
    cluster.stop();
    assert!(!staging.exists(), "the staging pool does not leak");
    let store = ListStore::open(&pool, &ListOptions::default()).expect("open store");
    let last = store.last_index();
    for (&i, &round) in &expect {
        let got = store
            .get(format!("key{i:06}").as_bytes(), last)
            .expect("get");
        assert_eq!(
            got,
            Some(round_value(i, round)),
            "node {} lacks key{i:06}",
            f + 1
        );
    }
}
