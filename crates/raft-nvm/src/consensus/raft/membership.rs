//! Cluster membership (Raft §6, etcd's joint `ConfChangeV2`): who votes, who only
//! learns, and the quorums that follow.
//!
//! A configuration is a log entry ([`super::Command::Config`]) and takes effect as
//! soon as a node *appends* it, committed or not (Raft §6). A change of voters goes
//! through a **joint** configuration: `voters` is the new set, `outgoing` the old
//! one, and elections, commits, read-index rounds, check-quorum and leases need a
//! majority of *both*. Once the joint configuration commits, the leader appends the
//! configuration that leaves it (`outgoing` empty). Learners receive the log and
//! snapshots but never vote and never count in a quorum. Adding or removing a
//! learner changes no quorum and takes one entry.
//!
//! At most one change is in flight: a leader proposes a change only once the last
//! configuration in its log is committed and it has committed an entry of its own
//! term. So a log holds at most one uncommitted configuration, and a node that
//! loses a suffix to a new leader needs to remember only the configuration before
//! its last one ([`MembershipLog`]).
//!
//! The store keeps the configuration as the value of [`MEMBERSHIP_KEY`] in the
//! replicated map: restarts, compaction and snapshots carry it like any other key.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The reserved key under which the store keeps the cluster configuration. Every
/// key starting with [`RESERVED_PREFIX`] is the cluster's own: clients' writes to
/// them are refused.
pub const MEMBERSHIP_KEY: &[u8] = b"\0raft-nvm/membership";

/// The prefix of the keys the cluster keeps for itself ([`MEMBERSHIP_KEY`]).
pub const RESERVED_PREFIX: &[u8] = b"\0raft-nvm/";

/// Whether `key` is one of the cluster's reserved keys.
pub fn is_reserved_key(key: &[u8]) -> bool {
    key.starts_with(RESERVED_PREFIX)
}

/// A cluster configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// The voters (in a joint configuration: the incoming voters).
    pub voters: BTreeSet<u16>,
    /// In a joint configuration, the outgoing voters; empty otherwise.
    pub outgoing: BTreeSet<u16>,
    /// Members that receive the log but do not vote.
    pub learners: BTreeSet<u16>,
    /// Where members added by a change can be reached, as the driver wrote it
    /// when proposing the change (the node: `raft_addr/client_addr`). The core
    /// never reads it; it travels with the configuration so that every member
    /// learns how to reach a new one. Empty for the starting members.
    #[serde(default)]
    pub addresses: std::collections::BTreeMap<u16, String>,
}

/// One change an operator asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipChange {
    /// Adds node `id` as a learner, reachable at `address` (opaque to the core;
    /// see [`Membership::addresses`]).
    AddLearner {
        /// The node.
        id: u16,
        /// Where it can be reached (may be empty).
        address: String,
    },
    /// Makes a learner a voter (through a joint configuration), once it caught up
    /// within [`super::Config::promote_max_lag`].
    Promote(u16),
    /// Removes a voter (through a joint configuration) or a learner.
    Remove(u16),
}

/// Why a configuration or a change is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    /// The node is already a member.
    #[error("node {0} is already a member")]
    AlreadyMember(u16),
    /// The node is not a learner (promotion).
    #[error("node {0} is not a learner")]
    NotALearner(u16),
    /// The node is not a member (removal).
    #[error("node {0} is not a member")]
    NotAMember(u16),
    /// The change would leave no voter.
    #[error("removing node {0} would leave no voter")]
    LastVoter(u16),
    /// The id is reserved.
    #[error("node id {0} is reserved")]
    ReservedId(u16),
    /// A node is both voter and learner.
    #[error("node {0} is both a voter and a learner")]
    Overlap(u16),
    /// The bytes of a configuration entry do not decode.
    #[error("undecodable configuration entry: {0}")]
    Decode(String),
}

impl Membership {
    /// A plain configuration of `voters` and `learners`.
    pub fn new(
        voters: impl IntoIterator<Item = u16>,
        learners: impl IntoIterator<Item = u16>,
    ) -> Membership {
        Membership {
            voters: voters.into_iter().collect(),
            outgoing: BTreeSet::new(),
            learners: learners.into_iter().collect(),
            addresses: Default::default(),
        }
    }

    /// Whether this is a joint configuration.
    pub fn is_joint(&self) -> bool {
        !self.outgoing.is_empty()
    }

    /// Whether `id` votes (in either half of a joint configuration).
    pub fn is_voter(&self, id: u16) -> bool {
        self.voters.contains(&id) || self.outgoing.contains(&id)
    }

    /// Whether `id` is a learner.
    pub fn is_learner(&self, id: u16) -> bool {
        self.learners.contains(&id)
    }

    /// Whether `id` is a member at all.
    pub fn contains(&self, id: u16) -> bool {
        self.is_voter(id) || self.is_learner(id)
    }

    /// Every voter, both halves of a joint configuration, ascending.
    pub fn all_voters(&self) -> BTreeSet<u16> {
        self.voters.union(&self.outgoing).copied().collect()
    }

    /// Every member, ascending.
    pub fn members(&self) -> BTreeSet<u16> {
        let mut all = self.all_voters();
        all.extend(&self.learners);
        all
    }

    /// Checks the configuration's own invariants.
    pub fn validate(&self) -> Result<(), MembershipError> {
        for &id in self.members().iter() {
            if id == u16::MAX {
                return Err(MembershipError::ReservedId(id));
            }
            if self.is_voter(id) && self.is_learner(id) {
                return Err(MembershipError::Overlap(id));
            }
        }
        Ok(())
    }

    /// Whether `yes` holds for a majority of `voters` and, when joint, of
    /// `outgoing` too. An empty half counts as agreeing (it has no majority to
    /// miss).
    pub fn has_quorum(&self, yes: impl Fn(u16) -> bool) -> bool {
        let majority = |set: &BTreeSet<u16>| {
            set.is_empty() || set.iter().filter(|&&id| yes(id)).count() > set.len() / 2
        };
        majority(&self.voters) && majority(&self.outgoing)
    }

    /// The outcome of an election given the answers so far (`Some(true)`:
    /// granted; `Some(false)`: refused; `None`: no answer).
    pub fn vote_result(&self, answer: impl Fn(u16) -> Option<bool>) -> VoteResult {
        let won = self.has_quorum(|id| answer(id) == Some(true));
        if won {
            return VoteResult::Won;
        }
        // Lost when some half can no longer reach a majority of grants.
        let lost_in = |set: &BTreeSet<u16>| {
            let refused = set.iter().filter(|&&id| answer(id) == Some(false)).count();
            !set.is_empty() && refused >= set.len() - set.len() / 2
        };
        if lost_in(&self.voters) || lost_in(&self.outgoing) {
            VoteResult::Lost
        } else {
            VoteResult::Pending
        }
    }

    /// The largest `v` that a quorum has reached: for each half, the value its
    /// majority holds at least (the median from the top), then the smaller of the
    /// two halves. `None` when there are no voters.
    pub fn quorum_value(&self, value: impl Fn(u16) -> u64) -> Option<u64> {
        let half = |set: &BTreeSet<u16>| -> Option<u64> {
            let mut v: Vec<u64> = set.iter().map(|&id| value(id)).collect();
            v.sort_unstable_by(|a, b| b.cmp(a));
            v.get(set.len() / 2).copied()
        };
        let incoming = half(&self.voters)?;
        Some(match half(&self.outgoing) {
            Some(out) => incoming.min(out),
            None => incoming,
        })
    }

    /// The configuration `change` leads to from this plain one: a joint one for a
    /// change of voters, a plain one for a change of learners.
    pub fn apply(&self, change: &MembershipChange) -> Result<Membership, MembershipError> {
        // Changes start from a plain configuration (the caller refuses one
        // while joint).
        let mut next = self.leave_joint();
        match *change {
            MembershipChange::AddLearner { id, ref address } => {
                if id == u16::MAX {
                    return Err(MembershipError::ReservedId(id));
                }
                if self.contains(id) {
                    return Err(MembershipError::AlreadyMember(id));
                }
                next.learners.insert(id);
                if !address.is_empty() {
                    next.addresses.insert(id, address.clone());
                }
            }
            MembershipChange::Promote(id) => {
                if !next.learners.remove(&id) {
                    return Err(MembershipError::NotALearner(id));
                }
                next.voters.insert(id);
                next.outgoing = self.voters.clone();
            }
            MembershipChange::Remove(id) => {
                next.addresses.remove(&id);
                if next.learners.remove(&id) {
                    return Ok(next);
                }
                if !next.voters.remove(&id) {
                    return Err(MembershipError::NotAMember(id));
                }
                if next.voters.is_empty() {
                    return Err(MembershipError::LastVoter(id));
                }
                next.outgoing = self.voters.clone();
            }
        }
        Ok(next)
    }

    /// The plain configuration that leaves this joint one.
    pub fn leave_joint(&self) -> Membership {
        Membership {
            voters: self.voters.clone(),
            outgoing: BTreeSet::new(),
            learners: self.learners.clone(),
            addresses: self.addresses.clone(),
        }
    }

    /// The bytes of a configuration entry.
    pub fn encode(&self) -> Vec<u8> {
        // A BTreeSet of u16 always serializes; postcard cannot fail on it.
        postcard::to_allocvec(self).unwrap_or_default()
    }

    /// Decodes the bytes of a configuration entry.
    pub fn decode(bytes: &[u8]) -> Result<Membership, MembershipError> {
        let m: Membership =
            postcard::from_bytes(bytes).map_err(|e| MembershipError::Decode(e.to_string()))?;
        m.validate()?;
        Ok(m)
    }
}

impl std::fmt::Display for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |s: &BTreeSet<u16>| {
            s.iter()
                .map(|id| id.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        write!(f, "voters={}", list(&self.voters))?;
        if self.is_joint() {
            write!(f, " outgoing={}", list(&self.outgoing))?;
        }
        write!(f, " learners={}", list(&self.learners))
    }
}

/// The outcome of an election so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VoteResult {
    /// A quorum (of both halves, when joint) granted.
    Won,
    /// Some half can no longer grant a majority.
    Lost,
    /// Neither yet.
    Pending,
}

/// A node's configuration as its log stands: the last configuration entry (its
/// index and term), and the one before it, to fall back to should a new leader
/// cut the last one away. Index 0 is the configuration the node was started with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipLog {
    /// The configuration in force.
    pub current: Membership,
    /// The index of its entry (0: the starting configuration).
    pub index: u64,
    /// The term of its entry.
    pub term: u64,
    /// The configuration before it (committed: see the module docs).
    pub previous: Membership,
}

impl MembershipLog {
    /// A log whose configuration is the starting one.
    pub fn initial(m: Membership) -> MembershipLog {
        MembershipLog {
            previous: m.clone(),
            current: m,
            index: 0,
            term: 0,
        }
    }

    /// A configuration entry was appended at `index`.
    pub fn appended(&mut self, index: u64, term: u64, m: Membership) {
        if index <= self.index {
            return;
        }
        self.previous = std::mem::replace(&mut self.current, m);
        self.index = index;
        self.term = term;
    }

    /// The log lost everything above `after` (or the entry at the current
    /// configuration's index now has another term): fall back to the previous
    /// configuration. Returns whether the configuration changed.
    pub fn truncated(&mut self, after: u64) -> bool {
        if self.index <= after {
            return false;
        }
        self.current = self.previous.clone();
        // Its index is at or below the commit index; 0 stands for "committed".
        self.index = 0;
        self.term = 0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u16]) -> BTreeSet<u16> {
        ids.iter().copied().collect()
    }

    #[test]
    fn joint_quorums_need_both_halves() {
        let m = Membership::new([1, 2, 3], []).apply(&MembershipChange::Remove(1));
        let m = m.expect("remove");
        assert_eq!(m.voters, set(&[2, 3]));
        assert_eq!(m.outgoing, set(&[1, 2, 3]));
        // 2 and 3: a majority of both halves.
        assert!(m.has_quorum(|id| id == 2 || id == 3));
        // 1 and 2: a majority of the old set, half of the new one only.
        assert!(!m.has_quorum(|id| id == 1 || id == 2));
        let matched = |id: u16| match id {
            1 => 9,
            2 => 7,
            3 => 5,
            _ => 0,
        };
        // Old set's majority holds 7, the new set's (2, 3) holds 5.
        assert_eq!(m.quorum_value(matched), Some(5));
        assert_eq!(
            Membership::new([1, 2, 3], []).quorum_value(matched),
            Some(7)
        );
    }

    #[test]
    fn votes_are_won_and_lost_per_half() {
        let m = Membership::new([1, 2, 3, 4], [])
            .apply(&MembershipChange::Remove(4))
            .expect("remove");
        let answers = |v: &[(u16, bool)]| {
            let v = v.to_vec();
            move |id: u16| v.iter().find(|(i, _)| *i == id).map(|(_, g)| *g)
        };
        assert_eq!(
            m.vote_result(answers(&[(1, true), (2, true)])),
            VoteResult::Pending,
            "2 of 3 new, but 2 of 4 old is no majority"
        );
        assert_eq!(
            m.vote_result(answers(&[(1, true), (2, true), (4, true)])),
            VoteResult::Won
        );
        assert_eq!(
            m.vote_result(answers(&[(1, true), (3, false), (4, false)])),
            VoteResult::Lost,
            "2 of the 4 old refused: no majority of them is left"
        );
        assert_eq!(
            m.vote_result(answers(&[(2, false), (3, false)])),
            VoteResult::Lost
        );
    }

    #[test]
    fn changes_check_membership() {
        let m = Membership::new([1, 2, 3], [4]);
        assert_eq!(
            m.apply(&MembershipChange::AddLearner {
                id: 2,
                address: String::new()
            }),
            Err(MembershipError::AlreadyMember(2))
        );
        assert_eq!(
            m.apply(&MembershipChange::Promote(3)),
            Err(MembershipError::NotALearner(3))
        );
        assert_eq!(
            m.apply(&MembershipChange::Remove(9)),
            Err(MembershipError::NotAMember(9))
        );
        let promoted = m.apply(&MembershipChange::Promote(4)).expect("promote");
        assert_eq!(promoted.voters, set(&[1, 2, 3, 4]));
        assert!(promoted.learners.is_empty());
        assert!(promoted.is_joint());
        assert_eq!(promoted.leave_joint().outgoing, set(&[]));
        let dropped = m
            .apply(&MembershipChange::Remove(4))
            .expect("remove learner");
        assert!(!dropped.is_joint(), "a learner leaves in one step");
        assert_eq!(
            Membership::new([1], []).apply(&MembershipChange::Remove(1)),
            Err(MembershipError::LastVoter(1))
        );
        assert_eq!(Membership::decode(&promoted.encode()), Ok(promoted));
        assert!(Membership::decode(b"\xff\xff\xff").is_err());
        assert_eq!(
            Membership::new([1, 2], [2]).validate(),
            Err(MembershipError::Overlap(2))
        );
    }

    #[test]
    fn the_log_falls_back_one_configuration() {
        let a = Membership::new([1, 2, 3], []);
        let b = Membership::new([1, 2, 3], [4]);
        let mut log = MembershipLog::initial(a.clone());
        log.appended(10, 2, b.clone());
        assert_eq!(log.current, b);
        assert!(!log.truncated(10));
        assert!(log.truncated(9));
        assert_eq!(log.current, a);
        assert!(!log.truncated(0));
    }
}
