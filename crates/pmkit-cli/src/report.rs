//! What `info` and `check` learn about a pool, gathered from a read-only open.
//!
//! Gathering never writes: the pool is opened with
//! [`OpenOptions::read_only`](pmem_core::OpenOptions::read_only) (a shared lock
//! and a read-only mapping) and the heap is only inspected ([`crate::heaps`]).

use std::path::Path;

use pmem_core::{OpenOptions, Pool};
use serde::Serialize;

use crate::failure::Failure;
use crate::platform::PlatformReport;

/// A pool's header, mapping and usage, as `pmkit pool info` prints it.
#[derive(Debug, Serialize)]
pub struct PoolReport {
    /// The file.
    pub path: String,
    /// Layout name.
    pub layout: String,
    /// Pool uuid, hyphenated.
    pub uuid: String,
    /// On-media format version.
    pub version: u32,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// Total size in bytes.
    pub pool_size: u64,
    /// Bytes reserved for the header.
    pub header_size: u64,
    /// The typed root object, if the pool has one.
    pub root: Option<Root>,
    /// Heap offset.
    pub heap_offset: u64,
    /// Heap size in bytes.
    pub heap_size: u64,
    /// Durability mode of this process's mapping (`dax`, `msync`, `volatile`).
    pub mode: &'static str,
    /// Why the mapping has that mode, as a short identifier.
    pub mode_source: &'static str,
    /// Why the mapping has that mode, in words.
    pub mode_description: &'static str,
    /// Whether flushed-and-drained ranges are durable in this mode.
    pub durable: bool,
    /// The persistence domain the pool assumes (`memory_controller`, `cpu_cache`).
    pub persistence_domain: &'static str,
    /// Where that domain came from (`detected`, `override`, `requested`, `default`,
    /// `simulated`).
    pub domain_source: &'static str,
    /// Where that domain came from, in words (a detected one names its sysfs file).
    pub domain_description: String,
    /// Whether the domain changes how the pool persists (`cpu_cache` in `dax` mode
    /// only; otherwise it is recorded and has no effect).
    pub domain_effective: bool,
    /// The cache-line flush instruction this process uses.
    pub flush_instruction: &'static str,
    /// What occupies the heap.
    pub usage: Usage,
    /// What sysfs says about the pool's device.
    pub platform: PlatformReport,
}

/// The root object's place and type.
#[derive(Debug, Serialize)]
pub struct Root {
    /// Offset in the pool.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Root id recorded at creation (`RootType::ROOT_ID`).
    pub id: String,
    /// Root layout version recorded at creation (`RootType::LAYOUT_VERSION`).
    pub layout_version: u32,
}

/// What the heap holds.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Usage {
    /// A [`PageAllocator`](pmem_core::PageAllocator) formatted over the whole heap.
    PageAllocator {
        /// Page size in bytes.
        page_size: u64,
        /// Pages managed.
        pages_total: u64,
        /// Pages allocated.
        pages_used: u64,
        /// Whether an interrupted `alloc_publish` awaits recovery at the next open.
        intent_pending: bool,
    },
    /// One of pmkit's heaps (a transaction heap, a list store, an allocator).
    Heap(Summary),
    /// No allocator pmkit knows starts at the heap.
    Unformatted,
    /// A known heap is there but its metadata is unreadable or inconsistent.
    Corrupt {
        /// Which heap (or part of it).
        heap: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// The summary of one of pmkit's heaps.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// Which heap: `tx heap`, `raft-nvm list`, `wafa heap`, `nvwa heap`,
    /// `defrag heap`.
    pub heap: &'static str,
    /// Live objects (allocated blocks; the list: versions in its index).
    pub objects: u64,
    /// Bytes in use.
    pub used_bytes: u64,
    /// Bytes the heap can hand out in all.
    pub capacity_bytes: u64,
    /// How full the heap is, in percent.
    pub fill_percent: f64,
    /// The fragmentation ratio, where the heap defines one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fragmentation: Option<f64>,
    /// The state of the heap's log, in words.
    pub log: String,
}

impl PoolReport {
    /// Opens `file` read-only and gathers its report. An error means the file is not
    /// a usable pool; a corrupt allocator is reported in [`PoolReport::usage`].
    pub fn gather(file: &Path) -> Result<PoolReport, Failure> {
        let mut pool = Pool::open_with(file, &OpenOptions::new().read_only(true))
            .map_err(|e| Failure::pool(file, &e))?;
        let usage = crate::heaps::usage(&mut pool, file);
        let info = pool.info();
        let report = PoolReport {
            path: file.display().to_string(),
            layout: info.layout,
            uuid: info.uuid,
            version: info.version,
            created_unix_s: info.created_unix_s,
            pool_size: info.pool_size,
            header_size: info.header_size,
            root: (info.root_offset != 0).then_some(Root {
                offset: info.root_offset,
                size: info.root_size,
                id: info.root_id,
                layout_version: info.root_layout_version,
            }),
            heap_offset: info.heap_offset,
            heap_size: info.heap_size,
            mode: info.mode.name(),
            mode_source: info.mode_source.name(),
            mode_description: info.mode_source.describe(),
            durable: info.durable,
            persistence_domain: info.persistence_domain.name(),
            domain_source: info.domain_source.name(),
            domain_description: info.domain_source.describe(),
            domain_effective: info.domain_effective,
            flush_instruction: info.flush_instruction.name(),
            usage,
            platform: PlatformReport::of(&info.platform, &pool.shutdown_check()),
        };
        pool.close().map_err(|e| Failure::pool(file, &e))?;
        Ok(report)
    }
}
