//! Bad blocks of a pool's device, mapped to byte ranges of the pool file.
//!
//! The kernel lists known-poisoned media as lines `SECTOR COUNT` (512-byte sectors)
//! in a `badblocks` file:
//! * a pmem block device (fsdax): `<device>/badblocks`, offsets from the start of
//!   the device; a partition (`<device>/partition`) uses its disk's list, shifted by
//!   the partition's `start`;
//! * device DAX: the region's `badblocks`, offsets from the region's start; the
//!   device begins `resource(dax) - resource(region)` bytes into it (PMDK's
//!   `badblocks_get_namespace_bounds`).
//!
//! Device ranges are matched against the file's extents ([`super::extents`]); only
//! ranges that fall inside the pool's bytes are reported, as file offsets.

use std::path::{Path, PathBuf};

use super::extents::ExtentSource;
use super::sysfs::{parse_u64, read_attr, read_u64, DeviceKind, Located};
use super::{Detected, PlatformError};

/// The sector size of `badblocks` files, whatever the device's block size.
pub const SECTOR: u64 = 512;

/// A range of bytes: of the device in [`DeviceBadBlocks`], of the pool file in
/// [`BadBlocks::in_pool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BadRange {
    /// Start offset in bytes.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl std::fmt::Display for BadRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}..{} ({} bytes)",
            self.offset,
            self.offset + self.len,
            self.len
        )
    }
}

/// The ranges as one line (`a..b (n bytes), ...`), for messages.
pub fn list(ranges: &[BadRange]) -> String {
    ranges
        .iter()
        .map(BadRange::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The device's bad ranges, in bytes from the start of the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceBadBlocks {
    /// Ranges, in file order.
    pub ranges: Vec<BadRange>,
}

/// The bad blocks that concern a pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BadBlocks {
    /// Ranges of the pool file (file offsets) on bad media, sorted and merged.
    pub in_pool: Vec<BadRange>,
    /// How many bad ranges the whole device has (in the pool or not).
    pub on_device: usize,
}

/// Parses a `badblocks` file's text.
pub fn parse_badblocks(path: &Path, text: &str) -> Result<Vec<BadRange>, PlatformError> {
    let mut ranges = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad =
            |why: &str| PlatformError::malformed(path, format!("line {}: {why}: {line:?}", i + 1));
        let mut words = line.split_whitespace();
        let (Some(sector), Some(count), None) = (words.next(), words.next(), words.next()) else {
            return Err(bad("expected SECTOR COUNT"));
        };
        let sector = parse_u64(path, sector).map_err(|_| bad("sector is not a number"))?;
        let count = parse_u64(path, count).map_err(|_| bad("count is not a number"))?;
        let (Some(offset), Some(len)) = (sector.checked_mul(SECTOR), count.checked_mul(SECTOR))
        else {
            return Err(bad("range beyond 2^64 bytes"));
        };
        if len == 0 || offset.checked_add(len).is_none() {
            return Err(bad("empty or overflowing range"));
        }
        ranges.push(BadRange { offset, len });
    }
    Ok(ranges)
}

/// Reads the device's bad ranges (device-relative bytes), and the file it read.
pub fn read_device_badblocks(loc: &Located) -> Result<Detected<DeviceBadBlocks>, PlatformError> {
    let (path, shift) = match loc.node.kind {
        DeviceKind::Block => block_source(&loc.device_dir)?,
        DeviceKind::Char => match devdax_source(loc)? {
            Ok(found) => found,
            Err(reason) => return Ok(Detected::unknown(reason)),
        },
    };
    let Some(text) = read_attr(&path)? else {
        return Ok(Detected::unknown(format!("no {}", path.display())));
    };
    let ranges = parse_badblocks(&path, &text)?
        .into_iter()
        // Shift into the device's own offsets, dropping what lies before it.
        .filter_map(|r| {
            let end = r.offset + r.len;
            (end > shift).then(|| BadRange {
                offset: r.offset.saturating_sub(shift),
                len: end - r.offset.max(shift),
            })
        })
        .collect();
    Ok(Detected::found(DeviceBadBlocks { ranges }, path))
}

/// A bad-block list and the offset of our device in that list's device.
type Source = (PathBuf, u64);

/// The file listing a block device's bad blocks, and how far into that list's
/// device this one starts (non-zero for a partition).
fn block_source(device_dir: &Path) -> Result<Source, PlatformError> {
    if read_attr(&device_dir.join("partition"))?.is_some() {
        let start_path = device_dir.join("start");
        let start = read_u64(&start_path)?
            .ok_or_else(|| PlatformError::malformed(&start_path, "a partition without start"))?;
        let shift = start
            .checked_mul(SECTOR)
            .ok_or_else(|| PlatformError::malformed(&start_path, "start beyond 2^64 bytes"))?;
        Ok((device_dir.join("../badblocks"), shift))
    } else {
        Ok((device_dir.join("badblocks"), 0))
    }
}

/// Device DAX: the region's list and the device's offset in the region, or why
/// that offset is unknown.
fn devdax_source(loc: &Located) -> Result<Result<Source, String>, PlatformError> {
    let region_res_path = loc.region_dir.join("resource");
    let Some(region_res) = read_u64(&region_res_path)? else {
        return Ok(Err(format!("no {}", region_res_path.display())));
    };
    for name in ["resource", "device/resource"] {
        let path = loc.device_dir.join(name);
        if let Some(dev_res) = read_u64(&path)? {
            let shift = dev_res.checked_sub(region_res).ok_or_else(|| {
                PlatformError::malformed(
                    &path,
                    format!("device starts at {dev_res:#x}, before its region ({region_res:#x})"),
                )
            })?;
            return Ok(Ok((loc.region_dir.join("badblocks"), shift)));
        }
    }
    Ok(Err(format!(
        "no {0}/resource or {0}/device/resource: the device's place in its region is unknown",
        loc.device_dir.display()
    )))
}

/// Maps device bad ranges to ranges of the file's first `pool_len` bytes.
pub fn map_to_file(
    device: &[BadRange],
    extents: &dyn ExtentSource,
    pool_len: u64,
) -> Result<Option<Vec<BadRange>>, PlatformError> {
    if device.is_empty() {
        // No bad media: nothing to map, and no need to ask the file system.
        return Ok(Some(Vec::new()));
    }
    let Some(extents) = extents.extents(pool_len)? else {
        return Ok(None);
    };
    let mut hits = Vec::new();
    for bad in device {
        let bad_end = bad.offset.saturating_add(bad.len);
        for ext in &extents {
            let ext_end = ext.physical.saturating_add(ext.length);
            let start = bad.offset.max(ext.physical);
            let end = bad_end.min(ext_end);
            if start >= end {
                continue;
            }
            let file_start = ext.logical.saturating_add(start - ext.physical);
            let file_end = file_start.saturating_add(end - start).min(pool_len);
            if file_start < file_end {
                hits.push(BadRange {
                    offset: file_start,
                    len: file_end - file_start,
                });
            }
        }
    }
    Ok(Some(merge(hits)))
}

/// Sorts and merges overlapping or touching ranges.
fn merge(mut ranges: Vec<BadRange>) -> Vec<BadRange> {
    ranges.sort();
    let mut out: Vec<BadRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.offset <= last.offset + last.len => {
                let end = (last.offset + last.len).max(r.offset + r.len);
                last.len = end - last.offset;
            }
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::extents::Extent;
    use super::*;

    fn r(offset: u64, len: u64) -> BadRange {
        BadRange { offset, len }
    }

    #[test]
    fn parses_sector_count_lines() {
        let p = Path::new("/s/badblocks");
        let got = parse_badblocks(p, "8 2\n\n100 1\n").ok();
        assert_eq!(got, Some(vec![r(8 * 512, 1024), r(100 * 512, 512)]));
        assert_eq!(parse_badblocks(p, "").ok(), Some(vec![]));
    }

    #[test]
    fn malformed_lines_name_the_file() {
        let p = Path::new("/s/region0/badblocks");
        for text in ["8", "8 x", "8 2 3", "-1 2", "8 0", "36028797018963968 1"] {
            let err = parse_badblocks(p, text).err();
            assert!(
                matches!(&err, Some(PlatformError::Malformed { path, .. }) if path == p),
                "{text:?} gave {err:?}"
            );
        }
    }

    #[test]
    fn maps_through_extents_and_clips_to_the_pool() {
        // File 0..8192 at device 1 MiB, file 8192..16384 at device 64 KiB.
        let ext = vec![
            Extent {
                logical: 0,
                physical: 1 << 20,
                length: 8192,
            },
            Extent {
                logical: 8192,
                physical: 65536,
                length: 8192,
            },
        ];
        let device = [
            r((1 << 20) + 4096, 512),    // inside the first extent
            r(65536 + 8192 - 512, 4096), // straddles the end of the second extent
            r(0, 4096),                  // outside the file
        ];
        let got = map_to_file(&device, &ext, 16384).ok().flatten();
        assert_eq!(got, Some(vec![r(4096, 512), r(16384 - 512, 512)]));
        // A pool shorter than the file: the tail range is outside the pool.
        let got = map_to_file(&device, &ext, 12288).ok().flatten();
        assert_eq!(got, Some(vec![r(4096, 512)]));
    }

    #[test]
    fn no_extent_map_is_unknown_not_clean() {
        struct NoMap;
        impl ExtentSource for NoMap {
            fn extents(&self, _: u64) -> Result<Option<Vec<Extent>>, PlatformError> {
                Ok(None)
            }
        }
        assert_eq!(map_to_file(&[r(0, 512)], &NoMap, 4096), Ok(None));
        // With nothing bad on the device there is nothing to map.
        assert_eq!(map_to_file(&[], &NoMap, 4096), Ok(Some(vec![])));
    }

    #[test]
    fn merges_adjacent_ranges() {
        assert_eq!(
            merge(vec![r(10, 5), r(0, 10), r(30, 1)]),
            vec![r(0, 15), r(30, 1)]
        );
    }
}
