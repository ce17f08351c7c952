//! A store that keeps everything in DRAM, openraft's memstore pattern: the log a
//! `BTreeMap` of entries, the vote a field, the state machine an application
//! state `S` in memory. Nothing survives the process; `openraft_bench` runs it as
//! the upper bound of what any durable store under openraft can reach.
//!
//! The application's state is a type of the caller's ([`MemState`]): it applies
//! entries and is what a snapshot serialises.

#![allow(dead_code)] // each binary uses a different part

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::StreamExt;
use openraft::entry::RaftEntry;
use openraft::storage::{
    EntryResponder, IOFlushed, RaftLogReader, RaftLogStorage, RaftSnapshotBuilder, RaftStateMachine,
};
use openraft::type_config::alias::{
    LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf, VoteOf,
};
use openraft::{LogState, OptionalSend, RaftTypeConfig, StoredMembership};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The key-value state of openraft-list's [`openraft_list::TypeConfig`] in DRAM:
/// what `openraft_bench`'s `mem` engine applies, and what its conformance test
/// (`tests/openraft_memstore.rs`) checks.
#[derive(Default, Serialize, serde::Deserialize)]
pub struct KvState(BTreeMap<Vec<u8>, Vec<u8>>);

impl MemState<openraft_list::TypeConfig> for KvState {
    fn apply(&mut self, entry: &openraft_list::Entry) -> openraft_list::Response {
        let previous = match &entry.payload {
            openraft::EntryPayload::Normal(openraft_list::Request::Set { key, value }) => {
                self.0.insert(key.clone(), value.clone())
            }
            openraft::EntryPayload::Normal(openraft_list::Request::Delete { key }) => {
                self.0.remove(key)
            }
            _ => None,
        };
        openraft_list::Response { previous }
    }
}

/// The application's state in a [`MemStateMachine`].
pub trait MemState<C: RaftTypeConfig>:
    Default + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// Applies `entry` (any kind: blank and membership entries too) and returns
    /// the response to its client.
    fn apply(&mut self, entry: &C::Entry) -> C::R;
}

fn locked<T>(m: &Mutex<T>) -> io::Result<MutexGuard<'_, T>> {
    m.lock()
        .map_err(|_| io::Error::other("a thread panicked holding the store's lock"))
}

struct LogInner<C: RaftTypeConfig> {
    last_purged: Option<LogIdOf<C>>,
    log: BTreeMap<u64, C::Entry>,
    committed: Option<LogIdOf<C>>,
    vote: Option<VoteOf<C>>,
}

/// The log: entries, vote and committed id in memory.
pub struct MemLog<C: RaftTypeConfig> {
    inner: Arc<Mutex<LogInner<C>>>,
}

impl<C: RaftTypeConfig> Clone for MemLog<C> {
    fn clone(&self) -> Self {
        MemLog {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C: RaftTypeConfig> Default for MemLog<C> {
    fn default() -> Self {
        MemLog {
            inner: Arc::new(Mutex::new(LogInner {
                last_purged: None,
                log: BTreeMap::new(),
                committed: None,
                vote: None,
            })),
        }
    }
}

impl<C> RaftLogReader<C> for MemLog<C>
where
    C: RaftTypeConfig,
    C::Entry: Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, io::Error> {
        let inner = locked(&self.inner)?;
        Ok(inner.log.range(range).map(|(_, e)| e.clone()).collect())
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<C>>, io::Error> {
        Ok(locked(&self.inner)?.vote.clone())
    }
}

impl<C> RaftLogStorage<C> for MemLog<C>
where
    C: RaftTypeConfig,
    C::Entry: Clone,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, io::Error> {
        let inner = locked(&self.inner)?;
        let last = inner.log.values().next_back().map(|e| e.log_id());
        Ok(LogState {
            last_purged_log_id: inner.last_purged.clone(),
            last_log_id: last.or_else(|| inner.last_purged.clone()),
        })
    }

    async fn get_log_reader(&mut self) -> Self {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<C>) -> Result<(), io::Error> {
        locked(&self.inner)?.vote = Some(vote.clone());
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        locked(&self.inner)?.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<C>>, io::Error> {
        Ok(locked(&self.inner)?.committed.clone())
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<C>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        {
            let mut inner = locked(&self.inner)?;
            for e in entries {
                inner.log.insert(e.index(), e);
            }
        }
        // "Flushed" at once: there is nothing to flush.
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |l| l.index() + 1);
        locked(&self.inner)?.log.split_off(&from);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogIdOf<C>) -> Result<(), io::Error> {
        let mut inner = locked(&self.inner)?;
        let keep = inner.log.split_off(&(log_id.index() + 1));
        inner.log = keep;
        inner.last_purged = Some(log_id);
        Ok(())
    }
}

struct SmInner<C: RaftTypeConfig, S> {
    last_applied: Option<LogIdOf<C>>,
    membership: StoredMembershipOf<C>,
    state: S,
    snapshot: Option<(SnapshotMetaOf<C>, Vec<u8>)>,
}

/// The state machine: `S` in memory, snapshots as postcard bytes of `S`.
pub struct MemStateMachine<C: RaftTypeConfig, S> {
    inner: Arc<Mutex<SmInner<C, S>>>,
}

impl<C: RaftTypeConfig, S> Clone for MemStateMachine<C, S> {
    fn clone(&self) -> Self {
        MemStateMachine {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C: RaftTypeConfig, S: Default> Default for MemStateMachine<C, S> {
    fn default() -> Self {
        MemStateMachine {
            inner: Arc::new(Mutex::new(SmInner {
                last_applied: None,
                membership: StoredMembership::default(),
                state: S::default(),
                snapshot: None,
            })),
        }
    }
}

impl<C: RaftTypeConfig, S> MemStateMachine<C, S> {
    /// Runs `f` on the application state (a read; linearise it first).
    pub fn read<T>(&self, f: impl FnOnce(&S) -> T) -> io::Result<T> {
        Ok(f(&locked(&self.inner)?.state))
    }
}

impl<C: RaftTypeConfig, S: MemState<C>> RaftSnapshotBuilder<C> for MemStateMachine<C, S> {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<C, Vec<u8>>, io::Error> {
        let mut inner = locked(&self.inner)?;
        let bytes = postcard::to_stdvec(&inner.state).map_err(io::Error::other)?;
        let meta = SnapshotMetaOf::<C> {
            last_log_id: inner.last_applied.clone(),
            last_membership: inner.membership.clone(),
        };
        inner.snapshot = Some((meta.clone(), bytes.clone()));
        Ok(openraft::Snapshot {
            meta,
            snapshot: bytes,
        })
    }
}

impl<C: RaftTypeConfig, S: MemState<C>> RaftStateMachine<C> for MemStateMachine<C, S> {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<C>>, StoredMembershipOf<C>), io::Error> {
        let inner = locked(&self.inner)?;
        Ok((inner.last_applied.clone(), inner.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: futures_util::Stream<Item = Result<EntryResponder<C>, io::Error>>
            + Unpin
            + OptionalSend,
    {
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let response = {
                let mut inner = locked(&self.inner)?;
                inner.last_applied = Some(entry.log_id());
                if let Some(m) = entry.get_membership() {
                    inner.membership = StoredMembership::new(Some(entry.log_id()), m);
                }
                inner.state.apply(&entry)
            };
            if let Some(r) = responder {
                r.send(response);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<C>,
        snapshot: Vec<u8>,
    ) -> Result<(), io::Error> {
        let state: S = postcard::from_bytes(&snapshot)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut inner = locked(&self.inner)?;
        inner.state = state;
        inner.last_applied = meta.last_log_id.clone();
        inner.membership = meta.last_membership.clone();
        inner.snapshot = Some((meta.clone(), snapshot));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<SnapshotOf<C, Vec<u8>>>, io::Error> {
        let inner = locked(&self.inner)?;
        Ok(inner
            .snapshot
            .as_ref()
            .map(|(meta, bytes)| openraft::Snapshot {
                meta: meta.clone(),
                snapshot: bytes.clone(),
            }))
    }
}
