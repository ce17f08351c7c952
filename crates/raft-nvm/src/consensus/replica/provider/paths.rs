//! The files beside a store: the staging store, the old WAL directory moved
//! aside, the join marker, and making a rename among them durable.

use std::path::{Path, PathBuf};

use crate::storage::error::Result;

/// Where a snapshot is installed before it replaces the store: `<store>.incoming`.
pub(super) fn staging_path(store: &Path) -> PathBuf {
    sibling(store, ".incoming")
}

/// Where a WAL store is moved aside while the staged one takes its place:
/// `<store>.old`.
pub(super) fn aside_path(store: &Path) -> PathBuf {
    sibling(store, ".old")
}

/// The marker of a join that has not caught up yet: `<store>.joining`.
pub(super) fn join_marker(store: &Path) -> PathBuf {
    sibling(store, ".joining")
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
pub(super) fn sync_dir(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}
