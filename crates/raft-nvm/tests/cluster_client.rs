//! `ClusterClient` resends only what cannot have taken effect: a scripted RESP
//! server counts the commands it receives and answers each with the next scripted
//! action (a reply, or closing the connection without one).
#![cfg(feature = "server")]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use raft_nvm::resp::{ClientError, ClusterClient, Decoder, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the scripted server does with one command.
#[derive(Clone, Debug)]
enum Action {
    /// Closes the connection without answering (the node died after receiving it).
    Close,
    /// Answers with these RESP bytes.
    Reply(&'static str),
}

/// A scripted server: its commands as received, and the actions still to take
/// (the last one repeats).
#[derive(Default)]
struct Script {
    received: Mutex<Vec<Vec<Vec<u8>>>>,
    actions: Mutex<VecDeque<Action>>,
}

impl Script {
    fn received(&self) -> Vec<Vec<Vec<u8>>> {
        self.received.lock().expect("script lock").clone()
    }

    fn next_action(&self) -> Action {
        let mut actions = self.actions.lock().expect("script lock");
        if actions.len() > 1 {
            actions.pop_front().expect("non-empty")
        } else {
            actions.front().cloned().unwrap_or(Action::Close)
        }
    }
}

/// Starts a scripted server; returns its address and script.
async fn scripted(actions: &[Action]) -> (SocketAddr, Arc<Script>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let script = Arc::new(Script::default());
    script
        .actions
        .lock()
        .expect("script lock")
        .extend(actions.iter().cloned());
    let s = script.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, s.clone()));
        }
    });
    (addr, script)
}

async fn serve(stream: TcpStream, script: Arc<Script>) {
    let (mut r, mut w) = stream.into_split();
    let mut decoder = Decoder::new();
    let mut input = Vec::new();
    loop {
        let Ok((used, args)) = decoder.decode(&input) else {
            return;
        };
        input.drain(..used);
        let Some(args) = args else {
            if !matches!(r.read_buf(&mut input).await, Ok(n) if n > 0) {
                return;
            }
            continue;
        };
        script.received.lock().expect("script lock").push(args);
        match script.next_action() {
            Action::Close => return,
            Action::Reply(bytes) => {
                if w.write_all(bytes.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn client(nodes: Vec<SocketAddr>) -> ClusterClient {
    let mut c = ClusterClient::new(nodes);
    c.max_attempts = 4;
    c.retry_pause = Duration::from_millis(1);
    c
}

fn names(received: &[Vec<Vec<u8>>]) -> Vec<String> {
    received
        .iter()
        .map(|args| String::from_utf8_lossy(&args[0]).into_owned())
        .collect()
}

#[tokio::test]
async fn a_write_whose_reply_is_lost_is_not_resent() {
    let (addr, script) = scripted(&[Action::Close, Action::Reply("+OK\r\n")]).await;
    let mut c = client(vec![addr]);
    let err = c.set(b"k", b"v").await.expect_err("the reply was lost");
    assert!(matches!(err, ClientError::Indeterminate(_)), "{err:?}");
    assert_eq!(names(&script.received()), ["SET"]);
    // The client is still usable: the next call reconnects.
    c.set(b"k", b"w").await.expect("second write");
    assert_eq!(names(&script.received()), ["SET", "SET"]);
}

#[tokio::test]
async fn every_write_kind_is_indeterminate_after_a_lost_reply() {
    for args in [&[&b"DEL"[..], b"k"][..], &[b"CAS", b"k", b"a", b"b"]] {
        let (addr, script) = scripted(&[Action::Close]).await;
        let err = client(vec![addr])
            .command(args)
            .await
            .expect_err("the reply was lost");
        assert!(matches!(err, ClientError::Indeterminate(_)), "{err:?}");
        assert_eq!(script.received().len(), 1);
    }
}

#[tokio::test]
async fn a_read_whose_reply_is_lost_is_resent() {
    let (addr, script) = scripted(&[Action::Close, Action::Reply("$1\r\nv\r\n")]).await;
    let value = client(vec![addr]).get(b"k").await.expect("resent read");
    assert_eq!(value.as_deref(), Some(&b"v"[..]));
    assert_eq!(names(&script.received()), ["GET", "GET"]);
}

#[tokio::test]
async fn a_write_the_leader_lost_leadership_over_is_indeterminate() {
    let (addr, script) = scripted(&[Action::Reply(
        "-ERR leadership lost; the write may or may not take effect\r\n",
    )])
    .await;
    let err = client(vec![addr])
        .cas(b"k", b"a", b"b")
        .await
        .expect_err("leadership lost");
    assert!(matches!(err, ClientError::Indeterminate(_)), "{err:?}");
    assert_eq!(script.received().len(), 1);
}

#[tokio::test]
async fn a_read_the_leader_lost_leadership_over_is_resent() {
    let (addr, script) = scripted(&[
        Action::Reply("-ERR leadership lost before the read was confirmed\r\n"),
        Action::Reply("$-1\r\n"),
    ])
    .await;
    assert_eq!(client(vec![addr]).get(b"k").await.expect("resent"), None);
    assert_eq!(script.received().len(), 2);
}

#[tokio::test]
async fn tryagain_and_redirections_are_resent() {
    // `TRYAGAIN`: this node knows no leader, ask the next one; `MOVED`: ask the
    // leader it names.
    let (leader, on_leader) = scripted(&[Action::Reply("+OK\r\n")]).await;
    let moved: &'static str = Box::leak(format!("-MOVED 0 {leader}\r\n").into_boxed_str());
    let (lost, on_lost) = scripted(&[Action::Reply("-TRYAGAIN no leader elected yet\r\n")]).await;
    let (follower, on_follower) = scripted(&[Action::Reply(moved)]).await;
    let mut c = client(vec![lost, follower, leader]);
    c.set(b"k", b"v").await.expect("redirected write");
    assert_eq!(names(&on_lost.received()), ["SET"]);
    assert_eq!(names(&on_follower.received()), ["SET"]);
    assert_eq!(names(&on_leader.received()), ["SET"]);
    assert_eq!(c.current(), Some(leader));
}

#[tokio::test]
async fn a_node_that_refuses_connections_is_skipped() {
    // A port nothing listens on: bind, note it, close.
    let dead = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind")
        .local_addr()
        .expect("address");
    let (live, script) = scripted(&[Action::Reply("+OK\r\n")]).await;
    client(vec![dead, live])
        .set(b"k", b"v")
        .await
        .expect("second node");
    assert_eq!(script.received().len(), 1);
}

#[tokio::test]
async fn the_retry_budget_ends_with_exhausted() {
    let (addr, script) = scripted(&[Action::Reply("-TRYAGAIN no leader elected yet\r\n")]).await;
    let err = client(vec![addr])
        .set(b"k", b"v")
        .await
        .expect_err("no leader");
    assert!(matches!(err, ClientError::Exhausted(_)), "{err:?}");
    assert_eq!(script.received().len(), 4);
    // Replies other than redirections come back as they are.
    let (addr, _) = scripted(&[Action::Reply("-ERR value too large\r\n")]).await;
    let reply = client(vec![addr]).command(&[b"SET", b"k", b"v"]).await;
    assert_eq!(
        reply.expect("a reply"),
        Reply::Error("ERR value too large".into())
    );
}
