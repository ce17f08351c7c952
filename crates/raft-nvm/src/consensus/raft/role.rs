//! A node's role and the state that only that role has: a leader's records of
//! its followers, its transfer and its read rounds; a candidate's votes; a
//! follower's acknowledgement marks and the reads it asked its leader for.
//!
//! Holding them in the role's variant means a follower cannot read a leader's
//! progress (there is none to read), and a role change starts the new role's
//! state afresh by construction instead of by a list of resets. This file
//! imports only data types, so the files that implement `RaftCore` (which all
//! import it and `core.rs`) never import each other in a circle.

use std::collections::BTreeMap;

use super::progress::Progress;
use super::read_index::ReadOnly;

/// A node's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Follows a leader (or waits for one).
    Follower,
    /// Asking for pre-votes, without a term change.
    PreCandidate,
    /// Asking for votes in its own new term.
    Candidate,
    /// Leads its term.
    Leader,
}

impl Role {
    /// The role's name as `INFO` and the metrics show it (`leader`, `follower`,
    /// `pre-candidate`, `candidate`).
    pub fn name(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::PreCandidate => "pre-candidate",
            Role::Candidate => "candidate",
        }
    }
}

/// The role with its own state.
#[derive(Debug)]
pub(crate) enum RoleState {
    /// See [`Role::Follower`].
    Follower(FollowerState),
    /// See [`Role::PreCandidate`]: the pre-votes received.
    PreCandidate {
        /// Pre-votes received in this campaign (its own included).
        votes: BTreeMap<u16, bool>,
    },
    /// See [`Role::Candidate`]: the votes received.
    Candidate {
        /// Votes received in this campaign (its own included).
        votes: BTreeMap<u16, bool>,
    },
    /// See [`Role::Leader`].
    Leader(LeaderState),
}

/// What only a leader keeps.
#[derive(Debug, Default)]
pub(crate) struct LeaderState {
    /// Its record of each other member.
    pub progress: BTreeMap<u16, Progress>,
    /// The leadership transfer in progress.
    pub transfer: Option<Transfer>,
    /// Read-index requests being confirmed by a heartbeat round.
    pub read_only: ReadOnly,
    /// Reads waiting for the leader's first commit in its term.
    pub reads_waiting: Vec<u64>,
    /// `TimeoutNow` went out this term, so the lease is void until the term
    /// ends (see [`super::Config::lease_reads`]).
    pub lease_void: bool,
    /// Something happened that may let it send entries.
    pub flush_hint: bool,
}

/// What only a follower keeps (for the leader it follows).
#[derive(Debug, Default)]
pub(crate) struct FollowerState {
    /// The highest index verified to match the current leader's log.
    pub verified: u64,
    /// The highest index acknowledged to the current leader.
    pub acked: u64,
    /// An accepted append still waits for an acknowledgement.
    pub ack_pending: bool,
    /// The read contexts asked of the leader, with the tick asked at (see
    /// `learner_reads.rs`).
    pub asked_reads: BTreeMap<u64, u64>,
}

/// A transfer in progress (leader only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transfer {
    /// The node leadership goes to.
    pub target: u16,
    /// Ticks since the transfer began.
    pub elapsed: u32,
    /// `TimeoutNow` was sent.
    pub sent: bool,
}

impl RoleState {
    /// The role's name without its state.
    pub(crate) fn role(&self) -> Role {
        match self {
            RoleState::Follower(_) => Role::Follower,
            RoleState::PreCandidate { .. } => Role::PreCandidate,
            RoleState::Candidate { .. } => Role::Candidate,
            RoleState::Leader(_) => Role::Leader,
        }
    }

    /// The leader's state (`None` on other roles).
    pub(crate) fn leader(&self) -> Option<&LeaderState> {
        match self {
            RoleState::Leader(l) => Some(l),
            _ => None,
        }
    }

    /// The leader's state, to change (`None` on other roles).
    pub(crate) fn leader_mut(&mut self) -> Option<&mut LeaderState> {
        match self {
            RoleState::Leader(l) => Some(l),
            _ => None,
        }
    }

    /// The follower's state (`None` on other roles).
    pub(crate) fn follower(&self) -> Option<&FollowerState> {
        match self {
            RoleState::Follower(f) => Some(f),
            _ => None,
        }
    }

    /// The follower's state, to change (`None` on other roles).
    pub(crate) fn follower_mut(&mut self) -> Option<&mut FollowerState> {
        match self {
            RoleState::Follower(f) => Some(f),
            _ => None,
        }
    }

    /// A leader's record of `peer` (`None` on other roles or for a non-member).
    pub(crate) fn progress(&self, peer: u16) -> Option<&Progress> {
        self.leader().and_then(|l| l.progress.get(&peer))
    }

    /// A leader's record of `peer`, to change.
    pub(crate) fn progress_mut(&mut self, peer: u16) -> Option<&mut Progress> {
        self.leader_mut().and_then(|l| l.progress.get_mut(&peer))
    }

    /// The leader's transfer in progress (`None` on other roles).
    pub(crate) fn transfer(&self) -> Option<Transfer> {
        self.leader().and_then(|l| l.transfer)
    }

    /// A leader notes that it may be able to send entries (nothing on other
    /// roles: a new leader starts with the hint set).
    pub(crate) fn hint_flush(&mut self) {
        if let Some(l) = self.leader_mut() {
            l.flush_hint = true;
        }
    }

    /// The votes of a campaign (`None` outside one).
    pub(crate) fn votes_mut(&mut self) -> Option<&mut BTreeMap<u16, bool>> {
        match self {
            RoleState::PreCandidate { votes } | RoleState::Candidate { votes } => Some(votes),
            _ => None,
        }
    }

    /// The reads a follower asked its leader for and awaits (`None` on other roles,
    /// which have none: a campaign drops them).
    pub(crate) fn asked_reads_mut(&mut self) -> Option<&mut BTreeMap<u64, u64>> {
        self.follower_mut().map(|f| &mut f.asked_reads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_names_itself() {
        let names: Vec<_> = [
            Role::Leader,
            Role::Follower,
            Role::PreCandidate,
            Role::Candidate,
        ]
        .map(Role::name)
        .into();
        assert_eq!(names, ["leader", "follower", "pre-candidate", "candidate"]);
    }

    #[test]
    fn leader_state_is_absent_on_a_follower() {
        let mut s = RoleState::Follower(FollowerState::default());
        assert_eq!(s.role(), Role::Follower);
        assert!(s.leader().is_none() && s.progress(2).is_none());
        s.hint_flush();
        assert!(s.leader().is_none());
        let mut l = LeaderState::default();
        l.progress.insert(2, Progress::new(5));
        let mut s = RoleState::Leader(l);
        assert_eq!(s.role(), Role::Leader);
        assert!(s.progress(2).is_some() && s.follower().is_none());
        assert!(s.asked_reads_mut().is_none() && s.votes_mut().is_none());
        s.hint_flush();
        assert!(s.leader().is_some_and(|l| l.flush_hint));
    }
}
