//! Constructors of simulated pools and of pools holding crash images.

use std::sync::Arc;

use zerocopy::IntoBytes;

use super::domain::SimDomain;
use super::image::{ImageBase, Lines};
use crate::pool::{DomainSource, DurabilityMode, ModeSource, PersistenceDomain};
use crate::{Pool, PoolError, PoolOptions};

impl Pool {
    /// A new simulated pool: anonymous memory laid out exactly like a file pool
    /// created with `opts`, in `Dax` mode (so code under test takes its PM paths),
    /// with a [`SimDomain`] recording every store, flush and fence. The returned
    /// domain's durable base is the freshly created pool.
    ///
    /// Its persistence domain is the options' request, else
    /// [`PersistenceDomain::MemoryController`]; the environment override is not read
    /// (the simulator's model decides: [`crate::sim::CrashTest::model`]). With
    /// `CpuCache` the pool's flushes are elided and not recorded.
    pub fn simulated(opts: &PoolOptions) -> Result<(Pool, Arc<SimDomain>), PoolError> {
        let (mut pool, sim) = Self::simulated_default(opts)?;
        if let Some(d) = opts.domain {
            pool.set_domain(d, DomainSource::Requested);
        } else {
            pool.set_domain(PersistenceDomain::MemoryController, DomainSource::Simulated);
        }
        Ok((pool, sim))
    }

    fn simulated_default(opts: &PoolOptions) -> Result<(Pool, Arc<SimDomain>), PoolError> {
        let header = crate::pool::open::new_header(opts)?;
        let len = usize::try_from(header.pool_size).map_err(|_| PoolError::InvalidSize {
            size: header.pool_size,
            reason: "does not fit in this platform's address space",
        })?;
        match ImageBase::fresh(header.as_bytes(), len) {
            // A sparse memfd: the pool and its durable base cost the header.
            Ok(base) => Self::simulated_from_base_lines(&base, &Lines::new()),
            Err(e) => {
                tracing::debug!(error = %e, "memfd unavailable: the simulated pool is a copy");
                let mut image = vec![0u8; len];
                image[..header.as_bytes().len()].copy_from_slice(header.as_bytes());
                Self::simulated_from_image(&image)
            }
        }
    }

    /// A simulated pool holding a copy of `image` (a whole pool's bytes), which is
    /// its durable base. Used to crash a recovery again.
    pub fn simulated_from_image(image: &[u8]) -> Result<(Pool, Arc<SimDomain>), PoolError> {
        let mut pool = Pool::from_image_with(image, DurabilityMode::Dax, ModeSource::Simulated)?;
        let sim = pool.attach_sim(None);
        Ok((pool, sim))
    }

    /// A pool holding a copy of `image` (a crash image), validated like a file,
    /// without recording. Its durability is simulated: [`Pool::is_durable`] is false.
    pub fn from_image(image: &[u8]) -> Result<Pool, PoolError> {
        Pool::from_image_with(image, DurabilityMode::Dax, ModeSource::Simulated)
    }

    /// A pool holding `base` with `lines` written over it, copy-on-write: costs the
    /// lines and the pages recovery writes, not the pool's size.
    pub(crate) fn from_base_lines(base: &ImageBase<'_>, lines: &Lines) -> Result<Pool, PoolError> {
        let map = base.map(lines).map_err(|e| PoolError::io("mmap", "", e))?;
        Pool::from_mapping(map, DurabilityMode::Dax, ModeSource::Simulated)
    }

    /// As [`Pool::from_base_lines`], recording: the domain's durable base is a second
    /// frozen copy-on-write mapping of the same image.
    pub(crate) fn simulated_from_base_lines(
        base: &ImageBase<'_>,
        lines: &Lines,
    ) -> Result<(Pool, Arc<SimDomain>), PoolError> {
        let frozen = base
            .image(lines)
            .map_err(|e| PoolError::io("mmap", "", e))?;
        let mut pool = Pool::from_base_lines(base, lines)?;
        let sim = pool.attach_sim(Some(frozen));
        Ok((pool, sim))
    }
}
