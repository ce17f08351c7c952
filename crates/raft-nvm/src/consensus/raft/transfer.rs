//! Leadership transfer (Raft thesis §3.10): the leader stops taking proposals,
//! brings the target up to date, and tells it to campaign at once with
//! [`MessageBody::TimeoutNow`]; the target's vote requests carry `transfer`, so
//! voters that still follow the old leader grant them. The transfer is abandoned
//! after an election timeout (the minimum, in ticks) if leadership has not moved,
//! and the leader takes proposals again.

use super::core::RaftCore;
use super::error::RaftError;
use super::message::MessageBody;
use super::role::{Role, Transfer};

impl RaftCore {
    /// A leader hands its leadership to `target`: from now on it refuses
    /// proposals ([`RaftError::Transferring`]), replicates to `target` until its
    /// log durably matches the leader's last index, then sends it
    /// [`MessageBody::TimeoutNow`]. The transfer ends when this node stops leading
    /// (the target won, or someone else did), or after an election timeout
    /// without that (then proposals are taken again). Asking again for the same
    /// target changes nothing; for another target, restarts the transfer.
    ///
    /// # Errors
    ///
    /// [`RaftError::NotLeader`] on a non-leader; [`RaftError::NotAVoter`] when
    /// `target` is not one of the other voters.
    pub fn transfer_leadership(&mut self, target: u16) -> Result<(), RaftError> {
        let Some(leader) = self.state.leader_mut() else {
            return Err(RaftError::NotLeader {
                leader: self.leader,
            });
        };
        if target == self.cfg.id
            || !leader.progress.contains_key(&target)
            || !self.membership.current.is_voter(target)
        {
            return Err(RaftError::NotAVoter(target));
        }
        if leader.transfer.is_some_and(|t| t.target == target) {
            return Ok(());
        }
        tracing::info!(
            id = self.cfg.id,
            term = self.term,
            target,
            "transferring leadership"
        );
        leader.transfer = Some(Transfer {
            target,
            elapsed: 0,
            sent: false,
        });
        leader.flush_hint = true;
        self.maybe_send_timeout_now();
        Ok(())
    }

    /// The target of the leadership transfer in progress, if any.
    pub fn transferring_to(&self) -> Option<u16> {
        self.state.transfer().map(|t| t.target)
    }

    /// Among the followers that answered (an append or a heartbeat) within the last
    /// election timeout, the one whose log matches the leader's furthest (ties: the
    /// lowest id): the natural target of a transfer. `None` on a non-leader, a
    /// single node, or when no follower answered lately (a transfer could not
    /// finish). A leader elected moments ago has heard its followers' answers to
    /// its first appends before any heartbeat round.
    pub fn most_caught_up_follower(&self) -> Option<u16> {
        let recent = self
            .ticks
            .saturating_sub(u64::from(self.cfg.election_ticks_min));
        self.state
            .leader()?
            .progress
            .iter()
            .filter(|(&id, p)| {
                self.membership.current.is_voter(id) && p.heard.is_some_and(|t| t >= recent)
            })
            .max_by_key(|(&id, p)| (p.matched, std::cmp::Reverse(id)))
            .map(|(&id, _)| id)
    }

    /// Sends `TimeoutNow` once the target's durable match reaches the last index.
    pub(crate) fn maybe_send_timeout_now(&mut self) {
        let Some(t) = self.state.transfer() else {
            return;
        };
        if t.sent {
            return;
        }
        let caught_up = self
            .state
            .progress(t.target)
            .is_some_and(|p| p.matched >= self.log.last_index());
        if caught_up {
            tracing::debug!(
                id = self.cfg.id,
                target = t.target,
                "target caught up: TimeoutNow"
            );
            self.send(t.target, MessageBody::TimeoutNow);
            // The target's votes skip the followers' leases: no lease this term.
            if let Some(leader) = self.state.leader_mut() {
                leader.lease_void = true;
                leader.transfer = Some(Transfer { sent: true, ..t });
            }
        }
    }

    /// Counts a leader tick against the transfer; abandons it after an election
    /// timeout.
    pub(crate) fn tick_transfer(&mut self) {
        let Some(leader) = self.state.leader_mut() else {
            return;
        };
        let Some(t) = &mut leader.transfer else {
            return;
        };
        t.elapsed += 1;
        if t.elapsed >= self.cfg.election_ticks_min {
            tracing::info!(
                id = self.cfg.id,
                term = self.term,
                target = t.target,
                "leadership transfer timed out: taking proposals again"
            );
            leader.transfer = None;
        }
    }

    /// A follower told by its leader to campaign: it does so at once, unless it
    /// is still catching up after a join (it could not win, and must not vote).
    pub(crate) fn handle_timeout_now(&mut self, from: u16) {
        if self.role() != Role::Follower || self.leader != Some(from) {
            tracing::debug!(
                id = self.cfg.id,
                from,
                "TimeoutNow not from my leader: ignored"
            );
            return;
        }
        if self.is_catching_up() || !self.is_voter() {
            tracing::debug!(
                id = self.cfg.id,
                "TimeoutNow while catching up or not a voter: ignored"
            );
            return;
        }
        tracing::info!(
            id = self.cfg.id,
            term = self.term,
            from,
            "TimeoutNow: campaigning"
        );
        self.campaign_for_transfer();
    }
}
