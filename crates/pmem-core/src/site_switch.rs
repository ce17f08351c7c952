//! Named flush and fence sites that a crash suite can remove one at a time.
//!
//! A structure that names each of its flushes and fences (an enum of sites) and
//! issues them through a [`SiteSwitch`] lets its mutation suite remove one site in
//! turn and check that a crash checker notices: a flush or fence no checker misses
//! is one the proof does not cover. The switch is process-wide (a `static`), so the
//! suite runs its tests one at a time while a site is removed. Crates compile the
//! switch in behind a feature of their own and call the pool directly otherwise.

use std::sync::Mutex;

use crate::{Pool, PoolError};

/// Which one site (if any) of a structure's flushes and fences is removed.
#[derive(Debug)]
pub struct SiteSwitch<S> {
    removed: Mutex<Option<S>>,
}

impl<S: Copy + PartialEq> SiteSwitch<S> {
    /// A switch with every site in place.
    pub const fn new() -> SiteSwitch<S> {
        SiteSwitch {
            removed: Mutex::new(None),
        }
    }

    /// Removes `site` (`None`: puts every site back).
    pub fn remove(&self, site: Option<S>) {
        // A poisoned lock still holds a valid `Option`.
        *self.removed.lock().unwrap_or_else(|e| e.into_inner()) = site;
    }

    /// Whether `site` is removed.
    pub fn is_removed(&self, site: S) -> bool {
        *self.removed.lock().unwrap_or_else(|e| e.into_inner()) == Some(site)
    }

    /// [`Pool::flush`] at `site`, unless it is removed.
    #[inline]
    #[track_caller]
    pub fn flush(&self, pool: &Pool, site: S, offset: u64, len: u64) -> Result<(), PoolError> {
        if self.is_removed(site) {
            return Ok(());
        }
        pool.flush(offset, len)
    }

    /// [`Pool::drain`] at `site`, unless it is removed.
    #[inline]
    #[track_caller]
    pub fn fence(&self, pool: &Pool, site: S) -> Result<(), PoolError> {
        if self.is_removed(site) {
            return Ok(());
        }
        pool.drain()
    }
}

impl<S: Copy + PartialEq> Default for SiteSwitch<S> {
    fn default() -> Self {
        SiteSwitch::new()
    }
}

#[cfg(test)]
mod tests {
    use super::SiteSwitch;

    #[test]
    fn one_site_at_a_time() {
        let s: SiteSwitch<u8> = SiteSwitch::new();
        assert!(!s.is_removed(1));
        s.remove(Some(1));
        assert!(s.is_removed(1) && !s.is_removed(2));
        s.remove(None);
        assert!(!s.is_removed(1));
    }
}
