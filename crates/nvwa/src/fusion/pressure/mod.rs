//! Where memory pressure comes from: one [`Pressure`] sample per daemon round, taken
//! by a [`PressureSource`].
//!
//! A sample is the free memory of the system (or of a memory cgroup), its three
//! watermarks `min ≤ low ≤ high` and its total, all in bytes, plus the PSI
//! `some avg10` figure when the kernel reports one. The policy ([`super::policy`])
//! reads nothing else.
//!
//! | source | free | watermarks | total | PSI |
//! |---|---|---|---|---|
//! | [`ZoneInfo`] (`/proc/zoneinfo`) | `pages free`, summed over zones | the kernel's own `min`/`low`/`high`, summed | `managed`, summed | `/proc/pressure/memory` |
//! | [`MemInfo`] (`/proc/meminfo`) | `MemAvailable` (else `MemFree`) | derived from `vm.min_free_kbytes` as the kernel derives them | `MemTotal` | `/proc/pressure/memory` |
//! | [`Cgroup`] (v2 or v1) | limit − working set | fixed fractions of the limit | the limit | v2 `memory.pressure` |
//! | [`Scripted`] | whatever the test says | | | |
//!
//! [`ZoneInfo`] is the source that lets the paper's Table 2 apply literally: the
//! kernel compares each zone's free pages with that zone's watermarks, and the
//! paper's `Page_min`/`Page_low`/`Page_high` are those numbers. Zones with no
//! managed pages (an empty `Movable` or `Device` zone) are skipped: the kernel
//! never allocates from them, and their placeholder watermarks would only inflate
//! the sums. The printed watermarks already include any temporary
//! `watermark_boost`.
//!
//! Every reader is strict about the lines it needs and tolerant of the rest: a
//! line it needs that it cannot read gives [`PressureError::Parse`] with the file
//! and the 1-based line number, a line that is absent gives
//! [`PressureError::Missing`]; nothing panics on malformed input, and every
//! multiplication into bytes is checked.

use std::io;
use std::path::{Path, PathBuf};

mod cgroup;
mod meminfo;
mod scripted;
#[cfg(target_os = "linux")]
mod trigger;
mod zoneinfo;

pub use cgroup::{Cgroup, CgroupVersion};
pub use meminfo::{FreeMeasure, MemInfo};
pub use scripted::Scripted;
#[cfg(target_os = "linux")]
pub use trigger::{PsiTrigger, PROC_PRESSURE_MEMORY};
pub use zoneinfo::ZoneInfo;

/// Size of the pages `/proc/zoneinfo` counts, unless told otherwise
/// ([`ZoneInfo::page_bytes`]): 4 KiB, the page of x86-64 and of most arm64 kernels.
pub const DEFAULT_PAGE_BYTES: u64 = 4096;

/// The kernel's default `vm.watermark_scale_factor` (in units of 1/10 000 of memory),
/// used when `/proc/sys/vm/watermark_scale_factor` does not exist.
pub const DEFAULT_WATERMARK_SCALE_FACTOR: u64 = 10;

/// A cgroup's `min` watermark, in basis points (1/10 000) of its limit: 1 %.
///
/// A cgroup has no watermarks of its own (at its limit the kernel reclaims inside
/// the group synchronously, with no kswapd running ahead). We give it the kernel's
/// proportions — `min : low : high = 4 : 5 : 6`, i.e. `low = min × 5/4`,
/// `high = min × 3/2`, which is also the paper's 16 : 20 : 24 MB — with `min` at
/// 1 % of the limit. That is about forty times the kernel's share on a large
/// machine (`min_free_kbytes` is ~0.02–0.05 % of RAM), because a group at its limit
/// stalls at once: the margin is there to give the daemon a round to react.
pub const CGROUP_MIN_BP: u64 = 100;
/// A cgroup's `low` watermark, in basis points of its limit: 1.25 % (`min × 5/4`).
pub const CGROUP_LOW_BP: u64 = 125;
/// A cgroup's `high` watermark, in basis points of its limit: 1.5 % (`min × 3/2`).
pub const CGROUP_HIGH_BP: u64 = 150;

/// A cgroup v1 limit at or above this many bytes means "no limit": v1 has no `max`
/// and reports an unlimited group as `PAGE_COUNTER_MAX` pages, about 2^63 bytes.
pub const CGROUP_V1_UNLIMITED_BYTES: u64 = 1 << 62;

const _: () = assert!(CGROUP_MIN_BP <= CGROUP_LOW_BP && CGROUP_LOW_BP <= CGROUP_HIGH_BP);
const _: () =
    assert!(CGROUP_LOW_BP * 4 == CGROUP_MIN_BP * 5 && CGROUP_HIGH_BP * 2 == CGROUP_MIN_BP * 3);
const _: () = assert!(CGROUP_HIGH_BP < 10_000);

/// One reading of memory pressure. All sizes are bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Pressure {
    /// Memory free now (the paper's "remainder free pages", in bytes).
    pub free_bytes: u64,
    /// The `min` watermark: reserve for critical allocations (the paper's `Page_min`).
    pub min: u64,
    /// The `low` watermark: below it kswapd wakes and swapping starts (`Page_low`).
    pub low: u64,
    /// The `high` watermark: above it kswapd sleeps again (`Page_high`).
    pub high: u64,
    /// All the memory the source manages (DRAM, or the cgroup's limit).
    pub total: u64,
    /// PSI `some avg10`: the share (0–100 %) of the last 10 s in which some task
    /// stalled on memory, when the source reports it. The Table 2 policy does not
    /// read it; it is carried for the daemon and its logs.
    pub psi_some_avg10: Option<f64>,
    /// Which source took the sample: `zoneinfo`, `meminfo`, `cgroup-v2`,
    /// `cgroup-v1` or `scripted`.
    pub source: &'static str,
}

impl Pressure {
    /// A sample made by hand (source `scripted`, no PSI): for tests, replays and
    /// [`Scripted`] traces.
    pub fn scripted(free_bytes: u64, (min, low, high): (u64, u64, u64), total: u64) -> Pressure {
        Pressure {
            free_bytes,
            min,
            low,
            high,
            total,
            psi_some_avg10: None,
            source: "scripted",
        }
    }

    /// A scripted sample that falls at `level` in [`Scale::DramFractions`] on a
    /// machine of `total` bytes, with [`limit_watermarks`]: free memory at the
    /// top of the level's band (all of `total` for
    /// [`Level::NoPressure`], 3/8, 5/16 and 1/4 of it for the next three, none
    /// for [`Level::Critical`]). For tests and replays.
    ///
    /// [`Scale::DramFractions`]: super::Scale::DramFractions
    /// [`Level::NoPressure`]: super::Level::NoPressure
    /// [`Level::Critical`]: super::Level::Critical
    pub fn scripted_at(level: super::Level, total: u64) -> Pressure {
        use super::Level;
        let free = match level {
            Level::NoPressure => total,
            Level::Light => total * 3 / 8,
            Level::Moderate => total * 5 / 16,
            Level::Severe => total / 4,
            Level::Critical => 0,
        };
        Pressure::scripted(free, limit_watermarks(total), total)
    }
}

/// The watermarks `(min, low, high)` of a memory limit of `limit` bytes:
/// [`CGROUP_MIN_BP`], [`CGROUP_LOW_BP`] and [`CGROUP_HIGH_BP`] of it (1 %, 1.25 %,
/// 1.5 %). The [`Cgroup`] source and a heap given its own DRAM limit both use them.
pub fn limit_watermarks(limit: u64) -> (u64, u64, u64) {
    (
        basis_points(limit, CGROUP_MIN_BP),
        basis_points(limit, CGROUP_LOW_BP),
        basis_points(limit, CGROUP_HIGH_BP),
    )
}

/// Why a [`PressureSource`] could not give a sample.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PressureError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// A line the source needs is malformed.
    #[error("{}:{line}: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A line or value the source needs is not in the file at all.
    #[error("{} has no {what}", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// What was looked for.
        what: String,
    },
    /// The cgroup (and every ancestor looked at) has no memory limit: the caller
    /// should fall back to a system-wide source ([`ZoneInfo`] or [`MemInfo`]).
    #[error("memory cgroup {} has no limit", path.display())]
    NoLimit {
        /// The process's own cgroup directory.
        path: PathBuf,
    },
    /// `/proc/self/cgroup` names no memory cgroup that exists under the mount.
    #[error("no memory cgroup found from {}", path.display())]
    NoCgroup {
        /// The `/proc/self/cgroup` file read.
        path: PathBuf,
    },
    /// A [`Scripted`] source has given all its samples.
    #[error("the scripted pressure trace is exhausted after {samples} samples")]
    Exhausted {
        /// How many samples it gave.
        samples: usize,
    },
}

/// Something that can tell how much memory is free and where the watermarks are.
pub trait PressureSource {
    /// Takes one sample now.
    fn sample(&mut self) -> Result<Pressure, PressureError>;
}

impl<S: PressureSource + ?Sized> PressureSource for &mut S {
    fn sample(&mut self) -> Result<Pressure, PressureError> {
        (**self).sample()
    }
}

impl<S: PressureSource + ?Sized> PressureSource for Box<S> {
    fn sample(&mut self) -> Result<Pressure, PressureError> {
        (**self).sample()
    }
}

// ---------------------------------------------------------------------------------
// Small readers shared by the sources.

fn io_error(path: &Path, source: io::Error) -> PressureError {
    PressureError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn parse_error(path: &Path, line: usize, reason: impl Into<String>) -> PressureError {
    PressureError::Parse {
        path: path.to_path_buf(),
        line,
        reason: reason.into(),
    }
}

fn missing(path: &Path, what: impl Into<String>) -> PressureError {
    PressureError::Missing {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

fn read(path: &Path) -> Result<String, PressureError> {
    std::fs::read_to_string(path).map_err(|e| io_error(path, e))
}

/// Reads a file that may legitimately be absent (`None`).
fn read_optional(path: &Path) -> Result<Option<String>, PressureError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(path, e)),
    }
}

fn parse_u64(path: &Path, line: usize, token: &str, what: &str) -> Result<u64, PressureError> {
    token
        .parse::<u64>()
        .map_err(|_| parse_error(path, line, format!("{what}: `{token}` is not a count")))
}

fn checked_mul(path: &Path, line: usize, a: u64, b: u64, what: &str) -> Result<u64, PressureError> {
    a.checked_mul(b)
        .ok_or_else(|| parse_error(path, line, format!("{what} overflows 64 bits in bytes")))
}

/// `value × bp / 10 000`, rounded down, without overflow.
fn basis_points(value: u64, bp: u64) -> u64 {
    let scaled = u128::from(value) * u128::from(bp) / 10_000;
    u64::try_from(scaled).unwrap_or(u64::MAX)
}

/// The only value of a one-value file (`min_free_kbytes`, `memory.max`, …): one
/// token on line 1; only blank lines may follow.
fn single_token<'a>(path: &Path, text: &'a str) -> Result<&'a str, PressureError> {
    let mut lines = text.lines().enumerate();
    let Some((_, first)) = lines.next() else {
        return Err(parse_error(path, 1, "empty file, expected one value"));
    };
    let mut tokens = first.split_whitespace();
    let Some(token) = tokens.next() else {
        return Err(parse_error(path, 1, "blank line, expected one value"));
    };
    if tokens.next().is_some() {
        return Err(parse_error(path, 1, "expected exactly one value"));
    }
    if let Some((i, _)) = lines.find(|(_, l)| !l.trim().is_empty()) {
        return Err(parse_error(path, i + 1, "unexpected text after the value"));
    }
    Ok(token)
}

/// The `some avg10` figure of a PSI file (`/proc/pressure/memory`,
/// `memory.pressure`):
///
/// ```text
/// some avg10=0.00 avg60=0.00 avg300=0.00 total=0
/// full avg10=0.00 avg60=0.00 avg300=0.00 total=0
/// ```
fn parse_psi_some_avg10(path: &Path, text: &str) -> Result<f64, PressureError> {
    for (i, line) in text.lines().enumerate() {
        let mut tokens = line.split_whitespace();
        if tokens.next() != Some("some") {
            continue;
        }
        for token in tokens {
            let Some(value) = token.strip_prefix("avg10=") else {
                continue;
            };
            return match value.parse::<f64>() {
                Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
                _ => Err(parse_error(
                    path,
                    i + 1,
                    format!("avg10=`{value}` is not a percentage"),
                )),
            };
        }
        return Err(parse_error(path, i + 1, "`some` line without `avg10=`"));
    }
    Err(missing(path, "`some` line"))
}

/// Reads PSI if the file is there: absent (`NotFound`) or switched off in the kernel
/// (`psi=0`, which fails the read with `EOPNOTSUPP`) is `None`.
fn read_psi(path: Option<&Path>) -> Result<Option<f64>, PressureError> {
    let Some(path) = path else {
        return Ok(None);
    };
    match std::fs::read_to_string(path) {
        Ok(text) => parse_psi_some_avg10(path, &text).map(Some),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::Unsupported
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(io_error(path, e)),
    }
}

const PROC_PSI_MEMORY: &str = "/proc/pressure/memory";

/// Fixtures and assertions shared by the sources' tests.
#[cfg(test)]
pub(super) mod test_util {
    use std::path::{Path, PathBuf};

    use super::PressureError;

    pub(super) const GIB: u64 = 1 << 30;

    /// A scratch directory under the system temp dir, named with the process id,
    /// removed on drop.
    pub(super) struct Scratch(pub(super) PathBuf);

    impl Scratch {
        pub(super) fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("nvwa-fusion-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("create scratch dir");
            Scratch(dir)
        }

        pub(super) fn write(&self, rel: &str, text: &str) -> PathBuf {
            let path = self.0.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("create parent");
            }
            std::fs::write(&path, text).expect("write fixture");
            path
        }

        pub(super) fn dir(&self, rel: &str) -> PathBuf {
            let path = self.0.join(rel);
            std::fs::create_dir_all(&path).expect("create dir");
            path
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(super) fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/fusion")
            .join(name)
    }

    pub(super) fn assert_parse_error(err: PressureError, file: &Path, want_line: usize) {
        match err {
            PressureError::Parse { path, line, reason } => {
                assert_eq!(path, file, "{reason}");
                assert_eq!(line, want_line, "{reason}");
                let shown = PressureError::Parse { path, line, reason }.to_string();
                assert!(shown.contains(&format!(":{want_line}:")), "{shown}");
            }
            other => panic!("expected a parse error at line {want_line}, got {other:?}"),
        }
    }

    /// Two nodes in the Linux 4.5 layout (the paper's kernel: no per-node block,
    /// a `scanned` line), a pagesets block whose `high:` must not be read.
    pub(super) const ZONEINFO_SMALL: &str = "\
Node 0, zone      DMA
  pages free     100
        min      1
        low      2
        high     3
        scanned  0
        spanned  4095
        present  3998
        managed  200
    nr_free_pages 100
        protection: (0, 3000, 3000, 3000)
  pagesets
    cpu: 0
              count: 0
              high:  0
              batch: 1
  all_unreclaimable: 0
  start_pfn:         1
Node 0, zone   Normal
  pages free     1000
        min      10
        low      12
        high     15
        managed  4000
  pagesets
    cpu: 0
              high:  186
Node 1, zone   Normal
  pages free     3000
        min      20
        low      25
        high     30
        managed  6000
";
}

#[cfg(test)]
mod tests {
    use super::test_util::{assert_parse_error, Scratch, ZONEINFO_SMALL};
    use super::*;

    // -- PSI --------------------------------------------------------------------

    #[test]
    fn psi_some_avg10_is_read_and_checked() {
        let scratch = Scratch::new("psi");
        let zi = scratch.write("zoneinfo", ZONEINFO_SMALL);
        let psi = scratch.write(
            "memory",
            "some avg10=1.25 avg60=0.50 avg300=0.10 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        );
        let p = ZoneInfo::at(&zi).psi(Some(psi)).sample().expect("sample");
        assert_eq!(p.psi_some_avg10, Some(1.25));
        // Absent PSI file: no figure, no error.
        let p = ZoneInfo::at(&zi)
            .psi(Some(scratch.0.join("absent")))
            .sample()
            .expect("sample");
        assert_eq!(p.psi_some_avg10, None);
        for (i, (text, line)) in [
            ("full avg10=0.00\nsome avg10=abc avg60=0\n", 2),
            ("some avg10=101.0\n", 1),
            ("some avg60=1.0\n", 1),
        ]
        .iter()
        .enumerate()
        {
            let psi = scratch.write(&format!("bad-{i}"), text);
            let err = ZoneInfo::at(&zi)
                .psi(Some(psi.clone()))
                .sample()
                .expect_err(text);
            assert_parse_error(err, &psi, *line);
        }
        let psi = scratch.write("no-some", "full avg10=0.00\n");
        assert!(matches!(
            ZoneInfo::at(&zi).psi(Some(psi)).sample(),
            Err(PressureError::Missing { .. })
        ));
    }

    // -- this machine -----------------------------------------------------------

    fn plausible(p: &Pressure) {
        assert!(p.total > 0, "{p:?}");
        assert!(p.free_bytes <= p.total, "{p:?}");
        assert!(p.min <= p.low && p.low <= p.high, "{p:?}");
        assert!(p.high < p.total, "{p:?}");
        if let Some(psi) = p.psi_some_avg10 {
            assert!((0.0..=100.0).contains(&psi), "{p:?}");
        }
    }

    #[test]
    fn this_machine_is_plausible() {
        if !Path::new("/proc/zoneinfo").exists() {
            return; // Not Linux.
        }
        let zi = ZoneInfo::new().sample().expect("/proc/zoneinfo");
        plausible(&zi);
        assert!(zi.min > 0, "{zi:?}");
        let mi = MemInfo::new().sample().expect("/proc/meminfo");
        plausible(&mi);
        // Whatever the cgroup setup, detection either reads a limit or says why not.
        match Cgroup::detect().and_then(|mut cg| cg.sample()) {
            Ok(p) => plausible(&p),
            // No limit, no memory cgroup, or a file this sandbox may not read;
            // a file we read and misparse still fails.
            Err(
                PressureError::NoLimit { .. }
                | PressureError::NoCgroup { .. }
                | PressureError::Io { .. }
                | PressureError::Missing { .. },
            ) => {}
            Err(e) => panic!("cgroup: {e}"),
        }
    }
}
