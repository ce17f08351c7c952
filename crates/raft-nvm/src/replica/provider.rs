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

/// How a node treats a missing store when it starts. Whatever the mode, a store
/// that a join created and that has not caught up yet (its `<store>.joining`
/// marker is still there) opens passive again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StartMode {
    /// Open the node's store; if there is none, refuse with
    /// [`StoreError::NoStore`] and write nothing. The default: a member whose data
    /// is gone must not silently come back empty.
    #[default]
    Existing,
    /// A founding member of a new cluster: create an empty store if there is none,
    /// open the existing one otherwise (so re-running the founding command after a
    /// restart is harmless). Telling a member of a running cluster whose data is
    /// gone to bootstrap brings back the hole [`StartMode::Existing`] closes: use
    /// [`StartMode::Join`] for that.
    Bootstrap,
    /// An existing member whose data was lost: create an empty store if there is
    /// none, and keep the Raft core passive
    /// ([`crate::raft::Config::passive_until_caught_up`]) until it caught up with a
    /// leader. Over an existing store this is [`StartMode::Existing`] (passive only
    /// if an earlier join has not caught up yet).
    Join,
}

/// Opens a replica's store and replaces it by an installed snapshot.
pub trait StoreProvider: Send {
    /// Opens the store (whether one may be created depends on the provider: see
    /// [`StartMode`] for [`FileStoreProvider`]).
    fn open(&mut self) -> Result<Arc<dyn Store>>;

    /// Whether the store [`StoreProvider::open`] returned belongs to a member that
    /// joined empty and has not caught up yet ([`StartMode::Join`]): the replica
    /// then keeps its Raft core passive. The default: never.
    fn joining(&self) -> bool {
        false
    }

    /// The joining member caught up with a leader (its log durably holds the
    /// leader's commit index): the provider forgets the join, durably, so a restart
    /// no longer starts passive. The default does nothing.
    fn caught_up(&mut self) -> Result<()> {
        Ok(())
    }

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

impl Engine {
    /// Where the store lives: the list engine's pool file, the WAL engine's
    /// directory.
    pub fn store_path(&self) -> &Path {
        match self {
            Engine::List { path, .. } => path,
            Engine::Wal { dir, .. } => dir,
        }
    }

    /// Whether the store exists: the pool file, or a log, snapshot or hard-state
    /// file in the WAL directory. A WAL directory that a crash left moved aside by
    /// a snapshot swap counts ([`recover_wal_swap`] finishes the swap, or reports
    /// the damage). Reads only.
    pub fn has_store(&self) -> Result<bool> {
        match self {
            Engine::List { path, .. } => Ok(path.exists()),
            Engine::Wal { dir, .. } => {
                Ok(WalStore::exists(dir)? || (!dir.exists() && aside_path(dir).exists()))
            }
        }
    }
}

/// A [`StoreProvider`] over files.
#[derive(Debug)]
pub struct FileStoreProvider {
    engine: Engine,
    start: StartMode,
    /// The store opened last belongs to a join that has not caught up.
    joining: bool,
    /// The list engine's staging pool, being created by [`StoreProvider::prepare`].
    staged: Option<std::thread::JoinHandle<Result<ListStore>>>,
}

impl FileStoreProvider {
    /// A provider for `engine` that opens an existing store only
    /// ([`StartMode::Existing`]).
    pub fn new(engine: Engine) -> FileStoreProvider {
        FileStoreProvider::with_start(engine, StartMode::Existing)
    }

    /// A provider for `engine` that treats a missing store as `start` says.
    pub fn with_start(engine: Engine, start: StartMode) -> FileStoreProvider {
        FileStoreProvider {
            engine,
            start,
            joining: false,
            staged: None,
        }
    }

    /// Whether this provider may create a missing store, writing the join marker
    /// first for [`StartMode::Join`]; the error for [`StartMode::Existing`].
    fn may_create(&self) -> Result<()> {
        let path = self.engine.store_path();
        match self.start {
            StartMode::Existing => Err(StoreError::NoStore {
                path: path.to_path_buf(),
            }),
            StartMode::Bootstrap => {
                tracing::info!(path = %path.display(), "bootstrapping: creating an empty store");
                Ok(())
            }
            StartMode::Join => {
                tracing::info!(
                    path = %path.display(),
                    "joining: creating an empty store; no voting until caught up with a leader"
                );
                write_marker(&join_marker(path))
            }
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

/// The marker of a join that has not caught up yet: `<store>.joining`.
fn join_marker(store: &Path) -> PathBuf {
    sibling(store, ".joining")
}

/// Creates the (empty) file `path` durably.
fn write_marker(path: &Path) -> Result<()> {
    std::fs::File::create(path)?.sync_all()?;
    sync_dir(path)
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
                let exists = path.exists();
                if !exists {
                    // Before anything is written.
                    self.may_create()?;
                }
                // A staging pool left by a crash during a replacement is garbage.
                let staging = staging_path(path);
                if staging.exists() {
                    tracing::warn!(path = %staging.display(), "removing an unfinished snapshot installation");
                    std::fs::remove_file(&staging)?;
                }
                let store = if exists {
                    ListStore::open(path, opts)?
                } else {
                    ListStore::create(path, *pool_size, opts)?
                };
                self.joining = join_marker(path).exists();
                Ok(Arc::new(store))
            }
            Engine::Wal { dir, opts } => {
                if !self.engine.has_store()? {
                    self.may_create()?;
                }
                recover_wal_swap(dir)?;
                let store = WalStore::open(dir, opts)?;
                self.joining = join_marker(dir).exists();
                Ok(Arc::new(store))
            }
        }
    }

    fn joining(&self) -> bool {
        self.joining
    }

    fn caught_up(&mut self) -> Result<()> {
        if !self.joining {
            return Ok(());
        }
        let marker = join_marker(self.engine.store_path());
        match std::fs::remove_file(&marker) {
            Ok(()) => sync_dir(&marker)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        self.joining = false;
        tracing::info!(path = %marker.display(), "join complete: the store is a member's again");
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::HardState;

    fn engines(dir: &Path) -> [Engine; 2] {
        [
            Engine::List {
                path: dir.join("node1.pool"),
                pool_size: 4 << 20,
                opts: ListOptions::default(),
            },
            Engine::Wal {
                dir: dir.join("node1.wal"),
                opts: WalOptions::default(),
            },
        ]
    }

    /// Every path under `dir`, for "nothing was written" checks.
    fn listing(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).expect("read dir") {
                let p = e.expect("dir entry").path();
                if p.is_dir() {
                    todo.push(p.clone());
                }
                out.push(p);
            }
        }
        out.sort();
        out
    }

    #[test]
    fn existing_refuses_a_missing_store_and_writes_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        for engine in engines(tmp.path()) {
            let path = engine.store_path().to_path_buf();
            let mut p = FileStoreProvider::new(engine);
            match p.open() {
                Err(StoreError::NoStore { path: p }) => assert_eq!(p, path),
                Err(e) => panic!("{}: wrong error {e}", path.display()),
                Ok(_) => panic!("{}: opened a store that is not there", path.display()),
            }
            assert!(listing(tmp.path()).is_empty(), "nothing written");
        }
        // An empty WAL directory is no store either (a wiped data directory).
        let [_, wal] = engines(tmp.path());
        std::fs::create_dir(wal.store_path()).expect("mkdir");
        assert!(matches!(
            FileStoreProvider::new(wal).open(),
            Err(StoreError::NoStore { .. })
        ));
    }

    #[test]
    fn bootstrap_creates_once_then_every_mode_reopens() {
        let tmp = tempfile::tempdir().expect("tempdir");
        for engine in engines(tmp.path()) {
            assert!(!engine.has_store().expect("has_store"));
            let mut p = FileStoreProvider::with_start(engine.clone(), StartMode::Bootstrap);
            let store = p.open().expect("bootstrap creates");
            assert!(!p.joining(), "a founding member votes at once");
            store
                .set_hard_state(HardState {
                    term: 3,
                    vote: Some(1),
                })
                .expect("hard state");
            drop(store);
            assert!(engine.has_store().expect("has_store"));
            for mode in [StartMode::Existing, StartMode::Bootstrap, StartMode::Join] {
                let mut p = FileStoreProvider::with_start(engine.clone(), mode);
                let store = p.open().expect("reopen");
                assert_eq!(store.hard_state().term, 3, "{mode:?}: the same store");
                assert!(!p.joining(), "{mode:?}: not a join");
            }
        }
    }

    #[test]
    fn join_creates_a_passive_store_until_caught_up() {
        let tmp = tempfile::tempdir().expect("tempdir");
        for engine in engines(tmp.path()) {
            let marker = join_marker(engine.store_path());
            let mut p = FileStoreProvider::with_start(engine.clone(), StartMode::Join);
            let store = p.open().expect("join creates");
            assert_eq!(store.last_index(), 0);
            assert!(p.joining());
            assert!(marker.exists(), "the join is on disk");
            drop(store);
            // A restart before catching up is still a join, whatever the mode.
            for mode in [StartMode::Existing, StartMode::Bootstrap, StartMode::Join] {
                let mut p = FileStoreProvider::with_start(engine.clone(), mode);
                drop(p.open().expect("reopen"));
                assert!(p.joining(), "{mode:?}: still joining");
            }
            let mut p = FileStoreProvider::new(engine.clone());
            drop(p.open().expect("reopen"));
            p.caught_up().expect("caught up");
            assert!(!p.joining());
            assert!(!marker.exists(), "the join is over on disk");
            let mut p = FileStoreProvider::new(engine);
            drop(p.open().expect("reopen"));
            assert!(!p.joining(), "a member again");
        }
    }
}
