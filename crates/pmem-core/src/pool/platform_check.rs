//! Platform detection at open and create: once per pool, never per flush.
//!
//! Bad blocks inside the pool refuse a read-write open or a create with
//! [`PoolError::BadBlocks`]: reading poisoned media raises `SIGBUS`, and a write
//! there may not persist. A read-only open proceeds (it is how `pmkit pool info` and
//! `check` inspect such a pool) and logs a warning; the ranges are in
//! [`Pool::platform`](super::Pool::platform). Other findings (an unknown or broken
//! sysfs item) never refuse a pool: they are logged and reported.

use std::fs::File;
use std::path::Path;

use crate::platform::Platform;
use crate::PoolError;

/// Detects the platform of the pool file and applies the bad-block rule.
pub(super) fn detect(
    file: &File,
    path: &Path,
    pool_len: u64,
    read_only: bool,
) -> Result<Platform, PoolError> {
    let platform = Platform::detect(file, path, pool_len);
    for err in platform.errors() {
        tracing::warn!(path = %path.display(), error = %err, "platform detection: unreadable sysfs");
    }
    let bad = platform.bad_ranges();
    if !bad.is_empty() {
        if !read_only {
            return Err(PoolError::BadBlocks {
                path: path.to_path_buf(),
                ranges: bad.to_vec(),
            });
        }
        tracing::warn!(
            path = %path.display(),
            ranges = %crate::platform::badblocks::list(bad),
            "bad blocks inside the pool (opened read-only)"
        );
    }
    Ok(platform)
}
