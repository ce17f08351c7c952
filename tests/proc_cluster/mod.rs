//! A real three-node cluster of `raft_node` processes on loopback, for the process
//! tests (`raft_redis_cli`, `raft_small_pools`; `raft_processes` shares its binary,
//! port and `INFO` helpers): started with `--bootstrap` over
//! fresh data directories on a RAM file system where there is one (`/dev/shm`:
//! the pools' msyncs cost nothing there, and these tests are about the service,
//! not the disk), killed when dropped.
//!
//! The `raft_node` example binary comes from the same `cargo test` build when it
//! is there and knows every flag the test passes; otherwise the test builds it.

#![allow(dead_code)] // each test uses a different part

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use raft_nvm::resp::{info_field, Reply, RespClient};

/// The `raft_node` binary of this build, built if missing or if it does not know
/// every one of `flags` (an older build).
pub fn raft_node_binary(flags: &[&str]) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/examples/raft_node
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the target profile directory");
    let bin = profile_dir.join("examples").join("raft_node");
    let knows_flags = || {
        Command::new(&bin).arg("--help").output().is_ok_and(|o| {
            let help = String::from_utf8_lossy(&o.stdout);
            flags.iter().all(|f| help.contains(f))
        })
    };
    if !bin.exists() || !knows_flags() {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "--example", "raft_node"]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "cargo build --example raft_node failed");
    }
    assert!(bin.exists(), "{} not built", bin.display());
    bin
}

#[path = "../../crates/raft-nvm/tests/loopback/port.rs"]
mod port;
pub use port::free_port;

/// The `INFO` text of the node serving clients at `addr`, if it answers.
pub async fn info_at(addr: SocketAddr) -> Option<String> {
    let mut c = RespClient::connect(addr).await.ok()?;
    match c.command(&[b"INFO"]).await.ok()? {
        Reply::Bulk(b) => String::from_utf8(b).ok(),
        _ => None,
    }
}

/// The index of the first node among `clients` (their RESP addresses; `None`: not
/// running) that says it leads, once one does (within 20 s).
pub async fn find_leader(clients: &[Option<SocketAddr>]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        for (i, addr) in clients.iter().enumerate() {
            let Some(addr) = addr else {
                continue;
            };
            if let Some(info) = info_at(*addr).await {
                if info_field(&info, "role") == Some("leader") {
                    return i;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no leader within 20 s");
}

/// SIGTERM node `id`'s process; it must exit 0.
pub fn stop_cleanly(mut child: Child, id: usize) {
    let pid = i32::try_from(child.id()).expect("pid");
    // SAFETY: kill(2) with a pid this test spawned and still owns.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0, "SIGTERM node {id}");
    let status = child.wait().expect("wait");
    assert!(status.success(), "node {id} exited with {status}");
}

/// SIGKILL a node's process and reap it.
pub fn sigkill(mut child: Child) -> std::io::Result<()> {
    child.kill()?;
    let _ = child.wait();
    Ok(())
}

/// Three `raft_node` processes (list engine).
pub struct ProcCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub raft: Vec<SocketAddr>,
    pub client: Vec<SocketAddr>,
    procs: Vec<Option<Child>>,
}

impl ProcCluster {
    /// Starts three founding members with `extra` flags each.
    pub fn start(extra: &[&str]) -> ProcCluster {
        let mut flags: Vec<&str> = extra
            .iter()
            .copied()
            .filter(|a| a.starts_with("--"))
            .collect();
        flags.push("--bootstrap");
        let bin = raft_node_binary(&flags);
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .expect("a temporary directory");
        let addrs = || {
            (0..3)
                .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
                .collect::<Vec<_>>()
        };
        let mut c = ProcCluster {
            bin,
            dir,
            raft: addrs(),
            client: addrs(),
            procs: vec![None, None, None],
        };
        for i in 0..3 {
            let mut cmd = Command::new(&c.bin);
            cmd.arg("--id")
                .arg((i + 1).to_string())
                .arg("--data-dir")
                .arg(c.dir.path().join(format!("node{}", i + 1)))
                .args(["--engine", "list", "--pool-mode", "auto", "--bootstrap"])
                .args(extra)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::inherit());
            for j in 0..3 {
                cmd.arg("--member")
                    .arg(format!("{}={}/{}", j + 1, c.raft[j], c.client[j]));
            }
            c.procs[i] = Some(cmd.spawn().expect("spawn raft_node"));
        }
        c
    }

    /// Node `i`'s `INFO` text, if it answers.
    pub async fn info(&self, i: usize) -> Option<String> {
        info_at(self.client[i]).await
    }

    /// The leader's index, once every node answers and one says it leads.
    pub async fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let mut leader = None;
            let mut answered = 0;
            for i in 0..3 {
                if let Some(info) = self.info(i).await {
                    answered += 1;
                    if info_field(&info, "role") == Some("leader") {
                        leader = Some(i);
                    }
                }
            }
            if let (Some(l), 3) = (leader, answered) {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no leader within 20 s");
    }

    /// Asserts every node is still running.
    pub fn assert_running(&mut self) {
        for (i, p) in self.procs.iter_mut().enumerate() {
            let p = p.as_mut().expect("started");
            let status = p.try_wait().expect("try_wait");
            assert!(status.is_none(), "node {} exited: {status:?}", i + 1);
        }
    }
}

impl Drop for ProcCluster {
    fn drop(&mut self) {
        for p in self.procs.drain(..).flatten() {
            let _ = sigkill(p);
        }
    }
}

/// Whether the Redis tool `tool` runs. With `PMKIT_REQUIRE_REDIS_TOOLS=1` (CI) a
/// missing tool is a failure, not a skip.
pub fn installed(tool: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found || std::env::var("PMKIT_REQUIRE_REDIS_TOOLS").as_deref() != Ok("1"),
        "{tool} not found on PATH but PMKIT_REQUIRE_REDIS_TOOLS=1 (apt-get install redis-tools)"
    );
    found
}
