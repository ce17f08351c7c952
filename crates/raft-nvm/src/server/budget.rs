//! A byte budget shared by connections: the RESP server's bound on the bytes held
//! in its clients' unfinished requests, and the transport's on the bytes held in
//! its peers' unfinished frames.
//!
//! Each connection holds a [`Held`]: before it grows a buffer it raises its
//! holding, which reserves the growth from the shared [`ByteBudget`] (refused,
//! changing nothing, if the budget would be exceeded), and it lowers it as it
//! consumes the bytes. Dropping a `Held` gives back what it held, so a connection
//! that ends in any way (closed, refused, its task aborted) releases its share.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A limit on the sum of the bytes held by many connections.
#[derive(Debug)]
pub(crate) struct ByteBudget {
    used: AtomicUsize,
    limit: usize,
}

impl ByteBudget {
    /// A budget of `limit` bytes, none used.
    pub(crate) fn new(limit: usize) -> Arc<ByteBudget> {
        Arc::new(ByteBudget {
            used: AtomicUsize::new(0),
            limit,
        })
    }

    /// The limit.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The bytes held now, by all connections.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Reserves `n` more bytes, if that stays within the limit.
    fn reserve(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    /// Gives back `n` bytes reserved earlier.
    fn release(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// One connection's share of a [`ByteBudget`]; released when dropped.
#[derive(Debug)]
pub(crate) struct Held {
    budget: Arc<ByteBudget>,
    bytes: usize,
}

impl Held {
    /// A share holding nothing yet.
    pub(crate) fn new(budget: &Arc<ByteBudget>) -> Held {
        Held {
            budget: Arc::clone(budget),
            bytes: 0,
        }
    }

    /// The bytes this share holds.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The budget this share belongs to.
    pub(crate) fn budget(&self) -> &ByteBudget {
        &self.budget
    }

    /// Makes this share hold `bytes`: lowering always succeeds, raising reserves the
    /// difference and fails (changing nothing) if the budget lacks room.
    #[must_use = "a refused reservation must not be followed by the allocation"]
    pub(crate) fn set(&mut self, bytes: usize) -> bool {
        if bytes <= self.bytes {
            self.budget.release(self.bytes - bytes);
        } else if !self.budget.reserve(bytes - self.bytes) {
            return false;
        }
        self.bytes = bytes;
        true
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_reserve_within_the_limit_and_release_on_drop() {
        let budget = ByteBudget::new(100);
        let mut a = Held::new(&budget);
        let mut b = Held::new(&budget);
        assert!(a.set(60));
        assert!(!b.set(41), "60 + 41 > 100");
        assert_eq!(b.bytes(), 0, "a refused raise changes nothing");
        assert!(b.set(40));
        assert_eq!(budget.used(), 100);
        assert!(a.set(10), "lowering always works");
        assert_eq!(budget.used(), 50);
        assert!(b.set(90));
        drop(b);
        assert_eq!(budget.used(), 10, "a dropped share gives its bytes back");
        assert!(!a.set(usize::MAX), "no overflow");
        drop(a);
        assert_eq!(budget.used(), 0);
    }
}
