//! One openraft node on the store, end to end: it elects itself, applies writes
//! (the responses carry the previous values, the reads see the writes), builds a
//! snapshot and purges the log up to it, stops, and starts again on the reopened
//! store with its state, its vote and its log intact. On the list (forced DAX and
//! msync) and the WAL.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftStateMachine};
use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use openraft_list::{list_options, wal_options, ListRaftStore, Request, TypeConfig, Vote};
use pmem_core::ModeRequest;

/// The network of a one-node cluster: there is nobody to reach.
struct Nowhere;

fn unreachable() -> Unreachable<TypeConfig> {
    Unreachable::from_string("a one-node cluster has no peers")
}

impl RaftNetworkV2<TypeConfig> for Nowhere {
    type SnapshotData = std::fs::File;

    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(RPCError::Unreachable(unreachable()))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(RPCError::Unreachable(unreachable()))
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: openraft_list::ListSnapshot,
        _cancel: impl Future<Output = ReplicationClosed> + openraft::OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        Err(StreamingError::Unreachable(unreachable()))
    }
}

impl RaftNetworkFactory<TypeConfig> for Nowhere {
    type Network = Nowhere;

    async fn new_client(&mut self, _target: u64, _node: &BasicNode) -> Nowhere {
        Nowhere
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    ListDax,
    ListMsync,
    Wal,
}

fn open(kind: Kind, dir: &std::path::Path, create: bool) -> ListRaftStore {
    try_open(kind, dir, create).unwrap_or_else(|e| panic!("{kind:?}: open: {e}"))
}

fn try_open(
    kind: Kind,
    dir: &std::path::Path,
    create: bool,
) -> Result<ListRaftStore, openraft_list::OpenraftListError> {
    match kind {
        Kind::ListDax | Kind::ListMsync => {
            let mode = if matches!(kind, Kind::ListDax) {
                ModeRequest::ForceDax
            } else {
                ModeRequest::Auto
            };
            let path = dir.join("pool");
            if create {
                ListRaftStore::create_list(&path, 4 << 20, &list_options(mode))
            } else {
                ListRaftStore::open_list(&path, &list_options(mode))
            }
        }
        Kind::Wal => ListRaftStore::open_wal(dir.join("wal"), &wal_options()),
    }
}

async fn start(store: &ListRaftStore) -> Raft<TypeConfig, ListRaftStore> {
    let config = Config {
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        snapshot_policy: SnapshotPolicy::Never,
        ..Config::default()
    };
    let config = Arc::new(config.validate().expect("config"));
    Raft::new(1, config, Nowhere, store.clone(), store.clone())
        .await
        .expect("raft")
}

fn set(k: &str, v: &str) -> Request {
    Request::Set {
        key: k.into(),
        value: v.into(),
    }
}

async fn scenario(kind: Kind) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(kind, dir.path(), true);
    let raft = start(&store).await;
    raft.initialize(BTreeMap::from([(1u64, BasicNode::default())]))
        .await
        .expect("initialize");
    raft.wait(Some(Duration::from_secs(5)))
        .current_leader(1, "leader")
        .await
        .expect("leader");

    let r = raft.client_write(set("a", "1")).await.expect("write");
    assert_eq!(r.data.previous, None);
    let r = raft.client_write(set("a", "2")).await.expect("write");
    assert_eq!(r.data.previous.as_deref(), Some(&b"1"[..]));
    raft.client_write(set("b", "x")).await.expect("write");
    let r = raft
        .client_write(Request::Delete { key: "b".into() })
        .await
        .expect("write");
    assert_eq!(r.data.previous.as_deref(), Some(&b"x"[..]));
    assert_eq!(store.get(b"a").expect("get").as_deref(), Some(&b"2"[..]));
    assert_eq!(store.get(b"b").expect("get"), None);

    // A snapshot, then the log purged up to it: the list compacts.
    raft.trigger().snapshot().await.expect("snapshot");
    let m = raft
        .wait(Some(Duration::from_secs(5)))
        .metrics(|m| m.snapshot.is_some(), "snapshot built")
        .await
        .expect("snapshot");
    let snap = m.snapshot.expect("snapshot");
    raft.trigger().purge_log(snap.index).await.expect("purge");
    raft.wait(Some(Duration::from_secs(5)))
        .purged(Some(snap), "purged")
        .await
        .expect("purged");
    for i in 0..20 {
        raft.client_write(set(&format!("k{i}"), "v"))
            .await
            .expect("write");
    }
    let last_vote = store.clone().read_vote().await.expect("vote");
    raft.shutdown().await.expect("shutdown");
    drop(raft);
    drop(store);

    // Restart on the reopened store, once openraft's tasks dropped their handles
    // (the pool is locked while one is open).
    let mut tries = 0;
    let store = loop {
        match try_open(kind, dir.path(), false) {
            Ok(s) => break s,
            Err(e) if tries < 100 => {
                tries += 1;
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{kind:?}: reopen: {e}"),
        }
    };
    assert_eq!(store.clone().read_vote().await.expect("vote"), last_vote);
    let state = store.clone().get_log_state().await.expect("log state");
    assert!(
        state.last_purged_log_id == Some(snap),
        "{kind:?}: purged {:?}, snapshot {snap}",
        state.last_purged_log_id
    );
    // The snapshot and the applied state came back with it.
    let mut sm = store.clone();
    let cur = sm
        .get_current_snapshot()
        .await
        .expect("snapshot")
        .expect("a snapshot");
    assert_eq!(cur.meta.last_log_id, Some(snap));
    let (applied, _) = sm.applied_state().await.expect("applied");
    assert!(applied >= Some(snap), "{kind:?}: applied {applied:?}");
    let raft = start(&store).await;
    raft.wait(Some(Duration::from_secs(5)))
        .current_leader(1, "leader again")
        .await
        .expect("leader");
    let r = raft.client_write(set("a", "3")).await.expect("write");
    assert_eq!(r.data.previous.as_deref(), Some(&b"2"[..]));
    assert_eq!(store.get(b"k19").expect("get").as_deref(), Some(&b"v"[..]));
    assert_eq!(store.get(b"b").expect("get"), None);
    raft.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_list_dax() {
    scenario(Kind::ListDax).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_list_msync() {
    scenario(Kind::ListMsync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_wal() {
    scenario(Kind::Wal).await;
}
