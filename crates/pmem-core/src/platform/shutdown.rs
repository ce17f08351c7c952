//! The unsafe-shutdown state of the DIMMs behind an nd region.
//!
//! A region lists its DIMMs in `mapping0`, `mapping1`, ... (`nmemX,offset,length,pos`).
//! Each DIMM's `nfit/dirty_shutdown` counts the shutdowns in which it could not
//! flush its buffers: a pool that was open across a change of the count may have
//! lost writes that were reported durable. As PMDK's `pmem2_source_device_usc` does,
//! the region's count is the sum over its DIMMs, and its identity is the DIMMs'
//! `nfit/id` (`nfit/serial` when there is no id), so a pool moved to other DIMMs is
//! told apart from a count that moved.

use std::path::{Path, PathBuf};

use super::sysfs::{parse_u64, read_attr};
use super::{Detected, PlatformError};

/// One DIMM's unsafe-shutdown counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimmShutdown {
    /// The nd name (`nmem0`).
    pub name: String,
    /// Its `dirty_shutdown` count.
    pub count: u64,
    /// Its identity (`nfit/id`, or `nfit/serial`).
    pub id: String,
    /// The `dirty_shutdown` file read.
    pub from: PathBuf,
}

/// The region's unsafe-shutdown state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownState {
    /// Sum of the DIMMs' counts.
    pub count: u64,
    /// The DIMMs' identities joined with `+`, in mapping order.
    pub identity: String,
    /// Each DIMM, in mapping order.
    pub dimms: Vec<DimmShutdown>,
}

/// Reads the shutdown state of the region at `region_dir`; DIMMs are looked up in
/// `<root>/bus/nd/devices/nmemX`.
pub fn read_shutdown(
    root: &Path,
    region_dir: &Path,
) -> Result<Detected<ShutdownState>, PlatformError> {
    let mut dimms = Vec::new();
    for i in 0.. {
        let mapping = region_dir.join(format!("mapping{i}"));
        let Some(text) = read_attr(&mapping)? else {
            break;
        };
        let name = parse_mapping(&mapping, &text)?;
        let dimm_dir = root.join("bus/nd/devices").join(&name);
        let count_path = dimm_dir.join("nfit/dirty_shutdown");
        let Some(count_text) = read_attr(&count_path)? else {
            return Ok(Detected::unknown(format!(
                "no counter in sysfs: {} is missing",
                count_path.display()
            )));
        };
        let count = parse_u64(&count_path, &count_text)?;
        let id = read_identity(&dimm_dir)?;
        dimms.push(DimmShutdown {
            name,
            count,
            id,
            from: count_path,
        });
    }
    if dimms.is_empty() {
        return Ok(Detected::unknown(format!(
            "no counter in sysfs: {} lists no DIMMs (no mapping0)",
            region_dir.display()
        )));
    }
    let count = dimms
        .iter()
        .try_fold(0u64, |sum, d| sum.checked_add(d.count))
        .ok_or_else(|| {
            PlatformError::malformed(&dimms[0].from, "the DIMMs' counts overflow when summed")
        })?;
    let identity = dimms
        .iter()
        .map(|d| d.id.as_str())
        .collect::<Vec<_>>()
        .join("+");
    Ok(Detected::found(
        ShutdownState {
            count,
            identity,
            dimms,
        },
        region_dir.to_path_buf(),
    ))
}

/// `nmemX,offset,length,position` → `nmemX`.
fn parse_mapping(path: &Path, text: &str) -> Result<String, PlatformError> {
    let fields: Vec<&str> = text.trim().split(',').collect();
    let bad = |why: &str| PlatformError::malformed(path, format!("{why}: {:?}", text.trim()));
    let [name, offset, length, position] = fields[..] else {
        return Err(bad("expected nmemX,offset,length,position"));
    };
    if !name.starts_with("nmem") || name.contains('/') {
        return Err(bad("the DIMM name does not start with nmem"));
    }
    for n in [offset, length, position] {
        parse_u64(path, n)?;
    }
    Ok(name.to_owned())
}

/// `nfit/id`, else `nfit/serial`, trimmed; a DIMM with neither is an error (an
/// identity that silently matched everything would hide a moved pool).
fn read_identity(dimm_dir: &Path) -> Result<String, PlatformError> {
    for name in ["nfit/id", "nfit/serial"] {
        let path = dimm_dir.join(name);
        if let Some(text) = read_attr(&path)? {
            let id = text.trim();
            if id.is_empty() {
                return Err(PlatformError::malformed(path, "empty identity"));
            }
            return Ok(id.to_owned());
        }
    }
    Err(PlatformError::malformed(
        dimm_dir.join("nfit/id"),
        "missing (and no nfit/serial either): the DIMM has a counter but no identity",
    ))
}
