//! Durability modes, after libpmem2's granularity model.
//!
//! A pool's mode is decided when it is mapped and never changes while it is open:
//!
//! | mode | how a range becomes durable | when |
//! | --- | --- | --- |
//! | [`DurabilityMode::Dax`] | flush its cache lines, then fence | a `MAP_SYNC` mapping of a file on a DAX file system, or a device-DAX character device |
//! | [`DurabilityMode::Msync`] | `msync` its pages | any other file (the page cache sits between us and media) |
//! | [`DurabilityMode::Volatile`] | never | asked for explicitly, or an anonymous pool |
//!
//! In msync mode, copies into the pool go to the file by `pwrite` rather than
//! through the mapping ([`crate::Pool::copies_by_pwrite`]): the same page cache, no
//! write faults, and no TLB shootdown per page when `msync` write-protects it.
//!
//! `PMKIT_FORCE_DAX=1` (or [`ModeRequest::ForceDax`]) maps an ordinary file in `Dax`
//! mode so benchmarks on `/dev/shm` pay exactly the flush-and-fence cost real PM
//! would. Such a pool is **not durable** and says so: [`ModeSource::Forced`] and
//! [`crate::Pool::is_durable`] returning `false`.

/// How the pool's ranges are made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DurabilityMode {
    /// Cache-line flush + fence reaches the persistence domain.
    Dax,
    /// `msync` of the covering pages reaches the file (copies are written by
    /// `pwrite`: see [`crate::Pool::copies_by_pwrite`]).
    Msync,
    /// No durability; flush and drain do nothing.
    Volatile,
}

impl DurabilityMode {
    /// Lower-case name (`dax`, `msync`, `volatile`).
    pub fn name(self) -> &'static str {
        match self {
            DurabilityMode::Dax => "dax",
            DurabilityMode::Msync => "msync",
            DurabilityMode::Volatile => "volatile",
        }
    }
}

impl std::fmt::Display for DurabilityMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the pool has the mode it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModeSource {
    /// The kernel accepted a `MAP_SYNC` mapping: the file is on a DAX file system.
    MapSync,
    /// The file is a device-DAX character device.
    DevDax,
    /// `Dax` was forced on a file that is not DAX (`PMKIT_FORCE_DAX` or
    /// [`ModeRequest::ForceDax`]); flushes cost what they would on PM, but nothing
    /// is durable.
    Forced,
    /// An ordinary file behind the page cache.
    PageCache,
    /// [`ModeRequest::Volatile`] was asked for.
    Requested,
    /// An anonymous (memory-only) pool.
    Anonymous,
    /// A crash-simulator pool (anonymous memory, every persistence event recorded;
    /// durability exists only in the simulated persistence domain).
    Simulated,
}

impl ModeSource {
    /// A short stable name (`map_sync`, `dev_dax`, `forced`, `page_cache`,
    /// `requested`, `anonymous`) for machine-readable output.
    pub fn name(self) -> &'static str {
        match self {
            ModeSource::MapSync => "map_sync",
            ModeSource::DevDax => "dev_dax",
            ModeSource::Forced => "forced",
            ModeSource::PageCache => "page_cache",
            ModeSource::Requested => "requested",
            ModeSource::Anonymous => "anonymous",
            ModeSource::Simulated => "simulated",
        }
    }

    /// A short human-readable explanation.
    pub fn describe(self) -> &'static str {
        match self {
            ModeSource::MapSync => "MAP_SYNC mapping on a DAX file system",
            ModeSource::DevDax => "device DAX",
            ModeSource::Forced => "forced DAX on a non-DAX file: NOT durable",
            ModeSource::PageCache => "page-cache file, made durable with msync",
            ModeSource::Requested => "volatile by request: NOT durable",
            ModeSource::Anonymous => "anonymous memory: NOT durable",
            ModeSource::Simulated => "crash simulator: durable only in the simulated domain",
        }
    }
}

/// What the caller asks for when mapping a pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ModeRequest {
    /// Detect: `Dax` if `MAP_SYNC` (or device DAX) works, else `Msync`;
    /// `PMKIT_FORCE_DAX=1` in the environment turns a non-DAX result into forced `Dax`.
    #[default]
    Auto,
    /// As `Auto`, but a non-DAX file is mapped in forced (non-durable) `Dax` mode.
    ForceDax,
    /// No durability at all, to isolate compute in benchmarks.
    Volatile,
}

/// Whether the combination makes flushed-and-drained ranges durable.
pub(crate) fn is_durable(mode: DurabilityMode, source: ModeSource) -> bool {
    match mode {
        DurabilityMode::Dax => matches!(source, ModeSource::MapSync | ModeSource::DevDax),
        DurabilityMode::Msync => true,
        DurabilityMode::Volatile => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_real_dax_and_msync_are_durable() {
        assert!(is_durable(DurabilityMode::Dax, ModeSource::MapSync));
        assert!(is_durable(DurabilityMode::Dax, ModeSource::DevDax));
        assert!(!is_durable(DurabilityMode::Dax, ModeSource::Forced));
        assert!(is_durable(DurabilityMode::Msync, ModeSource::PageCache));
        assert!(!is_durable(DurabilityMode::Volatile, ModeSource::Requested));
        assert!(!is_durable(DurabilityMode::Volatile, ModeSource::Anonymous));
    }
}
