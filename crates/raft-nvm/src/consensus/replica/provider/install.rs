//! A snapshot installed as its chunks arrive: [`ThreadedInstall`] runs the
//! installation on its own thread, fed chunk by chunk through a rendezvous channel,
//! and [`ChunkGauge`] counts the chunks held in DRAM (at most two).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::{SnapshotInstall, StagedStore};
use crate::storage::error::{Result, StoreError};
use crate::storage::store::{HardState, SnapshotItem, SnapshotMeta, Store};

/// How many snapshot chunks an installation holds in DRAM: pushed and not yet
/// written (a statistic for tests and logs). [`ThreadedInstall`] holds at most two.
#[derive(Debug, Default)]
pub struct ChunkGauge {
    held: AtomicUsize,
    peak: AtomicUsize,
    chunks: AtomicUsize,
}

impl ChunkGauge {
    /// Chunks held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// The most chunks held at once since the gauge was made.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Acquire)
    }

    /// Chunks pushed since the gauge was made.
    pub fn chunks(&self) -> usize {
        self.chunks.load(Ordering::Acquire)
    }

    fn acquire(&self) {
        let now = self.held.fetch_add(1, Ordering::AcqRel) + 1;
        self.peak.fetch_max(now, Ordering::AcqRel);
        self.chunks.fetch_add(1, Ordering::AcqRel);
    }

    fn release(&self) {
        self.held.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A [`SnapshotInstall`] running on its own thread: the thread builds the staging
/// store and runs [`crate::storage::store::Store::install_snapshot`] over an iterator that takes
/// chunks from a rendezvous channel, so [`SnapshotInstall::push`] returns once the
/// thread took the chunk — at most one chunk being written and one handed over.
/// Abandoning it makes the iterator yield an item no snapshot accepts, so the
/// installation fails and the staging store is discarded; dropping it waits for the
/// thread (a later installation reuses the staging path).
pub struct ThreadedInstall {
    tx: Option<SyncSender<Vec<SnapshotItem>>>,
    thread: Option<JoinHandle<Result<Box<dyn StagedStore>>>>,
    finished: Arc<AtomicBool>,
    gauge: Arc<ChunkGauge>,
}

impl std::fmt::Debug for ThreadedInstall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadedInstall")
            .field("running", &self.thread.is_some())
            .field("held", &self.gauge.held())
            .finish_non_exhaustive()
    }
}

impl ThreadedInstall {
    /// Starts a thread that runs `stage(meta, items)`: build a staging store,
    /// install `items` (the pushed chunks, in order) into it, and return it staged
    /// — or clean it up and fail. `gauge` counts the chunks held.
    pub fn spawn<F>(meta: SnapshotMeta, gauge: Arc<ChunkGauge>, stage: F) -> Result<ThreadedInstall>
    where
        F: FnOnce(
                SnapshotMeta,
                &mut dyn Iterator<Item = SnapshotItem>,
            ) -> Result<Box<dyn StagedStore>>
            + Send
            + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(0);
        let finished = Arc::new(AtomicBool::new(false));
        let mut feed = Feed {
            rx,
            current: Vec::new().into_iter(),
            holding: false,
            finished: Arc::clone(&finished),
            gauge: Arc::clone(&gauge),
        };
        let thread = std::thread::Builder::new()
            .name("snapshot-install".into())
            .spawn(move || {
                let staged = stage(meta, &mut feed);
                feed.drop_current();
                staged
            })?;
        Ok(ThreadedInstall {
            tx: Some(tx),
            thread: Some(thread),
            finished,
            gauge,
        })
    }

    /// Waits for the thread and returns what it staged.
    fn join(&mut self) -> Result<Box<dyn StagedStore>> {
        self.tx = None;
        match self.thread.take() {
            Some(handle) => handle.join().unwrap_or_else(|_| {
                Err(StoreError::Invalid(
                    "the snapshot installation thread panicked".into(),
                ))
            }),
            None => Err(StoreError::Invalid(
                "the snapshot installation already ended".into(),
            )),
        }
    }
}

impl SnapshotInstall for ThreadedInstall {
    fn push(&mut self, items: Vec<SnapshotItem>) -> Result<()> {
        let Some(tx) = &self.tx else {
            return Err(StoreError::Invalid(
                "the snapshot installation already ended".into(),
            ));
        };
        self.gauge.acquire();
        if tx.send(items).is_err() {
            // The thread stopped early: its installation failed.
            self.gauge.release();
            return match self.join() {
                Err(e) => Err(e),
                Ok(_) => Err(StoreError::Invalid(
                    "the snapshot installation ended before its last chunk".into(),
                )),
            };
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>, hard_state: HardState) -> Result<Arc<dyn Store>> {
        self.finished.store(true, Ordering::Release);
        self.join()?.commit(hard_state)
    }
}

impl Drop for ThreadedInstall {
    fn drop(&mut self) {
        if self.thread.is_some() {
            // Abandoned: the feed fails the installation, which cleans up.
            let _ = self.join();
        }
    }
}

/// The items of the chunks pushed into a [`ThreadedInstall`], on its thread.
struct Feed {
    rx: Receiver<Vec<SnapshotItem>>,
    current: std::vec::IntoIter<SnapshotItem>,
    /// `current` came from a chunk the gauge counts.
    holding: bool,
    finished: Arc<AtomicBool>,
    gauge: Arc<ChunkGauge>,
}

impl Feed {
    /// Frees the chunk being consumed (its buffer) and stops counting it.
    fn drop_current(&mut self) {
        self.current = Vec::new().into_iter();
        if std::mem::take(&mut self.holding) {
            self.gauge.release();
        }
    }
}

impl Iterator for Feed {
    type Item = SnapshotItem;

    fn next(&mut self) -> Option<SnapshotItem> {
        loop {
            if let Some(item) = self.current.next() {
                return Some(item);
            }
            self.drop_current();
            match self.rx.recv() {
                Ok(chunk) => {
                    self.current = chunk.into_iter();
                    self.holding = true;
                }
                Err(_) if self.finished.load(Ordering::Acquire) => return None,
                Err(_) => {
                    // Abandoned before the last chunk: an item above every
                    // snapshot's index, which `SnapshotMeta::check_item` rejects,
                    // so the installation fails instead of completing a partial
                    // snapshot.
                    return Some(SnapshotItem {
                        key: Vec::new(),
                        value: Vec::new(),
                        index: u64::MAX,
                    });
                }
            }
        }
    }
}
