//! The TCP transport between nodes (`raft_nvm::net`): ordered delivery between two
//! and three transports (with a multi-megabyte snapshot chunk), refusal of bad
//! connections without harm to the rest, reconnection after a peer restarts (at
//! once, since a restarted peer announces itself), drops
//! that never block, and a frame decoder that never panics on random bytes.
//!
//! The ping-pong latency measurement is `#[ignore]`d; run it by hand with
//! `cargo test --release -p raft-nvm --test transport -- --ignored --nocapture ping_pong`.
#![cfg(feature = "server")]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use raft_nvm::net::{
    decode, encode, read_frame, FrameError, Transport, TransportConfig, TransportError, Wire,
    LEN_PREFIX,
};
use raft_nvm::raft::{Message, MessageBody};
use raft_nvm::{SnapshotItem, SnapshotMeta};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// The Raft address a hand-made Hello announces (nothing listens there).
const NOWHERE: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9);

#[path = "common/rng.rs"]
mod rng;
use rng::seeded;

/// A deadline for things that take milliseconds (generous for loaded debug builds).
const WAIT: Duration = Duration::from_secs(10);

fn heartbeat(from: u16, to: u16, seq: u64) -> Message {
    Message {
        from,
        to,
        term: 1,
        body: MessageBody::Heartbeat {
            commit: seq,
            ctx: None,
            sent: 0,
        },
    }
}

fn seq_of(msg: &Message) -> u64 {
    match msg.body {
        MessageBody::Heartbeat { commit, .. } => commit,
        _ => u64::MAX,
    }
}

fn big_chunk(from: u16, to: u16, bytes: usize) -> Message {
    let items = (0..bytes / 4096)
        .map(|i| SnapshotItem {
            key: format!("key-{i}").into_bytes(),
            value: vec![(i % 251) as u8; 4096],
            index: 5,
        })
        .collect();
    Message {
        from,
        to,
        term: 2,
        body: MessageBody::SnapshotChunk {
            meta: SnapshotMeta { index: 5, term: 2 },
            seq: 0,
            items,
            done: true,
        },
    }
}

/// Binds `n` listeners (ids 1..=n) on loopback and starts a transport on each, every
/// one knowing all the others.
fn cluster(n: u16) -> Vec<(Transport, mpsc::Receiver<Message>)> {
    cluster_with(n, |_| {})
}

fn cluster_with(
    n: u16,
    tweak: impl Fn(&mut TransportConfig),
) -> Vec<(Transport, mpsc::Receiver<Message>)> {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    let addrs: BTreeMap<u16, SocketAddr> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u16 + 1, l.local_addr().expect("addr")))
        .collect();
    listeners
        .into_iter()
        .enumerate()
        .map(|(i, listener)| {
            let id = i as u16 + 1;
            let mut peers = addrs.clone();
            peers.remove(&id);
            let mut cfg = TransportConfig::new(id, addrs[&id], peers);
            tweak(&mut cfg);
            let (tx, rx) = mpsc::channel(1024);
            let t = Transport::start_with_listener(cfg, listener, tx).expect("start");
            assert_eq!(t.local_addr(), addrs[&id]);
            (t, rx)
        })
        .collect()
}

async fn recv(rx: &mut mpsc::Receiver<Message>) -> Message {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("a message in time")
        .expect("inbound open")
}

/// Polls `cond` until it holds or the deadline passes.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_exchange_in_order_with_a_large_chunk() {
    let mut nodes = cluster(2);
    let (b, mut rx_b) = nodes.pop().expect("node 2");
    let (a, mut rx_a) = nodes.pop().expect("node 1");
    const N: u64 = 3000;
    let chunk = big_chunk(1, 2, 4 << 20);
    let sender_a = async {
        for i in 0..N {
            if i == N / 2 {
                a.send_wait(chunk.clone()).await.expect("chunk queued");
            }
            a.send_wait(heartbeat(1, 2, i)).await.expect("queued");
        }
    };
    let sender_b = async {
        for i in 0..N {
            assert!(b.send(heartbeat(2, 1, i)), "queue has room");
        }
    };
    let receiver_b = async {
        let mut next = 0;
        let mut got_chunk = false;
        while next < N {
            let msg = recv(&mut rx_b).await;
            assert_eq!((msg.from, msg.to), (1, 2));
            if let MessageBody::SnapshotChunk { .. } = msg.body {
                assert_eq!(next, N / 2, "chunk in its place");
                assert_eq!(msg, chunk);
                got_chunk = true;
            } else {
                assert_eq!(seq_of(&msg), next);
                next += 1;
            }
        }
        assert!(got_chunk);
    };
    let receiver_a = async {
        for i in 0..N {
            let msg = recv(&mut rx_a).await;
            assert_eq!((msg.from, msg.to, seq_of(&msg)), (2, 1, i));
        }
    };
    tokio::join!(sender_a, sender_b, receiver_a, receiver_b);
    // A writer counts a batch once its write returned, which may be after the
    // receiver has it.
    eventually("sent counts", || {
        a.stats().sent == N + 1 && b.stats().sent == N
    })
    .await;
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.received, sa.connects), (N, 1));
    assert_eq!((sb.received, sb.connects), (N + 1, 1));
    assert_eq!(sa.dropped_full + sb.dropped_full, 0);
    assert_eq!(sa.frames_rejected + sb.frames_rejected, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_exchange_in_order_per_peer() {
    let nodes = cluster(3);
    const N: u64 = 2000;
    let mut receivers = Vec::new();
    let mut transports = Vec::new();
    for (t, rx) in nodes {
        transports.push(t);
        receivers.push(rx);
    }
    for i in 0..N {
        for (from, t) in (1u16..).zip(&transports) {
            for to in (1..=3).filter(|&to| to != from) {
                assert!(t.send(heartbeat(from, to, i)));
            }
        }
    }
    let checks = receivers.into_iter().enumerate().map(|(i, mut rx)| {
        let me = i as u16 + 1;
        tokio::spawn(async move {
            let mut next: BTreeMap<u16, u64> = BTreeMap::new();
            for _ in 0..2 * N {
                let msg = recv(&mut rx).await;
                assert_eq!(msg.to, me);
                let expected = next.entry(msg.from).or_default();
                assert_eq!(seq_of(&msg), *expected, "in order from {}", msg.from);
                *expected += 1;
            }
            assert_eq!(next.values().copied().collect::<Vec<_>>(), vec![N, N]);
        })
    });
    for check in checks.collect::<Vec<_>>() {
        check.await.expect("in order");
    }
    for t in &transports {
        eventually("sent counts", || t.stats().sent == 2 * N).await;
        let s = t.stats();
        assert_eq!((s.received, s.connects), (2 * N, 2));
    }
}

/// Connects a raw socket to `addr`, writes `frames`, and asserts the transport
/// closes the connection.
async fn assert_refused(addr: SocketAddr, frames: &[u8]) {
    let mut raw = TcpStream::connect(addr).await.expect("connect");
    raw.write_all(frames).await.expect("write");
    let mut byte = [0u8; 1];
    match tokio::time::timeout(WAIT, raw.read(&mut byte))
        .await
        .expect("closed in time")
    {
        Ok(0) => {}
        Ok(_) => panic!("the transport never writes on an incoming connection"),
        // Closing with unread bytes in the socket resets it instead.
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
    }
}

fn frame(wire: &Wire) -> Vec<u8> {
    let mut out = Vec::new();
    encode(wire, &mut out).expect("encode");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_connections_are_closed_alone() {
    let mut nodes = cluster(2);
    let (b, mut rx_b) = nodes.pop().expect("node 2");
    let (a, _rx_a) = nodes.pop().expect("node 1");
    let addr = b.local_addr();

    // A healthy connection first, which must survive everything below.
    assert!(a.send(heartbeat(1, 2, 0)));
    assert_eq!(seq_of(&recv(&mut rx_b).await), 0);

    let hello = frame(&Wire::Hello {
        from: 1,
        to: 2,
        cluster: 0,
        reply_to: NOWHERE,
    });
    let with_hello = |rest: &[u8]| [hello.as_slice(), rest].concat();
    let mut garbage = 5u32.to_le_bytes().to_vec();
    garbage.extend_from_slice(&[0xff; 5]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("malformed frame", with_hello(&garbage)),
        ("oversized length", with_hello(&u32::MAX.to_le_bytes())),
        (
            "garbage instead of a Hello",
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        ),
        ("no Hello", frame(&Wire::Msg(heartbeat(1, 2, 99)))),
        (
            "a Hello from the node itself",
            frame(&Wire::Hello {
                from: 2,
                to: 2,
                cluster: 0,
                reply_to: NOWHERE,
            }),
        ),
        (
            "Hello to another node",
            frame(&Wire::Hello {
                from: 1,
                to: 3,
                cluster: 0,
                reply_to: NOWHERE,
            }),
        ),
        (
            "Hello from another cluster",
            frame(&Wire::Hello {
                from: 1,
                to: 2,
                cluster: 0xfeed,
                reply_to: NOWHERE,
            }),
        ),
        (
            "misrouted recipient",
            with_hello(&frame(&Wire::Msg(heartbeat(1, 3, 99)))),
        ),
        (
            "misrouted sender",
            with_hello(&frame(&Wire::Msg(heartbeat(3, 2, 99)))),
        ),
        ("second Hello", with_hello(&hello)),
    ];
    for (rejected, (what, bytes)) in (1..).zip(&cases) {
        assert_refused(addr, bytes).await;
        eventually(what, || b.stats().frames_rejected == rejected).await;
    }
    // A valid raw connection still delivers, and the transport's own one too.
    let mut raw = TcpStream::connect(addr).await.expect("connect");
    raw.write_all(&with_hello(&frame(&Wire::Msg(heartbeat(1, 2, 50)))))
        .await
        .expect("write");
    assert_eq!(seq_of(&recv(&mut rx_b).await), 50);
    assert!(a.send(heartbeat(1, 2, 1)));
    assert_eq!(seq_of(&recv(&mut rx_b).await), 1);
    // So does a node this one does not know yet, of the same cluster (a member
    // added since: its configuration entry may still be on its way here).
    let mut raw = TcpStream::connect(addr).await.expect("connect");
    let hello_9 = frame(&Wire::Hello {
        from: 9,
        to: 2,
        cluster: 0,
        reply_to: NOWHERE,
    });
    raw.write_all(&[hello_9, frame(&Wire::Msg(heartbeat(9, 2, 60)))].concat())
        .await
        .expect("write");
    assert_eq!(seq_of(&recv(&mut rx_b).await), 60);
    let s = b.stats();
    assert_eq!(s.frames_rejected, cases.len() as u64);
    assert_eq!(s.received, 4);
    assert_eq!(a.stats().connects, 1, "the healthy connection survived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_after_the_peer_restarts() {
    let mut nodes = cluster_with(2, |cfg| cfg.backoff_max = Duration::from_millis(20));
    let (b, mut rx_b) = nodes.pop().expect("node 2");
    let (a, mut rx_a) = nodes.pop().expect("node 1");
    assert!(a.send(heartbeat(1, 2, 0)));
    assert_eq!(seq_of(&recv(&mut rx_b).await), 0);
    assert!(b.send(heartbeat(2, 1, 0)));
    assert_eq!(seq_of(&recv(&mut rx_a).await), 0);

    let addr_b = b.local_addr();
    b.shutdown_wait().await;
    // Every task is gone, and with them every inbound sender.
    assert!(rx_b.recv().await.is_none(), "inbound closed");
    drop(b);
    let mut cfg = TransportConfig::new(2, addr_b, BTreeMap::from([(1, a.local_addr())]));
    cfg.backoff_max = Duration::from_millis(20);
    let (tx, mut rx_b) = mpsc::channel(1024);
    let b = Transport::start(cfg, tx)
        .await
        .expect("restart on the same port");

    // Some messages sent around the restart may be lost; keep sending until one
    // arrives, then everything after it arrives in order.
    let deadline = Instant::now() + WAIT;
    let mut seq = 1;
    let first = loop {
        assert!(Instant::now() < deadline, "no message after the restart");
        a.send(heartbeat(1, 2, seq));
        seq += 1;
        if let Ok(msg) = tokio::time::timeout(Duration::from_millis(2), rx_b.recv()).await {
            break seq_of(&msg.expect("inbound open"));
        }
    };
    let mut last = first;
    for i in seq..seq + 100 {
        assert!(a.send(heartbeat(1, 2, i)));
    }
    while last < seq + 99 {
        let got = seq_of(&recv(&mut rx_b).await);
        assert!(got > last, "in order: {got} after {last}");
        last = got;
    }
    // And the restarted node reaches the survivor.
    assert!(b.send(heartbeat(2, 1, 1)));
    assert_eq!(seq_of(&recv(&mut rx_a).await), 1);
    assert!(a.stats().connects >= 2);
}

#[tokio::test]
async fn a_restarted_peer_announces_itself_and_ends_the_backoff() {
    // A backoff far longer than the test may take: only the announcement can end it.
    let long = |cfg: &mut TransportConfig| {
        cfg.backoff_min = Duration::from_secs(60);
        cfg.backoff_max = Duration::from_secs(60);
    };
    let mut nodes = cluster_with(2, long);
    let (b, rx_b) = nodes.pop().expect("node 2");
    let (a, _rx_a) = nodes.pop().expect("node 1");
    let addr_b = b.local_addr();
    b.shutdown_wait().await;
    drop((b, rx_b));
    // Node 1 finds node 2 down and backs off for a minute.
    let deadline = Instant::now() + WAIT;
    while a.stats().connect_failures == 0 {
        assert!(Instant::now() < deadline, "no failed connection attempt");
        a.send(heartbeat(1, 2, 0));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut cfg = TransportConfig::new(2, addr_b, BTreeMap::from([(1, a.local_addr())]));
    long(&mut cfg);
    let (tx, mut rx_b) = mpsc::channel(1024);
    let _b = Transport::start(cfg, tx)
        .await
        .expect("restart on the same port");
    // Node 2 sends nothing, yet node 1 reaches it within the test's deadline.
    let deadline = Instant::now() + WAIT;
    let mut seq = 1;
    loop {
        assert!(
            Instant::now() < deadline,
            "node 1 still backing off after node 2 announced itself"
        );
        a.send(heartbeat(1, 2, seq));
        seq += 1;
        if let Ok(msg) = tokio::time::timeout(Duration::from_millis(5), rx_b.recv()).await {
            assert!(msg.is_some(), "inbound open");
            break;
        }
    }
}

#[tokio::test]
async fn a_peer_dialling_in_is_reported_once_per_connection() {
    let mut nodes = cluster(2);
    let (b, _rx_b) = nodes.pop().expect("node 2");
    let (a, _rx_a) = nodes.pop().expect("node 1");
    let mut ups = a.take_peer_ups().expect("first take");
    assert!(a.take_peer_ups().is_none(), "only one receiver");
    // Node 2 announced itself when it started (node 1 may have been up or not:
    // then its first message dials).
    assert!(b.send(heartbeat(2, 1, 0)));
    let up = tokio::time::timeout(WAIT, ups.recv()).await;
    assert_eq!(up.expect("reported in time"), Some(2));
}

#[tokio::test]
async fn unknown_peers_and_full_queues_drop_without_blocking() {
    // A peer that is never reachable: nothing listens on its port.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let mut cfg = TransportConfig::new(
        1,
        "127.0.0.1:0".parse().expect("addr"),
        BTreeMap::from([(2, dead)]),
    );
    cfg.queue_depth = 4;
    let (tx, _rx) = mpsc::channel(16);
    let t = Transport::start(cfg, tx).await.expect("start");

    assert!(!t.send(heartbeat(1, 7, 0)));
    assert!(matches!(
        t.send_wait(heartbeat(1, 7, 0)).await,
        Err(TransportError::UnknownPeer(7))
    ));
    assert_eq!(t.stats().dropped_unknown, 2);

    // On this single-threaded runtime the writer cannot run during the loop, so
    // exactly the queue's depth is taken.
    let started = Instant::now();
    let queued = (0..1000).filter(|&i| t.send(heartbeat(1, 2, i))).count();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "never blocks"
    );
    assert_eq!(queued, 4);
    assert_eq!(t.stats().dropped_full, 996);

    // The writer then fails to connect and drops what was queued.
    eventually("a failed connect", || {
        let s = t.stats();
        s.connect_failures >= 1 && s.dropped_disconnected == 4
    })
    .await;
    assert_eq!(t.stats().sent, 0);

    t.shutdown();
    assert!(!t.send(heartbeat(1, 2, 0)));
    assert!(matches!(
        t.send_wait(heartbeat(1, 2, 0)).await,
        Err(TransportError::Closed)
    ));
}

#[tokio::test]
async fn frames_round_trip() {
    let msgs = [
        Wire::Hello {
            from: 1,
            to: 65535,
            cluster: u64::MAX,
            reply_to: NOWHERE,
        },
        Wire::Msg(heartbeat(3, 4, u64::MAX)),
        Wire::Msg(big_chunk(1, 2, 64 << 10)),
    ];
    let mut bytes = Vec::new();
    for m in &msgs {
        encode(m, &mut bytes).expect("encode");
    }
    let mut reader = &bytes[..];
    let mut buf = Vec::new();
    for m in &msgs {
        let got = read_frame(&mut reader, &mut buf, 1 << 20).await;
        assert_eq!(got.expect("read").as_ref(), Some(m));
    }
    assert!(read_frame(&mut reader, &mut buf, 1 << 20)
        .await
        .expect("clean end")
        .is_none());
}

#[tokio::test]
async fn random_bytes_never_panic_the_decoder() {
    // A fixed seed: the same cases on every run.
    let mut rng = seeded(0x5eed_1234_abcd_0001);
    let valid = {
        let mut v = Vec::new();
        encode(&Wire::Msg(heartbeat(1, 2, 3)), &mut v).expect("encode");
        encode(
            &Wire::Hello {
                from: 1,
                to: 2,
                cluster: 0,
                reply_to: NOWHERE,
            },
            &mut v,
        )
        .expect("encode");
        encode(&Wire::Msg(big_chunk(1, 2, 8192)), &mut v).expect("encode");
        v
    };
    let mut buf = Vec::new();
    let (mut frames, mut errors) = (0u32, 0u32);
    for case in 0..6000 {
        let bytes: Vec<u8> = match case % 3 {
            // Pure noise.
            0 => (0..rng.index(64)).map(|_| rng.next_u64() as u8).collect(),
            // A consistent length prefix over a random payload, so the payload
            // reaches the deserialiser.
            1 => {
                let payload: Vec<u8> = (0..rng.index(48)).map(|_| rng.next_u64() as u8).collect();
                let mut b = (payload.len() as u32).to_le_bytes().to_vec();
                b.extend_from_slice(&payload);
                b
            }
            // Valid frames with a few bytes flipped, possibly cut short.
            _ => {
                let mut b = valid.clone();
                for _ in 0..1 + rng.index(4) {
                    let at = rng.index(b.len());
                    b[at] ^= 1 << rng.index(8);
                }
                b.truncate(rng.index(b.len() + 1));
                b
            }
        };
        if bytes.len() >= LEN_PREFIX {
            let _ = decode(&bytes[LEN_PREFIX..]);
        }
        let mut reader = &bytes[..];
        loop {
            match read_frame(&mut reader, &mut buf, 1 << 16).await {
                Ok(Some(_)) => frames += 1,
                Ok(None) => break,
                Err(FrameError::Io(_) | FrameError::Malformed(_) | FrameError::TooLarge { .. }) => {
                    errors += 1;
                    break;
                }
            }
        }
    }
    assert!(frames > 0 && errors > 0, "{frames} frames, {errors} errors");
}

/// Ping-pong round trips between two transports on loopback; prints the median.
/// Run by hand:
/// `cargo test --release -p raft-nvm --test transport -- --ignored --nocapture ping_pong`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn ping_pong_latency() {
    let mut nodes = cluster(2);
    let (b, mut rx_b) = nodes.pop().expect("node 2");
    let (a, mut rx_a) = nodes.pop().expect("node 1");
    let echo = tokio::spawn(async move {
        while let Some(msg) = rx_b.recv().await {
            b.send(heartbeat(2, 1, seq_of(&msg)));
        }
    });
    const WARMUP: u64 = 1000;
    const ROUNDS: u64 = 10_000;
    let mut samples = Vec::with_capacity(ROUNDS as usize);
    for i in 0..WARMUP + ROUNDS {
        let t0 = Instant::now();
        assert!(a.send(heartbeat(1, 2, i)));
        let back = recv(&mut rx_a).await;
        if i >= WARMUP {
            samples.push(t0.elapsed());
        }
        assert_eq!(seq_of(&back), i);
    }
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    println!(
        "ping-pong over {ROUNDS} round trips: median {:?}, p90 {:?}, p99 {:?}, max {:?}",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
    echo.abort();
}

/// A cluster secret for tests (never a default: each test makes its own).
fn secret(bytes: &[u8]) -> raft_nvm::secret::Secret {
    raft_nvm::secret::Secret::new(bytes.to_vec()).expect("a secret")
}

/// HMAC-SHA256(key, nonce ‖ from ‖ to ‖ cluster ‖ reply_to) for a Hello that
/// announces [`NOWHERE`]: the answer to a challenge, as the module docs define it,
/// computed independently of the transport.
fn answer(key: &[u8], nonce: &[u8; 32], from: u16, to: u16, cluster: u64) -> [u8; 32] {
    use hmac::{Hmac, KeyInit, Mac};
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(nonce);
    mac.update(&from.to_le_bytes());
    mac.update(&to.to_le_bytes());
    mac.update(&cluster.to_le_bytes());
    // reply_to = NOWHERE: family 4, its octets, its port.
    mac.update(&[4, 127, 0, 0, 1]);
    mac.update(&9u16.to_le_bytes());
    mac.finalize().into_bytes().into()
}

/// Connects to `addr` and reads the acceptor's challenge.
async fn challenged(addr: SocketAddr) -> (TcpStream, [u8; 32]) {
    let mut raw = TcpStream::connect(addr).await.expect("connect");
    let mut buf = Vec::new();
    let first = tokio::time::timeout(WAIT, read_frame(&mut raw, &mut buf, 64))
        .await
        .expect("a challenge in time")
        .expect("a frame");
    match first {
        Some(Wire::Challenge { nonce }) => (raw, nonce),
        other => panic!("expected a challenge, got {other:?}"),
    }
}

/// Asserts the transport closes `raw` (after whatever it wrote before).
async fn assert_closed(mut raw: TcpStream) {
    let mut byte = [0u8; 1];
    match tokio::time::timeout(WAIT, raw.read(&mut byte))
        .await
        .expect("closed in time")
    {
        Ok(0) => {}
        Ok(_) => panic!("nothing but the challenge is ever written"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
    }
}

/// Asserts nothing arrives on `rx` for a while.
async fn assert_nothing(rx: &mut mpsc::Receiver<Message>) {
    if let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        panic!("a message from an unauthenticated peer reached the node: {msg:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_must_answer_the_challenge_with_the_cluster_secret() {
    const KEY: &[u8] = b"correct horse battery staple";
    let mut nodes = cluster_with(2, |cfg| {
        cfg.secret = Some(secret(KEY));
        cfg.hello_timeout = Duration::from_millis(500);
    });
    let (b, mut rx_b) = nodes.pop().expect("node 2");
    let (a, _rx_a) = nodes.pop().expect("node 1");
    let addr = b.local_addr();

    // Two members with the same secret talk.
    assert!(a.send(heartbeat(1, 2, 0)));
    assert_eq!(seq_of(&recv(&mut rx_b).await), 0);

    let msg = |seq| frame(&Wire::Msg(heartbeat(1, 2, seq)));
    let mut rejected = b.stats().frames_rejected;
    // A peer that answers with the wrong secret: refused, and the message it sent
    // after its answer never reaches the node.
    let (mut raw, nonce) = challenged(addr).await;
    let hello = Wire::AuthHello {
        from: 1,
        to: 2,
        cluster: 0,
        reply_to: NOWHERE,
        tag: answer(b"guess", &nonce, 1, 2, 0),
    };
    raw.write_all(&[frame(&hello), msg(90)].concat())
        .await
        .expect("write");
    assert_closed(raw).await;
    rejected += 1;
    eventually("a wrong answer refused", || {
        b.stats().frames_rejected == rejected
    })
    .await;

    // A peer that does not answer (a plain Hello, as before secrets) is refused.
    let (mut raw, _) = challenged(addr).await;
    let plain = frame(&Wire::Hello {
        from: 1,
        to: 2,
        cluster: 0,
        reply_to: NOWHERE,
    });
    raw.write_all(&[plain, msg(91)].concat())
        .await
        .expect("write");
    assert_closed(raw).await;
    rejected += 1;
    eventually("a plain Hello refused", || {
        b.stats().frames_rejected == rejected
    })
    .await;

    // A peer that says nothing is refused after the Hello timeout.
    let (raw, _) = challenged(addr).await;
    assert_closed(raw).await;
    rejected += 1;
    eventually("silence refused", || b.stats().frames_rejected == rejected).await;

    // A replayed answer (right secret, an earlier connection's nonce) is refused.
    let (mut raw, old_nonce) = challenged(addr).await;
    drop(raw.shutdown().await);
    drop(raw);
    let (mut raw, _) = challenged(addr).await;
    let replay = Wire::AuthHello {
        from: 1,
        to: 2,
        cluster: 0,
        reply_to: NOWHERE,
        tag: answer(KEY, &old_nonce, 1, 2, 0),
    };
    raw.write_all(&[frame(&replay), msg(92)].concat())
        .await
        .expect("write");
    assert_closed(raw).await;
    rejected += 1;
    eventually("a replayed answer refused", || {
        b.stats().frames_rejected == rejected
    })
    .await;

    // The right answer for other fields (node 3's) does not admit node 1.
    let (mut raw, nonce) = challenged(addr).await;
    let swapped = Wire::AuthHello {
        from: 1,
        to: 2,
        cluster: 0,
        reply_to: NOWHERE,
        tag: answer(KEY, &nonce, 3, 2, 0),
    };
    raw.write_all(&[frame(&swapped), msg(93)].concat())
        .await
        .expect("write");
    assert_closed(raw).await;
    rejected += 1;
    eventually("an answer for other fields refused", || {
        b.stats().frames_rejected == rejected
    })
    .await;
    assert_nothing(&mut rx_b).await;

    // The right answer is admitted, and its messages arrive.
    let (mut raw, nonce) = challenged(addr).await;
    let good = Wire::AuthHello {
        from: 1,
        to: 2,
        cluster: 0,
        reply_to: NOWHERE,
        tag: answer(KEY, &nonce, 1, 2, 0),
    };
    raw.write_all(&[frame(&good), msg(94)].concat())
        .await
        .expect("write");
    assert_eq!(seq_of(&recv(&mut rx_b).await), 94);
    assert_eq!(b.stats().frames_rejected, rejected);
    // And the members' own connection still works.
    assert!(a.send(heartbeat(1, 2, 1)));
    assert_eq!(seq_of(&recv(&mut rx_b).await), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_the_right_secret_is_never_heard() {
    // Node 1 has another secret than node 2, node 3 none: neither reaches node 2.
    let listeners: Vec<_> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    let addrs: BTreeMap<u16, SocketAddr> = (1..)
        .zip(&listeners)
        .map(|(id, l)| (id, l.local_addr().expect("addr")))
        .collect();
    let secrets = [Some(secret(b"one")), Some(secret(b"two")), None];
    let mut nodes = Vec::new();
    for ((id, listener), key) in (1u16..).zip(listeners).zip(secrets) {
        let mut peers = addrs.clone();
        peers.remove(&id);
        let mut cfg = TransportConfig::new(id, addrs[&id], peers);
        cfg.secret = key;
        cfg.hello_timeout = Duration::from_millis(300);
        cfg.connect_timeout = Duration::from_millis(300);
        let (tx, rx) = mpsc::channel(1024);
        nodes.push((
            Transport::start_with_listener(cfg, listener, tx).expect("start"),
            rx,
        ));
    }
    let before = nodes[1].0.stats().frames_rejected;
    for _ in 0..3 {
        assert!(nodes[0].0.send(heartbeat(1, 2, 7)));
        assert!(nodes[2].0.send(heartbeat(3, 2, 8)));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (b, rx_b) = nodes.remove(1);
    let mut rx_b = rx_b;
    assert_nothing(&mut rx_b).await;
    eventually("both refused", || b.stats().frames_rejected >= before + 2).await;
    assert_eq!(b.stats().received, 0);
}

/// Starts node 2 of a two-node layout with `tweak`, and returns it with its inbound.
fn lone_node(tweak: impl Fn(&mut TransportConfig)) -> (Transport, mpsc::Receiver<Message>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut cfg = TransportConfig::new(2, addr, BTreeMap::new());
    tweak(&mut cfg);
    let (tx, rx) = mpsc::channel(1024);
    (
        Transport::start_with_listener(cfg, listener, tx).expect("start"),
        rx,
    )
}

/// A raw peer `from` that said Hello to node 2 and announced a frame of `len`
/// bytes, of which it sent `sent`.
async fn partial_frame(addr: SocketAddr, from: u16, len: usize, sent: usize) -> TcpStream {
    let mut raw = TcpStream::connect(addr).await.expect("connect");
    let hello = frame(&Wire::Hello {
        from,
        to: 2,
        cluster: 0,
        reply_to: NOWHERE,
    });
    raw.write_all(&hello).await.expect("hello");
    raw.write_all(&u32::try_from(len).expect("len").to_le_bytes())
        .await
        .expect("prefix");
    // The reader may close the connection part way: a failed write is fine.
    let _ = raw.write_all(&vec![0u8; sent]).await;
    raw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_frames_share_a_budget_released_when_connections_end() {
    const MIB: usize = 1 << 20;
    let (b, mut rx_b) = lone_node(|cfg| {
        cfg.frame_budget = 10 * MIB;
        cfg.max_frame = 8 * MIB;
    });
    let addr = b.local_addr();
    // One frame above max_frame is refused at its length, before any payload.
    let mut over = TcpStream::connect(addr).await.expect("connect");
    over.write_all(&frame(&Wire::Hello {
        from: 5,
        to: 2,
        cluster: 0,
        reply_to: NOWHERE,
    }))
    .await
    .expect("hello");
    over.write_all(&u32::try_from(8 * MIB + 1).expect("len").to_le_bytes())
        .await
        .expect("prefix");
    assert_closed(over).await;

    // Two peers holding 4 MiB each fit in 10 MiB.
    let p1 = partial_frame(addr, 1, 6 * MIB, 4 * MIB).await;
    let p3 = partial_frame(addr, 3, 6 * MIB, 4 * MIB).await;
    eventually("8 MiB held", || {
        b.stats().frame_bytes_held >= 8 * MIB as u64
    })
    .await;
    assert!(b.stats().frame_bytes_held <= 10 * MIB as u64);
    // A third one does not: it is dropped, the others stay.
    let rejected = b.stats().frames_rejected;
    let p4 = partial_frame(addr, 4, 6 * MIB, 4 * MIB).await;
    assert_closed(p4).await;
    eventually("the third peer refused", || {
        b.stats().frames_rejected == rejected + 1
    })
    .await;
    assert!(b.stats().frame_bytes_held <= 10 * MIB as u64);
    // A connection that ends gives its share back.
    drop(p1);
    eventually("p1's share released", || {
        b.stats().frame_bytes_held <= 5 * MIB as u64
    })
    .await;
    // Then another peer fits, and a whole message under the limits arrives.
    let mut p6 = TcpStream::connect(addr).await.expect("connect");
    let big = big_chunk(6, 2, 4 * MIB);
    p6.write_all(
        &[
            frame(&Wire::Hello {
                from: 6,
                to: 2,
                cluster: 0,
                reply_to: NOWHERE,
            }),
            frame(&Wire::Msg(big.clone())),
        ]
        .concat(),
    )
    .await
    .expect("write");
    assert_eq!(recv(&mut rx_b).await, big);
    drop(p3);
    eventually("everything released", || b.stats().frame_bytes_held == 0).await;
}

/// Log lines captured from the current thread.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_owned()
    }
}

/// Starts a lone transport with `secret` and returns what it logged at start.
fn start_logs(secret: Option<raft_nvm::secret::Secret>) -> String {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    let transport = tracing::subscriber::with_default(subscriber, || {
        lone_node(|cfg| cfg.secret = secret.clone())
    });
    drop(transport);
    captured.text()
}

#[test]
fn an_open_transport_warns_once_at_start_and_a_secured_one_does_not() {
    let open = start_logs(None);
    assert_eq!(
        open.matches("raft transport is OPEN").count(),
        1,
        "one warning: {open}"
    );
    assert!(open.contains("WARN"), "{open}");
    let secured = start_logs(Some(secret(b"s")));
    assert!(!secured.contains("OPEN"), "{secured}");
}

/// Starts node 1 knowing nobody and node 2 knowing node 1 (as a learner started
/// with the founders' addresses hears from a leader that joined after it).
fn stranger_pair(
    tweak: impl Fn(&mut TransportConfig),
) -> (
    (Transport, mpsc::Receiver<Message>),
    (Transport, mpsc::Receiver<Message>),
) {
    let l1 = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let l2 = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let a1 = l1.local_addr().expect("addr");
    let a2 = l2.local_addr().expect("addr");
    let start = |id, addr, peers, listener| {
        let mut cfg = TransportConfig::new(id, addr, peers);
        tweak(&mut cfg);
        let (tx, rx) = mpsc::channel(1024);
        (
            Transport::start_with_listener(cfg, listener, tx).expect("start"),
            rx,
        )
    };
    let one = start(1, a1, BTreeMap::new(), l1);
    let two = start(2, a2, BTreeMap::from([(1, a1)]), l2);
    (one, two)
}

/// A node answers a node it does not know at the address that node's Hello gave
/// (with and without a secret), adopting it as a guest; adding it as a member
/// later replaces the guest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answers_an_unknown_dialler_at_its_announced_address() {
    for secret in [None, Some(secret(b"a dial-back secret"))] {
        let ((one, mut rx1), (two, mut rx2)) = stranger_pair(|c| c.secret.clone_from(&secret));
        assert_eq!(one.peers(), Vec::<u16>::new());
        // Node 2 dials node 1 and speaks first.
        assert!(two.send(heartbeat(2, 1, 1)));
        assert_eq!(seq_of(&recv(&mut rx1).await), 1);
        // Node 1 answers: adopted as a guest at node 2's announced address.
        assert!(one.send(heartbeat(1, 2, 2)), "answer queued");
        assert_eq!(seq_of(&recv(&mut rx2).await), 2);
        let stats = one.stats();
        assert_eq!(stats.guests_adopted, 1, "{stats:?}");
        assert_eq!(stats.dropped_unknown, 0, "{stats:?}");
        assert_eq!(one.peers(), vec![2]);
        // Made a member at its configured address: replaces the guest.
        assert!(one.add_peer(2, two.local_addr()));
        assert!(!one.add_peer(2, two.local_addr()), "a member stays");
        assert!(one.send(heartbeat(1, 2, 3)));
        assert_eq!(seq_of(&recv(&mut rx2).await), 3);
        assert_eq!(one.stats().guests_adopted, 1);
        // A node never heard from is still dropped.
        assert!(!one.send(heartbeat(1, 7, 4)));
        assert_eq!(one.stats().dropped_unknown, 1);
    }
}
