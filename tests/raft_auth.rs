//! Authenticated peers and clients on real `raft_node` processes: peers
//! authenticate, and the RESP port can require a password.
//!
//! - Three nodes given the same `--cluster-secret-file` and `--requirepass-file`
//!   elect a leader and replicate; a client must `AUTH` first (`NOAUTH` before,
//!   `WRONGPASS` for a wrong password), and `redis-cli -a` works, following a
//!   follower's `MOVED` with `-c` (when `redis-cli` is installed).
//! - A member given another secret is never heard: the two others elect a leader
//!   and commit without it, and it never learns of the leader or the writes.
//! - A secret file that is readable by others, empty, or a FIFO is refused at
//!   start with one `raft_node:` line, before anything is created.

#[path = "proc_cluster/mod.rs"]
mod proc_cluster;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proc_cluster::{free_port, installed, raft_node_binary, sigkill};
use raft_nvm::resp::{info_field, Reply, RespClient};

const FLAGS: &[&str] = &["--cluster-secret-file", "--requirepass-file", "--bootstrap"];

/// Writes `bytes` to `dir/name` with `mode`.
fn secret_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write a secret file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    path
}

/// Three `raft_node` processes, each with its own extra flags.
struct Trio {
    procs: Vec<Option<Child>>,
    client: Vec<SocketAddr>,
    dir: tempfile::TempDir,
}

impl Trio {
    fn start(extra: [Vec<String>; 3]) -> Trio {
        let bin = raft_node_binary(FLAGS);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let addrs = || {
            (0..3)
                .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
                .collect::<Vec<_>>()
        };
        let (raft, client) = (addrs(), addrs());
        let procs = (0..3)
            .map(|i| {
                let mut cmd = Command::new(&bin);
                cmd.arg("--id")
                    .arg((i + 1).to_string())
                    .arg("--data-dir")
                    .arg(dir.path().join(format!("node{}", i + 1)))
                    .args(["--engine", "wal", "--bootstrap"])
                    .args(&extra[i])
                    .env("RUST_LOG", "error")
                    .stdout(Stdio::null())
                    .stderr(Stdio::inherit());
                for j in 0..3 {
                    cmd.arg("--member")
                        .arg(format!("{}={}/{}", j + 1, raft[j], client[j]));
                }
                Some(cmd.spawn().expect("spawn raft_node"))
            })
            .collect();
        Trio { procs, client, dir }
    }

    fn assert_running(&mut self) {
        for (i, p) in self.procs.iter_mut().enumerate() {
            let status = p.as_mut().expect("started").try_wait().expect("try_wait");
            assert!(status.is_none(), "node {} exited: {status:?}", i + 1);
        }
    }
}

impl Drop for Trio {
    fn drop(&mut self) {
        for p in self.procs.drain(..).flatten() {
            let _ = sigkill(p);
        }
        let _ = &self.dir;
    }
}

/// A client of `addr` that gave `password`, if any.
async fn client(addr: SocketAddr, password: Option<&[u8]>) -> Option<RespClient> {
    let mut c = RespClient::connect(addr).await.ok()?;
    if let Some(pw) = password {
        match c.command(&[b"AUTH", pw]).await.ok()? {
            Reply::Simple(s) if s == "OK" => {}
            other => panic!("AUTH refused: {other:?}"),
        }
    }
    Some(c)
}

/// Node `addr`'s INFO text, authenticating with `password`.
async fn info(addr: SocketAddr, password: Option<&[u8]>) -> Option<String> {
    let mut c = client(addr, password).await?;
    match c.command(&[b"INFO"]).await.ok()? {
        Reply::Bulk(b) => String::from_utf8(b).ok(),
        _ => None,
    }
}

/// The index of the node among `nodes` that leads, once one does.
async fn leader(addrs: &[SocketAddr], nodes: &[usize], password: Option<&[u8]>) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        for &i in nodes {
            if let Some(text) = info(addrs[i], password).await {
                if info_field(&text, "role") == Some("leader") {
                    return i;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no leader within 20 s");
}

/// `redis-cli` with `args` against `addr`; its stdout, trimmed.
fn redis_cli(addr: SocketAddr, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &addr.port().to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_a_secret_and_a_password_serves_only_authenticated_clients() {
    let keys = tempfile::tempdir().expect("tempdir");
    let secret = secret_file(keys.path(), "cluster.secret", b"peer-secret-1\n", 0o600);
    let pass = secret_file(keys.path(), "client.pass", b"client-pw\n", 0o600);
    let flags = || {
        vec![
            "--cluster-secret-file".to_string(),
            secret.display().to_string(),
            "--requirepass-file".to_string(),
            pass.display().to_string(),
        ]
    };
    let mut trio = Trio::start([flags(), flags(), flags()]);
    let pw: &[u8] = b"client-pw";
    let l = leader(&trio.client, &[0, 1, 2], Some(pw)).await;

    // Before AUTH: refused, and nothing reaches the node.
    let mut c = RespClient::connect(trio.client[l]).await.expect("connect");
    let noauth = Reply::Error("NOAUTH Authentication required.".into());
    assert_eq!(
        c.command(&[b"SET", b"k", b"v"]).await.expect("reply"),
        noauth
    );
    assert_eq!(c.command(&[b"INFO"]).await.expect("reply"), noauth);
    assert_eq!(
        c.command(&[b"AUTH", b"client-pw\n"]).await.expect("reply"),
        Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into())
    );
    assert_eq!(
        c.command(&[b"AUTH", b"default", pw]).await.expect("reply"),
        Reply::Simple("OK".into())
    );
    assert_eq!(
        c.command(&[b"SET", b"k", b"v"]).await.expect("reply"),
        Reply::Simple("OK".into())
    );
    // The write replicated over authenticated peer connections: every node
    // applied it.
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..3 {
        loop {
            let text = info(trio.client[i], Some(pw)).await.unwrap_or_default();
            let applied: u64 = info_field(&text, "applied_index")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if applied >= 2 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {} did not apply the write",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    if installed("redis-cli") {
        let follower = trio.client[(l + 1) % 3];
        assert_eq!(
            redis_cli(
                follower,
                &["-a", "client-pw", "--no-auth-warning", "-c", "GET", "k"]
            ),
            "v"
        );
        let denied = redis_cli(follower, &["-c", "GET", "k"]);
        assert!(denied.contains("NOAUTH"), "{denied}");
    }
    trio.assert_running();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_another_secret_is_never_heard() {
    let keys = tempfile::tempdir().expect("tempdir");
    let right = secret_file(keys.path(), "right", b"the cluster's secret", 0o600);
    let wrong = secret_file(keys.path(), "wrong", b"a guess", 0o600);
    let flag = |p: &PathBuf| vec!["--cluster-secret-file".to_string(), p.display().to_string()];
    let mut trio = Trio::start([flag(&right), flag(&right), flag(&wrong)]);
    let l = leader(&trio.client, &[0, 1], None).await;
    let mut c = client(trio.client[l], None).await.expect("connect");
    for i in 0..5 {
        let key = format!("k{i}");
        assert_eq!(
            c.command(&[b"SET", key.as_bytes(), b"v"])
                .await
                .expect("reply"),
            Reply::Simple("OK".into()),
            "two of three members commit"
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let index = |text: &str| -> u64 {
        info_field(text, "last_index")
            .and_then(|v| v.parse().ok())
            .expect("last_index")
    };
    let led = info(trio.client[l], None)
        .await
        .expect("the leader answers INFO");
    let text = info(trio.client[2], None)
        .await
        .expect("node 3 answers INFO");
    assert_ne!(info_field(&text, "role"), Some("leader"), "{text}");
    assert_eq!(info_field(&text, "leader_id"), Some("none"), "{text}");
    assert!(
        index(&text) + 5 <= index(&led),
        "node 3 received none of the writes: {text}"
    );
    trio.assert_running();
}

/// Runs `raft_node` over a fresh data directory with the given secret file and
/// asserts it refuses with one `raft_node:` line containing `expect`, creating
/// nothing.
fn assert_refused_with(secret: &Path, expect: &str) {
    let bin = raft_node_binary(FLAGS);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("node1");
    let port = || free_port().to_string();
    let mut child = Command::new(bin)
        .args(["--id", "1", "--bootstrap", "--engine", "wal"])
        .arg("--data-dir")
        .arg(&data)
        .arg("--member")
        .arg(format!("1=127.0.0.1:{}/127.0.0.1:{}", port(), port()))
        .arg("--cluster-secret-file")
        .arg(secret)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = sigkill(child);
            panic!("raft_node hung on secret file {secret:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert_eq!(status.code(), Some(1), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("raft_node:"))
        .unwrap_or_else(|| panic!("no raft_node: line in {stderr:?}"));
    assert!(line.contains(expect), "{line}");
    assert!(!data.exists(), "a refused start created {data:?}");
}

#[test]
fn unsafe_secret_files_are_refused_before_anything_is_written() {
    let keys = tempfile::tempdir().expect("tempdir");
    let d = keys.path();
    assert_refused_with(
        &secret_file(d, "shared", b"pw", 0o644),
        "group and other must have no access",
    );
    assert_refused_with(&secret_file(d, "empty", b"\n", 0o600), "is empty");
    assert_refused_with(&d.join("missing"), "No such file");
    let fifo = d.join("fifo");
    let made = Command::new("mkfifo")
        .arg("-m")
        .arg("600")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        assert_refused_with(&fifo, "is not a regular file (it is a FIFO)");
    }
}
