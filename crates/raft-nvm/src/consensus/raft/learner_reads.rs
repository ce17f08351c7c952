//! Reads served by a learner: the learner asks its leader for a read
//! index ([`MessageBody::ReadIndex`]); the leader treats it as one of its own
//! read-index requests (a quorum heartbeat round confirms its leadership after
//! the request) and answers with its commit index ([`MessageBody::ReadIndexResp`]);
//! the learner serves the read once it has applied that far. A learner's reads
//! thus take load off the leader's store without weakening linearizability.
//!
//! A read the learner asked for is dropped (its client told to retry) when the
//! learner's leader changes, when the leader answers that it lost its leadership,
//! or when no answer came within an election timeout (a lost message).

use super::core::RaftCore;
use super::error::RaftError;
use super::message::MessageBody;
use super::read_index::{ReadState, REMOTE_CTX_BASE};
use super::role::Role;

impl RaftCore {
    /// A follower asks its leader for a read index for `ctx`; the answer arrives as
    /// a [`ReadState`] (or a dropped read) in a later [`super::Ready`], like a
    /// leader's own. [`RaftError::NotLeader`] when it knows no leader.
    pub(crate) fn read_index_via_leader(&mut self, ctx: u64) -> Result<(), RaftError> {
        let (Some(leader), Some(asked)) = (self.leader, self.state.asked_reads_mut()) else {
            return Err(RaftError::NotLeader {
                leader: self.leader,
            });
        };
        if asked.contains_key(&ctx) {
            return Err(RaftError::DuplicateRead(ctx));
        }
        asked.insert(ctx, self.ticks);
        self.send(leader, MessageBody::ReadIndex { ctx });
        Ok(())
    }

    /// The leader takes a learner's read-index request.
    pub(crate) fn handle_read_index(&mut self, from: u16, ctx: u64) {
        if self.role() != Role::Leader {
            self.send(from, MessageBody::ReadIndexResp { ctx, index: None });
            return;
        }
        let local = REMOTE_CTX_BASE + self.next_remote_ctx;
        self.next_remote_ctx += 1;
        self.remote_reads.insert(local, (from, ctx));
        if self.log.term(self.log.committed) == Some(self.term) {
            self.start_read(local);
        } else if let Some(leader) = self.state.leader_mut() {
            leader.reads_waiting.push(local);
        }
    }

    /// A follower gets its leader's answer.
    pub(crate) fn handle_read_index_resp(&mut self, from: u16, ctx: u64, index: Option<u64>) {
        let asked = self.state.asked_reads_mut();
        if self.leader != Some(from) || asked.and_then(|a| a.remove(&ctx)).is_none() {
            return;
        }
        match index {
            Some(index) => self.read_states.push(ReadState { ctx, index }),
            None => self.dropped_reads.push(ctx),
        }
    }

    /// Leader: the confirmed and dropped reads taken for learners go back to them
    /// as messages instead of out in the Ready.
    pub(crate) fn route_remote_reads(&mut self) {
        if self.remote_reads.is_empty() {
            return;
        }
        let states = std::mem::take(&mut self.read_states);
        for rs in states {
            match self.remote_reads.remove(&rs.ctx) {
                Some((to, ctx)) => self.send(
                    to,
                    MessageBody::ReadIndexResp {
                        ctx,
                        index: Some(rs.index),
                    },
                ),
                None => self.read_states.push(rs),
            }
        }
        let dropped = std::mem::take(&mut self.dropped_reads);
        for local in dropped {
            match self.remote_reads.remove(&local) {
                Some((to, ctx)) => self.send(to, MessageBody::ReadIndexResp { ctx, index: None }),
                None => self.dropped_reads.push(local),
            }
        }
    }

    /// A follower whose leader changed: the reads it asked the old one for are
    /// dropped.
    pub(crate) fn drop_asked_reads(&mut self) {
        if let Some(asked) = self.state.asked_reads_mut() {
            self.dropped_reads.extend(std::mem::take(asked).into_keys());
        }
    }

    /// Drops the reads asked an election timeout ago or more (their answer was
    /// lost).
    pub(crate) fn expire_asked_reads(&mut self) {
        let timeout = u64::from(self.cfg.election_ticks_min);
        let now = self.ticks;
        let Some(asked) = self.state.asked_reads_mut() else {
            return;
        };
        if asked.is_empty() {
            return;
        }
        let expired: Vec<u64> = asked
            .iter()
            .filter(|(_, &at)| now.saturating_sub(at) >= timeout)
            .map(|(&ctx, _)| ctx)
            .collect();
        for ctx in expired {
            asked.remove(&ctx);
            self.dropped_reads.push(ctx);
        }
    }
}
