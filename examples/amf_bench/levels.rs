//! `levels_exact`: Table 2 replayed literally, and a heap's decisions over a
//! scripted trace checked against counts worked out by hand.
//!
//! Two parts, both must hold for `levels_exact`:
//! * **Levels**: the paper's machine (64 GiB of DRAM, `Page_min` / `Page_low` /
//!   `Page_high` = 16 / 20 / 24 MiB, §4.3.1) sampled one byte on each side of
//!   every Table 2 boundary, in the paper's scale (×1024) and in ours (fractions
//!   of DRAM, which fall on the same bytes for this machine); and a 24 GiB
//!   machine in our scale (boundaries at 6, 7.5 and 9 GiB). The expected level of
//!   each sample is written here as a literal, not computed by the policy.
//! * **Decisions**: a [`FusionHeap`] over 80 sections of 4 MiB with 64 MiB of
//!   "DRAM" (16 sections) replays NoPressure, Light, Moderate, Light, Critical,
//!   then NoPressure three times, with one block allocated while under pressure;
//!   after each round the integrated count must be 0, 16, 32, 32, 80, then 44,
//!   8 and 8 — reclaim takes 36 sections a round (the paper's 3 % of 64 MiB over
//!   56 B per 4 KiB page of a 4 MiB section: ⌊2,013,265 / 57,344⌋ + 1 = 36), the
//!   highest first, never the section holding the live block, and none while
//!   there is pressure.

use std::alloc::Layout;
use std::path::Path;

use nvwa::fusion::{
    level, FusionConfig, FusionHeap, Level, PolicyConfig, Pressure, Scale, SectionSpace,
};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// What the check found.
pub struct LevelsRun {
    /// Samples and rounds checked.
    pub checked: usize,
    /// Every disagreement, described.
    pub mismatches: Vec<String>,
}

impl LevelsRun {
    /// Whether everything matched.
    pub fn exact(&self) -> bool {
        self.mismatches.is_empty()
    }
}

fn sample(free_bytes: u64, marks: (u64, u64, u64), total: u64) -> Pressure {
    Pressure::scripted(free_bytes, marks, total)
}

/// Runs both parts; the heap's section file goes in `dir`.
pub fn run(dir: &Path) -> Result<LevelsRun, String> {
    let mut out = LevelsRun {
        checked: 0,
        mismatches: Vec::new(),
    };
    check_levels(&mut out);
    check_decisions(dir, &mut out)?;
    Ok(out)
}

fn check_levels(out: &mut LevelsRun) {
    use Level::*;
    let paper_marks = (16 * MIB, 20 * MIB, 24 * MIB);
    // The paper's machine: boundaries at 24, 20, 16 GiB, then 24 and 20 MiB.
    let paper: [(u64, Level); 12] = [
        (64 * GIB, NoPressure),
        (24 * GIB + 1, NoPressure),
        (24 * GIB, Light),
        (20 * GIB + 1, Light),
        (20 * GIB, Moderate),
        (16 * GIB + 1, Moderate),
        (16 * GIB, Severe),
        (24 * MIB + 1, Severe),
        (24 * MIB, Critical),
        (20 * MIB, Critical),
        (20 * MIB - 1, Critical),
        (0, Critical),
    ];
    for scale in [Scale::Paper, Scale::DramFractions] {
        for &(free, want) in &paper {
            let got = level(&sample(free, paper_marks, 64 * GIB), scale);
            out.checked += 1;
            if got != want {
                out.mismatches.push(format!(
                    "{scale:?}, 64 GiB machine, free {free} B: {got}, Table 2 says {want}"
                ));
            }
        }
    }
    // A 24 GiB machine in our scale: 3/8, 5/16 and 1/4 of DRAM are 9, 7.5 and
    // 6 GiB; its real watermarks (66/82/99 MiB) close the table.
    let small_marks = (66 * MIB, 82 * MIB, 99 * MIB);
    let small: [(u64, Level); 9] = [
        (9 * GIB + 1, NoPressure),
        (9 * GIB, Light),
        (7 * GIB + GIB / 2 + 1, Light),
        (7 * GIB + GIB / 2, Moderate),
        (6 * GIB + 1, Moderate),
        (6 * GIB, Severe),
        (99 * MIB + 1, Severe),
        (99 * MIB, Critical),
        (1, Critical),
    ];
    for &(free, want) in &small {
        let got = level(&sample(free, small_marks, 24 * GIB), Scale::DramFractions);
        out.checked += 1;
        if got != want {
            out.mismatches.push(format!(
                "DramFractions, 24 GiB machine, free {free} B: {got}, expected {want}"
            ));
        }
    }
}

fn check_decisions(dir: &Path, out: &mut LevelsRun) -> Result<(), String> {
    let path = dir.join(format!("amf_bench-levels-{}", std::process::id()));
    let space = SectionSpace::create(&path, 80, 4 * MIB)
        .map_err(|e| e.to_string())?
        .remove_on_drop();
    let config = FusionConfig {
        policy: PolicyConfig::default(),
        ..FusionConfig::default()
    };
    let heap = FusionHeap::new(space, None, config).map_err(|e| e.to_string())?;
    // 64 MiB of DRAM in our scale: boundaries 24, 20 and 16 MiB, watermarks
    // 256 / 320 / 384 KiB.
    let total = 64 * MIB;
    let marks = (256 << 10, 320 << 10, 384 << 10);
    let none = sample(40 * MIB, marks, total);
    let light = sample(22 * MIB, marks, total);
    let moderate = sample(18 * MIB, marks, total);
    let critical = sample(100 << 10, marks, total);
    let steps: [(&str, &Pressure, Level, usize); 8] = [
        ("no pressure", &none, Level::NoPressure, 0),
        ("light", &light, Level::Light, 16),
        ("moderate", &moderate, Level::Moderate, 32),
        ("light again", &light, Level::Light, 32),
        ("critical", &critical, Level::Critical, 80),
        ("no pressure 1", &none, Level::NoPressure, 44),
        ("no pressure 2", &none, Level::NoPressure, 8),
        ("no pressure 3", &none, Level::NoPressure, 8),
    ];
    let layout = Layout::from_size_align(4096, 8).map_err(|e| e.to_string())?;
    let mut block: *mut u8 = std::ptr::null_mut();
    let mut last_integrated = 0usize;
    for (name, p, want_level, want_integrated) in steps {
        let report = heap.apply(p);
        let stats = heap.stats();
        out.checked += 1;
        if report.decision.level != want_level || stats.integrated != want_integrated {
            out.mismatches.push(format!(
                "round {name}: level {} with {} sections integrated, expected {want_level} with {want_integrated}",
                report.decision.level, stats.integrated
            ));
        }
        if want_level != Level::NoPressure && !report.reclaimed.is_empty() {
            out.mismatches.push(format!(
                "round {name}: reclaimed {:?} under pressure",
                report.reclaimed
            ));
        }
        if want_integrated < last_integrated {
            let highest_first = report.reclaimed.windows(2).all(|w| w[0] > w[1]);
            if !highest_first || report.reclaimed.contains(&0) {
                out.mismatches.push(format!(
                    "round {name}: reclaimed {:?} (not highest first, or the live block's section)",
                    report.reclaimed
                ));
            }
        }
        last_integrated = stats.integrated;
        if block.is_null() && report.serving_pm {
            block = heap.alloc(layout);
            if !heap.owns(block) {
                out.mismatches.push(format!(
                    "round {name}: a block under pressure did not come from PM"
                ));
            } else {
                // SAFETY: a fresh 4 KiB block of this heap.
                unsafe { block.write_bytes(0xa5, 4096) };
            }
        }
    }
    if !block.is_null() {
        // SAFETY: the block is live (its section was never reclaimed, checked
        // above) and 4 KiB long.
        let intact = unsafe { std::slice::from_raw_parts(block, 4096) }
            .iter()
            .all(|&b| b == 0xa5);
        out.checked += 1;
        if !intact {
            out.mismatches
                .push("the live block's bytes changed across reclaim rounds".into());
        }
        // SAFETY: allocated above with `layout`, not used again.
        unsafe { heap.dealloc(block, layout) };
    }
    Ok(())
}
