//! The decision core of AMF's daemon (the paper's kpmemd): how much PM to integrate
//! for a pressure reading (§4.3.1, Table 2) and which integrated sections to give
//! back (§4.3.2). Everything here is pure: a [`Pressure`] and a [`FusionState`] in,
//! a [`Decision`] out.
//!
//! # Table 2: the level of pressure
//!
//! The paper compares the free memory with its watermarks scaled by 1024:
//!
//! | free memory | [`Level`] | PM integrated |
//! |---|---|---|
//! | `> high×1024` | [`Level::NoPressure`] | DRAM × 0 |
//! | `(low×1024, high×1024]` | [`Level::Light`] | DRAM × 1 |
//! | `(min×1024, low×1024]` | [`Level::Moderate`] | DRAM × 2 |
//! | `(high, min×1024]` | [`Level::Severe`] | DRAM × 3 |
//! | `[low, high]` | [`Level::Critical`] | DRAM × 5 |
//! | `< low` (not in the table) | [`Level::Critical`] | DRAM × 5 |
//!
//! The table stops at `low`. Below it kswapd is already swapping, and below `min`
//! allocations reclaim directly or fail: the pressure only grows from the last row,
//! so we keep its answer (× 5) rather than invent a larger one or — worse — answer
//! less for more pressure. The levels are monotone: less free memory never gives a
//! lower level (a property test checks this).
//!
//! # Two scales
//!
//! * [`Scale::Paper`] is the table as printed: the boundaries `min×1024`,
//!   `low×1024`, `high×1024` with the source's watermarks. On the paper's 64 GB
//!   machine (Table 3: 512 GB in four nodes, of which the first 64 GB are DRAM,
//!   §5) with `Page_min` = 16 MB, `Page_low` = 20 MB, `Page_high` = 24 MB (§4.3.1:
//!   4097, 5121, 6145 pages), they fall at 16, 20 and 24 GB. On a smaller machine
//!   they pass the whole of RAM (24 GiB with `min_free_kbytes` = 66 MiB gives
//!   `min×1024` = 66 GiB), so free memory is always at or below `min×1024` and the
//!   level never drops under [`Level::Severe`].
//! * [`Scale::DramFractions`] (ours, not the paper's, and the default) keeps the
//!   shape of the paper's machine instead: the boundaries are the fractions of DRAM
//!   those 16, 20 and 24 GB are of its 64 GB — `min×1024` → total × 1/4,
//!   `low×1024` → total × 5/16, `high×1024` → total × 3/8 (rounded down), with
//!   `total` from the sample. The last two rows still use the real `high` and
//!   `low`. The paper's page counts give 0.2500 (4097 × 4 KiB × 1024 / 64 GiB),
//!   0.3125 and 0.3750, i.e. these fractions to four places; we use the exact
//!   ones. The same 4 : 5 : 6 ratio is Linux 4.5's `min : low : high`.
//!
//! # One round's decision
//!
//! [`decide`] integrates up to the level's target ([`target_bytes`]: DRAM × the
//! multiplier, counted as the *total* of integrated PM, which is how Table 4's
//! configurations read: 64 GB DRAM + 64/128/192/320 GB PM), in whole sections,
//! never more than are hidden. Only when nothing is to be integrated and the level
//! is [`Level::NoPressure`] does it reclaim, and only sections with no live byte,
//! and only when the DRAM the reclaim saves — the page descriptors of the section,
//! 56 B per 4 KiB page in the paper's Linux 4.5 (§2) — passes the threshold (3 %
//! of DRAM, §4.3.2). It then reclaims as few sections as pass the threshold, the
//! highest-indexed first, so the integrated range shrinks from its top as the
//! kernel's `ZONE_NORMAL` does. A round never both integrates and reclaims.

use std::collections::BTreeMap;
use std::fmt;

use super::pressure::Pressure;

/// The paper's factor between a watermark and its Table 2 boundary.
pub const PAPER_FACTOR: u64 = 1024;

/// [`Scale::DramFractions`]: the `min×1024` boundary as a fraction of DRAM
/// (numerator, denominator): 16 GB of 64 GB.
pub const DRAM_FRACTION_MIN: (u64, u64) = (1, 4);
/// [`Scale::DramFractions`]: the `low×1024` boundary, 20 GB of 64 GB.
pub const DRAM_FRACTION_LOW: (u64, u64) = (5, 16);
/// [`Scale::DramFractions`]: the `high×1024` boundary, 24 GB of 64 GB.
pub const DRAM_FRACTION_HIGH: (u64, u64) = (3, 8);

const _: () = assert!(DRAM_FRACTION_MIN.0 * 16 == DRAM_FRACTION_MIN.1 * 4);
const _: () = assert!(DRAM_FRACTION_LOW.0 * 16 == DRAM_FRACTION_LOW.1 * 5);
const _: () = assert!(DRAM_FRACTION_HIGH.0 * 16 == DRAM_FRACTION_HIGH.1 * 6);

/// The size of a sparse-memory section on x86-64 (`SECTION_SIZE_BITS` = 27), the
/// unit AMF integrates and reclaims: 128 MiB.
pub const DEFAULT_SECTION_BYTES: u64 = 128 << 20;

/// The DRAM a page descriptor (`struct page`) takes per page in the paper's
/// kernel (§2: 56 B in Linux 4.5 on x86-64).
pub const PAPER_DESCRIPTOR_BYTES: u64 = 56;

/// The page a descriptor describes: 4 KiB.
pub const PAPER_PAGE_BYTES: u64 = 4096;

/// The paper's reclaim threshold, in basis points (1/10 000) of DRAM: 3 %.
pub const PAPER_RECLAIM_THRESHOLD_BP: u32 = 300;

/// How urgent the pressure is: one row of Table 2. Ordered from none to most
/// urgent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Free memory above `high×1024`: integrate nothing (× 0); reclaim may run.
    NoPressure,
    /// Free memory in `(low×1024, high×1024]`: DRAM × 1.
    Light,
    /// Free memory in `(min×1024, low×1024]`: DRAM × 2.
    Moderate,
    /// Free memory in `(high, min×1024]`: DRAM × 3.
    Severe,
    /// Free memory at or below `high` (the table's `[low, high]`, and below `low`,
    /// which the table leaves out): DRAM × 5.
    Critical,
}

impl Level {
    /// Every level, from none to most urgent.
    pub const ALL: [Level; 5] = [
        Level::NoPressure,
        Level::Light,
        Level::Moderate,
        Level::Severe,
        Level::Critical,
    ];

    /// The multiple of DRAM to have integrated at this level (Table 2's right
    /// column): 0, 1, 2, 3 or 5.
    pub fn multiplier(self) -> u64 {
        match self {
            Level::NoPressure => 0,
            Level::Light => 1,
            Level::Moderate => 2,
            Level::Severe => 3,
            Level::Critical => 5,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Level::NoPressure => "no pressure",
            Level::Light => "light",
            Level::Moderate => "moderate",
            Level::Severe => "severe",
            Level::Critical => "critical",
        };
        write!(f, "{name} (DRAM × {})", self.multiplier())
    }
}

/// Where Table 2's upper three boundaries come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scale {
    /// The paper's: each watermark × 1024.
    Paper,
    /// Ours: the fractions of DRAM the paper's machine implies (1/4, 5/16, 3/8 of
    /// the sample's `total`).
    #[default]
    DramFractions,
}

/// Table 2's upper three boundaries for one sample, in bytes: `min×1024`,
/// `low×1024`, `high×1024` in the paper's scale. The lower two are the sample's
/// own `high` and `low`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Between [`Level::Moderate`] (above) and [`Level::Severe`] (at or below).
    pub min: u64,
    /// Between [`Level::Light`] (above) and [`Level::Moderate`] (at or below).
    pub low: u64,
    /// Between [`Level::NoPressure`] (above) and [`Level::Light`] (at or below).
    pub high: u64,
}

/// `value × num / den`, rounded down, without overflow.
fn fraction(value: u64, (num, den): (u64, u64)) -> u64 {
    if den == 0 {
        return u64::MAX;
    }
    let scaled = u128::from(value) * u128::from(num) / u128::from(den);
    u64::try_from(scaled).unwrap_or(u64::MAX)
}

impl Scale {
    /// The boundaries this scale puts on `p`.
    pub fn thresholds(self, p: &Pressure) -> Thresholds {
        match self {
            Scale::Paper => Thresholds {
                min: p.min.saturating_mul(PAPER_FACTOR),
                low: p.low.saturating_mul(PAPER_FACTOR),
                high: p.high.saturating_mul(PAPER_FACTOR),
            },
            Scale::DramFractions => Thresholds {
                min: fraction(p.total, DRAM_FRACTION_MIN),
                low: fraction(p.total, DRAM_FRACTION_LOW),
                high: fraction(p.total, DRAM_FRACTION_HIGH),
            },
        }
    }
}

/// The Table 2 level of `p` in `scale`.
///
/// Each row is tested from the top (least urgent) down, with the table's open and
/// closed ends; below `high` — including below `low`, where the table is silent —
/// the answer is [`Level::Critical`]. With watermarks out of order (`min > low`,
/// …) the answer is still defined: the first row, from the top, whose lower bound
/// the free memory is above.
pub fn level(p: &Pressure, scale: Scale) -> Level {
    let t = scale.thresholds(p);
    let free = p.free_bytes;
    if free > t.high {
        Level::NoPressure
    } else if free > t.low {
        Level::Light
    } else if free > t.min {
        Level::Moderate
    } else if free > p.high {
        Level::Severe
    } else {
        Level::Critical
    }
}

/// The PM to have integrated at `level` on a machine of `dram_bytes`: DRAM × the
/// level's multiplier (saturating).
pub fn target_bytes(level: Level, dram_bytes: u64) -> u64 {
    dram_bytes.saturating_mul(level.multiplier())
}

/// The daemon's knobs. [`Default`] is the paper's values with
/// [`Scale::DramFractions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyConfig {
    /// Where Table 2's boundaries come from.
    pub scale: Scale,
    /// Reclaim only when the DRAM saved passes this many basis points (1/10 000)
    /// of DRAM: [`PAPER_RECLAIM_THRESHOLD_BP`] (3 %).
    pub reclaim_threshold_bp: u32,
    /// The page a descriptor describes ([`PAPER_PAGE_BYTES`]).
    pub page_bytes: u64,
    /// The DRAM one page descriptor takes ([`PAPER_DESCRIPTOR_BYTES`]).
    pub descriptor_bytes: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            scale: Scale::default(),
            reclaim_threshold_bp: PAPER_RECLAIM_THRESHOLD_BP,
            page_bytes: PAPER_PAGE_BYTES,
            descriptor_bytes: PAPER_DESCRIPTOR_BYTES,
        }
    }
}

impl PolicyConfig {
    /// The saving reclaim must pass on a machine of `dram_bytes`, in bytes.
    pub fn reclaim_threshold_bytes(&self, dram_bytes: u64) -> u64 {
        fraction(dram_bytes, (u64::from(self.reclaim_threshold_bp), 10_000))
    }

    /// The DRAM a section's descriptors take, which reclaiming it saves:
    /// `section_bytes / page_bytes × descriptor_bytes` (1.75 MiB for 128 MiB with
    /// the paper's values). Zero if `page_bytes` is zero.
    pub fn section_saving_bytes(&self, section_bytes: u64) -> u64 {
        section_bytes
            .checked_div(self.page_bytes)
            .map_or(0, |pages| pages.saturating_mul(self.descriptor_bytes))
    }
}

/// What the policy sees of one integrated section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionView {
    /// The section's index (what [`Decision::reclaim`] names).
    pub index: usize,
    /// Bytes of live blocks in it. Only a section with none may be reclaimed.
    pub live_bytes: u64,
    /// Bytes free in it. Informational: the policy decides on `live_bytes` alone.
    pub free_bytes: u64,
}

/// The fusion's state as the policy sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusionState {
    /// The size of a section ([`DEFAULT_SECTION_BYTES`]).
    pub section_bytes: u64,
    /// Installed DRAM: the base of the targets and of the reclaim threshold.
    pub dram_bytes: u64,
    /// The sections integrated now. Indexes are expected to be distinct; a section
    /// listed twice may be reclaimed only if no listing has live bytes.
    pub integrated: Vec<SectionView>,
    /// Sections still hidden, available to integrate.
    pub hidden: u64,
}

impl FusionState {
    /// Nothing integrated, nothing hidden, sections of [`DEFAULT_SECTION_BYTES`].
    pub fn new(dram_bytes: u64) -> Self {
        FusionState {
            section_bytes: DEFAULT_SECTION_BYTES,
            dram_bytes,
            integrated: Vec::new(),
            hidden: 0,
        }
    }

    /// Bytes of PM integrated: sections × section size (saturating).
    pub fn integrated_bytes(&self) -> u64 {
        let sections = u64::try_from(self.integrated.len()).unwrap_or(u64::MAX);
        sections.saturating_mul(self.section_bytes)
    }
}

/// One round's decision. At most one of `integrate` and `reclaim` is non-empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Hidden sections to integrate now.
    pub integrate: u64,
    /// Indexes of integrated sections to reclaim now (highest first).
    pub reclaim: Vec<usize>,
    /// The level the sample was at.
    pub level: Level,
}

impl Decision {
    /// Whether the round does nothing.
    pub fn is_noop(&self) -> bool {
        self.integrate == 0 && self.reclaim.is_empty()
    }
}

/// The daemon's decision for one round: integrate toward the level's target, or
/// (with no pressure and nothing to integrate) reclaim fully free sections if that
/// saves more than the threshold. See the module docs.
///
/// A zero `section_bytes` decides nothing but the level.
pub fn decide(state: &FusionState, p: &Pressure, cfg: &PolicyConfig) -> Decision {
    let level = level(p, cfg.scale);
    let mut decision = Decision {
        integrate: 0,
        reclaim: Vec::new(),
        level,
    };
    if state.section_bytes == 0 {
        return decision;
    }
    let target = target_bytes(level, state.dram_bytes);
    let integrated = state.integrated_bytes();
    if target > integrated {
        // Whole sections, rounding up: the target is reached, not approached.
        let wanted = (target - integrated).div_ceil(state.section_bytes);
        decision.integrate = wanted.min(state.hidden);
        // Short of the target (even with nothing left to integrate) is never the
        // time to reclaim.
        return decision;
    }
    if level == Level::NoPressure {
        decision.reclaim = reclaim_choice(state, cfg);
    }
    decision
}

/// The fewest fully free sections, highest index first, whose saving passes the
/// threshold; none if all of them together do not.
fn reclaim_choice(state: &FusionState, cfg: &PolicyConfig) -> Vec<usize> {
    let saving = cfg.section_saving_bytes(state.section_bytes);
    if saving == 0 {
        return Vec::new();
    }
    // The smallest count whose saving exceeds the threshold: ⌊threshold/saving⌋ + 1.
    let threshold = cfg.reclaim_threshold_bytes(state.dram_bytes);
    let needed = threshold / saving + 1;
    // index → fully free in every listing.
    let mut free: BTreeMap<usize, bool> = BTreeMap::new();
    for s in &state.integrated {
        *free.entry(s.index).or_insert(true) &= s.live_bytes == 0;
    }
    let candidates = free
        .iter()
        .rev()
        .filter(|(_, &all_free)| all_free)
        .map(|(&i, _)| i);
    let chosen: Vec<usize> = candidates
        .take(usize::try_from(needed).unwrap_or(usize::MAX))
        .collect();
    if u64::try_from(chosen.len()).unwrap_or(u64::MAX) < needed {
        return Vec::new();
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::pressure::{PressureSource, Scripted};
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn pressure(free_bytes: u64, min: u64, low: u64, high: u64, total: u64) -> Pressure {
        Pressure::scripted(free_bytes, (min, low, high), total)
    }

    /// Runs `(free, expected)` through a scripted source with the given
    /// watermarks and checks every level, then that the trace is used up.
    fn check_trace(base: &Pressure, scale: Scale, cases: &[(u64, Level)]) {
        let samples = cases
            .iter()
            .map(|&(free_bytes, _)| Pressure {
                free_bytes,
                ..base.clone()
            })
            .collect();
        let mut source = Scripted::new(samples);
        for &(free, want) in cases {
            let p = source.sample().expect("scripted sample");
            assert_eq!(level(&p, scale), want, "free = {free} in {scale:?}");
        }
        assert!(source.sample().is_err());
    }

    /// Every boundary of `t` (and the sample's own `high` and `low`), one below,
    /// at, and one above.
    fn around_every_boundary(p: &Pressure, t: Thresholds) -> Vec<(u64, Level)> {
        use Level::*;
        vec![
            (u64::MAX, NoPressure),
            (t.high + 1, NoPressure),
            (t.high, Light),
            (t.high - 1, Light),
            (t.low + 1, Light),
            (t.low, Moderate),
            (t.low - 1, Moderate),
            (t.min + 1, Moderate),
            (t.min, Severe),
            (t.min - 1, Severe),
            (p.high + 1, Severe),
            (p.high, Critical),
            (p.high - 1, Critical),
            (p.low + 1, Critical),
            (p.low, Critical),
            (p.low - 1, Critical),
            (p.min, Critical),
            (0, Critical),
        ]
    }

    /// The paper's machine: 64 GiB, watermarks of 4097, 5121, 6145 pages.
    fn paper_machine(free: u64) -> Pressure {
        pressure(free, 4097 * 4096, 5121 * 4096, 6145 * 4096, 64 * GIB)
    }

    #[test]
    fn table2_paper_scale_boundaries() {
        let base = paper_machine(0);
        let t = Scale::Paper.thresholds(&base);
        assert_eq!(
            t,
            Thresholds {
                min: 4097 * 4 * MIB,
                low: 5121 * 4 * MIB,
                high: 6145 * 4 * MIB
            }
        );
        check_trace(&base, Scale::Paper, &around_every_boundary(&base, t));
    }

    #[test]
    fn table2_dram_fraction_scale_boundaries() {
        let base = paper_machine(0);
        let t = Scale::DramFractions.thresholds(&base);
        assert_eq!(
            t,
            Thresholds {
                min: 16 * GIB,
                low: 20 * GIB,
                high: 24 * GIB
            }
        );
        check_trace(
            &base,
            Scale::DramFractions,
            &around_every_boundary(&base, t),
        );
        // On the paper's machine both scales agree to within 0.025 %.
        let paper = Scale::Paper.thresholds(&base);
        for (ours, theirs) in [(t.min, paper.min), (t.low, paper.low), (t.high, paper.high)] {
            assert!(
                theirs >= ours && (theirs - ours) * 4000 < ours,
                "{ours} vs {theirs}"
            );
        }
    }

    #[test]
    fn table2_dram_fractions_round_down() {
        use Level::*;
        let base = pressure(0, 10, 12, 15, 1000);
        let t = Scale::DramFractions.thresholds(&base);
        assert_eq!(
            t,
            Thresholds {
                min: 250,
                low: 312,
                high: 375
            }
        );
        let cases = [
            (376, NoPressure),
            (375, Light),
            (313, Light),
            (312, Moderate),
            (251, Moderate),
            (250, Severe),
            (16, Severe),
            (15, Critical),
            (12, Critical),
            (11, Critical),
            (0, Critical),
        ];
        check_trace(&base, Scale::DramFractions, &cases);
    }

    #[test]
    fn paper_scale_on_a_small_machine_never_relaxes() {
        // This machine: 24 GiB, min_free_kbytes 66 MiB → min×1024 = 66 GiB > RAM.
        let min = 67_584 * 1024;
        let total = 24 * GIB;
        let all_free = pressure(total, min, min * 5 / 4, min * 3 / 2, total);
        assert_eq!(level(&all_free, Scale::Paper), Level::Severe);
        assert_eq!(level(&all_free, Scale::DramFractions), Level::NoPressure);
    }

    #[test]
    fn levels_multipliers_and_targets() {
        let m: Vec<u64> = Level::ALL.iter().map(|l| l.multiplier()).collect();
        assert_eq!(m, [0, 1, 2, 3, 5]);
        assert!(Level::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(target_bytes(Level::Critical, 64 * GIB), 320 * GIB);
        assert_eq!(target_bytes(Level::NoPressure, 64 * GIB), 0);
        assert_eq!(target_bytes(Level::Critical, u64::MAX), u64::MAX);
        assert_eq!(Level::Severe.to_string(), "severe (DRAM × 3)");
    }

    // -- decide -----------------------------------------------------------------

    fn sections(live: &[u64]) -> Vec<SectionView> {
        live.iter()
            .enumerate()
            .map(|(index, &live_bytes)| SectionView {
                index,
                live_bytes,
                free_bytes: DEFAULT_SECTION_BYTES - live_bytes,
            })
            .collect()
    }

    fn state(dram_bytes: u64, live: &[u64], hidden: u64) -> FusionState {
        FusionState {
            integrated: sections(live),
            hidden,
            ..FusionState::new(dram_bytes)
        }
    }

    /// A sample at `level` on a machine of `total` bytes, DramFractions scale.
    fn at_level(level_wanted: Level, total: u64) -> Pressure {
        let p = Pressure::scripted_at(level_wanted, total);
        assert_eq!(level(&p, Scale::DramFractions), level_wanted);
        p
    }

    #[test]
    fn integrates_up_to_the_target_capped_by_hidden() {
        let cfg = PolicyConfig::default();
        let dram = 64 * GIB;
        // × 1: 64 GiB = 512 sections; 100 integrated → 412 more.
        let d = decide(
            &state(dram, &[1; 100], 10_000),
            &at_level(Level::Light, dram),
            &cfg,
        );
        assert_eq!(
            (d.integrate, d.reclaim.len(), d.level),
            (412, 0, Level::Light)
        );
        // Only 300 hidden.
        let d = decide(
            &state(dram, &[1; 100], 300),
            &at_level(Level::Light, dram),
            &cfg,
        );
        assert_eq!(d.integrate, 300);
        // × 5: 320 GiB = 2560 sections.
        let d = decide(
            &state(dram, &[], 10_000),
            &at_level(Level::Critical, dram),
            &cfg,
        );
        assert_eq!(d.integrate, 2560);
        // Nothing hidden: nothing to do, and no reclaim either.
        let d = decide(
            &state(dram, &[0; 10], 0),
            &at_level(Level::Critical, dram),
            &cfg,
        );
        assert!(d.is_noop());
        // At or past the target: nothing.
        let d = decide(
            &state(dram, &[0; 512], 10),
            &at_level(Level::Light, dram),
            &cfg,
        );
        assert!(d.is_noop());
        // A target that is not a whole number of sections rounds up.
        let odd = GIB + 1;
        let d = decide(&state(odd, &[], 100), &at_level(Level::Light, odd), &cfg);
        assert_eq!(d.integrate, 9);
    }

    #[test]
    fn no_reclaim_under_any_pressure() {
        let cfg = PolicyConfig::default();
        let dram = GIB;
        // 10 000 free sections, far past every target and the threshold.
        let s = state(dram, &vec![0; 10_000], 0);
        for l in Level::ALL {
            let d = decide(&s, &at_level(l, dram), &cfg);
            assert_eq!(d.integrate, 0);
            assert_eq!(d.reclaim.is_empty(), l != Level::NoPressure, "{l:?}");
        }
    }

    /// 4 GiB of DRAM: 3 % = 128 849 018 B; a 128 MiB section saves 1 835 008 B;
    /// ⌊128 849 018 / 1 835 008⌋ + 1 = 71 sections pass the threshold.
    const FOUR_GIB_NEEDED: usize = 71;

    #[test]
    fn reclaim_only_past_the_threshold_and_only_free_sections() {
        let cfg = PolicyConfig::default();
        let dram = 4 * GIB;
        assert_eq!(cfg.section_saving_bytes(DEFAULT_SECTION_BYTES), 1_835_008);
        assert_eq!(cfg.reclaim_threshold_bytes(dram), 128_849_018);
        let calm = at_level(Level::NoPressure, dram);
        // 70 free sections save 128 450 560 B ≤ threshold: nothing.
        let d = decide(&state(dram, &[0; FOUR_GIB_NEEDED - 1], 0), &calm, &cfg);
        assert!(d.is_noop());
        // 71 pass it: all 71, highest index first.
        let d = decide(&state(dram, &[0; FOUR_GIB_NEEDED], 0), &calm, &cfg);
        assert_eq!(d.reclaim, (0..FOUR_GIB_NEEDED).rev().collect::<Vec<_>>());
        // 200 sections, every third holding one live byte: exactly 71 of the free
        // ones, none live.
        let live: Vec<u64> = (0..200).map(|i| u64::from(i % 3 == 0)).collect();
        let s = state(dram, &live, 0);
        let d = decide(&s, &calm, &cfg);
        assert_eq!(d.reclaim.len(), FOUR_GIB_NEEDED);
        assert!(d.reclaim.iter().all(|&i| s.integrated[i].live_bytes == 0));
        assert!(d.reclaim.windows(2).all(|w| w[0] > w[1]));
        // One live block in each of 100 sections plus 70 free: nothing.
        let mut live = vec![1; 100];
        live.extend([0; FOUR_GIB_NEEDED - 1]);
        assert!(decide(&state(dram, &live, 0), &calm, &cfg).is_noop());
        // A section listed twice, once with live bytes, stays.
        let mut s = state(dram, &[0; FOUR_GIB_NEEDED], 0);
        s.integrated.push(SectionView {
            index: 0,
            live_bytes: 8,
            free_bytes: 0,
        });
        assert!(decide(&s, &calm, &cfg).is_noop());
    }

    #[test]
    fn degenerate_configurations_do_not_panic() {
        let calm = at_level(Level::NoPressure, GIB);
        let mut s = state(GIB, &[0; 4], 4);
        s.section_bytes = 0;
        assert!(decide(&s, &calm, &PolicyConfig::default()).is_noop());
        let cfg = PolicyConfig {
            page_bytes: 0,
            ..PolicyConfig::default()
        };
        assert!(decide(&state(GIB, &[0; 4], 4), &calm, &cfg).is_noop());
        // A zero threshold reclaims one section at a time.
        let cfg = PolicyConfig {
            reclaim_threshold_bp: 0,
            ..PolicyConfig::default()
        };
        assert_eq!(decide(&state(GIB, &[0; 4], 4), &calm, &cfg).reclaim, [3]);
        // No DRAM: no target, no threshold base.
        let d = decide(
            &state(0, &[0; 4], 4),
            &pressure(0, 0, 0, 0, 0),
            &PolicyConfig::default(),
        );
        assert_eq!((d.integrate, d.level), (0, Level::Critical));
    }

    // -- properties -------------------------------------------------------------

    fn arb_scale() -> impl Strategy<Value = Scale> {
        prop_oneof![Just(Scale::Paper), Just(Scale::DramFractions)]
    }

    /// A sample on a machine of `total` bytes with ordered watermarks.
    fn arb_pressure() -> impl Strategy<Value = Pressure> {
        (
            1u64..=(64 * GIB),
            0u64..=64 * MIB,
            0u64..=16 * MIB,
            0u64..=16 * MIB,
            any::<u64>(),
        )
            .prop_map(|(total, min, dl, dh, free)| {
                pressure(free % (total + 1), min, min + dl, min + dl + dh, total)
            })
    }

    fn arb_state() -> impl Strategy<Value = FusionState> {
        (
            prop_oneof![Just(2 * MIB), Just(DEFAULT_SECTION_BYTES), Just(GIB)],
            (256 * MIB)..=(8 * GIB),
            prop::collection::vec(prop_oneof![3 => Just(0u64), 1 => 1u64..=4096], 0..300),
            0u64..3000,
            0usize..1000,
        )
            .prop_map(
                |(section_bytes, dram_bytes, live, hidden, base)| FusionState {
                    section_bytes,
                    dram_bytes,
                    integrated: live
                        .iter()
                        .enumerate()
                        .map(|(i, &live_bytes)| SectionView {
                            index: base + i,
                            live_bytes,
                            free_bytes: section_bytes.saturating_sub(live_bytes),
                        })
                        .collect(),
                    hidden,
                },
            )
    }

    fn arb_config() -> impl Strategy<Value = PolicyConfig> {
        (arb_scale(), 0u32..=500).prop_map(|(scale, reclaim_threshold_bp)| PolicyConfig {
            scale,
            reclaim_threshold_bp,
            ..PolicyConfig::default()
        })
    }

    proptest! {
        #[test]
        fn decisions_keep_the_rules(s in arb_state(), p in arb_pressure(), cfg in arb_config()) {
            let d = decide(&s, &p, &cfg);
            prop_assert_eq!(d.level, level(&p, cfg.scale));
            // Never both in one round; never more than hidden.
            prop_assert!(d.integrate == 0 || d.reclaim.is_empty());
            prop_assert!(d.integrate <= s.hidden);

            // Integration reaches the target with the fewest sections, or takes
            // everything hidden.
            let target = target_bytes(d.level, s.dram_bytes);
            let have = s.integrated_bytes();
            let after = have + d.integrate * s.section_bytes;
            prop_assert!(after >= target || d.integrate == s.hidden);
            if d.integrate > 0 {
                prop_assert!(have + (d.integrate - 1) * s.section_bytes < target);
            }

            // Reclaim: only with no pressure, only free sections, each once, and
            // the fewest that pass the threshold.
            let saving = cfg.section_saving_bytes(s.section_bytes);
            let threshold = cfg.reclaim_threshold_bytes(s.dram_bytes);
            let free_count = s.integrated.iter().filter(|v| v.live_bytes == 0).count() as u64;
            if !d.reclaim.is_empty() {
                prop_assert_eq!(d.level, Level::NoPressure);
                prop_assert!(have >= target);
                let mut seen = std::collections::BTreeSet::new();
                for &i in &d.reclaim {
                    prop_assert!(seen.insert(i));
                    let v = s.integrated.iter().find(|v| v.index == i);
                    prop_assert!(v.is_some_and(|v| v.live_bytes == 0));
                }
                let n = d.reclaim.len() as u64;
                prop_assert!(n * saving > threshold);
                prop_assert!((n - 1) * saving <= threshold);
            } else if d.level == Level::NoPressure && d.integrate == 0 {
                // Nothing reclaimed although calm: the free sections could not pass.
                prop_assert!(free_count * saving <= threshold);
            }
        }

        #[test]
        fn less_free_memory_never_lowers_the_level(
            p in arb_pressure(),
            scale in arb_scale(),
            less in any::<u64>(),
        ) {
            let tighter = Pressure { free_bytes: p.free_bytes - less % (p.free_bytes + 1), ..p.clone() };
            prop_assert!(level(&tighter, scale) >= level(&p, scale));
        }
    }
}
