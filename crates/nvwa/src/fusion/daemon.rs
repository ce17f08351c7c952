//! [`Daemon`]: the kpmemd analog, a thread that runs one policy round per period.
//!
//! The paper's kpmemd is a kernel thread woken before kswapd (§4.3). Ours sleeps
//! for its period, runs [`FusionHeap::round`] and sleeps again; pressure events
//! between periods are handled on the allocation path itself (see
//! [`super::heap`]) and, with [`Daemon::spawn_with_trigger`], by the kernel's PSI
//! trigger ([`PsiTrigger`]): the daemon then waits on the trigger instead of a
//! timer and runs a round as soon as tasks stall on memory (or when the period
//! ends), as memory pressure in other processes, which this heap's allocation
//! path does not see, is announced. The thread marks itself internal first
//! ([`super::mark_thread_internal`]), so nothing it allocates — the strings its
//! pressure source reads, its logs — goes through the heap it manages. A failed
//! round is logged once per run of failures and retried next period.

use std::io;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::global::mark_thread_internal;
use super::heap::FusionHeap;
use super::pressure::PsiTrigger;

/// The default period: 100 ms.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
    /// The same flag, for a daemon that waits on a PSI trigger, not the condvar.
    halted: AtomicBool,
    /// PSI events seen.
    events: AtomicU64,
}

/// The running daemon thread; stops (and joins) on [`Daemon::stop`] or drop.
#[derive(Debug)]
pub struct Daemon {
    stop: Arc<Stop>,
    thread: Option<JoinHandle<()>>,
}

impl Daemon {
    /// Starts a thread named `kpmemd` running a round of `heap` every `period`
    /// (the first at once). `heap` is anything that leads to the heap and can be
    /// sent: an `Arc<FusionHeap>`, or the `&'static FusionHeap` of a global
    /// allocator.
    pub fn spawn<H>(heap: H, period: Duration) -> io::Result<Daemon>
    where
        H: Deref<Target = FusionHeap> + Send + 'static,
    {
        Daemon::start(heap, period, None)
    }

    /// As [`Daemon::spawn`], also woken by `trigger`: a round runs at each PSI
    /// event, and at the latest every `period` (which also bounds how long
    /// [`Daemon::stop`] waits).
    pub fn spawn_with_trigger<H>(
        heap: H,
        period: Duration,
        trigger: PsiTrigger,
    ) -> io::Result<Daemon>
    where
        H: Deref<Target = FusionHeap> + Send + 'static,
    {
        Daemon::start(heap, period, Some(trigger))
    }

    fn start<H>(heap: H, period: Duration, trigger: Option<PsiTrigger>) -> io::Result<Daemon>
    where
        H: Deref<Target = FusionHeap> + Send + 'static,
    {
        let stop = Arc::new(Stop::default());
        let theirs = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("kpmemd".into())
            .spawn(move || run(&heap, &theirs, period, trigger.as_ref()))?;
        Ok(Daemon {
            stop,
            thread: Some(thread),
        })
    }

    /// PSI events the daemon has seen (0 without a trigger).
    pub fn psi_events(&self) -> u64 {
        self.stop.events.load(Ordering::Relaxed)
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.halted.store(true, Ordering::Release);
        if let Ok(mut stopped) = self.stop.stopped.lock() {
            *stopped = true;
        }
        self.stop.wake.notify_all();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("kpmemd panicked");
            }
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.halt();
    }
}

fn run(heap: &FusionHeap, stop: &Stop, period: Duration, trigger: Option<&PsiTrigger>) {
    mark_thread_internal();
    let mut failing = false;
    loop {
        match heap.round() {
            Ok(_) => failing = false,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "kpmemd: round failed; retrying every period");
                }
                failing = true;
            }
        }
        if let Some(t) = trigger {
            if stop.halted.load(Ordering::Acquire) {
                return;
            }
            match t.wait(period) {
                Ok(true) => {
                    stop.events.fetch_add(1, Ordering::Relaxed);
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "kpmemd: PSI trigger failed; sleeping a period");
                    std::thread::sleep(period);
                }
            }
            if stop.halted.load(Ordering::Acquire) {
                return;
            }
            continue;
        }
        let Ok(stopped) = stop.stopped.lock() else {
            return;
        };
        if *stopped {
            return;
        }
        let Ok((stopped, _)) = stop.wake.wait_timeout(stopped, period) else {
            return;
        };
        if *stopped {
            return;
        }
    }
}
