//! Typed errors of platform detection: every one names the sysfs file it is about.
//!
//! A missing file is not an error (the platform simply does not report that item:
//! detection says "unknown" and why). An error means a file that exists could not be
//! read, or holds something this build does not understand; the path lets a user look
//! at it.

use std::path::PathBuf;

/// A sysfs file that could not be read or parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlatformError {
    /// The file exists but its contents are not what the kernel ABI documents.
    #[error("{path}: malformed: {reason}")]
    Malformed {
        /// The sysfs file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The file (or link, or directory) exists but reading it failed.
    #[error("{path}: unreadable: {reason}")]
    Unreadable {
        /// The sysfs file.
        path: PathBuf,
        /// The operating system's error, as text (kept `Clone` for reports).
        reason: String,
    },
}

impl PlatformError {
    pub(crate) fn malformed(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        PlatformError::Malformed {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn unreadable(path: impl Into<PathBuf>, err: &std::io::Error) -> Self {
        PlatformError::Unreadable {
            path: path.into(),
            reason: err.to_string(),
        }
    }

    /// The file the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            PlatformError::Malformed { path, .. } | PlatformError::Unreadable { path, .. } => path,
        }
    }
}
