//! A device-DAX character device's size and mapping alignment, from sysfs.
//!
//! `<root>/dev/char/MAJ:MIN/size` is the device's size in bytes. The alignment (the
//! page size its mappings must respect: 4 KiB, 2 MiB or 1 GiB) is `device/align`
//! (the nd `daxN.M` seed device, where PMDK's `device_dax_alignment` reads it), or
//! `align` on the dax device itself in kernels that have it there.

use std::path::Path;

use super::sysfs::{read_u64, DeviceNode};
use super::{Detected, PlatformError};

/// Size and alignment of a device-DAX device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevDaxGeometry {
    /// Size in bytes.
    pub size: u64,
    /// Mapping alignment in bytes (a power of two).
    pub align: u64,
}

/// Reads the geometry of the character device `node` under `root`.
pub fn read_devdax(
    root: &Path,
    node: DeviceNode,
) -> Result<Detected<DevDaxGeometry>, PlatformError> {
    let dir = node.sysfs_link(root);
    let size_path = dir.join("size");
    let Some(size) = read_u64(&size_path)? else {
        return Ok(Detected::unknown(format!("no {}", size_path.display())));
    };
    let mut align = None;
    for name in ["device/align", "align"] {
        let path = dir.join(name);
        if let Some(a) = read_u64(&path)? {
            if a == 0 || !a.is_power_of_two() {
                return Err(PlatformError::malformed(
                    &path,
                    format!("alignment {a} is not a power of two"),
                ));
            }
            align = Some(a);
            break;
        }
    }
    let Some(align) = align else {
        return Ok(Detected::unknown(format!(
            "no {0}/device/align or {0}/align",
            dir.display()
        )));
    };
    if size % align != 0 {
        return Err(PlatformError::malformed(
            &size_path,
            format!("size {size} is not a multiple of the device's alignment {align}"),
        ));
    }
    Ok(Detected::found(DevDaxGeometry { size, align }, dir))
}
