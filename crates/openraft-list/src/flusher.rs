//! The flusher: a thread that makes appended groups durable and only then fires
//! their `IOFlushed` callbacks, where a sync waits for a device.
//!
//! On persistent memory (or a pool forced to act as it) a sync is a few
//! cache-line flushes and one fence: `append` does it inline, and a hand-off to
//! another thread would only add latency. Where a sync waits for a device (an
//! `msync` of the list's file, the WAL's `fdatasync`), `append` returns once the
//! entries are written and hands the callback to this thread: openraft goes on
//! appending the next entries while the device works (the list lets appends run
//! beside a sync), and one sync covers every group handed over meanwhile. A
//! callback is handed over only after its entries are appended, and the sync
//! starts after it is received, so the sync covers them: no callback fires before
//! its entries are durable. Callbacks fire in the order of their appends.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Weak};

use openraft::storage::IOFlushed;

use crate::store::Inner;
use crate::types::TypeConfig;

/// The sending side, held by the store.
pub(crate) type FlushQueue = Sender<IOFlushed<TypeConfig>>;

/// Starts the thread for the store `inner` (held weakly: the thread ends when the
/// store's last clone is gone and the queue closes).
pub(crate) fn spawn(
    inner: Weak<Inner>,
    rx: Receiver<IOFlushed<TypeConfig>>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("openraft-list-flush".into())
        .spawn(move || run(inner, rx))
        .map(drop)
}

fn run(inner: Weak<Inner>, rx: Receiver<IOFlushed<TypeConfig>>) {
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        group.extend(rx.try_iter());
        let Some(inner) = inner.upgrade() else {
            for cb in group {
                cb.io_completed(Err(std::io::Error::other(
                    "the store was closed before the sync",
                )));
            }
            return;
        };
        let store = Arc::clone(&crate::store::read_lock(&inner.store));
        let result = store.sync().map_err(crate::log::io_err);
        for cb in group {
            let r = match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
            };
            fire(&inner, cb, r);
        }
        if let Err(e) = result {
            tracing::error!(error = %e, "sync failed: the appended groups are not durable");
        }
    }
}

/// Fires `cb` with `r`, then holds the thread for the test pause, if one is set
/// ([`crate::ListRaftStore::set_ack_pause`]): a crash test sets it so that whoever
/// waits for the callback runs before this thread does anything more, which makes
/// a callback fired before its sync visible to the crash simulator.
fn fire(inner: &Inner, cb: IOFlushed<TypeConfig>, r: std::io::Result<()>) {
    cb.io_completed(r);
    let pause = inner
        .ack_pause_us
        .load(std::sync::atomic::Ordering::Relaxed);
    if pause > 0 {
        std::thread::sleep(std::time::Duration::from_micros(pause));
    }
}
