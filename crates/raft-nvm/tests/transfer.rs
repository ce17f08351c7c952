//! Leadership transfer and lease reads on a real three-node cluster (in one
//! process, on loopback): `RAFT.TRANSFER-LEADER` over RESP moves the leadership to
//! the named node with no write lost, and a leader that is shut down hands its
//! leadership over first, so the others have a leader the moment it is gone
//! (without it they would wait out an election timeout while still following the
//! stopped node). With lease reads on, the leader's connections answer `GET`
//! themselves, and every value read back is the last one written.
#![cfg(feature = "server")]

mod loopback;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use loopback::{info, leader, role, start_list_cluster};
use raft_nvm::node::Node;
use raft_nvm::resp::{info_field, ClusterClient, Reply, RespClient};

/// The tests of this file pick free ports, then bind them: one at a time, so two
/// clusters never pick the same port.
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn start_cluster(dir: &std::path::Path) -> Vec<Node> {
    start_list_cluster(dir, false).await
}

/// Waits (up to five seconds) until the node serving clients at `addr` leads.
async fn wait_until_leader(addr: SocketAddr) {
    let started = Instant::now();
    while role(addr).await.as_deref() != Some("leader") {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{addr} never led"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_moves_leadership_and_shutdown_hands_it_over() {
    let _one = ONE_CLUSTER.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut nodes = start_cluster(dir.path()).await;
    let addrs: Vec<SocketAddr> = nodes.iter().map(Node::client_addr).collect();
    let mut client = ClusterClient::new(addrs.clone());
    for i in 0..50 {
        client
            .set(format!("k{i}").as_bytes(), b"before")
            .await
            .expect("write");
    }
    let old = leader(&addrs).await;
    let target_pos = (addrs.iter().position(|&a| a == old).expect("a member") + 1) % 3;
    let target_id = nodes[target_pos].id();

    // A follower redirects the command to the leader; the leader starts the transfer.
    let mut c = RespClient::connect(old).await.expect("connect");
    let id = target_id.to_string();
    assert_eq!(
        c.command(&[b"RAFT.TRANSFER-LEADER", id.as_bytes()])
            .await
            .expect("reply"),
        Reply::Simple("OK".into())
    );
    // The old leader may still say it leads for a moment: wait for the target.
    wait_until_leader(addrs[target_pos]).await;
    assert!(matches!(
        c.command(&[b"RAFT.TRANSFER-LEADER", b"x"]).await.expect("reply"),
        Reply::Error(e) if e.contains("not an integer")
    ));
    for i in 50..100 {
        client
            .set(format!("k{i}").as_bytes(), b"after")
            .await
            .expect("write after the transfer");
    }

    // Shutting the new leader down hands the leadership to another node first.
    let stopped = nodes.remove(target_pos);
    stopped.shutdown().await.expect("clean shutdown");
    let rest: Vec<SocketAddr> = nodes.iter().map(Node::client_addr).collect();
    // The handover ends once the stopped node no longer leads; the target's win
    // follows within a message round. Without it, the others would follow the
    // stopped node for an election timeout (150 ms at least) before campaigning.
    let stopped_at = Instant::now();
    let mut roles = Vec::new();
    while stopped_at.elapsed() < Duration::from_millis(100) {
        roles.clear();
        for &a in &rest {
            roles.push(role(a).await);
        }
        if roles.iter().any(|r| r.as_deref() == Some("leader")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(
        roles.iter().any(|r| r.as_deref() == Some("leader")),
        "a leader within 100 ms of the old one stopping: {roles:?}"
    );
    let mut client = ClusterClient::new(rest);
    for i in 0..100 {
        let want: &[u8] = if i < 50 { b"before" } else { b"after" };
        assert_eq!(
            client.get(format!("k{i}").as_bytes()).await.expect("read"),
            Some(want.to_vec())
        );
    }
    for node in nodes {
        node.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_reads_are_answered_by_the_leaders_connections_and_stay_current() {
    let _one = ONE_CLUSTER.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let nodes = start_list_cluster(dir.path(), true).await;
    let addrs: Vec<SocketAddr> = nodes.iter().map(Node::client_addr).collect();
    let mut client = ClusterClient::new(addrs.clone());
    client.set(b"k", b"0").await.expect("write");
    let at = leader(&addrs).await;
    let mut conn = RespClient::connect(at).await.expect("connect");
    // Interleaved writes and reads on one connection: each read sees the write
    // just acknowledged (served directly or by the node, it must be current).
    for i in 1..=200u32 {
        let v = i.to_string();
        assert_eq!(
            conn.command(&[b"SET", b"k", v.as_bytes()])
                .await
                .expect("SET"),
            Reply::Simple("OK".into())
        );
        assert_eq!(
            conn.command(&[b"GET", b"k"]).await.expect("GET"),
            Reply::Bulk(v.into_bytes())
        );
    }
    let text = info(at).await;
    assert_eq!(info_field(&text, "lease_reads"), Some("on"));
    let direct: u64 = info_field(&text, "reads_by_lease_direct")
        .and_then(|v| v.parse().ok())
        .expect("reads_by_lease_direct");
    assert!(direct > 0, "no read was answered from the lease: {text}");
    // After a transfer the new leader serves reads; the old one redirects.
    let target = addrs.iter().position(|&a| a != at).expect("another node");
    let id = nodes[target].id().to_string();
    assert_eq!(
        conn.command(&[b"RAFT.TRANSFER-LEADER", id.as_bytes()])
            .await
            .expect("reply"),
        Reply::Simple("OK".into())
    );
    wait_until_leader(addrs[target]).await;
    assert_eq!(
        client.get(b"k").await.expect("read at the new leader"),
        Some(b"200".to_vec())
    );
    for node in nodes {
        node.shutdown().await.expect("shutdown");
    }
}
