//! In-place upgrade of a version-2 pool to version 3, only when asked.
//!
//! Order (crash-safe, see [`super::header`]): open read-write (a version-2 open
//! writes nothing), write and persist the shutdown-state record in the header
//! area's unused bytes (a version-2 reader ignores them; none where sysfs has no
//! counter), then rewrite the header
//! with the new version and checksum and persist it. A crash between the two
//! leaves a version-2 pool; a crash while the header is written leaves a header
//! whose checksum matches one of the two versions, which [`super::Header::parse`]
//! reads as that version.

use std::path::Path;

use super::header::{FORMAT_VERSION, HEADER_LEN};
use super::options::OpenOptions;
use super::Pool;
use crate::PoolError;

impl Pool {
    /// Upgrades the pool at `path` to the current format version in place. Returns
    /// the version it had (already current: nothing is written).
    pub fn upgrade(path: impl AsRef<Path>) -> Result<u32, PoolError> {
        let path = path.as_ref();
        let mut pool = Pool::open_with(path, &OpenOptions::new())?;
        let old = pool.header.version;
        if old == FORMAT_VERSION {
            return Ok(old);
        }
        let state = pool
            .platform
            .shutdown
            .as_ref()
            .ok()
            .and_then(|d| d.value())
            .cloned();
        if let Some(state) = &state {
            pool.write_record(Some(state), false)?;
            pool.shutdown_recorded = true;
        }
        let mut header = pool.header;
        header.version = FORMAT_VERSION;
        header.checksum = header.compute_checksum();
        pool.header = header;
        pool.write_header();
        pool.persist(0, HEADER_LEN as u64)?;
        tracing::info!(path = %path.display(), from = old, to = FORMAT_VERSION, "pool upgraded");
        // Dropping marks the new record clean.
        pool.close()?;
        Ok(old)
    }
}
