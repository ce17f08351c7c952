//! A recorded trace and the crash points in it.

use super::event::{Event, EventKind, FlushOp};
use super::image::Image;

/// What a simulated pool recorded: the durable base image and the events after it.
#[derive(Clone, Debug)]
pub struct Trace {
    /// The pool's bytes at the durable base (everything here survives any crash).
    pub base: Image,
    /// Events since the base, in order.
    pub events: Vec<Event>,
    /// Recording stopped at the event bound: the trace is incomplete.
    pub overflowed: bool,
}

/// Where crashes are injected. A crash point `k` means: the first `k` events
/// happened, event `k` (if any) did not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CrashPoints {
    /// Before every event that can change the durable set, and at the end (the
    /// default): every fence, every locked read-modify-write, and every `clflush`
    /// (durable by itself). Between two such events nothing new becomes *guaranteed*
    /// durable, and the images of a crash just before the next one include every
    /// subset of what happened since the last one.
    #[default]
    Durable,
    /// Before every fence and locked read-modify-write, and at the end. Misses the
    /// points where a `clflush` alone made a line durable: use [`CrashPoints::Durable`]
    /// unless the trace has no `clflush`.
    Fences,
    /// Before every flush, fence and locked read-modify-write, and at the end.
    Flushes,
    /// At every operation boundary (before each begin and end marker), and at the end.
    Ops,
    /// At every labelled point, and at the end.
    Labels,
    /// Before every event, and at the end.
    Every,
}

/// The operations around a crash point.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpsAt {
    /// Operations that ended before the point, in the order they ended.
    pub completed: Vec<u32>,
    /// Operations begun and not ended, in the order they began.
    pub in_flight: Vec<u32>,
}

impl Trace {
    /// The crash points of this trace, ascending, always including the end.
    pub fn crash_points(&self, which: CrashPoints) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| is_crash_point(which, &e.kind))
            .map(|(i, _)| i)
            .collect();
        v.push(self.events.len());
        v.dedup();
        v
    }

    /// The operations completed before crash point `k`, and those in flight.
    pub fn ops_at(&self, k: usize) -> OpsAt {
        let mut at = OpsAt::default();
        for e in &self.events[..k.min(self.events.len())] {
            match e.kind {
                EventKind::OpBegin(n) => at.in_flight.push(n),
                EventKind::OpEnd(n) => {
                    at.completed.push(n);
                    at.in_flight.retain(|&m| m != n);
                }
                _ => {}
            }
        }
        at
    }
}

fn is_crash_point(which: CrashPoints, kind: &EventKind) -> bool {
    match which {
        CrashPoints::Every => true,
        CrashPoints::Durable => {
            kind.is_fence()
                || matches!(
                    kind,
                    EventKind::Flush {
                        op: FlushOp::Clflush,
                        ..
                    }
                )
        }
        CrashPoints::Fences => kind.is_fence(),
        CrashPoints::Flushes => kind.is_fence() || matches!(kind, EventKind::Flush { .. }),
        CrashPoints::Ops => matches!(kind, EventKind::OpBegin(_) | EventKind::OpEnd(_)),
        CrashPoints::Labels => matches!(kind, EventKind::Label(_)),
    }
}
