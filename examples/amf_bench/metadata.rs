//! Metadata: AMF against Unified at the paper's configurations, scaled.
//!
//! The paper's machine has 64 GB of DRAM and 64, 128, 192 or 320 GB of PM
//! (Table 4: PM = ×1, ×2, ×3, ×5 of DRAM). Here "DRAM" is a limit the heap is
//! given (`--meta-dram`, 512 MiB by default, 128 MiB with `--quick`) and the PM
//! is a sparse file of 128 MiB sections (the x86 section) on tmpfs. For each
//! configuration the same workload runs twice, on a fresh heap each time: once
//! adaptive (AMF: every section hidden at start) and once Unified (every section
//! integrated, and its metadata built, at start). The workload allocates 4 KiB
//! blocks through the heap until it holds 1.25 × DRAM (the blocks are not
//! written: the figure is metadata, not data). With the heap's own DRAM as its
//! pressure, the level reaches Light once 62.5 % of the limit is in use; the
//! rest of the workload is served from PM.
//!
//! Reported for each: the heap's metadata (`FusionHeap::metadata_bytes`: the
//! heap, its section space, a slot per section, and the allocator metadata of
//! each integrated section) at launch and after the workload, the sections
//! integrated, the level reached, and the paper's page-descriptor cost of the
//! integrated sections beside it.

use std::alloc::Layout;
use std::path::Path;

use nvwa::fusion::{FusionConfig, FusionHeap, FusionMode, Level, SectionSpace, SECTION_BYTES};

/// One heap's figures in one configuration.
pub struct MetaFigures {
    /// Metadata before the workload.
    pub launch_bytes: usize,
    /// Metadata after it (blocks still live).
    pub after_bytes: usize,
    /// Sections integrated after it.
    pub integrated: usize,
    /// The level of the last round.
    pub level: Level,
    /// The paper's page descriptors for the integrated sections.
    pub paper_bytes: u64,
}

/// One configuration: PM = `multiple` × DRAM.
pub struct MetaRow {
    /// ×1, ×2, ×3 or ×5.
    pub multiple: u64,
    /// Sections of PM.
    pub sections: usize,
    /// AMF.
    pub amf: MetaFigures,
    /// Unified.
    pub unified: MetaFigures,
}

/// Runs the configurations in `multiples` with `dram` bytes of DRAM, section
/// files in `dir`.
pub fn run(dir: &Path, dram: u64, multiples: &[u64]) -> Result<Vec<MetaRow>, String> {
    multiples
        .iter()
        .map(|&m| {
            let sections =
                usize::try_from((dram * m).div_ceil(SECTION_BYTES)).map_err(|e| e.to_string())?;
            Ok(MetaRow {
                multiple: m,
                sections,
                amf: one(dir, dram, sections, FusionMode::Adaptive)?,
                unified: one(dir, dram, sections, FusionMode::Unified)?,
            })
        })
        .collect()
}

fn one(dir: &Path, dram: u64, sections: usize, mode: FusionMode) -> Result<MetaFigures, String> {
    let path = dir.join(format!("amf_bench-meta-{}-{mode:?}", std::process::id()));
    let space = SectionSpace::create(&path, sections, SECTION_BYTES)
        .map_err(|e| e.to_string())?
        .remove_on_drop();
    let config = FusionConfig {
        mode,
        dram_limit: Some(dram),
        ..FusionConfig::default()
    };
    let heap = FusionHeap::new(space, None, config).map_err(|e| e.to_string())?;
    let launch_bytes = heap.metadata_bytes();
    let layout = Layout::from_size_align(4096, 16).map_err(|e| e.to_string())?;
    let count = dram * 5 / 4 / 4096;
    let mut blocks = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let p = heap.alloc(layout);
        if p.is_null() {
            break;
        }
        blocks.push(p);
    }
    let stats = heap.stats();
    let figures = MetaFigures {
        launch_bytes,
        after_bytes: stats.metadata_bytes,
        integrated: stats.integrated,
        level: stats.level,
        paper_bytes: stats.paper_metadata_bytes,
    };
    let held = blocks.len() as u64;
    for p in blocks {
        // SAFETY: each block came from this heap with `layout` and is freed once.
        unsafe { heap.dealloc(p, layout) };
    }
    if held < count {
        return Err(format!(
            "{mode:?} heap refused a block after {held} of {count} (PM full?)"
        ));
    }
    Ok(figures)
}
