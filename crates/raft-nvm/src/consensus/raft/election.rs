//! Elections: randomised timeouts, pre-vote, votes, the term rules every message
//! goes through, role changes and the leader's check-quorum.

use std::collections::BTreeMap;

use super::core::RaftCore;
use super::membership::VoteResult;
use super::message::{Command, Message, MessageBody};
use super::progress::Progress;
use super::role::{FollowerState, LeaderState, Role, RoleState};

impl RaftCore {
    /// Ticks a follower or candidate: campaign when the election timeout expires.
    pub(crate) fn tick_election(&mut self) {
        self.election_elapsed += 1;
        if self.election_elapsed >= self.cfg.election_ticks_min {
            self.lease_guard = false;
        }
        if self.election_elapsed >= self.randomized_timeout {
            self.election_elapsed = 0;
            if self.is_catching_up() {
                tracing::trace!(id = self.cfg.id, "catching up: not campaigning");
                return;
            }
            if !self.is_voter() {
                tracing::trace!(id = self.cfg.id, "not a voter: not campaigning");
                return;
            }
            self.start_election();
        }
    }

    /// Ticks a leader: heartbeats, and check-quorum once per election timeout.
    pub(crate) fn tick_leader(&mut self) {
        self.heartbeat_elapsed += 1;
        self.election_elapsed += 1;
        self.tick_transfer();
        if self.state.transfer().is_none() && !self.is_voter() && !self.membership_change_pending()
        {
            // Removed, and the handover timed out: leave the leadership.
            tracing::info!(id = self.cfg.id, term = self.term, "removed: stepping down");
            self.become_follower(self.term, None);
            return;
        }
        if self.election_elapsed >= self.cfg.election_ticks_min {
            self.election_elapsed = 0;
            if self.cfg.check_quorum {
                let id = self.cfg.id;
                let state = &self.state;
                let active = self
                    .membership
                    .current
                    .has_quorum(|v| v == id || state.progress(v).is_some_and(|p| p.recent_active));
                if !active {
                    tracing::info!(
                        id = self.cfg.id,
                        term = self.term,
                        "check-quorum failed: stepping down"
                    );
                    self.become_follower(self.term, None);
                    return;
                }
                if let Some(leader) = self.state.leader_mut() {
                    for p in leader.progress.values_mut() {
                        p.recent_active = false;
                    }
                }
            }
        }
        if self.heartbeat_elapsed >= self.cfg.heartbeat_ticks {
            self.heartbeat_elapsed = 0;
            self.bcast_heartbeat();
        }
    }

    /// Starts an election now (a pre-vote round first when configured). Nothing
    /// for a leader, or for a node still catching up after joining
    /// ([`super::Config::passive_until_caught_up`]).
    pub fn campaign(&mut self) {
        if self.role() == Role::Leader || self.is_catching_up() || !self.is_voter() {
            return;
        }
        self.start_election();
    }

    fn start_election(&mut self) {
        if self.term >= super::MAX_TERM {
            // The next term would not fit the hard state. Only a peer's message
            // could have brought the term here (it takes 2^48 elections
            // otherwise); staying a follower keeps the node serving what it can
            // rather than failing to persist the new term.
            tracing::error!(
                id = self.cfg.id,
                term = self.term,
                "the term is at its largest: not campaigning"
            );
            self.reset_timers();
            return;
        }
        if self.cfg.pre_vote {
            self.become_pre_candidate();
        } else {
            self.become_candidate();
        }
    }

    fn reset_timers(&mut self) {
        self.election_elapsed = 0;
        self.heartbeat_elapsed = 0;
        self.randomized_timeout = super::rng::ticks_between(
            &mut self.rng,
            self.cfg.election_ticks_min,
            self.cfg.election_ticks_max,
        );
    }

    /// Leaves any leadership: pending reads fail. (The caller then sets the new
    /// role, which drops the rest of the leader's state.)
    fn drop_leadership(&mut self) {
        if let Some(leader) = self.state.leader_mut() {
            let mut dropped = leader.read_only.clear();
            dropped.append(&mut leader.reads_waiting);
            self.dropped_reads.extend(dropped);
            if let Some(t) = leader.transfer.take() {
                tracing::info!(
                    id = self.cfg.id,
                    target = t.target,
                    "leadership left: transfer over"
                );
            }
        }
    }

    /// Becomes a follower in `term` (a new term clears the vote).
    pub(crate) fn become_follower(&mut self, term: u64, leader: Option<u16>) {
        self.drop_leadership();
        if term > self.term || leader != self.leader {
            self.drop_asked_reads();
        }
        if term > self.term {
            self.term = term;
            self.vote = None;
        }
        // The reads asked of the leader survive when the leader and term stay
        // (dropped above otherwise); the acknowledgement marks start afresh.
        let asked_reads = self
            .state
            .asked_reads_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        self.state = RoleState::Follower(FollowerState {
            asked_reads,
            ..FollowerState::default()
        });
        self.leader = leader;
        self.reset_timers();
        tracing::debug!(id = self.cfg.id, term, ?leader, "follower");
    }

    fn become_pre_candidate(&mut self) {
        self.drop_leadership();
        self.drop_asked_reads();
        self.state = RoleState::PreCandidate {
            votes: BTreeMap::from([(self.cfg.id, true)]),
        };
        self.leader = None;
        self.reset_timers();
        tracing::debug!(id = self.cfg.id, term = self.term, "pre-candidate");
        if self.alone_is_quorum() {
            self.become_candidate();
            return;
        }
        let (last_index, last_term) = (self.log.last_index(), self.log.last_term());
        for p in self.other_voters() {
            self.send_with_term(
                p,
                self.term + 1,
                MessageBody::PreVote {
                    last_index,
                    last_term,
                },
            );
        }
    }

    fn become_candidate(&mut self) {
        self.campaign_in_new_term(false);
    }

    /// Campaigns in the next term at once (no pre-vote): on the leader's
    /// [`MessageBody::TimeoutNow`].
    pub(crate) fn campaign_for_transfer(&mut self) {
        self.campaign_in_new_term(true);
    }

    fn campaign_in_new_term(&mut self, transfer: bool) {
        self.drop_leadership();
        self.drop_asked_reads();
        self.term += 1;
        self.vote = Some(self.cfg.id);
        self.state = RoleState::Candidate {
            votes: BTreeMap::from([(self.cfg.id, true)]),
        };
        self.leader = None;
        self.reset_timers();
        tracing::debug!(id = self.cfg.id, term = self.term, "candidate");
        if self.alone_is_quorum() {
            self.become_leader();
            return;
        }
        let (last_index, last_term) = (self.log.last_index(), self.log.last_term());
        for p in self.other_voters() {
            self.send(
                p,
                MessageBody::RequestVote {
                    last_index,
                    last_term,
                    transfer,
                },
            );
        }
    }

    fn become_leader(&mut self) {
        self.leader = Some(self.cfg.id);
        self.reset_timers();
        let last = self.log.last_index();
        let progress = self
            .others()
            .into_iter()
            .map(|p| (p, Progress::new(last)))
            .collect();
        self.state = RoleState::Leader(LeaderState {
            progress,
            flush_hint: true,
            ..LeaderState::default()
        });
        tracing::info!(id = self.cfg.id, term = self.term, "leader");
        // The first entry of the term: reads wait until it commits.
        self.log.append(self.term, Command::Noop);
    }

    /// The term rules, then dispatch by kind.
    pub(crate) fn step_inner(&mut self, m: Message) {
        let is_vote_req = matches!(
            m.body,
            MessageBody::PreVote { .. } | MessageBody::RequestVote { .. }
        );
        let from_leader = matches!(
            m.body,
            MessageBody::AppendEntries { .. }
                | MessageBody::Heartbeat { .. }
                | MessageBody::SnapshotChunk { .. }
        );
        if is_vote_req && self.is_catching_up() {
            // A joining node has no vote to give until it caught up: it ignores the
            // request, term included (adopting a candidate's term would only make
            // it reject the leader it is catching up from).
            tracing::debug!(
                id = self.cfg.id,
                from = m.from,
                "vote request while catching up: ignored"
            );
            return;
        }
        let transfer_vote = matches!(m.body, MessageBody::RequestVote { transfer: true, .. });
        if m.term > self.term {
            if is_vote_req
                && !transfer_vote
                && self.cfg.check_quorum
                && (self.leader.is_some() || self.lease_guard)
                && self.election_elapsed < self.cfg.election_ticks_min
            {
                // Leader lease: a node that heard from a leader recently ignores
                // campaigns, so a partitioned node cannot disrupt the cluster.
                tracing::trace!(id = self.cfg.id, from = m.from, "vote request in lease");
                return;
            }
            let keep_term = matches!(m.body, MessageBody::PreVote { .. })
                || matches!(m.body, MessageBody::PreVoteResp { granted: true });
            if !keep_term {
                self.become_follower(m.term, from_leader.then_some(m.from));
            }
        } else if m.term < self.term {
            if from_leader && (self.cfg.check_quorum || self.cfg.pre_vote) {
                // Tell a stale leader about the newer term.
                self.send(
                    m.from,
                    MessageBody::AppendResp {
                        success: false,
                        index: 0,
                        hint: 0,
                    },
                );
            } else if matches!(m.body, MessageBody::PreVote { .. }) {
                self.send(m.from, MessageBody::PreVoteResp { granted: false });
            }
            return;
        }
        match m.body {
            MessageBody::PreVote {
                last_index,
                last_term,
            } => self.handle_vote_request(m.from, m.term, last_index, last_term, true),
            MessageBody::RequestVote {
                last_index,
                last_term,
                ..
            } => self.handle_vote_request(m.from, m.term, last_index, last_term, false),
            MessageBody::PreVoteResp { granted } => {
                if self.role() == Role::PreCandidate
                    && ((granted && Some(m.term) == self.term.checked_add(1))
                        || (!granted && m.term == self.term))
                {
                    self.record_vote(m.from, granted);
                }
            }
            MessageBody::VoteResp { granted } => {
                if self.role() == Role::Candidate && m.term == self.term {
                    self.record_vote(m.from, granted);
                }
            }
            _ => self.step_replication(m),
        }
    }

    fn handle_vote_request(
        &mut self,
        from: u16,
        term: u64,
        last_index: u64,
        last_term: u64,
        pre: bool,
    ) {
        let can_vote = self.vote == Some(from)
            || (self.vote.is_none() && self.leader.is_none())
            || (pre && term > self.term);
        let up_to_date = (last_term, last_index) >= (self.log.last_term(), self.log.last_index());
        let granted = can_vote && up_to_date;
        tracing::debug!(id = self.cfg.id, from, term, pre, granted, "vote request");
        if pre {
            let t = if granted { term } else { self.term };
            self.send_with_term(from, t, MessageBody::PreVoteResp { granted });
        } else {
            if granted {
                self.vote = Some(from);
                self.election_elapsed = 0;
            }
            self.send(from, MessageBody::VoteResp { granted });
        }
    }

    /// Counts a (pre-)vote; called in a campaign only (`step_inner` checks).
    fn record_vote(&mut self, from: u16, granted: bool) {
        let Some(votes) = self.state.votes_mut() else {
            return;
        };
        votes.insert(from, granted);
        let votes = &*votes;
        match self
            .membership
            .current
            .vote_result(|id| votes.get(&id).copied())
        {
            VoteResult::Won if self.role() == Role::PreCandidate => self.become_candidate(),
            VoteResult::Won => self.become_leader(),
            VoteResult::Lost => self.become_follower(self.term, None),
            VoteResult::Pending => {}
        }
    }
}
