//! Membership changes in the core: proposing one, adopting configuration entries
//! as they are appended (and dropping them with a cut suffix), leaving a joint
//! configuration once it commits, and a removed leader handing over.

use super::core::RaftCore;
use super::error::RaftError;
use super::membership::{Membership, MembershipChange, MembershipLog};
use super::message::{Command, Entry};
use super::progress::Progress;
use super::role::Role;

impl RaftCore {
    /// The configuration in force (the last one in the log, committed or not).
    pub fn membership(&self) -> &Membership {
        &self.membership.current
    }

    /// The index of the configuration entry in force (0: the starting
    /// configuration, or one known to be committed).
    pub fn membership_index(&self) -> u64 {
        self.membership.index
    }

    /// Whether a configuration change is still under way: the last configuration
    /// entry is not committed, or it is joint (the leader appends the entry that
    /// leaves it once it commits).
    pub fn membership_change_pending(&self) -> bool {
        self.membership.index > self.log.committed || self.membership.current.is_joint()
    }

    /// A leader proposes `change`; returns the index of its configuration entry.
    /// A change of voters enters a joint configuration, which the leader leaves by
    /// itself once it commits; a change of learners is one entry.
    ///
    /// # Errors
    ///
    /// [`RaftError::NotLeader`]; [`RaftError::Transferring`];
    /// [`RaftError::MembershipChangePending`] while the previous change is under
    /// way or the leader has not yet committed an entry of its term (a new
    /// leader's log may end with an uncommitted configuration of its
    /// predecessor's); [`RaftError::LearnerBehind`] when a learner to promote is
    /// more than [`super::Config::promote_max_lag`] entries behind;
    /// [`RaftError::Membership`] when the change does not fit the configuration.
    pub fn propose_membership(&mut self, change: MembershipChange) -> Result<u64, RaftError> {
        if self.role() != Role::Leader {
            return Err(RaftError::NotLeader {
                leader: self.leader,
            });
        }
        if let Some(target) = self.transferring_to() {
            return Err(RaftError::Transferring { target });
        }
        if self.membership_change_pending() || self.log.term(self.log.committed) != Some(self.term)
        {
            return Err(RaftError::MembershipChangePending {
                index: self.membership.index.max(self.log.last_index()),
            });
        }
        let next = self.membership.current.apply(&change)?;
        if let MembershipChange::Promote(id) = &change {
            let id = *id;
            let matched = self.state.progress(id).map_or(0, |p| p.matched);
            let lag = self.log.last_index().saturating_sub(matched);
            if lag > self.cfg.promote_max_lag {
                return Err(RaftError::LearnerBehind {
                    id,
                    lag,
                    max: self.cfg.promote_max_lag,
                });
            }
            // A learner promoted while unreachable would only weaken the quorum:
            // it must have answered a heartbeat within the last election timeout.
            let recent = self
                .ticks
                .saturating_sub(u64::from(self.cfg.election_ticks_min));
            let answered = self
                .state
                .progress(id)
                .is_some_and(|p| p.lease_sent > 0 && p.lease_sent >= recent);
            if !answered {
                return Err(RaftError::LearnerUnreachable(id));
            }
        }
        tracing::info!(id = self.cfg.id, term = self.term, ?change, next = %next, "membership change");
        Ok(self.append_config(next))
    }

    /// The leader appends configuration `m` and adopts it.
    fn append_config(&mut self, m: Membership) -> u64 {
        self.state.hint_flush();
        let index = self
            .log
            .append(self.term, Command::Config { data: m.encode() });
        self.membership.appended(index, self.term, m);
        self.membership_changed();
        index
    }

    /// A follower whose log now matches the leader's up to `upto`, after
    /// discarding a conflicting suffix above `cut`: falls back from a
    /// configuration that suffix held, then adopts the configuration entries among
    /// `configs` (the message's) up to `upto`. (The DRAM window may already have
    /// let go of the terms of a long message's first entries: the append's outcome,
    /// not the window, says what the log holds.)
    pub(crate) fn follow_configs(&mut self, configs: &[Entry], upto: u64, cut: Option<u64>) {
        if let Some(after) = cut {
            if self.membership.truncated(after) {
                tracing::info!(id = self.cfg.id, membership = %self.membership.current, "configuration cut away: back to the previous one");
            }
        }
        for e in configs {
            if e.index <= self.membership.index || e.index > upto {
                continue;
            }
            let Command::Config { data } = &e.cmd else {
                continue;
            };
            match Membership::decode(data) {
                Ok(m) => {
                    tracing::info!(id = self.cfg.id, index = e.index, membership = %m, "configuration appended");
                    self.membership.appended(e.index, e.term, m);
                }
                Err(err) => {
                    // Entries are checksummed in the store, and a peer's are
                    // decoded before they get here (`Message::validate`): a bad
                    // one is a bug, not input.
                    tracing::error!(id = self.cfg.id, index = e.index, %err, "configuration entry does not decode: ignored");
                }
            }
        }
        self.membership_changed();
    }

    /// The log lost everything above `kept` (a full store): drop a configuration
    /// above it.
    pub(crate) fn configs_abandoned_after(&mut self, kept: u64) {
        if self.membership.truncated(kept.max(self.log.committed)) {
            self.membership_changed();
        }
    }

    /// A snapshot was installed: its configuration is in force and committed.
    pub(crate) fn config_from_snapshot(&mut self, m: Option<Membership>) {
        if let Some(m) = m {
            // Committed: nothing left to fall back to before it.
            self.membership = MembershipLog::initial(m);
        }
    }

    /// The leader's bookkeeping follows the configuration: a progress record for
    /// every other member and none for anyone else, no transfer to a non-voter.
    pub(crate) fn membership_changed(&mut self) {
        if self.role() != Role::Leader {
            return;
        }
        let others = self.others();
        let last = self.log.last_index();
        let membership = &self.membership.current;
        let Some(leader) = self.state.leader_mut() else {
            return;
        };
        leader.progress.retain(|id, _| others.contains(id));
        for id in others {
            leader
                .progress
                .entry(id)
                .or_insert_with(|| Progress::new(last));
        }
        if leader
            .transfer
            .is_some_and(|t| !membership.is_voter(t.target))
        {
            leader.transfer = None;
        }
    }

    /// The leader, after its commit index moved: leave a committed joint
    /// configuration; once a configuration without this node commits, hand
    /// leadership to the most caught-up voter and step down.
    pub(crate) fn after_commit_membership(&mut self) {
        if self.role() != Role::Leader || self.membership.index > self.log.committed {
            return;
        }
        // Members of the previous configuration only are no longer replicated to.
        self.membership_changed();
        if self.membership.current.is_joint() {
            let next = self.membership.current.leave_joint();
            tracing::info!(id = self.cfg.id, next = %next, "joint configuration committed: leaving it");
            self.append_config(next);
            return;
        }
        if !self.membership.current.is_voter(self.cfg.id) && self.state.transfer().is_none() {
            self.hand_over_after_removal();
        }
    }

    /// A leader whose removal committed hands its leadership to the most
    /// caught-up voter as a transfer does (no proposals meanwhile; `TimeoutNow`
    /// once the target's log matches), so the cluster needs no election timeout;
    /// with no voter to hand to, or once the transfer timed out, it steps down.
    pub(crate) fn hand_over_after_removal(&mut self) {
        // Preferably one heard from lately; else the voter whose log matches
        // furthest.
        let target = self.most_caught_up_follower().or_else(|| {
            self.state
                .leader()?
                .progress
                .iter()
                .filter(|(&id, _)| self.membership.current.is_voter(id))
                .max_by_key(|(&id, p)| (p.matched, std::cmp::Reverse(id)))
                .map(|(&id, _)| id)
        });
        tracing::info!(
            id = self.cfg.id,
            term = self.term,
            ?target,
            "removed from the voters: handing over leadership"
        );
        match target.map(|t| self.transfer_leadership(t)) {
            Some(Ok(())) => {}
            _ => self.become_follower(self.term, None),
        }
    }

    /// Whether this node may campaign: it is a voter of its configuration.
    pub(crate) fn is_voter(&self) -> bool {
        self.membership.current.is_voter(self.cfg.id)
    }
}
