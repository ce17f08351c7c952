//! Membership changes on a real cluster (in one process, on loopback), over RESP:
//! a spare node started as a learner is added (`RAFT.ADD-LEARNER`), serves reads
//! itself (through the leader's read index), catches up,
//! is promoted (`RAFT.PROMOTE`), and the old leader is removed
//! (`RAFT.REMOVE-NODE`), while clients keep writing. No acknowledged write is lost,
//! every node that stays agrees on the configuration, the removed node points
//! clients at the others, and a restarted cluster keeps the configuration.
#![cfg(feature = "server")]

mod loopback;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use loopback::{free_port, info};
use raft_nvm::node::{Member, Node};
use raft_nvm::resp::{info_field, ClusterClient, Reply, RespClient};

fn at(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

async fn start(dir: &std::path::Path, id: u16, members: &BTreeMap<u16, Member>, how: &str) -> Node {
    let b = Node::builder(id)
        .members(members.clone())
        .list(dir.join(format!("node{id}.pool")), 16 << 20);
    let b = match how {
        "bootstrap" => b.bootstrap(),
        "learner" => b.learner().join(),
        _ => b,
    };
    b.start().await.expect("node starts")
}

/// `args` on the leader; the reply as text.
async fn admin(client: &mut ClusterClient, args: &[&str]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    match client.command(&args).await {
        Ok(Reply::Simple(s)) => s.into_owned(),
        Ok(Reply::Bulk(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(Reply::Error(e)) => format!("-{e}"),
        other => format!("{other:?}"),
    }
}

/// [`admin`], asked again while another change (or the leader's first commit)
/// is under way.
async fn admin_settled(client: &mut ClusterClient, args: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = admin(client, args).await;
        if !reply.contains("under way") || Instant::now() > deadline {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Members `1..=n`, each at two free loopback ports.
fn loopback_members(n: u16) -> BTreeMap<u16, Member> {
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

async fn field(addr: SocketAddr, name: &str) -> Option<String> {
    info_field(&info(addr).await, name).map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_joins_is_promoted_and_replaces_the_removed_leader() {
    let dir = tempfile::tempdir().expect("temp dir");
    let members = loopback_members(4);
    let founders: BTreeMap<u16, Member> = members.range(1..=3).map(|(&i, &m)| (i, m)).collect();
    let mut nodes: BTreeMap<u16, Node> = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start(dir.path(), id, &founders, "bootstrap").await);
    }
    nodes.insert(4, start(dir.path(), 4, &members, "learner").await);
    let clients: Vec<SocketAddr> = members.values().map(|m| m.client).collect();

    // Writers run throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4u32 {
        let (clients, stop) = (clients.clone(), Arc::clone(&stop));
        writers.push(tokio::spawn(async move {
            let mut c = ClusterClient::new(clients);
            c.max_attempts = 5000;
            let mut acked = Vec::new();
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let (k, v) = (format!("w{w}-{i}"), format!("v{i}"));
                if c.set(k.as_bytes(), v.as_bytes()).await.is_ok() {
                    acked.push((k, v));
                }
                i += 1;
            }
            acked
        }));
    }
    let mut client = ClusterClient::new(clients.clone());
    client.max_attempts = 5000;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (raft4, client4) = (members[&4].raft.to_string(), members[&4].client.to_string());
    assert_eq!(
        admin(&mut client, &["RAFT.ADD-LEARNER", "4", &raft4, &client4]).await,
        "OK"
    );
    // The learner serves reads itself, through the leader's read index: a value
    // written through the leader is there at once.
    client.set(b"seen-by-learner", b"yes").await.expect("write");
    let mut learner = RespClient::connect(members[&4].client)
        .await
        .expect("connect to the learner");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match learner.command(&[b"GET", b"seen-by-learner"]).await {
            Ok(Reply::Bulk(v)) => {
                assert_eq!(v, b"yes");
                break;
            }
            // Before it has heard from its leader it redirects or asks to retry.
            Ok(Reply::Error(e)) => assert!(
                e.starts_with("TRYAGAIN") || e.starts_with("MOVED") || e.contains("leadership"),
                "{e}"
            ),
            other => panic!("the learner answered {other:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "the learner never served the read"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        field(members[&4].client, "role").await.as_deref() == Some("follower"),
        "served by the learner, not a leader"
    );
    // Promotion waits until the learner has caught up.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = admin(&mut client, &["RAFT.PROMOTE", "4"]).await;
        if reply == "OK" {
            break;
        }
        assert!(
            reply.contains("behind") || reply.contains("lately") || reply.contains("under way"),
            "promote: {reply}"
        );
        assert!(Instant::now() < deadline, "learner 4 never caught up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Remove whoever leads now.
    let mut leader = None;
    for (&id, m) in &members {
        if field(m.client, "role").await.as_deref() == Some("leader") {
            leader = Some(id);
        }
    }
    let leader = leader.expect("a leader");
    // The configuration may still be leaving the joint one: retry while it is.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = admin(&mut client, &["RAFT.REMOVE-NODE", &leader.to_string()]).await;
        if reply == "OK" {
            break;
        }
        assert!(reply.contains("under way"), "remove: {reply}");
        assert!(Instant::now() < deadline, "the change never settled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.expect("writer"));
    }
    assert!(
        acked.len() > 100,
        "only {} writes acknowledged",
        acked.len()
    );

    // Every node that stays agrees on the configuration.
    let voters: Vec<String> = (1..=4u16)
        .filter(|&id| id != leader)
        .map(|id| id.to_string())
        .collect();
    let voters = voters.join(",");
    let deadline = Instant::now() + Duration::from_secs(10);
    for (&id, m) in &members {
        if id == leader {
            continue;
        }
        while field(m.client, "membership_voters").await.as_deref() != Some(voters.as_str()) {
            assert!(
                Instant::now() < deadline,
                "node {id} never saw voters {voters}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // The removed node sends clients elsewhere instead of leaving them waiting.
    let mut direct = RespClient::connect(members[&leader].client)
        .await
        .expect("connect");
    match direct.command(&[b"SET", b"k", b"v"]).await.expect("reply") {
        Reply::Error(e) => assert!(e.starts_with("MOVED "), "{e}"),
        other => panic!("a removed node took a write: {other:?}"),
    }
    // No acknowledged write is lost.
    for (k, v) in &acked {
        assert_eq!(
            client.get(k.as_bytes()).await.expect("get"),
            Some(v.clone().into_bytes()),
            "{k}"
        );
    }
    for (_, n) in std::mem::take(&mut nodes) {
        n.shutdown().await.expect("clean stop");
    }

    // Restarted, the cluster keeps its configuration (the stores carry it) and
    // serves with the new member.
    for id in 1..=4 {
        let m = if id == 4 { &members } else { &founders };
        nodes.insert(id, start(dir.path(), id, m, "restart").await);
    }
    let mut client = ClusterClient::new(clients);
    client.max_attempts = 5000;
    client
        .set(b"after", b"restart")
        .await
        .expect("write after restart");
    let (k, v) = acked.last().expect("some write");
    assert_eq!(
        client.get(k.as_bytes()).await.expect("get"),
        Some(v.clone().into_bytes())
    );
    assert_eq!(
        field(members[&4].client, "membership_voters")
            .await
            .as_deref(),
        Some(voters.as_str())
    );
    for (_, n) in nodes {
        n.shutdown().await.expect("clean stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_waits_for_its_learner_and_gives_up_on_a_silent_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let members = loopback_members(3);
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(start(dir.path(), id, &members, "bootstrap").await);
    }
    let mut client = ClusterClient::new(members.values().map(|m| m.client).collect());
    client.max_attempts = 5000;
    // A learner that never comes up: nothing listens at its addresses.
    let (raft9, client9) = (at(free_port()).to_string(), at(free_port()).to_string());
    assert_eq!(
        admin_settled(&mut client, &["RAFT.ADD-LEARNER", "9", &raft9, &client9]).await,
        "OK"
    );
    // Its promotion is not refused at once: it waits for the learner, then gives up.
    let reply = admin(&mut client, &["RAFT.PROMOTE", "9"]).await;
    assert!(
        reply.contains("has not answered") && reply.contains("gave up waiting"),
        "{reply}"
    );
    // Meanwhile nothing was proposed: the learner can simply be removed.
    assert_eq!(
        admin_settled(&mut client, &["RAFT.REMOVE-NODE", "9"]).await,
        "OK"
    );
    for n in nodes {
        n.shutdown().await.expect("clean stop");
    }
}

/// A spare started with the founders' addresses only, added while a member that
/// joined after it started (node 4) leads: node 4 dials it, and the spare answers
/// at the address node 4's Hello announced (it cannot know it from its
/// configuration until it has the entry that names node 4, which only its answers
/// bring). Before that, the spare stayed at `match=0` while node 4 led.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_that_knows_only_the_founders_catches_up_from_a_later_leader() {
    let dir = tempfile::tempdir().expect("temp dir");
    let members = loopback_members(5);
    let founders: BTreeMap<u16, Member> = members.range(1..=3).map(|(&i, &m)| (i, m)).collect();
    let mut nodes: BTreeMap<u16, Node> = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start(dir.path(), id, &founders, "bootstrap").await);
    }
    let first_four: BTreeMap<u16, Member> = members.range(1..=4).map(|(&i, &m)| (i, m)).collect();
    nodes.insert(4, start(dir.path(), 4, &first_four, "learner").await);
    let clients: Vec<SocketAddr> = members.values().map(|m| m.client).collect();
    let mut client = ClusterClient::new(clients);
    client.max_attempts = 5000;

    // Node 4 joins, is promoted and takes the leadership.
    let (raft4, client4) = (members[&4].raft.to_string(), members[&4].client.to_string());
    assert_eq!(
        admin_settled(&mut client, &["RAFT.ADD-LEARNER", "4", &raft4, &client4]).await,
        "OK"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while admin_settled(&mut client, &["RAFT.PROMOTE", "4"]).await != "OK" {
        assert!(Instant::now() < deadline, "node 4 never promoted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while field(members[&4].client, "role").await.as_deref() != Some("leader") {
        let _ = admin_settled(&mut client, &["RAFT.TRANSFER-LEADER", "4"]).await;
        assert!(Instant::now() < deadline, "node 4 never led");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The spare knows the founders and itself, not node 4.
    let spare: BTreeMap<u16, Member> = members
        .iter()
        .filter(|(&i, _)| i != 4)
        .map(|(&i, &m)| (i, m))
        .collect();
    nodes.insert(5, start(dir.path(), 5, &spare, "learner").await);
    let (raft5, client5) = (members[&5].raft.to_string(), members[&5].client.to_string());
    assert_eq!(
        admin_settled(&mut client, &["RAFT.ADD-LEARNER", "5", &raft5, &client5]).await,
        "OK"
    );
    client.set(b"for-the-spare", b"yes").await.expect("write");
    // The spare serves the value itself (through node 4's read index): it has
    // caught up and can reach node 4.
    let mut learner = RespClient::connect(members[&5].client)
        .await
        .expect("connect to the spare");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Reply::Bulk(v)) = learner.command(&[b"GET", b"for-the-spare"]).await {
            assert_eq!(v, b"yes");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the spare never caught up while node 4 led (node 4 leads: {:?})",
            field(members[&4].client, "role").await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (_, n) in nodes {
        n.shutdown().await.expect("clean stop");
    }
}
