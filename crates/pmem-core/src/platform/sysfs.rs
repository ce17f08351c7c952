//! The sysfs root, reading its attribute files, and finding a file's device and nd
//! region.
//!
//! Everything here is a pure read of a directory tree, so tests point it at a fake
//! tree in a tempdir. The real root is `/sys`; [`SYSFS_ROOT_ENV`] names another.
//!
//! From a file to its region (as libpmem2 does, without libndctl):
//! a regular file's `st_dev` (a device-DAX node's `st_rdev`) is `MAJ:MIN`;
//! `<root>/dev/block/MAJ:MIN` (`dev/char/...` for device DAX) is a symlink to the
//! device's directory under `<root>/devices/...`; the nd region is the nearest
//! ancestor directory named `regionN`. A device that is not below a region (a virtio
//! disk, tmpfs, NVMe) is not persistent memory that the nd subsystem describes.

use std::fs::Metadata;
use std::path::{Path, PathBuf};

use super::{Detected, PlatformError};

/// The environment variable that replaces `/sys` as the sysfs root (tests use fake
/// trees).
pub const SYSFS_ROOT_ENV: &str = "PMKIT_SYSFS_ROOT";

/// The sysfs root: `$PMKIT_SYSFS_ROOT` if set and not empty, else `/sys`.
pub fn sysfs_root() -> PathBuf {
    match std::env::var_os(SYSFS_ROOT_ENV) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from("/sys"),
    }
}

/// Whether a device number names a block or a character device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// The device holding a regular file's file system (`st_dev`).
    Block,
    /// A device-DAX character device itself (`st_rdev`).
    Char,
}

/// A device number, as sysfs spells it under `dev/block` or `dev/char`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceNode {
    /// Block or character.
    pub kind: DeviceKind,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

impl DeviceNode {
    /// The device behind a file: the file system's block device for a regular file,
    /// the device itself for a character device; `None` for anything else.
    pub fn of(meta: &Metadata) -> Option<DeviceNode> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let (kind, dev) = if meta.file_type().is_file() {
            (DeviceKind::Block, meta.dev())
        } else if meta.file_type().is_char_device() {
            (DeviceKind::Char, meta.rdev())
        } else {
            return None;
        };
        Some(DeviceNode {
            kind,
            major: libc::major(dev),
            minor: libc::minor(dev),
        })
    }

    /// `<root>/dev/block/MAJ:MIN` or `<root>/dev/char/MAJ:MIN`.
    pub fn sysfs_link(&self, root: &Path) -> PathBuf {
        let class = match self.kind {
            DeviceKind::Block => "block",
            DeviceKind::Char => "char",
        };
        root.join("dev")
            .join(class)
            .join(format!("{}:{}", self.major, self.minor))
    }
}

impl std::fmt::Display for DeviceNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// Where a device lives in sysfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The device number.
    pub node: DeviceNode,
    /// The device's own directory (the resolved `dev/.../MAJ:MIN` link).
    pub device_dir: PathBuf,
    /// The nd region directory (`.../regionN`) the device belongs to.
    pub region_dir: PathBuf,
}

/// Finds `node`'s device directory and nd region under `root`. `Unknown` when sysfs
/// has no such device or the device is not below an nd region.
pub fn locate(root: &Path, node: DeviceNode) -> Result<Detected<Located>, PlatformError> {
    let link = node.sysfs_link(root);
    let device_dir = match std::fs::canonicalize(&link) {
        Ok(dir) => dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Detected::unknown(format!(
                "device {node} has no {} (not a device sysfs describes, or no sysfs)",
                link.display()
            )))
        }
        Err(e) => return Err(PlatformError::unreadable(&link, &e)),
    };
    // The walk stops at the root: a fake tree must not climb into the real one.
    let stop = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let region_dir = device_dir
        .ancestors()
        .take_while(|dir| *dir != stop && dir.starts_with(&stop))
        .find(|dir| {
            dir.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_region_name)
        })
        .map(Path::to_path_buf);
    Ok(match region_dir {
        Some(region_dir) => Detected::found(
            Located {
                node,
                device_dir,
                region_dir,
            },
            link,
        ),
        None => Detected::unknown(format!(
            "not on an nd region: device {node} is {}",
            device_dir.display()
        )),
    })
}

/// `regionN` with N decimal.
fn is_region_name(name: &str) -> bool {
    name.strip_prefix("region")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Reads a sysfs attribute as text: `None` if the file does not exist.
pub fn read_attr(path: &Path) -> Result<Option<String>, PlatformError> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| PlatformError::malformed(path, "not UTF-8 text")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(PlatformError::unreadable(path, &e)),
    }
}

/// Parses a one-line unsigned integer attribute, decimal or `0x` hexadecimal (as
/// `resource` files are).
pub fn parse_u64(path: &Path, text: &str) -> Result<u64, PlatformError> {
    let t = text.trim();
    let parsed = match t.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse::<u64>(),
    };
    parsed.map_err(|_| PlatformError::malformed(path, format!("expected a number, found {t:?}")))
}

/// Reads a required-if-present number attribute: `None` if the file is missing.
pub fn read_u64(path: &Path) -> Result<Option<u64>, PlatformError> {
    read_attr(path)?
        .map(|text| parse_u64(path, &text))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_names() {
        assert!(is_region_name("region0"));
        assert!(is_region_name("region12"));
        assert!(!is_region_name("region"));
        assert!(!is_region_name("regionx"));
        assert!(!is_region_name("nregion0"));
    }

    #[test]
    fn numbers_decimal_and_hex_and_garbage_names_the_file() {
        let p = Path::new("/x/size");
        assert_eq!(parse_u64(p, "42\n").ok(), Some(42));
        assert_eq!(parse_u64(p, "0x1000\n").ok(), Some(4096));
        let err = parse_u64(p, "lots").err();
        assert!(matches!(err, Some(PlatformError::Malformed { ref path, .. }) if path == p));
    }
}
