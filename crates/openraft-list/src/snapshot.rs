//! Snapshots: the compacted list's live records at the applied index, written to a
//! file chunk by chunk and installed from one chunk by chunk.
//!
//! The snapshot data openraft moves around is a [`std::fs::File`] (positioned at
//! its start): a transport sends its bytes in chunks of its choosing and the
//! receiver writes them to a file of its own and hands that to
//! `Raft::install_full_snapshot`. The file holds, after an 8-byte magic, frames of
//! a little-endian `u32` length and a postcard body: first the store's snapshot
//! position (index and packed term), then chunks of live records
//! ([`raft_nvm::store::SnapshotItem`], at most [`CHUNK_ITEMS`] each), then an
//! empty frame. Building streams the store's records into the file (compaction
//! waits meanwhile); installing streams the chunks into a fresh store staged
//! beside the current one (raft-nvm's `FileStoreProvider`), which replaces it with
//! one atomic rename once complete and durable: at no point does the whole
//! snapshot sit in DRAM.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use raft_nvm::replica::StoreProvider;
use raft_nvm::store::{SnapshotItem, SnapshotMeta as StoreSnapshotMeta, Store};

use crate::codec;
use crate::error::OpenraftListError;
use crate::sm::ListSnapshot;
use crate::store::{lock, ListRaftStore};
use crate::types::SnapshotMeta;

/// The first bytes of a snapshot file.
pub(crate) const MAGIC: &[u8; 8] = b"ORLSNAP1";
/// Records per chunk.
pub const CHUNK_ITEMS: usize = 512;
/// The largest frame a snapshot file may hold (a chunk of large values).
const MAX_FRAME: u32 = 1 << 30;
/// The most bytes reserved for a frame before its bytes are read.
const FRAME_RESERVE: usize = 64 << 10;

/// The last snapshot built or installed.
pub(crate) struct CurrentSnapshot {
    /// Its metadata.
    pub(crate) meta: SnapshotMeta,
    /// Its file.
    pub(crate) path: PathBuf,
}

fn file_err(path: &Path) -> impl FnOnce(std::io::Error) -> OpenraftListError + '_ {
    move |source| OpenraftListError::File {
        path: path.to_path_buf(),
        source,
    }
}

fn write_frame<T: serde::Serialize>(
    w: &mut impl Write,
    value: &T,
    path: &Path,
) -> Result<(), OpenraftListError> {
    let body = postcard::to_stdvec(value)
        .map_err(|e| OpenraftListError::Corrupt(format!("snapshot encoding: {e}")))?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| l > 0 && l <= MAX_FRAME)
        .ok_or_else(|| {
            OpenraftListError::Range(format!("snapshot frame of {} bytes", body.len()))
        })?;
    w.write_all(&len.to_le_bytes()).map_err(file_err(path))?;
    w.write_all(&body).map_err(file_err(path))
}

/// Reads the next frame's body; `None` at the end frame. The body is read as it
/// arrives, never reserved whole from the length field: a damaged length cannot
/// make a short file allocate up to [`MAX_FRAME`] bytes.
pub(crate) fn read_frame(
    r: &mut impl Read,
    path: &Path,
) -> Result<Option<Vec<u8>>, OpenraftListError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(file_err(path))?;
    let len = u32::from_le_bytes(len);
    if len == 0 {
        return Ok(None);
    }
    if len > MAX_FRAME {
        return Err(OpenraftListError::Corrupt(format!(
            "{}: snapshot frame of {len} bytes",
            path.display()
        )));
    }
    let mut body = Vec::with_capacity((len as usize).min(FRAME_RESERVE));
    r.take(u64::from(len))
        .read_to_end(&mut body)
        .map_err(file_err(path))?;
    if body.len() != len as usize {
        return Err(file_err(path)(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("a snapshot frame of {len} bytes ends after {}", body.len()),
        )));
    }
    Ok(Some(body))
}

pub(crate) fn decode<'a, T: serde::Deserialize<'a>>(
    body: &'a [u8],
    path: &Path,
) -> Result<T, OpenraftListError> {
    postcard::from_bytes(body)
        .map_err(|e| OpenraftListError::Corrupt(format!("{}: snapshot frame: {e}", path.display())))
}

fn no_files() -> OpenraftListError {
    OpenraftListError::Range(
        "a store given by ListRaftStore::from_store has no snapshot files".into(),
    )
}

impl ListRaftStore {
    /// Builds a snapshot of the applied state into a new file.
    pub(crate) fn build_snapshot_file(&self) -> Result<ListSnapshot, OpenraftListError> {
        let store = self.store();
        let at = store.applied();
        let seq = self.inner.snap_seq.fetch_add(1, Ordering::Relaxed);
        let dir = self.inner.snap_dir.as_ref().ok_or_else(no_files)?;
        let path = dir.join(format!("snapshot-{at}-{seq}.bin"));
        let file = File::create(&path).map_err(file_err(&path))?;
        let mut w = BufWriter::new(file);
        w.write_all(MAGIC).map_err(file_err(&path))?;
        let last_membership = codec::membership_at(&*store, at)?;
        let position = if at == 0 {
            write_frame(&mut w, &StoreSnapshotMeta { index: 0, term: 0 }, &path)?;
            StoreSnapshotMeta { index: 0, term: 0 }
        } else {
            let (meta, stream) = store.snapshot(at)?;
            write_frame(&mut w, &meta, &path)?;
            let mut chunk: Vec<SnapshotItem> = Vec::with_capacity(CHUNK_ITEMS);
            for item in stream {
                chunk.push(item?);
                if chunk.len() == CHUNK_ITEMS {
                    write_frame(&mut w, &chunk, &path)?;
                    chunk.clear();
                }
            }
            if !chunk.is_empty() {
                write_frame(&mut w, &chunk, &path)?;
            }
            meta
        };
        w.write_all(&0u32.to_le_bytes()).map_err(file_err(&path))?;
        let file = w.into_inner().map_err(|e| OpenraftListError::File {
            path: path.clone(),
            source: e.into_error(),
        })?;
        file.sync_all().map_err(file_err(&path))?;
        let meta = SnapshotMeta {
            last_log_id: (position.index > 0).then(|| codec::log_id(position.index, position.term)),
            last_membership,
        };
        tracing::debug!(at, path = %path.display(), "snapshot built");
        self.set_current(meta.clone(), path.clone())?;
        let snapshot = File::open(&path).map_err(file_err(&path))?;
        Ok(ListSnapshot { meta, snapshot })
    }

    /// Replaces the store by the snapshot in `file` (the store is staged beside the
    /// current one and put in its place once durable; the hard state is kept).
    pub(crate) fn install_snapshot_file(
        &self,
        meta: &SnapshotMeta,
        mut file: File,
    ) -> Result<(), OpenraftListError> {
        let seq = self.inner.snap_seq.fetch_add(1, Ordering::Relaxed);
        let Some(last) = meta.last_log_id else {
            return Err(OpenraftListError::Range(
                "a snapshot without a last log id holds nothing to install".into(),
            ));
        };
        let index = last.index + 1;
        // Kept as the current snapshot: a copy in this store's snapshot directory.
        let dir = self.inner.snap_dir.as_ref().ok_or_else(no_files)?;
        let path = dir.join(format!("snapshot-{index}-{seq}.bin"));
        let src = PathBuf::from("<installed snapshot>");
        file.seek(SeekFrom::Start(0)).map_err(file_err(&src))?;
        let mut copy = File::create(&path).map_err(file_err(&path))?;
        std::io::copy(&mut file, &mut copy).map_err(file_err(&path))?;
        copy.sync_all().map_err(file_err(&path))?;
        drop(file);

        let mut r = BufReader::new(File::open(&path).map_err(file_err(&path))?);
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic).map_err(file_err(&path))?;
        if &magic != MAGIC {
            return Err(OpenraftListError::Corrupt(format!(
                "{}: not a snapshot file",
                path.display()
            )));
        }
        let head = read_frame(&mut r, &path)?
            .ok_or_else(|| OpenraftListError::Corrupt("snapshot without a position".into()))?;
        let position: StoreSnapshotMeta = decode(&head, &path)?;
        let want = StoreSnapshotMeta {
            index,
            term: codec::pack_leader(&last.leader_id)?,
        };
        if position != want {
            return Err(OpenraftListError::Corrupt(format!(
                "snapshot file at {position:?}, its metadata says {want:?}"
            )));
        }
        let provider = self.inner.provider.as_ref().ok_or_else(no_files)?;
        let mut provider = match provider.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let mut install = provider.begin_install(position)?;
        while let Some(body) = read_frame(&mut r, &path)? {
            let chunk: Vec<SnapshotItem> = decode(&body, &path)?;
            for item in &chunk {
                position.check_item(item)?;
            }
            install.push(chunk)?;
        }
        // No append, vote or truncation runs while the store is replaced; the hard
        // state is read and carried over under the same lock.
        let mut guard = match self.inner.store.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let hard = guard.hard_state();
        let fresh: Arc<dyn Store> = install.finish(hard)?;
        *guard = fresh;
        drop(guard);
        drop(provider);
        self.set_purged_at_least(last);
        self.set_current(meta.clone(), path)?;
        tracing::info!(snapshot = %last, "snapshot installed");
        Ok(())
    }

    /// The last snapshot built or installed since the store was opened.
    pub(crate) fn current_snapshot(&self) -> Result<Option<ListSnapshot>, OpenraftListError> {
        let cur = match self.inner.snapshot.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let Some(cur) = cur.as_ref() else {
            return Ok(None);
        };
        let snapshot = File::open(&cur.path).map_err(file_err(&cur.path))?;
        Ok(Some(ListSnapshot {
            meta: cur.meta.clone(),
            snapshot,
        }))
    }

    /// Makes `path` the current snapshot (durably, in the adapter's file), then
    /// removes the previous one's file.
    fn set_current(&self, meta: SnapshotMeta, path: PathBuf) -> Result<(), OpenraftListError> {
        let old = lock(&self.inner.snapshot).replace(CurrentSnapshot { meta, path });
        self.persist_meta()?;
        if let Some(old) = old {
            // Readers that opened it keep their handle (unlinking does not close it).
            if let Err(e) = std::fs::remove_file(&old.path) {
                tracing::warn!(path = %old.path.display(), error = %e, "could not remove an old snapshot file");
            }
        }
        Ok(())
    }
}
