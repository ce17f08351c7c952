//! [`ZoneInfo`]: free pages and the kernel's own watermarks, summed over the
//! populated zones of `/proc/zoneinfo`.

use std::path::{Path, PathBuf};

use super::{
    missing, parse_error, parse_u64, read, read_psi, Pressure, PressureError, PressureSource,
    DEFAULT_PAGE_BYTES, PROC_PSI_MEMORY,
};

/// Free pages and watermarks from `/proc/zoneinfo`, summed over every populated zone
/// of every node.
///
/// The lines read, per zone (the rest — per-node stats, `pagesets`, counters — is
/// skipped):
///
/// ```text
/// Node 0, zone    DMA32
///   pages free     772917
///         min      5481
///         low      6851
///         high     8221
///         managed  772917
/// ```
///
/// Old kernels (4.x, the paper's 4.5) print the same lines without the per-node
/// block; both are read.
#[derive(Clone, Debug)]
pub struct ZoneInfo {
    path: PathBuf,
    psi_path: Option<PathBuf>,
    page_bytes: u64,
}

/// The sums over zones, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ZoneSums {
    free: u64,
    min: u64,
    low: u64,
    high: u64,
    managed: u64,
}

/// One zone as it is read; `None` until its line is seen.
#[derive(Default)]
struct ZoneFields {
    header_line: usize,
    free: Option<u64>,
    min: Option<u64>,
    low: Option<u64>,
    high: Option<u64>,
    managed: Option<u64>,
    in_pagesets: bool,
}

impl ZoneFields {
    fn slot(&mut self, key: &str) -> Option<&mut Option<u64>> {
        match key {
            "free" => Some(&mut self.free),
            "min" => Some(&mut self.min),
            "low" => Some(&mut self.low),
            "high" => Some(&mut self.high),
            "managed" => Some(&mut self.managed),
            _ => None,
        }
    }

    /// Adds a complete zone, in bytes, to the sums; a zone with no managed pages
    /// adds nothing.
    fn add_to(
        self,
        path: &Path,
        header: &str,
        page_bytes: u64,
        sums: &mut ZoneSums,
    ) -> Result<(), PressureError> {
        let line = self.header_line;
        let field = |v: Option<u64>, name: &str| {
            v.ok_or_else(|| {
                parse_error(path, line, format!("zone `{header}` has no `{name}` line"))
            })
        };
        let free = field(self.free, "pages free")?;
        let min = field(self.min, "min")?;
        let low = field(self.low, "low")?;
        let high = field(self.high, "high")?;
        let managed = field(self.managed, "managed")?;
        if managed == 0 {
            return Ok(());
        }
        let add = |sum: u64, pages: u64| {
            pages
                .checked_mul(page_bytes)
                .and_then(|bytes| sum.checked_add(bytes))
                .ok_or_else(|| parse_error(path, line, "zone sizes overflow 64 bits in bytes"))
        };
        *sums = ZoneSums {
            free: add(sums.free, free)?,
            min: add(sums.min, min)?,
            low: add(sums.low, low)?,
            high: add(sums.high, high)?,
            managed: add(sums.managed, managed)?,
        };
        Ok(())
    }
}

fn parse_zoneinfo(path: &Path, text: &str, page_bytes: u64) -> Result<ZoneSums, PressureError> {
    let mut sums = ZoneSums::default();
    let mut zone: Option<(String, ZoneFields)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.starts_with("Node ") {
            if !line.contains(", zone ") {
                return Err(parse_error(path, line_no, "expected `Node N, zone NAME`"));
            }
            if let Some((header, fields)) = zone.take() {
                fields.add_to(path, &header, page_bytes, &mut sums)?;
            }
            let header = line.split_whitespace().collect::<Vec<_>>().join(" ");
            let fields = ZoneFields {
                header_line: line_no,
                ..ZoneFields::default()
            };
            zone = Some((header, fields));
            continue;
        }
        let Some((_, fields)) = zone.as_mut() else {
            if line.is_empty() {
                continue;
            }
            return Err(parse_error(
                path,
                line_no,
                "text before the first `Node N, zone NAME` line",
            ));
        };
        if line == "pagesets" {
            // Per-CPU lists follow, with their own `high:`; no watermark after this.
            fields.in_pagesets = true;
        }
        if fields.in_pagesets {
            continue;
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let (key, value) = match tokens.as_slice() {
            ["pages", "free", value] => ("free", *value),
            [key @ ("min" | "low" | "high" | "managed"), value] => (*key, *value),
            ["pages", "free", ..] | ["min" | "low" | "high" | "managed", ..] => {
                return Err(parse_error(
                    path,
                    line_no,
                    format!("expected `{line}` to be a name and one count"),
                ));
            }
            _ => continue,
        };
        let count = parse_u64(path, line_no, value, key)?;
        let Some(slot) = fields.slot(key) else {
            continue;
        };
        if slot.replace(count).is_some() {
            return Err(parse_error(
                path,
                line_no,
                format!("second `{key}` line in one zone"),
            ));
        }
    }
    let Some((header, fields)) = zone else {
        return Err(missing(path, "`Node N, zone NAME` line"));
    };
    fields.add_to(path, &header, page_bytes, &mut sums)?;
    Ok(sums)
}

impl ZoneInfo {
    /// Reads `/proc/zoneinfo`, with PSI from `/proc/pressure/memory`.
    pub fn new() -> Self {
        ZoneInfo {
            path: PathBuf::from("/proc/zoneinfo"),
            psi_path: Some(PathBuf::from(PROC_PSI_MEMORY)),
            page_bytes: DEFAULT_PAGE_BYTES,
        }
    }

    /// Reads a zoneinfo file at `path` (a test fixture), with no PSI.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        ZoneInfo {
            path: path.into(),
            psi_path: None,
            page_bytes: DEFAULT_PAGE_BYTES,
        }
    }

    /// Reads PSI from `path` (`None`: report no PSI).
    pub fn psi(mut self, path: Option<PathBuf>) -> Self {
        self.psi_path = path;
        self
    }

    /// The size of the pages the file counts (default [`DEFAULT_PAGE_BYTES`]; a
    /// 16 KiB or 64 KiB arm64 kernel needs this).
    pub fn page_bytes(mut self, page_bytes: u64) -> Self {
        self.page_bytes = page_bytes;
        self
    }
}

impl Default for ZoneInfo {
    fn default() -> Self {
        ZoneInfo::new()
    }
}

impl PressureSource for ZoneInfo {
    fn sample(&mut self) -> Result<Pressure, PressureError> {
        let text = read(&self.path)?;
        let sums = parse_zoneinfo(&self.path, &text, self.page_bytes)?;
        Ok(Pressure {
            free_bytes: sums.free,
            min: sums.min,
            low: sums.low,
            high: sums.high,
            total: sums.managed,
            psi_some_avg10: read_psi(self.psi_path.as_deref())?,
            source: "zoneinfo",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::pressure::test_util::{
        assert_parse_error, fixture, Scratch, ZONEINFO_SMALL,
    };

    /// `/proc/zoneinfo` of the machine this slice was written on (Linux 6.18, one
    /// node, DMA/DMA32/Normal populated, Movable and Device empty).
    #[test]
    fn zoneinfo_real_fixture_sums_populated_zones() {
        let path = fixture("zoneinfo-6.18-3zones.txt");
        let p = ZoneInfo::at(&path).sample().expect("sample");
        // DMA + DMA32 + Normal; Movable (min 32, managed 0) and Device are skipped.
        let pages = |n: u64| n * 4096;
        assert_eq!(p.free_bytes, pages(3840 + 772_917 + 496_322));
        assert_eq!(p.min, pages(22 + 4492 + 12_380));
        assert_eq!(p.low, pages(27 + 5615 + 15_475));
        assert_eq!(p.high, pages(32 + 6738 + 18_570));
        assert_eq!(p.total, pages(3840 + 772_917 + 2_129_920));
        assert_eq!(p.psi_some_avg10, None);
        assert_eq!(p.source, "zoneinfo");
    }

    #[test]
    fn zoneinfo_small_two_nodes_old_layout() {
        let scratch = Scratch::new("zi-small");
        let path = scratch.write("zoneinfo", ZONEINFO_SMALL);
        let p = ZoneInfo::at(&path).sample().expect("sample");
        assert_eq!(p.free_bytes, 4100 * 4096);
        assert_eq!((p.min, p.low, p.high), (31 * 4096, 39 * 4096, 48 * 4096));
        assert_eq!(p.total, 10_200 * 4096);
        let p = ZoneInfo::at(&path)
            .page_bytes(65_536)
            .sample()
            .expect("sample");
        assert_eq!(p.free_bytes, 4100 * 65_536);
    }

    #[test]
    fn zoneinfo_malformed_names_file_and_line() {
        let scratch = Scratch::new("zi-bad");
        let cases: &[(&str, usize)] = &[
            // A watermark that is not a number.
            ("Node 0, zone DMA\n  pages free 1\n  min x\n  low 1\n  high 1\n  managed 1\n", 3),
            // A watermark with two values.
            ("Node 0, zone DMA\n  pages free 1\n  min 1 2\n", 3),
            // A count too large for u64.
            ("Node 0, zone DMA\n  pages free 99999999999999999999999\n", 2),
            // A zone without `managed`: the zone's header line is named.
            ("Node 0, zone DMA\n  pages free 1\n  min 1\n  low 1\n  high 1\nNode 0, zone Normal\n", 1),
            // The same key twice in one zone.
            ("Node 0, zone DMA\n  pages free 1\n  min 1\n  min 2\n", 4),
            // Text before the first zone.
            ("garbage\nNode 0, zone DMA\n", 1),
            // A node line that is not a zone header.
            ("Node 0 DMA\n", 1),
            // Zones whose sum overflows in bytes (2^51 pages of 4 KiB each): the
            // second zone's header is named.
            (
                "Node 0, zone A\n pages free 2251799813685248\n min 1\n low 1\n high 1\n managed 1\n\
                 Node 0, zone B\n pages free 2251799813685248\n min 1\n low 1\n high 1\n managed 1\n",
                7,
            ),
            // One zone too large in bytes (2^62 pages).
            ("Node 0, zone A\n pages free 4611686018427387904\n min 1\n low 1\n high 1\n managed 1\n", 1),
        ];
        for (i, (text, line)) in cases.iter().enumerate() {
            let path = scratch.write(&format!("zoneinfo-{i}"), text);
            let err = ZoneInfo::at(&path).sample().expect_err(text);
            assert_parse_error(err, &path, *line);
        }
        // No zone at all.
        let path = scratch.write("zoneinfo-empty", "\n");
        assert!(matches!(
            ZoneInfo::at(&path).sample(),
            Err(PressureError::Missing { .. })
        ));
        // No file.
        let gone = scratch.0.join("nope");
        match ZoneInfo::at(&gone).sample() {
            Err(PressureError::Io { path, .. }) => assert_eq!(path, gone),
            other => panic!("expected Io, got {other:?}"),
        }
    }
}
