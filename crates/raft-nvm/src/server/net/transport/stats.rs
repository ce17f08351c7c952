//! The transport's counters: [`TransportStats`] for its users, and the atomic
//! [`Counters`] its tasks bump.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters since the transport started (all messages are counted once).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Messages written to a connection (in a batch whose `write_all` succeeded).
    pub sent: u64,
    /// Messages received from peers and handed to the inbound channel.
    pub received: u64,
    /// Messages [`Transport::send`](super::Transport::send) dropped because the peer's queue was full.
    pub dropped_full: u64,
    /// Messages for a node that is not a peer (and not adoptable as a guest: see
    /// [`TransportStats::guests_adopted`]).
    pub dropped_unknown: u64,
    /// Nodes outside the peers that dialled in and were then answered at the
    /// address their Hello gave (guest peers adopted).
    pub guests_adopted: u64,
    /// Messages a writer dropped while disconnected or backing off, messages of a
    /// batch whose write failed, and messages given to a shut-down transport.
    pub dropped_disconnected: u64,
    /// Messages that encode larger than `max_frame` (never sent).
    pub dropped_oversized: u64,
    /// Incoming frames refused (malformed, oversized, missing or wrong Hello,
    /// misrouted message); each closed its connection.
    pub frames_rejected: u64,
    /// Outgoing connections established.
    pub connects: u64,
    /// Outgoing connection attempts that failed.
    pub connect_failures: u64,
    /// Incoming connections accepted.
    pub accepted: u64,
    /// Bytes held now in unfinished incoming frames, all connections together
    /// (at most [`TransportConfig::frame_budget`](super::TransportConfig::frame_budget)).
    pub frame_bytes_held: u64,
}

/// The live counters behind [`TransportStats`], shared by the transport's tasks.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) sent: AtomicU64,
    pub(super) received: AtomicU64,
    pub(super) dropped_full: AtomicU64,
    pub(super) dropped_unknown: AtomicU64,
    pub(super) guests_adopted: AtomicU64,
    pub(super) dropped_disconnected: AtomicU64,
    pub(super) dropped_oversized: AtomicU64,
    pub(super) frames_rejected: AtomicU64,
    pub(super) connects: AtomicU64,
    pub(super) connect_failures: AtomicU64,
    pub(super) accepted: AtomicU64,
}

/// Adds `n` to `counter` (counters order nothing: relaxed).
pub(super) fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// The counters now (`frame_bytes_held` is the budget's, filled by the caller).
    pub(super) fn snapshot(&self) -> TransportStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TransportStats {
            sent: get(&self.sent),
            received: get(&self.received),
            dropped_full: get(&self.dropped_full),
            dropped_unknown: get(&self.dropped_unknown),
            guests_adopted: get(&self.guests_adopted),
            dropped_disconnected: get(&self.dropped_disconnected),
            dropped_oversized: get(&self.dropped_oversized),
            frames_rejected: get(&self.frames_rejected),
            connects: get(&self.connects),
            connect_failures: get(&self.connect_failures),
            accepted: get(&self.accepted),
            frame_bytes_held: 0,
        }
    }
}
