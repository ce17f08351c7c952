//! Named flush and fence sites that a crash suite can remove (or make fail) one at a
//! time: the one mutation switch every crate of the workspace uses.
//!
//! A structure that names each of its flushes and fences (an enum of sites listed in
//! [`Site::EVERY`]) and issues them through a [`SiteSwitch`] lets its mutation suite
//! remove one site in turn and check that a crash checker notices: a flush or fence
//! no checker misses is one the proof does not cover. The same switch names a
//! deliberately broken variant of a protocol (a *mutant*: a correct step removed),
//! and can make a site fail with an I/O error, as a failed `msync` would, for tests
//! of the error paths.
//!
//! The switch is lock-free (two atomic bytes), so a structure may keep one per
//! instance (a transaction log does) or one `static` for the process (then the
//! suite runs its tests one at a time while a site is removed). Crates compile the
//! switch in behind a feature of their own and call the pool directly otherwise, so
//! release builds pay nothing.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::{Pool, PoolError};

/// A set of named sites: a field-less enum, every value listed once in [`EVERY`].
///
/// [`EVERY`]: Site::EVERY
pub trait Site: Copy + PartialEq + Debug + 'static {
    /// Every site, each once, in a fixed order; at most 255 of them.
    const EVERY: &'static [Self];
}

/// Which one site (if any) of a structure's sites is removed, and which one (if
/// any) fails.
#[derive(Debug)]
pub struct SiteSwitch<S> {
    /// 1 + the removed site's index in [`Site::EVERY`]; 0: none.
    removed: AtomicU8,
    /// 1 + the failing site's index; 0: none.
    failing: AtomicU8,
    sites: std::marker::PhantomData<S>,
}

/// The byte naming `site` (1 + its index), or 0 for none.
fn code<S: Site>(site: Option<S>) -> u8 {
    let Some(site) = site else { return 0 };
    let index = S::EVERY.iter().position(|&s| s == site);
    match index.and_then(|i| u8::try_from(i + 1).ok()) {
        Some(code) => code,
        // A site missing from `EVERY` (or past the 255th) is a bug of the caller's
        // table; the switch cannot name it, so it would silently never fire.
        None => panic!("{site:?} is not one of the first 255 entries of its Site::EVERY"),
    }
}

/// Whether `code` names `site`: one indexed comparison, no search.
#[inline]
fn names<S: Site>(code: u8, site: S) -> bool {
    code != 0 && S::EVERY.get(usize::from(code) - 1) == Some(&site)
}

impl<S: Site> SiteSwitch<S> {
    /// A switch with every site in place and none failing.
    pub const fn new() -> SiteSwitch<S> {
        SiteSwitch {
            removed: AtomicU8::new(0),
            failing: AtomicU8::new(0),
            sites: std::marker::PhantomData,
        }
    }

    /// Removes `site` (`None`: puts every site back).
    ///
    /// # Panics
    /// If `site` is not listed in [`Site::EVERY`] (a bug of the site table).
    pub fn remove(&self, site: Option<S>) {
        self.removed.store(code(site), Ordering::SeqCst);
    }

    /// Whether `site` is removed.
    #[inline]
    pub fn is_removed(&self, site: S) -> bool {
        names(self.removed.load(Ordering::Relaxed), site)
    }

    /// Makes `site` fail with an injected I/O error (`None`: nothing fails).
    ///
    /// # Panics
    /// If `site` is not listed in [`Site::EVERY`].
    pub fn fail(&self, site: Option<S>) {
        self.failing.store(code(site), Ordering::SeqCst);
    }

    /// The injected error if `site` is the failing one.
    #[inline]
    pub fn injected(&self, site: S) -> Result<(), PoolError> {
        if names(self.failing.load(Ordering::Relaxed), site) {
            return Err(PoolError::io(
                "injected failure",
                "",
                std::io::Error::other(format!("{site:?}")),
            ));
        }
        Ok(())
    }

    /// [`Pool::flush`] at `site`: the injected error if it fails, nothing if it is
    /// removed.
    #[inline]
    #[track_caller]
    pub fn flush(&self, pool: &Pool, site: S, offset: u64, len: u64) -> Result<(), PoolError> {
        self.injected(site)?;
        if self.is_removed(site) {
            return Ok(());
        }
        pool.flush(offset, len)
    }

    /// [`Pool::drain`] at `site`: the injected error if it fails, nothing if it is
    /// removed.
    #[inline]
    #[track_caller]
    pub fn fence(&self, pool: &Pool, site: S) -> Result<(), PoolError> {
        self.injected(site)?;
        if self.is_removed(site) {
            return Ok(());
        }
        pool.drain()
    }
}

impl<S: Site> Default for SiteSwitch<S> {
    fn default() -> Self {
        SiteSwitch::new()
    }
}

#[cfg(test)]
mod tests {
    use super::{Site, SiteSwitch};

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Demo {
        A,
        B,
        Unlisted,
    }

    impl Site for Demo {
        const EVERY: &'static [Demo] = &[Demo::A, Demo::B];
    }

    #[test]
    fn one_site_at_a_time() {
        let s: SiteSwitch<Demo> = SiteSwitch::new();
        assert!(!s.is_removed(Demo::A));
        s.remove(Some(Demo::A));
        assert!(s.is_removed(Demo::A) && !s.is_removed(Demo::B));
        s.remove(Some(Demo::B));
        assert!(!s.is_removed(Demo::A) && s.is_removed(Demo::B));
        s.remove(None);
        assert!(!s.is_removed(Demo::A) && !s.is_removed(Demo::B));
    }

    #[test]
    fn a_failing_site_returns_an_error_and_the_others_do_not() {
        let s: SiteSwitch<Demo> = SiteSwitch::new();
        s.fail(Some(Demo::B));
        assert!(s.injected(Demo::A).is_ok());
        let e = s.injected(Demo::B).expect_err("B fails");
        assert!(e.to_string().contains("injected"), "{e}");
        s.fail(None);
        assert!(s.injected(Demo::B).is_ok());
    }

    #[test]
    #[should_panic(expected = "Unlisted")]
    fn a_site_missing_from_the_table_is_refused() {
        SiteSwitch::<Demo>::new().remove(Some(Demo::Unlisted));
    }
}
