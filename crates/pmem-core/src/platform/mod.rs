//! What the platform says about a pool's device, read from sysfs once per pool.
//!
//! Pure reads of the sysfs tree (after PMDK's libpmem2, without libndctl), a file
//! per concept:
//! * [`sysfs`]: the root (`/sys`, or `$PMKIT_SYSFS_ROOT`), attribute reading, and
//!   the walk from a file's device number to its nd region;
//! * [`domain`]: the region's persistence domain (eADR/GPF `cpu_cache`, or ADR);
//! * [`shutdown`]: the region's DIMMs' unsafe-shutdown count and identity;
//! * [`badblocks`] and [`extents`]: the device's bad blocks as ranges of the file;
//! * [`devdax`]: a device-DAX device's size and alignment.
//!
//! Every item is a [`Probe`]: `Ok(Found { value, from })` names the sysfs file it was
//! read from; `Ok(Unknown { reason })` says plainly why the platform does not tell
//! (on a machine without persistent memory, every item is unknown: "not on an nd
//! region"); `Err(PlatformError)` names a file that exists but is unreadable or
//! malformed. Nothing here panics on any tree.
//!
//! [`Platform::detect`] runs once when a pool is opened or created (never per
//! flush); the pool keeps the result ([`crate::Pool::platform`]).

pub mod badblocks;
pub mod devdax;
pub mod domain;
mod error;
pub mod extents;
pub mod shutdown;
pub mod sysfs;

use std::fs::{File, Metadata};
use std::path::{Path, PathBuf};

pub use badblocks::{BadBlocks, BadRange};
pub use devdax::DevDaxGeometry;
pub use domain::PersistenceDomain;
pub use error::PlatformError;
pub use extents::{Extent, ExtentSource};
pub use shutdown::ShutdownState;
pub use sysfs::{sysfs_root, DeviceNode, Located, SYSFS_ROOT_ENV};

/// A detected item, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detected<T> {
    /// The platform reports it.
    Found {
        /// The value.
        value: T,
        /// The sysfs file (or directory) it was read from.
        from: PathBuf,
    },
    /// The platform does not report it.
    Unknown {
        /// Why, in words.
        reason: String,
    },
}

impl<T> Detected<T> {
    pub(crate) fn found(value: T, from: impl Into<PathBuf>) -> Self {
        Detected::Found {
            value,
            from: from.into(),
        }
    }

    pub(crate) fn unknown(reason: impl Into<String>) -> Self {
        Detected::Unknown {
            reason: reason.into(),
        }
    }

    /// The value, if found.
    pub fn value(&self) -> Option<&T> {
        match self {
            Detected::Found { value, .. } => Some(value),
            Detected::Unknown { .. } => None,
        }
    }

    /// Where it was read from, if found.
    pub fn from(&self) -> Option<&Path> {
        match self {
            Detected::Found { from, .. } => Some(from),
            Detected::Unknown { .. } => None,
        }
    }
}

/// One detected item: found, unknown, or a sysfs file that is broken.
pub type Probe<T> = Result<Detected<T>, PlatformError>;

/// Everything detected about a pool's device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    /// The sysfs root that was read.
    pub root: PathBuf,
    /// The device and its nd region.
    pub device: Probe<Located>,
    /// The region's persistence domain.
    pub domain: Probe<PersistenceDomain>,
    /// The region's unsafe-shutdown count and identity.
    pub shutdown: Probe<ShutdownState>,
    /// Bad blocks inside the pool.
    pub bad_blocks: Probe<BadBlocks>,
    /// A device-DAX device's geometry (`None` for a regular file).
    pub devdax: Option<Probe<DevDaxGeometry>>,
}

impl Platform {
    /// Nothing detected, for `reason` (anonymous and simulated pools).
    pub fn not_detected(reason: &str) -> Platform {
        Platform {
            root: PathBuf::new(),
            device: Ok(Detected::unknown(reason)),
            domain: Ok(Detected::unknown(reason)),
            shutdown: Ok(Detected::unknown(reason)),
            bad_blocks: Ok(Detected::unknown(reason)),
            devdax: None,
        }
    }

    /// Detects the platform of the open `file` at `path`, `pool_len` bytes of which
    /// are the pool, under [`sysfs_root`]. File extents come from FIEMAP (device DAX
    /// needs none).
    pub fn detect(file: &File, path: &Path, pool_len: u64) -> Platform {
        let root = sysfs_root();
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(e) => {
                return Platform::not_detected(&format!("stat {}: {e}", path.display()));
            }
        };
        let platform = if meta.file_type().is_file() {
            Platform::detect_in(&root, &meta, &extents::Fiemap::new(file, path), pool_len)
        } else {
            Platform::detect_in(&root, &meta, &extents::Identity, pool_len)
        };
        tracing::debug!(path = %path.display(), root = %root.display(), ?platform, "platform detected");
        platform
    }

    /// Detects the platform of a file with metadata `meta` under the sysfs tree at
    /// `root`, with its extents from `extents`.
    pub fn detect_in(
        root: &Path,
        meta: &Metadata,
        extents: &dyn ExtentSource,
        pool_len: u64,
    ) -> Platform {
        let Some(node) = DeviceNode::of(meta) else {
            return Platform::not_detected("not a regular file or a character device");
        };
        let devdax =
            (node.kind == sysfs::DeviceKind::Char).then(|| devdax::read_devdax(root, node));
        let device = sysfs::locate(root, node);
        let (domain, shutdown, bad_blocks) = match &device {
            Ok(Detected::Found { value: loc, .. }) => (
                domain::read_domain(&loc.region_dir),
                shutdown::read_shutdown(root, &loc.region_dir),
                pool_bad_blocks(loc, extents, pool_len),
            ),
            Ok(Detected::Unknown { reason }) => (
                Ok(Detected::unknown(reason.clone())),
                Ok(Detected::unknown(reason.clone())),
                Ok(Detected::unknown(reason.clone())),
            ),
            Err(e) => (Err(e.clone()), Err(e.clone()), Err(e.clone())),
        };
        Platform {
            root: root.to_path_buf(),
            device,
            domain,
            shutdown,
            bad_blocks,
            devdax,
        }
    }

    /// The broken sysfs files met (each item's error, once per file).
    pub fn errors(&self) -> Vec<&PlatformError> {
        let mut out: Vec<&PlatformError> = Vec::new();
        let all = [
            self.device.as_ref().err(),
            self.domain.as_ref().err(),
            self.shutdown.as_ref().err(),
            self.bad_blocks.as_ref().err(),
            self.devdax.as_ref().and_then(|d| d.as_ref().err()),
        ];
        for e in all.into_iter().flatten() {
            if !out.contains(&e) {
                out.push(e);
            }
        }
        out
    }

    /// The bad ranges inside the pool, if any were found.
    pub fn bad_ranges(&self) -> &[BadRange] {
        match &self.bad_blocks {
            Ok(Detected::Found { value, .. }) => &value.in_pool,
            _ => &[],
        }
    }
}

/// The device's bad blocks mapped into the pool's bytes.
fn pool_bad_blocks(loc: &Located, extents: &dyn ExtentSource, pool_len: u64) -> Probe<BadBlocks> {
    let (device, from) = match badblocks::read_device_badblocks(loc)? {
        Detected::Found { value, from } => (value, from),
        Detected::Unknown { reason } => return Ok(Detected::Unknown { reason }),
    };
    match badblocks::map_to_file(&device.ranges, extents, pool_len)? {
        Some(in_pool) => Ok(Detected::found(
            BadBlocks {
                in_pool,
                on_device: device.ranges.len(),
            },
            from,
        )),
        None => Ok(Detected::unknown(format!(
            "{} lists {} bad ranges, but the file system does not map the file's extents (no FIEMAP)",
            from.display(),
            device.ranges.len()
        ))),
    }
}

#[cfg(test)]
mod tests;
