//! Where a replica's store lives, and how it is replaced by a snapshot.
//!
//! [`crate::Store::install_snapshot`] needs an empty store, but a lagging follower
//! holds an old one. The provider builds a fresh store beside the current one,
//! installs the snapshot into it (durable on return), carries the hard state over,
//! and only then makes it *the* store with one atomic rename. A crash before the
//! rename leaves the old store (the leader will send the snapshot again); a crash
//! after it leaves the new one. Nothing in between is ever opened.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::list::{ListOptions, ListStore};
use crate::store::{SnapshotItem, SnapshotMeta, Store};
use crate::wal::{WalOptions, WalStore};

/// Opens a replica's store and replaces it by an installed snapshot.
pub trait StoreProvider: Send {
    /// Opens the store (creating it if it does not exist).
    fn open(&mut self) -> Result<Arc<dyn Store>>;

    /// A snapshot is about to arrive: a provider may start building the empty
    /// store [`StoreProvider::replace`] will fill (in the background), so that cost
    /// overlaps the transfer. The default does nothing.
    fn prepare(&mut self) {}

    /// Builds a store holding exactly the snapshot `meta`/`items` and the hard state
    /// of `current`, makes it durable, and puts it in `current`'s place. On success
    /// `current` must not be written again (the caller drops it); on failure it is
    /// untouched and still the store.
    fn replace(
        &mut self,
        current: &dyn Store,
        meta: SnapshotMeta,
        items: &mut dyn Iterator<Item = SnapshotItem>,
    ) -> Result<Arc<dyn Store>>;
}

/// The two engines on files.
#[derive(Clone, Debug)]
pub enum Engine {
    /// The persistent list in a pool file of `pool_size` bytes.
    List {
        /// The pool file.
        path: PathBuf,
        /// Its size when created.
        pool_size: u64,
        /// Page size, durability mode, group size, compaction interval.
        opts: ListOptions,
    },
    /// The write-ahead log and snapshot files in a directory.
    Wal {
        /// The directory.
        dir: PathBuf,
        /// Group size and snapshot interval.
        opts: WalOptions,
    },
}

/// A [`StoreProvider`] over files.
#[derive(Debug)]
pub struct FileStoreProvider {
    engine: Engine,
    /// The list engine's staging pool, being created by [`StoreProvider::prepare`].
    staged: Option<std::thread::JoinHandle<Result<ListStore>>>,
}

impl FileStoreProvider {
    /// A provider for `engine`.
    pub fn new(engine: Engine) -> FileStoreProvider {
        FileStoreProvider {
            engine,
            staged: None,
        }
    }

    /// The staging pool: the one `prepare` started, or a new one.
    fn staging_list(
        &mut self,
        staging: &Path,
        pool_size: u64,
        opts: &ListOptions,
    ) -> Result<ListStore> {
        if let Some(handle) = self.staged.take() {
            match handle.join() {
                Ok(Ok(store)) => return Ok(store),
                Ok(Err(e)) => tracing::warn!("preparing the snapshot's pool failed: {e}"),
                Err(_) => tracing::warn!("preparing the snapshot's pool panicked"),
            }
        }
        if staging.exists() {
            std::fs::remove_file(staging)?;
        }
        ListStore::create(staging, pool_size, opts)
    }

    /// The engine's configuration.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

/// Where a snapshot is installed before it replaces the store: `<store>.incoming`.
fn staging_path(store: &Path) -> PathBuf {
    sibling(store, ".incoming")
}

/// Where a WAL store is moved aside while the staged one takes its place:
/// `<store>.old`.
fn aside_path(store: &Path) -> PathBuf {
    sibling(store, ".old")
}

/// `path` with `suffix` appended to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(suffix);
    path.with_file_name(name)
}

/// Makes a rename in `dir` durable.
fn sync_dir(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

impl StoreProvider for FileStoreProvider {
    fn open(&mut self) -> Result<Arc<dyn Store>> {
        match &self.engine {
            Engine::List {
                path,
                pool_size,
                opts,
            } => {
                // A staging pool left by a crash during a replacement is garbage.
                let staging = staging_path(path);
                if staging.exists() {
                    tracing::warn!(path = %staging.display(), "removing an unfinished snapshot installation");
                    std::fs::remove_file(&staging)?;
                }
                if path.exists() {
                    Ok(Arc::new(ListStore::open(path, opts)?))
                } else {
                    Ok(Arc::new(ListStore::create(path, *pool_size, opts)?))
                }
            }
            Engine::Wal { dir, opts } => {
                recover_wal_swap(dir)?;
                Ok(Arc::new(WalStore::open(dir, opts)?))
            }
        }
    }

    fn prepare(&mut self) {
        let Engine::List {
            path,
            pool_size,
            opts,
        } = &self.engine
        else {
            return;
        };
        if self.staged.is_some() {
            return;
        }
        let (staging, size, opts) = (staging_path(path), *pool_size, opts.clone());
        self.staged = Some(std::thread::spawn(move || {
            if staging.exists() {
                std::fs::remove_file(&staging)?;
            }
            ListStore::create(&staging, size, &opts)
        }));
    }

    fn replace(
        &mut self,
        current: &dyn Store,
        meta: SnapshotMeta,
        items: &mut dyn Iterator<Item = SnapshotItem>,
    ) -> Result<Arc<dyn Store>> {
        let hard_state = current.hard_state();
        match &self.engine {
            Engine::List {
                path,
                pool_size,
                opts,
            } => {
                let (path, pool_size, opts) = (path.clone(), *pool_size, opts.clone());
                let staging = staging_path(&path);
                let fresh = self.staging_list(&staging, pool_size, &opts)?;
                let installed = fresh
                    .install_snapshot(meta, items)
                    .and_then(|()| fresh.set_hard_state(hard_state));
                if let Err(e) = installed {
                    drop(fresh);
                    let _ = std::fs::remove_file(&staging);
                    return Err(e);
                }
                // The pool keeps its mapping and lock across the rename (same inode).
                std::fs::rename(&staging, &path)?;
                sync_dir(&path)?;
                Ok(Arc::new(fresh))
            }
            Engine::Wal { dir, opts } => {
                // The WAL engine is a directory: stage a whole new one and swap.
                let staging = staging_path(dir);
                let old = aside_path(dir);
                for d in [&staging, &old] {
                    if d.exists() {
                        std::fs::remove_dir_all(d)?;
                    }
                }
                {
                    let fresh = WalStore::open(&staging, opts)?;
                    fresh.install_snapshot(meta, items)?;
                    fresh.set_hard_state(hard_state)?;
                }
                // The staged directory's own entry is durable before the old store
                // is moved aside, so no crash leaves the old copy alone.
                sync_dir(&staging)?;
                // Two renames: a crash between them leaves `dir` missing and both
                // siblings present; `recover_wal_swap` finishes the swap on open.
                std::fs::rename(dir, &old)?;
                std::fs::rename(&staging, dir)?;
                sync_dir(dir)?;
                std::fs::remove_dir_all(&old)?;
                Ok(Arc::new(WalStore::open(dir, opts)?))
            }
        }
    }
}

/// Finishes a WAL directory swap that a crash interrupted (see
/// [`FileStoreProvider::replace`]); called before opening a WAL store.
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
