//! The adapter's own durable facts, in a small file beside the store
//! (`<store>.openraft-meta`): the last purged log id and the current snapshot.
//!
//! The store cannot hold them: every record of the list is a log entry at the
//! next index. Both change rarely (a purge follows a snapshot), so the file is
//! replaced atomically each time (written, synced, renamed over the old one, the
//! directory synced). A purged id lives here because compaction may lag a purge
//! (the list drops only what its applied index allows): on open, the store's
//! applied index is raised to the purged id (those entries were applied before
//! they could be purged), and reads keep hiding what was purged.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::OpenraftListError;
use crate::types::{LogId, SnapshotMeta};

/// What the file holds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct SideMeta {
    /// The last purged log id.
    pub(crate) purged: Option<LogId>,
    /// The current snapshot: its metadata and its file's name in the snapshot
    /// directory.
    pub(crate) snapshot: Option<(SnapshotMeta, String)>,
}

fn file_err(path: &Path) -> impl FnOnce(std::io::Error) -> OpenraftListError + '_ {
    move |source| OpenraftListError::File {
        path: path.to_path_buf(),
        source,
    }
}

impl SideMeta {
    /// Reads `path`; the default if there is none.
    pub(crate) fn load(path: &Path) -> Result<SideMeta, OpenraftListError> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| OpenraftListError::Corrupt(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SideMeta::default()),
            Err(e) => Err(file_err(path)(e)),
        }
    }

    /// Replaces `path` with this, durably and atomically.
    pub(crate) fn store(&self, path: &Path) -> Result<(), OpenraftListError> {
        let bytes = serde_json::to_vec(self)
            .map_err(|e| OpenraftListError::Corrupt(format!("meta encoding: {e}")))?;
        let tmp = crate::store::sibling(path, ".tmp");
        let mut f = std::fs::File::create(&tmp).map_err(file_err(&tmp))?;
        f.write_all(&bytes).map_err(file_err(&tmp))?;
        f.sync_all().map_err(file_err(&tmp))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(file_err(path))?;
        let dir: PathBuf = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(file_err(&dir))
    }
}
