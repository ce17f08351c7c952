//! Helpers for the tests that run several real nodes in one process on loopback:
//! free ports for their members, a three-node cluster on list stores, a node's
//! `INFO` and role over RESP, and finding the leader.

#![allow(dead_code)] // each test uses a different part

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use raft_nvm::node::{Member, Node};
use raft_nvm::resp::{info_field, Reply, RespClient};

mod port;
pub use port::free_port;

/// The `INFO` text of the node serving clients at `addr`.
pub async fn info(addr: SocketAddr) -> String {
    let mut c = RespClient::connect(addr).await.expect("connect");
    match c.command(&[b"INFO"]).await.expect("INFO") {
        Reply::Bulk(text) => String::from_utf8(text).expect("utf-8"),
        other => panic!("INFO answered {other:?}"),
    }
}

/// Members `1..=n`, each with a free loopback port for Raft and one for clients.
pub fn loopback_members(n: u16) -> BTreeMap<u16, Member> {
    let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
    (1..=n)
        .map(|id| {
            let m = Member {
                raft: at(free_port()),
                client: at(free_port()),
            };
            (id, m)
        })
        .collect()
}

/// Starts a three-node cluster on 8 MiB list pools in `dir`, on free loopback
/// ports, with lease reads as `lease` says.
pub async fn start_list_cluster(dir: &std::path::Path, lease: bool) -> Vec<Node> {
    let members = loopback_members(3);
    let mut nodes = Vec::new();
    for id in 1..=3 {
        let node = Node::builder(id)
            .members(members.clone())
            .list(dir.join(format!("node{id}.pool")), 8 << 20)
            .bootstrap()
            .lease_reads(lease)
            .start()
            .await
            .expect("node starts");
        nodes.push(node);
    }
    nodes
}

/// The role (`leader`, `follower`, ...) the node serving clients at `addr` reports
/// in `INFO`, if it answers.
pub async fn role(addr: SocketAddr) -> Option<String> {
    let mut c = RespClient::connect(addr).await.ok()?;
    match c.command(&[b"INFO"]).await.ok()? {
        Reply::Bulk(text) => {
            let text = String::from_utf8(text).ok()?;
            info_field(&text, "role").map(str::to_string)
        }
        _ => None,
    }
}

/// The client address of the node that leads, waiting up to ten seconds.
pub async fn leader(addrs: &[SocketAddr]) -> SocketAddr {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        for &a in addrs {
            if role(a).await.as_deref() == Some("leader") {
                return a;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no leader elected");
}
