//! A background thread that runs a task periodically until stopped (the list
//! store's sync timer and background compactor).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A periodic background task; stopped (and joined) by [`Ticker::stop`] or on drop.
pub(crate) struct Ticker {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Runs `task` every `interval` on a thread named `name`. If the thread cannot
    /// be started, logs it and returns a ticker that does nothing.
    pub fn start(
        name: &str,
        interval: Duration,
        mut task: impl FnMut() + Send + 'static,
    ) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    std::thread::park_timeout(interval);
                    if !flag.load(Ordering::Acquire) {
                        task();
                    }
                }
            })
            .map_err(|e| tracing::warn!(thread = name, error = %e, "could not start a background thread"))
            .ok();
        Ticker { stop, handle }
    }

    /// Stops the thread and waits for it.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop();
    }
}
