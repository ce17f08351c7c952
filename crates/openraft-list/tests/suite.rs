//! openraft's own storage conformance suite (`openraft::testing::log::Suite`) on
//! the store, for each engine and pool mode: the list on a pool forced to act as
//! persistent memory (flushes and fences, no msync), the list on a plain file made
//! durable by msync, and the WAL.

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::StorageError;
use openraft_list::{ListOptions, ListRaftStore, TypeConfig, WalOptions};
use pmem_core::ModeRequest;
use tempfile::TempDir;

/// Which store a builder makes.
#[derive(Clone, Copy, Debug)]
enum Kind {
    ListDax,
    ListMsync,
    Wal,
}

struct Builder(Kind);

fn list_opts(mode: ModeRequest) -> ListOptions {
    ListOptions {
        mode,
        ..ListOptions::default()
    }
}

impl StoreBuilder<TypeConfig, ListRaftStore, ListRaftStore, TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(TempDir, ListRaftStore, ListRaftStore), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        let store = match self.0 {
            Kind::ListDax => ListRaftStore::create_list(
                dir.path().join("pool"),
                1 << 20,
                &list_opts(ModeRequest::ForceDax),
            ),
            Kind::ListMsync => ListRaftStore::create_list(
                dir.path().join("pool"),
                1 << 20,
                &list_opts(ModeRequest::Auto),
            ),
            Kind::Wal => ListRaftStore::open_wal(dir.path().join("wal"), &WalOptions::default()),
        }
        .map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        Ok((dir, store.clone(), store))
    }
}

type S = Suite<TypeConfig, ListRaftStore, ListRaftStore, Builder, TempDir>;

/// Runs each of the suite's tests on a fresh store (as `Suite::test_all` does, but
/// all of them, not up to the first failure), then the snapshot transfer; the
/// names of those that failed, with their errors.
async fn run_each(kind: Kind) -> Vec<(&'static str, String)> {
    let b = Builder(kind);
    let mut failed = Vec::new();
    macro_rules! each {
        ($($name:ident),* $(,)?) => {$(
            let (_g, ls, sm) = b.build().await.expect("build");
            let fut = S::$name(ls, sm);
            let res = tokio::spawn(fut).await;
            match res {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failed.push((stringify!($name), e.to_string())),
                Err(e) => failed.push((stringify!($name), format!("panicked: {e}"))),
            }
        )*};
    }
    each!(last_membership_in_log_initial, last_membership_in_log, last_membership_in_log_multi_step, get_membership_initial, get_membership_from_log_and_empty_sm, get_membership_from_empty_log_and_sm, get_membership_from_log_le_sm_last_applied, get_membership_from_log_gt_sm_last_applied_1, get_membership_from_log_gt_sm_last_applied_2, get_initial_state_without_init, get_initial_state_membership_from_empty_log_and_sm, get_initial_state_membership_from_sm_inlog_is_smaller, get_initial_state_membership_from_log_insm_is_smaller, get_initial_state_with_state, get_initial_state_last_log_gt_sm, get_initial_state_last_log_lt_sm, get_initial_state_inverted_log_order, get_initial_state_conflict_at_same_index, get_initial_state_log_ids, get_initial_state_re_apply_committed, save_vote, get_log_entries, limited_get_log_entries, leader_bounded_stream, entries_stream, try_get_log_entry, log_reader_reads_new_entries, initial_logs, get_log_state, get_log_id, last_id_in_log, last_applied_state, purge_logs_upto_0, purge_logs_upto_5, purge_logs_upto_20, delete_logs_after_11, delete_logs_after_5, delete_logs_after_0, delete_logs_after_none, append_to_log, snapshot_meta, snapshot_meta_optional, apply_single, apply_multiple);
    if let Err(e) = S::transfer_snapshot(&b).await {
        failed.push(("transfer_snapshot", e.to_string()));
    }
    failed
}

async fn run(kind: Kind) {
    let failed = run_each(kind).await;
    for (n, e) in &failed {
        eprintln!("{kind:?} FAIL {n}: {e}");
    }
    assert!(failed.is_empty(), "{kind:?}: {} failed", failed.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_list_dax() {
    run(Kind::ListDax).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_list_msync() {
    run(Kind::ListMsync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_wal() {
    run(Kind::Wal).await;
}
