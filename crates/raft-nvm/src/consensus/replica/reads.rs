//! Reads: one read-index round serves every read taken since the last, a
//! confirmed read waits for the applied index to reach its own, and is answered
//! by an MVCC read at the applied index; or from the leader lease, without a
//! round, where the lease holds.

use crate::consensus::machine::StateView;
use crate::consensus::raft::Role;
use crate::consensus::service::KvReply;
use crate::storage::error::StoreError;

use super::{Output, PendingRead, ReadOf, Replica, ReplicaError};

impl Replica {
    /// Takes a read: answered at once when the leader's lease holds and the store
    /// has applied the commit index (see [`crate::consensus::raft::Config::lease_reads`]),
    /// otherwise queued for the next read-index round.
    pub(super) fn read(&mut self, token: u64, what: ReadOf) -> Option<KvReply> {
        if let Some(index) = self.core.lease_read_index() {
            let applied = self.store.applied();
            if applied >= index {
                self.lease_reads += 1;
                return Some(match self.answer_read(&what, applied) {
                    Ok(reply) => reply,
                    Err(e) => {
                        tracing::error!(id = self.core.id(), "lease read failed: {e}");
                        KvReply::Unavailable(format!("the store failed: {e}"))
                    }
                });
            }
        }
        self.unsent_reads.push(PendingRead { token, what });
        None
    }

    /// The answer to read `what` at the applied index `applied`.
    pub(super) fn answer_read(&self, what: &ReadOf, applied: u64) -> Result<KvReply, StoreError> {
        Ok(match what {
            ReadOf::Key(key) => KvReply::Value(self.store.get(key, applied)?),
            ReadOf::Query(query) => match &self.machine {
                Some(machine) => KvReply::Machine(
                    machine.query(&StateView::applied(&*self.store, applied), query)?,
                ),
                // `request` takes no query without a machine.
                None => KvReply::Rejected("this node runs no state machine".into()),
            },
        })
    }

    /// Hands the reads that arrived since the last round to the core as one round.
    pub(super) fn start_reads(&mut self, out: &mut Output) {
        if self.unsent_reads.is_empty() {
            return;
        }
        let reads = std::mem::take(&mut self.unsent_reads);
        if let Some(index) = self.core.lease_read_index() {
            // The leader's lease holds: no read-index round (see `Config::lease_reads`).
            self.lease_reads += reads.len() as u64;
            self.confirmed.extend(reads.into_iter().map(|r| (index, r)));
            return;
        }
        let ctx = self.next_ctx;
        self.next_ctx += 1;
        match self.core.read_index(ctx) {
            Ok(()) => {
                self.reads.insert(ctx, reads);
            }
            Err(_) => {
                let leader = self.leader_addr();
                out.replies.extend(reads.into_iter().map(|r| {
                    (
                        r.token,
                        KvReply::NotLeader {
                            leader: leader.clone(),
                        },
                    )
                }));
            }
        }
    }

    /// Serves confirmed reads whose index the store has applied.
    pub(super) fn serve_reads(&mut self, out: &mut Output) -> Result<(), ReplicaError> {
        if self.confirmed.is_empty() {
            return Ok(());
        }
        let applied = self.store.applied();
        let mut waiting = Vec::new();
        for (index, r) in std::mem::take(&mut self.confirmed) {
            if index <= applied {
                let reply = self.answer_read(&r.what, applied)?;
                out.replies.push((r.token, reply));
            } else {
                waiting.push((index, r));
            }
        }
        self.confirmed = waiting;
        Ok(())
    }

    /// Whether this node takes reads without leading: it is a learner that knows
    /// its leader (it asks it for the read index, see
    /// [`RaftCore::read_index`]).
    pub(super) fn serves_reads_as_learner(&self) -> bool {
        let core = &self.core;
        core.role() == Role::Follower
            && core.leader().is_some()
            && core.membership().is_learner(core.id())
    }

    /// Where reads may be served from the leader lease without this replica:
    /// `(applied index, tick count at which the lease ends)`, when the lease
    /// holds and the store has applied its index (see [`RaftCore::lease`](crate::consensus::raft::RaftCore::lease)).
    pub fn lease_read_point(&self) -> Option<(u64, u64)> {
        let lease = self.core.lease()?;
        let applied = self.store.applied();
        (applied >= lease.index).then_some((applied, lease.until_tick))
    }

    /// Reads this replica served from its leader lease (see
    /// [`crate::consensus::raft::Config::lease_reads`]) rather than a read-index round.
    pub fn lease_reads(&self) -> u64 {
        self.lease_reads
    }
}
