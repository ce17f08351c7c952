//! `Node::status()`: the watch channel of a node's public status, on real nodes
//! (in one process, on loopback). Every node's channel shows the leader and term
//! of an election, an idle cluster publishes nothing, the survivors' channels
//! move to a new leader in a higher term when the leader stops, and a
//! configuration change (add a learner, promote it, remove a voter) shows in
//! `membership`. Everything is seen through `changed().await`, never by polling
//! `INFO`.
#![cfg(feature = "server")]

mod loopback;

use std::collections::BTreeMap;
use std::time::Duration;

use loopback::{loopback_members, start_list_cluster};
use raft_nvm::node::{Member, Node, NodeStatus};
use raft_nvm::raft::Role;
use raft_nvm::resp::{ClusterClient, Reply};
use tokio::sync::watch;

/// How long a status may take to come true.
const WAIT: Duration = Duration::from_secs(10);

/// Waits, through `changed()`, until `rx`'s status satisfies `ok`; returns it.
/// Panics with the last status seen after [`WAIT`].
async fn wait_for(
    rx: &mut watch::Receiver<NodeStatus>,
    what: &str,
    ok: impl Fn(&NodeStatus) -> bool,
) -> NodeStatus {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        {
            let s = rx.borrow_and_update();
            if ok(&s) {
                return s.clone();
            }
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("{what}: the node stopped; last status {:?}", *rx.borrow()),
            Err(_) => panic!(
                "{what}: not seen in {WAIT:?}; last status {:?}",
                *rx.borrow()
            ),
        }
    }
}

/// Waits until every channel in `rxs` shows one leader and term, and that
/// leader's own channel says it leads; returns `(leader, term)`.
async fn agreed_leader(rxs: &mut BTreeMap<u16, watch::Receiver<NodeStatus>>) -> (u16, u64) {
    let first = rxs.values_mut().next().expect("a node");
    let s = wait_for(first, "a leader", |s| s.leader.is_some()).await;
    let (leader, term) = (s.leader.expect("a leader"), s.term);
    for (id, rx) in rxs.iter_mut() {
        wait_for(rx, "the same leader and term", |s| {
            s.leader == Some(leader) && s.term == term
        })
        .await;
        if *id == leader {
            wait_for(rx, "the leader's role", |s| s.role == Role::Leader).await;
        }
    }
    (leader, term)
}

fn receivers(nodes: &[Node]) -> BTreeMap<u16, watch::Receiver<NodeStatus>> {
    nodes.iter().map(|n| (n.id(), n.status())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_shows_the_elected_leader_and_term_and_an_idle_node_publishes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let nodes = start_list_cluster(dir.path(), false).await;
    let mut rxs = receivers(&nodes);
    let (leader, _) = agreed_leader(&mut rxs).await;
    // The leader's first entry commits and is applied everywhere.
    let commit = wait_for(rxs.get_mut(&leader).expect("leader"), "a commit", |s| {
        s.commit_index > 0 && s.applied_index == s.commit_index
    })
    .await
    .commit_index;
    for rx in rxs.values_mut() {
        let s = wait_for(rx, "the commit everywhere", |s| {
            s.commit_index == commit && s.applied_index == commit
        })
        .await;
        assert_eq!(s.membership.voters.len(), 3, "{s:?}");
        assert!(s.store.used > 0, "{s:?}");
    }
    // Idle: heartbeats and ticks go on, but no field changes, so nothing is
    // sent. (A loaded machine may still see a real change, an election after a
    // late heartbeat: what is published must then differ from what was.)
    let seen: BTreeMap<u16, NodeStatus> = rxs
        .iter_mut()
        .map(|(&id, rx)| (id, rx.borrow_and_update().clone()))
        .collect();
    tokio::time::sleep(Duration::from_millis(400)).await;
    for (id, rx) in &rxs {
        if rx.has_changed().expect("running") {
            assert_ne!(
                *rx.borrow(),
                seen[id],
                "idle node {id} published its status again"
            );
        }
    }
    for n in nodes {
        n.shutdown().await.expect("clean stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_survivors_show_a_new_leader_in_a_higher_term_when_the_leader_stops() {
    let dir = tempfile::tempdir().expect("temp dir");
    let nodes = start_list_cluster(dir.path(), false).await;
    let mut rxs = receivers(&nodes);
    let (leader, term) = agreed_leader(&mut rxs).await;
    let mut survivors = Vec::new();
    for n in nodes {
        if n.id() == leader {
            // `shutdown` hands leadership over first: the survivors' term rises
            // either way.
            n.shutdown().await.expect("clean stop");
        } else {
            survivors.push(n);
        }
    }
    rxs.remove(&leader);
    for rx in rxs.values_mut() {
        wait_for(rx, "a new leader in a higher term", |s| {
            s.term > term && s.leader.is_some() && s.leader != Some(leader)
        })
        .await;
    }
    let (new_leader, new_term) = agreed_leader(&mut rxs).await;
    assert_ne!(new_leader, leader);
    assert!(new_term > term);
    for n in survivors {
        n.shutdown().await.expect("clean stop");
    }
}

/// `args` through the cluster's client (it follows the leader); the reply as text.
async fn admin(client: &mut ClusterClient, args: &[&str]) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    loop {
        let reply = match client.command(&args).await {
            Ok(Reply::Simple(s)) => s.into_owned(),
            Ok(Reply::Bulk(b)) => String::from_utf8_lossy(&b).into_owned(),
            Ok(Reply::Error(e)) => format!("-{e}"),
            other => format!("{other:?}"),
        };
        // Another change (or the leader's first commit) is under way: ask again.
        if !reply.contains("under way") || tokio::time::Instant::now() > deadline {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_change_shows_in_every_members_status() {
    let dir = tempfile::tempdir().expect("temp dir");
    let members = loopback_members(4);
    let founders: BTreeMap<u16, Member> = members.range(1..=3).map(|(&i, &m)| (i, m)).collect();
    let mut nodes = Vec::new();
    for id in 1..=4u16 {
        let b = Node::builder(id).list(dir.path().join(format!("node{id}.pool")), 8 << 20);
        let b = if id == 4 {
            b.members(members.clone()).learner().join()
        } else {
            b.members(founders.clone()).bootstrap()
        };
        nodes.push(b.start().await.expect("node starts"));
    }
    let mut rxs = receivers(&nodes);
    let mut client = ClusterClient::new(members.values().map(|m| m.client).collect());
    client.max_attempts = 5000;

    let (raft4, client4) = (members[&4].raft.to_string(), members[&4].client.to_string());
    assert_eq!(
        admin(&mut client, &["RAFT.ADD-LEARNER", "4", &raft4, &client4]).await,
        "OK"
    );
    for rx in rxs.values_mut() {
        wait_for(rx, "4 a learner", |s| {
            s.membership.learners.contains(&4) && !s.membership.voters.contains(&4)
        })
        .await;
    }
    assert_eq!(admin(&mut client, &["RAFT.PROMOTE", "4"]).await, "OK");
    for rx in rxs.values_mut() {
        wait_for(rx, "4 a voter", |s| {
            s.membership.voters.contains(&4) && s.membership.learners.is_empty()
        })
        .await;
    }
    // Remove a voter that does not lead (the leader's handover is not what this
    // test is about).
    let leader = wait_for(rxs.get_mut(&1).expect("node 1"), "a leader", |s| {
        s.leader.is_some()
    })
    .await
    .leader
    .expect("a leader");
    let removed = (1..=3u16).find(|&id| id != leader).expect("a follower");
    assert_eq!(
        admin(&mut client, &["RAFT.REMOVE-NODE", &removed.to_string()]).await,
        "OK"
    );
    for (id, rx) in rxs.iter_mut() {
        if *id == removed {
            continue;
        }
        let s = wait_for(rx, "the voter removed", |s| {
            !s.membership.voters.contains(&removed)
                && s.membership.outgoing.is_empty()
                && s.membership.voters.len() == 3
        })
        .await;
        assert!(s.membership.voters.contains(&4), "{s:?}");
    }
    for n in nodes {
        n.shutdown().await.expect("clean stop");
    }
}
