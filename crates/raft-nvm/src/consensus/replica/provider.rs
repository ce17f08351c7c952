//! Where a replica's store lives, and how it is replaced by a snapshot.
//!
//! [`crate::storage::store::Store::install_snapshot`] needs an empty store, but a lagging follower
//! holds an old one. The provider builds a fresh store beside the current one
//! (`<store>.incoming`) and installs the snapshot into it *as its chunks arrive*: a
//! [`SnapshotInstall`] runs the installation on its own thread, fed chunk by chunk
//! through a rendezvous channel, so the follower holds at most two chunks in DRAM
//! (the one being written and the next one handed over; see [`ChunkGauge`]). After
//! the last chunk the installation is durable; the hard state is carried over and
//! only then the staged store becomes *the* store with one atomic rename. A crash
//! before the rename leaves the old store (the staging store is removed on open, and
//! the leader sends the snapshot again); a crash after it leaves the new one.
//! Nothing in between is ever opened.
//!
//! Opening checks before it writes ([`StoreProvider::open_validated`]): every path
//! is looked at before it is opened (a FIFO or a device where a file belongs is
//! refused, [`StoreError::NotRegular`]), the join marker must hold what a join
//! writes (or nothing, as the first ones did), the engine recovers its store
//! without writing, and the caller's check (the replica builds its Raft core
//! there) runs; only then does the list write its new epoch, the WAL cut its torn
//! tail, and an unfinished installation get removed. A refused start leaves the
//! store's files as it found them. (An interrupted WAL directory swap is the
//! exception: it is finished first, since until then there is no directory.)

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::storage::error::{Result, StoreError};
use crate::storage::list::{ListOptions, ListStore};
use crate::storage::store::{HardState, SnapshotItem, SnapshotMeta, Store};
use crate::storage::wal::{WalOptions, WalStore};

/// How a node treats a missing store when it starts. Whatever the mode, a store
/// that a join created and that has not caught up yet (its `<store>.joining`
/// marker is still there) opens passive again — unless the node is its cluster's
/// only voter, which has no leader to catch up with (the replica drops the marker
/// with a warning). A marker holding anything but what a join writes is refused.
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
    /// ([`crate::consensus::raft::Config::passive_until_caught_up`]) until it caught up with a
    /// leader. Over an existing store this is [`StartMode::Existing`] (passive only
    /// if an earlier join has not caught up yet).
    Join,
}

/// Opens a replica's store and replaces it by an installed snapshot.
pub trait StoreProvider: Send {
    /// Opens the store (whether one may be created depends on the provider: see
    /// [`StartMode`] for [`FileStoreProvider`]).
    fn open(&mut self) -> Result<Arc<dyn Store>>;

    /// [`StoreProvider::open`], calling `check` on the opened store before the
    /// provider writes to an existing one, where it can: a refused start then
    /// leaves the store's files byte for byte as they were. `check` only reads.
    /// The default opens, then checks.
    fn open_validated(
        &mut self,
        check: &mut dyn FnMut(&dyn Store) -> Result<()>,
    ) -> Result<Arc<dyn Store>> {
        let store = self.open()?;
        check(&*store)?;
        Ok(store)
    }

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

    /// Starts installing the snapshot `meta` into a fresh staging store, beside the
    /// current one: the caller pushes its chunks in order into the returned
    /// installation, then finishes it ([`SnapshotInstall::finish`] puts the new
    /// store in place) or drops it (the staging store is discarded). At most one
    /// installation runs at a time: drop the previous one first.
    fn begin_install(&mut self, meta: SnapshotMeta) -> Result<Box<dyn SnapshotInstall>>;
}

/// A snapshot installation in progress (see [`StoreProvider::begin_install`]).
/// Dropping it abandons the installation: its staging store is removed, and the
/// current store stays untouched.
pub trait SnapshotInstall: Send {
    /// Installs the next chunk's records into the staging store. May wait until the
    /// installation took the previous chunk (back-pressure: the caller never gets
    /// more than one chunk ahead of the writer). After an error the installation is
    /// dead: drop it.
    fn push(&mut self, items: Vec<SnapshotItem>) -> Result<()>;

    /// The last chunk was pushed: completes the installation (durable), gives the
    /// staged store the hard state `hard_state` and puts it in the current store's
    /// place. On success the current store must not be written again (the caller
    /// drops it); on failure it is untouched and still the store.
    fn finish(self: Box<Self>, hard_state: HardState) -> Result<Arc<dyn Store>>;
}

/// A store with a snapshot fully and durably installed, beside the current one.
/// Dropping it discards it.
pub trait StagedStore: Send {
    /// Gives it the hard state `hard_state` and puts it in the current store's place
    /// (durably, atomically).
    fn commit(self: Box<Self>, hard_state: HardState) -> Result<Arc<dyn Store>>;
}

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

/// A list pool with an installed snapshot at `<store>.incoming`.
struct StagedList {
    store: Option<ListStore>,
    staging: PathBuf,
    path: PathBuf,
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
struct StagedWal {
    store: Option<WalStore>,
    staging: PathBuf,
    dir: PathBuf,
    opts: WalOptions,
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

/// `path` with `suffix` appended to its file name.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
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
