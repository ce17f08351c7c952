//! The replica's drive loop: the inputs its driver feeds it (ticks, peers'
//! messages, a finished sync) and [`Replica::process`], which carries out what
//! the core has to do in [`Ready`](crate::consensus::raft::Ready)'s order: the
//! hard state and the log first, then the messages that depend on them, commits
//! applied and answered, reads served, a full store handled, compaction asked for.

use crate::consensus::raft::{Command, Message, MessageBody, Role};
use crate::consensus::service::KvReply;
use crate::storage::error::StoreError;

use super::{Output, Replica, ReplicaError, SyncBy};

impl Replica {
    /// Whether the driver runs the store's syncs ([`ReplicaConfig::sync_by`]).
    pub(super) fn driver_syncs(&self) -> bool {
        match self.sync_by {
            SyncBy::Replica => false,
            SyncBy::Driver => true,
            SyncBy::DriverWhenIo => self.store.sync_waits_for_io(),
        }
    }

    /// The sync [`Output::sync`] asked for returned: the core learns what is
    /// durable now. Call [`Replica::process`] next (acknowledgements and commits
    /// may follow).
    pub fn synced(&mut self) {
        self.core.on_persisted(self.store.durable_index());
    }

    /// Advances logical time by one tick.
    pub fn tick(&mut self) {
        self.core.tick();
    }

    /// The transport saw `peer` dial this node: it just (re)started (see
    /// [`RaftCore::peer_up`](crate::consensus::raft::RaftCore::peer_up)).
    pub fn peer_up(&mut self, peer: u16) {
        self.core.peer_up(peer);
    }

    /// Handles a message from a peer. One that is misrouted, invalid (see
    /// [`Message::validate`]), from a node outside the configuration, or carrying
    /// an entry this node's store cannot hold, is logged and dropped whole.
    pub fn step(&mut self, m: Message) {
        if let Some(reason) = self.unstorable(&m) {
            tracing::warn!(
                id = self.core.id(),
                from = m.from,
                kind = m.body.kind(),
                "dropped message: {reason}"
            );
            return;
        }
        if let Err(e) = self.core.step(m) {
            tracing::warn!(id = self.core.id(), "dropped message: {e}");
        }
    }

    /// Why `m` carries an entry or snapshot item this node's store cannot hold
    /// (RESP refuses such a key or value from a client; a peer's must not stop
    /// the replica at the append, which would fail with a store error).
    pub(super) fn unstorable(&self, m: &Message) -> Option<String> {
        let fits = |key: usize, value: usize| self.store.fits(key, value);
        match &m.body {
            MessageBody::AppendEntries { entries, .. } => entries.iter().find_map(|e| {
                let (key, value) = match &e.cmd {
                    Command::Put { key, value } => (key.len(), value.len()),
                    Command::Delete { key } => (key.len(), 0),
                    Command::Cas { key, new, .. } => (key.len(), new.len()),
                    Command::Config { data } => (crate::consensus::raft::MEMBERSHIP_KEY.len(), data.len()),
                    Command::Noop | Command::Machine { .. } => return None,
                };
                (!fits(key, value)).then(|| {
                    format!(
                        "entry {} (a key of {key} bytes, a value of {value} bytes) exceeds the {} engine's entry limit",
                        e.index,
                        self.store.engine()
                    )
                })
            }),
            MessageBody::SnapshotChunk { items, .. } => items.iter().find_map(|i| {
                (!fits(i.key.len(), i.value.len())).then(|| {
                    format!(
                        "a snapshot item (a key of {} bytes, a value of {} bytes) exceeds the {} engine's entry limit",
                        i.key.len(),
                        i.value.len(),
                        self.store.engine()
                    )
                })
            }),
            _ => None,
        }
    }

    /// Carries out everything the core has to do (see [`crate::consensus::raft::Ready`] for the
    /// order) and appends the results to `out`. Call it after every batch of
    /// inputs. An error means the store failed: stop the replica.
    pub fn process(&mut self, out: &mut Output) -> Result<(), ReplicaError> {
        self.start_reads(out);
        // Reads left over from the last call first: they were asked first.
        let mut read_budget = self.log_read_budget;
        self.serve_log_reads(&mut read_budget, out)?;
        // A bounded loop: one Ready may enable another (a commit, a snapshot ack).
        for _ in 0..64 {
            if !self.core.has_ready() {
                break;
            }
            let mut rd = self.core.ready();
            if let Some(hs) = rd.hard_state {
                self.store.set_hard_state(hs)?;
            }
            // `(kept, retruncate, bytes needed)` once the store is found full.
            let mut full = None;
            if let Some(after) = rd.truncate_after {
                match self.store.truncate_after(after, self.core.term()) {
                    Ok(()) => self.fail_writes_above(after, out),
                    Err(StoreError::Full { needed }) => full = Some((after, true, needed)),
                    Err(e) => return Err(e.into()),
                }
            }
            if full.is_none() {
                full = self.append_entries(&rd.entries)?;
            }
            if let Some((kept, retruncate, needed)) = full {
                self.store_full(kept, retruncate, needed, &mut rd.messages, out);
            }
            if rd.must_sync {
                if self.driver_syncs() {
                    out.sync = true;
                } else {
                    self.store.sync()?;
                }
            }
            out.messages.extend(rd.messages);
            if let Some(to) = rd.apply_to {
                self.store.set_applied(to);
                self.answer_writes(to, out);
            }
            for rs in rd.read_states {
                for r in self.reads.remove(&rs.ctx).unwrap_or_default() {
                    self.confirmed.push((rs.index, r));
                }
            }
            for ctx in rd.dropped_reads {
                for r in self.reads.remove(&ctx).unwrap_or_default() {
                    out.replies.push((
                        r.token,
                        KvReply::Unavailable(
                            "leadership lost before the read was confirmed".into(),
                        ),
                    ));
                }
            }
            self.log_reads.extend(rd.log_reads);
            self.serve_log_reads(&mut read_budget, out)?;
            out.snapshots.extend(rd.snapshots_to_send);
            for chunk in rd.snapshot_chunks {
                self.take_chunk(chunk)?;
            }
            self.core.on_persisted(self.store.durable_index());
        }
        // Everything proposed before this call was handed out and appended (or
        // refused) above.
        self.unappended = 0;
        self.retry_promotions(out);
        self.serve_reads(out)?;
        if self.core.role() != Role::Leader {
            self.fail_all(out);
        } else {
            // A leader installs nothing: drop what it was receiving as a follower.
            self.incoming.abandon();
        }
        if self.joining && !self.core.is_catching_up() {
            // The core caught up on durable entries only: the join is over.
            self.provider.caught_up()?;
            self.joining = false;
        }
        if self.compactor.due(&*self.store).is_some() {
            out.compact = true;
        }
        Ok(())
    }

    /// The store had no room for what a Ready handed out above `kept`: the core
    /// forgets it, `messages` (the same Ready's, not sent yet) stop carrying it,
    /// and the writes it held are refused. See [`RaftCore::on_store_full`].
    pub(super) fn store_full(
        &mut self,
        kept: u64,
        retruncate: bool,
        needed: u64,
        messages: &mut Vec<Message>,
        out: &mut Output,
    ) {
        tracing::warn!(
            id = self.core.id(),
            role = ?self.core.role(),
            kept,
            needed,
            retruncate,
            "store full: entries not appended"
        );
        self.core.on_store_full(kept, retruncate);
        // A leader's entries above `kept` were first handed out in this Ready: with
        // them out of its messages, no one ever sees them.
        crate::consensus::raft::unsent_above(messages, kept);
        let refused = self.writes.split_off(&(kept + 1));
        self.compactor.append_failed();
        self.compactor.refused(refused.len() as u64);
        for (_, w) in refused {
            out.replies.push((
                w.token,
                KvReply::OutOfMemory(format!(
                    "store full: no room for a {needed}-byte record; the write was not applied"
                )),
            ));
        }
    }

    /// Whether [`Replica::process`] left work for its next call (log reads beyond
    /// its budget): a driver should call it again soon even if no input arrives.
    pub fn has_deferred_work(&self) -> bool {
        !self.log_reads.is_empty()
    }

    /// No longer leader: the outcome of every pending write is unknown, and reads
    /// not yet confirmed must go to the new leader (a learner keeps its own: the
    /// core drops them if its leader changes).
    pub(super) fn fail_all(&mut self, out: &mut Output) {
        for (_, w) in std::mem::take(&mut self.writes) {
            out.replies.push((
                w.token,
                KvReply::Unavailable(
                    "leadership lost; the write may or may not take effect".into(),
                ),
            ));
        }
        if self.serves_reads_as_learner() {
            return;
        }
        let leader = self.leader_addr();
        let reads = std::mem::take(&mut self.unsent_reads)
            .into_iter()
            .chain(std::mem::take(&mut self.reads).into_values().flatten());
        for r in reads {
            out.replies.push((
                r.token,
                KvReply::NotLeader {
                    leader: leader.clone(),
                },
            ));
        }
    }
}
