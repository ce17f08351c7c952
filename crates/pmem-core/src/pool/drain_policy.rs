//! How an `Msync`-mode drain syncs: grouped or serialised, and with which calls.
//!
//! Chosen once per pool, when it is opened or created, from
//! [`crate::OpenOptions::drain`] or else the environment (never per flush or drain):
//!
//! | variable | effect |
//! | --- | --- |
//! | `PMKIT_GROUP_COMMIT=0` | the old serialised drain (every drain takes the drain lock and syncs), for A/B runs |
//! | `PMKIT_DRAIN_SYNC=msync` | one `msync(MS_SYNC)` over the span of the pending pages |
//! | `PMKIT_DRAIN_SYNC=fdatasync` | `sync_file_range(SYNC_FILE_RANGE_WRITE)` per pending range, then one `fdatasync` |
//!
//! A value neither accepts fails the open or create with
//! [`PoolError::InvalidEnv`] naming the variable, as `PMKIT_PERSISTENCE_DOMAIN`
//! does: a typo in an A/B switch must not silently measure the default.

use std::ffi::OsStr;
use std::path::Path;

use crate::PoolError;

/// The variable that turns group commit off (`0`) for A/B runs.
pub const GROUP_COMMIT_ENV: &str = "PMKIT_GROUP_COMMIT";

/// The variable that picks the drain's sync calls (`msync`, `fdatasync`).
pub const DRAIN_SYNC_ENV: &str = "PMKIT_DRAIN_SYNC";

/// The calls one drain makes to make the pending ranges durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DrainSync {
    /// One `msync(MS_SYNC)` over the span from the lowest to the highest pending
    /// page. On Linux it writes back the span's dirty pages, waits for them and
    /// flushes the device cache (`vfs_fsync_range`).
    MsyncSpan,
    /// Starts write-back of each pending range with
    /// `sync_file_range(SYNC_FILE_RANGE_WRITE)`, then waits for it and flushes the
    /// device once with `fdatasync` (which also writes back every other dirty page of
    /// the file: earlier than asked, harmless). Falls back to `MsyncSpan` on a pool
    /// without a file descriptor.
    WriteThenFdatasync,
}

impl DrainSync {
    /// A short stable name (`msync`, `fdatasync`).
    pub fn name(self) -> &'static str {
        match self {
            DrainSync::MsyncSpan => "msync",
            DrainSync::WriteThenFdatasync => "fdatasync",
        }
    }
}

/// How an `Msync`-mode pool drains: grouped or serialised, and with which calls.
///
/// Chosen once per pool, when it is opened or created, from
/// [`crate::OpenOptions::drain`] or else the environment ([`GROUP_COMMIT_ENV`]:
/// `0` serialises drains; [`DRAIN_SYNC_ENV`]: `msync` or `fdatasync`, see
/// [`DrainSync`]). A value neither accepts fails the open with
/// [`PoolError::InvalidEnv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DrainPolicy {
    /// Concurrent drains share one sync (group commit); `false` serialises them,
    /// one sync each, as before group commit existed.
    pub group_commit: bool,
    /// The calls each sync makes.
    pub sync: DrainSync,
}

impl Default for DrainPolicy {
    /// Group commit, with one `msync` over the span. The two sync strategies
    /// measured alike (`persist_cost`, `durable.pieces.*`, ext4 on a virtio disk,
    /// 3 rounds of 1 s): 1 thread with 2 and with 16 ranges 64 KiB apart, about
    /// 4.0 ms per drain either way (msync 3454–3998 µs, fdatasync 3194–3999 µs over
    /// three runs); 8 threads, no stable winner (one run favoured each, by
    /// 3–15×, both ways). At equal cost `msync` wins on simplicity: one call
    /// instead of one per range plus one, and no file descriptor needed.
    fn default() -> Self {
        DrainPolicy {
            group_commit: true,
            sync: DrainSync::MsyncSpan,
        }
    }
}

impl DrainPolicy {
    /// The behaviour before group commit: drains serialised, one `msync` over the
    /// span each (what `PMKIT_GROUP_COMMIT=0` selects).
    pub fn serial() -> Self {
        DrainPolicy {
            group_commit: false,
            sync: DrainSync::MsyncSpan,
        }
    }

    /// The default, adjusted by `PMKIT_GROUP_COMMIT` and `PMKIT_DRAIN_SYNC`; a
    /// value neither accepts is [`PoolError::InvalidEnv`] naming the variable and
    /// `path` (the pool being opened), as for `PMKIT_PERSISTENCE_DOMAIN`.
    pub fn from_env(path: &Path) -> Result<Self, PoolError> {
        Self::from_values(
            std::env::var_os(GROUP_COMMIT_ENV).as_deref(),
            std::env::var_os(DRAIN_SYNC_ENV).as_deref(),
            path,
        )
    }

    fn from_values(
        group: Option<&OsStr>,
        sync: Option<&OsStr>,
        path: &Path,
    ) -> Result<DrainPolicy, PoolError> {
        let invalid = |var, value, expected| PoolError::invalid_env(path, var, value, expected);
        let mut p = DrainPolicy::default();
        if let Some(v) = group {
            match v.to_str() {
                Some("0" | "off" | "false" | "no") => {
                    // The old behaviour, whole: serialised and one msync over the span.
                    p = DrainPolicy::serial();
                }
                // As for the other variables: an empty one is an unset one.
                Some("" | "1" | "on" | "true" | "yes") => {}
                _ => return Err(invalid(GROUP_COMMIT_ENV, v, "0 or 1 (off/on)")),
            }
        }
        if let Some(v) = sync {
            match v.to_str() {
                Some("") => {}
                Some("msync") => p.sync = DrainSync::MsyncSpan,
                Some("fdatasync") => p.sync = DrainSync::WriteThenFdatasync,
                _ => return Err(invalid(DRAIN_SYNC_ENV, v, "msync or fdatasync")),
            }
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(g: Option<&str>, s: Option<&str>) -> Result<DrainPolicy, PoolError> {
        DrainPolicy::from_values(g.map(OsStr::new), s.map(OsStr::new), Path::new("/p.pool"))
    }

    #[test]
    fn the_switches_parse() {
        let ok = |g, s| parse(g, s).expect("accepted");
        assert_eq!(ok(None, None), DrainPolicy::default());
        assert_eq!(ok(Some(""), Some("")), DrainPolicy::default());
        assert_eq!(ok(Some("0"), None), DrainPolicy::serial());
        assert_eq!(ok(Some("1"), None), DrainPolicy::default());
        assert_eq!(
            ok(None, Some("fdatasync")).sync,
            DrainSync::WriteThenFdatasync
        );
        assert_eq!(ok(None, Some("msync")).sync, DrainSync::MsyncSpan);
        assert!(!ok(Some("0"), Some("fdatasync")).group_commit);
    }

    #[test]
    fn bad_values_are_errors_naming_the_variable_and_the_pool() {
        for (g, s, var) in [
            (Some("maybe"), None, GROUP_COMMIT_ENV),
            (None, Some("bogus"), DRAIN_SYNC_ENV),
            (Some("1"), Some("fsync"), DRAIN_SYNC_ENV),
        ] {
            match parse(g, s) {
                Err(e @ PoolError::InvalidEnv { var: v, .. }) => {
                    assert_eq!(v, var);
                    let text = e.to_string();
                    assert!(text.contains(var) && text.contains("/p.pool"), "{text}");
                }
                other => panic!("{g:?} {s:?}: {other:?}"),
            }
        }
        // Not UTF-8: an error too, never a panic.
        use std::os::unix::ffi::OsStrExt;
        let bad = OsStr::from_bytes(&[0xff]);
        assert!(DrainPolicy::from_values(Some(bad), None, Path::new("p")).is_err());
    }
}
