//! Why a command failed, as the one line `pmkit: FILE: reason` on stderr.

use std::fmt;
use std::path::{Path, PathBuf};

use pmem_core::{AllocError, PoolError};

/// A failed command: the file concerned (if any) and a one-line reason.
#[derive(Debug)]
pub struct Failure {
    file: Option<PathBuf>,
    reason: String,
}

impl Failure {
    /// A failure concerning `file`.
    pub fn new(file: &Path, reason: impl Into<String>) -> Failure {
        Failure {
            file: Some(file.to_path_buf()),
            reason: reason.into(),
        }
    }

    /// A failure concerning no file in particular.
    pub fn general(reason: impl Into<String>) -> Failure {
        Failure {
            file: None,
            reason: reason.into(),
        }
    }

    /// A pool error on `file`, worded without repeating the path.
    pub fn pool(file: &Path, e: &PoolError) -> Failure {
        Failure::new(file, pool_reason(file, e))
    }

    /// A page-allocator error on `file`.
    pub fn alloc(file: &Path, e: &AllocError) -> Failure {
        let reason = match e {
            AllocError::Pool(p) => pool_reason(file, p),
            other => other.to_string(),
        };
        Failure::new(file, format!("page allocator: {reason}"))
    }
}

/// Maps an error writing the command's output to a failure. A closed pipe
/// (`pmkit pool info FILE | head -1`) is not one: the reader wanted no more.
pub fn output(written: std::io::Result<()>) -> Result<(), Failure> {
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::general(format!("writing output: {e}")))
        }
        _ => Ok(()),
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line, whatever the reason's source put in it, and no control bytes
        // (a file name's escape sequence) reach the terminal.
        let reason = crate::human::one_line(&self.reason);
        match &self.file {
            Some(file) => write!(f, "{}: {reason}", crate::human::path(file)),
            None => f.write_str(&reason),
        }
    }
}

/// The reason of a pool error on `file`, without the path when the error names
/// `file` itself.
fn pool_reason(file: &Path, e: &PoolError) -> String {
    match e {
        PoolError::Io { op, path, source } if path == file => format!("cannot {op}: {source}"),
        PoolError::Io { op, path, source } => {
            format!("cannot {op} {}: {source}", crate::human::path(path))
        }
        PoolError::AlreadyExists { .. } => "file already exists (left untouched)".to_owned(),
        PoolError::Locked { .. } => {
            "pool is locked: it is open read-write (in this or another process)".to_owned()
        }
        PoolError::UnsupportedFileType { kind, .. } => format!("{kind}, not a pool file"),
        PoolError::InvalidEnv {
            var,
            value,
            expected,
            ..
        } => format!("environment variable {var}={value:?} is invalid: expected {expected}"),
        other => other.to_string(),
    }
}
