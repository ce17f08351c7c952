//! openraft's own storage conformance suite (`openraft::testing::log::Suite` of
//! openraft 0.10.0-alpha.37) on the store, for each engine and pool mode: the list
//! on a pool forced to act as persistent memory (flushes and fences, no msync),
//! the list on a plain file made durable by msync, and the WAL.
//!
//! The suite's 44 store tests and its snapshot transfer fall in three groups:
//!
//! - **Run as they are** (`DIRECT`, 22 tests): the log store's reads, vote, purge,
//!   truncation, appends, the initial state from the log.
//! - **Run with the state machine seen through [`LogFirst`]** (`SM_ONLY`, 5 tests,
//!   and `transfer_snapshot`): tests that use only the state machine and apply
//!   entries they never appended. Here the state machine *is* the log: applying
//!   makes logged entries visible, and writes nothing. `LogFirst` appends what a
//!   test applies to the log first (filling the indexes the test skips with blank
//!   entries of the same leader), then the store applies it; what the test
//!   checks (applied log id, membership, snapshot metadata, the installed
//!   snapshot's state) is the store's own answer.
//! - **Not applicable** (`SEPARATE_STATE`, 17 tests): tests that build a state
//!   machine that disagrees with the log (applied entries the log does not hold,
//!   or holds with another leader; a state machine ahead of the log; a log that
//!   starts above index 0 with nothing purged) and check how openraft reconciles
//!   the two at startup. One structure cannot be put in such a state. The test
//!   checks that each of them still fails, and fails for that reason (the store
//!   refuses to apply an entry the log does not hold, or to append at an index
//!   that does not follow the last), so the list stays exact.

use openraft::testing::log::{StoreBuilder, Suite};
use std::io;

use futures_util::StreamExt;
use openraft::storage::{EntryResponder, RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::type_config::TypeConfigExt;
use openraft::StorageError;
use openraft::{EntryPayload, OptionalSend};
use openraft_list::{Entry, ListOptions, ListRaftStore, TypeConfig, WalOptions};
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
        let dir =
            tempfile::tempdir().map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
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
type SL = Suite<TypeConfig, ListRaftStore, LogFirst, LogFirstBuilder, TempDir>;

/// The suite's tests run as they are.
const DIRECT: &[&str] = &[
    "last_membership_in_log_initial",
    "get_membership_initial",
    "get_initial_state_without_init",
    "get_initial_state_log_ids",
    "save_vote",
    "get_log_entries",
    "limited_get_log_entries",
    "leader_bounded_stream",
    "entries_stream",
    "try_get_log_entry",
    "log_reader_reads_new_entries",
    "initial_logs",
    "get_log_state",
    "get_log_id",
    "purge_logs_upto_0",
    "purge_logs_upto_5",
    "purge_logs_upto_20",
    "delete_logs_after_11",
    "delete_logs_after_5",
    "delete_logs_after_0",
    "delete_logs_after_none",
    "append_to_log",
];
/// The suite's state-machine-only tests, run through [`LogFirst`].
const SM_ONLY: &[&str] = &[
    "last_applied_state",
    "snapshot_meta",
    "snapshot_meta_optional",
    "apply_single",
    "apply_multiple",
];
/// The suite's tests that need a state machine apart from the log.
const SEPARATE_STATE: &[&str] = &[
    "last_membership_in_log",
    "last_membership_in_log_multi_step",
    "get_membership_from_log_and_empty_sm",
    "get_membership_from_empty_log_and_sm",
    "get_membership_from_log_le_sm_last_applied",
    "get_membership_from_log_gt_sm_last_applied_1",
    "get_membership_from_log_gt_sm_last_applied_2",
    "get_initial_state_membership_from_empty_log_and_sm",
    "get_initial_state_membership_from_sm_inlog_is_smaller",
    "get_initial_state_membership_from_log_insm_is_smaller",
    "get_initial_state_with_state",
    "get_initial_state_last_log_gt_sm",
    "get_initial_state_last_log_lt_sm",
    "get_initial_state_inverted_log_order",
    "get_initial_state_conflict_at_same_index",
    "get_initial_state_re_apply_committed",
    "last_id_in_log",
];

/// The state machine seen through a test adapter: `apply` first appends the
/// entries beyond the log's end to the log (blank entries of the same leader fill
/// skipped indexes), then hands them to the store's own `apply`.
struct LogFirst(ListRaftStore);

impl RaftStateMachine<TypeConfig> for LogFirst {
    type SnapshotData = std::fs::File;
    type SnapshotBuilder = ListRaftStore;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (
            Option<openraft_list::LogId>,
            openraft_list::StoredMembership,
        ),
        io::Error,
    > {
        self.0.applied_state().await
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: futures_util::Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>>
            + Unpin
            + OptionalSend,
    {
        let mut items = Vec::new();
        while let Some(item) = entries.next().await {
            items.push(item?);
        }
        for (entry, _) in &items {
            let state = self.0.get_log_state().await?;
            let next = state.last_log_id.map_or(0, |l| l.index + 1);
            if entry.log_id.index < next {
                continue;
            }
            let mut append = Vec::new();
            for i in next..entry.log_id.index {
                append.push(Entry {
                    log_id: openraft_list::LogId::new(entry.log_id.leader_id, i),
                    payload: EntryPayload::Blank,
                });
            }
            append.push(entry.clone());
            self.0
                .blocking_append(append)
                .await
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        self.0
            .apply(futures_util::stream::iter(items.into_iter().map(Ok)))
            .await
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.0.get_snapshot_builder().await
    }

    async fn install_snapshot(
        &mut self,
        meta: &openraft_list::SnapshotMeta,
        snapshot: std::fs::File,
    ) -> Result<(), io::Error> {
        self.0.install_snapshot(meta, snapshot).await
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<openraft_list::ListSnapshot>, io::Error> {
        self.0.get_current_snapshot().await
    }
}

struct LogFirstBuilder(Kind);

impl StoreBuilder<TypeConfig, ListRaftStore, LogFirst, TempDir> for LogFirstBuilder {
    async fn build(&self) -> Result<(TempDir, ListRaftStore, LogFirst), StorageError<TypeConfig>> {
        let (dir, ls, sm) = Builder(self.0).build().await?;
        Ok((dir, ls, LogFirst(sm)))
    }
}

/// Runs one suite test by name on a fresh store; its error, if any.
async fn run_one(kind: Kind, name: &str) -> Result<(), String> {
    macro_rules! pick {
        ($suite:ty, $b:expr; $($n:ident),* $(,)?) => {{
            let (_g, ls, sm) = $b.build().await.map_err(|e| e.to_string())?;
            match name {
                $(stringify!($n) => {
                    let fut = <$suite>::$n(ls, sm);
                    match tokio::spawn(fut).await {
                        Ok(r) => r.map_err(|e| e.to_string()),
                        Err(e) => Err(format!("panicked: {e}")),
                    }
                })*
                _ => Err(format!("no suite test {name}")),
            }
        }};
    }
    if name == "transfer_snapshot" {
        return SL::transfer_snapshot(&LogFirstBuilder(kind))
            .await
            .map_err(|e| e.to_string());
    }
    if SM_ONLY.contains(&name) {
        return pick!(SL, LogFirstBuilder(kind); last_applied_state, snapshot_meta, snapshot_meta_optional, apply_single, apply_multiple);
    }
    pick!(S, Builder(kind); last_membership_in_log_initial, get_membership_initial, get_initial_state_without_init, get_initial_state_log_ids, save_vote, get_log_entries, limited_get_log_entries, leader_bounded_stream, entries_stream, try_get_log_entry, log_reader_reads_new_entries, initial_logs, get_log_state, get_log_id, purge_logs_upto_0, purge_logs_upto_5, purge_logs_upto_20, delete_logs_after_11, delete_logs_after_5, delete_logs_after_0, delete_logs_after_none, append_to_log, last_membership_in_log, last_membership_in_log_multi_step, get_membership_from_log_and_empty_sm, get_membership_from_empty_log_and_sm, get_membership_from_log_le_sm_last_applied, get_membership_from_log_gt_sm_last_applied_1, get_membership_from_log_gt_sm_last_applied_2, get_initial_state_membership_from_empty_log_and_sm, get_initial_state_membership_from_sm_inlog_is_smaller, get_initial_state_membership_from_log_insm_is_smaller, get_initial_state_with_state, get_initial_state_last_log_gt_sm, get_initial_state_last_log_lt_sm, get_initial_state_inverted_log_order, get_initial_state_conflict_at_same_index, get_initial_state_re_apply_committed, last_id_in_log)
}

async fn run(kind: Kind) {
    let mut failed = Vec::new();
    for name in DIRECT
        .iter()
        .chain(SM_ONLY)
        .chain(["transfer_snapshot"].iter())
    {
        if let Err(e) = run_one(kind, name).await {
            failed.push(format!("{name}: {e}"));
        }
    }
    for name in SEPARATE_STATE {
        match run_one(kind, name).await {
            Ok(()) => failed.push(format!("{name}: passes, so it belongs in DIRECT")),
            Err(e)
                if e.contains("the log holds") || e.contains("does not follow the last index") => {}
            Err(e) => failed.push(format!("{name}: fails for another reason: {e}")),
        }
    }
    assert!(failed.is_empty(), "{kind:?}:\n{}", failed.join("\n"));
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
