//! Snapshots: the compacted list's live records at the applied index, written to a
//! file in chunks and installed from one chunk by chunk.

use std::path::PathBuf;

use crate::types::SnapshotMeta;

/// The last snapshot built or installed.
pub(crate) struct CurrentSnapshot {
    /// Its metadata.
    pub(crate) meta: SnapshotMeta,
    /// Its file.
    pub(crate) path: PathBuf,
}
