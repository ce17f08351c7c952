//! Read-index bookkeeping on a leader: each request records the commit index at
//! arrival and is released once a quorum answered a heartbeat round that carries
//! its context (or a later one).

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

/// The leader's own read contexts are the driver's; those it takes on behalf of a
/// learner are numbered from here, so the two never collide.
pub(crate) const REMOTE_CTX_BASE: u64 = 1 << 63;

/// A read that became safe: serve it once the applied index reaches `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadState {
    /// The caller's context.
    pub ctx: u64,
    /// The index the read must observe.
    pub index: u64,
}

#[derive(Debug)]
struct Pending {
    ctx: u64,
    index: u64,
    acks: BTreeSet<u16>,
}

/// The read requests a leader is confirming, in arrival order.
#[derive(Debug, Default)]
pub(crate) struct ReadOnly {
    queue: VecDeque<Pending>,
}

impl ReadOnly {
    /// Whether `ctx` is already pending.
    pub(crate) fn contains(&self, ctx: u64) -> bool {
        self.queue.iter().any(|p| p.ctx == ctx)
    }

    /// Records a request at `index`; `self_id` counts as the first ack.
    pub(crate) fn add(&mut self, ctx: u64, index: u64, self_id: u16) {
        let mut acks = BTreeSet::new();
        acks.insert(self_id);
        self.queue.push_back(Pending { ctx, index, acks });
    }

    /// The newest pending context (the one a heartbeat round confirms).
    pub(crate) fn last_ctx(&self) -> Option<u64> {
        self.queue.back().map(|p| p.ctx)
    }

    /// Records `from`'s answer to a round carrying `ctx`; returns the requests that
    /// are now confirmed, `quorum` holding for their answers (that one and every
    /// earlier one).
    pub(crate) fn ack(
        &mut self,
        ctx: u64,
        from: u16,
        quorum: impl Fn(&BTreeSet<u16>) -> bool,
    ) -> Vec<ReadState> {
        let Some(pos) = self.queue.iter().position(|p| p.ctx == ctx) else {
            return Vec::new();
        };
        let confirmed = {
            let p = &mut self.queue[pos];
            p.acks.insert(from);
            quorum(&p.acks)
        };
        if !confirmed {
            return Vec::new();
        }
        self.queue
            .drain(..=pos)
            .map(|p| ReadState {
                ctx: p.ctx,
                index: p.index,
            })
            .collect()
    }

    /// Drops everything (leadership lost); returns the dropped contexts.
    pub(crate) fn clear(&mut self) -> Vec<u64> {
        self.queue.drain(..).map(|p| p.ctx).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_confirmation_releases_earlier_requests() {
        let mut r = ReadOnly::default();
        r.add(1, 5, 1);
        r.add(2, 6, 1);
        assert_eq!(r.last_ctx(), Some(2));
        let three = |acks: &BTreeSet<u16>| acks.len() >= 3;
        assert!(r.ack(2, 9, three).is_empty());
        assert!(r.ack(7, 2, three).is_empty(), "unknown ctx");
        let done = r.ack(2, 2, three);
        assert_eq!(
            done,
            vec![
                ReadState { ctx: 1, index: 5 },
                ReadState { ctx: 2, index: 6 }
            ]
        );
        assert!(r.last_ctx().is_none());
    }
}
