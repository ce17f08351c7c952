//! WAL-engine nodes: the real [`FileStoreProvider`] over a [`WalStore`] directory in
//! a temporary directory of the node's own, and a file-level crash model for it.
//!
//! The WAL has no file-system seam, so the model observes it from outside, at the
//! granularity of its [`Store`] calls: the provider hands the replica a [`Probed`]
//! store that, after every call that may write (append, rollback, sync, hard state,
//! compaction, snapshot installation), reads the node's whole directory tree into an
//! [`Image`] and keeps it as a *checkpoint* when it changed. Every such call returns
//! with its files durable (the engine writes a group with `write` and `fdatasync`
//! back to back; snapshot and hard-state files are written to a temporary file,
//! fsynced, renamed and the directory fsynced), so a checkpoint is a state a crash
//! *between* calls leaves as it is.
//!
//! A crash *inside* a call (inside the node's last `process` or compaction) leaves a
//! state between the checkpoint before the call and the one after it, in the order
//! a crash-safe file protocol makes its changes, cut at a random stage:
//!
//! 0. files that grew by an append keep what was fsynced (their old length) plus an
//!    arbitrary prefix of the bytes written after it — often torn mid-record;
//! 1. files created by the call appear (complete: the engine fsyncs a new file
//!    before anything refers to it);
//! 2. files replaced by the call (renamed over) switch to their new contents — a
//!    rename is atomic, and lost if the crash came before the directory fsync (the
//!    stages before this one);
//! 3. files the call removed disappear (the call's end state).
//!
//! A crash around a snapshot installation ([`FileStoreProvider::replace`]: a staged
//! directory `store.wal.incoming`, the store moved aside to `store.wal.old`, the
//! staged one renamed into place, the old one removed) leaves one of the swap's
//! stages — before the renames, between them (the open must finish the swap:
//! [`raft_nvm::replica::recover_wal_swap`]), after them with or without the old
//! copy — chosen by the armed crash ([`InstallCrash`]).
//!
//! A restart writes the crash image into the node's (emptied) directory and opens it
//! with [`StartMode::Existing`]: a crash image without a store is a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use raft_nvm::replica::{Engine, FileStoreProvider, SnapshotInstall, StartMode, StoreProvider};
use raft_nvm::store::{
    CompactStats, HardState, LogEntry, Op, SnapshotItem, SnapshotMeta, SnapshotStream, Store,
    StoreUsage, Version,
};
use raft_nvm::{Result, StoreError, WalOptions};

use super::pmem::InstallCrash;
use super::rng::Rng;

/// A directory tree: relative path → file contents (`None`: a directory).
pub type Image = BTreeMap<PathBuf, Option<Vec<u8>>>;

/// The store directory's name inside the node's directory.
const STORE: &str = "store.wal";

/// What the harness and a WAL node's provider and store share.
pub struct WalSlot {
    /// The node's directory (the store is `STORE` in it).
    root: tempfile::TempDir,
    /// Images after the calls that changed the files, numbered; the first is the
    /// state at the last [`WalSlot::mark`].
    checkpoints: Vec<(usize, Image)>,
    /// Checkpoints taken so far (the number of the newest).
    seq: usize,
    /// The crash image the next open writes into the directory (`None` at the
    /// first open: bootstrap an empty store).
    pub image: Option<Image>,
    /// Crash the node around the next installation.
    pub arm: Option<InstallCrash>,
    /// The armed crash happened: the harness must crash the node now, into one of
    /// `install_images`.
    pub fired: Option<InstallCrash>,
    /// The stages of the swap the armed crash may leave.
    pub install_images: Vec<Image>,
    /// Snapshots installed (swaps).
    pub installs: u64,
    /// Opens so far (the first bootstraps).
    opens: u64,
}

/// Locks a WAL slot (a poisoned lock only means a seed already failed).
pub fn lock(slot: &Mutex<WalSlot>) -> MutexGuard<'_, WalSlot> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where node directories go: a RAM file system if there is one (fsync is free
/// there, and the model does not need the disk).
fn scratch() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

impl WalSlot {
    /// An empty node directory.
    pub fn new() -> WalSlot {
        let root = tempfile::Builder::new()
            .prefix("cluster-sim-wal-")
            .tempdir_in(scratch())
            .expect("a temporary directory for a WAL node");
        WalSlot {
            root,
            checkpoints: Vec::new(),
            seq: 0,
            image: None,
            arm: None,
            fired: None,
            install_images: Vec::new(),
            installs: 0,
            opens: 0,
        }
    }

    fn store_dir(&self) -> PathBuf {
        self.root.path().join(STORE)
    }

    /// Checkpoints taken so far: grows when a call changed the files.
    pub fn events(&self) -> usize {
        self.seq
    }

    /// Forgets the checkpoints before the newest (the state a crash inside the
    /// next calls starts from).
    pub fn mark(&mut self) {
        let keep = self.checkpoints.len().saturating_sub(1);
        self.checkpoints.drain(..keep);
    }

    /// Reads the files and keeps them as a checkpoint if they changed.
    fn capture(&mut self) {
        let now = read_image(self.root.path());
        if self.checkpoints.last().map(|(_, i)| i) != Some(&now) {
            self.seq += 1;
            self.checkpoints.push((self.seq, now));
        }
    }

    /// The files as they are.
    fn current(&self) -> Image {
        read_image(self.root.path())
    }

    /// A crash image: the files as they are (`within: None`: a crash between
    /// calls), or a state inside one of the calls that changed them after
    /// checkpoint `from`. Returns the image and how it was cut.
    pub fn crash_image(&mut self, within: Option<usize>, rng: &mut Rng) -> (Image, String) {
        if let Some(how) = self.fired.take() {
            let images = std::mem::take(&mut self.install_images);
            let k = rng.index(images.len());
            let img = images.into_iter().nth(k).expect("a stage of the swap");
            return (img, format!("{how:?}, stage {k} of the directory swap"));
        }
        let Some(from) = within else {
            return (self.current(), "files as synced".into());
        };
        let calls: Vec<usize> = (1..self.checkpoints.len())
            .filter(|&i| self.checkpoints[i].0 > from)
            .collect();
        if calls.is_empty() {
            return (self.current(), "no call changed the files".into());
        }
        let i = rng.pick(&calls);
        let (prev, next) = (&self.checkpoints[i - 1].1, &self.checkpoints[i].1);
        let (img, how) = torn_between(prev, next, rng);
        (img, format!("inside call {i} of {}: {how}", calls.len()))
    }
}

/// A state a crash inside a call leaves between `prev` and `next` (see the module
/// documentation for the stages).
fn torn_between(prev: &Image, next: &Image, rng: &mut Rng) -> (Image, String) {
    let appended = next.iter().any(|(path, new)| match (prev.get(path), new) {
        (Some(Some(old)), Some(new)) => new.len() > old.len() && new.starts_with(old),
        _ => false,
    });
    // A call that wrote to a log is cut inside its write half the time.
    let stage = if appended && rng.chance(500) {
        0
    } else {
        rng.below(4)
    };
    let mut img = prev.clone();
    let mut torn = Vec::new();
    for (path, new) in next {
        let (Some(Some(old)), Some(new)) = (prev.get(path), new) else {
            continue;
        };
        if new.len() > old.len() && new.starts_with(old) {
            let len = if stage > 0 {
                new.len()
            } else {
                match rng.below(8) {
                    0 => old.len(),
                    1 => new.len(),
                    _ => rng.range(old.len() as u64, new.len() as u64) as usize,
                }
            };
            if len < new.len() {
                torn.push(format!(
                    "{} cut at {len} of {}..{}",
                    path.display(),
                    old.len(),
                    new.len()
                ));
            }
            img.insert(path.clone(), Some(new[..len].to_vec()));
        }
    }
    if stage >= 1 {
        for (path, new) in next {
            img.entry(path.clone()).or_insert_with(|| new.clone());
        }
    }
    if stage >= 2 {
        for (path, new) in next {
            if prev.get(path).is_some_and(|old| old != new) {
                img.insert(path.clone(), new.clone());
            }
        }
    }
    if stage >= 3 {
        img.retain(|path, _| next.contains_key(path));
    }
    let how = if torn.is_empty() {
        format!("stage {stage}")
    } else {
        format!("stage {stage}, torn: {}", torn.join(", "))
    };
    (img, how)
}

/// Whether a crash image description says a file was cut mid-write.
pub fn is_torn(how: &str) -> bool {
    how.contains("torn:")
}

/// Reads the tree under `root`.
fn read_image(root: &Path) -> Image {
    let mut img = Image::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a node directory") {
            let path = entry.expect("a directory entry").path();
            let rel = path
                .strip_prefix(root)
                .expect("under the root")
                .to_path_buf();
            if path.is_dir() {
                img.insert(rel, None);
                todo.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read a node's file");
                img.insert(rel, Some(bytes));
            }
        }
    }
    img
}

/// Empties `root` and writes `img` into it.
fn write_image(root: &Path, img: &Image) {
    for entry in std::fs::read_dir(root).expect("read a node directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).expect("empty a node directory");
        } else {
            std::fs::remove_file(&path).expect("empty a node directory");
        }
    }
    // Directories sort before what is in them.
    for (rel, contents) in img {
        let path = root.join(rel);
        match contents {
            None => std::fs::create_dir_all(&path).expect("create a directory of the image"),
            Some(bytes) => std::fs::write(&path, bytes).expect("write a file of the image"),
        }
    }
}

/// `img` with every path under `from/` moved under `to/`, and the others dropped.
fn moved(img: &Image, from: &str, to: &str) -> Image {
    img.iter()
        .filter_map(|(p, c)| {
            let rest = p.strip_prefix(from).ok()?;
            let dest = if rest.as_os_str().is_empty() {
                PathBuf::from(to)
            } else {
                Path::new(to).join(rest)
            };
            Some((dest, c.clone()))
        })
        .collect()
}

/// `img` without `dir` and what is under it.
fn without(img: &Image, dir: &str) -> Image {
    img.iter()
        .filter(|(p, _)| !p.starts_with(dir))
        .map(|(p, c)| (p.clone(), c.clone()))
        .collect()
}

/// The states of a directory swap from `before` to `after` (the store directory
/// replaced by a staged one): before the renames, between them, after them with
/// the old copy still there.
fn swap_stages(before: &Image, after: &Image) -> (Vec<Image>, Vec<Image>) {
    let incoming = format!("{STORE}.incoming");
    let old = format!("{STORE}.old");
    let staged = moved(after, STORE, &incoming);
    let mut r0 = before.clone();
    r0.extend(staged.clone());
    let mut r1 = without(before, STORE);
    r1.extend(moved(before, STORE, &old));
    r1.extend(staged);
    let mut r2 = after.clone();
    r2.extend(moved(before, STORE, &old));
    (vec![r0, r1], vec![r2, after.clone()])
}

/// The [`StoreProvider`] of a WAL node: the real file provider over the node's
/// directory, with every store it opens [`Probed`].
pub struct SimWalProvider {
    slot: Arc<Mutex<WalSlot>>,
    inner: FileStoreProvider,
}

impl SimWalProvider {
    /// A provider over `slot`'s directory: the first one bootstraps, later ones
    /// open what the crash left.
    pub fn new(opts: WalOptions, slot: Arc<Mutex<WalSlot>>) -> SimWalProvider {
        let (dir, first) = {
            let s = lock(&slot);
            (s.store_dir(), s.opens == 0)
        };
        let start = if first {
            StartMode::Bootstrap
        } else {
            StartMode::Existing
        };
        let inner = FileStoreProvider::with_start(Engine::Wal { dir, opts }, start);
        SimWalProvider { slot, inner }
    }

    fn probed(&self, store: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(Probed {
            inner: store,
            slot: Arc::clone(&self.slot),
        })
    }
}

impl StoreProvider for SimWalProvider {
    fn open(&mut self) -> Result<Arc<dyn Store>> {
        {
            let mut s = lock(&self.slot);
            if let Some(img) = s.image.take() {
                write_image(s.root.path(), &img);
            }
            s.opens += 1;
        }
        let store = self.inner.open()?;
        let mut s = lock(&self.slot);
        s.checkpoints.clear();
        s.capture();
        drop(s);
        Ok(self.probed(store))
    }

    fn joining(&self) -> bool {
        self.inner.joining()
    }

    fn caught_up(&mut self) -> Result<()> {
        self.inner.caught_up()
    }

    fn begin_install(&mut self, meta: SnapshotMeta) -> Result<Box<dyn SnapshotInstall>> {
        let before = lock(&self.slot).current();
        let inner = self.inner.begin_install(meta)?;
        Ok(Box::new(SimWalInstall {
            inner,
            slot: Arc::clone(&self.slot),
            before,
        }))
    }
}

/// A WAL snapshot installation whose completion the simulation may crash: the
/// node's files before it began, and the real installation.
struct SimWalInstall {
    inner: Box<dyn SnapshotInstall>,
    slot: Arc<Mutex<WalSlot>>,
    before: Image,
}

impl SnapshotInstall for SimWalInstall {
    fn push(&mut self, items: Vec<SnapshotItem>) -> Result<()> {
        self.inner.push(items)
    }

    fn finish(self: Box<Self>, hard_state: HardState) -> Result<Arc<dyn Store>> {
        let SimWalInstall {
            inner,
            slot,
            before,
        } = *self;
        let fresh = inner.finish(hard_state)?;
        let mut s = lock(&slot);
        s.capture();
        if let Some(how) = s.arm.take() {
            let after = s.current();
            let (before_swap, after_swap) = swap_stages(&before, &after);
            s.fired = Some(how);
            if how == InstallCrash::BeforeSwap {
                // As far as the replica knows, the installation failed: it keeps
                // its store (and is crashed right away, into a stage before the
                // swap completed).
                s.install_images = before_swap;
                return Err(StoreError::Invalid(
                    "simulated crash before the swap".into(),
                ));
            }
            s.install_images = after_swap;
        }
        s.installs += 1;
        drop(s);
        Ok(Arc::new(Probed {
            inner: fresh,
            slot: Arc::clone(&slot),
        }))
    }
}

/// A store that checkpoints its node's files after every call that may write them.
struct Probed {
    inner: Arc<dyn Store>,
    slot: Arc<Mutex<WalSlot>>,
}

impl Probed {
    fn probe<T>(&self, r: Result<T>) -> Result<T> {
        lock(&self.slot).capture();
        r
    }
}

impl Store for Probed {
    fn engine(&self) -> &'static str {
        self.inner.engine()
    }
    fn max_payload(&self) -> usize {
        self.inner.max_payload()
    }
    fn append(&self, index: u64, term: u64, op: Op<'_>) -> Result<()> {
        self.probe(self.inner.append(index, term, op))
    }
    fn truncate_after(&self, after: u64, term: u64) -> Result<()> {
        self.probe(self.inner.truncate_after(after, term))
    }
    fn sync(&self) -> Result<()> {
        self.probe(self.inner.sync())
    }
    fn get(&self, key: &[u8], at: u64) -> Result<Option<Vec<u8>>> {
        self.inner.get(key, at)
    }
    fn latest(&self, key: &[u8]) -> Result<Option<Version>> {
        self.inner.latest(key)
    }
    fn set_applied(&self, index: u64) {
        self.inner.set_applied(index);
    }
    fn applied(&self) -> u64 {
        self.inner.applied()
    }
    fn last_index(&self) -> u64 {
        self.inner.last_index()
    }
    fn last_term(&self) -> u64 {
        self.inner.last_term()
    }
    fn durable_index(&self) -> u64 {
        self.inner.durable_index()
    }
    fn term_at(&self, index: u64) -> Option<u64> {
        self.inner.term_at(index)
    }
    fn terms(&self, from: u64, to: u64) -> Option<Vec<u64>> {
        self.inner.terms(from, to)
    }
    fn entry(&self, index: u64) -> Result<Option<LogEntry>> {
        self.inner.entry(index)
    }
    fn hard_state(&self) -> HardState {
        self.inner.hard_state()
    }
    fn set_hard_state(&self, hs: HardState) -> Result<()> {
        self.probe(self.inner.set_hard_state(hs))
    }
    fn compact(&self) -> Result<CompactStats> {
        self.probe(self.inner.compact())
    }
    fn usage(&self) -> StoreUsage {
        self.inner.usage()
    }
    fn snapshot(&self, at: u64) -> Result<(SnapshotMeta, SnapshotStream<'_>)> {
        self.inner.snapshot(at)
    }
    fn install_snapshot(
        &self,
        meta: SnapshotMeta,
        items: &mut dyn Iterator<Item = SnapshotItem>,
    ) -> Result<()> {
        self.probe(self.inner.install_snapshot(meta, items))
    }
}
