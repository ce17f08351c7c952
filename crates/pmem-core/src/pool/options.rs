//! Options for creating and opening pools.

use super::drain_policy::DrainPolicy;
use super::header::RootSpec;
use super::mode::{ModeRequest, PersistenceDomain};
use super::root::RootType;

/// How to create a pool: layout name, size, optional typed root, mode.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    pub(crate) layout: String,
    pub(crate) size: u64,
    pub(crate) root: Option<RootSpec>,
    pub(crate) mode: ModeRequest,
    pub(crate) permissions: u32,
    pub(crate) domain: Option<PersistenceDomain>,
}

impl PoolOptions {
    /// A pool of `size` bytes (a multiple of 4096, at least 8 KiB plus the root) for
    /// the layout `layout` (1..=63 bytes; `open` checks it matches).
    pub fn new(layout: impl Into<String>, size: u64) -> Self {
        PoolOptions {
            layout: layout.into(),
            size,
            root: None,
            mode: ModeRequest::Auto,
            permissions: 0o600,
            domain: None,
        }
    }

    /// Gives the pool a zero-initialised root object of type `T`, reachable with
    /// [`crate::Pool::root`]. Zero is a valid `T` because `T: FromBytes`. The header
    /// records `T`'s [`RootType::ROOT_ID`] and [`RootType::LAYOUT_VERSION`].
    pub fn root<T: RootType>(mut self) -> Self {
        self.root = Some(RootSpec::of::<T>());
        self
    }

    /// Chooses the durability mode (default [`ModeRequest::Auto`]).
    pub fn mode(mut self, mode: ModeRequest) -> Self {
        self.mode = mode;
        self
    }

    /// Asks for a persistence domain instead of detecting it (the environment
    /// variable [`crate::pool::DOMAIN_ENV`] still overrides it). `CpuCache` makes
    /// `Dax`-mode flushes no-ops and drains store fences: ask for it only on a
    /// platform with eADR or CXL GPF. In `Msync` and `Volatile` mode it is recorded
    /// and has no effect.
    pub fn persistence_domain(mut self, domain: PersistenceDomain) -> Self {
        self.domain = Some(domain);
        self
    }

    /// Unix permissions of the new file (default `0o600`).
    pub fn permissions(mut self, mode: u32) -> Self {
        self.permissions = mode;
        self
    }
}

/// How to open an existing pool.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    pub(crate) layout: Option<String>,
    pub(crate) read_only: bool,
    pub(crate) mode: ModeRequest,
    pub(crate) domain: Option<PersistenceDomain>,
    pub(crate) drain: Option<DrainPolicy>,
    pub(crate) accept_unsafe_shutdown: bool,
}

impl OpenOptions {
    /// Defaults: any layout, read-write, [`ModeRequest::Auto`], unsafe shutdowns
    /// refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires the pool's layout name to be `layout`.
    pub fn layout(mut self, layout: impl Into<String>) -> Self {
        self.layout = Some(layout.into());
        self
    }

    /// Opens read-only: a shared lock, a read-only mapping, every write API returns
    /// [`crate::PoolError::ReadOnly`]. Used by `pmkit pool info` and `check`.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Chooses the durability mode (default [`ModeRequest::Auto`]).
    pub fn mode(mut self, mode: ModeRequest) -> Self {
        self.mode = mode;
        self
    }

    /// Asks for a persistence domain instead of detecting it (the environment
    /// variable [`crate::pool::DOMAIN_ENV`] still overrides it). `CpuCache` makes
    /// `Dax`-mode flushes no-ops and drains store fences: ask for it only on a
    /// platform with eADR or CXL GPF. In `Msync` and `Volatile` mode it is recorded
    /// and has no effect.
    pub fn persistence_domain(mut self, domain: PersistenceDomain) -> Self {
        self.domain = Some(domain);
        self
    }

    /// Chooses how drains sync in `Msync` mode, instead of the environment's
    /// `PMKIT_GROUP_COMMIT` / `PMKIT_DRAIN_SYNC` (see [`DrainPolicy`]). No effect in
    /// other modes.
    pub fn drain(mut self, policy: DrainPolicy) -> Self {
        self.drain = Some(policy);
        self
    }

    /// Opens even if the device shut down unsafely while the pool was open
    /// (default false: [`crate::PoolError::UnsafeShutdown`]). The caller takes on
    /// checking the data; the new open's record replaces the old one.
    pub fn accept_unsafe_shutdown(mut self, accept: bool) -> Self {
        self.accept_unsafe_shutdown = accept;
        self
    }
}
