//! The crate's error type: what opening a store or reading its applied state can
//! fail with.

use std::path::PathBuf;

/// Errors of this crate's own API (the openraft traits report `std::io::Error`, as
/// they must).
#[derive(Debug, thiserror::Error)]
pub enum OpenraftListError {
    /// The storage engine failed (media, corruption, a full pool).
    #[error(transparent)]
    Store(#[from] raft_nvm::StoreError),
    /// A file beside the store (a snapshot file) could not be read or written.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// What the store holds does not decode as what this crate writes.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// A value does not fit the encoding (a term, a node id).
    #[error("does not fit: {0}")]
    Range(String),
}
