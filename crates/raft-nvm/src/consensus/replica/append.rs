//! Appending to the store, which is the log: a leader's proposals and a
//! follower's received entries, runs of `SET`s in one batch, and conditional
//! writes (`CAS`, `DEL`, a state machine's commands) decided against the store
//! as it stands when their entry is appended, so every replica decides the same.

use crate::consensus::machine::{BatchState, StateView, Write};
use crate::consensus::raft::{Command, Entry};
use crate::consensus::service::KvReply;
use crate::storage::error::StoreError;
use crate::storage::store::Op;

use super::{entry_bytes, Replica, ReplicaError};

impl Replica {
    /// Appends `entries` to the store: runs of entries whose decision reads no
    /// state (`SET`s, configurations, no-ops) in one [`Store::append_batch`](crate::storage::store::Store::append_batch) each,
    /// the others one at a time ([`Replica::append`]). Returns `(kept, false, bytes
    /// needed)` if the store had no room for them all: it holds them up to `kept`.
    pub(super) fn append_entries(
        &mut self,
        entries: &[Entry],
    ) -> Result<Option<(u64, bool, u64)>, ReplicaError> {
        let mut room = self.append_room();
        let mut run: Vec<(u64, u64, Op<'_>)> = Vec::new();
        // Consecutive machine commands, applied as one batch. At most one of
        // `run` and `machine_run` holds entries: each is appended before an entry
        // of another kind, which may read what it writes.
        let mut machine_run: Vec<&Entry> = Vec::new();
        for e in entries {
            let bytes = self.charge(entry_bytes(e));
            if let Some(left) = room.as_mut() {
                if *left < bytes {
                    if let Some(full) = self.append_run(&mut run)? {
                        return Ok(Some(full));
                    }
                    if let Some(full) = self.append_machine_run(&mut machine_run)? {
                        return Ok(Some(full));
                    }
                    return Ok(Some((self.store.last_index(), false, bytes)));
                }
                *left -= bytes;
            }
            if let Some((op, outcome)) = crate::consensus::machine::decide_blind(&e.cmd) {
                if let Some(full) = self.append_machine_run(&mut machine_run)? {
                    return Ok(Some(full));
                }
                self.decided(e, outcome);
                run.push((e.index, e.term, op));
                continue;
            }
            if let Some(full) = self.append_run(&mut run)? {
                return Ok(Some(full));
            }
            if let Command::Machine { .. } = e.cmd {
                machine_run.push(e);
                continue;
            }
            if let Some(full) = self.append_machine_run(&mut machine_run)? {
                return Ok(Some(full));
            }
            match self.append(e) {
                Ok(()) => {}
                Err(ReplicaError::Store(StoreError::Full { needed })) => {
                    return Ok(Some((self.store.last_index(), false, needed)));
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(full) = self.append_machine_run(&mut machine_run)? {
            return Ok(Some(full));
        }
        self.append_run(&mut run)
    }

    /// Applies the machine commands [`Replica::append_entries`] gathered as one
    /// batch ([`StateMachine::apply_batch`](crate::consensus::machine::StateMachine::apply_batch)),
    /// appends each entry with its write, and empties the run. Returns like
    /// [`Replica::append_entries`] if the store filled up: the entries before the
    /// one that did not fit are appended and decided.
    pub(super) fn append_machine_run(
        &mut self,
        run: &mut Vec<&Entry>,
    ) -> Result<Option<(u64, bool, u64)>, ReplicaError> {
        let entries = std::mem::take(run);
        let Some(first) = entries.first() else {
            return Ok(None);
        };
        let Some(machine) = self.machine.clone() else {
            return Err(ReplicaError::NoMachine { index: first.index });
        };
        let commands: Vec<&[u8]> = entries
            .iter()
            .map(|e| match &e.cmd {
                Command::Machine { data } => data.as_slice(),
                // Only machine commands are gathered.
                _ => &[],
            })
            .collect();
        let store = std::sync::Arc::clone(&self.store);
        let mut state = BatchState::new(&*store, first.index, entries.len(), self.max_entry());
        let mut replies = machine.apply_batch(&mut state, &commands)?.into_iter();
        for (pos, e) in entries.iter().enumerate() {
            let reply = state.reply(pos, replies.next());
            let op = match state.write(pos) {
                Some(Write::Put { key, value }) => Op::Put { key, value },
                // Deleting an absent key changes nothing: no tombstone.
                Some(Write::Delete { key })
                    if store.latest(key)?.is_some_and(|v| v.value.is_some()) =>
                {
                    Op::Delete { key }
                }
                _ => Op::Noop,
            };
            match store.append(e.index, e.term, op) {
                Ok(()) => {}
                Err(StoreError::Full { needed }) => {
                    return Ok(Some((store.last_index(), false, needed)));
                }
                Err(e) => return Err(e.into()),
            }
            self.decided(e, KvReply::Machine(reply));
        }
        Ok(None)
    }

    /// Appends the run [`Replica::append_entries`] gathered, and empties it.
    pub(super) fn append_run(
        &self,
        run: &mut Vec<(u64, u64, Op<'_>)>,
    ) -> Result<Option<(u64, bool, u64)>, ReplicaError> {
        if run.is_empty() {
            return Ok(None);
        }
        let result = self.store.append_batch(run);
        run.clear();
        match result {
            Ok(()) => Ok(None),
            Err(StoreError::Full { needed }) => Ok(Some((self.store.last_index(), false, needed))),
            Err(e) => Err(e.into()),
        }
    }

    /// Records what the write proposed as entry `e` answers (if this replica
    /// proposed it, in that term).
    pub(super) fn decided(&mut self, e: &Entry, outcome: KvReply) {
        if let Some(w) = self.writes.get_mut(&e.index) {
            if w.term == e.term {
                w.outcome = Some(outcome);
            }
        }
    }

    /// Appends entry `e` to the store, deciding a conditional write (`CAS`,
    /// `DEL`) against the entries before it. Machine commands go through
    /// [`Replica::append_machine_run`].
    pub(super) fn append(&mut self, e: &Entry) -> Result<(), ReplicaError> {
        let state = StateView::before(&*self.store, e.index);
        let (op, outcome) = crate::consensus::machine::decide_kv(&state, &e.cmd)?;
        self.store.append(e.index, e.term, op)?;
        self.decided(e, outcome);
        Ok(())
    }
}
