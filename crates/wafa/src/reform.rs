//! The reform operation and its daemon.
//!
//! After many frees, pages hold free units behind their clock position, or a
//! maximum segment larger than the cached `S_MS`. Reform recomputes a bucket's pages
//! when the bucket's average free units exceed its index (`TF_k.avg > k`), restarts
//! each page's clock at its maximum segment (preferring one at or after the current
//! position, so the rotation continues), backs the cache up to the page metadata,
//! and moves the page to its proper bucket. The daemon holds the lock for one pass;
//! allocation and free wait at most that long.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use pmem_core::PoolError;

use crate::buckets::BUCKETS;
use crate::heap::{Inner, ReformMode};
use crate::state::{Page, State};

impl Inner {
    /// One reform pass over every bucket whose average free units exceed its index.
    pub fn reform_all(&self, s: &mut State) -> Result<(), PoolError> {
        let mut wrote = false;
        for k in 0..BUCKETS {
            let pages = s.buckets.pages(k);
            if pages.is_empty() {
                continue;
            }
            let free_units: u64 = pages
                .iter()
                .map(|&p| match s.pages[p as usize] {
                    Page::Divided { c_fu, .. } => u64::from(c_fu),
                    _ => 0,
                })
                .sum();
            // TF_k.avg > k, without division.
            if free_units <= k as u64 * pages.len() as u64 {
                continue;
            }
            for p in pages {
                let pos = match s.pages[p as usize] {
                    Page::Divided { pos, .. } => u32::from(pos),
                    _ => continue,
                };
                s.reform_page(p, pos);
                self.write_meta(s, p)?;
                wrote = true;
            }
        }
        if wrote {
            self.pool.drain()?;
        }
        s.frees_since_reform = 0;
        Ok(())
    }
}

/// The background reform thread.
pub(crate) struct Daemon {
    handle: JoinHandle<()>,
}

impl Daemon {
    /// Starts the daemon; it holds only a weak reference, so dropping the allocator
    /// stops it.
    pub fn start(inner: &Arc<Inner>) -> std::io::Result<Daemon> {
        let weak: Weak<Inner> = Arc::downgrade(inner);
        let handle = std::thread::Builder::new()
            .name("wafa-reform".into())
            .spawn(move || run(weak))?;
        Ok(Daemon { handle })
    }

    /// Waits for the thread to end (after `stop` was set and it was woken).
    pub fn join(self) {
        let _ = self.handle.join();
    }
}

fn run(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.stop.load(Ordering::Acquire) {
            return;
        }
        let ReformMode::Daemon { frees } = inner.opts.reform else {
            return;
        };
        let s = inner.lock();
        let (mut s, _) = inner
            .wake
            .wait_timeout_while(s, Duration::from_millis(20), |s| {
                s.frees_since_reform < frees && !inner.stop.load(Ordering::Acquire)
            })
            .unwrap_or_else(|p| p.into_inner());
        if inner.stop.load(Ordering::Acquire) {
            return;
        }
        if s.frees_since_reform > 0 {
            if let Err(e) = inner.reform_all(&mut s) {
                tracing::warn!(error = %e, "wafa reform failed");
            }
        }
    }
}
