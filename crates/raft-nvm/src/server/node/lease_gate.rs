//! [`LeaseGate`]: lets the RESP connections answer `GET` from the leader's lease
//! without a trip through the node's event loop.
//!
//! After every `process`, and before the messages and replies it produced leave,
//! the loop publishes the read point: the store, its applied index, and the wall
//! time at which the lease ends (from [`crate::consensus::raft::Lease`] and the node's tick
//! clock), or nothing when there is no lease (not the leader, a transfer started,
//! the applied index behind the lease's). A connection with no request of its own
//! still waiting on the node reads the store at that applied index while the
//! deadline is ahead. Linearizable under the lease's assumptions: every write
//! acknowledged before the read arrived was applied before its reply left, hence
//! before the publication the read sees; and no other leader can commit anything
//! before the deadline. A transfer voids the lease before its `TimeoutNow` leaves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::storage::store::Store;

/// Where reads may be served from directly, and until when.
pub(crate) struct ReadPoint {
    /// The store (the one the replica uses now).
    pub store: Arc<dyn Store>,
    /// The applied index reads are served at (at or above the lease's index).
    pub applied: u64,
    /// When the lease ends.
    pub deadline: Instant,
}

/// The published read point, shared by the event loop and the RESP connections.
#[derive(Default)]
pub(crate) struct LeaseGate {
    point: Mutex<Option<ReadPoint>>,
    served: AtomicU64,
}

impl std::fmt::Debug for LeaseGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseGate")
            .field("served", &self.served.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl LeaseGate {
    /// Publishes the read point (`None`: no direct reads).
    pub fn publish(&self, point: Option<ReadPoint>) {
        *self.point.lock().unwrap_or_else(|p| p.into_inner()) = point;
    }

    /// The store and index a read arriving now may be served at, if the lease
    /// holds; counts it as served.
    pub fn read_point(&self) -> Option<(Arc<dyn Store>, u64)> {
        let guard = self.point.lock().unwrap_or_else(|p| p.into_inner());
        let p = guard.as_ref()?;
        if Instant::now() >= p.deadline {
            return None;
        }
        self.served.fetch_add(1, Ordering::Relaxed);
        Some((Arc::clone(&p.store), p.applied))
    }

    /// Reads answered through the gate.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}
