//! Creating a pool on a device-DAX character device (`/dev/daxX.Y`).
//!
//! A device cannot be created or sized like a file: it exists, its size is fixed, and
//! its mappings must respect its alignment (4 KiB, 2 MiB or 1 GiB). Both come from
//! sysfs ([`crate::platform::devdax`]). The pool takes the whole device unless a
//! smaller size (a multiple of the alignment) is asked for.
//!
//! No device DAX exists on the development machines: the sysfs reading is tested
//! over fake trees, this path only by reading.

use std::path::Path;

use super::open::{check_file_type, lock, map_len, new_header};
use super::options::PoolOptions;
use super::Pool;
use crate::platform::{devdax, sysfs_root, Detected, DeviceNode};
use crate::PoolError;

impl Pool {
    /// Formats a new pool on the device-DAX device at `path`, overwriting whatever
    /// the device held. `opts`'s size 0 means the whole device; another size must be
    /// a multiple of the device's alignment and fit in it. The layout, root and mode
    /// come from `opts` as for [`Pool::create`].
    pub fn create_devdax(path: impl AsRef<Path>, opts: &PoolOptions) -> Result<Pool, PoolError> {
        let path = path.as_ref();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| PoolError::io("open", path, e))?;
        let meta = file
            .metadata()
            .map_err(|e| PoolError::io("stat", path, e))?;
        if !check_file_type(&meta, path)? {
            return Err(PoolError::UnsupportedFileType {
                path: path.into(),
                kind: "a regular file (use Pool::create)",
            });
        }
        let geometry = DeviceNode::of(&meta)
            .map(|node| devdax::read_devdax(&sysfs_root(), node))
            .ok_or(PoolError::UnsupportedFileType {
                path: path.into(),
                kind: "not a character device",
            })?;
        let geometry = match geometry {
            Ok(Detected::Found { value, .. }) => value,
            Ok(Detected::Unknown { reason }) => {
                return Err(PoolError::DevDax {
                    path: path.into(),
                    reason,
                })
            }
            Err(e) => {
                return Err(PoolError::DevDax {
                    path: path.into(),
                    reason: e.to_string(),
                })
            }
        };
        let size = devdax_pool_size(opts.size, geometry).map_err(|reason| PoolError::DevDax {
            path: path.into(),
            reason,
        })?;
        let mut sized = opts.clone();
        sized.size = size;
        let header = new_header(&sized)?;
        lock(&file, path, false)?;
        let env = super::env_choices::EnvChoices::read(path)?;
        let pool = Pool::format_mapped(file, path, header, map_len(size)?, true, opts, env)?;
        tracing::info!(path = %path.display(), size, align = geometry.align, "pool created on device DAX");
        Ok(pool)
    }
}

/// The pool size on a device of `geometry` when `asked` (0 = the whole device).
fn devdax_pool_size(asked: u64, geometry: devdax::DevDaxGeometry) -> Result<u64, String> {
    let devdax::DevDaxGeometry { size, align } = geometry;
    match asked {
        0 => Ok(size),
        n if n > size => Err(format!("{n} bytes asked for, the device has {size}")),
        n if !n.is_multiple_of(align) => Err(format!(
            "{n} bytes is not a multiple of the device's alignment {align}"
        )),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_default_to_the_device_and_respect_its_alignment() {
        let g = devdax::DevDaxGeometry {
            size: 8 << 20,
            align: 2 << 20,
        };
        assert_eq!(devdax_pool_size(0, g), Ok(8 << 20));
        assert_eq!(devdax_pool_size(4 << 20, g), Ok(4 << 20));
        assert!(devdax_pool_size(16 << 20, g).is_err());
        assert!(devdax_pool_size(3 << 20, g).is_err());
    }
}
