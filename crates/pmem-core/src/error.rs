//! Typed errors of pools and pointers.
//!
//! Every way a file can fail to be a usable pool has its own variant, so callers
//! (and `pmkit pool check`) can say exactly what is wrong. Opening never writes to
//! the file, whatever the error.

use std::path::PathBuf;

/// Errors from creating, opening, mapping and addressing a pool.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// An operating-system call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`open`, `create`, `mmap`, `msync`, ...).
        op: &'static str,
        /// The file concerned (empty for anonymous pools).
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// `create` found a file already at the path.
    #[error("{path}: file already exists")]
    AlreadyExists {
        /// The path.
        path: PathBuf,
    },
    /// Another open pool (in this or another process) holds the file's lock.
    #[error("{path}: pool is locked by another open (in this or another process)")]
    Locked {
        /// The path.
        path: PathBuf,
    },
    /// The path is not a regular file or a device-DAX device.
    #[error("{path}: {kind}, not a pool file")]
    UnsupportedFileType {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// The file has no bytes at all.
    #[error("file is empty: not a pool")]
    Empty,
    /// The file does not start with the pool magic.
    #[error("not a pmkit pool (bad magic)")]
    NotAPool,
    /// The file is shorter than its header says it should be.
    #[error("pool is truncated: {actual} bytes, expected {expected}")]
    Truncated {
        /// Bytes present.
        actual: u64,
        /// Bytes the header (or the header itself) needs.
        expected: u64,
    },
    /// The header's format version is not one this build reads.
    #[error("unsupported pool format version {found} (this build reads version {supported})")]
    UnsupportedVersion {
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// The header checksum does not match its contents.
    #[error("header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BadChecksum {
        /// Checksum stored in the header.
        stored: u32,
        /// Checksum of the header bytes as read.
        computed: u32,
    },
    /// The header checksums correctly but describes an impossible pool.
    #[error("corrupt pool header: {reason}")]
    Corrupt {
        /// What is inconsistent.
        reason: String,
    },
    /// The pool was created for another layout.
    #[error("layout mismatch: pool has layout {found:?}, expected {expected:?}")]
    LayoutMismatch {
        /// Layout asked for.
        expected: String,
        /// Layout in the pool.
        found: String,
    },
    /// A layout name is empty, too long, or contains a NUL byte.
    #[error("invalid layout name {name:?}: must be 1..={max} bytes without NUL")]
    InvalidLayoutName {
        /// The rejected name.
        name: String,
        /// Maximum length in bytes.
        max: usize,
    },
    /// A requested pool size is too small, too large, or not representable.
    #[error("invalid pool size {size}: {reason}")]
    InvalidSize {
        /// The requested size in bytes.
        size: u64,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// An offset range falls outside the pool.
    #[error("range {offset}+{len} is out of bounds of the pool ({pool_len} bytes)")]
    OutOfBounds {
        /// Start offset.
        offset: u64,
        /// Length in bytes.
        len: u64,
        /// Pool length.
        pool_len: u64,
    },
    /// An offset is not aligned for the type it points to.
    #[error("offset {offset} is not aligned to {align}")]
    Misaligned {
        /// The offset.
        offset: u64,
        /// Required alignment.
        align: u64,
    },
    /// A null pointer was dereferenced.
    #[error("null pointer dereference")]
    Null,
    /// The pool has no root object, or one of another id, layout version or size.
    #[error("root mismatch: pool root is {found_id:?} version {found_version} ({found_size} bytes), asked for {expected_id:?} version {expected_version} ({expected_size} bytes)")]
    RootMismatch {
        /// [`crate::RootType::ROOT_ID`] asked for.
        expected_id: String,
        /// [`crate::RootType::LAYOUT_VERSION`] asked for.
        expected_version: u32,
        /// Size of the type asked for.
        expected_size: u64,
        /// Root id recorded in the pool (empty if the pool has no root).
        found_id: String,
        /// Layout version recorded in the pool (0 if none).
        found_version: u32,
        /// Root size recorded in the pool.
        found_size: u64,
    },
    /// A root id is empty, longer than 63 bytes, or contains a NUL byte.
    #[error("invalid root id {id:?}: must be 1..=63 bytes without NUL")]
    InvalidRootId {
        /// The rejected id.
        id: String,
    },
    /// A write API was given a range that overlaps the pool header area (the first
    /// [`crate::pool::HEADER_AREA`] bytes), which is written only at creation.
    #[error(
        "range {offset}+{len} overlaps the pool header area (the first 4096 bytes are read-only)"
    )]
    HeaderOverlap {
        /// Start offset.
        offset: u64,
        /// Length in bytes.
        len: u64,
    },
    /// A write was attempted on a pool opened read-only.
    #[error("pool is open read-only")]
    ReadOnly,
    /// An environment variable that configures pools holds a value it does not
    /// accept (e.g. `PMKIT_PERSISTENCE_DOMAIN=eadr`); the open is refused rather
    /// than guessing.
    #[error("{path}: environment variable {var}={value:?} is invalid: expected {expected}")]
    InvalidEnv {
        /// The pool being opened or created (empty for anonymous pools).
        path: PathBuf,
        /// The variable's name.
        var: &'static str,
        /// Its value (lossily decoded).
        value: String,
        /// What it accepts.
        expected: &'static str,
    },
    /// The device's unsafe-shutdown count moved while the pool was open: writes it
    /// reported durable may be lost. Open with
    /// [`crate::OpenOptions::accept_unsafe_shutdown`] to take the pool anyway.
    #[error("{path}: unsafe shutdown while the pool was open (device count {recorded} at open, {now} now): durable writes may be lost")]
    UnsafeShutdown {
        /// The pool file.
        path: PathBuf,
        /// The count recorded when the pool was last opened read-write.
        recorded: u64,
        /// The count now.
        now: u64,
    },
    /// A device-DAX device's geometry is unknown in sysfs, or does not fit the pool.
    #[error("{path}: device DAX: {reason}")]
    DevDax {
        /// The device.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    /// The platform lists bad blocks (poisoned media) inside the pool file. A
    /// read-write open or a create refuses the pool; a read-only open (for
    /// inspection) proceeds and lists them in [`crate::Pool::platform`].
    #[error(
        "{path}: bad blocks inside the pool: {}",
        crate::platform::badblocks::list(ranges)
    )]
    BadBlocks {
        /// The pool file.
        path: PathBuf,
        /// The bad ranges, as offsets into the pool file.
        ranges: Vec<crate::platform::BadRange>,
    },
}

impl PoolError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        PoolError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// [`PoolError::InvalidEnv`]: `var` holds `value`, which is not `expected`,
    /// for the pool at `path`.
    pub(crate) fn invalid_env(
        path: &std::path::Path,
        var: &'static str,
        value: &std::ffi::OsStr,
        expected: &'static str,
    ) -> Self {
        PoolError::InvalidEnv {
            path: path.to_path_buf(),
            var,
            value: value.to_string_lossy().into_owned(),
            expected,
        }
    }
}
