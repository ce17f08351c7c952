//! The store's typed errors.

use pmem_core::PoolError;

/// What can go wrong in a store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The pool could not be created, opened, read or written.
    #[error("pool: {0}")]
    Pool(#[from] PoolError),
    /// A file of the WAL engine could not be read or written.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The persistent structure is damaged (checksum, bounds, a cycle, an index gap).
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// No free page is left for the record (compaction may free some).
    #[error("store full: no free page left for a {needed}-byte record")]
    Full {
        /// Bytes the record needs.
        needed: u64,
    },
    /// The record does not fit in one page.
    #[error("record of {size} bytes does not fit in a page (at most {max} bytes)")]
    TooLarge {
        /// Encoded record size.
        size: u64,
        /// The largest record a page holds.
        max: u64,
    },
    /// A Raft index out of sequence: appends take `last_index + 1`.
    #[error("entry index {index} does not follow the last index {last}")]
    OutOfOrder {
        /// The index given.
        index: u64,
        /// The store's last index.
        last: u64,
    },
    /// A truncation would remove applied (committed) entries.
    #[error("cannot truncate after {after}: entries up to {applied} are applied")]
    TruncateApplied {
        /// The requested truncation point.
        after: u64,
        /// The applied index.
        applied: u64,
    },
    /// A snapshot was asked for above the applied index, or below what compaction kept.
    #[error(
        "no snapshot at {at}: snapshots are served between {floor} and the applied index {applied}"
    )]
    SnapshotUnavailable {
        /// The requested index.
        at: u64,
        /// The lowest index a snapshot can be taken at.
        floor: u64,
        /// The applied index.
        applied: u64,
    },
    /// `install_snapshot` needs a store that holds no entries.
    #[error("snapshot installation needs an empty store (last index {last})")]
    NotEmpty {
        /// The store's last index.
        last: u64,
    },
    /// A node was told to open its existing store (the replica's `StartMode::Existing`, a layer above)
    /// and there is none: its data is gone or was never created. Starting it empty
    /// would let it vote as if it had never voted nor held any entry.
    #[error(
        "no store at {}: this node's data is gone or was never created; start it to bootstrap (a founding member of a new cluster) or to join (an existing member whose data was lost)",
        path.display()
    )]
    NoStore {
        /// Where the store should be (the list engine's pool file, the WAL
        /// engine's directory).
        path: std::path::PathBuf,
    },
    /// A path the store was to open is not the kind of file it must be (a FIFO,
    /// a device, a directory where a file belongs...). Refused before it is
    /// opened: opening a FIFO blocks until a writer appears.
    #[error("{}: is {kind}, not {expected}; refusing to open it", path.display())]
    NotRegular {
        /// The path.
        path: std::path::PathBuf,
        /// What it is.
        kind: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// An argument is out of range (a term that does not fit, a zero page size...).
    #[error("invalid argument: {0}")]
    Invalid(String),
}

/// Shorthand for results of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
