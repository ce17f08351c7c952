//! One connection's commands take effect in the order it sent them, as Redis's do:
//! a `GET` pipelined behind a `SET` (or a `DEL`) of the same key on a real
//! three-node cluster sees that write, with read-index reads and with lease reads,
//! on the leader and after a follower's `MOVED` redirection.
//!
//! Each pipeline goes out as raw bytes in one write, so the node receives the four
//! commands together: the write is still in flight (proposed, not committed) when
//! the read arrives. Before reads were held until the writes taken before them had
//! applied, every one of these pipelines read the old value.
#![cfg(feature = "server")]

mod loopback;

use std::net::SocketAddr;
use std::time::Duration;

use loopback::{leader, start_list_cluster};
use raft_nvm::node::Node;
use raft_nvm::resp::{decode_reply, encode_command, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The tests of this file pick free ports, then bind them: one cluster at a time.
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How many pipelines each test sends.
const PIPELINES: usize = 100;

/// Sends `commands` in one write on `stream` and reads one reply per command.
async fn pipeline(stream: &mut TcpStream, commands: &[Vec<&[u8]>]) -> Vec<Reply> {
    let mut out = Vec::new();
    for c in commands {
        encode_command(c, &mut out);
    }
    stream.write_all(&out).await.expect("send the pipeline");
    let mut input = Vec::new();
    let mut replies = Vec::new();
    while replies.len() < commands.len() {
        match decode_reply(&input).expect("a RESP reply") {
            Some((reply, used)) => {
                input.drain(..used);
                replies.push(reply);
            }
            None => {
                let read =
                    tokio::time::timeout(Duration::from_secs(10), stream.read_buf(&mut input))
                        .await
                        .expect("replies within 10 s")
                        .expect("read");
                assert!(read > 0, "the node closed the connection");
            }
        }
    }
    replies
}

/// `SET k new; GET k; DEL k; GET k` for 100 keys, each pipeline in one write,
/// after `SET k old` for each: every `GET` sees the write sent before it.
async fn writes_then_reads_in_order(addr: SocketAddr, tag: &str) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    for i in 0..PIPELINES {
        let key = format!("{tag}-{i}");
        let replies = pipeline(&mut stream, &[vec![b"SET", key.as_bytes(), b"old"]]).await;
        assert_eq!(replies, [Reply::Simple("OK".into())], "{key}");
    }
    for i in 0..PIPELINES {
        let key = format!("{tag}-{i}");
        let new = format!("new-{i}");
        let replies = pipeline(
            &mut stream,
            &[
                vec![b"SET", key.as_bytes(), new.as_bytes()],
                vec![b"GET", key.as_bytes()],
                vec![b"DEL", key.as_bytes()],
                vec![b"GET", key.as_bytes()],
            ],
        )
        .await;
        assert_eq!(
            replies,
            [
                Reply::Simple("OK".into()),
                Reply::Bulk(new.into_bytes()),
                Reply::Integer(1),
                Reply::Nil,
            ],
            "pipeline {i} on {addr}: a GET missed the write sent before it"
        );
    }
}

async fn run(lease: bool) {
    let _one = ONE_CLUSTER.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let nodes = start_list_cluster(dir.path(), lease).await;
    let addrs: Vec<SocketAddr> = nodes.iter().map(Node::client_addr).collect();
    let on_leader = leader(&addrs).await;
    writes_then_reads_in_order(on_leader, "leader").await;

    // Through a follower: it serves none of the pipeline (a stale read there would
    // break the order too) but redirects every command to the leader, and the
    // client sends the pipeline again where it is told.
    let follower = *addrs.iter().find(|&&a| a != on_leader).expect("a follower");
    let mut stream = TcpStream::connect(follower).await.expect("connect");
    let key = b"via-follower";
    let replies = pipeline(&mut stream, &[vec![b"SET", key, b"v"], vec![b"GET", key]]).await;
    let mut moved_to = None;
    for reply in &replies {
        match reply {
            Reply::Error(e) if e.starts_with("MOVED ") => {
                let to = e.rsplit(' ').next().expect("an address");
                moved_to = Some(to.parse::<SocketAddr>().expect("a socket address"));
            }
            other => panic!("a follower answered {other:?} instead of MOVED"),
        }
    }
    let redirected = moved_to.expect("MOVED");
    assert_eq!(redirected, on_leader, "the follower named another node");
    writes_then_reads_in_order(redirected, "redirected").await;

    for node in nodes {
        node.shutdown().await.expect("clean shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_reads_see_the_writes_before_them() {
    run(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_reads_see_the_writes_before_them_with_lease_reads() {
    run(true).await;
}
