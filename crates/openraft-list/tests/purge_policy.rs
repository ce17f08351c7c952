//! When a purge compacts the list: raft-nvm's compaction policy paces it.
//!
//! A purge always hides the purged entries and makes the purged id durable; the
//! copying of the live records waits until the policy says it pays. On a roomy
//! pool the log is not compacted at its purge; on a pool past the emergency fill
//! it is, and the superseded records of the purged prefix are gone.

use std::sync::Arc;

use openraft::impls::leader_id_adv::LeaderId;
use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage, RaftStateMachine};
use openraft::type_config::TypeConfigExt;
use openraft::EntryPayload;
use openraft_list::{Entry, ListRaftStore, LogId, Request, TypeConfig};
use raft_nvm::{ListOptions, ListStore, Store, StoreOptions};

fn lid(index: u64) -> LogId {
    LogId::new(
        LeaderId {
            term: 1,
            node_id: 1,
        },
        index,
    )
}

/// A set of one of four keys: later entries supersede earlier ones.
fn set(index: u64) -> Entry {
    Entry {
        log_id: lid(index),
        payload: EntryPayload::Normal(Request::Set {
            key: format!("key-{}", index % 4).into_bytes(),
            value: vec![b'v'; 40],
        }),
    }
}

fn opts() -> ListOptions {
    ListOptions {
        store: StoreOptions {
            group: u32::MAX,
            sync_interval: None,
        },
        page_size: 256,
        mode: pmem_core::ModeRequest::ForceDax,
        ..ListOptions::default()
    }
}

/// A list store of `bytes` bytes in `dir`.
fn store(dir: &tempfile::TempDir, bytes: u64) -> ListRaftStore {
    let list = ListStore::create(dir.path().join("pool"), bytes, &opts()).expect("create");
    ListRaftStore::from_store(Arc::new(list) as Arc<dyn Store>).expect("adapter")
}

/// Appends entries `from..to` in one call and applies them.
async fn append_apply(s: &mut ListRaftStore, from: u64, to: u64) {
    let (tx, rx) = TypeConfig::oneshot();
    s.append((from..to).map(set), IOFlushed::signal(tx))
        .await
        .expect("append");
    rx.await.expect("callback").expect("durable");
    let entries = s.try_get_log_entries(..to).await.expect("read");
    let items = entries.into_iter().map(|x| Ok((x, None)));
    s.apply(futures_util::stream::iter(items))
        .await
        .expect("apply");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

#[test]
fn a_roomy_pool_is_not_compacted_at_a_purge_but_hides_the_purged_entries() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = store(&dir, 1 << 20);
        append_apply(&mut s, 0, 50).await;
        s.purge(lid(40)).await.expect("purge");
        assert_eq!(s.compaction_counts().runs, 0, "compacted a roomy pool");
        // The record of entry 0 (store index 1) is still in the list...
        assert!(s.store().entry(1).expect("entry").is_some());
        // ...but openraft no longer sees it.
        let state = s.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id, Some(lid(40)));
        let entries = s.try_get_log_entries(..50).await.expect("read");
        assert_eq!(entries.first().map(|e| e.log_id.index), Some(41));
    });
}

#[test]
fn a_pool_past_the_emergency_fill_is_compacted_at_a_purge() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = store(&dir, 64 * 1024);
        // Fill the pool past 85 % with entries, then purge most of them.
        let mut next = 0;
        while s.store().usage().fill().expect("bounded") < 0.87 {
            append_apply(&mut s, next, next + 10).await;
            next += 10;
        }
        s.purge(lid(next - 5)).await.expect("purge");
        assert_eq!(s.compaction_counts().runs, 1);
        assert_eq!(s.compaction_counts().emergency, 1);
        // The purged prefix's superseded records are gone.
        assert!(s.store().entry(1).expect("entry").is_none());
        let fill = s.store().usage().fill().expect("bounded");
        assert!(fill < 0.87, "fill {fill} after compacting");
    });
}
