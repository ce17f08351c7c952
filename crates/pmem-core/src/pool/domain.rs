//! Deciding a pool's [`PersistenceDomain`], once, when it is created or opened.
//!
//! The environment is read once per open ([`env_override`]), before anything is
//! created, so an invalid value refuses the open without leaving a file behind.
//! [`decide`] then ranks the sources: the override, the caller's request, what the
//! platform reports, the safe default. Platform detection (sysfs) is a closure
//! called only when neither the override nor a request decided, so a pool whose
//! domain is forced never reads sysfs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::mode::{DomainSource, PersistenceDomain};
use crate::PoolError;

/// The environment variable that forces the persistence domain either way.
pub const DOMAIN_ENV: &str = "PMKIT_PERSISTENCE_DOMAIN";

/// What [`DOMAIN_ENV`] accepts, for the error message.
const EXPECTED: &str = "cpu_cache or memory_controller";

/// Reads [`DOMAIN_ENV`]: `None` when unset or empty, the domain it names, or
/// [`PoolError::InvalidEnv`] naming the variable and `path`.
pub(crate) fn env_override(path: &Path) -> Result<Option<PersistenceDomain>, PoolError> {
    parse_override(std::env::var_os(DOMAIN_ENV), path)
}

/// [`env_override`] of a given value (pure, so the tests need not set the
/// process environment, which other tests running in parallel read).
pub(crate) fn parse_override(
    value: Option<OsString>,
    path: &Path,
) -> Result<Option<PersistenceDomain>, PoolError> {
    let Some(value) = value else { return Ok(None) };
    if value.is_empty() {
        // As for PMKIT_FORCE_DAX: an empty variable is an unset one.
        return Ok(None);
    }
    value
        .to_str()
        .and_then(PersistenceDomain::parse)
        .map(Some)
        .ok_or_else(|| PoolError::invalid_env(path, DOMAIN_ENV, &value, EXPECTED))
}

/// Ranks the sources: the environment override, then the request, then the
/// platform (`detect`, called only if needed), then
/// [`PersistenceDomain::MemoryController`] (flushing when unsure is only slower;
/// not flushing on ADR loses data).
pub(crate) fn decide(
    env: Option<PersistenceDomain>,
    requested: Option<PersistenceDomain>,
    detect: impl FnOnce() -> Option<(PersistenceDomain, PathBuf)>,
) -> (PersistenceDomain, DomainSource) {
    if let Some(d) = env {
        return (d, DomainSource::Override);
    }
    if let Some(d) = requested {
        return (d, DomainSource::Requested);
    }
    match detect() {
        Some((d, file)) => (d, DomainSource::Detected(file)),
        None => (PersistenceDomain::MemoryController, DomainSource::Default),
    }
}

/// What the platform reports for a pool file: its nd region's
/// `persistence_domain`, read once at open (`crate::platform`). Unknown (not on a
/// region, no such file) or unreadable: `None`, and the safe default applies.
pub(crate) fn detect(platform: &crate::platform::Platform) -> Option<(PersistenceDomain, PathBuf)> {
    match &platform.domain {
        Ok(crate::platform::Detected::Found { value, from }) => Some((*value, from.clone())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PersistenceDomain::{CpuCache, MemoryController};

    fn parse(v: Option<&str>) -> Result<Option<PersistenceDomain>, PoolError> {
        parse_override(v.map(OsString::from), Path::new("/pools/p"))
    }

    #[test]
    fn the_override_accepts_both_names_and_treats_empty_as_unset() {
        assert_eq!(parse(Some("cpu_cache")).ok(), Some(Some(CpuCache)));
        assert_eq!(
            parse(Some("memory_controller")).ok(),
            Some(Some(MemoryController))
        );
        assert_eq!(parse(Some("")).ok(), Some(None));
        assert_eq!(parse(None).ok(), Some(None));
    }

    #[test]
    fn an_invalid_override_is_a_typed_error_naming_the_variable_and_file() {
        for bad in ["eadr", "CPU_CACHE", "1", "cpu_cache,memory_controller"] {
            let e = parse(Some(bad)).expect_err(bad);
            let PoolError::InvalidEnv {
                var, value, path, ..
            } = &e
            else {
                panic!("{bad}: {e:?}");
            };
            assert_eq!((*var, value.as_str()), (DOMAIN_ENV, bad));
            assert_eq!(path, Path::new("/pools/p"));
            let msg = e.to_string();
            assert!(
                msg.contains(DOMAIN_ENV) && msg.contains("/pools/p"),
                "{msg}"
            );
        }
        // Not UTF-8: still an error, never a panic.
        use std::os::unix::ffi::OsStringExt;
        let e = parse_override(Some(OsString::from_vec(vec![0xff, 0xfe])), Path::new("p"));
        assert!(matches!(e, Err(PoolError::InvalidEnv { .. })), "{e:?}");
    }

    #[test]
    fn the_override_beats_the_request_which_beats_the_platform() {
        let sysfs = || {
            Some((
                CpuCache,
                PathBuf::from("/sys/bus/nd/devices/region0/persistence_domain"),
            ))
        };
        assert_eq!(
            decide(Some(MemoryController), Some(CpuCache), sysfs),
            (MemoryController, DomainSource::Override)
        );
        assert_eq!(
            decide(Some(CpuCache), None, || None),
            (CpuCache, DomainSource::Override)
        );
        assert_eq!(
            decide(None, Some(MemoryController), sysfs),
            (MemoryController, DomainSource::Requested)
        );
        let (d, s) = decide(None, None, sysfs);
        assert_eq!(d, CpuCache);
        assert!(matches!(s, DomainSource::Detected(ref p) if p.ends_with("persistence_domain")));
        assert_eq!(
            decide(None, None, || None),
            (MemoryController, DomainSource::Default)
        );
    }

    #[test]
    fn detection_is_not_consulted_once_decided() {
        let called = std::cell::Cell::new(false);
        let detect = || {
            called.set(true);
            None
        };
        decide(Some(CpuCache), None, detect);
        assert!(!called.get());
    }
}
