//! openraft's log store and log reader over the raft-nvm store.
//!
//! Durability: `append` writes the entries as one batch and then makes them
//! durable with one `sync` (one fence on persistent memory, one `msync` on a file,
//! one `fdatasync` for the WAL) before it fires `IOFlushed`; openraft hands over
//! the entries it has in one call, so one sync covers that group. `save_vote` and
//! `truncate_after` are durable when they return; `purge` hides the prefix at once
//! and compacts it away (see [`crate::store`] for what survives a restart).

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;

use crate::codec;
use crate::error::OpenraftListError;
use crate::store::{lock, ListRaftStore};
use crate::types::{Entry, LogId, TypeConfig, Vote};

impl From<OpenraftListError> for io::Error {
    fn from(e: OpenraftListError) -> io::Error {
        match e {
            OpenraftListError::Store(raft_nvm::StoreError::Io(e)) => e,
            OpenraftListError::File { source, .. } => source,
            e => io::Error::other(e),
        }
    }
}

/// A store error as openraft's `io::Error`.
pub(crate) fn io_err(e: raft_nvm::StoreError) -> io::Error {
    OpenraftListError::from(e).into()
}

impl ListRaftStore {
    /// The last purged log id (openraft's, hidden from reads).
    pub(crate) fn purged(&self) -> Option<LogId> {
        match self.inner.purged.lock() {
            Ok(g) => *g,
            Err(p) => *p.into_inner(),
        }
    }

    pub(crate) fn set_purged_at_least(&self, id: LogId) {
        let mut g = match self.inner.purged.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if g.is_none_or(|p| p < id) {
            *g = Some(id);
        }
    }
}

impl RaftLogReader<TypeConfig> for ListRaftStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let store = self.store();
        // openraft indexes; the store's are one more.
        let first = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        }
        .max(self.purged().map_or(0, |p| p.index + 1));
        let end = match range.end_bound() {
            Bound::Included(&i) => i.saturating_add(1),
            Bound::Excluded(&i) => i,
            Bound::Unbounded => u64::MAX,
        }
        .min(store.last_index());
        let mut out = Vec::with_capacity(end.saturating_sub(first).min(4096) as usize);
        for i in first..end {
            match store.entry(i + 1).map_err(io_err)? {
                Some(e) => out.push(codec::decode_entry(e)?),
                None => {
                    return Err(io::Error::other(format!(
                        "log entry {i} is gone from the store (compacted beyond the purged log id)"
                    )))
                }
            }
        }
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(codec::unpack_vote(self.store().hard_state()))
    }
}

impl RaftLogStorage<TypeConfig> for ListRaftStore {
    type LogReader = ListRaftStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let store = self.store();
        let purged = self.purged();
        let last = codec::log_id_at(&*store, store.last_index());
        // A purge may reach past the last entry (after a snapshot): the log is then
        // empty and ends at the purged id.
        let last = last.max(purged);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let hs = codec::pack_vote(vote)?;
        // Durable on return (the list: one failure-atomic 8-byte store, persisted).
        // Under the read lock: a snapshot installation carries the hard state over.
        self.read_store().set_hard_state(hs).map_err(io_err)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Held while appending: a snapshot installation swaps the store under the
        // write lock, never in the middle of a batch.
        let guard = self.read_store();
        let store = &**guard;
        let entries: Vec<Entry> = entries.into_iter().collect();
        let mut encoded = Vec::with_capacity(entries.len());
        for e in &entries {
            encoded.push((
                codec::pack_leader(&e.log_id.leader_id)?,
                codec::encode_entry(e)?,
            ));
        }
        let batch: Vec<_> = entries
            .iter()
            .zip(&encoded)
            .map(|(e, (term, enc))| (e.log_id.index + 1, *term, codec::store_op(e, enc)))
            .collect();
        store.append_batch(&batch).map_err(io_err)?;
        drop(guard);
        if let Some(queue) = &self.inner.flush_queue {
            // The flusher syncs (after this point: the entries are appended) and
            // only then fires the callback.
            return match lock(queue).send(callback) {
                Ok(()) => Ok(()),
                Err(unsent) => {
                    let e = io::Error::other("the flusher thread is gone");
                    unsent.0.io_completed(Err(io::Error::other(e.to_string())));
                    Err(e)
                }
            };
        }
        // The group is durable only here; IOFlushed must not fire before.
        let synced = self.read_store().sync().map_err(io_err);
        match synced {
            Ok(()) => {
                callback.io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.io_completed(Err(io::Error::new(e.kind(), e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let guard = self.read_store();
        let store = &**guard;
        let after = last_log_id.map_or(0, |l| l.index + 1);
        if after >= store.last_index() {
            return Ok(());
        }
        let term = store.term_at(after).unwrap_or(0);
        store.truncate_after(after, term).map_err(io_err)?;
        // The rollback record is durable before openraft appends the new suffix.
        store.sync().map_err(io_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        self.set_purged_at_least(log_id);
        // The purged id is durable before any record goes: a restart never shows
        // a purged entry again, even if compaction had not reached it.
        self.persist_meta()?;
        let store = self.store();
        // A list compacts when its policy says the copying pays (a pool with a
        // capacity); the WAL, which has none, at every purge.
        let paced = store.usage().capacity.is_some();
        if paced && lock(&self.inner.compactor).due(&*store).is_none() {
            return Ok(());
        }
        // Drops the records up to the purged entry that the applied index allows
        // (compaction never drops an unapplied entry): the rest goes at a later
        // purge. Entries above the purged id keep their records.
        let result = store.compact_to(log_id.index + 1);
        if paced {
            lock(&self.inner.compactor).finished(0, &result, &*store);
        }
        let stats = result.map_err(io_err)?;
        tracing::debug!(
            purged = %log_id,
            freed = stats.freed,
            kept = stats.records_kept,
            "purge compacted the store"
        );
        Ok(())
    }
}
