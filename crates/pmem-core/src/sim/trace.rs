//! A recorded trace and the crash points in it.

use super::event::{Event, EventKind};

/// What a simulated pool recorded: the durable base image and the events after it.
#[derive(Clone, Debug)]
pub struct Trace {
    /// The pool's bytes at the durable base (everything here survives any crash).
    pub base: Vec<u8>,
    /// Events since the base, in order.
    pub events: Vec<Event>,
    /// Recording stopped at the event bound: the trace is incomplete.
    pub overflowed: bool,
}

/// Where crashes are injected. A crash point `k` means: the first `k` events
/// happened, event `k` (if any) did not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CrashPoints {
    /// Before every fence, and at the end (the default: between two fences nothing
    /// can become *guaranteed* durable, and "before the next fence" already allows
    /// every subset of what happened since the last one).
    #[default]
    Fences,
    /// Before every flush and every fence, and at the end.
    Flushes,
    /// At every operation boundary (before each begin and end marker), and at the end.
    Ops,
    /// At every labelled point, and at the end.
    Labels,
    /// Before every event, and at the end.
    Every,
}

impl Trace {
    /// The crash points of this trace, ascending, always including the end.
    pub fn crash_points(&self, which: CrashPoints) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                matches!(
                    (which, &e.kind),
                    (CrashPoints::Every, _)
                        | (CrashPoints::Fences, EventKind::Fence)
                        | (
                            CrashPoints::Flushes,
                            EventKind::Fence | EventKind::Flush { .. }
                        )
                        | (
                            CrashPoints::Ops,
                            EventKind::OpBegin(_) | EventKind::OpEnd(_)
                        )
                        | (CrashPoints::Labels, EventKind::Label(_))
                )
            })
            .map(|(i, _)| i)
            .collect();
        v.push(self.events.len());
        v.dedup();
        v
    }

    /// Operations that ended before crash point `k`, and the one in flight (begun,
    /// not ended) if any.
    pub fn ops_at(&self, k: usize) -> (u32, Option<u32>) {
        let mut completed = 0;
        let mut in_flight = None;
        for e in &self.events[..k.min(self.events.len())] {
            match e.kind {
                EventKind::OpBegin(n) => in_flight = Some(n),
                EventKind::OpEnd(n) => {
                    completed += 1;
                    if in_flight == Some(n) {
                        in_flight = None;
                    }
                }
                _ => {}
            }
        }
        (completed, in_flight)
    }
}
