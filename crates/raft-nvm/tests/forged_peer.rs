//! Forged peers on real nodes: a process that completes the transport's Hello (it
//! knows the cluster id, which is only a hash of a token and the member ids) and
//! then sends one bad message. Each test starts members 1 and 2 of a three-member
//! cluster, writes keys through them, opens one connection to node 1 as member 3
//! (or as node 4, which is no member) and sends the message. Node 1 must refuse it
//! (the transport closes that connection) and keep serving; the cluster must
//! still hold every acknowledged key, and after a clean stop both nodes must
//! restart from their stores with those keys.
//!
//! Each case killed the node, panicked its snapshot installer, left a store that
//! could never be opened again, or replaced the acknowledged keys, before
//! messages were validated (`raft_nvm::raft::Message::validate`, and the core's
//! membership check).
#![cfg(feature = "server")]

mod loopback;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

use loopback::{free_port, info};
use raft_nvm::net::{encode, Wire};
use raft_nvm::node::{Member, Node};
use raft_nvm::raft::{Command, Entry, Message, MessageBody};
use raft_nvm::resp::{info_field, ClusterClient};
use raft_nvm::SnapshotMeta;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The Raft address a hand-made Hello announces (nothing listens there).
const NOWHERE: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9);

/// Keys written (and acknowledged) before the forged message.
const KEYS: usize = 20;

/// Panics on the nodes' own threads (a snapshot installer, a runtime worker):
/// every test thread's name ends in `_refused`, and a node thread that panics
/// while the node goes on (an installer) would otherwise pass unseen.
static NODE_PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_node_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let name = std::thread::current().name().unwrap_or("").to_string();
            if !name.ends_with("_refused") {
                NODE_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            default(info);
        }));
    });
}

fn members() -> BTreeMap<u16, Member> {
    let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
    (1..=3)
        .map(|id| {
            let m = Member {
                raft: at(free_port()),
                client: at(free_port()),
            };
            (id, m)
        })
        .collect()
}

async fn start(dir: &Path, id: u16, members: &BTreeMap<u16, Member>, bootstrap: bool) -> Node {
    let b = Node::builder(id)
        .members(members.clone())
        .list(dir.join(format!("node{id}.pool")), 8 << 20);
    let b = if bootstrap { b.bootstrap() } else { b };
    b.start().await.expect("node starts")
}

fn key(i: usize) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

/// What node 1 says about itself: its term and last index.
async fn term_and_last(node: &Node) -> (u64, u64) {
    let text = info(node.client_addr()).await;
    let field = |name| {
        info_field(&text, name)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("INFO has no {name}: {text}"))
    };
    (field("term"), field("last_index"))
}

/// Every acknowledged key, read through the cluster.
async fn check_keys(client: &mut ClusterClient) {
    for i in 0..KEYS {
        let got = client.get(&key(i)).await.expect("get");
        assert_eq!(got, Some(b"v".to_vec()), "key {i} lost");
    }
}

/// Starts the cluster, writes the keys, lets `forge` build the messages (each a
/// term and a body) from node 1's term and last index and sends each on a
/// connection of its own, as `from`; then checks that node 1 closed the
/// connections, kept serving and lost nothing, and that both nodes restart from
/// their stores with every key.
async fn attack(from: u16, forge: impl Fn(u64, u64) -> Vec<(u64, MessageBody)>) {
    tokio::time::timeout(Duration::from_secs(60), attack_inner(from, true, forge))
        .await
        .expect("the attack and the checks finish within a minute");
}

/// [`attack`] with a message the transport cannot tell is bad (it is from a
/// node outside the configuration, or does not fit this node's store: both are
/// the node's state), so the node refuses it and the connection stays open.
async fn attack_as_stranger(from: u16, forge: impl Fn(u64, u64) -> Vec<(u64, MessageBody)>) {
    tokio::time::timeout(Duration::from_secs(60), attack_inner(from, false, forge))
        .await
        .expect("the attack and the checks finish within a minute");
}

async fn attack_inner(
    from: u16,
    expect_close: bool,
    forge: impl Fn(u64, u64) -> Vec<(u64, MessageBody)>,
) {
    count_node_panics();
    let dir = tempfile::tempdir().expect("temp dir");
    let members = members();
    let one = start(dir.path(), 1, &members, true).await;
    let two = start(dir.path(), 2, &members, true).await;
    let mut client = ClusterClient::new(vec![one.client_addr(), two.client_addr()]);
    for i in 0..KEYS {
        client.set(&key(i), b"v").await.expect("set");
    }
    let cluster = u64::from_str_radix(
        info_field(&info(one.client_addr()).await, "cluster_id").expect("cluster_id"),
        16,
    )
    .expect("hex cluster id");

    let (term, last) = term_and_last(&one).await;
    for (msg_term, body) in forge(term, last) {
        let kind = body.kind();
        let mut bytes = Vec::new();
        let hello = Wire::Hello {
            from,
            to: 1,
            cluster,
            reply_to: NOWHERE,
        };
        encode(&hello, &mut bytes).expect("encode");
        let msg = Message {
            from,
            to: 1,
            term: msg_term,
            body,
        };
        encode(&Wire::Msg(msg), &mut bytes).expect("encode");
        let mut stream = TcpStream::connect(one.raft_addr()).await.expect("dial");
        stream.write_all(&bytes).await.expect("send");
        // The transport refuses an invalid message by closing the connection (a
        // node that took it keeps the connection open for the next one).
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut rest)).await;
        if expect_close {
            assert!(
                matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
                "{kind}: the connection was not closed"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!one.is_finished(), "{kind}: node 1 stopped");
        assert_eq!(
            NODE_PANICS.load(Ordering::SeqCst),
            0,
            "{kind}: a node thread panicked"
        );
    }

    // Node 1 keeps serving, and nothing acknowledged was lost.
    let started = Instant::now();
    loop {
        match client.set(b"after", b"w").await {
            Ok(()) => break,
            Err(e) => assert!(
                started.elapsed() < Duration::from_secs(10),
                "the cluster no longer takes writes: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check_keys(&mut client).await;
    assert!(!one.is_finished(), "node 1 stopped");
    let (term_after, _) = term_and_last(&one).await;
    assert!(
        term_after <= term + 2,
        "node 1 adopted a forged term: {term_after} (was {term})"
    );

    // A clean stop, and a restart from the stores (no bootstrap).
    one.shutdown().await.expect("node 1 stops cleanly");
    two.shutdown().await.expect("node 2 stops cleanly");
    let one = start(dir.path(), 1, &members, false).await;
    let two = start(dir.path(), 2, &members, false).await;
    let mut client = ClusterClient::new(vec![one.client_addr(), two.client_addr()]);
    check_keys(&mut client).await;
    assert_eq!(
        client.get(b"after").await.expect("get"),
        Some(b"w".to_vec())
    );
    one.shutdown().await.expect("shutdown");
    two.shutdown().await.expect("shutdown");
}

/// One entry after the node's last, in the node's next term.
fn append_after(term: u64, last: u64, cmd: Command) -> (u64, MessageBody) {
    let body = MessageBody::AppendEntries {
        prev_index: last,
        prev_term: term,
        entries: vec![Entry {
            index: last + 1,
            term: term + 1,
            cmd,
        }],
        commit: last,
    };
    (term + 1, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_with_the_largest_term_is_refused() {
    let hb = MessageBody::Heartbeat {
        commit: 0,
        ctx: None,
        sent: 0,
    };
    attack(3, move |_, _| vec![(u64::MAX, hb.clone())]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_with_the_largest_term_is_refused() {
    attack(3, |_, last| {
        let body = MessageBody::AppendEntries {
            prev_index: last,
            prev_term: 0,
            entries: Vec::new(),
            commit: 0,
        };
        vec![(u64::MAX, body)]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vote_request_with_the_largest_term_is_refused() {
    attack(3, |_, last| {
        let body = MessageBody::RequestVote {
            last_index: last + 10,
            last_term: u64::MAX,
            transfer: true,
        };
        vec![(u64::MAX, body)]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_now_with_the_largest_term_is_refused() {
    attack(3, |_, _| vec![(u64::MAX, MessageBody::TimeoutNow)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_empty_configuration_entries_are_refused() {
    attack(3, |term, last| {
        vec![
            append_after(
                term,
                last,
                Command::Config {
                    data: b"\xff\xfe garbage".to_vec(),
                },
            ),
            append_after(term, last, Command::Config { data: Vec::new() }),
        ]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_with_a_key_resp_refuses_is_refused() {
    attack(3, |term, last| {
        let cmd = Command::Put {
            key: vec![b'k'; 70_000],
            value: b"v".to_vec(),
        };
        vec![append_after(term, last, cmd)]
    })
    .await;
}

/// A key RESP takes (at most u16::MAX bytes) that this node's store still cannot
/// hold with its value: the replica refuses it rather than fail the append.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_the_store_cannot_hold_is_refused() {
    attack_as_stranger(3, |term, last| {
        let cmd = Command::Put {
            key: vec![b'k'; usize::from(u16::MAX)],
            value: vec![b'v'; 4096],
        };
        vec![append_after(term, last, cmd)]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_at_the_largest_index_is_refused() {
    attack(3, |term, _| {
        let body = MessageBody::SnapshotChunk {
            meta: SnapshotMeta {
                index: u64::MAX,
                term: term + 1,
            },
            seq: 0,
            items: Vec::new(),
            done: true,
        };
        vec![(term + 1, body)]
    })
    .await;
}

/// Node 4 is no member: its snapshot, empty and marked done, would replace the
/// acknowledged keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_from_a_stranger_is_refused() {
    attack_as_stranger(4, |term, last| {
        let body = MessageBody::SnapshotChunk {
            meta: SnapshotMeta {
                index: last + 1000,
                term: term + 1,
            },
            seq: 0,
            items: Vec::new(),
            done: true,
        };
        vec![(term + 1, body)]
    })
    .await;
}
