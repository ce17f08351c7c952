//! The classic baseline: a Raft log in a write-ahead log file, fsync'd per group of
//! appends, a DRAM index that holds the values, and a periodic snapshot file after
//! which the log starts over (a new generation).
//!
//! Same [`Store`] semantics as the list engine: what survives a crash is a prefix of
//! the appends that includes every synced one. Unlike the list, the values live in
//! DRAM as well as on disk, recovery reads the snapshot and replays the log, and a
//! snapshot ([`Store::compact`]) blocks appends while it writes the file. A sync
//! writes the buffered records under the writer lock and `fdatasync`s without it
//! ([`WalStore::sync_with`]), as the list flushes without its tail lock: the two
//! engines overlap appends and syncs alike.
//!
//! A clean stop ([`Store::sync_clean`]) records the log's synced end in the file
//! `synced`, after the `fdatasync`; below it, a record that fails its checksum or
//! a log cut short is corruption, refused at open, not a torn tail to cut. A
//! directory holding a hard state, snapshot or synced end without its log is
//! refused too: a deleted log is not an empty store.

mod files;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::storage::error::{Result, StoreError};
use crate::storage::index::{split_vkey, vkey, Index, Version as _};
use crate::storage::record::{Kind, Record};
use crate::storage::store::{
    CompactStats, HardState, LogEntry, Op, OwnedOp, SnapshotItem, SnapshotMeta, Store,
    StoreOptions, StoreUsage, Version,
};
use crate::storage::sync::{lock, read, write, AtomicU64, Mutex, Ordering, RwLock};

/// The most key + value bytes one WAL entry carries (a bound on what one append
/// buffers and one recovery read allocates, not a format limit).
pub const MAX_PAYLOAD: usize = 64 << 20;

// The node's identity files (`node::identity`) use it.
#[cfg(feature = "server")]
pub(crate) use files::replace_atomically;
use files::{header, FILE_HEADER, SNAP_MAGIC, WAL_MAGIC};

/// A version in the WAL engine's index: the value itself (`None`: tombstone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalValue(Option<Arc<[u8]>>);

impl crate::storage::index::Version for WalValue {
    fn is_tombstone(&self) -> bool {
        self.0.is_none()
    }
}

/// Options of a WAL store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WalOptions {
    /// Group durability (one fsync per `group` appends). `sync_interval` must be
    /// `None`: this engine has no timer thread (its caller syncs).
    pub store: StoreOptions,
    /// Appends after which an append triggers a snapshot (0: only on `compact`).
    pub snapshot_every: u64,
}

struct Writer {
    /// The log file (shared with a sync that runs without the lock).
    file: Arc<File>,
    gen: u64,
    buf: Vec<u8>,
    unsynced: u32,
    last_index: u64,
    since_snapshot: u64,
    /// The number of the last sync started or snapshot written (see
    /// [`WalStore::sync_with`]).
    sync_seq: u64,
    /// The lowest point truncated to since the last sync started (`u64::MAX`:
    /// none): the durable index that sync publishes is capped there.
    truncated_to: u64,
}

/// The write-ahead-log engine.
pub struct WalStore {
    dir: PathBuf,
    opts: WalOptions,
    writer: Mutex<Writer>,
    index: RwLock<Index<WalValue>>,
    gate: RwLock<()>,
    hard: Mutex<HardState>,
    durable_index: AtomicU64,
    /// Held by a sync from start to end: one at a time.
    sync_lock: Mutex<()>,
}

impl std::fmt::Debug for WalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalStore").field("dir", &self.dir).finish()
    }
}

impl WalStore {
    /// Whether directory `dir` holds a store: a log, snapshot, hard-state or
    /// synced-end file (where it holds none, [`WalStore::open`] starts an empty
    /// one).
    pub fn exists(dir: impl AsRef<Path>) -> Result<bool> {
        let dir = dir.as_ref();
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        if files::snapshot_path(dir).exists()
            || files::hard_path(dir).exists()
            || files::end_path(dir).exists()
        {
            return Ok(true);
        }
        for entry in entries {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("wal-") && name.ends_with(".log") {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Opens the store in directory `dir`, creating it (and an empty log) if needed,
    /// and replays the snapshot and the log.
    pub fn open(dir: impl AsRef<Path>, opts: &WalOptions) -> Result<WalStore> {
        Self::open_checked(dir, opts, &mut |_| Ok(()))
    }

    /// [`WalStore::open`], calling `check` on the replayed store before anything is
    /// written to an existing store (an open cuts a torn tail off the log), so a
    /// caller that refuses what it finds (a node checking its Raft facts) leaves
    /// every file byte for byte as it was. `check` must only read.
    ///
    /// Refused with [`StoreError::Corrupt`], naming the file and the offset: a
    /// record damaged below the log's synced end, or a log shorter than it (see
    /// the module docs); a directory that holds a snapshot, hard state or synced end but
    /// not the log they belong to (a deleted log is not an empty store); a hard
    /// state that fails its checksum or is implausible. Anything but a directory
    /// at `dir`, or a regular file for each of its files, is refused before it is
    /// opened ([`StoreError::NotRegular`]).
    pub fn open_checked(
        dir: impl AsRef<Path>,
        opts: &WalOptions,
        check: &mut dyn FnMut(&dyn Store) -> Result<()>,
    ) -> Result<WalStore> {
        let dir = dir.as_ref().to_path_buf();
        if opts.store.group == 0 {
            return Err(StoreError::Invalid(
                "group size 0: use 1 to sync every append".into(),
            ));
        }
        if !crate::storage::ondisk::directory(&dir)? {
            std::fs::create_dir_all(&dir)?;
        }
        let mut index: Index<WalValue> = Index::default();
        let snap_path = files::snapshot_path(&dir);
        let gen = match files::read_file(&snap_path, SNAP_MAGIC)? {
            Some((gen, bytes)) => {
                files::for_each_record(&snap_path, &bytes, false, 0, |rec| {
                    replay(&mut index, rec)
                })?;
                gen
            }
            None => 0,
        };
        let end = files::read_end(&dir)?;
        let hard_word = files::read_hard(&dir)?;
        let wal_path = files::wal_path(&dir, gen);
        let synced = match end {
            Some((g, len)) if g == gen => len,
            // A stale record of a generation a snapshot ended.
            Some((g, _)) if g < gen => 0,
            Some((g, _)) => {
                return Err(StoreError::Corrupt(format!(
                    "{}: records a synced end for log generation {g}, above the snapshot's {gen}: the snapshot is older than the log",
                    files::end_path(&dir).display()
                )))
            }
            None => 0,
        };
        let (valid, fresh) = match files::read_file(&wal_path, WAL_MAGIC)? {
            Some((g, bytes)) if g == gen => {
                let valid = files::for_each_record(&wal_path, &bytes, true, synced, |rec| {
                    replay(&mut index, rec)
                })?;
                (valid, false)
            }
            Some((g, _)) => {
                return Err(StoreError::Corrupt(format!(
                    "{} has generation {g}, the snapshot {gen}",
                    wal_path.display()
                )))
            }
            None if gen > 0 || end.is_some() || hard_word.is_some() => {
                return Err(StoreError::Corrupt(format!(
                    "{}: missing, while {} holds the rest of a store (snapshot, hard state or synced end): refusing to start with its log gone",
                    wal_path.display(),
                    dir.display()
                )))
            }
            None => {
                // No store at all: a new one, created before the check (there is
                // nothing to leave untouched).
                let mut f = File::create(&wal_path)?;
                f.write_all(&header(WAL_MAGIC, gen))?;
                f.sync_all()?;
                files::sync_dir(&dir)?;
                (FILE_HEADER, true)
            }
        };
        let hard = match hard_word {
            Some(word) => HardState::unpack(word)
                .check_plausible(&files::hard_path(&dir).display().to_string())?,
            None => HardState::default(),
        };
        let last_index = index.last_index();
        // Read-only until the check passed.
        let file = Arc::new(File::open(&wal_path)?);
        let store = WalStore {
            dir,
            opts: opts.clone(),
            writer: Mutex::new(Writer {
                file,
                gen,
                buf: Vec::with_capacity(4096),
                unsynced: 0,
                last_index,
                since_snapshot: 0,
                sync_seq: 0,
                truncated_to: u64::MAX,
            }),
            index: RwLock::new(index),
            gate: RwLock::new(()),
            hard: Mutex::new(hard),
            durable_index: AtomicU64::new(last_index),
            sync_lock: Mutex::new(()),
        };
        check(&store)?;
        let mut file = OpenOptions::new().write(true).open(&wal_path)?;
        if !fresh {
            // Drop a torn tail, or pad out a last record whose padding was torn, so
            // new records follow the valid prefix on the 8-byte grid the reader
            // steps on.
            file.set_len(valid as u64)?;
        }
        std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))?;
        lock(&store.writer).file = Arc::new(file);
        Ok(store)
    }

    /// Syncs, and records the log's synced end (see [`files`]): after the
    /// `fdatasync`, so it never claims more than is durable.
    fn sync_and_record_end(&self) -> Result<()> {
        let mut w = lock(&self.writer);
        if w.unsynced > 0 {
            (&*w.file).write_all(&w.buf)?;
            w.buf.clear();
            w.unsynced = 0;
            // A sync running without the lock publishes nothing: this one covers
            // what it wrote.
            w.sync_seq += 1;
        }
        w.file.sync_data()?;
        self.durable_index.store(w.last_index, Ordering::Release);
        let len = w.file.metadata()?.len();
        files::replace_atomically(
            &self.dir,
            &files::end_path(&self.dir),
            &files::end_bytes(w.gen, len),
        )
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes the buffered records and `fdatasync`s, all under the writer lock (a
    /// group sync inside an append). A sync started without the lock and not
    /// finished yet then publishes nothing: this one covers all it wrote.
    fn sync_locked(&self, w: &mut Writer) -> Result<()> {
        if w.unsynced == 0 {
            return Ok(());
        }
        (&*w.file).write_all(&w.buf)?;
        w.file.sync_data()?;
        w.buf.clear();
        w.unsynced = 0;
        w.sync_seq += 1;
        self.durable_index.store(w.last_index, Ordering::Release);
        Ok(())
    }

    /// [`Store::sync`] in three steps, running `between` where a concurrent
    /// writer may run (tests interleave appends and truncations there):
    ///
    /// 1. under the writer lock: write the buffered records to the log file and
    ///    note the last index they reach;
    /// 2. without it: `between`, then `fdatasync`, so appends go on meanwhile;
    /// 3. under the lock again: publish the noted index as durable, unless a sync or
    ///    snapshot that started later already published (its own `fdatasync`, or
    ///    the snapshot, covers what this one wrote); a truncation meanwhile caps it.
    ///
    /// One such sync runs at a time. This is the same pipeline as the list's
    /// (`ListStore`'s sync flushes without its tail lock), so that the two engines
    /// are compared with the same overlap of appends and syncs.
    #[doc(hidden)]
    pub fn sync_with(&self, between: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        let _one = lock(&self.sync_lock);
        let (file, seq, last) = {
            let mut guard = lock(&self.writer);
            let w = &mut *guard;
            if w.unsynced == 0 {
                drop(guard);
                return between();
            }
            (&*w.file).write_all(&w.buf)?;
            w.buf.clear();
            w.unsynced = 0;
            w.sync_seq += 1;
            w.truncated_to = u64::MAX;
            (Arc::clone(&w.file), w.sync_seq, w.last_index)
        };
        between()?;
        if let Err(e) = file.sync_data() {
            // Written but not known durable: the next sync must sync again.
            lock(&self.writer).unsynced += 1;
            return Err(e.into());
        }
        let w = lock(&self.writer);
        if w.sync_seq == seq {
            let durable = last.min(w.truncated_to);
            self.durable_index.store(durable, Ordering::Release);
        }
        Ok(())
    }

    fn after_append(&self, w: &mut Writer) -> Result<()> {
        w.unsynced += 1;
        w.since_snapshot += 1;
        if w.unsynced >= self.opts.store.group {
            self.sync_locked(w)?;
        }
        if self.opts.snapshot_every > 0 && w.since_snapshot >= self.opts.snapshot_every {
            self.snapshot_locked(w, u64::MAX)?;
        }
        Ok(())
    }

    /// Writes a snapshot at the applied index (at most `limit`, see
    /// [`Store::compact_to`]) holding the visible versions there and every entry
    /// above it, starts a new log generation, and drops superseded versions from
    /// DRAM.
    fn snapshot_locked(&self, w: &mut Writer, limit: u64) -> Result<CompactStats> {
        let started = Instant::now();
        let _gate = write(&self.gate);
        let mut stats = CompactStats::default();
        let gen = w.gen + 1;
        let mut out = header(SNAP_MAGIC, gen).to_vec();
        let mut fresh: Index<WalValue> = Index::default();
        {
            let index = read(&self.index);
            let base = index.applied().min(limit).max(index.base().0);
            let Some(base_term) = index.term_at(base) else {
                return Ok(stats);
            };
            Record::bare(Kind::Base, base, base_term).encode_into(&mut out)?;
            fresh.set_base(base, base_term);
            for (k, v) in index.visible_chunk(None, base, usize::MAX) {
                let (key, at) = split_vkey(&k);
                let value = v.0.as_deref().unwrap_or(&[]);
                Record {
                    kind: Kind::Put,
                    index: at,
                    term: 0,
                    key,
                    value,
                }
                .encode_into(&mut out)?;
                fresh.insert_old(k, v);
            }
            for i in base + 1..=index.last_index() {
                let Some(e) = index.entry(i) else {
                    return Err(StoreError::Corrupt(format!(
                        "entry {i} missing from the log"
                    )));
                };
                match &e.vkey {
                    Some(k) => {
                        let (key, at) = split_vkey(k);
                        let v = index.get_exact(k).cloned().unwrap_or(WalValue(None));
                        let kind = if v.is_tombstone() {
                            Kind::Delete
                        } else {
                            Kind::Put
                        };
                        let value = v.0.as_deref().unwrap_or(&[]);
                        Record {
                            kind,
                            index: at,
                            term: e.term,
                            key,
                            value,
                        }
                        .encode_into(&mut out)?;
                        fresh.push(e.term, Some((k.clone(), v)), 0);
                    }
                    None => {
                        Record::bare(Kind::Noop, i, e.term).encode_into(&mut out)?;
                        fresh.push(e.term, None, 0);
                    }
                }
            }
            fresh.set_applied(index.applied());
            stats.records_kept = (fresh.versions()) as u64;
            stats.records_dropped = index.versions().saturating_sub(fresh.versions()) as u64;
        }
        // Everything appended so far is in the snapshot: the buffered tail of the old
        // log need not be written.
        let new_wal = files::wal_path(&self.dir, gen);
        {
            let mut f = File::create(&new_wal)?;
            f.write_all(&header(WAL_MAGIC, gen))?;
            f.sync_all()?;
        }
        // The new log's name is durable before the snapshot naming its generation:
        // no crash leaves a snapshot whose log is missing (which open refuses).
        files::sync_dir(&self.dir)?;
        files::replace_atomically(&self.dir, &files::snapshot_path(&self.dir), &out)?;
        let old = files::wal_path(&self.dir, w.gen);
        w.file = Arc::new(OpenOptions::new().append(true).open(&new_wal)?);
        w.gen = gen;
        w.buf.clear();
        w.unsynced = 0;
        w.since_snapshot = 0;
        w.sync_seq += 1;
        self.durable_index.store(w.last_index, Ordering::Release);
        let freed = std::fs::metadata(&old).map(|m| m.len()).unwrap_or(0);
        if let Err(e) = std::fs::remove_file(&old) {
            tracing::warn!(path = %old.display(), error = %e, "could not remove the old log");
        }
        *write(&self.index) = fresh;
        stats.examined = freed;
        stats.freed = freed;
        stats.total = started.elapsed();
        // Appends wait on the writer lock for the whole snapshot.
        stats.max_pause = stats.total;
        Ok(stats)
    }
}

fn replay(index: &mut Index<WalValue>, rec: &Record<'_>) -> Result<()> {
    let corrupt =
        |e: StoreError| StoreError::Corrupt(format!("replaying index {}: {e}", rec.index));
    let base = index.base().0;
    match rec.kind {
        Kind::Base => index.set_base(rec.index, rec.term),
        Kind::Rollback => index.truncate_after(rec.index).map_err(corrupt)?,
        Kind::HardState => {}
        Kind::Fragment | Kind::PutLarge => {
            return Err(StoreError::Corrupt(format!(
                "entry {}: a list engine's large-value record in a WAL",
                rec.index
            )))
        }
        Kind::Noop if rec.index <= base => {}
        Kind::Put | Kind::Delete if rec.index <= base => {
            let v = (rec.kind == Kind::Put).then(|| Arc::from(rec.value));
            index.insert_old(vkey(rec.key, rec.index), WalValue(v));
        }
        Kind::Put | Kind::Delete | Kind::Noop => {
            index.check_next(rec.index).map_err(corrupt)?;
            let version = match rec.kind {
                Kind::Noop => None,
                k => Some((
                    vkey(rec.key, rec.index),
                    WalValue((k == Kind::Put).then(|| Arc::from(rec.value))),
                )),
            };
            index.push(rec.term, version, 0);
        }
    }
    Ok(())
}

impl Store for WalStore {
    fn engine(&self) -> &'static str {
        "wal"
    }

    fn max_payload(&self) -> usize {
        MAX_PAYLOAD
    }

    fn append(&self, index: u64, term: u64, op: Op<'_>) -> Result<()> {
        let mut w = lock(&self.writer);
        read(&self.index).check_next(index)?;
        let rec = Record::entry(index, term, op);
        rec.encode_into(&mut w.buf)?;
        let version = match rec.kind {
            Kind::Noop => None,
            kind => Some((
                vkey(rec.key, index),
                WalValue((kind == Kind::Put).then(|| Arc::from(rec.value))),
            )),
        };
        write(&self.index).push(term, version, 0);
        w.last_index = index;
        self.after_append(&mut w)
    }

    fn truncate_after(&self, after: u64, term: u64) -> Result<()> {
        let mut w = lock(&self.writer);
        {
            let index = read(&self.index);
            if after >= index.last_index() {
                return Ok(());
            }
        }
        write(&self.index).truncate_after(after)?;
        Record::bare(Kind::Rollback, after, term).encode_into(&mut w.buf)?;
        w.last_index = after;
        w.truncated_to = w.truncated_to.min(after);
        self.durable_index.fetch_min(after, Ordering::AcqRel);
        self.after_append(&mut w)
    }

    fn sync(&self) -> Result<()> {
        self.sync_with(&mut || Ok(()))
    }

    fn sync_clean(&self) -> Result<()> {
        self.sync_and_record_end()
    }

    fn get(&self, key: &[u8], at: u64) -> Result<Option<Vec<u8>>> {
        Ok(read(&self.index)
            .get(key, at)
            .and_then(|v| v.0.as_deref().map(<[u8]>::to_vec)))
    }

    fn latest(&self, key: &[u8]) -> Result<Option<Version>> {
        Ok(read(&self.index)
            .version_at(key, u64::MAX)
            .map(|(index, v)| Version {
                index,
                value: v.0.as_deref().map(<[u8]>::to_vec),
            }))
    }

    fn set_applied(&self, index: u64) {
        write(&self.index).set_applied(index);
    }

    fn applied(&self) -> u64 {
        read(&self.index).applied()
    }

    fn last_index(&self) -> u64 {
        read(&self.index).last_index()
    }

    fn last_term(&self) -> u64 {
        read(&self.index).last_term()
    }

    fn durable_index(&self) -> u64 {
        self.durable_index.load(Ordering::Acquire)
    }

    fn term_at(&self, index: u64) -> Option<u64> {
        read(&self.index).term_at(index)
    }

    fn terms(&self, from: u64, to: u64) -> Option<Vec<u64>> {
        read(&self.index).terms(from, to)
    }

    fn entry(&self, index: u64) -> Result<Option<LogEntry>> {
        let ix = read(&self.index);
        let Some(meta) = ix.entry(index) else {
            return Ok(None);
        };
        let op = match &meta.vkey {
            None => OwnedOp::Noop,
            Some(k) => match ix.get_exact(k) {
                Some(WalValue(Some(v))) => OwnedOp::Put {
                    key: k.key().to_vec(),
                    value: v.to_vec(),
                },
                Some(WalValue(None)) => OwnedOp::Delete {
                    key: k.key().to_vec(),
                },
                // The version was dropped by a snapshot: the entry is gone.
                None => return Ok(None),
            },
        };
        Ok(Some(LogEntry {
            index,
            term: meta.term,
            op,
        }))
    }

    fn hard_state(&self) -> HardState {
        *lock(&self.hard)
    }

    fn set_hard_state(&self, hs: HardState) -> Result<()> {
        let word = hs.pack()?;
        let mut hard = lock(&self.hard);
        files::replace_atomically(
            &self.dir,
            &files::hard_path(&self.dir),
            &files::hard_bytes(word),
        )?;
        *hard = hs;
        Ok(())
    }

    fn compact(&self) -> Result<CompactStats> {
        let mut w = lock(&self.writer);
        self.snapshot_locked(&mut w, u64::MAX)
    }

    fn compact_to(&self, limit: u64) -> Result<CompactStats> {
        let mut w = lock(&self.writer);
        self.snapshot_locked(&mut w, limit)
    }

    fn usage(&self) -> StoreUsage {
        let used = {
            let w = lock(&self.writer);
            // The log file's length (a metadata call, no read) and what is buffered.
            let written = w.file.metadata().map_or(0, |m| m.len());
            written + w.buf.len() as u64
        };
        StoreUsage {
            capacity: None,
            used,
            free: None,
            versions: read(&self.index).versions() as u64,
        }
    }

    fn snapshot(
        &self,
        at: u64,
    ) -> Result<(SnapshotMeta, crate::storage::store::SnapshotStream<'_>)> {
        let gate = read(&self.gate);
        let index = read(&self.index);
        let meta = index.snapshot_meta(at)?;
        let items: Vec<Result<SnapshotItem>> = index
            .visible_chunk(None, at, usize::MAX)
            .into_iter()
            .map(|(k, v)| {
                let (key, at) = split_vkey(&k);
                Ok(SnapshotItem {
                    key: key.to_vec(),
                    value: v.0.as_deref().unwrap_or(&[]).to_vec(),
                    index: at,
                })
            })
            .collect();
        drop(index);
        drop(gate);
        Ok((meta, Box::new(items.into_iter())))
    }

    fn install_snapshot(
        &self,
        meta: SnapshotMeta,
        items: &mut dyn Iterator<Item = SnapshotItem>,
    ) -> Result<()> {
        let mut w = lock(&self.writer);
        read(&self.index).check_empty()?;
        let mut fresh: Index<WalValue> = Index::default();
        fresh.set_base(meta.index, meta.term);
        for item in items {
            meta.check_item(&item)?;
            fresh.insert_old(
                vkey(&item.key, item.index),
                WalValue(Some(Arc::from(item.value))),
            );
        }
        *write(&self.index) = fresh;
        w.last_index = meta.index;
        // Persist it the classic way: as the new snapshot file.
        self.snapshot_locked(&mut w, u64::MAX).map(|_| ())
    }
}
