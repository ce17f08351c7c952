//! Membership changes in the simulation: in some seeds, spare nodes
//! wait beside the founders; at random steps the leader is asked to add one as a
//! learner, promote a learner, remove a voter (the leader itself, at times: a
//! replaced leader) or remove a learner. Drawn from a generator of its own, so a
//! seed without changes keeps its schedule.
//!
//! A node that was in a committed configuration and is left out of a later
//! committed one is retired: stopped for good, as an operator
//! decommissions a machine (ids are never reused). The end-of-run checks then
//! cover the final members.

use std::collections::BTreeSet;

use raft_nvm::raft::MembershipChange;

use super::rng::{seeded, Rng};

/// Tokens of the membership requests (client tokens stay far below).
pub const TOKEN_BASE: u64 = 1 << 62;

/// What a change did to whom, for the coverage counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    AddLearner,
    Promote,
    RemoveVoter,
    RemoveLeader,
    RemoveLearner,
}

pub struct Reconfig {
    /// Changes are asked in this seed.
    pub on: bool,
    /// Per mille per step.
    rate: u32,
    pub rng: Rng,
    /// Ids beyond the founders, started as would-be learners.
    pub spares: Vec<u16>,
    /// Nodes that were ever asked into the cluster (founders included): never
    /// asked again.
    pub ever_member: BTreeSet<u16>,
    /// Nodes seen in a committed configuration: once a later committed one leaves
    /// them out, their removal is final (an uncommitted addition, by contrast, may
    /// still come back with a leader that holds it).
    pub committed_member: BTreeSet<u16>,
    /// Nodes whose removal committed: never restarted.
    pub retired: BTreeSet<u16>,
    /// The newest term any node led so far (see `committed_members`).
    pub newest_led_term: u64,
    next_token: u64,
    /// The change asked last and not yet answered: its token, its kind, and the
    /// node asked with its incarnation (a crash loses the answer).
    pub pending: Option<(u64, Kind, u16, u64)>,
}

impl Reconfig {
    pub fn new(seed: u64, founders: u16) -> Reconfig {
        let mut rng = seeded(seed ^ 0x7265_636f_6e66_6967);
        let on = rng.chance(500);
        let spares = if on {
            (founders + 1..=founders + 2).collect()
        } else {
            Vec::new()
        };
        let rate = rng.pick(&[5u32, 15, 40]);
        Reconfig {
            on,
            rate,
            rng,
            spares,
            ever_member: (1..=founders).collect(),
            committed_member: (1..=founders).collect(),
            retired: BTreeSet::new(),
            newest_led_term: 0,
            next_token: TOKEN_BASE,
            pending: None,
        }
    }

    /// Whether to ask for a change this step.
    pub fn due(&mut self) -> bool {
        self.on && self.pending.is_none() && self.rng.chance(self.rate)
    }

    /// A change for a cluster whose leader is `leader`, given its configuration:
    /// voters are kept at three or more.
    pub fn pick(
        &mut self,
        leader: u16,
        voters: &BTreeSet<u16>,
        learners: &BTreeSet<u16>,
        all: &[u16],
    ) -> Option<(MembershipChange, Kind)> {
        let mut options: Vec<(MembershipChange, Kind)> = Vec::new();
        for &id in all {
            if !voters.contains(&id)
                && !learners.contains(&id)
                && !self.retired.contains(&id)
                && !self.ever_member.contains(&id)
            {
                options.push((
                    MembershipChange::AddLearner {
                        id,
                        address: format!("10.0.0.{id}:6379"),
                    },
                    Kind::AddLearner,
                ));
            }
        }
        for &id in learners {
            options.push((MembershipChange::Promote(id), Kind::Promote));
            if self.rng.chance(300) {
                options.push((MembershipChange::Remove(id), Kind::RemoveLearner));
            }
        }
        if voters.len() > 3 {
            for &id in voters {
                let kind = if id == leader {
                    Kind::RemoveLeader
                } else {
                    Kind::RemoveVoter
                };
                options.push((MembershipChange::Remove(id), kind));
            }
        }
        if options.is_empty() {
            return None;
        }
        let i = self.rng.below(options.len() as u64) as usize;
        let (change, kind) = options.swap_remove(i);
        if let MembershipChange::AddLearner { id, .. } = change {
            self.ever_member.insert(id);
        }
        Some((change, kind))
    }

    pub fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }
}
