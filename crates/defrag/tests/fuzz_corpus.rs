//! The `defrag_open` fuzz target's committed corpus, run as an ordinary test.
//!
//! Every file in `fuzz/corpus/defrag_open/` goes through
//! [`pmem_defrag::fuzzing::open_patched`] (the `defrag_open` target) and
//! [`pmem_defrag::fuzzing::open_patched_resealed`] (`defrag_open_resealed`): a
//! read-only inspection never writes, an open returns a typed error or a working
//! heap with no compaction left. Files named `ok-*` must inspect and open cleanly,
//! files named `err-*` must be refused by the open; other names (inputs a fuzzer
//! run found, `regress-*` for fixed bugs) only have to survive.
//!
//! The named files are made by the ignored test `regenerate_corpus`:
//!
//! ```text
//! cargo test -p pmem-defrag --test fuzz_corpus -- --ignored --exact regenerate_corpus
//! ```

use std::path::{Path, PathBuf};

use pmem_defrag::fuzzing::{base_images, open_patched, open_patched_resealed, Outcome};
use pmem_defrag::layout::{HeapRoot, PlanHeader};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/defrag_open")
}

fn corpus_files() -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir();
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("directory entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .expect("UTF-8 file name")
                .to_owned();
            (name, std::fs::read(&path).expect("readable corpus file"))
        })
        .collect();
    files.sort();
    files
}

fn assert_clean(name: &str, outcome: &Outcome) {
    assert!(
        outcome.inspect_before.is_ok() && outcome.open.is_ok(),
        "{name} should inspect and open: {outcome:?}"
    );
    assert!(
        matches!(&outcome.inspect_after, Some(Ok(s)) if s.compaction_plans == 0),
        "{name} should inspect clean after the open: {outcome:?}"
    );
}

#[test]
fn corpus_opens_without_panics_or_writes() {
    let files = corpus_files();
    assert!(
        files.len() >= 6,
        "expected at least 6 corpus files in {}, found {}",
        corpus_dir().display(),
        files.len()
    );
    for (name, bytes) in &files {
        let outcome = open_patched(bytes);
        let resealed = open_patched_resealed(bytes);
        if name.starts_with("ok-") {
            assert_clean(name, &outcome);
            assert_clean(name, &resealed);
        } else if name.starts_with("err-") {
            assert!(
                outcome.open.is_err(),
                "{name} should be refused: {outcome:?}"
            );
        }
    }
}

/// The base images themselves: valid heaps, two of them carrying a compaction the
/// open must finish (or undo).
#[test]
fn base_images_carry_the_states_they_name() {
    let images = base_images();
    assert_eq!(images.len(), 3);
    let plans: Vec<usize> = (0..3u8)
        .map(|i| {
            let outcome = open_patched(&[i]);
            assert_clean(images[usize::from(i)].name, &outcome);
            outcome
                .inspect_before
                .as_ref()
                .map(|s| s.compaction_plans)
                .unwrap_or(0)
        })
        .collect();
    assert_eq!(plans[0], 0, "the heap at rest has no plan");
    assert!(plans[1] > 0, "the compacting image has plans: {plans:?}");
    assert!(plans[2] > 0, "the planning image has plans: {plans:?}");
}

/// One patch: image, region, offset in it, bytes.
fn patch(image: u8, region: usize, offset: u16, bytes: &[u8]) -> Vec<u8> {
    assert!((1..=16).contains(&bytes.len()));
    let mut v = vec![image, region as u8];
    v.extend_from_slice(&offset.to_le_bytes());
    v.push(bytes.len() as u8 - 1);
    v.extend_from_slice(bytes);
    v
}

fn region_of(image: u8, offset: u64) -> usize {
    base_images()[usize::from(image)]
        .regions
        .iter()
        .position(|&r| r == offset)
        .expect("a region at that offset")
}

/// Writes the named corpus files (run by hand; see the module docs).
#[test]
#[ignore = "writes fuzz/corpus/defrag_open; run by hand to regenerate"]
fn regenerate_corpus() {
    let images = base_images();
    let root = images[0].root;
    let root_region = region_of(0, root);
    let compaction_at = std::mem::offset_of!(HeapRoot, compaction) as u16;
    let table_at = std::mem::offset_of!(HeapRoot, type_table) as u16;
    let plan_region = {
        // The newest plan of the compacting image, as its root names it.
        let img = &images[1];
        let at = img.root as usize + usize::from(compaction_at);
        let block = u64::from_le_bytes(img.bytes[at..at + 8].try_into().expect("8 bytes"));
        region_of(1, block)
    };
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("ok-at-rest", vec![0]),
        ("ok-compacting", vec![1]),
        ("ok-planning", vec![2]),
        // A patch that writes what is there already.
        ("ok-same-magic", patch(0, root_region, 0, b"PMKDFRG1")),
        ("err-pool-magic", patch(0, 0, 0, b"X")),
        ("err-heap-magic", patch(0, root_region, 0, b"XMKDFRG1")),
        (
            "err-type-table-offset",
            patch(0, root_region, table_at, &[0x10, 0, 0, 0, 0, 0, 0, 0]),
        ),
        (
            "err-plan-moves",
            patch(
                1,
                plan_region,
                std::mem::offset_of!(PlanHeader, moves) as u16,
                &[0xff, 0xff, 0, 0, 0, 0, 0, 0],
            ),
        ),
    ];
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("create corpus directory");
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("write corpus file");
    }
}

/// A pending plan (checksum intact) whose move names a destination inside a
/// page header: undoing it at open must refuse the plan, not compute a slot by
/// an underflowing subtraction (it panicked) or free another object's slot.
/// Found by `defrag_open_resealed`.
#[test]
fn a_plan_destination_outside_any_slot_is_refused() {
    let bytes = std::fs::read(corpus_dir().join("regress-plan-destination-in-a-page-header"))
        .expect("the regression input");
    let outcome = open_patched_resealed(&bytes);
    let refused = outcome
        .open
        .as_ref()
        .err()
        .is_some_and(|e| e.contains("not a slot") || e.contains("not object offsets"));
    assert!(refused, "{outcome:?}");
}

/// An interrupted compaction whose source object's header (no checksum covers
/// it) claims a size larger than its slot: redoing the move at open copied that
/// many bytes onto the destination, overlapping the source (a
/// `copy_nonoverlapping` precondition violation) and the objects beside it. The
/// open must refuse the move. Found by `defrag_open`.
#[test]
fn a_move_whose_source_outgrew_its_slot_is_refused() {
    let bytes = std::fs::read(corpus_dir().join("regress-plan-move-onto-itself"))
        .expect("the regression input");
    let outcome = open_patched(&bytes);
    let refused = outcome
        .open
        .as_ref()
        .err()
        .is_some_and(|e| e.contains("fits no slot"));
    assert!(refused, "{outcome:?}");
}
