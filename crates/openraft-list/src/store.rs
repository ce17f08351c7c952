//! [`ListRaftStore`]: the one object openraft gets as its log store and its state
//! machine, over a raft-nvm store (the list or the WAL), and how it is opened.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use raft_nvm::replica::{Engine, FileStoreProvider, StartMode, StoreProvider};
use raft_nvm::store::Store;
use raft_nvm::{ListOptions, WalOptions};

use crate::codec;
use crate::error::OpenraftListError;
use crate::snapshot::CurrentSnapshot;
use crate::types::LogId;

/// openraft's log store, log reader, state machine and snapshot builder in one:
/// the log and the applied key-value state are one raft-nvm store (the thesis's
/// persistent list, or the WAL baseline). Cheap to clone (an `Arc` inside): give
/// one clone to `Raft::new` as the log store and another as the state machine.
#[derive(Clone)]
pub struct ListRaftStore {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for ListRaftStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListRaftStore")
            .field("engine", &self.engine_name())
            .field("path", &self.inner.path)
            .finish()
    }
}

/// What the clones share.
pub(crate) struct Inner {
    /// The store; replaced (under the write lock) when a snapshot is installed.
    pub(crate) store: RwLock<Arc<dyn Store>>,
    /// Opens the store and stages snapshot installations beside it (`None` for a
    /// store given by [`ListRaftStore::from_store`]: no snapshot installation).
    pub(crate) provider: Option<Mutex<FileStoreProvider>>,
    /// The pool file or WAL directory.
    pub(crate) path: PathBuf,
    /// The last purged log id openraft asked for. Reads hide the entries at or
    /// below it at once; the list drops their records when compaction reaches
    /// them (only applied records can go), so after a restart the purged id is
    /// the store's compaction base, never more than what was purged.
    pub(crate) purged: Mutex<Option<LogId>>,
    /// The last snapshot built or installed (its file).
    pub(crate) snapshot: Mutex<Option<CurrentSnapshot>>,
    /// Where snapshot files are written (`None`: no snapshots).
    pub(crate) snap_dir: Option<PathBuf>,
    /// Numbers snapshot files.
    pub(crate) snap_seq: std::sync::atomic::AtomicU64,
}

impl ListRaftStore {
    /// Creates a list store: a pool file of `bytes` bytes at `path` (refused if
    /// `path` exists). `opts.mode` chooses persistent memory
    /// ([`pmem_core::ModeRequest::ForceDax`] on a DAX file system, or to make a
    /// plain file act as one) or a file made durable by `msync`.
    pub fn create_list(
        path: impl AsRef<Path>,
        bytes: u64,
        opts: &ListOptions,
    ) -> Result<ListRaftStore, OpenraftListError> {
        let path = path.as_ref();
        if path.exists() {
            return Err(OpenraftListError::File {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "store exists"),
            });
        }
        let engine = Engine::List {
            path: path.to_path_buf(),
            pool_size: bytes,
            opts: opts.clone(),
        };
        Self::open_engine(engine, StartMode::Bootstrap)
    }

    /// Opens the list store at `path` (refused if there is none).
    pub fn open_list(
        path: impl AsRef<Path>,
        opts: &ListOptions,
    ) -> Result<ListRaftStore, OpenraftListError> {
        let path = path.as_ref();
        let pool_size = std::fs::metadata(path)
            .map_err(|source| OpenraftListError::File {
                path: path.to_path_buf(),
                source,
            })?
            .len();
        let engine = Engine::List {
            path: path.to_path_buf(),
            pool_size,
            opts: opts.clone(),
        };
        Self::open_engine(engine, StartMode::Existing)
    }

    /// Opens the WAL store in directory `dir`, creating an empty one if there is
    /// none.
    pub fn open_wal(
        dir: impl AsRef<Path>,
        opts: &WalOptions,
    ) -> Result<ListRaftStore, OpenraftListError> {
        let engine = Engine::Wal {
            dir: dir.as_ref().to_path_buf(),
            opts: opts.clone(),
        };
        Self::open_engine(engine, StartMode::Bootstrap)
    }

    /// Opens (or, as `start` allows, creates) the store `engine` describes.
    pub fn open_engine(
        engine: Engine,
        start: StartMode,
    ) -> Result<ListRaftStore, OpenraftListError> {
        let path = engine.store_path().to_path_buf();
        let mut provider = FileStoreProvider::with_start(engine, start);
        let store = provider.open()?;
        let snap_dir = sibling(&path, ".openraft-snapshots");
        // Snapshot files of an earlier run are not current: openraft builds anew.
        if snap_dir.exists() {
            std::fs::remove_dir_all(&snap_dir).map_err(|source| OpenraftListError::File {
                path: snap_dir.clone(),
                source,
            })?;
        }
        std::fs::create_dir_all(&snap_dir).map_err(|source| OpenraftListError::File {
            path: snap_dir.clone(),
            source,
        })?;
        Self::assemble(store, Some(provider), path, Some(snap_dir))
    }

    /// The adapter over a raft-nvm store opened by the caller (a pool of its own,
    /// a simulated one in a crash test). It has no files beside it: building or
    /// installing a snapshot is refused; everything else works as over a store the
    /// constructors above opened.
    pub fn from_store(store: Arc<dyn Store>) -> Result<ListRaftStore, OpenraftListError> {
        Self::assemble(store, None, PathBuf::new(), None)
    }

    fn assemble(
        store: Arc<dyn Store>,
        provider: Option<FileStoreProvider>,
        path: PathBuf,
        snap_dir: Option<PathBuf>,
    ) -> Result<ListRaftStore, OpenraftListError> {
        let purged = codec::base_log_id(&*store)?;
        Ok(ListRaftStore {
            inner: Arc::new(Inner {
                store: RwLock::new(store),
                provider: provider.map(Mutex::new),
                path,
                purged: Mutex::new(purged),
                snapshot: Mutex::new(None),
                snap_dir,
                snap_seq: std::sync::atomic::AtomicU64::new(0),
            }),
        })
    }

    /// The value of `key` in the applied state (what the entries openraft applied
    /// so far wrote), `None` if it has none.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, OpenraftListError> {
        let store = self.store();
        let at = store.applied();
        Ok(store.get(&codec::user_key(key), at)?)
    }

    /// The engine's name: `list` or `wal`.
    pub fn engine_name(&self) -> &'static str {
        self.store().engine()
    }

    /// The raft-nvm store underneath (for statistics: its sync count, usage). A
    /// snapshot installation replaces it: do not keep it across one.
    pub fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.read_store())
    }

    /// The store, read-locked: no snapshot installation replaces it meanwhile.
    pub(crate) fn read_store(&self) -> std::sync::RwLockReadGuard<'_, Arc<dyn Store>> {
        match self.inner.store.read() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// `path` with `suffix` appended to its file name.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}
