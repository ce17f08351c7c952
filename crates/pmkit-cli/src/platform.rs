//! The platform part of `info` and `check`: what sysfs said about the pool's device
//! (detected once by the read-only open), as JSON, as text rows, and as findings.
//!
//! Each item is `found` (with the value and the sysfs file it was read from),
//! `unknown` (with the reason, e.g. "not on an nd region" on a machine without
//! persistent memory), or `error` (a sysfs file that exists but is malformed or
//! unreadable, named in the message).

use pmem_core::platform::{
    BadBlocks, Detected, DevDaxGeometry, PersistenceDomain, Platform, Probe, ShutdownState,
};
use pmem_core::pool::shutdown_record::ShutdownCheck;
use serde::Serialize;

/// The unsafe-shutdown check of the pool (its record against sysfs), for JSON.
#[derive(Debug, Serialize)]
pub struct ShutdownCheckReport {
    /// `ok`, `skipped`, `not_recorded`, `no_record`, `other_device` or
    /// `unsafe_shutdown`.
    pub status: &'static str,
    /// One line in words.
    pub message: String,
    /// Whether `pmkit pool check` fails on it.
    pub problem: bool,
}

impl ShutdownCheckReport {
    /// The report of a check.
    pub fn of(check: &ShutdownCheck) -> ShutdownCheckReport {
        let (status, message, problem) = match check {
            ShutdownCheck::NotRecorded => (
                "not_recorded",
                "check skipped: a version-2 pool records no count (`pmkit pool upgrade` adds it)"
                    .to_owned(),
                false,
            ),
            ShutdownCheck::NoValidRecord => (
                "no_record",
                "check skipped: the pool has no shutdown-state record yet (the next read-write open writes one)"
                    .to_owned(),
                false,
            ),
            ShutdownCheck::Skipped { reason } => ("skipped", format!("check skipped: {reason}"), false),
            ShutdownCheck::Ok { clean: true, count } => (
                "ok",
                format!("ok, closed cleanly (device count now {count})"),
                false,
            ),
            ShutdownCheck::Ok { clean: false, count } => (
                "ok",
                format!("ok, not closed cleanly but the device count did not move ({count})"),
                false,
            ),
            ShutdownCheck::OtherDevice => (
                "other_device",
                "check skipped: the pool was last opened on other DIMMs (moved or copied)"
                    .to_owned(),
                false,
            ),
            ShutdownCheck::UnsafeShutdown { recorded, now } => (
                "unsafe_shutdown",
                format!(
                    "the device shut down unsafely while the pool was open (count {recorded} at open, {now} now): durable writes may be lost"
                ),
                true,
            ),
        };
        ShutdownCheckReport {
            status,
            message,
            problem,
        }
    }
}

/// One detected item, for JSON.
#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Item<T> {
    /// Read from `from`.
    Found {
        /// The value.
        value: T,
        /// The sysfs file read.
        from: String,
    },
    /// The platform does not say.
    Unknown {
        /// Why.
        reason: String,
    },
    /// A sysfs file is broken.
    Error {
        /// The error, naming the file.
        error: String,
    },
}

impl<T> Item<T> {
    fn of<S>(probe: &Probe<S>, f: impl FnOnce(&S) -> T) -> Item<T> {
        match probe {
            Ok(Detected::Found { value, from }) => Item::Found {
                value: f(value),
                from: from.display().to_string(),
            },
            Ok(Detected::Unknown { reason }) => Item::Unknown {
                reason: reason.clone(),
            },
            Err(e) => Item::Error {
                error: e.to_string(),
            },
        }
    }
}

/// The unsafe-shutdown state, for JSON.
#[derive(Debug, Serialize)]
pub struct Shutdown {
    /// Sum of the region's DIMMs' `dirty_shutdown` counts.
    pub count: u64,
    /// The DIMMs' identities.
    pub identity: String,
}

/// A byte range of the pool file.
#[derive(Debug, Serialize)]
pub struct Range {
    /// Offset in the pool file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Bad blocks, for JSON.
#[derive(Debug, Serialize)]
pub struct Bad {
    /// Ranges of the pool file on bad media.
    pub in_pool: Vec<Range>,
    /// Bad ranges on the whole device.
    pub on_device: usize,
}

/// Device-DAX geometry, for JSON.
#[derive(Debug, Serialize)]
pub struct DevDax {
    /// Size in bytes.
    pub size: u64,
    /// Alignment in bytes.
    pub align: u64,
}

/// The platform section of `pmkit pool info --json`.
#[derive(Debug, Serialize)]
pub struct PlatformReport {
    /// The sysfs root read (`/sys`, or `$PMKIT_SYSFS_ROOT`).
    pub sysfs_root: String,
    /// The persistence domain (`cpu_cache` or `memory_controller`).
    pub persistence_domain: Item<&'static str>,
    /// The unsafe-shutdown count and device identity.
    pub unsafe_shutdown: Item<Shutdown>,
    /// Bad blocks inside the pool.
    pub bad_blocks: Item<Bad>,
    /// The pool's shutdown-state record checked against the count now.
    pub unsafe_shutdown_check: ShutdownCheckReport,
    /// Device-DAX size and alignment (absent for a regular file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devdax: Option<Item<DevDax>>,
}

impl PlatformReport {
    /// The report of a detected platform and the pool's shutdown check.
    pub fn of(p: &Platform, check: &ShutdownCheck) -> PlatformReport {
        PlatformReport {
            unsafe_shutdown_check: ShutdownCheckReport::of(check),
            sysfs_root: p.root.display().to_string(),
            persistence_domain: Item::of(&p.domain, |d: &PersistenceDomain| d.name()),
            unsafe_shutdown: Item::of(&p.shutdown, |s: &ShutdownState| Shutdown {
                count: s.count,
                identity: s.identity.clone(),
            }),
            bad_blocks: Item::of(&p.bad_blocks, |b: &BadBlocks| Bad {
                in_pool: b
                    .in_pool
                    .iter()
                    .map(|r| Range {
                        offset: r.offset,
                        len: r.len,
                    })
                    .collect(),
                on_device: b.on_device,
            }),
            devdax: p.devdax.as_ref().map(|d| {
                Item::of(d, |g: &DevDaxGeometry| DevDax {
                    size: g.size,
                    align: g.align,
                })
            }),
        }
    }

    /// `(name, value)` rows for `pmkit pool info`.
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let mut rows = vec![
            (
                "domain",
                self.text(&self.persistence_domain, |d| (*d).to_owned()),
            ),
            (
                "shutdown",
                self.text(&self.unsafe_shutdown, |s| {
                    format!("unsafe-shutdown count {} (DIMMs {})", s.count, s.identity)
                }),
            ),
            ("bad blocks", self.text(&self.bad_blocks, bad_text)),
        ];
        if let Some(d) = &self.devdax {
            rows.push((
                "device dax",
                self.text(d, |g| format!("size {}, alignment {}", g.size, g.align)),
            ));
        }
        rows
    }

    fn text<T>(&self, item: &Item<T>, f: impl FnOnce(&T) -> String) -> String {
        match item {
            Item::Found { value, from } => format!("{} (from {from})", f(value)),
            Item::Unknown { reason } => format!("unknown ({reason})"),
            Item::Error { error } => format!("ERROR: {error}"),
        }
    }

    /// The findings of `pmkit pool check`: `(line, is_problem)`.
    pub fn findings(&self) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        out.push(match &self.bad_blocks {
            Item::Found { value, from } if !value.in_pool.is_empty() => (
                format!(
                    "bad blocks inside the pool: {} (from {from})",
                    bad_text(value)
                ),
                true,
            ),
            Item::Found { value, from } => (
                format!(
                    "bad blocks: ok, none in the pool ({} on the device, from {from})",
                    value.on_device
                ),
                false,
            ),
            Item::Unknown { reason } => (
                format!("bad blocks: check skipped: unknown ({reason})"),
                false,
            ),
            Item::Error { error } => (format!("bad blocks: cannot check: {error}"), true),
        });
        let c = &self.unsafe_shutdown_check;
        out.push((format!("unsafe shutdown: {}", c.message), c.problem));
        if let Item::Error { error } = &self.unsafe_shutdown {
            out.push((
                format!("unsafe shutdown: cannot read the count: {error}"),
                true,
            ));
        }
        if let Item::Error { error } = &self.persistence_domain {
            out.push((format!("persistence domain: {error}"), true));
        }
        if let Some(Item::Error { error }) = &self.devdax {
            out.push((format!("device dax: {error}"), true));
        }
        out
    }
}

fn bad_text(b: &Bad) -> String {
    if b.in_pool.is_empty() {
        return format!("none in the pool ({} on the device)", b.on_device);
    }
    b.in_pool
        .iter()
        .map(|r| format!("{}..{} ({} bytes)", r.offset, r.offset + r.len, r.len))
        .collect::<Vec<_>>()
        .join(", ")
}
