//! The static configuration of one Raft node and its validation.

use serde::{Deserialize, Serialize};

/// Why a [`Config`] was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The node id is among neither the voters nor the learners.
    #[error("node {id} is not among the voters {peers:?} or the learners")]
    SelfNotVoter {
        /// This node's id.
        id: u16,
        /// The configured voters.
        peers: Vec<u16>,
    },
    /// A member id appears twice (among voters and learners).
    #[error("member {0} is listed twice")]
    DuplicatePeer(u16),
    /// Id 65535 is reserved (the store packs `vote + 1` into 16 bits).
    #[error("node id {0} is reserved")]
    ReservedId(u16),
    /// The election timeout range is empty or zero.
    #[error("election ticks must satisfy 0 < min <= max (got {min}..={max})")]
    ElectionRange {
        /// The lower bound.
        min: u32,
        /// The upper bound.
        max: u32,
    },
    /// Lease reads are configured so that no lease could hold.
    #[error("lease reads: {0}")]
    Lease(&'static str),
    /// Heartbeats must come strictly more often than elections start.
    #[error("heartbeat ticks ({heartbeat}) must be in 1..{election_min}")]
    Heartbeat {
        /// The heartbeat interval.
        heartbeat: u32,
        /// The minimum election timeout.
        election_min: u32,
    },
    /// A flow-control limit or the window is zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
}

/// The configuration of one node. `peers` and `learners` are the cluster's
/// starting membership; configuration entries in the log replace it
/// ([`super::Membership`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// This node's id.
    pub id: u16,
    /// The starting voters (including this node, unless it starts as a learner).
    pub peers: Vec<u16>,
    /// The starting learners (non-voting members). A node added to a running
    /// cluster starts as one: `peers` the voters it was told of, itself here.
    #[serde(default)]
    pub learners: Vec<u16>,
    /// A learner is promoted to voter only while its durable match is within this
    /// many entries of the leader's last index ([`super::MembershipChange::Promote`]).
    #[serde(default = "default_promote_max_lag")]
    pub promote_max_lag: u64,
    /// The smallest randomised election timeout, in ticks. It is also the length of a
    /// leader's check-quorum period and of a follower's leader lease.
    pub election_ticks_min: u32,
    /// The largest randomised election timeout, in ticks (inclusive).
    pub election_ticks_max: u32,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_ticks: u32,
    /// Run a pre-vote round before bumping the term.
    pub pre_vote: bool,
    /// A leader steps down when it has not heard from a quorum within
    /// `election_ticks_min`; followers then also ignore vote requests while they
    /// heard from a leader recently.
    pub check_quorum: bool,
    /// The most entries in one `AppendEntries`.
    pub max_entries_per_msg: usize,
    /// The most `AppendEntries` carrying entries in flight to one follower.
    pub max_inflight_msgs: usize,
    /// How many recent entries the core keeps in DRAM for replication; a follower
    /// that needs an older one gets it read back from the store
    /// ([`super::Ready::log_reads`]).
    pub window_entries: usize,
    /// Hand committed entries to the driver in [`super::Ready::committed`]. A
    /// driver that appended them to its store already (the store is the log) only
    /// needs [`super::Ready::apply_to`] and saves a copy of every entry by turning
    /// this off.
    pub committed_entries: bool,
    /// Seed of the injected random source (election timeouts).
    pub seed: u64,
    /// A node (re)joining with an empty store: it neither grants votes (pre-votes
    /// included: vote requests are ignored, their terms too) nor campaigns until it
    /// has caught up with a leader, i.e. its log holds, verified against that
    /// leader and durably, the leader's commit index *at an entry of the leader's
    /// own term* (so everything committed before, in any term, is included). Until
    /// then it only follows: it appends, acknowledges and installs snapshots.
    ///
    /// This closes the hole a wiped member opens: with its log gone it would vote
    /// for a candidate missing entries it had helped commit, and with its hard
    /// state gone it could vote twice in a term. What it cannot close: "caught up"
    /// is judged against the leader this node hears from, and its lost record of
    /// votes it cast in terms above that leader's is not recovered (a stale leader
    /// that a newer term replaced without this node's knowledge could release it
    /// early). Membership changes with non-voting learners are the full
    /// answer. [`RaftCore::is_catching_up`](super::RaftCore::is_catching_up) tells
    /// when it is over.
    #[serde(default)]
    pub passive_until_caught_up: bool,
    /// Lease reads (off by default): a leader answers linearizable reads from its
    /// own state, without a read-index round, while it holds a lease —
    /// [`RaftCore::lease_read_index`](super::RaftCore::lease_read_index). The lease
    /// rests on check-quorum (required): a follower that answered a heartbeat sent
    /// at the leader's tick `t` neither votes for another candidate nor campaigns
    /// before `election_ticks_min` of *its own* ticks have passed. The leader
    /// counts the lease from the send tick of the heartbeat round a quorum
    /// answered, for `election_ticks_min - 1 - lease_drift_ticks` of its ticks (one
    /// tick for the phase of the follower's ticks, the drift for clocks that run at
    /// different rates). A lease is void while a leadership transfer runs and for
    /// the rest of a term in which `TimeoutNow` was sent (the target's votes skip
    /// the followers' lease), and a node that (re)starts ignores vote requests for
    /// an election timeout, as if it had just heard from a leader.
    ///
    /// The risk: if a follower's clock runs faster than the leader's by more than
    /// `lease_drift_ticks` over an election timeout (a VM paused and resumed, a
    /// clock jump), a new leader can be elected while the old one still answers
    /// reads, which may then be stale. Read-index (the default) has no such
    /// assumption; hashicorp raft's lease reads were found serving stale reads
    /// under Jepsen for this reason.
    #[serde(default)]
    pub lease_reads: bool,
    /// The clock-drift bound of [`Config::lease_reads`], in ticks over one
    /// election timeout (below `election_ticks_min - 1`).
    #[serde(default)]
    pub lease_drift_ticks: u32,
}

fn default_promote_max_lag() -> u64 {
    100
}

impl Config {
    /// A configuration with common defaults (10–20 election ticks, heartbeat every
    /// 2 ticks, pre-vote and check-quorum on).
    pub fn new(id: u16, peers: Vec<u16>) -> Config {
        Config {
            id,
            peers,
            learners: Vec::new(),
            promote_max_lag: default_promote_max_lag(),
            election_ticks_min: 10,
            election_ticks_max: 20,
            heartbeat_ticks: 2,
            pre_vote: true,
            check_quorum: true,
            max_entries_per_msg: 64,
            max_inflight_msgs: 8,
            window_entries: 4096,
            committed_entries: true,
            seed: 0x9e37_79b9_7f4a_7c15,
            passive_until_caught_up: false,
            lease_reads: false,
            lease_drift_ticks: 2,
        }
    }

    /// Checks the invariants the core relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let members: Vec<u16> = self.peers.iter().chain(&self.learners).copied().collect();
        for (i, p) in members.iter().enumerate() {
            if *p == u16::MAX {
                return Err(ConfigError::ReservedId(*p));
            }
            if members[..i].contains(p) {
                return Err(ConfigError::DuplicatePeer(*p));
            }
        }
        if self.id == u16::MAX {
            return Err(ConfigError::ReservedId(self.id));
        }
        if !members.contains(&self.id) {
            return Err(ConfigError::SelfNotVoter {
                id: self.id,
                peers: self.peers.clone(),
            });
        }
        if self.election_ticks_min == 0 || self.election_ticks_min > self.election_ticks_max {
            return Err(ConfigError::ElectionRange {
                min: self.election_ticks_min,
                max: self.election_ticks_max,
            });
        }
        if self.heartbeat_ticks == 0 || self.heartbeat_ticks >= self.election_ticks_min {
            return Err(ConfigError::Heartbeat {
                heartbeat: self.heartbeat_ticks,
                election_min: self.election_ticks_min,
            });
        }
        if self.max_entries_per_msg == 0 {
            return Err(ConfigError::Zero("max_entries_per_msg"));
        }
        if self.max_inflight_msgs == 0 {
            return Err(ConfigError::Zero("max_inflight_msgs"));
        }
        if self.window_entries == 0 {
            return Err(ConfigError::Zero("window_entries"));
        }
        if self.lease_reads && !self.check_quorum {
            return Err(ConfigError::Lease(
                "lease reads need check_quorum (followers honour the leader's lease only with it)",
            ));
        }
        if self.lease_reads && self.lease_drift_ticks + 1 >= self.election_ticks_min {
            return Err(ConfigError::Lease(
                "lease_drift_ticks + 1 must be below election_ticks_min (the lease would be empty)",
            ));
        }
        Ok(())
    }

    /// The number of votes that make a majority of the starting voters.
    pub fn quorum(&self) -> usize {
        self.peers.len() / 2 + 1
    }

    /// The starting membership: `peers` vote, `learners` learn.
    pub fn membership(&self) -> super::Membership {
        super::Membership::new(self.peers.iter().copied(), self.learners.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_rejects_bad_configs() {
        assert!(Config::new(1, vec![1, 2, 3]).validate().is_ok());
        assert!(matches!(
            Config::new(4, vec![1, 2, 3]).validate(),
            Err(ConfigError::SelfNotVoter { .. })
        ));
        assert_eq!(
            Config::new(1, vec![1, 2, 2]).validate(),
            Err(ConfigError::DuplicatePeer(2))
        );
        let mut c = Config::new(1, vec![1]);
        c.election_ticks_max = 5;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::ElectionRange { .. })
        ));
        let mut c = Config::new(1, vec![1]);
        c.heartbeat_ticks = 10;
        assert!(matches!(c.validate(), Err(ConfigError::Heartbeat { .. })));
        let mut c = Config::new(1, vec![1]);
        c.max_inflight_msgs = 0;
        assert_eq!(c.validate(), Err(ConfigError::Zero("max_inflight_msgs")));
        assert_eq!(Config::new(1, vec![1, 2, 3, 4]).quorum(), 3);
    }
}
