//! A running node under hostile clients: hundreds of idle connections, a slow-loris
//! client that starts a request and trickles it, and connections beyond the
//! listeners' caps, while a well-behaved client keeps doing `SET`/`GET`.
//!
//! What it checks (see `NodeConfig::max_clients`, `request_timeout`,
//! `max_peer_connections` and `max_metrics_connections`):
//!
//! - the slow-loris connection is closed within its bound (the configured
//!   request timeout, here 1 s, plus scheduling slack);
//! - idle connections without a partial request stay open (they are not slow
//!   loris);
//! - a RESP connection over the cap gets `-ERR max number of clients reached` and
//!   is closed; a transport or metrics connection over its cap is closed at once;
//! - the busy client's every command succeeds throughout;
//! - the process's resident memory grows by less than [`RSS_BOUND`] for all of it.
#![cfg(feature = "server")]

mod single_node;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raft_nvm::node::{Node, NodeConfig};
use raft_nvm::replica::Engine;
use raft_nvm::resp::{Reply, RespClient};
use raft_nvm::ListOptions;

/// Idle connections opened against the node.
const IDLE: usize = 300;
/// The RESP cap in this test: the idle crowd, the busy client, the slow loris
/// and the client that waits for the election, and a few to spare.
const MAX_CLIENTS: usize = IDLE + 10;
/// The request timeout in this test (the default is 10 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// The most the slow loris may outlive [`REQUEST_TIMEOUT`]: a loaded 2-core CI
/// machine may be late by a scheduling quantum or two, not by seconds.
const CLOSE_SLACK: Duration = Duration::from_secs(4);
/// The bound on the growth of the process's resident memory: 300 connections
/// cost each a task, a socket and two 16 KiB buffers (reserved, mostly untouched),
/// about 10 MiB at worst; 64 MiB leaves room for the allocator's per-thread arenas
/// and the test's own threads, yet a per-connection cost of 200 KiB (a leak of the
/// kind this guards against) would exceed it.
const RSS_BOUND: u64 = 64 << 20;

/// The resident set of this process (the node runs in it), from /proc.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line");
    kib << 10
}

fn start_node(rt: &tokio::runtime::Runtime, dir: &std::path::Path) -> (Node, NodeConfig) {
    let engine = Engine::List {
        path: dir.join("node1.pool"),
        pool_size: 4 << 20,
        opts: ListOptions::default(),
    };
    let mut cfg = single_node::single_node(engine);
    cfg.max_clients = MAX_CLIENTS;
    cfg.request_timeout = REQUEST_TIMEOUT;
    cfg.max_peer_connections = 4;
    cfg.max_metrics_connections = 4;
    cfg.metrics_addr = Some("127.0.0.1:0".parse().expect("address"));
    let node = rt.block_on(Node::start(cfg.clone())).expect("node starts");
    // Wait for the single node to elect itself.
    rt.block_on(async {
        let mut c = RespClient::connect(node.client_addr())
            .await
            .expect("connect");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match c.command(&[b"SET", b"ready", b"1"]).await {
                Ok(Reply::Simple(s)) if s == "OK" => break,
                other => assert!(Instant::now() < deadline, "no leader: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    (node, cfg)
}

/// A client that keeps doing `SET`/`GET` of its own keys until `stop`, checking
/// every reply; returns how many round trips it made.
fn busy_client(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    rt.spawn(async move {
        let mut c = RespClient::connect(addr)
            .await
            .expect("busy client connects");
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let key = format!("busy{}", i % 16);
            let value = format!("v{i}");
            let set = c
                .command(&[b"SET", key.as_bytes(), value.as_bytes()])
                .await
                .expect("SET answered");
            assert_eq!(set, Reply::Simple("OK".into()), "SET {key}");
            let get = c
                .command(&[b"GET", key.as_bytes()])
                .await
                .expect("GET answered");
            assert_eq!(get, Reply::Bulk(value.into_bytes()), "GET {key}");
            done.fetch_add(1, Ordering::Relaxed);
            i += 1;
        }
    })
}

/// Sends the start of a request announcing a 100-byte value, then one byte of it
/// every 100 ms (it would take 10 s to finish), and returns how long after its
/// first byte the server closed the connection, with what it sent.
fn slow_loris(addr: SocketAddr) -> (Duration, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("slow loris connects");
    let mut reader = s.try_clone().expect("clone");
    let started = Instant::now();
    s.write_all(b"*3\r\n$3\r\nSET\r\n$4\r\nslow\r\n$100\r\nx")
        .expect("first bytes");
    let writer = std::thread::spawn(move || {
        for _ in 0..99 {
            std::thread::sleep(Duration::from_millis(100));
            if s.write_all(b"x").is_err() {
                return;
            }
        }
    });
    reader
        .set_read_timeout(Some(REQUEST_TIMEOUT + CLOSE_SLACK + Duration::from_secs(5)))
        .expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            // A reset after the error line counts as closed too.
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the slow loris was not closed: {e} after {:?}",
                started.elapsed()
            ),
        }
    }
    let elapsed = started.elapsed();
    let _ = writer.join();
    (elapsed, got)
}

/// Whether `s` was refused: closed (after `line`, if given) within `within`,
/// rather than held open.
fn refused(s: &mut TcpStream, line: Option<&[u8]>, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 128];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                assert!(got.is_empty(), "an open connection sent {got:?}");
                return false;
            }
            Err(e) => panic!("reading: {e}"),
        }
    }
    if let Some(line) = line {
        assert_eq!(got, line, "the refusal");
    }
    true
}

#[test]
fn idle_crowd_slow_loris_and_caps_leave_a_busy_client_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = single_node::runtime();
    let (node, _cfg) = start_node(&rt, dir.path());
    let client_addr = node.client_addr();
    let rss_before = rss_bytes();

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let busy = busy_client(&rt, client_addr, Arc::clone(&stop), Arc::clone(&done));

    // The idle crowd: connected, never a byte.
    let mut idle: Vec<TcpStream> = (0..IDLE)
        .map(|_| TcpStream::connect(client_addr).expect("idle connection"))
        .collect();
    let before_loris = done.load(Ordering::Relaxed);

    let (elapsed, said) = slow_loris(client_addr);
    assert!(
        elapsed >= REQUEST_TIMEOUT && elapsed <= REQUEST_TIMEOUT + CLOSE_SLACK,
        "the slow loris was closed after {elapsed:?} (timeout {REQUEST_TIMEOUT:?})"
    );
    let said = String::from_utf8_lossy(&said);
    assert!(
        said.starts_with("-ERR") && said.contains("timed out"),
        "the slow loris was told {said:?}"
    );
    assert!(
        done.load(Ordering::Relaxed) > before_loris,
        "the busy client made no progress while the slow loris was served"
    );

    // The idle crowd outlived the slow loris: no partial request, no timeout.
    for s in idle.iter_mut().step_by(30) {
        assert!(
            !refused(s, None, Duration::from_millis(50)),
            "an idle connection was closed"
        );
    }

    // Over the cap: 300 idle and the busy client are open (the slow loris and the
    // election client are gone, reaped by the time of the next accept), so of 20
    // more, at most 9 fit and the rest are refused, after the ones that fit.
    let extra: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(client_addr).expect("extra connection"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let outcomes: Vec<bool> = extra
        .into_iter()
        .map(|mut s| {
            refused(
                &mut s,
                Some(b"-ERR max number of clients reached\r\n"),
                Duration::from_millis(200),
            )
        })
        .collect();
    let open = outcomes.iter().take_while(|&&r| !r).count();
    assert!(
        outcomes[open..].iter().all(|&r| r),
        "a connection was admitted after one was refused: {outcomes:?}"
    );
    let fit = MAX_CLIENTS - IDLE - 1;
    assert!(
        (fit.saturating_sub(2)..=fit).contains(&open),
        "{open} of 20 connections over {} admitted (room for {fit}): {outcomes:?}",
        IDLE + 1
    );

    let served = done.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    rt.block_on(busy)
        .expect("the busy client's every command succeeded");
    assert!(served >= 10, "only {served} SET/GET round trips");

    let rss_after = rss_bytes();
    let grown = rss_after.saturating_sub(rss_before);
    assert!(
        grown < RSS_BOUND,
        "resident memory grew by {} KiB ({} KiB before)",
        grown >> 10,
        rss_before >> 10
    );
    eprintln!(
        "slow loris closed after {elapsed:?}; {served} SET/GET round trips; {open} of 20 \
         over-cap connections admitted; RSS grew {} KiB",
        grown >> 10
    );
    drop(idle);
    rt.block_on(node.shutdown()).expect("shutdown");
}

#[test]
fn transport_and_metrics_connections_over_their_caps_are_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = single_node::runtime();
    let (node, cfg) = start_node(&rt, dir.path());
    let metrics = node.metrics_addr().expect("a metrics listener");
    for (what, addr, cap) in [
        ("transport", node.raft_addr(), cfg.max_peer_connections),
        ("metrics", metrics, cfg.max_metrics_connections),
    ] {
        let mut held: Vec<TcpStream> = (0..cap)
            .map(|_| TcpStream::connect(addr).expect("connect"))
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let mut over = TcpStream::connect(addr).expect("connect over the cap");
        assert!(
            refused(&mut over, None, Duration::from_secs(2)),
            "a {what} connection over the cap of {cap} was kept"
        );
        assert!(
            !refused(&mut held[0], None, Duration::from_millis(50)),
            "a {what} connection within the cap was closed"
        );
        drop(held);
    }
    // Room again once the crowd left: a scrape is served.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = TcpStream::connect(metrics).expect("connect");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("request");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        if text.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "no scrape served: {text:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    rt.block_on(node.shutdown()).expect("shutdown");
}

/// The timeout is per request, not per connection: a client that sends each of
/// two requests in pieces over 0.6 s (1.2 s in all, more than the 1 s timeout) is
/// served both, and stays connected.
#[test]
fn a_slow_but_finishing_client_is_timed_per_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = single_node::runtime();
    let (node, _cfg) = start_node(&rt, dir.path());
    let mut s = TcpStream::connect(node.client_addr()).expect("connect");
    let pieces: [&[u8]; 3] = [b"*3\r\n$3\r\nSET\r\n", b"$1\r\nk\r\n$2", b"\r\nvv\r\n"];
    for round in 0..2 {
        for piece in pieces {
            s.write_all(piece).expect("a piece");
            std::thread::sleep(REQUEST_TIMEOUT * 3 / 10);
        }
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut reply = [0u8; 5];
        s.read_exact(&mut reply)
            .unwrap_or_else(|e| panic!("round {round}: no reply: {e}"));
        assert_eq!(&reply, b"+OK\r\n", "round {round}");
    }
    rt.block_on(node.shutdown()).expect("shutdown");
}
