//! The collector: a background thread that keeps a heap's fragmentation ratio
//! down with the FFCCD paper's trigger policy (§6: a compaction starts when the
//! ratio passes 1.5 and aims at 1.25; relaxed, 1.7 and 1.5).
//!
//! A [`Collector`] owns its thread and either an `Arc` of the heap
//! ([`Collector::start`]) or a borrow of it inside a [`std::thread::scope`]
//! ([`Collector::start_scoped`]). At every interval, or when woken
//! ([`Collector::wake`]), it samples the ratio ([`DefragHeap::stats`]); above the
//! [`Trigger`]'s start it runs compactions ([`DefragHeap::begin_compaction`] and
//! [`crate::Compaction::finish`], the protocol its [`CompactOptions`] name) beside
//! the program's transactions, one after another, until the ratio is at or below
//! the target, a compaction finds nothing to move or does not lower the ratio, or
//! the collector is stopped. [`Collector::stop`] finishes the compaction in
//! progress, joins the thread and returns the [`CollectorReport`];
//! [`Collector::report`] reads it while the collector runs.
//!
//! An error of one round (the media, a full pool) is counted and logged, not
//! fatal: the collector tries again at the next sample. A compaction the program
//! started itself makes the collector skip its round ([`DefragError::Busy`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Scope, ScopedJoinHandle};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use pmem_core::PersistentAllocator;

use crate::heap::DefragHeap;
use crate::protocol::CompactOptions;
use crate::DefragError;

/// When the collector compacts: above `start`, down to `target` (ratios of
/// footprint over live bytes, the paper's Eq. 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trigger {
    start: f64,
    target: f64,
}

/// A [`Trigger::custom`] that makes no sense.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TriggerError {
    /// A ratio is NaN or infinite.
    #[error("trigger ratios must be finite numbers (start {start}, target {target})")]
    NotFinite {
        /// The start given.
        start: f64,
        /// The target given.
        target: f64,
    },
    /// The target is below 1: no heap's footprint is below its live bytes.
    #[error("trigger target {0} is below 1 (the footprint never is below the live bytes)")]
    TargetBelowOne(f64),
    /// The start is not above the target: every compaction would start another.
    #[error("trigger start {start} must be above its target {target}")]
    StartNotAboveTarget {
        /// The start given.
        start: f64,
        /// The target given.
        target: f64,
    },
}

impl Trigger {
    /// The paper's normal policy: start above 1.5, compact down to 1.25.
    pub const fn normal() -> Trigger {
        Trigger {
            start: 1.5,
            target: 1.25,
        }
    }

    /// The paper's relaxed policy: start above 1.7, compact down to 1.5.
    pub const fn relaxed() -> Trigger {
        Trigger {
            start: 1.7,
            target: 1.5,
        }
    }

    /// A policy of one's own: compactions start above `start` and aim at
    /// `target`. Both finite, `target >= 1` and `start > target`.
    pub fn custom(start: f64, target: f64) -> Result<Trigger, TriggerError> {
        if !start.is_finite() || !target.is_finite() {
            return Err(TriggerError::NotFinite { start, target });
        }
        if target < 1.0 {
            return Err(TriggerError::TargetBelowOne(target));
        }
        if start <= target {
            return Err(TriggerError::StartNotAboveTarget { start, target });
        }
        Ok(Trigger { start, target })
    }

    /// The ratio above which a compaction starts.
    pub const fn start(&self) -> f64 {
        self.start
    }

    /// The ratio compactions aim at.
    pub const fn target(&self) -> f64 {
        self.target
    }
}

impl Default for Trigger {
    fn default() -> Self {
        Trigger::normal()
    }
}

/// How a [`Collector`] runs.
#[derive(Clone, Debug)]
pub struct CollectorOptions {
    /// The policy.
    pub trigger: Trigger,
    /// The compactions' options (protocol, eADR, plan size); their target is the
    /// trigger's.
    pub compact: CompactOptions,
    /// Time between two samples of the ratio; `None`: only when woken
    /// ([`Collector::wake`]).
    pub interval: Option<Duration>,
}

impl CollectorOptions {
    /// `trigger`, default compactions (Espresso), a sample every 50 ms.
    pub fn new(trigger: Trigger) -> CollectorOptions {
        CollectorOptions {
            trigger,
            compact: CompactOptions::new(),
            interval: Some(Duration::from_millis(50)),
        }
    }

    /// The compactions' options (their target is replaced by the trigger's).
    pub fn compact(mut self, compact: CompactOptions) -> CollectorOptions {
        self.compact = compact;
        self
    }

    /// Time between two samples (`None`: only when woken).
    pub fn interval(mut self, interval: Option<Duration>) -> CollectorOptions {
        self.interval = interval;
        self
    }
}

impl Default for CollectorOptions {
    fn default() -> Self {
        CollectorOptions::new(Trigger::normal())
    }
}

/// What a collector has done so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CollectorReport {
    /// Samples of the ratio taken.
    pub samples: u64,
    /// Compactions finished.
    pub compactions: u64,
    /// Objects they moved.
    pub moved: u64,
    /// The ratio at the last sample (after the last compaction, if one ran
    /// since); 0 before the first sample.
    pub last_ratio: f64,
    /// Nanoseconds the compactions held the heap lock in all (transactions wait).
    pub locked_ns: u64,
    /// The longest planning pause of one compaction
    /// ([`crate::CompactReport::plan_pause_ns`]).
    pub plan_pause_max_ns: u64,
    /// Rounds that failed (a sample or a compaction returned an error).
    pub errors: u64,
    /// The last of those errors, as text.
    pub last_error: Option<String>,
}

/// A [`Collector`] that could not be started or ended badly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectorError {
    /// The thread could not be spawned.
    #[error("cannot spawn the collector thread: {0}")]
    Spawn(#[from] std::io::Error),
    /// The thread panicked (a bug: rounds' errors are counted, not raised).
    #[error("the collector thread panicked")]
    Panicked,
}

/// What the handle and the thread share.
#[derive(Default)]
struct State {
    /// (stop asked, wake-up asked).
    ctl: Mutex<(bool, bool)>,
    cv: Condvar,
    report: Mutex<CollectorReport>,
    compacting: AtomicBool,
}

impl State {
    fn stopping(&self) -> bool {
        self.ctl.lock().0
    }

    /// Waits for the next round; `false` once stopped.
    fn wait(&self, interval: Option<Duration>) -> bool {
        let mut ctl = self.ctl.lock();
        if !ctl.0 && !ctl.1 {
            match interval {
                Some(d) => {
                    let _ = self.cv.wait_for(&mut ctl, d);
                }
                None => {
                    while !ctl.0 && !ctl.1 {
                        self.cv.wait(&mut ctl);
                    }
                }
            }
        }
        ctl.1 = false;
        !ctl.0
    }

    fn failed(&self, e: &DefragError) {
        tracing::warn!(error = %e, "collector round failed");
        let mut r = self.report.lock();
        r.errors += 1;
        r.last_error = Some(e.to_string());
    }
}

/// The collector's thread, owned or scoped.
enum Thread<'s> {
    Owned(JoinHandle<()>),
    Scoped(ScopedJoinHandle<'s, ()>),
}

/// A background thread that compacts a heap by a [`Trigger`] (see the
/// [module](self)). Dropping it stops it (its report is lost; call
/// [`Collector::stop`] to get it).
#[must_use = "a collector is stopped when dropped"]
pub struct Collector<'s> {
    state: Arc<State>,
    thread: Option<Thread<'s>>,
}

impl std::fmt::Debug for Collector<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector")
            .field("report", &*self.state.report.lock())
            .finish()
    }
}

impl Collector<'static> {
    /// Starts a collector on `heap`, on a thread of its own.
    pub fn start<A: PersistentAllocator + 'static>(
        heap: Arc<DefragHeap<A>>,
        opts: CollectorOptions,
    ) -> Result<Collector<'static>, CollectorError>
    where
        DefragHeap<A>: Send + Sync,
    {
        let state = Arc::new(State::default());
        let s = Arc::clone(&state);
        let handle = std::thread::Builder::new()
            .name("defrag-collector".into())
            .spawn(move || run(&heap, &opts, &s))?;
        Ok(Collector {
            state,
            thread: Some(Thread::Owned(handle)),
        })
    }
}

impl<'s> Collector<'s> {
    /// Starts a collector on `heap` on a thread of `scope` (the heap borrowed,
    /// as the scope's other threads borrow it).
    pub fn start_scoped<'env, A: PersistentAllocator + 'static>(
        scope: &'s Scope<'s, 'env>,
        heap: &'env DefragHeap<A>,
        opts: CollectorOptions,
    ) -> Result<Collector<'s>, CollectorError>
    where
        DefragHeap<A>: Sync,
    {
        let state = Arc::new(State::default());
        let s = Arc::clone(&state);
        let handle = std::thread::Builder::new()
            .name("defrag-collector".into())
            .spawn_scoped(scope, move || run(heap, &opts, &s))?;
        Ok(Collector {
            state,
            thread: Some(Thread::Scoped(handle)),
        })
    }

    /// Asks for a sample now (and a compaction if the ratio is above the start),
    /// without waiting for the interval.
    pub fn wake(&self) {
        self.state.ctl.lock().1 = true;
        self.state.cv.notify_all();
    }

    /// What the collector has done so far.
    pub fn report(&self) -> CollectorReport {
        self.state.report.lock().clone()
    }

    /// Whether a compaction is running now.
    pub fn compacting(&self) -> bool {
        self.state.compacting.load(Ordering::Acquire)
    }

    /// Stops the collector: the compaction in progress, if any, is finished
    /// (no further one starts), the thread joined, and the report returned.
    pub fn stop(mut self) -> Result<CollectorReport, CollectorError> {
        self.join()?;
        Ok(self.report())
    }

    fn join(&mut self) -> Result<(), CollectorError> {
        self.state.ctl.lock().0 = true;
        self.state.cv.notify_all();
        let joined = match self.thread.take() {
            Some(Thread::Owned(h)) => h.join(),
            Some(Thread::Scoped(h)) => h.join(),
            None => Ok(()),
        };
        joined.map_err(|_| CollectorError::Panicked)
    }
}

impl Drop for Collector<'_> {
    fn drop(&mut self) {
        if self.join().is_err() {
            tracing::error!("the collector thread panicked");
        }
    }
}

/// The collector's thread: a round per interval or wake-up until stopped.
fn run<A: PersistentAllocator + 'static>(
    heap: &DefragHeap<A>,
    opts: &CollectorOptions,
    state: &State,
) {
    tracing::debug!(trigger = ?opts.trigger, "collector started");
    while state.wait(opts.interval) {
        if let Err(e) = round(heap, opts, state) {
            state.failed(&e);
        }
    }
    tracing::debug!("collector stopped");
}

/// One sample and, above the trigger's start, compactions until the target.
fn round<A: PersistentAllocator + 'static>(
    heap: &DefragHeap<A>,
    opts: &CollectorOptions,
    state: &State,
) -> Result<(), DefragError> {
    let mut ratio = sample(heap, state)?;
    if ratio <= opts.trigger.start {
        return Ok(());
    }
    let compact = opts.compact.target(opts.trigger.target);
    while ratio > opts.trigger.target && !state.stopping() {
        let started = match heap.begin_compaction(&compact) {
            Ok(c) => c,
            // The program runs a compaction of its own: nothing to do now.
            Err(DefragError::Busy) => return Ok(()),
            Err(e) => return Err(e),
        };
        let Some(c) = started else {
            return Ok(());
        };
        state.compacting.store(true, Ordering::Release);
        let done = c.finish();
        state.compacting.store(false, Ordering::Release);
        let r = done?;
        {
            let mut rep = state.report.lock();
            rep.compactions += 1;
            rep.moved += r.moved;
            rep.locked_ns += r.locked_ns;
            rep.plan_pause_max_ns = rep.plan_pause_max_ns.max(r.plan_pause_ns);
        }
        tracing::info!(
            moved = r.moved,
            before = r.ratio_before,
            "collector compacted"
        );
        let now = sample(heap, state)?;
        // No progress (the mutators fragment faster than one compaction
        // gains): wait for the next sample rather than spin.
        if r.moved == 0 || now >= ratio {
            return Ok(());
        }
        ratio = now;
    }
    Ok(())
}

/// The ratio now, recorded in the report.
fn sample<A: PersistentAllocator + 'static>(
    heap: &DefragHeap<A>,
    state: &State,
) -> Result<f64, DefragError> {
    let ratio = heap.stats()?.frag_ratio;
    let mut r = state.report.lock();
    r.samples += 1;
    r.last_ratio = ratio;
    Ok(ratio)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_policies() {
        assert_eq!(
            (Trigger::normal().start(), Trigger::normal().target()),
            (1.5, 1.25)
        );
        assert_eq!(
            (Trigger::relaxed().start(), Trigger::relaxed().target()),
            (1.7, 1.5)
        );
        assert_eq!(Trigger::default(), Trigger::normal());
        let t = Trigger::custom(2.0, 1.0).expect("valid");
        assert_eq!((t.start(), t.target()), (2.0, 1.0));
    }

    #[test]
    fn nonsense_triggers_are_typed_errors() {
        assert!(matches!(
            Trigger::custom(f64::NAN, 1.25),
            Err(TriggerError::NotFinite { .. })
        ));
        assert!(matches!(
            Trigger::custom(1.5, f64::NAN),
            Err(TriggerError::NotFinite { .. })
        ));
        assert!(matches!(
            Trigger::custom(f64::INFINITY, 1.25),
            Err(TriggerError::NotFinite { .. })
        ));
        assert_eq!(
            Trigger::custom(1.5, 0.9),
            Err(TriggerError::TargetBelowOne(0.9))
        );
        assert_eq!(
            Trigger::custom(1.25, 1.25),
            Err(TriggerError::StartNotAboveTarget {
                start: 1.25,
                target: 1.25
            })
        );
        assert!(matches!(
            Trigger::custom(1.2, 1.4),
            Err(TriggerError::StartNotAboveTarget { .. })
        ));
    }
}
