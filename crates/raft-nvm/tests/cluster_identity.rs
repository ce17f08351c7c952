//! Cluster identity on real nodes: a node of another cluster (another token) is
//! refused by the members' transports and never joins them, and a node told to
//! bootstrap or join over another cluster's data refuses to start, writing
//! nothing.
#![cfg(feature = "server")]

mod loopback;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use loopback::{free_port, info};
use raft_nvm::node::{Member, Node, NodeError};
use raft_nvm::resp::{info_field, ClusterClient};

fn members() -> BTreeMap<u16, Member> {
    let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
    (1..=3)
        .map(|id| {
            (
                id,
                Member {
                    raft: at(free_port()),
                    client: at(free_port()),
                },
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clusters_node_is_refused_and_its_data_is_not_taken_over() {
    let dir = tempfile::tempdir().expect("temp dir");
    let members = members();
    let start = |id: u16, token: &str, sub: &str| {
        Node::builder(id)
            .members(members.clone())
            .list(dir.path().join(sub).join(format!("node{id}.pool")), 4 << 20)
            .cluster_token(token.to_string())
    };
    // Cluster "a": nodes 1 and 2 (a quorum of three).
    let mut nodes = Vec::new();
    for id in [1, 2] {
        nodes.push(
            start(id, "a", "a")
                .bootstrap()
                .start()
                .await
                .expect("start"),
        );
    }
    let addrs: Vec<SocketAddr> = nodes.iter().map(Node::client_addr).collect();
    let mut client = ClusterClient::new(addrs.clone());
    client.set(b"k", b"v").await.expect("a writes");
    let a_id = info_field(&info(addrs[0]).await, "cluster_id")
        .expect("cluster_id")
        .to_string();

    // Node 3 of cluster "b" at node 3's address: refused, it learns nothing.
    let stranger = start(3, "b", "b").bootstrap().start().await.expect("start");
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(600) {
        client.set(b"k", b"w").await.expect("a still writes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = info(stranger.client_addr()).await;
    assert_ne!(info_field(&text, "cluster_id"), Some(a_id.as_str()));
    assert_eq!(info_field(&text, "commit_index"), Some("0"), "{text}");
    assert_ne!(info_field(&text, "role"), Some("leader"));
    let stranger_pool = dir.path().join("b").join("node3.pool");
    stranger.shutdown().await.expect("shutdown");

    // Bootstrapping or joining cluster "a" over cluster "b"'s data is refused, and
    // the data and its cluster record are left as they were.
    let record = std::fs::read(dir.path().join("b").join("node3.pool.cluster")).expect("record");
    let pool = std::fs::read(&stranger_pool).expect("pool");
    for join in [false, true] {
        let b = Node::builder(3)
            .members(members.clone())
            .list(&stranger_pool, 4 << 20)
            .cluster_token("a");
        let b = if join { b.join() } else { b.bootstrap() };
        match b.start().await {
            Err(e @ NodeError::OtherCluster { .. }) => {
                assert!(e.to_string().contains("belongs to cluster"), "{e}");
            }
            other => panic!("join {join}: {:?}", other.map(|n| n.id())),
        }
    }
    assert_eq!(
        std::fs::read(dir.path().join("b").join("node3.pool.cluster")).expect("record"),
        record
    );
    assert_eq!(std::fs::read(&stranger_pool).expect("pool"), pool);

    // Node 3 of cluster "a" joins and catches up.
    let third = start(3, "a", "a").join().start().await.expect("start");
    let started = Instant::now();
    loop {
        let text = info(third.client_addr()).await;
        if info_field(&text, "cluster_id") == Some(a_id.as_str())
            && info_field(&text, "commit_index").is_some_and(|c| c != "0")
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    third.shutdown().await.expect("shutdown");
    for node in nodes {
        node.shutdown().await.expect("shutdown");
    }
}
