//! Configuration and leadership requests: membership changes proposed by the
//! leader, `RAFT.PROMOTE` waiting for its learner to catch up (and giving up
//! after [`PROMOTION_WAIT_ELECTIONS`] election timeouts), leadership transfer.

use crate::consensus::raft::{RaftError, Role};
use crate::consensus::service::KvReply;

use super::{Output, Replica, PROMOTION_WAIT_ELECTIONS};

impl Replica {
    /// Proposes a membership change; its reply comes when the entry commits. A
    /// promotion whose learner lags or has not answered lately waits for it, up
    /// to [`PROMOTION_WAIT_ELECTIONS`] election timeouts.
    pub(super) fn change_membership(
        &mut self,
        token: u64,
        change: crate::consensus::raft::MembershipChange,
    ) -> Option<KvReply> {
        let promoting = match change {
            crate::consensus::raft::MembershipChange::Promote(id) => Some(id),
            _ => None,
        };
        match self.core.propose_membership(change) {
            Ok(index) => {
                self.await_commit(index, token);
                None
            }
            Err(RaftError::LearnerBehind { .. } | RaftError::LearnerUnreachable(_))
                if promoting.is_some() =>
            {
                let wait =
                    u64::from(self.core.config().election_ticks_min) * PROMOTION_WAIT_ELECTIONS;
                let id = promoting.unwrap_or_default();
                self.promotions.push((token, id, self.core.ticks() + wait));
                None
            }
            Err(RaftError::NotLeader { .. }) => Some(KvReply::NotLeader {
                leader: self.leader_addr(),
            }),
            Err(e) => Some(KvReply::Rejected(e.to_string())),
        }
    }

    /// Tries the waiting promotions again: proposed once their learner caught up,
    /// refused once they waited too long, redirected when leadership moved.
    pub(super) fn retry_promotions(&mut self, out: &mut Output) {
        if self.promotions.is_empty() {
            return;
        }
        for (token, id, give_up) in std::mem::take(&mut self.promotions) {
            if self.core.role() != Role::Leader {
                let leader = self.leader_addr();
                out.replies.push((token, KvReply::NotLeader { leader }));
                continue;
            }
            let change = crate::consensus::raft::MembershipChange::Promote(id);
            match self.core.propose_membership(change) {
                Ok(index) => self.await_commit(index, token),
                Err(e @ (RaftError::LearnerBehind { .. } | RaftError::LearnerUnreachable(_))) => {
                    if self.core.ticks() >= give_up {
                        out.replies
                            .push((token, KvReply::Rejected(format!("{e}; gave up waiting"))));
                    } else {
                        self.promotions.push((token, id, give_up));
                    }
                }
                // Another change under way: wait for it too.
                Err(RaftError::MembershipChangePending { .. }) if self.core.ticks() < give_up => {
                    self.promotions.push((token, id, give_up));
                }
                Err(e) => out.replies.push((token, KvReply::Rejected(e.to_string()))),
            }
        }
    }

    /// Starts handing the leadership to `to` (`None`: the follower whose log
    /// matches furthest); see [`RaftCore::transfer_leadership`].
    pub(super) fn transfer_leadership(&mut self, to: Option<u16>) -> KvReply {
        if self.core.role() != Role::Leader {
            return KvReply::NotLeader {
                leader: self.leader_addr(),
            };
        }
        let Some(target) = to.or_else(|| self.core.most_caught_up_follower()) else {
            return KvReply::Rejected("no other voter to hand the leadership to".into());
        };
        match self.core.transfer_leadership(target) {
            Ok(()) => KvReply::Done,
            Err(e) => KvReply::Rejected(e.to_string()),
        }
    }
}
