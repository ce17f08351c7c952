//! [`TickClock`]: the node's Raft ticks, kept in step with wall time.

use std::time::{Duration, Instant};

/// Keeps the replica's ticks in step with wall time. The loop's timer only wakes
/// it; every tick period that has passed is ticked on the next wake-up, and before
/// any client request is taken. A loop that stalled (a long sync, a paused VM)
/// thus catches its clock up first: its election timers, check-quorum and the
/// leader lease ([`crate::consensus::raft::Config::lease_reads`]) count real time, not the
/// timer wake-ups that happened to run, so a stalled leader cannot answer a read
/// from a lease that expired while it stalled.
pub(super) struct TickClock {
    tick: Duration,
    next: Instant,
}

impl TickClock {
    pub(super) fn new(tick: Duration) -> TickClock {
        TickClock {
            tick,
            next: Instant::now() + tick,
        }
    }

    /// When the replica's tick count, `ticked` now, reaches `tick` (the past if
    /// it already has). The next period to be ticked ends at `next`.
    pub(super) fn instant_of(&self, tick: u64, ticked: u64) -> Instant {
        match tick.checked_sub(ticked + 1) {
            Some(more) => self.next + self.tick * u32::try_from(more).unwrap_or(u32::MAX),
            None => self.next - self.tick,
        }
    }

    /// How many tick periods ended since the last call.
    pub(super) fn due(&mut self) -> u32 {
        let now = Instant::now();
        let mut due = 0;
        while self.next <= now {
            self.next += self.tick;
            due += 1;
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_tick_periods_that_ended() {
        let tick = Duration::from_millis(5);
        let mut clock = TickClock::new(tick);
        std::thread::sleep(tick * 4 + tick / 2);
        let due = clock.due();
        assert!(due >= 4, "{due} ticks after four and a half periods");
        assert!(clock.due() <= 1, "the periods are counted once");
    }
}
