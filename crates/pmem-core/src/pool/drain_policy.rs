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
//! An unrecognised value is logged (`tracing::warn`) and the default kept.

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

/// How an `Msync`-mode pool drains. See the [module documentation](self).
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

    /// The default, adjusted by `PMKIT_GROUP_COMMIT` and `PMKIT_DRAIN_SYNC`.
    pub fn from_env() -> Self {
        Self::from_values(
            std::env::var_os("PMKIT_GROUP_COMMIT").as_deref(),
            std::env::var_os("PMKIT_DRAIN_SYNC").as_deref(),
        )
    }

    fn from_values(group: Option<&std::ffi::OsStr>, sync: Option<&std::ffi::OsStr>) -> DrainPolicy {
        let mut p = DrainPolicy::default();
        match group.and_then(|v| v.to_str()) {
            None => {}
            Some("0" | "off" | "false" | "no") => {
                // The old behaviour, whole: serialised and one msync over the span.
                p = DrainPolicy::serial();
            }
            Some("" | "1" | "on" | "true" | "yes") => {}
            Some(other) => {
                tracing::warn!(value = other, "PMKIT_GROUP_COMMIT: not 0 or 1; kept on");
            }
        }
        match sync.and_then(|v| v.to_str()) {
            None | Some("") => {}
            Some("msync") => p.sync = DrainSync::MsyncSpan,
            Some("fdatasync") => p.sync = DrainSync::WriteThenFdatasync,
            Some(other) => {
                tracing::warn!(
                    value = other,
                    kept = p.sync.name(),
                    "PMKIT_DRAIN_SYNC: not msync or fdatasync"
                );
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    fn parse(g: Option<&str>, s: Option<&str>) -> DrainPolicy {
        DrainPolicy::from_values(g.map(OsStr::new), s.map(OsStr::new))
    }

    #[test]
    fn the_switches_parse_and_bad_values_keep_the_default() {
        assert_eq!(parse(None, None), DrainPolicy::default());
        assert_eq!(parse(Some("0"), None), DrainPolicy::serial());
        assert_eq!(parse(Some("1"), None), DrainPolicy::default());
        assert_eq!(parse(Some("maybe"), None), DrainPolicy::default());
        assert_eq!(
            parse(None, Some("fdatasync")).sync,
            DrainSync::WriteThenFdatasync
        );
        assert_eq!(parse(None, Some("msync")).sync, DrainSync::MsyncSpan);
        assert_eq!(parse(None, Some("bogus")).sync, DrainPolicy::default().sync);
        assert!(!parse(Some("0"), Some("fdatasync")).group_commit);
    }
}
