//! The stores on files: [`Engine`] (a list pool or a WAL directory) and the
//! [`FileStoreProvider`] that opens, creates, joins and replaces them, with the join
//! marker that keeps a joining node passive until it caught up.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::install::{ChunkGauge, ThreadedInstall};
use super::paths::{aside_path, join_marker, staging_path, sync_dir};
use super::staged::{recover_wal_swap, StagedList, StagedWal};
use super::{SnapshotInstall, StagedStore, StartMode, StoreProvider};
use crate::storage::error::{Result, StoreError};
use crate::storage::list::{ListOptions, ListStore};
use crate::storage::store::{SnapshotMeta, Store};
use crate::storage::wal::{WalOptions, WalStore};

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

    /// Whether the store exists: the pool file, or a log, snapshot, hard-state or
    /// synced-end file in the WAL directory. A WAL directory that a crash left
    /// moved aside by a snapshot swap counts ([`recover_wal_swap`] finishes the
    /// swap, or reports the damage). Anything at the store's path that is not a
    /// regular file (list) or a directory (WAL) is refused
    /// ([`StoreError::NotRegular`]). Reads only.
    pub fn has_store(&self) -> Result<bool> {
        match self {
            Engine::List { path, .. } => crate::storage::ondisk::regular_file(path),
            Engine::Wal { dir, .. } => {
                let here = crate::storage::ondisk::directory(dir)?;
                Ok((here && WalStore::exists(dir)?)
                    || (!here && crate::storage::ondisk::directory(&aside_path(dir))?))
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
    /// Chunks held by this provider's installations.
    gauge: Arc<ChunkGauge>,
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
            gauge: Arc::default(),
        }
    }

    /// The chunks this provider's snapshot installations hold in DRAM (the peak
    /// stays at most two).
    pub fn chunk_gauge(&self) -> Arc<ChunkGauge> {
        Arc::clone(&self.gauge)
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

    /// The engine's configuration.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

/// What a join marker holds. Markers from before it are empty, and are read as
/// markers too.
const JOIN_MARKER: &[u8] = b"raft-nvm joining: no votes until caught up with a leader\n";

/// Creates the join marker `path` durably.
fn write_marker(path: &Path) -> Result<()> {
    let mut f = std::fs::File::create(path)?;
    std::io::Write::write_all(&mut f, JOIN_MARKER)?;
    f.sync_all()?;
    sync_dir(path)
}

/// Whether the join marker `path` is there. Anything there but a regular file
/// holding [`JOIN_MARKER`] (or nothing, as markers were first written) is refused:
/// a node that took garbage for a join would stay passive, and a one-node cluster
/// would never elect a leader again.
fn read_marker(path: &Path) -> Result<bool> {
    if !crate::storage::ondisk::regular_file(path)? {
        return Ok(false);
    }
    let mut bytes = Vec::new();
    // A marker is a line: read no more than one can hold, and one byte more.
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::open(path)?, JOIN_MARKER.len() as u64 + 1),
        &mut bytes,
    )?;
    if bytes.is_empty() || bytes == JOIN_MARKER {
        return Ok(true);
    }
    Err(StoreError::Corrupt(format!(
        "{}: not a join marker (it holds {} bytes of something else); remove it if this node is a member in good standing, or restart it with --join if its data was lost",
        path.display(),
        bytes.len()
    )))
}

impl StoreProvider for FileStoreProvider {
    fn open(&mut self) -> Result<Arc<dyn Store>> {
        self.open_validated(&mut |_| Ok(()))
    }

    /// Every check comes before the first write to an existing store: the kinds of
    /// the files, the join marker, the store's recovery and `check`; only then is
    /// an unfinished snapshot installation removed and the store settled. (An
    /// interrupted WAL directory swap is finished first: until then there is no
    /// directory to read.)
    fn open_validated(
        &mut self,
        check: &mut dyn FnMut(&dyn Store) -> Result<()>,
    ) -> Result<Arc<dyn Store>> {
        let exists = self.engine.has_store()?;
        let path = self.engine.store_path().to_path_buf();
        let marker = join_marker(&path);
        let staging = staging_path(&path);
        let joining = read_marker(&marker)?;
        if !exists {
            // Before anything is written.
            self.may_create()?;
        }
        let store: Arc<dyn Store> = match &self.engine {
            Engine::List {
                path,
                pool_size,
                opts,
            } => {
                crate::storage::ondisk::regular_file(&staging)?;
                let store = if exists {
                    ListStore::open_checked(path, opts, check)?
                } else {
                    let store = ListStore::create(path, *pool_size, opts)?;
                    check(&store)?;
                    store
                };
                // A staging pool left by a crash during a replacement is garbage.
                if staging.exists() {
                    tracing::warn!(path = %staging.display(), "removing an unfinished snapshot installation");
                    std::fs::remove_file(&staging)?;
                }
                Arc::new(store)
            }
            Engine::Wal { dir, opts } => {
                recover_wal_swap(dir)?;
                Arc::new(WalStore::open_checked(dir, opts, check)?)
            }
        };
        // A join creates its marker before the store: read it again.
        self.joining = joining || read_marker(&marker)?;
        Ok(store)
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

    fn begin_install(&mut self, meta: SnapshotMeta) -> Result<Box<dyn SnapshotInstall>> {
        let gauge = Arc::clone(&self.gauge);
        let install = match &self.engine {
            Engine::List {
                path,
                pool_size,
                opts,
            } => {
                let (path, size, opts) = (path.clone(), *pool_size, opts.clone());
                ThreadedInstall::spawn(meta, gauge, move |meta, items| {
                    let staging = staging_path(&path);
                    if staging.exists() {
                        std::fs::remove_file(&staging)?;
                    }
                    // At least as large as the current store, which `pmkit pool
                    // grow` may have made larger than the configured size.
                    let current = std::fs::metadata(&path).map_or(0, |m| m.len());
                    let fresh = ListStore::create(&staging, size.max(current), &opts)?;
                    let staged = StagedList {
                        store: Some(fresh),
                        staging,
                        path,
                    };
                    // On failure, dropping `staged` removes the pool.
                    if let Some(store) = &staged.store {
                        store.install_snapshot(meta, items)?;
                    }
                    Ok(Box::new(staged) as Box<dyn StagedStore>)
                })?
            }
            Engine::Wal { dir, opts } => {
                let (dir, opts) = (dir.clone(), opts.clone());
                ThreadedInstall::spawn(meta, gauge, move |meta, items| {
                    // The WAL engine is a directory: stage a whole new one.
                    let staging = staging_path(&dir);
                    for d in [&staging, &aside_path(&dir)] {
                        if d.exists() {
                            std::fs::remove_dir_all(d)?;
                        }
                    }
                    let fresh = WalStore::open(&staging, &opts)?;
                    let staged = StagedWal {
                        store: Some(fresh),
                        staging,
                        dir,
                        opts,
                    };
                    if let Some(store) = &staged.store {
                        store.install_snapshot(meta, items)?;
                    }
                    Ok(Box::new(staged) as Box<dyn StagedStore>)
                })?
            }
        };
        Ok(Box::new(install))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::store::HardState;

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
