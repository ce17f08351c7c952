//! [`ListRaftStore`]: the one object openraft gets as its log store and its state
//! machine, over a raft-nvm store (the list or the WAL), and how it is opened.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use raft_nvm::replica::{
    CompactionCounts, CompactionPolicy, Compactor, Engine, FileStoreProvider, StartMode,
    StoreProvider,
};
use raft_nvm::store::Store;
use raft_nvm::{ListOptions, WalOptions};

use crate::codec;
use crate::error::OpenraftListError;
use crate::meta::SideMeta;
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
    /// The file of the adapter's own facts (`None`: kept in DRAM only).
    pub(crate) meta_path: Option<PathBuf>,
    /// Serialises writers of that file.
    pub(crate) meta_lock: Mutex<()>,
    /// Where `append` hands its callback when a sync waits for a device (`None`:
    /// it syncs inline). See [`crate::flusher`].
    pub(crate) flush_queue: Option<Mutex<crate::flusher::FlushQueue>>,
    /// A pause of the flusher after each callback it fires (tests only).
    pub(crate) ack_pause_us: std::sync::atomic::AtomicU64,
    /// When a purge compacts the list (see [`ListRaftStore::set_compaction_policy`]).
    pub(crate) compactor: Mutex<Compactor>,
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
    ///
    /// Refuses options under which the engine compacts by itself
    /// (`ListOptions::compact_interval`, `WalOptions::snapshot_every`): compaction
    /// is openraft's `purge` here, which keeps the applied entries openraft may
    /// still read back; a timer would drop them.
    pub fn open_engine(
        engine: Engine,
        start: StartMode,
    ) -> Result<ListRaftStore, OpenraftListError> {
        match &engine {
            Engine::List { opts, .. } if opts.compact_interval.is_some() => {
                return Err(OpenraftListError::Range(
                    "ListOptions::compact_interval must be None: openraft's purge compacts".into(),
                ))
            }
            Engine::Wal { opts, .. } if opts.snapshot_every != 0 => {
                return Err(OpenraftListError::Range(
                    "WalOptions::snapshot_every must be 0: openraft's purge compacts".into(),
                ))
            }
            _ => {}
        }
        let path = engine.store_path().to_path_buf();
        let existed = engine.has_store()?;
        let mut provider = FileStoreProvider::with_start(engine, start);
        let store = provider.open()?;
        let snap_dir = sibling(&path, ".openraft-snapshots");
        let meta_path = sibling(&path, ".openraft-meta");
        if !existed && meta_path.exists() {
            // Left by a store that is gone: its purged id means nothing here.
            tracing::warn!(path = %meta_path.display(), "removing the facts of a store that is gone");
            std::fs::remove_file(&meta_path).map_err(|source| OpenraftListError::File {
                path: meta_path.clone(),
                source,
            })?;
        }
        let mut meta = SideMeta::load(&meta_path)?;
        std::fs::create_dir_all(&snap_dir).map_err(|source| OpenraftListError::File {
            path: snap_dir.clone(),
            source,
        })?;
        // The current snapshot's file stays; any other is a leftover of a build or
        // an installation that a crash interrupted.
        if let Some((_, name)) = &meta.snapshot {
            if !snap_dir.join(name).is_file() {
                tracing::warn!(file = %name, "the current snapshot's file is gone");
                meta.snapshot = None;
            }
        }
        let keep = meta.snapshot.as_ref().map(|(_, n)| n.clone());
        let entries = std::fs::read_dir(&snap_dir).map_err(|source| OpenraftListError::File {
            path: snap_dir.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            if Some(entry.file_name().to_string_lossy().into_owned()) != keep {
                let p = entry.path();
                if let Err(e) = std::fs::remove_file(&p) {
                    tracing::warn!(path = %p.display(), error = %e, "could not remove a stale snapshot file");
                }
            }
        }
        let flusher = store.sync_waits_for_io();
        let s = Self::assemble(
            store,
            Some(provider),
            path,
            Some(snap_dir),
            Some(meta_path),
            flusher,
        )?;
        {
            let store = s.store();
            if let Some(p) = meta.purged {
                // Purged entries were applied before they were purged: the applied
                // index (DRAM, back at the compaction base after a restart) is
                // raised to them again.
                store.set_applied(p.index + 1);
                s.set_purged_at_least(p);
            }
        }
        if let (Some((m, name)), Some(dir)) = (meta.snapshot, &s.inner.snap_dir) {
            *lock(&s.inner.snapshot) = Some(CurrentSnapshot {
                meta: m,
                path: dir.join(name),
            });
        }
        Ok(s)
    }

    /// The adapter over a raft-nvm store opened by the caller (a pool of its own,
    /// a simulated one in a crash test). It has no files beside it: building or
    /// installing a snapshot is refused; everything else works as over a store the
    /// constructors above opened.
    pub fn from_store(store: Arc<dyn Store>) -> Result<ListRaftStore, OpenraftListError> {
        let flusher = store.sync_waits_for_io();
        Self::assemble(store, None, PathBuf::new(), None, None, flusher)
    }

    /// [`ListRaftStore::from_store`], choosing whether appends are made durable
    /// by a flusher thread (`true`) or inline (`false`) instead of by what
    /// [`Store::sync_waits_for_io`] says (crash tests exercise both paths).
    pub fn from_store_with(
        store: Arc<dyn Store>,
        flusher: bool,
    ) -> Result<ListRaftStore, OpenraftListError> {
        Self::assemble(store, None, PathBuf::new(), None, None, flusher)
    }

    fn assemble(
        store: Arc<dyn Store>,
        provider: Option<FileStoreProvider>,
        path: PathBuf,
        snap_dir: Option<PathBuf>,
        meta_path: Option<PathBuf>,
        flusher: bool,
    ) -> Result<ListRaftStore, OpenraftListError> {
        let purged = codec::base_log_id(&*store)?;
        let (tx, rx) = std::sync::mpsc::channel();
        let waits = flusher;
        let inner = Arc::new(Inner {
            store: RwLock::new(store),
            provider: provider.map(Mutex::new),
            path,
            purged: Mutex::new(purged),
            snapshot: Mutex::new(None),
            snap_dir,
            snap_seq: std::sync::atomic::AtomicU64::new(0),
            meta_path,
            meta_lock: Mutex::new(()),
            flush_queue: waits.then(|| Mutex::new(tx)),
            ack_pause_us: std::sync::atomic::AtomicU64::new(0),
            compactor: Mutex::new(Compactor::new(CompactionPolicy::default())),
        });
        if waits {
            crate::flusher::spawn(Arc::downgrade(&inner), rx).map_err(|source| {
                OpenraftListError::File {
                    path: inner.path.clone(),
                    source,
                }
            })?;
        }
        Ok(ListRaftStore { inner })
    }

    /// For crash tests: the flusher thread pauses for `pause` after each callback
    /// it fires, so the waiter runs first and a callback fired before its sync
    /// shows. Zero (the default) for anything else.
    #[doc(hidden)]
    pub fn set_ack_pause(&self, pause: std::time::Duration) {
        let us = u64::try_from(pause.as_micros()).unwrap_or(u64::MAX);
        self.inner
            .ack_pause_us
            .store(us, std::sync::atomic::Ordering::Relaxed);
    }

    /// Chooses when openraft's `purge` compacts the list: raft-nvm's
    /// [`CompactionPolicy`], as its own replicas use it (the default: once the pool
    /// is half full and a quarter of it is estimated dead, or 85 % full whatever
    /// the estimate). A purge always hides the purged entries and makes the purged
    /// id durable; the policy only paces the copying of the live records, which
    /// costs a pass over all of them and frees nothing in an insert-only store.
    /// The WAL, which has no capacity, compacts at every purge.
    pub fn set_compaction_policy(&self, policy: CompactionPolicy) {
        *lock(&self.inner.compactor) = Compactor::new(policy);
    }

    /// What the compactions purges ran did (the list; the WAL's are not counted).
    pub fn compaction_counts(&self) -> CompactionCounts {
        lock(&self.inner.compactor).counts()
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
        read_lock(&self.inner.store)
    }
}

/// `path` with `suffix` appended to its file name.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// List options for the adapter: `mode` as given, the rest raft-nvm's defaults but
/// for the group size, which is `u32::MAX`: the adapter makes each openraft append
/// durable with one sync of its own, so the store need not sync within it.
pub fn list_options(mode: pmem_core::ModeRequest) -> ListOptions {
    let mut opts = ListOptions {
        mode,
        ..ListOptions::default()
    };
    opts.store.group = u32::MAX;
    opts
}

/// WAL options for the adapter: one `fdatasync` per openraft append (the
/// adapter's), none within it.
pub fn wal_options() -> WalOptions {
    let mut opts = WalOptions::default();
    opts.store.group = u32::MAX;
    opts
}

/// Locks `m`, through poisoning (the data is plain state, valid after a panic).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl ListRaftStore {
    /// Writes the adapter's facts (purged id, current snapshot) to its file, if it
    /// has one: durable on return.
    pub(crate) fn persist_meta(&self) -> Result<(), OpenraftListError> {
        let Some(path) = &self.inner.meta_path else {
            return Ok(());
        };
        let _one = lock(&self.inner.meta_lock);
        let snapshot = lock(&self.inner.snapshot).as_ref().and_then(|c| {
            c.path
                .file_name()
                .map(|n| (c.meta.clone(), n.to_string_lossy().into_owned()))
        });
        SideMeta {
            purged: self.purged(),
            snapshot,
        }
        .store(path)
    }
}

/// Read-locks `l`, through poisoning.
pub(crate) fn read_lock<T: ?Sized>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    match l.read() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
