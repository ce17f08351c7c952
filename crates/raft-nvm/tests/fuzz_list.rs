//! The `list_recover` fuzz target's committed corpus, run as an ordinary test.
//!
//! Every file in `fuzz/corpus/list_recover/` goes through
//! [`raft_nvm::fuzzing::storage::list_open_patched`] (target `list_recover`) and
//! [`raft_nvm::fuzzing::storage::list_open_resealed`] (`list_recover_resealed`):
//! a read-only inspection never writes, an open returns a typed error or a store
//! whose records read back, a store that inspects cleanly opens to the same log.
//! Files named `ok-*` must open, `err-*` must be refused; other names (inputs a
//! fuzzer run found, `regress-*` for fixed bugs) only have to survive.
//!
//! The named files are made by the ignored test `regenerate_corpus`:
//!
//! ```text
//! cargo test -p raft-nvm --test fuzz_list -- --ignored --exact regenerate_corpus
//! ```

use std::path::{Path, PathBuf};

use raft_nvm::fuzzing::storage::{list_images, list_open_patched, list_open_resealed};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/list_recover")
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

#[test]
fn corpus_recovers_without_panics_or_writes() {
    let files = corpus_files();
    assert!(
        files.len() >= 6,
        "expected at least 6 corpus files in {}, found {}",
        corpus_dir().display(),
        files.len()
    );
    for (name, bytes) in &files {
        let outcome = list_open_patched(bytes);
        let resealed = list_open_resealed(bytes);
        if name.starts_with("ok-") {
            assert!(
                outcome.inspect_before.is_ok() && outcome.open.is_ok(),
                "{name} should open: {outcome:?}"
            );
            assert!(resealed.open.is_ok(), "{name} resealed: {resealed:?}");
        } else if name.starts_with("err-") {
            assert!(
                outcome.open.is_err(),
                "{name} should be refused: {outcome:?}"
            );
        }
    }
}

/// The two base images hold what they were made with: the unsynced one more
/// entries than the closed one, both the hard state set first.
#[test]
fn base_images_open_to_their_logs() {
    let images = list_images();
    let views: Vec<_> = (0..images.len() as u8)
        .map(|i| {
            list_open_patched(&[i])
                .open
                .unwrap_or_else(|e| panic!("{}: {e}", images[usize::from(i)].name))
        })
        .collect();
    assert_eq!(views[0].hard_state.term, 3);
    assert!(views[0].values.len() >= 5, "{:?}", views[0]);
    assert!(
        views[1].last_index > views[0].last_index,
        "unsynced records past the last sync are read on: {views:?}"
    );
}

fn patch(image: u8, region: usize, offset: u16, bytes: &[u8]) -> Vec<u8> {
    assert!((1..=16).contains(&bytes.len()));
    let mut v = vec![image, region as u8];
    v.extend_from_slice(&offset.to_le_bytes());
    v.push(bytes.len() as u8 - 1);
    v.extend_from_slice(bytes);
    v
}

/// Writes the named corpus files (run by hand; see the module docs).
#[test]
#[ignore = "writes fuzz/corpus/list_recover; run by hand to regenerate"]
fn regenerate_corpus() {
    // Regions: 0 the pool header, 1 the control block, 2.. the pages.
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("ok-closed", vec![0]),
        ("ok-unsynced-tail", vec![1]),
        ("ok-same-magic", patch(0, 1, 0, b"RAFTLIST")),
        ("err-pool-magic", patch(0, 0, 0, b"X")),
        ("err-list-magic", patch(0, 1, 0, b"RAFTLISX")),
        // The page size, with its geometry checksum left as it was.
        ("err-page-size", patch(0, 1, 12, &[0, 2, 0, 0])),
        // The hard-state word, its checksum left as it was.
        ("err-hard-state", patch(0, 1, 56, &[9])),
        // A record in the first page, well before the durable point.
        ("err-first-record", patch(0, 2, 48, &[0xff, 0xff])),
    ];
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("create corpus directory");
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("write corpus file");
    }
}

/// A `PutLarge` whose table (checksum intact) names a record that is not one of
/// its fragments: recovery (and so `inspect`) must refuse it, not open a store
/// whose value cannot be read. Found by `list_recover_resealed`.
#[test]
fn a_large_value_naming_another_record_is_refused_at_recovery() {
    let bytes = std::fs::read(corpus_dir().join("regress-large-table-names-another-record"))
        .expect("the regression input");
    let outcome = list_open_resealed(&bytes);
    let says_large = |e: Option<&String>| e.is_some_and(|e| e.contains("large value"));
    assert!(
        says_large(outcome.inspect_before.as_ref().err()),
        "{outcome:?}"
    );
    assert!(says_large(outcome.open.as_ref().err()), "{outcome:?}");
}
