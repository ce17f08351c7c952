//! A summary of an open pool, as `pmkit pool info` prints it.

use std::path::PathBuf;

use super::mode::{DomainSource, DurabilityMode, ModeSource, PersistenceDomain};
use crate::FlushKind;

/// What an open pool is: header fields, layout of the file, and how it is mapped.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolInfo {
    /// The file (empty for anonymous pools).
    pub path: PathBuf,
    /// Layout name.
    pub layout: String,
    /// Pool uuid, hyphenated.
    pub uuid: String,
    /// On-media format version.
    pub version: u32,
    /// Total size in bytes.
    pub pool_size: u64,
    /// Bytes reserved for the header.
    pub header_size: u64,
    /// Root object offset, 0 if none.
    pub root_offset: u64,
    /// Root object size.
    pub root_size: u64,
    /// Root id ([`crate::RootType::ROOT_ID`]) recorded at creation, empty if none.
    pub root_id: String,
    /// Root layout version ([`crate::RootType::LAYOUT_VERSION`]), 0 if none.
    pub root_layout_version: u32,
    /// Heap offset.
    pub heap_offset: u64,
    /// Heap size.
    pub heap_size: u64,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// Durability mode of this mapping.
    pub mode: DurabilityMode,
    /// Why it has that mode.
    pub mode_source: ModeSource,
    /// Whether flushed-and-drained ranges are durable in this mode.
    pub durable: bool,
    /// The persistence domain the pool assumes.
    pub persistence_domain: PersistenceDomain,
    /// Where that domain came from.
    pub domain_source: DomainSource,
    /// Whether the domain changes how the pool persists (`CpuCache` in `Dax` mode
    /// only): false means a `CpuCache` domain is recorded but has no effect.
    pub domain_effective: bool,
    /// The flush instruction this process uses.
    pub flush_instruction: FlushKind,
    /// Whether the pool is open read-only.
    pub read_only: bool,
    /// What sysfs said about the device (detected once, at open).
    pub platform: crate::platform::Platform,
}
