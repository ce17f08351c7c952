//! The `wal_read` fuzz target's committed corpus, run as an ordinary test.
//!
//! Every file in `fuzz/corpus/wal_read/` goes through
//! [`raft_nvm::fuzzing::storage::wal::wal_read`]: a damaged copy of a WAL store's
//! directory opens to a prefix of its log holding everything acknowledged, or is
//! refused with a typed error. Files named `ok-*` must open, `err-*` must be
//! refused. The named files are made by the ignored test `regenerate_corpus`:
//!
//! ```text
//! cargo test -p raft-nvm --test fuzz_wal -- --ignored --exact regenerate_corpus
//! ```

use std::path::{Path, PathBuf};

use raft_nvm::fuzzing::storage::wal::{wal_bases, wal_read};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/wal_read")
}

#[test]
fn corpus_reads_without_losing_acknowledged_entries() {
    let dir = corpus_dir();
    let mut ran = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        let outcome = wal_read(&std::fs::read(&path).expect("readable corpus file"));
        if name.starts_with("ok-") {
            assert!(outcome.open.is_ok(), "{name} should open: {outcome:?}");
        } else if name.starts_with("err-") {
            assert!(
                outcome.open.is_err(),
                "{name} should be refused: {outcome:?}"
            );
        }
        ran += 1;
    }
    assert!(
        ran >= 6,
        "expected at least 6 corpus files in {}",
        dir.display()
    );
}

/// A torn tail of the store stopped without a synced end is cut: the entries
/// before it stay; the same cut under a clean stop's synced end is refused.
#[test]
fn torn_tails_are_cut_only_past_the_synced_end() {
    let bases = wal_bases();
    assert!(bases[0].clean && !bases[1].clean);
    let cut_one = |base: u8| wal_read(&[base, 16, 0]);
    let clean = cut_one(0);
    assert!(clean.open.is_err(), "{clean:?}");
    let torn = cut_one(1);
    let (last, _) = torn.open.expect("a torn tail is cut");
    let full = bases[1].entries.last().expect("entries").index;
    assert_eq!(last, full - 1, "only the torn record is dropped");
}

/// Writes the named corpus files (run by hand; see the module docs).
#[test]
#[ignore = "writes fuzz/corpus/wal_read; run by hand to regenerate"]
fn regenerate_corpus() {
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("ok-clean-stop", vec![0, 0, 0]),
        ("ok-after-snapshot", vec![1, 0, 0]),
        ("ok-torn-tail", vec![1, 5, 0]),
        ("err-cut-below-synced-end", vec![0, 5, 0]),
        ("err-log-magic", vec![0, 0, 0, 0, 0, 0, 0, b'X']),
        // A record in the middle of the log, with valid records after it.
        ("err-middle-record", vec![1, 0, 0, 0, 24, 0, 0, 0xff]),
        ("err-snapshot-magic", vec![1, 0, 0, 1, 0, 0, 0, b'X']),
        ("err-hard-state", vec![0, 0, 0, 3, 9, 0, 0, 0x77]),
    ];
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("create corpus directory");
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("write corpus file");
    }
}
