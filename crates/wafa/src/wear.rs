//! Wear statistics over 64-byte units: the metrics of the WAFA paper's study.
//!
//! The input is an allocation count per unit (how many times the unit was handed
//! out); a page's wear is the largest count among its units (a page wears out with
//! its most-written cell), and the *total page writes* is the sum of page wears.
//! The same summary serves every allocator compared in `wafa_wear`, including
//! DRAM allocators whose counts come from the addresses they return.

/// Units per 4 KiB page.
pub const UNITS_PER_PAGE: usize = 64;

/// Summary of per-unit allocation counts.
#[derive(Clone, Debug, PartialEq)]
pub struct WearSummary {
    /// Units considered (every unit of every page touched at least once).
    pub units: u64,
    /// Pages considered.
    pub pages: u64,
    /// Sum over pages of the largest unit count in the page.
    pub total_page_writes: u64,
    /// Mean allocation count per unit.
    pub unit_write_mean: f64,
    /// Standard deviation of the per-unit counts (population).
    pub unit_write_std: f64,
    /// Coefficient of variation: std / mean (0 when the mean is 0).
    pub unit_write_cv: f64,
    /// Largest per-unit count.
    pub unit_write_max: u64,
    /// Total allocations counted (sum of unit counts).
    pub unit_writes: u64,
}

impl WearSummary {
    /// Summarises counts laid out page by page, [`UNITS_PER_PAGE`] per page (a
    /// trailing partial page is treated as a page). Pages with no count at all are
    /// left out, so an allocator is not credited for memory it never touched.
    pub fn from_page_counts(counts: &[u64]) -> WearSummary {
        let mut units = 0u64;
        let mut pages = 0u64;
        let mut total_page_writes = 0u64;
        let mut sum = 0f64;
        let mut sum_sq = 0f64;
        let mut max = 0u64;
        let mut writes = 0u64;
        for page in counts.chunks(UNITS_PER_PAGE) {
            let page_max = page.iter().copied().max().unwrap_or(0);
            if page_max == 0 {
                continue;
            }
            pages += 1;
            total_page_writes += page_max;
            max = max.max(page_max);
            for &c in page {
                units += 1;
                writes += c;
                sum += c as f64;
                sum_sq += (c as f64) * (c as f64);
            }
        }
        let mean = if units > 0 { sum / units as f64 } else { 0.0 };
        let var = if units > 0 {
            (sum_sq / units as f64 - mean * mean).max(0.0)
        } else {
            0.0
        };
        let std = var.sqrt();
        WearSummary {
            units,
            pages,
            total_page_writes,
            unit_write_mean: mean,
            unit_write_std: std,
            unit_write_cv: if mean > 0.0 { std / mean } else { 0.0 },
            unit_write_max: max,
            unit_writes: writes,
        }
    }

    /// Summarises counts keyed by unit number (address / 64): units of touched pages
    /// that never appear count as zero.
    pub fn from_unit_map(counts: &std::collections::HashMap<u64, u64>) -> WearSummary {
        let mut pages: std::collections::BTreeMap<u64, [u64; UNITS_PER_PAGE]> = Default::default();
        for (&unit, &c) in counts {
            let page = pages
                .entry(unit / UNITS_PER_PAGE as u64)
                .or_insert([0; UNITS_PER_PAGE]);
            page[(unit % UNITS_PER_PAGE as u64) as usize] += c;
        }
        let flat: Vec<u64> = pages.values().flat_map(|p| p.iter().copied()).collect();
        WearSummary::from_page_counts(&flat)
    }
}

/// The cumulative distribution of per-unit counts over touched pages: for each
/// distinct count `c`, the fraction of units with a count `<= c`, ascending.
pub fn cdf(counts: &[u64]) -> Vec<(u64, f64)> {
    let mut v: Vec<u64> = counts
        .chunks(UNITS_PER_PAGE)
        .filter(|p| p.iter().any(|&c| c > 0))
        .flat_map(|p| p.iter().copied())
        .collect();
    v.sort_unstable();
    let n = v.len() as f64;
    let mut out: Vec<(u64, f64)> = Vec::new();
    for (i, &c) in v.iter().enumerate() {
        let frac = (i + 1) as f64 / n;
        match out.last_mut() {
            Some(last) if last.0 == c => last.1 = frac,
            _ => out.push((c, frac)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_wear_is_the_max_unit_and_untouched_pages_are_skipped() {
        let mut counts = vec![0u64; 3 * UNITS_PER_PAGE];
        counts[0] = 5;
        counts[1] = 1;
        counts[2 * UNITS_PER_PAGE + 7] = 2;
        let s = WearSummary::from_page_counts(&counts);
        assert_eq!(s.pages, 2);
        assert_eq!(s.units, 128);
        assert_eq!(s.total_page_writes, 7);
        assert_eq!(s.unit_write_max, 5);
        assert_eq!(s.unit_writes, 8);
        assert!((s.unit_write_mean - 8.0 / 128.0).abs() < 1e-12);
        let expect_std = ((25.0 + 1.0 + 4.0) / 128.0 - (8.0f64 / 128.0).powi(2)).sqrt();
        assert!((s.unit_write_std - expect_std).abs() < 1e-12);
        assert!((s.unit_write_cv - expect_std / (8.0 / 128.0)).abs() < 1e-9);
    }

    #[test]
    fn even_wear_has_zero_cv() {
        let s = WearSummary::from_page_counts(&[3u64; 2 * UNITS_PER_PAGE]);
        assert_eq!(s.unit_write_std, 0.0);
        assert_eq!(s.unit_write_cv, 0.0);
        assert_eq!(s.total_page_writes, 6);
    }

    #[test]
    fn unit_map_matches_dense_counts() {
        let mut m = std::collections::HashMap::new();
        m.insert(64 * 10 + 3, 4);
        m.insert(64 * 10 + 4, 1);
        m.insert(64 * 99, 2);
        let s = WearSummary::from_unit_map(&m);
        assert_eq!(s.pages, 2);
        assert_eq!(s.total_page_writes, 6);
        assert_eq!(s.unit_write_max, 4);
    }

    #[test]
    fn cdf_is_ascending_and_ends_at_one() {
        let mut counts = vec![0u64; UNITS_PER_PAGE];
        counts[0] = 3;
        counts[1] = 1;
        let c = cdf(&counts);
        assert_eq!(c.first().map(|x| x.0), Some(0));
        assert_eq!(c.last().map(|x| (x.0, x.1)), Some((3, 1.0)));
        assert!(c.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
    }
}
