//! Group commit of `Msync`-mode drains: concurrent drainers share one sync.
//!
//! A database's write-ahead log pays one device flush for every transaction that
//! committed while the previous flush was running; this does the same for
//! [`crate::Pool::drain`]. Syncs are numbered by *generation*. A drain that begins
//! when generation `g` is the last one started needs generation `g + 1`: whatever it
//! flushed may have missed `g`'s take of the pending ranges, but cannot miss
//! `g + 1`'s, which starts after the drain began. So:
//!
//! * the drain's *target* is `started + 1`, read under the state lock as it begins;
//! * if no sync is running, it leads generation `target` at once: it marks the
//!   generation started, drops the state lock, runs the sync (which takes every
//!   pending range), then publishes the generation as completed, with its result;
//! * if a sync is running, it waits; when that sync completes, one of the waiters
//!   leads the next generation, which covers every drain that waited for it.
//!
//! A drain returns when `completed >= target`, never before: everything any thread
//! flushed before it began was taken by generation `target` (or an earlier one whose
//! ranges were synced or put back and retaken). A failed generation's error goes to
//! every member (every drain whose target it was), not only its leader; the sync
//! itself puts the ranges back on the pending list, for a later drain to retry.
//!
//! N concurrent drainers therefore pay two syncs per round at most (the running one
//! and the next), not N. The state lock is held only to read and publish generation
//! numbers, never across a sync; the pending list has its own lock, so flushes never
//! wait for a sync either.
//!
//! A loom model (`loom_tests` below, under `--cfg loom`) checks the promise above:
//! whatever the interleaving of drainers and leaders, a drain returns only after a
//! sync that took every range its thread flushed before the drain began.

use crate::sync::{yield_now, Condvar, Mutex, MutexGuard};

use crate::PoolError;

/// The error of a failed generation, kept until every member has read it
/// (`PoolError` is not `Clone`: members get an equal copy, rebuilt from this).
#[derive(Debug)]
struct Failure {
    /// The generation that failed.
    generation: u64,
    /// Members that have not yet read it.
    unread: usize,
    /// The operation that failed (`msync`, `fdatasync`, ...).
    op: &'static str,
    /// The OS error number, when the failure has one.
    raw_os_error: Option<i32>,
    /// The error's kind and text, for failures without an OS error number.
    kind: std::io::ErrorKind,
    /// The error's text.
    message: String,
}

impl Failure {
    fn of(generation: u64, unread: usize, e: &PoolError) -> Failure {
        let (op, raw_os_error, kind) = match e {
            PoolError::Io { op, source, .. } => (*op, source.raw_os_error(), source.kind()),
            _ => ("drain", None, std::io::ErrorKind::Other),
        };
        let message = match e {
            PoolError::Io { source, .. } => source.to_string(),
            other => other.to_string(),
        };
        Failure {
            generation,
            unread,
            op,
            raw_os_error,
            kind,
            message,
        }
    }

    /// A copy of the failure for one member.
    fn replay(&self, path: &std::path::Path) -> PoolError {
        let source = match self.raw_os_error {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::new(self.kind, self.message.clone()),
        };
        PoolError::io(self.op, path, source)
    }
}

/// Generation numbers and the failures not yet read by every member.
#[derive(Debug, Default)]
struct State {
    /// The last generation started (0: none yet).
    started: u64,
    /// The last generation completed; `started - 1` while a sync runs, else `started`.
    completed: u64,
    /// Drains whose target is `started + 1` (the next generation's members).
    next_members: usize,
    /// Failed generations whose members have not all read the error.
    failures: Vec<Failure>,
    /// The last generation started had more than one member: drains run
    /// concurrently, and a leader gives the others a moment to join (see `drain`).
    concurrent: bool,
}

impl State {
    fn syncing(&self) -> bool {
        self.started != self.completed
    }

    /// The result a member of `generation` returns (the generation has completed).
    fn result_for(&mut self, generation: u64, path: &std::path::Path) -> Result<(), PoolError> {
        let Some(i) = self
            .failures
            .iter()
            .position(|f| f.generation == generation)
        else {
            return Ok(());
        };
        let e = self.failures[i].replay(path);
        self.failures[i].unread -= 1;
        if self.failures[i].unread == 0 {
            self.failures.swap_remove(i);
        }
        Err(e)
    }
}

/// The group-commit state of one pool.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    /// Signalled whenever a generation completes.
    completed: Condvar,
}

impl Default for GroupCommit {
    fn default() -> Self {
        GroupCommit {
            state: Mutex::new(State::default()),
            completed: Condvar::new(),
        }
    }
}

impl GroupCommit {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Poisoning: every update of the state is made whole before the lock is
        // released, and a panicking leader completes its generation (see `Lead`), so
        // a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drains waiting for the next generation (for tests that stage a group).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().next_members
    }

    /// The last generation started (for tests).
    #[cfg(test)]
    pub(crate) fn started(&self) -> u64 {
        self.lock().started
    }

    /// Runs a drain: returns once a generation that began after this call has
    /// completed, leading it (calling `sync`) if no other drain does. `sync` must
    /// make every pending range durable, or put the ranges it took back and fail.
    /// `path` names the pool file in the errors replayed to the other members.
    pub(crate) fn drain(
        &self,
        path: &std::path::Path,
        sync: impl FnOnce() -> Result<(), PoolError>,
    ) -> Result<(), PoolError> {
        let mut st = self.lock();
        let target = st.started + 1;
        st.next_members += 1;
        let mut gathered = false;
        loop {
            if st.completed >= target {
                return st.result_for(target, path);
            }
            if !st.syncing() && st.concurrent && !gathered {
                // Drains have been arriving together: before closing the group,
                // let the threads that are runnable flush and join it (a commit
                // delay of one yield). On two cores eight drainers otherwise form
                // groups of about four; the drain's own sync costs 50 µs or more,
                // the yield about one. The generation is not started yet, so the
                // drains that arrive meanwhile have this target too.
                gathered = true;
                drop(st);
                yield_now();
                st = self.lock();
                continue;
            }
            if !st.syncing() {
                // Nothing runs and `target` is not complete: `started == completed ==
                // target - 1` (generations only start one past the last completed).
                debug_assert_eq!(st.started + 1, target);
                st.started = target;
                let members = std::mem::take(&mut st.next_members);
                st.concurrent = members > 1;
                drop(st);
                let mut lead = Lead {
                    group: self,
                    generation: target,
                    members,
                    done: false,
                };
                let r = sync();
                lead.finish(r.as_ref().err());
                return r;
            }
            st = self.completed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A leader's generation: completed when the sync returns, or, should it panic, on
/// unwinding, so the waiting members are never stranded.
struct Lead<'a> {
    group: &'a GroupCommit,
    generation: u64,
    /// Drains whose target is this generation, the leader included.
    members: usize,
    done: bool,
}

impl Lead<'_> {
    /// Publishes the generation as completed, with its failure for the other members.
    fn finish(&mut self, failure: Option<&PoolError>) {
        let mut st = self.group.lock();
        if let Some(e) = failure {
            // The leader returns its own error; the others read this copy.
            if self.members > 1 {
                st.failures
                    .push(Failure::of(self.generation, self.members - 1, e));
            }
        }
        st.completed = self.generation;
        self.done = true;
        drop(st);
        self.group.completed.notify_all();
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        if !self.done {
            let e = PoolError::io(
                "drain",
                std::path::Path::new(""),
                std::io::Error::other("the drain leading this group commit panicked"),
            );
            // The leader unwinds with the panic; every other member gets the error.
            self.finish(Some(&e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_lone_drain_leads_and_returns_its_result() {
        let g = GroupCommit::default();
        let calls = AtomicUsize::new(0);
        g.drain(Path::new("p"), || {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .expect("ok");
        let e = g
            .drain(Path::new("p"), || {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(PoolError::io(
                    "msync",
                    Path::new("p"),
                    std::io::Error::from_raw_os_error(libc::EIO),
                ))
            })
            .expect_err("the failure is returned");
        assert!(matches!(e, PoolError::Io { op: "msync", .. }), "{e}");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        let st = g.lock();
        assert_eq!((st.started, st.completed, st.next_members), (2, 2, 0));
        assert!(
            st.failures.is_empty(),
            "a lone leader's failure is not kept"
        );
    }

    #[test]
    fn a_panicking_leader_does_not_strand_the_next_drains() {
        let g = Arc::new(GroupCommit::default());
        let (in_tx, in_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let leader = {
            let g = Arc::clone(&g);
            std::thread::spawn(move || {
                g.drain(Path::new("p"), move || {
                    let _ = in_tx.send(());
                    let _ = go_rx.recv();
                    panic!("injected");
                })
            })
        };
        in_rx.recv().expect("the leader syncs");
        // A drain that begins during the panicking generation 1 waits for
        // generation 2: the unwinding leader must complete generation 1, or the
        // waiter would wait for ever.
        let waiter = {
            let g = Arc::clone(&g);
            std::thread::spawn(move || g.drain(Path::new("p"), || Ok(())))
        };
        while g.lock().next_members == 0 {
            std::thread::yield_now();
        }
        let _ = go_tx.send(());
        assert!(leader.join().is_err(), "the leader's panic propagates");
        waiter
            .join()
            .expect("waiter")
            .expect("generation 2 succeeds");
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use std::path::Path;

    /// What the model's device holds: ranges flushed and not yet synced, and
    /// ranges a sync has made durable (a range is a number).
    #[derive(Default)]
    struct Device {
        pending: Mutex<Vec<u32>>,
        durable: Mutex<Vec<u32>>,
    }

    impl Device {
        /// The sync a leader runs: takes every pending range and makes it durable.
        fn sync(&self) -> Result<(), PoolError> {
            let taken = std::mem::take(&mut *self.pending.lock().expect("pending"));
            self.durable.lock().expect("durable").extend(taken);
            Ok(())
        }
    }

    /// Flushes range `id`, drains, and checks the range is durable.
    fn flush_and_drain(g: &GroupCommit, dev: &Device, id: u32) {
        dev.pending.lock().expect("pending").push(id);
        g.drain(Path::new("model"), || dev.sync()).expect("drain");
        assert!(
            dev.durable.lock().expect("durable").contains(&id),
            "a drain returned before a sync took range {id}, flushed before it began"
        );
    }

    #[test]
    fn loom_tests_a_drain_returns_only_after_a_sync_took_its_flush() {
        loom::model(|| {
            let g = Arc::new(GroupCommit::default());
            let dev = Arc::new(Device::default());
            let other = {
                let (g, dev) = (Arc::clone(&g), Arc::clone(&dev));
                loom::thread::spawn(move || flush_and_drain(&g, &dev, 1))
            };
            flush_and_drain(&g, &dev, 0);
            other.join().expect("thread");
        });
    }

    #[test]
    fn loom_tests_second_rounds_are_covered_too() {
        // Two rounds a thread: every interleaving with up to two preemptions (the
        // unbounded search takes minutes; the one-round model above is unbounded).
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let g = Arc::new(GroupCommit::default());
            let dev = Arc::new(Device::default());
            let other = {
                let (g, dev) = (Arc::clone(&g), Arc::clone(&dev));
                loom::thread::spawn(move || {
                    flush_and_drain(&g, &dev, 1);
                    flush_and_drain(&g, &dev, 3);
                })
            };
            flush_and_drain(&g, &dev, 0);
            flush_and_drain(&g, &dev, 2);
            other.join().expect("thread");
        });
    }
}
