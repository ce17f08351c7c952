//! A leader's view of one follower: how far it matches, what to send next, and the
//! flow-control state (probe, pipelined replicate, snapshot) with its in-flight window.

use std::collections::VecDeque;

/// How the leader currently replicates to a follower.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressState {
    /// Finding the match point: at most one `AppendEntries` per heartbeat.
    Probe,
    /// Streaming: several `AppendEntries` in flight, optimistic `next`.
    Replicate,
    /// Waiting for a snapshot at `pending` to be installed.
    Snapshot {
        /// The index of the snapshot being sent.
        pending: u64,
    },
}

/// The leader's record of one follower.
#[derive(Clone, Debug)]
pub struct Progress {
    /// The highest index known to match the leader's log and be durable there.
    pub matched: u64,
    /// The next index to send.
    pub next: u64,
    /// The flow-control state.
    pub state: ProgressState,
    /// In probe state: a probe is out, wait for its answer or the next heartbeat.
    pub paused: bool,
    /// Heard from within the current check-quorum period.
    pub recent_active: bool,
    /// The leader's tick count when it sent the latest heartbeat this follower
    /// answered (0: none yet): where the lease this follower grants starts.
    pub lease_sent: u64,
    /// The leader's tick count when this follower last answered (an append or a
    /// heartbeat) this term: `None` before its first answer.
    pub heard: Option<u64>,
    /// Last indices of the `AppendEntries` in flight (replicate state), oldest first.
    inflight: VecDeque<u64>,
    /// Replicate state: `matched` when the last heartbeat response found appends in
    /// flight (see [`Progress::stalled`]).
    stall_mark: Option<u64>,
    /// Log reads asked of the driver for this follower and not yet answered: while
    /// any is, later entries go the same way, so that they reach it in order.
    pub(crate) unanswered_reads: usize,
    /// The follower's last reported snapshot installation in progress (its
    /// [`super::MessageBody::SnapshotProgress`], or the resume point of a failed
    /// [`super::MessageBody::SnapshotAck`]): the next snapshot to it resumes there
    /// if the store can still give that snapshot.
    pub snapshot_resume: Option<super::SnapshotResume>,
}

impl Progress {
    /// A fresh record for a new leader whose last index is `last`.
    pub(crate) fn new(last: u64) -> Progress {
        Progress {
            matched: 0,
            next: last + 1,
            state: ProgressState::Probe,
            paused: false,
            recent_active: false,
            lease_sent: 0,
            heard: None,
            inflight: VecDeque::new(),
            stall_mark: None,
            unanswered_reads: 0,
            snapshot_resume: None,
        }
    }

    /// Whether the leader must hold back `AppendEntries`.
    pub(crate) fn is_paused(&self, max_inflight: usize) -> bool {
        match self.state {
            ProgressState::Probe => self.paused,
            ProgressState::Replicate => self.inflight.len() >= max_inflight,
            ProgressState::Snapshot { .. } => true,
        }
    }

    /// The number of messages in flight.
    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }

    /// Records an `AppendEntries` of `n` entries ending at `last` being sent.
    pub(crate) fn sent(&mut self, n: usize, last: u64) {
        match self.state {
            ProgressState::Replicate => {
                if n > 0 {
                    self.next = last + 1;
                    self.inflight.push_back(last);
                }
            }
            ProgressState::Probe => self.paused = true,
            ProgressState::Snapshot { .. } => {}
        }
    }

    /// A success up to `index`; returns whether anything changed.
    pub(crate) fn acked(&mut self, index: u64) -> bool {
        let mut changed = false;
        if index > self.matched {
            self.matched = index;
            changed = true;
        }
        // `index` is a peer's number: no `+` that could overflow on it.
        let after = index.saturating_add(1);
        if self.next < after {
            self.next = after;
        }
        while self.inflight.front().is_some_and(|&l| l <= index) {
            self.inflight.pop_front();
        }
        self.paused = false;
        match self.state {
            ProgressState::Probe => self.become_replicate(),
            ProgressState::Snapshot { pending } if self.matched >= pending => {
                self.become_replicate()
            }
            _ => {}
        }
        changed
    }

    /// A rejection of `rejected` (the probed `prev_index`) with the follower's last
    /// index `hint`; returns whether it was fresh (not a stale answer).
    ///
    /// A follower whose log ends below what it acknowledged (`hint < matched`),
    /// rejecting an append at or above that match, lost its store: a member that
    /// came back empty to rejoin. The match is forgotten and the leader probes from
    /// the follower's end, which is the only way it ever catches up while this
    /// leader leads. (Should the answer instead be an old one overtaken by later
    /// acknowledgements, this costs a resend of entries the follower already has;
    /// the commit index never moves back.)
    pub(crate) fn rejected(&mut self, rejected: u64, hint: u64) -> bool {
        let snapshot = matches!(self.state, ProgressState::Snapshot { .. });
        if !snapshot && rejected >= self.matched && hint < self.matched {
            self.matched = 0;
            self.state = ProgressState::Probe;
            self.inflight.clear();
            self.stall_mark = None;
            self.next = hint.saturating_add(1);
            self.paused = false;
            return true;
        }
        if rejected <= self.matched {
            return false; // stale: already matched past it
        }
        match self.state {
            ProgressState::Replicate => {
                self.state = ProgressState::Probe;
                self.inflight.clear();
                self.next = (self.matched + 1).max(rejected.min(hint.saturating_add(1)));
            }
            ProgressState::Probe => {
                if self.next.saturating_sub(1) != rejected {
                    return false; // answers an older probe
                }
                self.next = (self.matched + 1).max(rejected.min(hint.saturating_add(1)));
            }
            ProgressState::Snapshot { .. } => return false,
        }
        self.paused = false;
        true
    }

    /// Called on each heartbeat response in replicate state: whether the appends in
    /// flight made no progress since the previous response found them in flight. The
    /// follower is alive, so they were lost; with the window not full and nothing new
    /// to send, nothing else would resend them.
    pub(crate) fn stalled(&mut self) -> bool {
        if self.inflight.is_empty() {
            self.stall_mark = None;
            return false;
        }
        let stalled = self.stall_mark == Some(self.matched);
        self.stall_mark = Some(self.matched);
        stalled
    }

    /// Switches to pipelined replication from `matched + 1`.
    pub(crate) fn become_replicate(&mut self) {
        self.state = ProgressState::Replicate;
        self.next = self.next.max(self.matched + 1);
        self.inflight.clear();
        self.paused = false;
        self.stall_mark = None;
    }

    /// Back to probing from `matched + 1` (e.g. a snapshot failed).
    pub(crate) fn become_probe(&mut self) {
        self.state = ProgressState::Probe;
        self.next = self.matched + 1;
        self.inflight.clear();
        self.paused = false;
        self.stall_mark = None;
    }

    /// Waits for a snapshot at `index`.
    pub(crate) fn become_snapshot(&mut self, index: u64) {
        self.state = ProgressState::Snapshot { pending: index };
        self.inflight.clear();
        self.paused = false;
        self.stall_mark = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_then_pipeline_with_window() {
        let mut p = Progress::new(10);
        assert!(!p.is_paused(2));
        p.sent(0, 10);
        assert!(p.is_paused(2), "one probe at a time");
        assert!(p.rejected(10, 4));
        assert_eq!(p.next, 5);
        assert!(p.acked(4));
        assert_eq!(p.state, ProgressState::Replicate);
        p.sent(3, 7);
        p.sent(3, 10);
        assert!(p.is_paused(2), "window of two is full");
        assert_eq!(p.next, 11);
        p.acked(7);
        assert_eq!(p.inflight(), 1);
        assert!(!p.is_paused(2));
        assert!(!p.rejected(3, 3), "stale rejection ignored");
        assert!(p.rejected(10, 8));
        assert_eq!((p.state, p.next), (ProgressState::Probe, 9));
    }

    #[test]
    fn a_follower_that_lost_its_log_is_probed_from_its_end() {
        let mut p = Progress::new(10);
        p.acked(10);
        p.sent(2, 12);
        // The follower came back empty: it rejects the append after its old match.
        assert!(p.rejected(10, 0), "a fresh rejection");
        assert_eq!((p.state, p.matched, p.next), (ProgressState::Probe, 0, 1));
        assert!(!p.is_paused(2), "probe it at once");
        // An old rejection from below the match is still ignored.
        let mut p = Progress::new(10);
        p.acked(10);
        assert!(!p.rejected(4, 3), "stale");
        assert_eq!((p.matched, p.next), (10, 11));
    }

    #[test]
    fn a_lost_append_stalls_the_pipeline() {
        let mut p = Progress::new(10);
        p.acked(10);
        p.sent(4, 14);
        assert!(!p.is_paused(2), "the window is not full");
        assert!(!p.stalled(), "first heartbeat response: in flight");
        assert!(p.stalled(), "second one: no progress, the append was lost");
        p.become_probe();
        assert_eq!(p.next, 11);
        p.acked(11);
        p.sent(3, 14);
        assert!(!p.stalled());
        p.acked(12);
        assert!(!p.stalled(), "progress since the last response");
        p.acked(14);
        assert!(!p.stalled(), "nothing in flight");
    }
}
