//! Handing out a log's lanes to the transactions that run at once.
//!
//! Each lane is a mutex of its own, on its own cache lines, and holding it is owning
//! the lane for one transaction. A thread goes back first to the lane it used last
//! (a per-thread hint), so threads that run side by side each keep one lane, and
//! neither the lane's lock word nor its log lines move between cores: one shared
//! free list was the point every transaction of every thread wrote, and it kept two
//! threads on a concurrent map from scaling.
//!
//! A thread that finds every lane busy waits on a condition variable. It counts
//! itself in `waiting` and then looks at the lanes once more; a thread giving a lane
//! back unlocks it and then reads `waiting`. Each side stores, then loads what the
//! other stores (Dekker's handshake), so both put a `SeqCst` fence between: either
//! the waiter sees the lane free, or the giver sees the waiter and wakes it. The
//! loom model (`loom_tests` below, under `--cfg loom`) checks that no wake-up is
//! lost and that a lane is never held twice.
//!
//! A lane's next TID lives beside it. It moves on only past a transaction that
//! wrote to the lane (see [`LaneGuard::give_back`]): that keeps every TID a run
//! uses at most one round past a durable one, which the floor that `TxLog::open`
//! raises relies on, whatever order the lanes are taken in.

use std::cell::Cell;

use std::sync::TryLockError;

use crate::sync::atomic::{fence, AtomicU32, Ordering};
use crate::sync::{Condvar, Mutex, MutexGuard};

use super::txn::Scratch;
use super::TxError;

/// A value alone on its cache lines (two: the adjacent-line prefetcher pairs
/// them), so that one thread's writes to it never take a line another thread reads.
#[repr(align(128))]
#[derive(Debug)]
struct Padded<T>(T);

/// What a lane keeps between its transactions.
#[derive(Debug)]
struct Slot {
    /// The TID its next transaction uses.
    next_tid: u64,
    /// The DRAM buffers its last transaction left (kept for their capacity).
    scratch: Box<Scratch>,
    /// A transaction in doubt left it: out of service until the log is reopened.
    retired: bool,
}

/// The lanes of one log.
#[derive(Debug)]
pub(crate) struct LaneSet {
    slots: Box<[Padded<Mutex<Slot>>]>,
    /// TIDs advance by this much per round (the number of lanes).
    stride: u64,
    retired: AtomicU32,
    /// Threads counted in `waiting` before their last look at the lanes.
    waiting: Padded<AtomicU32>,
    /// Held by a waiter from its last look to its wait (so a wake-up sent after the
    /// look cannot come before the wait).
    wait_lock: Padded<Mutex<()>>,
    lane_freed: Condvar,
}

thread_local! {
    /// The lane this thread used last (any log's: it is only where to look first).
    static LAST_LANE: Cell<u32> = Cell::new(first_hint());
}

/// Spreads new threads over the lanes, so two threads do not both begin at lane 0
/// and meet there once before they settle.
fn first_hint() -> u32 {
    // A plain std atomic even under loom: a hint, outside what the model checks.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn last_lane() -> u32 {
    LAST_LANE.try_with(Cell::get).unwrap_or(0)
}

fn remember(lane: u32) {
    let _ = LAST_LANE.try_with(|c| c.set(lane));
}

impl LaneSet {
    /// Lanes `0..next_tids.len()`, lane `i` to use TID `next_tids[i]` next.
    pub(crate) fn new(next_tids: impl IntoIterator<Item = u64>) -> LaneSet {
        let slots: Box<[_]> = next_tids
            .into_iter()
            .map(|next_tid| {
                Padded(Mutex::new(Slot {
                    next_tid,
                    scratch: Box::default(),
                    retired: false,
                }))
            })
            .collect();
        LaneSet {
            stride: slots.len() as u64,
            slots,
            retired: AtomicU32::new(0),
            waiting: Padded(AtomicU32::new(0)),
            wait_lock: Padded(Mutex::new(())),
            lane_freed: Condvar::new(),
        }
    }

    /// Sets every lane's next TID (after recovery; no lane is taken).
    pub(crate) fn set_next_tids(&self, next_tids: impl IntoIterator<Item = u64>) {
        for (slot, tid) in self.slots.iter().zip(next_tids) {
            lock(&slot.0).next_tid = tid;
        }
    }

    /// Takes a lane: this thread's last one if it is free, else any free one, else
    /// waits for one. `Err(NoLane)` once every lane is retired.
    pub(crate) fn take(&self) -> Result<LaneGuard<'_>, TxError> {
        let start = last_lane() as usize % self.slots.len();
        if let Some(guard) = self.try_take(start) {
            return Ok(guard);
        }
        let mut waiter = self.wait_lock.0.lock().unwrap_or_else(|p| p.into_inner());
        self.waiting.0.fetch_add(1, Ordering::Relaxed);
        let taken = loop {
            // Dekker: the count above, then the look below (see the module docs).
            fence(Ordering::SeqCst);
            if let Some(guard) = self.try_take(start) {
                break Ok(guard);
            }
            if self.retired.load(Ordering::Acquire) as usize >= self.slots.len() {
                break Err(TxError::NoLane);
            }
            waiter = self
                .lane_freed
                .wait(waiter)
                .unwrap_or_else(|p| p.into_inner());
        };
        self.waiting.0.fetch_sub(1, Ordering::Relaxed);
        taken
    }

    /// One look at every lane from `start`: the first free one not retired.
    fn try_take(&self, start: usize) -> Option<LaneGuard<'_>> {
        let n = self.slots.len();
        (0..n).find_map(|i| {
            let lane = (start + i) % n;
            let slot = match self.slots[lane].0.try_lock() {
                Ok(slot) => slot,
                // A panic while a lane was held left nothing half-updated in it (the
                // transaction's rollback ran first): the lane is usable.
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => return None,
            };
            (!slot.retired).then(|| self.guard(lane, slot))
        })
    }

    /// Wakes a waiter, if any, after a lane was unlocked (given back or retired).
    fn wake(&self, all: bool) {
        // Dekker: the unlock before, then this load (see the module docs).
        fence(Ordering::SeqCst);
        if self.waiting.0.load(Ordering::Relaxed) == 0 {
            return;
        }
        // Between a waiter's look and its wait it holds this lock: taking it here
        // means the waiter waits already (or has not looked yet, and will see).
        let _held = self.wait_lock.0.lock().unwrap_or_else(|p| p.into_inner());
        if all {
            self.lane_freed.notify_all();
        } else {
            self.lane_freed.notify_one();
        }
    }

    fn guard<'a>(&'a self, lane: usize, slot: MutexGuard<'a, Slot>) -> LaneGuard<'a> {
        let lane = lane as u32;
        remember(lane);
        LaneGuard {
            set: self,
            lane,
            slot: Some(slot),
            retired: false,
        }
    }
}

fn lock(m: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A lane held for one transaction. Dropping it gives the lane back unchanged (a
/// transaction that never ran); [`LaneGuard::give_back`] and
/// [`LaneGuard::retire`] end the ones that did.
#[derive(Debug)]
pub(crate) struct LaneGuard<'a> {
    set: &'a LaneSet,
    lane: u32,
    /// `Some` until the guard drops (the lane is unlocked before waiters are woken).
    slot: Option<MutexGuard<'a, Slot>>,
    /// Retired: every waiter is woken, to notice when no lane can come back.
    retired: bool,
}

impl LaneGuard<'_> {
    fn slot(&mut self) -> &mut Slot {
        match &mut self.slot {
            Some(slot) => slot,
            None => unreachable!("the slot is taken only when the guard drops"),
        }
    }

    /// The lane's number.
    pub(crate) fn lane(&self) -> u32 {
        self.lane
    }

    /// The TID the transaction on this lane uses.
    pub(crate) fn tid(&mut self) -> u64 {
        self.slot().next_tid
    }

    /// The lane's buffers, for its transaction.
    pub(crate) fn take_scratch(&mut self) -> Box<Scratch> {
        std::mem::take(&mut self.slot().scratch)
    }

    /// Gives the lane back after its transaction ended with a durable final state
    /// (committed, or rolled back), with the buffers. `wrote`: the transaction wrote
    /// to the lane (a record or its state word), so its TID is spent. One that wrote
    /// nothing left no trace, and the next transaction uses its TID again: a run of
    /// transactions that write nothing must not carry a lane's TIDs rounds past its
    /// last durable one, where a reopening's floor would not see them.
    pub(crate) fn give_back(mut self, wrote: bool, scratch: Box<Scratch>) {
        let stride = self.set.stride;
        let slot = self.slot();
        if wrote {
            slot.next_tid += stride;
        }
        slot.scratch = scratch;
    }

    /// Takes the lane out of service until the log is reopened: its transaction is
    /// in doubt, and only recovery may decide it.
    pub(crate) fn retire(mut self) {
        self.slot().retired = true;
        self.set.retired.fetch_add(1, Ordering::Release);
        self.retired = true;
    }
}

impl Drop for LaneGuard<'_> {
    fn drop(&mut self) {
        // Unlock first: a waiter woken before it would find the lane still held.
        drop(self.slot.take());
        self.set.wake(self.retired);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    #[test]
    fn a_thread_comes_back_to_its_lane() {
        let set = LaneSet::new([0, 1, 2, 3]);
        let first = set.take().expect("lane").lane();
        for _ in 0..10 {
            let g = set.take().expect("lane");
            assert_eq!(g.lane(), first);
            g.give_back(true, Box::default());
        }
    }

    #[test]
    fn a_tid_moves_on_only_past_a_transaction_that_wrote() {
        let set = LaneSet::new([2, 3]);
        let mut g = set.take().expect("lane");
        let (lane, tid) = (g.lane(), g.tid());
        g.give_back(false, Box::default());
        let mut g = set.take().expect("lane");
        assert_eq!(
            (g.lane(), g.tid()),
            (lane, tid),
            "nothing written: same TID"
        );
        g.give_back(true, Box::default());
        let mut g = set.take().expect("lane");
        assert_eq!((g.lane(), g.tid()), (lane, tid + 2), "one round on");
        drop(g);
        let mut g = set.take().expect("lane");
        assert_eq!(g.tid(), tid + 2, "a guard dropped unused spends nothing");
    }

    #[test]
    fn busy_lanes_are_skipped_and_a_waiter_gets_the_first_given_back() {
        let set = Arc::new(LaneSet::new([0, 1]));
        let a = set.take().expect("a");
        let b = set.take().expect("b");
        assert_ne!(a.lane(), b.lane());
        let barrier = Arc::new(Barrier::new(2));
        let waiter = {
            let (set, barrier) = (Arc::clone(&set), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                set.take().map(|g| g.lane()).expect("a lane comes back")
            })
        };
        barrier.wait();
        let given = a.lane();
        a.give_back(true, Box::default());
        let got = waiter.join().expect("waiter");
        // Whichever lane it waited at first, only the one given back came free.
        assert_eq!(got, given);
        drop(b);
    }

    #[test]
    fn with_every_lane_retired_there_is_no_lane() {
        let set = Arc::new(LaneSet::new([0, 1]));
        let a = set.take().expect("a");
        let b = set.take().expect("b");
        let waiter = {
            let set = Arc::clone(&set);
            std::thread::spawn(move || set.take().map(|g| g.lane()))
        };
        a.retire();
        b.retire();
        let r = waiter.join().expect("waiter");
        assert!(matches!(r, Err(TxError::NoLane)), "{r:?}");
        assert!(matches!(set.take(), Err(TxError::NoLane)));
    }
}

/// Loom models of the hand-off: no wake-up is lost, a lane is never held twice, and
/// waiters learn when every lane is retired. Run with
/// `RUSTFLAGS="--cfg loom" cargo test -p pmem-core --lib --release loom_tests`.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;

    /// Takes a lane, checks nobody else holds it, gives it back.
    fn use_a_lane(set: &LaneSet, held: &[AtomicBool]) {
        let g = set.take().expect("a lane");
        let lane = g.lane() as usize;
        assert!(
            !held[lane].swap(true, Ordering::SeqCst),
            "lane {lane} held twice"
        );
        held[lane].store(false, Ordering::SeqCst);
        g.give_back(true, Box::default());
    }

    #[test]
    fn loom_tests_three_threads_share_two_lanes() {
        loom::model(|| {
            let set = Arc::new(LaneSet::new([0, 1]));
            let held: Arc<[AtomicBool; 2]> =
                Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (set, held) = (Arc::clone(&set), Arc::clone(&held));
                    loom::thread::spawn(move || use_a_lane(&set, &held[..]))
                })
                .collect();
            use_a_lane(&set, &held[..]);
            for t in threads {
                t.join().expect("thread");
            }
        });
    }

    #[test]
    fn loom_tests_a_waiter_wakes_when_the_one_lane_comes_back() {
        loom::model(|| {
            let set = Arc::new(LaneSet::new([0]));
            let held: Arc<[AtomicBool; 1]> = Arc::new([AtomicBool::new(false)]);
            let other = {
                let (set, held) = (Arc::clone(&set), Arc::clone(&held));
                loom::thread::spawn(move || use_a_lane(&set, &held[..]))
            };
            use_a_lane(&set, &held[..]);
            other.join().expect("thread");
        });
    }

    #[test]
    fn loom_tests_a_waiter_learns_the_last_lane_retired() {
        loom::model(|| {
            let set = Arc::new(LaneSet::new([0]));
            let g = set.take().expect("the lane");
            let waiter = {
                let set = Arc::clone(&set);
                loom::thread::spawn(move || set.take().map(|g| g.lane()).is_err())
            };
            g.retire();
            assert!(
                waiter.join().expect("waiter"),
                "no lane after the last retired"
            );
        });
    }
}
