//! What clients and peers can make a `raft_node` process hold in unfinished input
//! is bounded, measured on the process's
//! resident memory (`VmRSS`, `VmHWM` in `/proc/<pid>/status`).
//!
//! A one-node cluster runs with the default limits: 256 MiB for the unfinished
//! requests of all RESP clients, 256 MiB for the unfinished frames of all peer
//! connections. Then either eight RESP clients each send 60 MiB of a 64 MiB bulk
//! and hold it there, or six fake peers (which pass the Hello, as any process could
//! without a cluster secret) each send 60 MiB of a 64 MiB frame and hold it. Without
//! the shared budgets the node held 8 × 60 = 480 MiB (6 × 60 = 360 MiB); with them
//! its peak resident memory grows by at most the budget and a little slack, the
//! connections past the budget are closed, and the node still serves afterwards.
//! Each test takes a few seconds (it moves about 480 MiB over loopback).

#[path = "proc_cluster/mod.rs"]
mod proc_cluster;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proc_cluster::{free_port, raft_node_binary, sigkill};
use raft_nvm::net::{encode, Wire};
use raft_nvm::node::{Member, NodeConfig};
use raft_nvm::replica::Engine;
use raft_nvm::WalOptions;

/// The Raft address a hand-made Hello announces (nothing listens there).
const NOWHERE: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9);

const MIB: u64 = 1 << 20;
/// The defaults of `max_client_buffers` and `peer_frame_budget`.
const BUDGET: u64 = 256 * MIB;
/// Allowance beyond the budget: one 256 KiB read per connection, allocator
/// rounding, the tasks and buffers of the connections.
const SLACK: u64 = 40 * MIB;
/// What each attacker holds, of a bulk or frame of 64 MiB.
const HELD: usize = 60 << 20;
const ANNOUNCED: usize = 64 << 20;

/// A one-node cluster in its own process.
struct OneNode {
    child: Option<Child>,
    _dir: tempfile::TempDir,
    raft: SocketAddr,
    client: SocketAddr,
}

impl OneNode {
    fn start() -> OneNode {
        let bin = raft_node_binary(&["--bootstrap"]);
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .expect("a temporary directory");
        let raft = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let client = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = Command::new(bin)
            .args(["--id", "1", "--bootstrap", "--engine", "list"])
            .args(["--pool-size", &(16 * MIB).to_string()])
            .arg("--data-dir")
            .arg(dir.path().join("node1"))
            .arg("--member")
            .arg(format!("1={raft}/{client}"))
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn raft_node");
        let node = OneNode {
            child: Some(child),
            _dir: dir,
            raft,
            client,
        };
        node.wait_serving();
        node
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// `(VmRSS, VmHWM)` in bytes.
    fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the node's /proc status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .map(|kb| kb * 1024)
                .unwrap_or_else(|| panic!("{name} in /proc status"))
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Waits until a `SET` is acknowledged (the node leads and serves).
    fn wait_serving(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(reply) = command(self.client, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n") {
                if reply.starts_with(b"+OK") {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the node did not serve within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn assert_running(&mut self) {
        let status = self
            .child
            .as_mut()
            .expect("running")
            .try_wait()
            .expect("wait");
        assert!(status.is_none(), "the node exited: {status:?}");
    }
}

impl Drop for OneNode {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            let _ = sigkill(child);
        }
    }
}

/// Sends `request` on a new connection and returns the first reply bytes.
fn command(addr: SocketAddr, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(request)?;
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf)?;
    Ok(buf[..n].to_vec())
}

/// Whether the node closed `s` (it reads nothing the node did not send first).
fn closed_by_node(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // an error reply before the close
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false, // timed out: still open
        }
    }
}

/// Opens `n` connections to `addr`, writes `head` and then `HELD` bytes on each
/// (concurrently), and returns the connections still open, and how many the node
/// closed.
fn hold(addr: SocketAddr, n: usize, head: impl Fn(usize) -> Vec<u8>) -> (Vec<TcpStream>, usize) {
    let writers: Vec<_> = (0..n)
        .map(|i| {
            let head = head(i);
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).expect("connect");
                s.set_write_timeout(Some(Duration::from_secs(60)))
                    .expect("timeout");
                let chunk = vec![b'x'; 1 << 20];
                let mut ok = s.write_all(&head).is_ok();
                let mut sent = 0;
                while ok && sent < HELD {
                    ok = s.write_all(&chunk).is_ok();
                    sent += chunk.len();
                }
                s
            })
        })
        .collect();
    let mut open = Vec::new();
    let mut closed = 0;
    for w in writers {
        let mut s = w.join().expect("writer");
        if closed_by_node(&mut s) {
            closed += 1;
        } else {
            open.push(s);
        }
    }
    (open, closed)
}

/// Asserts the node's peak resident memory grew by at most the budget and the
/// slack since `baseline` (its resident memory before the attack).
fn assert_bounded(node: &OneNode, baseline: u64, what: &str) {
    // Let the node read what is still in flight.
    std::thread::sleep(Duration::from_millis(500));
    let (rss, hwm) = node.memory();
    let grew = hwm.saturating_sub(baseline);
    eprintln!(
        "{what}: baseline {} MiB, now {} MiB, peak {} MiB (grew {} MiB; bound {} MiB)",
        baseline / MIB,
        rss / MIB,
        hwm / MIB,
        grew / MIB,
        (BUDGET + SLACK) / MIB
    );
    assert!(
        grew <= BUDGET + SLACK,
        "{what}: the node's peak resident memory grew by {} MiB, past the {} MiB budget plus {} MiB slack",
        grew / MIB,
        BUDGET / MIB,
        SLACK / MIB
    );
}

#[test]
fn eight_clients_holding_60_mib_partial_bulks_stay_under_the_budget() {
    let mut node = OneNode::start();
    let (baseline, _) = node.memory();
    let (open, closed) = hold(node.client, 8, |i| {
        format!("*3\r\n$3\r\nSET\r\n$2\r\nk{i}\r\n${ANNOUNCED}\r\n").into_bytes()
    });
    assert_bounded(&node, baseline, "8 RESP clients");
    assert!(
        closed >= 4,
        "at most four 60 MiB requests fit in 256 MiB, but {} of 8 connections are open",
        open.len()
    );
    // The node still serves, and once the holders leave, their shares are back:
    // four new holders fit.
    drop(open);
    node.assert_running();
    node.wait_serving();
    std::thread::sleep(Duration::from_millis(200));
    let (again, closed) = hold(node.client, 4, |i| {
        format!("*3\r\n$3\r\nSET\r\n$2\r\nm{i}\r\n${ANNOUNCED}\r\n").into_bytes()
    });
    assert_eq!(closed, 0, "four 60 MiB requests fit once the others left");
    drop(again);
}

#[test]
fn six_peers_holding_60_mib_unfinished_frames_stay_under_the_budget() {
    let mut node = OneNode::start();
    let members = BTreeMap::from([(
        1,
        Member {
            raft: node.raft,
            client: node.client,
        },
    )]);
    let engine = Engine::Wal {
        dir: "unused".into(),
        opts: WalOptions::default(),
    };
    let cluster = NodeConfig::new(1, members, engine).cluster_id();
    let (baseline, _) = node.memory();
    let (open, closed) = hold(node.raft, 6, |i| {
        let mut head = Vec::new();
        encode(
            &Wire::Hello {
                from: 2 + i as u16,
                to: 1,
                cluster,
                reply_to: NOWHERE,
            },
            &mut head,
        )
        .expect("encode");
        head.extend_from_slice(&(ANNOUNCED as u32).to_le_bytes());
        head
    });
    assert_bounded(&node, baseline, "6 fake peers");
    assert!(
        closed >= 2,
        "at most four 60 MiB frames fit in 256 MiB, but {} of 6 peer connections are open",
        open.len()
    );
    drop(open);
    node.assert_running();
    node.wait_serving();
}
