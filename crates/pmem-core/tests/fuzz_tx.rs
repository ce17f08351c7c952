//! The committed corpora of the `tx_recover` and `page_alloc_intents` fuzz targets,
//! run as ordinary tests through the targets' own bodies
//! ([`pmem_core::fuzzing::tx_recover::recover_patched`],
//! [`pmem_core::fuzzing::page_alloc::open_patched`]).
//!
//! Files named `ok-*` must be inspected and recovered, files named `err-*` must be
//! refused by both; others (inputs a fuzzer run kept, `regress-*` inputs of fixed
//! bugs) only have to keep the targets' promises. The named seeds are made by the
//! ignored test `regenerate_corpus`:
//!
//! ```text
//! cargo test -p pmem-core --test fuzz_tx -- --ignored --exact regenerate_corpus
//! ```

use std::path::{Path, PathBuf};

use pmem_core::fuzzing::{page_alloc, tx_recover};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

fn corpus_files(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
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

#[test]
fn tx_recover_corpus_keeps_its_promises() {
    let files = corpus_files("tx_recover");
    assert!(files.len() >= 6, "tx_recover corpus: {} files", files.len());
    for (name, bytes) in &files {
        let outcome = tx_recover::recover_patched(bytes);
        if name.starts_with("ok-") {
            assert!(
                outcome.inspect.is_ok() && outcome.open.is_ok(),
                "{name} should recover: {outcome:?}"
            );
        } else if name.starts_with("err-") {
            assert!(
                outcome.inspect.is_err() && outcome.open.is_err(),
                "{name} should be refused: {outcome:?}"
            );
        }
    }
}

#[test]
fn page_alloc_intents_corpus_keeps_its_promises() {
    let files = corpus_files("page_alloc_intents");
    assert!(
        files.len() >= 4,
        "page_alloc_intents corpus: {} files",
        files.len()
    );
    for (name, bytes) in &files {
        let outcome = page_alloc::open_patched(bytes);
        if name.starts_with("ok-") {
            assert!(
                outcome.inspect.is_ok() && outcome.open.is_ok(),
                "{name} should open: {outcome:?}"
            );
        } else if name.starts_with("err-") {
            assert!(
                outcome.open.is_err(),
                "{name} should be refused: {outcome:?}"
            );
        }
    }
}

/// A patch of the tx_recover input format: offset in the log, bytes.
fn tx_patch(off: u16, bytes: &[u8]) -> Vec<u8> {
    let mut v = off.to_le_bytes().to_vec();
    v.push(bytes.len() as u8);
    v.extend_from_slice(bytes);
    v
}

/// A patch of the page_alloc_intents input format (offset from the intent line).
fn page_patch(off: u8, bytes: &[u8]) -> Vec<u8> {
    let mut v = vec![off, bytes.len() as u8];
    v.extend_from_slice(bytes);
    v
}

fn word(image: &[u8], off: u64) -> u64 {
    let at = off as usize;
    u64::from_le_bytes(image[at..at + 8].try_into().expect("8 bytes"))
}

/// The tx_recover seeds: the template as is and resealed, lane 0 recovered as an
/// undo and as a redo transaction, the ring's truncation moved, and damaged
/// headers and lane states.
fn tx_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let (image, region) = tx_recover::template();
    let lane0 = word(image, region + 64);
    let tid = lane0 >> 3;
    let with = |flags: u8, patches: &[Vec<u8>]| {
        let mut v = vec![flags];
        for p in patches {
            v.extend_from_slice(p);
        }
        v
    };
    let state = |w: u64| tx_patch(64, &w.to_le_bytes());
    // The ring's header follows the lanes (its first word: the truncation point).
    let ring = (tx_recover::log_bytes() - 64 - tx_recover::GEOMETRY.lazy_ring_bytes) as u16;
    vec![
        ("ok-template", with(0, &[])),
        ("ok-template-resealed", with(1, &[])),
        ("ok-lane0-active-undo", with(1, &[state(tid << 3 | 1)])),
        ("ok-lane0-active-redo", with(1, &[state(tid << 3 | 4 | 1)])),
        (
            "ok-lane0-committed-redo",
            with(1, &[state(tid << 3 | 4 | 2)]),
        ),
        (
            "ok-ring-truncated",
            with(1, &[tx_patch(ring, &(1u64 << 40).to_le_bytes())]),
        ),
        (
            "err-ring-truncated-max",
            with(1, &[tx_patch(ring, &u64::MAX.to_le_bytes())]),
        ),
        ("err-log-magic", with(0, &[tx_patch(0, b"X")])),
        ("err-log-version", with(0, &[tx_patch(7, b"1")])),
        ("err-log-checksum", with(0, &[tx_patch(20, &[0xff])])),
        ("err-lane0-state", with(1, &[state(3)])),
    ]
}

/// The page_alloc_intents seeds: the template, intents of each kind (resealed),
/// a torn one, a garbled bitmap word, and intents naming impossible slots or
/// blocks.
fn page_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let (image, region, root) = page_alloc::template();
    let count = word(image, region + 16);
    let first = word(image, region + 40);
    let last_page = first + (count - 1) * page_alloc::PAGE_BYTES;
    let intent = |kind: u64, slot: u64, block: u64, pages: u64, expected: u64| {
        let mut b = Vec::new();
        for w in [kind, slot, block, pages, expected] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        page_patch(0, &b)
    };
    let with = |flags: u8, patch: Vec<u8>| {
        let mut v = vec![flags];
        v.extend_from_slice(&patch);
        v
    };
    let slot3 = root + 24;
    let slot0 = word(image, *root);
    vec![
        ("ok-template", vec![0]),
        (
            "ok-intent-publish",
            with(1, intent(1, slot3, last_page, 1, 0)),
        ),
        (
            "ok-intent-publish-if",
            with(1, intent(2, slot3, last_page, 1, 0)),
        ),
        (
            "ok-intent-free-unpublish",
            with(1, intent(3, *root, slot0, 2, 0)),
        ),
        ("ok-intent-torn", with(0, intent(1, slot3, last_page, 1, 0))),
        ("bitmap-garbled", with(0, page_patch(64, &[0xff; 8]))),
        (
            "err-intent-slot-in-header",
            with(1, intent(1, 8, last_page, 1, 0)),
        ),
        (
            "err-intent-block-outside",
            with(1, intent(1, slot3, first + count * 64, 1, 0)),
        ),
    ]
}

/// A lazy ring whose truncation point is the last sequence number: recovery must
/// refuse it (it computed the next sequence number by an overflowing add, which
/// wrapped to 0 in release builds, so later lazy commits would not be replayed).
/// Found by the `tx_recover` fuzz target; `regress-ring-truncated-max`.
#[test]
fn lazy_ring_truncated_at_the_last_sequence_number_is_corrupt() {
    let input = std::fs::read(corpus_dir("tx_recover").join("regress-ring-truncated-max"))
        .expect("the regression input");
    let image = tx_recover::patched_image(&input);
    let pool = pmem_core::Pool::from_image(&image).expect("pool of the image");
    let r = pmem_core::tx::TxHeap::open(pool);
    assert!(
        matches!(r, Err(pmem_core::tx::TxError::Corrupt(_))),
        "{:?}",
        r.map(|(_, report)| report)
    );
    let outcome = tx_recover::recover_patched(&input);
    assert!(
        outcome.inspect.is_err() && outcome.open.is_err(),
        "{outcome:?}"
    );
}

/// A checksummed log header recording zero lanes: opening must refuse it (it
/// opened, and the first transaction divided by zero choosing a lane). Found by
/// the `tx_recover` fuzz target; `regress-zero-lanes`.
#[test]
fn tx_log_with_zero_lanes_is_corrupt() {
    let input = std::fs::read(corpus_dir("tx_recover").join("regress-zero-lanes"))
        .expect("the regression input");
    let image = tx_recover::patched_image(&input);
    let pool = pmem_core::Pool::from_image(&image).expect("pool of the image");
    let r = pmem_core::tx::TxHeap::open(pool);
    assert!(
        matches!(r, Err(pmem_core::tx::TxError::Corrupt(_))),
        "{:?}",
        r.map(|(_, report)| report)
    );
}

/// A floor word (lane 0's second word, not checksummed) near `u64::MAX`: opening
/// must refuse it (the next TIDs were computed by overflowing sums, which wrapped
/// in release builds, so TIDs of earlier transactions could be used again).
/// Found by the `tx_recover` fuzz target; `regress-tid-floor-overflow`.
#[test]
fn tx_log_with_an_exhausted_tid_floor_is_corrupt() {
    let input = std::fs::read(corpus_dir("tx_recover").join("regress-tid-floor-overflow"))
        .expect("the regression input");
    let image = tx_recover::patched_image(&input);
    let pool = pmem_core::Pool::from_image(&image).expect("pool of the image");
    let r = pmem_core::tx::TxHeap::open(pool);
    assert!(
        matches!(r, Err(pmem_core::tx::TxError::Corrupt(_))),
        "{:?}",
        r.map(|(_, report)| report)
    );
}

/// A checksummed (resealed) record whose target lies in the log itself:
/// recovery must refuse it (it copied the record's data over the log header, and
/// the next open found the log corrupt). Found by the `tx_recover` fuzz target;
/// `regress-record-into-log`.
#[test]
fn tx_record_targeting_the_log_is_corrupt() {
    let input = std::fs::read(corpus_dir("tx_recover").join("regress-record-into-log"))
        .expect("the regression input");
    let outcome = tx_recover::recover_patched(&input);
    assert!(outcome.open.is_err(), "{outcome:?}");
    let image = tx_recover::patched_image(&input);
    let pool = pmem_core::Pool::from_image(&image).expect("pool of the image");
    let r = pmem_core::tx::TxHeap::open(pool);
    assert!(
        matches!(r, Err(pmem_core::tx::TxError::Corrupt(_))),
        "{:?}",
        r.map(|(_, report)| report)
    );
}

/// A checksummed (resealed) record whose target is the page allocator's header:
/// recovery must refuse it (it overwrote the header after the allocator had been
/// opened, and the next open found no allocator). Found by the `tx_recover` fuzz
/// target; `regress-record-into-allocator`.
#[test]
fn tx_record_targeting_the_allocator_metadata_is_corrupt() {
    let input = std::fs::read(corpus_dir("tx_recover").join("regress-record-into-allocator"))
        .expect("the regression input");
    let image = tx_recover::patched_image(&input);
    let pool = pmem_core::Pool::from_image(&image).expect("pool of the image");
    let r = pmem_core::tx::TxHeap::open(pool);
    assert!(
        matches!(r, Err(pmem_core::tx::TxError::Corrupt(_))),
        "{:?}",
        r.map(|(_, report)| report)
    );
    tx_recover::recover_patched(&input);
}

/// A page allocator with a pending intent, opened on a read-only pool: recovery
/// must fail with `ReadOnly` (it stored to the publication slot through a
/// reference into the read-only mapping: a segfault). Found by the
/// `page_alloc_intents` fuzz target; `regress-read-only-intent`.
#[test]
fn page_allocator_with_a_pending_intent_refuses_a_read_only_pool() {
    let input = std::fs::read(corpus_dir("page_alloc_intents").join("regress-read-only-intent"))
        .expect("the regression input");
    let image = page_alloc::patched_image(&input);
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("pool");
    std::fs::write(&path, &image).expect("write the pool");
    let opts = pmem_core::OpenOptions::new().read_only(true);
    let pool = pmem_core::Pool::open_with(&path, &opts).expect("read-only open");
    let region = page_alloc::template().1;
    // SAFETY: nothing else uses the pool.
    let r = unsafe { pmem_core::PageAllocator::open(std::sync::Arc::new(pool), region) };
    assert!(
        matches!(
            r,
            Err(pmem_core::AllocError::Pool(pmem_core::PoolError::ReadOnly))
        ),
        "{:?}",
        r.map(|_| ())
    );
    assert_eq!(
        std::fs::read(&path).expect("read back"),
        image,
        "the file changed"
    );
}

/// A bitmap with orphan pages (allocated, no start bit, after a free page: what a
/// torn plain alloc leaves): a block allocated right before an orphan absorbed
/// it, so freeing the new block failed ("not exactly one block"). Opening now
/// gives orphans their start bits. Found by the `page_alloc_intents` fuzz target;
/// `regress-orphan-merge`.
#[test]
fn page_allocator_keeps_an_orphan_apart_from_a_new_neighbour() {
    let input = std::fs::read(corpus_dir("page_alloc_intents").join("regress-orphan-merge"))
        .expect("the regression input");
    let outcome = page_alloc::open_patched(&input);
    assert!(outcome.open.is_ok(), "{outcome:?}");
}

/// Writes the named seeds (run by hand; see the module docs).
#[test]
#[ignore = "writes fuzz/corpus/{tx_recover,page_alloc_intents}; run by hand"]
fn regenerate_corpus() {
    for (target, seeds) in [
        ("tx_recover", tx_seeds()),
        ("page_alloc_intents", page_seeds()),
    ] {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).expect("create corpus directory");
        for (name, bytes) in seeds {
            std::fs::write(dir.join(name), bytes).expect("write corpus file");
        }
    }
}
