//! The typed embedding API on real nodes (three in one process, on loopback):
//! a [`TypedMachine`] whose commands are an enum of numbers, written through
//! `Node::client_write` and read through `Node::client_read`.
//!
//! - Concurrent writes on the leader are applied in one order on every node:
//!   each write answers its position in a replicated list, and every node's
//!   store (opened after the cluster stopped) holds the same list, in the order
//!   the answers give.
//! - A follower answers `NotLeader`, naming the real leader and its address,
//!   and does nothing.
//! - After the leader stops, a write to a survivor succeeds once a new leader is
//!   elected.
#![cfg(feature = "server")]

mod loopback;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use loopback::loopback_members;
use raft_nvm::machine::{BatchState, StateView, Typed, TypedMachine};
use raft_nvm::node::{ClientWriteError, Node, NODE_PAGE_SIZE};
use raft_nvm::raft::Role;
use raft_nvm::replica::REPLICA_STORE_OPTIONS;
use raft_nvm::{ListOptions, ListStore, Store, StoreError};
use serde::{Deserialize, Serialize};

/// How long a leader may take to appear.
const WAIT: Duration = Duration::from_secs(10);

/// A command: numbers only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Cmd {
    /// Appends `item` to list `list`.
    Push { list: u8, item: u32 },
    /// Adds `by` to counter `counter`.
    Add { counter: u8, by: i64 },
}

/// What a command answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Resp {
    /// The item's position in its list.
    Pushed(u32),
    /// The counter's new value.
    Counter(i64),
}

/// Lists of `u32` (little-endian, concatenated) under `l<n>`, counters (8
/// little-endian bytes) under `c<n>`.
#[derive(Debug)]
struct Lists;

fn list_key(list: u8) -> Vec<u8> {
    vec![b'l', list]
}

fn counter_key(counter: u8) -> Vec<u8> {
    vec![b'c', counter]
}

fn items(bytes: Option<Vec<u8>>) -> Vec<u32> {
    bytes
        .unwrap_or_default()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn counter(bytes: Option<Vec<u8>>) -> i64 {
    bytes
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, i64::from_le_bytes)
}

impl TypedMachine for Lists {
    type Command = Cmd;
    type Response = Resp;
    type Query = u8;
    type Answer = Vec<u32>;

    fn name(&self) -> &str {
        "lists"
    }

    fn apply(&self, state: &mut BatchState<'_>, batch: &[Cmd]) -> Result<Vec<Resp>, StoreError> {
        let mut out = Vec::with_capacity(batch.len());
        for (pos, cmd) in batch.iter().enumerate() {
            match cmd {
                Cmd::Push { list, item } => {
                    let mut bytes = state.get(&list_key(*list))?.unwrap_or_default();
                    let at = (bytes.len() / 4) as u32;
                    bytes.extend_from_slice(&item.to_le_bytes());
                    state.put(pos, list_key(*list), bytes);
                    out.push(Resp::Pushed(at));
                }
                Cmd::Add { counter: c, by } => {
                    let next = counter(state.get(&counter_key(*c))?) + by;
                    state.put(pos, counter_key(*c), next.to_le_bytes());
                    out.push(Resp::Counter(next));
                }
            }
        }
        Ok(out)
    }

    fn query(&self, state: &StateView<'_>, list: &u8) -> Result<Vec<u32>, StoreError> {
        Ok(items(state.get(&list_key(*list))?))
    }
}

/// Where node `id`'s pool lives.
fn pool(dir: &Path, id: u16) -> std::path::PathBuf {
    dir.join(format!("node{id}.pool"))
}

/// Starts three nodes running [`Lists`] on list pools in `dir`.
async fn start(dir: &Path) -> Vec<Arc<Node>> {
    let members = loopback_members(3);
    let mut nodes = Vec::new();
    for id in 1..=3 {
        let node = Node::builder(id)
            .members(members.clone())
            .list(pool(dir, id), 8 << 20)
            .bootstrap()
            .state_machine(Typed::new(Lists))
            .start()
            .await
            .expect("node starts");
        nodes.push(Arc::new(node));
    }
    nodes
}

/// Waits (through the status channels) until one node leads; returns its
/// position in `nodes`.
async fn leader(nodes: &[Arc<Node>]) -> usize {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        for (i, n) in nodes.iter().enumerate() {
            let s = n.status().borrow().clone();
            if s.role == Role::Leader {
                return i;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader in {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until every node in `nodes` applied `index`.
async fn applied_everywhere(nodes: &[Arc<Node>], index: u64) {
    for n in nodes {
        let mut rx = n.status();
        let wait = rx.wait_for(|s| s.applied_index >= index);
        tokio::time::timeout(WAIT, wait)
            .await
            .expect("applied in time")
            .expect("node running");
    }
}

/// Stops every node.
async fn stop(nodes: Vec<Arc<Node>>) {
    for n in nodes {
        let n = Arc::try_unwrap(n).expect("the only handle");
        n.shutdown().await.expect("clean stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_typed_writes_apply_in_one_order_on_every_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = start(dir.path()).await;
    let l = leader(&nodes).await;
    assert_eq!(
        nodes[l]
            .client_write::<Lists>(Cmd::Add { counter: 1, by: 5 })
            .await,
        Ok(Resp::Counter(5))
    );
    assert_eq!(
        nodes[l]
            .client_write::<Lists>(Cmd::Add { counter: 1, by: -7 })
            .await,
        Ok(Resp::Counter(-2))
    );
    // Forty pushes at once: the leader takes them in some order, batched.
    let mut tasks = tokio::task::JoinSet::new();
    for item in 0..40u32 {
        let node = Arc::clone(&nodes[l]);
        tasks.spawn(async move {
            let r = node
                .client_write::<Lists>(Cmd::Push { list: 0, item })
                .await;
            (item, r)
        });
    }
    let mut order = vec![None; 40];
    while let Some(done) = tasks.join_next().await {
        let (item, r) = done.expect("task");
        match r {
            Ok(Resp::Pushed(at)) => {
                assert!(order[at as usize].is_none(), "position {at} answered twice");
                order[at as usize] = Some(item);
            }
            other => panic!("push {item}: {other:?}"),
        }
    }
    let order: Vec<u32> = order
        .into_iter()
        .map(|i| i.expect("every position"))
        .collect();
    assert_eq!(
        nodes[l].client_read::<Lists>(0).await,
        Ok(order.clone()),
        "the leader's list is the order the answers give"
    );
    let commit = nodes[l].status().borrow().commit_index;
    applied_everywhere(&nodes, commit).await;
    stop(nodes).await;
    // Every node's store holds the same list and counter.
    let opts = ListOptions {
        page_size: NODE_PAGE_SIZE,
        store: REPLICA_STORE_OPTIONS,
        ..ListOptions::default()
    };
    for id in 1..=3 {
        let store = ListStore::open(pool(dir.path(), id), &opts).expect("open pool");
        let last = store.last_index();
        assert_eq!(
            items(store.get(&list_key(0), last).expect("get")),
            order,
            "node {id}'s list"
        );
        assert_eq!(
            counter(store.get(&counter_key(1), last).expect("get")),
            -2,
            "node {id}'s counter"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_answers_not_leader_naming_the_leader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = start(dir.path()).await;
    let l = leader(&nodes).await;
    let f = (l + 1) % nodes.len();
    // The follower knows the leader once it heard from it.
    let mut rx = nodes[f].status();
    let leader_id = nodes[l].id();
    tokio::time::timeout(WAIT, rx.wait_for(|s| s.leader == Some(leader_id)))
        .await
        .expect("the follower hears from the leader")
        .expect("running");
    let err = nodes[f]
        .client_write::<Lists>(Cmd::Push { list: 3, item: 9 })
        .await;
    assert_eq!(
        err,
        Err(ClientWriteError::NotLeader {
            leader: Some(leader_id),
            leader_addr: Some(nodes[l].client_addr().to_string()),
        })
    );
    assert!(matches!(
        nodes[f].client_read::<Lists>(3).await,
        Err(ClientWriteError::NotLeader { .. })
    ));
    // Nothing was written.
    assert_eq!(nodes[l].client_read::<Lists>(3).await, Ok(vec![]));
    stop(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_takes_writes_once_a_new_leader_is_elected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut nodes = start(dir.path()).await;
    let l = leader(&nodes).await;
    assert_eq!(
        nodes[l]
            .client_write::<Lists>(Cmd::Push { list: 1, item: 1 })
            .await,
        Ok(Resp::Pushed(0))
    );
    let old_term = nodes[l].status().borrow().term;
    let old = nodes.remove(l);
    Arc::try_unwrap(old)
        .expect("the only handle")
        .shutdown()
        .await
        .expect("clean stop");
    // Writes to the survivors in turn until one takes it: the others answer
    // `NotLeader` meanwhile.
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut turn = 0;
    let (winner, pushed) = loop {
        let i = turn % nodes.len();
        turn += 1;
        match nodes[i]
            .client_write::<Lists>(Cmd::Push { list: 1, item: 2 })
            .await
        {
            Ok(r) => break (i, r),
            Err(ClientWriteError::NotLeader { .. }) => {}
            Err(e) => panic!("write to survivor {}: {e}", nodes[i].id()),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new leader in {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(pushed, Resp::Pushed(1));
    let new = nodes[winner].status().borrow().clone();
    assert!(new.term > old_term, "a new term: {new:?}");
    // The other survivor, once it heard from the new leader, names it.
    let other = 1 - winner;
    let winner_id = nodes[winner].id();
    let mut rx = nodes[other].status();
    tokio::time::timeout(WAIT, rx.wait_for(|s| s.leader == Some(winner_id)))
        .await
        .expect("the other survivor hears from the new leader")
        .expect("running");
    assert_eq!(
        nodes[other]
            .client_write::<Lists>(Cmd::Push { list: 1, item: 3 })
            .await,
        Err(ClientWriteError::NotLeader {
            leader: Some(winner_id),
            leader_addr: Some(nodes[winner].client_addr().to_string()),
        })
    );
    assert_eq!(nodes[winner].client_read::<Lists>(1).await, Ok(vec![1, 2]));
    stop(nodes).await;
}
