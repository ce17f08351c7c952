//! The AMF fusion heap (`nvwa::fusion::FusionHeap`) through its public API, with
//! small sections in temporary files and scripted pressure samples.
//!
//! What this proves:
//!
//! * scripted samples give exactly the Table 2 levels in both scales
//!   ([`Scale::Paper`], [`Scale::DramFractions`]) at every boundary, and exactly
//!   the integrate decisions: integrated PM = DRAM × the level's multiplier in
//!   whole sections, lowest hidden first, capped by what is hidden;
//! * reclaim happens only with no pressure and only once the saving passes the
//!   threshold ([`PolicyConfig::reclaim_threshold_bp`], the expected counts
//!   computed from [`PolicyConfig::section_saving_bytes`]), highest index first;
//! * nothing is reclaimed under pressure, and a section holding a live block is
//!   never reclaimed (its block stays readable and intact); freed, it is;
//! * allocations come from DRAM while not serving PM and from sections under
//!   pressure; frees route by address; realloc keeps the bytes across
//!   DRAM → PM, PM → PM and PM → DRAM moves;
//! * a proptest of random interleavings of samples, allocations, frees and
//!   reallocs: live bytes intact, no overlap, every PM block inside an integrated
//!   section, no reclaim under pressure, the heap's counts equal to the model's;
//! * a heap given a DRAM limit runs its rounds from the allocation path, serves
//!   from PM past the limit and refuses (null, counted) only when PM is full;
//! * [`FusionMode::Unified`] integrates everything at once and never reclaims,
//!   and what the metadata costs in each mode;
//! * pass-through mappings: the top hidden run, the paper's device name, bytes
//!   kept, never integrated by the heap, hidden again on drop, and the errors;
//! * the [`Daemon`] thread integrates on a critical trace and stops.

use std::alloc::Layout;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvwa::fusion::{
    Daemon, FusionConfig, FusionError, FusionHeap, FusionMode, Level, PolicyConfig, Pressure,
    PressureError, PsiTrigger, RoundReport, Scale, Scripted, SectionSpace,
};
use proptest::prelude::*;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh section space of `sections` × `bytes` in the temporary directory,
/// removed when it drops.
fn space(tag: &str, sections: usize, bytes: u64) -> SectionSpace {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "nvwa-fusion-heap-{}-{tag}-{n:04}",
        std::process::id()
    ));
    SectionSpace::create(&path, sections, bytes)
        .expect("create the section space")
        .remove_on_drop()
}

/// A heap over a fresh space, with the first address of the reservation.
struct Rig {
    heap: FusionHeap,
    base: usize,
    section: usize,
}

impl Rig {
    fn new(tag: &str, sections: usize, bytes: u64, config: FusionConfig) -> Rig {
        let space = space(tag, sections, bytes);
        let base = space.range(0).expect("section 0").start;
        let heap = FusionHeap::new(space, None, config).expect("heap");
        Rig {
            heap,
            base,
            section: bytes as usize,
        }
    }

    /// The section a PM address is in.
    fn section_of(&self, p: *const u8) -> usize {
        assert!(self.heap.owns(p));
        (p.addr() - self.base) / self.section
    }
}

fn config(scale: Scale, reclaim_threshold_bp: u32) -> FusionConfig {
    FusionConfig {
        policy: PolicyConfig {
            scale,
            reclaim_threshold_bp,
            ..PolicyConfig::default()
        },
        ..FusionConfig::default()
    }
}

fn sample(free_bytes: u64, marks: (u64, u64, u64), total: u64) -> Pressure {
    Pressure::scripted(free_bytes, marks, total)
}

/// A sample at `level` on a machine of `total` bytes in the DRAM-fraction scale,
/// with a cgroup's watermarks (1 %, 1.25 %, 1.5 %).
fn at(level: Level, total: u64) -> Pressure {
    Pressure::scripted_at(level, total)
}

/// The smallest number of sections whose saving passes (exceeds) the threshold.
fn sections_to_pass(threshold: u64, saving: u64) -> usize {
    let mut k = 1;
    while k as u64 * saving <= threshold {
        k += 1;
    }
    k
}

/// A live block and the bytes it must hold.
struct Block {
    ptr: *mut u8,
    layout: Layout,
    bytes: Vec<u8>,
}

/// The bytes of block `id`: a function of the id and the offset, so a copy from
/// the wrong place or of the wrong length shows.
fn pattern(id: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|o| (id.wrapping_mul(0x9e37_79b9) as usize ^ o.wrapping_mul(131) ^ (o >> 9)) as u8)
        .collect()
}

impl Block {
    fn alloc(heap: &FusionHeap, id: u64, size: usize, align: usize) -> Option<Block> {
        let layout = Layout::from_size_align(size, align).expect("layout");
        let ptr = heap.alloc(layout);
        if ptr.is_null() {
            return None;
        }
        assert_eq!(ptr.addr() % align, 0, "misaligned block");
        let bytes = pattern(id, size);
        // SAFETY: a live block of `size` bytes just handed out to us alone.
        unsafe { std::slice::from_raw_parts_mut(ptr, size) }.copy_from_slice(&bytes);
        Some(Block { ptr, layout, bytes })
    }

    fn holds(&self) -> bool {
        // SAFETY: the block is live (the test frees it only through `free`) and
        // `layout.size()` bytes long; nothing writes it while we read.
        let got = unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) };
        got == self.bytes.as_slice()
    }

    fn check(&self) {
        assert!(
            self.holds(),
            "block at {:#x} ({} B) lost its bytes",
            self.ptr.addr(),
            self.layout.size()
        );
    }

    /// Reallocates to `new_size`, checks the kept prefix and fills the rest.
    fn realloc(&mut self, heap: &FusionHeap, id: u64, new_size: usize) {
        // SAFETY: a live block of this heap with this layout; new_size is non-zero
        // and small.
        let p = unsafe { heap.realloc(self.ptr, self.layout, new_size) };
        assert!(!p.is_null(), "realloc failed");
        let kept = self.layout.size().min(new_size);
        self.bytes.truncate(kept);
        // SAFETY: the reallocated block is live and at least `new_size` bytes.
        let got = unsafe { std::slice::from_raw_parts_mut(p, new_size) };
        assert_eq!(
            &got[..kept],
            self.bytes.as_slice(),
            "realloc from {:#x} to {:#x} lost bytes",
            self.ptr.addr(),
            p.addr()
        );
        let tail = pattern(id, new_size);
        got[kept..].copy_from_slice(&tail[kept..]);
        self.bytes.extend_from_slice(&tail[kept..]);
        self.ptr = p;
        self.layout = Layout::from_size_align(new_size, self.layout.align()).expect("layout");
    }

    fn free(self, heap: &FusionHeap) {
        self.check();
        // SAFETY: a live block of this heap with this layout, not used again.
        unsafe { heap.dealloc(self.ptr, self.layout) };
    }
}

// -- Table 2 ---------------------------------------------------------------------

/// Table 2 at every boundary of both scales: the level of each scripted sample,
/// and the sections a fresh heap integrates for it (DRAM × the multiplier in
/// whole sections, rounded up, the lowest first).
#[test]
fn table2_levels_and_integration_at_every_boundary() {
    // Watermarks of 256, 320 and 384 B: ×1024 they are 256, 320 and 384 KiB; the
    // DRAM fractions of 2 MiB are 512, 640 and 768 KiB.
    let marks = (256, 320, 384);
    for (total, targets) in [
        (2 * MIB, [0usize, 2, 4, 6, 10]),
        // Not a whole number of sections: targets round up.
        (2 * MIB + 12_345, [0, 3, 5, 7, 11]),
    ] {
        for scale in [Scale::Paper, Scale::DramFractions] {
            let (min, low, high) = match scale {
                Scale::Paper => (256 * KIB, 320 * KIB, 384 * KIB),
                Scale::DramFractions => (total / 4, total * 5 / 16, total * 3 / 8),
            };
            use Level::*;
            let trace = [
                (u64::MAX, NoPressure),
                (total, NoPressure),
                (high + 1, NoPressure),
                (high, Light),
                (high - 1, Light),
                (low + 1, Light),
                (low, Moderate),
                (low - 1, Moderate),
                (min + 1, Moderate),
                (min, Severe),
                (min - 1, Severe),
                (marks.2 + 1, Severe),
                (marks.2, Critical),
                (marks.2 - 1, Critical),
                (marks.1, Critical),
                (marks.0 - 1, Critical),
                (0, Critical),
            ];
            for (free, want) in trace {
                let rig = Rig::new("table2", 12, MIB, config(scale, 300));
                let report = rig.heap.apply(&sample(free, marks, total));
                let n = targets[want as usize];
                assert_eq!(
                    report.decision.level, want,
                    "free {free} of {total} in {scale:?}"
                );
                assert_eq!(report.decision.integrate, n as u64);
                assert_eq!(report.integrated, (0..n).collect::<Vec<_>>());
                assert!(report.reclaimed.is_empty() && report.skipped.is_empty());
                assert_eq!(report.serving_pm, n > 0);
                let s = rig.heap.stats();
                assert_eq!(
                    (s.level, s.integrated, s.hidden, s.integrations),
                    (want, n, 12 - n, n as u64)
                );
                assert_eq!(rig.heap.level(), want);
            }
        }
    }
    // The two scales disagree where they should: 500 KiB free of 2 MiB is severe
    // in DRAM fractions (≤ 512 KiB) and no pressure in the paper's (> 384 KiB).
    let p = sample(500 * KIB, marks, 2 * MIB);
    let paper = Rig::new("scales", 4, MIB, config(Scale::Paper, 300));
    let ours = Rig::new("scales", 4, MIB, config(Scale::DramFractions, 300));
    assert_eq!(paper.heap.apply(&p).decision.level, Level::NoPressure);
    assert_eq!(ours.heap.apply(&p).decision.level, Level::Severe);
}

/// One heap through a trace of rising, then falling, pressure: each round
/// integrates the lowest hidden sections up to the level's target and no more,
/// capped by the hidden ones; lower levels after higher ones integrate and
/// reclaim nothing.
#[test]
fn a_rising_trace_integrates_the_lowest_hidden_up_to_each_target() {
    let total = 2 * MIB;
    let rig = Rig::new("rising", 8, MIB, config(Scale::DramFractions, 300));
    let mut expected_total = 0;
    for (level, target) in [
        (Level::NoPressure, 0),
        (Level::Light, 2),
        (Level::Light, 2),
        (Level::Moderate, 4),
        (Level::Severe, 6),
        (Level::Moderate, 6),
        (Level::Critical, 8), // 10 wanted, 8 in the space
        (Level::Critical, 8),
        (Level::Light, 8),
        (Level::Severe, 8),
    ] {
        let report = rig.heap.apply(&at(level, total));
        assert_eq!(report.decision.level, level);
        assert_eq!(
            report.integrated,
            (expected_total..target).collect::<Vec<_>>(),
            "at {level}"
        );
        assert!(report.reclaimed.is_empty(), "reclaimed under {level}");
        assert!(report.decision.reclaim.is_empty());
        expected_total = target;
        let s = rig.heap.stats();
        assert_eq!((s.integrated, s.hidden), (target, 8 - target));
        assert_eq!(s.paper_metadata_bytes, target as u64 * 256 * 56);
    }
}

/// `round()` samples the heap's own source: a scripted trace gives its levels
/// in order, and an exhausted trace is a failed round, counted, that changes
/// nothing.
#[test]
fn rounds_sample_the_heaps_scripted_source() {
    let total = 2 * MIB;
    let trace = vec![
        at(Level::Light, total),
        at(Level::Severe, total),
        at(Level::NoPressure, total),
    ];
    let space = space("round", 8, MIB);
    let heap = FusionHeap::new(
        space,
        Some(Box::new(Scripted::new(trace))),
        config(Scale::DramFractions, 0),
    )
    .expect("heap");
    let levels: Vec<(Level, Vec<usize>, Vec<usize>)> = (0..3)
        .map(|_| {
            let r = heap.round().expect("round");
            assert_eq!(r.source, "scripted");
            (r.decision.level, r.integrated, r.reclaimed)
        })
        .collect();
    assert_eq!(
        levels,
        [
            (Level::Light, vec![0, 1], vec![]),
            (Level::Severe, vec![2, 3, 4, 5], vec![]),
            // Threshold 0: one free section passes it.
            (Level::NoPressure, vec![], vec![5]),
        ]
    );
    let err = heap.round().expect_err("the trace is used up");
    assert!(
        matches!(
            err,
            FusionError::Pressure(PressureError::Exhausted { samples: 3 })
        ),
        "{err}"
    );
    let s = heap.stats();
    assert_eq!((s.rounds, s.round_errors, s.integrated), (3, 1, 5));

    let no_source =
        FusionHeap::new(space_for_errors(), None, FusionConfig::default()).expect("heap");
    assert!(matches!(no_source.round(), Err(FusionError::NoSource)));
}

fn space_for_errors() -> SectionSpace {
    space("nosource", 2, MIB)
}

// -- Reclaim -----------------------------------------------------------------------

/// After a critical sample, lower levels never reclaim; no-pressure rounds
/// reclaim the fewest fully free sections whose saving passes the threshold,
/// highest first, and nothing when too few are left to pass it.
#[test]
fn reclaim_only_without_pressure_and_past_the_threshold() {
    let saving = PolicyConfig::default().section_saving_bytes(MIB);
    assert_eq!(saving, 256 * 56);
    for (total, bp) in [
        (2 * MIB, 0),
        (2 * MIB, 100),
        (2 * MIB, 300),
        (2 * MIB, 1000),
        // 1 % of 2 867 200 B is exactly two sections' saving: two do not pass it.
        (2 * saving * 100, 100),
    ] {
        let threshold = total * u64::from(bp) / 10_000;
        let k = sections_to_pass(threshold, saving);
        let rig = Rig::new("reclaim", 16, MIB, config(Scale::DramFractions, bp));
        let critical = rig.heap.apply(&at(Level::Critical, total));
        let n = (5 * total).div_ceil(MIB) as usize;
        assert_eq!(critical.integrated, (0..n).collect::<Vec<_>>());
        for level in [
            Level::Light,
            Level::Moderate,
            Level::Severe,
            Level::Critical,
        ] {
            let r = rig.heap.apply(&at(level, total));
            assert!(
                r.reclaimed.is_empty() && r.decision.reclaim.is_empty(),
                "reclaimed under {level}"
            );
            assert!(r.integrated.is_empty());
        }
        let mut integrated: Vec<usize> = (0..n).collect();
        let mut reclaims = 0;
        for round in 0..n + 2 {
            let r = rig.heap.apply(&at(Level::NoPressure, total));
            let want: Vec<usize> = if integrated.len() >= k {
                integrated.iter().rev().take(k).copied().collect()
            } else {
                Vec::new()
            };
            assert_eq!(
                r.reclaimed, want,
                "total {total}, {bp} bp (k = {k}), round {round}"
            );
            assert_eq!(r.decision.reclaim, want);
            assert!(r.skipped.is_empty() && r.integrated.is_empty());
            assert!(!r.serving_pm);
            integrated.truncate(integrated.len() - r.reclaimed.len());
            reclaims += r.reclaimed.len() as u64;
            let s = rig.heap.stats();
            assert_eq!((s.integrated, s.reclaims), (integrated.len(), reclaims));
        }
        let left = if k <= n { n % k } else { n };
        assert_eq!(integrated, (0..left).collect::<Vec<_>>());
        // Pressure again: the lowest hidden come back first.
        let again = rig.heap.apply(&at(Level::Light, total));
        let light = total.div_ceil(MIB) as usize;
        let want: Vec<usize> = (left..light.max(left)).collect();
        assert_eq!(again.integrated, want, "{bp} bp");
    }
}

/// A section holding one live block is never reclaimed — not chosen, its block
/// intact and readable after the round — and is reclaimed once the block is
/// freed.
#[test]
fn a_section_with_a_live_block_is_never_reclaimed() {
    let total = 2 * MIB;
    let rig = Rig::new("live", 12, MIB, config(Scale::DramFractions, 300));
    let k = sections_to_pass(
        total * 300 / 10_000,
        PolicyConfig::default().section_saving_bytes(MIB),
    );
    assert_eq!(k, 5);
    assert_eq!(
        rig.heap.apply(&at(Level::Critical, total)).integrated,
        (0..10).collect::<Vec<_>>()
    );
    // One block of a whole section in each of sections 0..10, lowest first.
    let mut blocks: Vec<Option<Block>> = (0..10u64)
        .map(|i| Some(Block::alloc(&rig.heap, i, MIB as usize, 8).expect("alloc")))
        .collect();
    for (i, b) in blocks.iter().enumerate() {
        let b = b.as_ref().expect("block");
        assert_eq!(rig.section_of(b.ptr), i, "sections fill lowest first");
    }
    // Keep the blocks of sections 5 and 9.
    for i in [0, 1, 2, 3, 4, 6, 7, 8] {
        blocks[i].take().expect("block").free(&rig.heap);
    }
    assert_eq!(rig.heap.stats().pm_live_blocks, 2);
    // Pressure: nothing reclaimed, though eight sections are free.
    for level in [Level::Light, Level::Severe] {
        assert!(rig.heap.apply(&at(level, total)).reclaimed.is_empty());
    }
    let r = rig.heap.apply(&at(Level::NoPressure, total));
    assert_eq!(r.reclaimed, [8, 7, 6, 4, 3], "skip 9 and 5, highest first");
    assert!(r.skipped.is_empty());
    for i in [5, 9] {
        let b = blocks[i].as_ref().expect("block");
        b.check();
        assert_eq!(rig.heap.usable_size(b.ptr), Some(MIB));
    }
    // Three free sections (2, 1, 0) do not pass the threshold.
    assert!(rig
        .heap
        .apply(&at(Level::NoPressure, total))
        .reclaimed
        .is_empty());
    blocks[9].take().expect("block").free(&rig.heap);
    assert!(rig
        .heap
        .apply(&at(Level::NoPressure, total))
        .reclaimed
        .is_empty());
    blocks[5].as_ref().expect("block").check();
    blocks[5].take().expect("block").free(&rig.heap);
    let r = rig.heap.apply(&at(Level::NoPressure, total));
    assert_eq!(r.reclaimed, [9, 5, 2, 1, 0]);
    let s = rig.heap.stats();
    assert_eq!((s.integrated, s.hidden, s.pm_live_blocks), (0, 12, 0));
    assert_eq!(s.reclaims, 10);
}

/// With a threshold of 0 a single free section passes it: the highest free one
/// goes, the busy top one stays.
#[test]
fn the_highest_free_section_goes_first_past_a_busy_one() {
    let total = MIB;
    let rig = Rig::new("busytop", 6, MIB, config(Scale::DramFractions, 0));
    assert_eq!(
        rig.heap.apply(&at(Level::Critical, total)).integrated,
        [0, 1, 2, 3, 4]
    );
    let blocks: Vec<Block> = (0..5u64)
        .map(|i| Block::alloc(&rig.heap, i, MIB as usize, 4096).expect("alloc"))
        .collect();
    let mut blocks = blocks.into_iter();
    let mut kept = Vec::new();
    for (i, b) in blocks.by_ref().enumerate() {
        if i == 4 {
            kept.push(b);
        } else {
            b.free(&rig.heap);
        }
    }
    for want in [3, 2, 1, 0] {
        assert_eq!(
            rig.heap.apply(&at(Level::NoPressure, total)).reclaimed,
            [want]
        );
        kept[0].check();
    }
    assert!(rig
        .heap
        .apply(&at(Level::NoPressure, total))
        .reclaimed
        .is_empty());
    kept.pop().expect("block").free(&rig.heap);
    assert_eq!(rig.heap.apply(&at(Level::NoPressure, total)).reclaimed, [4]);
}

// -- Routing and realloc -----------------------------------------------------------

/// DRAM without pressure, PM under it; frees by address; realloc keeps bytes
/// DRAM → PM, PM → PM (grown past the slot), in place, and PM → DRAM; requests a
/// section cannot serve go to DRAM under pressure, counted as misses.
#[test]
fn allocations_route_by_pressure_and_realloc_keeps_bytes() {
    let total = 2 * MIB;
    let rig = Rig::new("route", 4, MIB, config(Scale::DramFractions, 300));
    let heap = &rig.heap;
    let mut id = 0;
    let mut next = || {
        id += 1;
        id
    };

    let mut a = Block::alloc(heap, next(), 100, 8).expect("alloc");
    assert!(!heap.owns(a.ptr), "no pressure yet: DRAM");
    assert_eq!(heap.usable_size(a.ptr), None);
    heap.apply(&at(Level::Light, total));
    assert!(heap.serving_pm());
    let p = Block::alloc(heap, next(), 64, 8).expect("alloc");
    assert!(heap.owns(p.ptr));
    assert_eq!(rig.section_of(p.ptr), 0);
    // Sections integrated (too few to reclaim) but no pressure: DRAM.
    heap.apply(&at(Level::NoPressure, total));
    assert!(!heap.serving_pm());
    assert_eq!(heap.stats().integrated, 2);
    let d = Block::alloc(heap, next(), 64, 8).expect("alloc");
    assert!(
        !heap.owns(d.ptr),
        "no pressure: DRAM although sections are in"
    );
    heap.apply(&at(Level::Moderate, total));

    // DRAM → PM.
    a.realloc(heap, next(), 3000);
    assert!(
        heap.owns(a.ptr),
        "a DRAM block grown under pressure moves to PM"
    );
    assert_eq!(heap.usable_size(a.ptr), Some(3072));
    // In place within the slot.
    let before = a.ptr;
    a.realloc(heap, next(), 3050);
    assert_eq!(a.ptr, before, "fits its slot: stays");
    // PM → PM, slab to run.
    a.realloc(heap, next(), 200_000);
    assert!(heap.owns(a.ptr) && a.ptr != before);
    assert_eq!(heap.usable_size(a.ptr), Some(256 * KIB));
    // Shrunk below half: moves to a smaller slot.
    let big = a.ptr;
    a.realloc(heap, next(), 1000);
    assert!(heap.owns(a.ptr) && a.ptr != big);
    assert_eq!(heap.usable_size(a.ptr), Some(1024));
    // PM → DRAM once the pressure is gone.
    heap.apply(&at(Level::NoPressure, total));
    a.realloc(heap, next(), 5000);
    assert!(!heap.owns(a.ptr));
    // DRAM → DRAM without pressure (the system's realloc).
    a.realloc(heap, next(), 70_000);
    assert!(!heap.owns(a.ptr));

    // Under pressure, what a section cannot serve comes from DRAM.
    heap.apply(&at(Level::Severe, total));
    let misses = heap.stats().pm_misses;
    let too_big = Block::alloc(heap, next(), (MIB + 1) as usize, 8).expect("alloc");
    let too_aligned = Block::alloc(heap, next(), 64, 8192).expect("alloc");
    assert!(!heap.owns(too_big.ptr) && !heap.owns(too_aligned.ptr));
    assert_eq!(heap.stats().pm_misses, misses + 2);
    let page = Block::alloc(heap, next(), 10, 4096).expect("alloc");
    assert!(heap.owns(page.ptr));
    let mid = Block::alloc(heap, next(), 5000, 64).expect("alloc");
    assert!(heap.owns(mid.ptr));

    let s = heap.stats();
    assert_eq!(s.pm_live_blocks, 3);
    for b in [a, p, d, too_big, too_aligned, page, mid] {
        b.free(heap);
    }
    let s2 = heap.stats();
    assert_eq!((s2.pm_live_blocks, s2.pm_live_bytes), (0, 0));
    assert_eq!(
        s2.dram_live_bytes, 0,
        "every DRAM byte was given back: {s2}"
    );
    assert!(s.pm_allocs >= 6 && s.dram_allocs >= 5, "{s}");
}

// -- Random interleavings ------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Apply(usize),
    Alloc(usize, u32),
    Free(usize),
    Realloc(usize, usize),
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 1usize..128,
        3 => 128usize..5000,
        2 => 5000usize..20_000,
        2 => 60_000usize..300_000,
        1 => 900_000usize..1_100_000,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0usize..5).prop_map(Op::Apply),
        5 => (size(), 0u32..14).prop_map(|(s, a)| Op::Alloc(s, a)),
        3 => any::<usize>().prop_map(Op::Free),
        2 => (any::<usize>(), size()).prop_map(|(i, s)| Op::Realloc(i, s)),
    ]
}

fn cases() -> u32 {
    if std::env::var_os("PMKIT_DEEP").is_some() {
        256
    } else {
        16
    }
}

/// Checks the heap against the model after a step.
fn check_model(rig: &Rig, blocks: &[Block], integrated: &BTreeSet<usize>, level: Level) {
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut pm_blocks = 0;
    for b in blocks {
        b.check();
        spans.push((b.ptr.addr(), b.layout.size()));
        if rig.heap.owns(b.ptr) {
            pm_blocks += 1;
            let s = rig.section_of(b.ptr);
            assert!(
                integrated.contains(&s),
                "a PM block in section {s}, which is not integrated"
            );
            let usable = rig.heap.usable_size(b.ptr).expect("a live PM block");
            assert!(usable >= b.layout.size() as u64);
            let end_in_section = b.ptr.addr() - rig.base - s * rig.section + b.layout.size();
            assert!(end_in_section <= rig.section, "a block past its section");
        } else {
            assert_eq!(rig.heap.usable_size(b.ptr), None);
        }
    }
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "blocks overlap: {w:?}");
    }
    let s = rig.heap.stats();
    assert_eq!(s.pm_live_blocks, pm_blocks);
    assert_eq!(s.integrated, integrated.len());
    assert_eq!(s.level, level);
    assert_eq!(s.sections, s.integrated + s.hidden);
}

fn record_round(
    r: &RoundReport,
    blocks: &[Block],
    rig: &Rig,
    integrated: &mut BTreeSet<usize>,
) -> Result<(), TestCaseError> {
    prop_assert!(r.skipped.is_empty());
    if r.decision.level != Level::NoPressure {
        prop_assert!(
            r.reclaimed.is_empty(),
            "reclaimed under {}",
            r.decision.level
        );
    }
    prop_assert!(r.integrated.is_empty() || r.reclaimed.is_empty());
    prop_assert!(r.reclaimed.windows(2).all(|w| w[0] > w[1]), "highest first");
    for &i in &r.integrated {
        prop_assert!(integrated.insert(i), "section {} integrated twice", i);
    }
    for &i in &r.reclaimed {
        prop_assert!(integrated.remove(&i), "section {} was not integrated", i);
        let holding = blocks
            .iter()
            .filter(|b| rig.heap.owns(b.ptr) && rig.section_of(b.ptr) == i)
            .count();
        prop_assert_eq!(holding, 0, "section {} reclaimed with live blocks", i);
    }
    // Lowest hidden first: nothing below the first section integrated is hidden.
    if let Some(&lo) = r.integrated.first() {
        prop_assert!((0..lo).all(|i| integrated.contains(&i)));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Random interleavings of samples, allocations, frees and reallocs against a
    /// model: see the module docs.
    #[test]
    fn random_interleavings_keep_every_invariant(
        ops in proptest::collection::vec(op(), 1..120),
        bp in prop_oneof![Just(0u32), Just(300u32)],
    ) {
        let total = MIB;
        let rig = Rig::new("prop", 6, MIB, config(Scale::DramFractions, bp));
        let mut blocks: Vec<Block> = Vec::new();
        let mut integrated = BTreeSet::new();
        let mut level = Level::NoPressure;
        let mut id = 0u64;
        for op in ops {
            id += 1;
            match op {
                Op::Apply(l) => {
                    level = Level::ALL[l];
                    let r = rig.heap.apply(&at(level, total));
                    prop_assert_eq!(r.decision.level, level);
                    record_round(&r, &blocks, &rig, &mut integrated)?;
                    prop_assert_eq!(
                        r.serving_pm,
                        level != Level::NoPressure && !integrated.is_empty()
                    );
                }
                Op::Alloc(size, align_log) => {
                    let serving = rig.heap.serving_pm();
                    let misses = rig.heap.stats().pm_misses;
                    let b = Block::alloc(&rig.heap, id, size, 1 << align_log).expect("alloc");
                    if !serving {
                        prop_assert!(!rig.heap.owns(b.ptr), "PM while not serving");
                    } else if !rig.heap.owns(b.ptr) {
                        prop_assert_eq!(rig.heap.stats().pm_misses, misses + 1);
                    }
                    blocks.push(b);
                }
                Op::Free(pick) => {
                    if !blocks.is_empty() {
                        let b = blocks.swap_remove(pick % blocks.len());
                        b.free(&rig.heap);
                    }
                }
                Op::Realloc(pick, size) => {
                    if !blocks.is_empty() {
                        let n = blocks.len();
                        blocks[pick % n].realloc(&rig.heap, id, size);
                    }
                }
            }
            check_model(&rig, &blocks, &integrated, level);
        }
        for b in blocks.drain(..) {
            b.free(&rig.heap);
        }
        let s = rig.heap.stats();
        prop_assert_eq!((s.pm_live_blocks, s.pm_live_bytes, s.dram_live_bytes), (0, 0, 0));
    }
}

// -- A DRAM limit ----------------------------------------------------------------------

/// A heap given a DRAM limit and no source runs its rounds from the allocation
/// path: DRAM until 5/8 of the limit (light pressure), then PM, then DRAM again
/// as PM fills and more is integrated, up to the limit exactly; then null,
/// counted, until a PM block is freed.
#[test]
fn a_dram_limit_moves_allocations_to_pm_then_refuses() {
    let limit = 8 * MIB;
    let rig = Rig::new(
        "limit",
        16,
        MIB,
        FusionConfig {
            dram_limit: Some(limit),
            ..FusionConfig::default()
        },
    );
    let heap = &rig.heap;
    let block = 256 * KIB as usize;
    let mut blocks = Vec::new();
    let (mut dram, mut pm) = (0u64, 0u64);
    let mut first_pm_at = None;
    for id in 0.. {
        let Some(b) = Block::alloc(heap, id, block, 8) else {
            break;
        };
        if heap.owns(b.ptr) {
            pm += block as u64;
            first_pm_at.get_or_insert(dram);
        } else {
            dram += block as u64;
        }
        let s = heap.stats();
        assert_eq!(s.dram_live_bytes, dram as i64);
        assert!(dram <= limit, "DRAM past the limit: {s}");
        blocks.push(b);
        assert!(id < 1000, "never refused");
    }
    let s = heap.stats();
    println!("limit {limit} B: {s}");
    // Light at 5/8 of the limit (free ≤ 3/8): the first PM block comes then.
    assert_eq!(first_pm_at, Some(5 * MIB));
    assert_eq!(
        (dram, pm),
        (limit, 16 * MIB),
        "refused only when both are full"
    );
    assert_eq!(s.refused, 1);
    assert_eq!((s.integrated, s.hidden), (16, 0));
    assert!(s.rounds > 0 && s.integrations == 16, "{s}");
    assert!(s.pm_misses > 0);
    assert!(Block::alloc(heap, 0, 16, 8).is_none());
    assert_eq!(heap.stats().refused, 2);
    // Room in PM again: served from PM past the limit.
    let at_pm = blocks
        .iter()
        .position(|b| heap.owns(b.ptr))
        .expect("a PM block");
    blocks.swap_remove(at_pm).free(heap);
    let again = Block::alloc(heap, 7, block, 8).expect("PM has room");
    assert!(heap.owns(again.ptr));
    blocks.push(again);
    for b in blocks {
        b.free(heap);
    }
    let s = heap.stats();
    assert_eq!((s.dram_live_bytes, s.pm_live_blocks), (0, 0));
    assert_eq!(s.refused, 2);
}

/// A request that would pass the limit is served from PM whenever PM has hidden
/// room: the round it runs must see the DRAM the request would take.
#[test]
fn a_request_past_the_limit_is_served_from_hidden_pm() {
    // From no pressure: 64 KiB live of a 4 MiB limit, then a 4 MiB request.
    let limit = 4 * MIB;
    let rig = Rig::new(
        "pastlimit",
        4,
        4 * MIB,
        FusionConfig {
            dram_limit: Some(limit),
            ..FusionConfig::default()
        },
    );
    let small = Block::alloc(&rig.heap, 1, 64 * KIB as usize, 8).expect("alloc");
    assert!(!rig.heap.owns(small.ptr));
    let big = Block::alloc(&rig.heap, 2, limit as usize, 8);
    let s = rig.heap.stats();
    let big = big.unwrap_or_else(|| panic!("refused with {} hidden sections: {s}", s.hidden));
    assert!(rig.heap.owns(big.ptr));
    big.free(&rig.heap);
    small.free(&rig.heap);

    // From severe pressure with its 3 × DRAM of PM full: the request passes the
    // limit, which is critical pressure (× 5), and hidden sections remain.
    let limit = 8 * MIB;
    let rig = Rig::new(
        "severe",
        48,
        MIB,
        FusionConfig {
            dram_limit: Some(limit),
            check_every: Some(1 << 40),
            ..FusionConfig::default()
        },
    );
    let heap = &rig.heap;
    // 6.5 MiB of DRAM: the first round (at 4 MiB of growth) sees 1.5 MiB free,
    // severe pressure, and integrates 24 sections.
    let base = Block::alloc(heap, 1, (6 * MIB + 512 * KIB) as usize, 8).expect("alloc");
    assert!(!heap.owns(base.ptr));
    let s = heap.stats();
    assert_eq!((s.level, s.integrated), (Level::Severe, 24), "{s}");
    let mut blocks: Vec<Block> = (0..24u64)
        .map(|i| Block::alloc(heap, 10 + i, MIB as usize, 8).expect("alloc"))
        .collect();
    assert!(blocks.iter().all(|b| heap.owns(b.ptr)));
    // PM full: 1 MiB more from DRAM (7.5 MiB, under the limit).
    let more = Block::alloc(heap, 40, MIB as usize, 8).expect("alloc");
    assert!(!heap.owns(more.ptr));
    // 768 KiB more would make 8.25 MiB.
    let past = Block::alloc(heap, 41, 768 * KIB as usize, 8);
    let s = heap.stats();
    let past = past.unwrap_or_else(|| panic!("refused with {} hidden sections: {s}", s.hidden));
    assert!(heap.owns(past.ptr));
    assert_eq!(s.level, Level::Critical);
    assert_eq!(s.integrated, 40, "{s}");
    blocks.extend([base, more, past]);
    for b in blocks {
        b.free(heap);
    }
    assert_eq!(heap.stats().dram_live_bytes, 0);
}

// -- Unified, metadata ----------------------------------------------------------------

/// Unified integrates every section when made and never reclaims; its metadata
/// is a carver per section, more than an adaptive heap with one section in; an
/// adaptive heap with nothing integrated costs a few hundred bytes over its bare
/// structs, and a hidden section a slot entry.
#[test]
fn unified_integrates_everything_and_metadata_follows_integration() {
    let unified_space = space("unified", 4, MIB);
    let unified_space_meta = unified_space.metadata_bytes();
    let unified = FusionHeap::new(
        unified_space,
        None,
        FusionConfig {
            mode: FusionMode::Unified,
            policy: PolicyConfig {
                reclaim_threshold_bp: 0,
                ..PolicyConfig::default()
            },
            ..FusionConfig::default()
        },
    )
    .expect("heap");
    let s = unified.stats();
    assert_eq!((s.integrated, s.hidden, s.integrations), (4, 0, 4));
    for level in Level::ALL {
        let r = unified.apply(&at(level, MIB));
        assert!(r.integrated.is_empty() && r.reclaimed.is_empty());
        assert_eq!(r.serving_pm, level != Level::NoPressure);
    }
    assert_eq!(unified.stats().reclaims, 0);
    assert_eq!(unified.stats().integrated, 4);
    // Under pressure it serves from PM.
    unified.apply(&at(Level::Light, MIB));
    let b = Block::alloc(&unified, 1, 1000, 8).expect("alloc");
    assert!(unified.owns(b.ptr));
    b.free(&unified);

    let adaptive_space = space("adaptiv", 4, MIB);
    let adaptive_space_meta = adaptive_space.metadata_bytes();
    let adaptive = FusionHeap::new(adaptive_space, None, FusionConfig::default()).expect("heap");
    let bare = size_of::<FusionHeap>() + size_of::<SectionSpace>();
    let nothing = adaptive.metadata_bytes();
    let over_bare = nothing - bare;
    println!(
        "metadata: adaptive, nothing in: {nothing} B ({over_bare} B over the bare structs, \
         space {adaptive_space_meta} B)"
    );
    assert!(over_bare < 512, "{over_bare} B over the bare structs");
    // The slots and the backing's description (a path and a phrase).
    let slots = nothing - size_of::<FusionHeap>() - adaptive_space_meta;
    assert!(slots <= 4 * 32 + 160, "{slots} B for 4 hidden slots");

    adaptive.apply(&at(Level::Light, MIB));
    assert_eq!(adaptive.stats().integrated, 1);
    let one = adaptive.metadata_bytes();
    let carver = one - nothing;
    let all = unified.metadata_bytes();
    println!("metadata: adaptive, one in: {one} B; unified, four in: {all} B");
    assert!(
        carver > 16 * 16,
        "a carver describes its 16 chunks: {carver} B"
    );
    assert!(all > one);
    // Unified is the same structs with four carvers.
    assert_eq!(
        all - size_of::<FusionHeap>() - unified_space_meta,
        slots + 4 * carver
    );
    assert_eq!(adaptive.stats().metadata_bytes, one);

    // Hidden sections cost a state byte and a slot each.
    let wide_space = space("wide", 64, MIB);
    let wide_space_meta = wide_space.metadata_bytes();
    let wide = FusionHeap::new(wide_space, None, FusionConfig::default()).expect("heap");
    let wide_slots = wide.metadata_bytes() - size_of::<FusionHeap>() - wide_space_meta;
    let per_slot = (wide_slots - slots) as f64 / 60.0;
    assert!(per_slot <= 32.0, "{per_slot} B per hidden slot");
}

// -- Pass-through ----------------------------------------------------------------------

/// Pass-through mappings take the highest hidden run, are named as the paper's
/// devices, keep their bytes, are never integrated by the heap, and are hidden
/// again when dropped; the errors for no run and for zero bytes.
#[test]
fn pass_through_maps_the_top_hidden_run_outside_the_heap() {
    let rig = Rig::new("pass", 6, MIB, config(Scale::DramFractions, 0));
    let heap = &rig.heap;
    assert!(matches!(
        heap.pass_through(0),
        Err(FusionError::EmptyPassThrough)
    ));
    assert!(matches!(
        heap.pass_through(6 * MIB + 1),
        Err(FusionError::NoHiddenRun {
            bytes,
            sections: 7
        }) if bytes == 6 * MIB + 1
    ));

    let len = 2 * MIB + 1;
    let mut pt = heap.pass_through(len).expect("pass-through");
    let addr = rig.base + 3 * MIB as usize;
    assert_eq!(pt.as_ptr().addr(), addr, "sections 3, 4, 5: the top run");
    assert_eq!(pt.name(), format!("pmem_{len}_{addr:x}"));
    assert_eq!(pt.len(), len as usize);
    assert!(!pt.is_empty());
    assert!(heap.owns(pt.as_ptr()));
    let bytes = pattern(99, len as usize);
    pt.as_mut_slice().copy_from_slice(&bytes);
    assert!(pt.as_slice() == bytes.as_slice());
    let s = heap.stats();
    assert_eq!((s.passed, s.hidden, s.integrated), (3, 3, 0));

    // Critical pressure wants 5 sections; only the 3 hidden ones come in.
    let r = heap.apply(&at(Level::Critical, MIB));
    assert_eq!(r.decision.integrate, 3);
    assert_eq!(r.integrated, [0, 1, 2]);
    let s = heap.stats();
    assert_eq!((s.passed, s.hidden, s.integrated), (3, 0, 3));
    assert!(matches!(
        heap.pass_through(1),
        Err(FusionError::NoHiddenRun {
            bytes: 1,
            sections: 1
        })
    ));
    let blocks: Vec<Block> = (0..4u64)
        .map(|i| Block::alloc(heap, i, MIB as usize, 8).expect("alloc"))
        .collect();
    for b in &blocks[..3] {
        assert!(rig.section_of(b.ptr) < 3);
    }
    assert!(
        !heap.owns(blocks[3].ptr),
        "the passed sections are not the heap's"
    );
    assert!(
        pt.as_slice() == bytes.as_slice(),
        "the heap wrote passed bytes"
    );
    for b in blocks {
        b.free(heap);
    }
    // No pressure with threshold 0: the heap reclaims its own, never the passed.
    for _ in 0..4 {
        let r = heap.apply(&at(Level::NoPressure, MIB));
        assert!(r.reclaimed.iter().all(|&i| i < 3), "{r:?}");
    }
    let s = heap.stats();
    assert_eq!((s.passed, s.hidden, s.integrated), (3, 3, 0));

    // As f64s.
    {
        let floats = pt.as_mut_slice_of::<f64>();
        assert_eq!(floats.len(), (len / 8) as usize);
        for (i, f) in floats.iter_mut().enumerate() {
            *f = i as f64 * 0.5;
        }
    }
    let floats = pt.as_mut_slice_of::<f64>();
    assert!(floats.iter().enumerate().all(|(i, &f)| f == i as f64 * 0.5));
    drop(pt);
    let s = heap.stats();
    assert_eq!((s.passed, s.hidden, s.integrated), (0, 6, 0));

    // Two single-section mappings: the highest hidden first.
    let a = heap.pass_through(1).expect("pass-through");
    let b = heap.pass_through(MIB).expect("pass-through");
    assert_eq!(a.as_ptr().addr(), rig.base + 5 * MIB as usize);
    assert_eq!(b.as_ptr().addr(), rig.base + 4 * MIB as usize);
    assert_eq!(a.name(), format!("pmem_1_{:x}", a.as_ptr().addr()));
    // Three heap sections and two passed ones leave one hidden, section 3.
    heap.apply(&at(Level::Severe, MIB));
    assert_eq!(heap.stats().integrated, 3);
    assert!(matches!(
        heap.pass_through(2 * MIB),
        Err(FusionError::NoHiddenRun { sections: 2, .. })
    ));
    let c = heap.pass_through(MIB).expect("pass-through");
    assert_eq!(c.as_ptr().addr(), rig.base + 3 * MIB as usize);
    drop((a, b, c));
    assert_eq!(heap.stats().passed, 0);
    assert_eq!(heap.stats().hidden, 3);
}

// -- The daemon ----------------------------------------------------------------------

/// The daemon thread runs rounds on its own: with a source that always says
/// critical, sections come in; `stop` joins the thread, after which no round
/// runs.
#[test]
fn the_daemon_integrates_under_critical_pressure_and_stops() {
    let total = MIB;
    let heap = Arc::new(
        FusionHeap::new(
            space("daemon", 8, MIB),
            Some(Box::new(Scripted::cycling(vec![at(
                Level::Critical,
                total,
            )]))),
            FusionConfig::default(),
        )
        .expect("heap"),
    );
    let daemon = Daemon::spawn(Arc::clone(&heap), Duration::from_millis(5)).expect("spawn");
    // A correctness wait, not a timing assertion.
    let deadline = Instant::now() + Duration::from_secs(20);
    while heap.stats().integrated < 5 {
        assert!(Instant::now() < deadline, "the daemon never integrated");
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = heap.stats();
    assert_eq!((s.integrated, s.level), (5, Level::Critical));
    assert!(heap.serving_pm());
    daemon.stop();
    let rounds = heap.stats().rounds;
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(heap.stats().rounds, rounds, "a round after stop");
    assert_eq!(Arc::strong_count(&heap), 1, "the thread let go of the heap");
}

/// A zero-sized request is refused (null), from DRAM and from PM alike: the
/// system allocator must never see one.
#[test]
fn zero_sized_requests_get_null() {
    let rig = Rig::new("zero", 4, MIB, FusionConfig::default());
    let empty = Layout::from_size_align(0, 8).expect("layout");
    assert!(rig.heap.alloc(empty).is_null());
    rig.heap.apply(&at(Level::Critical, 4 * MIB));
    assert!(rig.heap.serving_pm());
    assert!(rig.heap.alloc(empty).is_null());
}

/// A daemon armed with a PSI trigger (where the kernel has PSI) still runs its
/// rounds when no event comes (at the end of each period), integrates under
/// Critical pressure, and stops.
#[test]
fn a_daemon_on_a_psi_trigger_runs_rounds_and_stops() {
    let Ok(trigger) = PsiTrigger::system() else {
        eprintln!("no PSI on this kernel: the trigger daemon is not tested here");
        return;
    };
    let heap = Arc::new(
        FusionHeap::new(
            space("psi", 8, MIB),
            Some(Box::new(Scripted::cycling(vec![at(Level::Critical, MIB)]))),
            FusionConfig::default(),
        )
        .expect("heap"),
    );
    let daemon = Daemon::spawn_with_trigger(Arc::clone(&heap), Duration::from_millis(5), trigger)
        .expect("spawn");
    // A correctness wait, not a timing assertion.
    let deadline = Instant::now() + Duration::from_secs(20);
    while heap.stats().rounds < 3 {
        assert!(Instant::now() < deadline, "the daemon never ran its rounds");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(heap.stats().integrated, 5);
    daemon.stop();
    let rounds = heap.stats().rounds;
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(heap.stats().rounds, rounds, "a round after stop");
    assert_eq!(Arc::strong_count(&heap), 1, "the thread let go of the heap");
}
