//! The persistence domain of an nd region: whether CPU caches are inside it.
//!
//! `<region>/persistence_domain` (Linux 4.17+) holds `cpu_cache` when the platform
//! flushes CPU caches to media on power loss (Intel eADR, CXL 2.0 Global Persistent
//! Flush), `memory_controller` when only the memory controller's queues are (ADR),
//! and is empty when the platform promises neither. libpmem2's `pmem2_auto_flush`
//! reads the same file. Detection only reports the domain; whether flushes may be
//! elided is the pool's decision, not this module's.

use std::path::Path;

use super::sysfs::read_attr;
use super::{Detected, PlatformError};

/// The pool's type: detection fills the same value the pool acts on.
pub use crate::pool::PersistenceDomain;

/// Reads `<region_dir>/persistence_domain`.
pub fn read_domain(region_dir: &Path) -> Result<Detected<PersistenceDomain>, PlatformError> {
    let path = region_dir.join("persistence_domain");
    let Some(text) = read_attr(&path)? else {
        return Ok(Detected::unknown(format!(
            "no {} (a kernel older than 4.17)",
            path.display()
        )));
    };
    // One line; sysfs ends it with a newline, which PMDK insists on. We accept its
    // absence (hand-made trees) but nothing else around the word.
    let word = text.strip_suffix('\n').unwrap_or(&text);
    match word {
        "cpu_cache" => Ok(Detected::found(PersistenceDomain::CpuCache, path)),
        "memory_controller" => Ok(Detected::found(PersistenceDomain::MemoryController, path)),
        "" => Ok(Detected::unknown(format!(
            "{} is empty: the platform reports no persistence domain",
            path.display()
        ))),
        other => Err(PlatformError::malformed(
            path,
            format!("expected cpu_cache, memory_controller or nothing, found {other:?}"),
        )),
    }
}
