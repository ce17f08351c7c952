//! A store with an installed snapshot, staged at `<store>.incoming`, and how it
//! takes the store's place: one rename for a list pool, two for a WAL directory (a
//! crash between them is finished by [`recover_wal_swap`] on the next open).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::paths::{aside_path, staging_path, sync_dir};
use super::StagedStore;
use crate::storage::error::{Result, StoreError};
use crate::storage::list::ListStore;
use crate::storage::store::{HardState, Store};
use crate::storage::wal::{WalOptions, WalStore};

/// A list pool with an installed snapshot at `<store>.incoming`.
pub(super) struct StagedList {
    pub(super) store: Option<ListStore>,
    pub(super) staging: PathBuf,
    pub(super) path: PathBuf,
}

impl StagedStore for StagedList {
    fn commit(mut self: Box<Self>, hard_state: HardState) -> Result<Arc<dyn Store>> {
        let Some(store) = self.store.take() else {
            return Err(StoreError::Invalid("the staged pool is gone".into()));
        };
        if let Err(e) = store.set_hard_state(hard_state) {
            drop(store);
            let _ = std::fs::remove_file(&self.staging);
            return Err(e);
        }
        // The pool keeps its mapping and lock across the rename (same inode).
        std::fs::rename(&self.staging, &self.path)?;
        sync_dir(&self.path)?;
        Ok(Arc::new(store))
    }
}

impl Drop for StagedList {
    fn drop(&mut self) {
        if let Some(store) = self.store.take() {
            drop(store);
            let _ = std::fs::remove_file(&self.staging);
        }
    }
}

/// A WAL directory with an installed snapshot at `<store>.incoming`.
pub(super) struct StagedWal {
    pub(super) store: Option<WalStore>,
    pub(super) staging: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) opts: WalOptions,
}

impl StagedStore for StagedWal {
    fn commit(mut self: Box<Self>, hard_state: HardState) -> Result<Arc<dyn Store>> {
        let Some(store) = self.store.take() else {
            return Err(StoreError::Invalid("the staged directory is gone".into()));
        };
        let set = store.set_hard_state(hard_state);
        drop(store);
        if let Err(e) = set {
            let _ = std::fs::remove_dir_all(&self.staging);
            return Err(e);
        }
        let old = aside_path(&self.dir);
        // The staged directory's own entry is durable before the old store is moved
        // aside, so no crash leaves the old copy alone.
        sync_dir(&self.staging)?;
        // Two renames: a crash between them leaves `dir` missing and both siblings
        // present; `recover_wal_swap` finishes the swap on open.
        std::fs::rename(&self.dir, &old)?;
        std::fs::rename(&self.staging, &self.dir)?;
        sync_dir(&self.dir)?;
        std::fs::remove_dir_all(&old)?;
        Ok(Arc::new(WalStore::open(&self.dir, &self.opts)?))
    }
}

impl Drop for StagedWal {
    fn drop(&mut self) {
        if let Some(store) = self.store.take() {
            drop(store);
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

/// Finishes a WAL directory swap that a crash interrupted (see [`StagedStore::commit`]
/// of the WAL engine); called before opening a WAL store.
pub fn recover_wal_swap(dir: &Path) -> Result<()> {
    let staging = staging_path(dir);
    let old = aside_path(dir);
    if !dir.exists() && staging.exists() && old.exists() {
        tracing::warn!(dir = %dir.display(), "finishing an interrupted snapshot installation");
        std::fs::rename(&staging, dir)?;
        sync_dir(dir)?;
    }
    if old.exists() && dir.exists() {
        std::fs::remove_dir_all(&old)?;
    }
    if staging.exists() && dir.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    if !dir.exists() && old.exists() {
        return Err(StoreError::Corrupt(format!(
            "{} is missing and only its old copy remains",
            dir.display()
        )));
    }
    Ok(())
}
