//! Appending to the store, which is the log: a leader's proposals and a
//! follower's received entries, runs of `SET`s in one batch, and conditional
//! writes (`CAS`, `DEL`, a state machine's commands) decided against the store
//! as it stands when their entry is appended, so every replica decides the same.

use crate::consensus::machine::{Applied, MachineReply, StateView, Write};
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
        for e in entries {
            let bytes = self.charge(entry_bytes(e));
            if let Some(left) = room.as_mut() {
                if *left < bytes {
                    if let Some(full) = self.append_run(&mut run)? {
                        return Ok(Some(full));
                    }
                    return Ok(Some((self.store.last_index(), false, bytes)));
                }
                *left -= bytes;
            }
            if let Some((op, outcome)) = crate::consensus::machine::decide_blind(&e.cmd) {
                self.decided(e, outcome);
                run.push((e.index, e.term, op));
                continue;
            }
            if let Some(full) = self.append_run(&mut run)? {
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
        self.append_run(&mut run)
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

    /// Appends entry `e` to the store, deciding conditional writes and state
    /// machine commands against the entries before it.
    pub(super) fn append(&mut self, e: &Entry) -> Result<(), ReplicaError> {
        let state = StateView::before(&*self.store, e.index);
        let applied;
        let (op, outcome) = match &e.cmd {
            Command::Machine { data } => {
                let Some(machine) = &self.machine else {
                    return Err(ReplicaError::NoMachine { index: e.index });
                };
                applied = machine.apply(&state, data)?;
                let (op, reply) = self.machine_op(&state, &applied)?;
                (op, KvReply::Machine(reply))
            }
            kv => crate::consensus::machine::decide_kv(&state, kv)?,
        };
        self.store.append(e.index, e.term, op)?;
        self.decided(e, outcome);
        Ok(())
    }

    /// The store operation of a machine's decision, and the client's reply. A write
    /// over the entry limits ([`Replica::max_entry`], configuration) is not stored
    /// and answers an error: decided the same way on every replica. Deleting an
    /// absent key stores nothing.
    pub(super) fn machine_op<'a>(
        &self,
        state: &StateView<'_>,
        applied: &'a Applied,
    ) -> Result<(Op<'a>, MachineReply), StoreError> {
        let reply = applied.reply.clone();
        let (key, value_len) = match &applied.write {
            None => return Ok((Op::Noop, reply)),
            Some(Write::Put { key, value }) => (key, value.len()),
            Some(Write::Delete { key }) => (key, 0),
        };
        if crate::consensus::raft::is_reserved_key(key) {
            return Ok((
                Op::Noop,
                MachineReply::Error(
                    "the command writes one of the cluster's own keys (\\x00raft-nvm/...); nothing was written"
                        .to_string(),
                ),
            ));
        }
        let max_entry = self.max_entry();
        if key.len() > usize::from(u16::MAX) || key.len() + value_len > max_entry {
            return Ok((
                Op::Noop,
                MachineReply::Error(format!(
                    "the command's write (a {}-byte key, a {value_len}-byte value) exceeds the entry limit ({} bytes of key, {max_entry} of key and value); nothing was written",
                    key.len(),
                    u16::MAX
                )),
            ));
        }
        Ok(match &applied.write {
            Some(Write::Put { key, value }) => (Op::Put { key, value }, reply),
            Some(Write::Delete { key }) if state.get(key)?.is_some() => (Op::Delete { key }, reply),
            _ => (Op::Noop, reply),
        })
    }
}
