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
//!
//! # Persistence domain
//!
//! Each pool also has a [`PersistenceDomain`], decided once at open or create, with
//! its [`DomainSource`]. In this order: `PMKIT_PERSISTENCE_DOMAIN=cpu_cache` or
//! `=memory_controller` overrides everything (any other value is
//! [`crate::PoolError::InvalidEnv`] at open); then the caller's request
//! ([`crate::PoolOptions::persistence_domain`]); then what the platform reports
//! (sysfs); otherwise [`PersistenceDomain::MemoryController`], the safe assumption.
//!
//! Only `Dax` mode acts on it: with [`PersistenceDomain::CpuCache`] (eADR, CXL GPF)
//! [`crate::Pool::flush`] does nothing and [`crate::Pool::drain`] is an `sfence`. In
//! `Msync` and `Volatile` mode a `CpuCache` domain is recorded and has no effect
//! ([`crate::PoolInfo::domain_effective`] is false). The domain never makes a pool
//! durable that is not: forced `Dax` on `/dev/shm` with `CpuCache` elides its flushes
//! and stays **not durable**.

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

/// Where the platform's persistence domain ends: what a store must reach to survive
/// power loss. It matters only in [`DurabilityMode::Dax`]; in `Msync` and `Volatile`
/// mode the page cache (or nothing) sits between the stores and the media whatever
/// the platform does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PersistenceDomain {
    /// ADR: the memory controller's write queues are persistent, the CPU caches are
    /// not, so a range needs its cache lines flushed and a fence. The safe assumption
    /// when nothing is known.
    #[default]
    MemoryController,
    /// eADR (Intel) or CXL 2.0 Global Persistent Flush: the CPU caches are flushed
    /// on power loss, so a store is persistent once it is globally visible. Flushes
    /// are unnecessary; a drain is a store fence (stores must still be ordered).
    CpuCache,
}

impl PersistenceDomain {
    /// The name sysfs and `PMKIT_PERSISTENCE_DOMAIN` use (`memory_controller`,
    /// `cpu_cache`).
    pub fn name(self) -> &'static str {
        match self {
            PersistenceDomain::MemoryController => "memory_controller",
            PersistenceDomain::CpuCache => "cpu_cache",
        }
    }

    /// A short human-readable explanation.
    pub fn describe(self) -> &'static str {
        match self {
            PersistenceDomain::MemoryController => {
                "memory controller (ADR): cache lines are flushed, then fenced"
            }
            PersistenceDomain::CpuCache => {
                "CPU cache (eADR / CXL GPF): no cache flushes, a drain is a store fence"
            }
        }
    }

    /// Parses a [`PersistenceDomain::name`] (surrounding whitespace ignored, as in a
    /// sysfs file); `None` for anything else.
    pub fn parse(text: &str) -> Option<PersistenceDomain> {
        match text.trim() {
            "memory_controller" => Some(PersistenceDomain::MemoryController),
            "cpu_cache" => Some(PersistenceDomain::CpuCache),
            _ => None,
        }
    }
}

impl std::fmt::Display for PersistenceDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the pool's [`PersistenceDomain`] came from, decided once when it is mapped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum DomainSource {
    /// Read from this sysfs file (a region's `persistence_domain`).
    Detected(std::path::PathBuf),
    /// Forced by the `PMKIT_PERSISTENCE_DOMAIN` environment variable.
    Override,
    /// Asked for with [`crate::PoolOptions::persistence_domain`] or
    /// [`crate::OpenOptions::persistence_domain`].
    Requested,
    /// Nothing known: [`PersistenceDomain::MemoryController`], the safe assumption.
    #[default]
    Default,
    /// Chosen by the crash simulator from its persistency model.
    Simulated,
}

impl DomainSource {
    /// A short stable name (`detected`, `override`, `requested`, `default`,
    /// `simulated`) for machine-readable output.
    pub fn name(&self) -> &'static str {
        match self {
            DomainSource::Detected(_) => "detected",
            DomainSource::Override => "override",
            DomainSource::Requested => "requested",
            DomainSource::Default => "default",
            DomainSource::Simulated => "simulated",
        }
    }

    /// A short human-readable explanation (a detected domain names its sysfs file).
    pub fn describe(&self) -> String {
        match self {
            DomainSource::Detected(path) => format!("detected from {}", path.display()),
            DomainSource::Override => "forced by PMKIT_PERSISTENCE_DOMAIN".to_owned(),
            DomainSource::Requested => "requested by the caller".to_owned(),
            DomainSource::Default => "not detected: assumed memory controller (safe)".to_owned(),
            DomainSource::Simulated => "crash simulator's persistency model".to_owned(),
        }
    }
}

/// What [`crate::Pool::flush`] and [`crate::Pool::drain`] do, decided once from the
/// mode and the domain so that the per-flush cost is one match, as before domains
/// existed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlushPath {
    /// `Dax` on ADR: flush the cache lines, drain with [`crate::flush::drain`].
    CacheLines,
    /// `Dax` on eADR: flush nothing, drain with a store fence.
    FenceOnly,
    /// `Msync`: remember the pages, drain with `msync`.
    Pages,
    /// `Volatile`: nothing.
    Nothing,
}

impl FlushPath {
    /// The path for a pool in `mode` on `domain`: the domain counts only in `Dax`.
    pub(crate) fn of(mode: DurabilityMode, domain: PersistenceDomain) -> FlushPath {
        match (mode, domain) {
            (DurabilityMode::Dax, PersistenceDomain::MemoryController) => FlushPath::CacheLines,
            (DurabilityMode::Dax, PersistenceDomain::CpuCache) => FlushPath::FenceOnly,
            (DurabilityMode::Msync, _) => FlushPath::Pages,
            (DurabilityMode::Volatile, _) => FlushPath::Nothing,
        }
    }
}

/// Whether `domain` changes how a pool in `mode` persists (only `CpuCache` in `Dax`).
pub(crate) fn domain_has_effect(mode: DurabilityMode, domain: PersistenceDomain) -> bool {
    FlushPath::of(mode, domain) == FlushPath::FenceOnly
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

    #[test]
    fn the_domain_counts_only_in_dax() {
        use PersistenceDomain::*;
        assert_eq!(
            FlushPath::of(DurabilityMode::Dax, MemoryController),
            FlushPath::CacheLines
        );
        assert_eq!(
            FlushPath::of(DurabilityMode::Dax, CpuCache),
            FlushPath::FenceOnly
        );
        for d in [MemoryController, CpuCache] {
            assert_eq!(FlushPath::of(DurabilityMode::Msync, d), FlushPath::Pages);
            assert_eq!(
                FlushPath::of(DurabilityMode::Volatile, d),
                FlushPath::Nothing
            );
        }
        assert!(domain_has_effect(DurabilityMode::Dax, CpuCache));
        assert!(!domain_has_effect(DurabilityMode::Msync, CpuCache));
        assert!(!domain_has_effect(DurabilityMode::Volatile, CpuCache));
        assert!(!domain_has_effect(DurabilityMode::Dax, MemoryController));
    }

    #[test]
    fn domain_names_round_trip() {
        for d in [
            PersistenceDomain::MemoryController,
            PersistenceDomain::CpuCache,
        ] {
            assert_eq!(PersistenceDomain::parse(d.name()), Some(d));
            assert_eq!(
                PersistenceDomain::parse(&format!("{}\n", d.name())),
                Some(d)
            );
        }
        assert_eq!(PersistenceDomain::parse("CPU_CACHE"), None);
        assert_eq!(PersistenceDomain::parse(""), None);
    }
}
