//! Lease reads ([`super::Config::lease_reads`]): whether the leader may answer a
//! linearizable read from its own state, without a read-index round.

use super::core::RaftCore;

impl RaftCore {
    /// The index a read may be served at right now from the leader's lease, or
    /// `None` (then use [`RaftCore::read_index`]). `Some` only with
    /// [`super::Config::lease_reads`] on, on a leader that has committed an entry
    /// of its term, runs no leadership transfer and sent no `TimeoutNow` this term,
    /// and while a quorum (itself included) answered heartbeats sent less than
    /// `election_ticks_min - 1 - lease_drift_ticks` of its ticks ago. Serve the read
    /// once the applied index reaches the returned commit index.
    pub fn lease_read_index(&self) -> Option<u64> {
        self.lease().map(|l| l.index)
    }

    /// The lease this leader holds now, if any (see
    /// [`RaftCore::lease_read_index`]): the index reads are served at, and the
    /// tick count at which the lease ends (compare with [`RaftCore::ticks`]).
    pub fn lease(&self) -> Option<Lease> {
        let leader = self.state.leader()?;
        if !self.cfg.lease_reads
            || leader.transfer.is_some()
            || leader.lease_void
            || self.log.term(self.log.committed) != Some(self.term)
        {
            return None;
        }
        let (id, ticks) = (self.cfg.id, self.ticks);
        let progress = &leader.progress;
        // The send tick of the newest heartbeat round a quorum (of both halves
        // of a joint configuration) answered; this node counts as answering now.
        let quorum_sent = self.membership.current.quorum_value(|v| {
            if v == id {
                ticks
            } else {
                progress.get(&v).map_or(0, |p| p.lease_sent)
            }
        })?;
        if quorum_sent == 0 && !self.alone_is_quorum() {
            return None; // no heartbeat answered yet
        }
        let length = u64::from(self.cfg.election_ticks_min - 1 - self.cfg.lease_drift_ticks);
        let until_tick = quorum_sent.saturating_add(length);
        (self.ticks < until_tick).then_some(Lease {
            index: self.log.committed,
            until_tick,
        })
    }

    /// Ticks since the core started: the clock of the lease.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }
}

/// A leader lease: reads may be served at `index` until the leader's tick count
/// reaches `until_tick`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The commit index reads are served at (once applied).
    pub index: u64,
    /// The tick count at which the lease ends.
    pub until_tick: u64,
}
