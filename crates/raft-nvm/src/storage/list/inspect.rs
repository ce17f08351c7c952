//! A read-only look at a list store: what `pmkit pool info` and `pmkit pool check`
//! report about it.
//!
//! Opening a store settles it (writes a new epoch); inspection runs the same
//! recovery walk — every page seal and record checksum up to the durable point,
//! the hard state against its checksum, the replay into an index — and stops
//! before settling, so the pool is never written.

use std::sync::Arc;

use pmem_core::Pool;

use super::{recover, ListStore};
use crate::storage::error::{Result, StoreError};
use crate::storage::store::{HardState, Store, StoreOptions, StoreUsage};

/// What [`ListStore::inspect`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct ListSummary {
    /// Bytes per page.
    pub page_size: u32,
    /// Pages of the pool.
    pub pages_total: u32,
    /// Pages on the used list (the rest are free).
    pub pages_used: u32,
    /// The last log index recovered.
    pub last_index: u64,
    /// The last log index known durable.
    pub durable_index: u64,
    /// The Raft hard state (term and vote).
    pub hard_state: HardState,
    /// Capacity, used and free bytes, and the index's versions.
    pub usage: StoreUsage,
}

impl ListStore {
    /// Walks and checks the store in `pool` (opened with layout [`super::LAYOUT`],
    /// read-only is enough) as [`ListStore::open`] does — the control block, the
    /// hard state's checksum, every page seal and record on the list — without
    /// writing anything: the store is not settled and is dropped unwritten.
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`] naming the damage, or the pool's error.
    pub fn inspect(pool: Pool) -> Result<ListSummary> {
        let (shared, _settle) = recover::recover(pool, &StoreOptions::default())?;
        let store = ListStore {
            shared: Arc::new(shared),
            tickers: Vec::new(),
        };
        let (used, _) = store.page_lists();
        let pages_used = u32::try_from(used.len())
            .map_err(|_| StoreError::Corrupt("more used pages than a u32 counts".into()))?;
        Ok(ListSummary {
            page_size: store.shared.geo.page_size,
            pages_total: store.page_count(),
            pages_used,
            last_index: store.last_index(),
            durable_index: store.durable_index(),
            hard_state: store.hard_state(),
            usage: store.usage(),
        })
    }
}
