//! Where a file's bytes lie on its device: the extent map bad blocks are matched
//! against.
//!
//! [`Fiemap`] asks the file system (the `FS_IOC_FIEMAP` ioctl, as PMDK's `extent`
//! module does); a file system without it (tmpfs) gives `None`, and bad blocks of
//! such a file are then reported unknown rather than guessed. Device DAX needs no
//! map: the file is the device ([`Identity`]). Tests give extents directly through
//! the [`ExtentSource`] trait (a `Vec<Extent>` is one).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::PlatformError;

/// A run of a file's bytes stored contiguously on its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Offset in the file.
    pub logical: u64,
    /// Offset on the device.
    pub physical: u64,
    /// Length in bytes.
    pub length: u64,
}

/// Gives a file's extents covering `0..len`, or `None` when they cannot be known.
pub trait ExtentSource {
    /// The extents, in any order.
    fn extents(&self, len: u64) -> Result<Option<Vec<Extent>>, PlatformError>;
}

impl ExtentSource for Vec<Extent> {
    fn extents(&self, _len: u64) -> Result<Option<Vec<Extent>>, PlatformError> {
        Ok(Some(self.clone()))
    }
}

/// A device-DAX device: file offset = device offset.
#[derive(Clone, Copy, Debug)]
pub struct Identity;

impl ExtentSource for Identity {
    fn extents(&self, len: u64) -> Result<Option<Vec<Extent>>, PlatformError> {
        Ok(Some(vec![Extent {
            logical: 0,
            physical: 0,
            length: len,
        }]))
    }
}

/// A regular file's extents from the `FS_IOC_FIEMAP` ioctl.
#[derive(Debug)]
pub struct Fiemap<'a> {
    /// The open file.
    pub file: &'a File,
    /// Its path, for errors.
    pub path: PathBuf,
}

impl<'a> Fiemap<'a> {
    /// The extent source of `file` at `path`.
    pub fn new(file: &'a File, path: &Path) -> Self {
        Fiemap {
            file,
            path: path.to_path_buf(),
        }
    }
}

/// `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
/// Sync the file before mapping, so delayed allocations have places.
const FIEMAP_FLAG_SYNC: u32 = 0x1;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// The extent's place is not known yet (delayed allocation).
const FIEMAP_EXTENT_UNKNOWN: u32 = 0x2;
/// Extents asked for per call.
const BATCH: usize = 64;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

#[repr(C)]
struct FiemapRequest {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
    fm_extents: [FiemapExtent; BATCH],
}

impl ExtentSource for Fiemap<'_> {
    fn extents(&self, len: u64) -> Result<Option<Vec<Extent>>, PlatformError> {
        let mut out = Vec::new();
        let mut start = 0u64;
        while start < len {
            let mut req = FiemapRequest {
                fm_start: start,
                fm_length: len - start,
                fm_flags: FIEMAP_FLAG_SYNC,
                fm_mapped_extents: 0,
                fm_extent_count: BATCH as u32,
                fm_reserved: 0,
                fm_extents: [FiemapExtent::default(); BATCH],
            };
            // SAFETY: FS_IOC_FIEMAP reads and writes a `struct fiemap` followed by
            // `fm_extent_count` extents; `req` is exactly that layout (repr(C), the
            // kernel's field order) with room for BATCH extents, and lives across
            // the call.
            let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), FS_IOC_FIEMAP, &mut req) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EINVAL) => Ok(None),
                    _ => Err(PlatformError::unreadable(&self.path, &e)),
                };
            }
            let mapped = (req.fm_mapped_extents as usize).min(BATCH);
            if mapped == 0 {
                break; // a hole to the end
            }
            let mut last = false;
            for fe in &req.fm_extents[..mapped] {
                if fe.fe_flags & FIEMAP_EXTENT_UNKNOWN != 0 {
                    return Ok(None);
                }
                out.push(Extent {
                    logical: fe.fe_logical,
                    physical: fe.fe_physical,
                    length: fe.fe_length,
                });
                start = fe.fe_logical.saturating_add(fe.fe_length);
                last |= fe.fe_flags & FIEMAP_EXTENT_LAST != 0;
            }
            if last {
                break;
            }
        }
        Ok(Some(out))
    }
}
