//! [`MemInfo`]: free memory from `/proc/meminfo` (which figure counts as free:
//! [`FreeMeasure`]), with watermarks derived from `vm.min_free_kbytes` as the
//! kernel derives them.

use std::path::{Path, PathBuf};

use super::{
    basis_points, checked_mul, missing, parse_error, parse_u64, read, read_optional, read_psi,
    single_token, Pressure, PressureError, PressureSource, DEFAULT_WATERMARK_SCALE_FACTOR,
    PROC_PSI_MEMORY,
};

/// Which `/proc/meminfo` figure counts as free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FreeMeasure {
    /// `MemAvailable` (the kernel's estimate of what can be allocated without
    /// swapping: free pages plus reclaimable page cache and slab), or `MemFree`
    /// on kernels older than 3.14 that do not print it. The default: the paper
    /// integrates PM to avoid swapping, and dropping clean cache is not swapping.
    #[default]
    Available,
    /// `MemFree`: free pages only, the figure the kernel itself compares with its
    /// watermarks (what [`ZoneInfo`](super::ZoneInfo) reads).
    Free,
}

/// Free memory from `/proc/meminfo`, watermarks derived from
/// `/proc/sys/vm/min_free_kbytes` as the kernel derives them.
///
/// `min = min_free_kbytes × 1024`. Linux 4.5 (the paper's kernel) sets
/// `low = min × 5/4` and `high = min × 3/2`. Since 4.6 the gap is
/// `max(min / 4, total × watermark_scale_factor / 10 000)`:
/// `low = min + gap`, `high = min + 2 × gap`. The kernel computes this per zone on
/// the zone's managed pages; because both terms are proportional to a zone's share
/// of memory, the sum over zones is the same formula on the total, which is what
/// this source computes (with `MemTotal` as the total). With the scale-factor file
/// disabled ([`MemInfo::watermark_scale_factor`] `None`) it uses the 4.5 rule.
#[derive(Clone, Debug)]
pub struct MemInfo {
    path: PathBuf,
    min_free_kbytes_path: PathBuf,
    watermark_scale_factor_path: Option<PathBuf>,
    psi_path: Option<PathBuf>,
    measure: FreeMeasure,
}

/// The figures read from meminfo, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MemFigures {
    total: u64,
    free: u64,
    available: Option<u64>,
}

fn parse_meminfo(path: &Path, text: &str) -> Result<MemFigures, PressureError> {
    let mut total = None;
    let mut free = None;
    let mut available = None;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let Some((key, rest)) = raw.split_once(':') else {
            return Err(parse_error(path, line_no, "expected `Name: value`"));
        };
        let slot = match key.trim() {
            "MemTotal" => &mut total,
            "MemFree" => &mut free,
            "MemAvailable" => &mut available,
            _ => continue,
        };
        let tokens: Vec<&str> = rest.split_whitespace().collect();
        let [value, "kB"] = tokens.as_slice() else {
            return Err(parse_error(
                path,
                line_no,
                format!("expected `{}: <count> kB`", key.trim()),
            ));
        };
        let kb = parse_u64(path, line_no, value, key.trim())?;
        let bytes = checked_mul(path, line_no, kb, 1024, key.trim())?;
        if slot.replace(bytes).is_some() {
            return Err(parse_error(
                path,
                line_no,
                format!("second `{}` line", key.trim()),
            ));
        }
    }
    Ok(MemFigures {
        total: total.ok_or_else(|| missing(path, "`MemTotal` line"))?,
        free: free.ok_or_else(|| missing(path, "`MemFree` line"))?,
        available,
    })
}

/// The kernel's watermarks for `min_bytes` (from `min_free_kbytes`) on `total_bytes`
/// of memory, with `scale_factor` in 1/10 000 (`None`: the Linux 4.5 rule).
fn kernel_watermarks(min_bytes: u64, total_bytes: u64, scale_factor: Option<u64>) -> (u64, u64) {
    let quarter = min_bytes / 4;
    let gap = match scale_factor {
        Some(factor) => quarter.max(basis_points(total_bytes, factor)),
        None => quarter,
    };
    let low = min_bytes.saturating_add(gap);
    let high = low.saturating_add(gap);
    (low, high)
}

impl MemInfo {
    /// Reads `/proc/meminfo`, `/proc/sys/vm/min_free_kbytes`,
    /// `/proc/sys/vm/watermark_scale_factor` and PSI from `/proc/pressure/memory`.
    pub fn new() -> Self {
        MemInfo {
            path: PathBuf::from("/proc/meminfo"),
            min_free_kbytes_path: PathBuf::from("/proc/sys/vm/min_free_kbytes"),
            watermark_scale_factor_path: Some(PathBuf::from("/proc/sys/vm/watermark_scale_factor")),
            psi_path: Some(PathBuf::from(PROC_PSI_MEMORY)),
            measure: FreeMeasure::default(),
        }
    }

    /// Reads the given files (test fixtures): `meminfo` and `min_free_kbytes`; no
    /// scale factor (the Linux 4.5 rule) and no PSI until set.
    pub fn at(meminfo: impl Into<PathBuf>, min_free_kbytes: impl Into<PathBuf>) -> Self {
        MemInfo {
            path: meminfo.into(),
            min_free_kbytes_path: min_free_kbytes.into(),
            watermark_scale_factor_path: None,
            psi_path: None,
            measure: FreeMeasure::default(),
        }
    }

    /// Reads `vm.watermark_scale_factor` from `path` (a missing file means the
    /// default, [`DEFAULT_WATERMARK_SCALE_FACTOR`]); `None` applies the Linux 4.5
    /// rule (`low = min × 5/4`, `high = min × 3/2`).
    pub fn watermark_scale_factor(mut self, path: Option<PathBuf>) -> Self {
        self.watermark_scale_factor_path = path;
        self
    }

    /// Reads PSI from `path` (`None`: report no PSI).
    pub fn psi(mut self, path: Option<PathBuf>) -> Self {
        self.psi_path = path;
        self
    }

    /// Which figure counts as free (default [`FreeMeasure::Available`]).
    pub fn free_measure(mut self, measure: FreeMeasure) -> Self {
        self.measure = measure;
        self
    }

    fn scale_factor(&self) -> Result<Option<u64>, PressureError> {
        let Some(path) = self.watermark_scale_factor_path.as_deref() else {
            return Ok(None);
        };
        let Some(text) = read_optional(path)? else {
            return Ok(Some(DEFAULT_WATERMARK_SCALE_FACTOR));
        };
        let token = single_token(path, &text)?;
        parse_u64(path, 1, token, "watermark_scale_factor").map(Some)
    }
}

impl Default for MemInfo {
    fn default() -> Self {
        MemInfo::new()
    }
}

impl PressureSource for MemInfo {
    fn sample(&mut self) -> Result<Pressure, PressureError> {
        let path = self.path.as_path();
        let figures = parse_meminfo(path, &read(path)?)?;
        let free_bytes = match self.measure {
            FreeMeasure::Available => figures.available.unwrap_or(figures.free),
            FreeMeasure::Free => figures.free,
        };
        let total = figures.total;

        let mfk_path = self.min_free_kbytes_path.as_path();
        let mfk_text = read(mfk_path)?;
        let min_free_kb = parse_u64(
            mfk_path,
            1,
            single_token(mfk_path, &mfk_text)?,
            "min_free_kbytes",
        )?;
        let min = checked_mul(mfk_path, 1, min_free_kb, 1024, "min_free_kbytes")?;
        let (low, high) = kernel_watermarks(min, total, self.scale_factor()?);
        Ok(Pressure {
            free_bytes,
            min,
            low,
            high,
            total,
            psi_some_avg10: read_psi(self.psi_path.as_deref())?,
            source: "meminfo",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::pressure::test_util::{assert_parse_error, fixture, Scratch, GIB};

    #[test]
    fn meminfo_real_fixture() {
        let scratch = Scratch::new("mi-real");
        let mfk = scratch.write("min_free_kbytes", "67584\n");
        let path = fixture("meminfo-6.18.txt");
        let p = MemInfo::at(&path, &mfk).sample().expect("sample");
        assert_eq!(p.total, 24_684_092 * 1024);
        assert_eq!(p.free_bytes, 24_181_444 * 1024, "MemAvailable by default");
        assert_eq!(p.min, 67_584 * 1024);
        // The Linux 4.5 rule.
        assert_eq!(p.low, 67_584 * 1024 * 5 / 4);
        assert_eq!(p.high, 67_584 * 1024 * 3 / 2);
        assert_eq!(p.source, "meminfo");
        let p = MemInfo::at(&path, &mfk)
            .free_measure(FreeMeasure::Free)
            .sample()
            .expect("sample");
        assert_eq!(p.free_bytes, 18_149_648 * 1024);
    }

    #[test]
    fn meminfo_watermarks_follow_the_kernel_with_scale_factor() {
        let scratch = Scratch::new("mi-wsf");
        let mfk = scratch.write("min_free_kbytes", "16384\n");
        // 64 GiB: the scale-factor gap (0.1 % = 64 MiB) beats min/4 (4 MiB).
        let meminfo = scratch.write(
            "meminfo",
            "MemTotal: 67108864 kB\nMemFree: 1024 kB\nMemAvailable: 2048 kB\n",
        );
        let wsf = scratch.write("wsf", "10\n");
        let p = MemInfo::at(&meminfo, &mfk)
            .watermark_scale_factor(Some(wsf))
            .sample()
            .expect("sample");
        let min = 16 << 20;
        let gap = (64 * GIB) / 1000;
        assert_eq!((p.min, p.low, p.high), (min, min + gap, min + 2 * gap));
        // A missing scale-factor file means the default (10), the same here.
        let p2 = MemInfo::at(&meminfo, &mfk)
            .watermark_scale_factor(Some(scratch.0.join("absent")))
            .sample()
            .expect("sample");
        assert_eq!(p2, p);
        // 1 GiB: min/4 wins, the 4.5 rule again.
        let small = scratch.write("meminfo-small", "MemTotal: 1048576 kB\nMemFree: 1024 kB\n");
        let wsf = scratch.write("wsf", "10\n");
        let p = MemInfo::at(&small, &mfk)
            .watermark_scale_factor(Some(wsf))
            .sample()
            .expect("sample");
        assert_eq!((p.low, p.high), (min * 5 / 4, min * 3 / 2));
        assert_eq!(
            p.free_bytes,
            1024 * 1024,
            "MemFree when MemAvailable is absent"
        );
    }

    #[test]
    fn meminfo_malformed_names_file_and_line() {
        let scratch = Scratch::new("mi-bad");
        let mfk = scratch.write("min_free_kbytes", "1024\n");
        for (i, (text, line)) in [
            ("MemTotal: 100 kB\nMemFree: lots kB\n", 2),
            ("MemTotal: 100 MB\nMemFree: 1 kB\n", 1),
            ("MemTotal: 100 kB\nno colon here\n", 2),
            ("MemTotal: 100 kB\nMemTotal: 100 kB\n", 2),
            ("MemTotal: 100\n", 1),
            ("MemFree: 1 kB\nMemTotal: 18446744073709551615 kB\n", 2),
        ]
        .iter()
        .enumerate()
        {
            let path = scratch.write(&format!("meminfo-{i}"), text);
            let err = MemInfo::at(&path, &mfk).sample().expect_err(text);
            assert_parse_error(err, &path, *line);
        }
        let path = scratch.write("meminfo-nototal", "MemFree: 1 kB\n");
        assert!(matches!(
            MemInfo::at(&path, &mfk).sample(),
            Err(PressureError::Missing { .. })
        ));
        // min_free_kbytes malformed.
        let good = scratch.write("meminfo-good", "MemTotal: 100 kB\nMemFree: 1 kB\n");
        for (i, (text, line)) in [("12x\n", 1), ("", 1), ("1 2\n", 1), ("5\n7\n", 2)]
            .iter()
            .enumerate()
        {
            let bad = scratch.write(&format!("mfk-{i}"), text);
            let err = MemInfo::at(&good, &bad).sample().expect_err(text);
            assert_parse_error(err, &bad, *line);
        }
        let bad = scratch.write("wsf-bad", "ten\n");
        let err = MemInfo::at(&good, &mfk)
            .watermark_scale_factor(Some(bad.clone()))
            .sample()
            .expect_err("wsf");
        assert_parse_error(err, &bad, 1);
    }
}
