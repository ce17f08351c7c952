//! Time to integrate and to reclaim one 128 MiB section through the heap.
//!
//! Each repetition makes a fresh heap over a space of two sections, then times
//! [`FusionHeap::apply`] with a Light sample whose target is exactly one section
//! (DRAM = one section): the round maps the section and builds its allocator
//! metadata. It then fills the section with 4 KiB blocks, writes every page,
//! frees them all, and times `apply` with a NoPressure sample under a threshold
//! one section passes: the round checks the section is free, drops its metadata,
//! maps the range back to `PROT_NONE` and punches the file's hole (which frees
//! the written pages). The median of the repetitions is reported, for a disk
//! file (the oversubscription runs' backing) and a tmpfs file.

use std::alloc::Layout;
use std::path::Path;
use std::time::Instant;

use nvwa::fusion::{
    FusionConfig, FusionHeap, Level, PolicyConfig, Pressure, SectionSpace, SECTION_BYTES,
};

/// The medians, in milliseconds.
pub struct SectionTimes {
    /// Integrating one section.
    pub integrate_ms: f64,
    /// Reclaiming one (written, then freed) section.
    pub reclaim_ms: f64,
    /// Repetitions.
    pub reps: usize,
    /// The backing, described.
    pub backing: String,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Times `reps` integrations and reclaims of a section in a file in `dir`.
pub fn run(dir: &Path, reps: usize) -> Result<SectionTimes, String> {
    let mut integrate = Vec::with_capacity(reps);
    let mut reclaim = Vec::with_capacity(reps);
    let mut backing = String::new();
    let layout = Layout::from_size_align(4096, 4096).map_err(|e| e.to_string())?;
    for rep in 0..reps {
        let path = dir.join(format!("amf_bench-timing-{}-{rep}", std::process::id()));
        let space = SectionSpace::create(&path, 2, SECTION_BYTES)
            .map_err(|e| e.to_string())?
            .remove_on_drop();
        let config = FusionConfig {
            // One section's descriptors (1.75 MiB) pass 1 % of a 128 MiB "DRAM".
            policy: PolicyConfig {
                reclaim_threshold_bp: 100,
                ..PolicyConfig::default()
            },
            ..FusionConfig::default()
        };
        let heap = FusionHeap::new(space, None, config).map_err(|e| e.to_string())?;
        backing = heap.stats().backing;
        let total = SECTION_BYTES;
        let t = Instant::now();
        let r = heap.apply(&Pressure::scripted_at(Level::Light, total));
        integrate.push(t.elapsed().as_secs_f64() * 1e3);
        if r.integrated.len() != 1 {
            return Err(format!(
                "the Light round integrated {:?}, not one section",
                r.integrated
            ));
        }
        let mut blocks = Vec::new();
        loop {
            let p = heap.alloc(layout);
            if !heap.owns(p) {
                if !p.is_null() {
                    // SAFETY: a DRAM block just allocated with `layout`.
                    unsafe { heap.dealloc(p, layout) };
                }
                break;
            }
            // SAFETY: a fresh 4 KiB block of this heap.
            unsafe { p.write_bytes(1, 4096) };
            blocks.push(p);
        }
        for p in blocks {
            // SAFETY: blocks of this heap with `layout`, freed once.
            unsafe { heap.dealloc(p, layout) };
        }
        let t = Instant::now();
        let r = heap.apply(&Pressure::scripted_at(Level::NoPressure, total));
        reclaim.push(t.elapsed().as_secs_f64() * 1e3);
        if r.reclaimed.len() != 1 {
            return Err(format!(
                "the idle round reclaimed {:?}, not one section",
                r.reclaimed
            ));
        }
    }
    Ok(SectionTimes {
        integrate_ms: median(&mut integrate),
        reclaim_ms: median(&mut reclaim),
        reps,
        backing,
    })
}
