//! openraft's state machine over the raft-nvm store: the log *is* the state.
//!
//! Applying an entry writes nothing: the entry is already in the store (appended
//! by the log side) and applying it raises the store's applied index, at which
//! reads see the key-value state (the thesis: the applied state and the log are
//! one structure). The applied index lives in DRAM: after a restart it is the
//! store's compaction base, and openraft applies the entries above it again (the
//! log still holds them: compaction never goes past the purged id), which here is
//! raising the index again.

use std::io;

use futures_util::{Stream, StreamExt};
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use openraft::{EntryPayload, OptionalSend};

use crate::codec;
use crate::log::io_err;
use crate::store::ListRaftStore;
use crate::types::{LogId, Request, Response, SnapshotMeta, StoredMembership, TypeConfig};

/// The snapshot type: `Snapshot` with this crate's snapshot file.
pub type ListSnapshot = Snapshot<
    openraft::impls::leader_id_adv::LeaderId<u64, u64>,
    u64,
    openraft::BasicNode,
    std::fs::File,
>;

impl RaftStateMachine<TypeConfig> for ListRaftStore {
    type SnapshotData = std::fs::File;
    type SnapshotBuilder = ListRaftStore;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let store = self.store();
        let at = store.applied();
        let membership = codec::membership_at(&*store, at)?;
        Ok((codec::log_id_at(&*store, at), membership))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        let mut responses = Vec::new();
        let mut last = None;
        let mut result = Ok(());
        while let Some(item) = entries.next().await {
            let (entry, responder) = match item {
                Ok(x) => x,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            let guard = self.read_store();
            let store = &**guard;
            let index = entry.log_id.index + 1;
            let term = codec::pack_leader(&entry.log_id.leader_id)?;
            // The entry must be the one the log holds: applying writes nothing, it
            // makes what the log holds visible.
            if store.term_at(index) != Some(term) {
                result = Err(io::Error::other(format!(
                    "applying {}: the log holds {:?} at that index (the state machine is the log; it applies only entries the log holds)",
                    entry.log_id,
                    store.term_at(index).map(|t| codec::log_id(index, t))
                )));
                break;
            }
            let previous = match &entry.payload {
                EntryPayload::Normal(Request::Set { key, .. } | Request::Delete { key }) => store
                    .get(&codec::user_key(key), index - 1)
                    .map_err(io_err)?,
                _ => None,
            };
            last = Some(index);
            if let Some(r) = responder {
                responses.push((r, Response { previous }));
            }
        }
        // Visible first, answered after: a client that got its answer reads its write.
        if let Some(index) = last {
            self.store().set_applied(index);
        }
        for (r, resp) in responses {
            r.send(resp);
        }
        result
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: std::fs::File,
    ) -> Result<(), io::Error> {
        self.install_snapshot_file(meta, snapshot)
            .map_err(Into::into)
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<ListSnapshot>, io::Error> {
        Ok(self.current_snapshot()?)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for ListRaftStore {
    type SnapshotData = std::fs::File;

    async fn build_snapshot(&mut self) -> Result<ListSnapshot, io::Error> {
        Ok(self.build_snapshot_file()?)
    }
}
