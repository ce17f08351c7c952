//! The `wafa_open` fuzz target's committed corpus, run as an ordinary test.
//!
//! Every file in `fuzz/corpus/wafa_open/` goes through
//! [`wafa::fuzzing::open_patched`] (target `wafa_open`) and
//! [`wafa::fuzzing::open_patched_resealed`] (`wafa_open_resealed`): a read-only
//! inspection never writes, an open returns a typed error or a consistent heap on
//! which allocation and free work without handing a block out twice. Files named
//! `ok-*` must open, `err-*` must be refused. The named files are made by the
//! ignored test `regenerate_corpus`:
//!
//! ```text
//! cargo test -p wafa --test fuzz_corpus -- --ignored --exact regenerate_corpus
//! ```

use std::path::{Path, PathBuf};

use wafa::fuzzing::{base_image, open_patched, open_patched_resealed};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/wafa_open")
}

#[test]
fn corpus_opens_without_panics_or_writes() {
    let dir = corpus_dir();
    let mut ran = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        let bytes = std::fs::read(&path).expect("readable corpus file");
        let outcome = open_patched(&bytes);
        open_patched_resealed(&bytes);
        if name.starts_with("ok-") {
            assert!(
                outcome.inspect.is_ok() && matches!(outcome.open, Ok(n) if n > 0),
                "{name} should open and allocate: {outcome:?}"
            );
        } else if name.starts_with("err-") {
            assert!(
                outcome.open.is_err(),
                "{name} should be refused: {outcome:?}"
            );
        }
        ran += 1;
    }
    assert!(
        ran >= 5,
        "expected at least 5 corpus files in {}",
        dir.display()
    );
}

fn patch(region: usize, offset: u16, bytes: &[u8]) -> Vec<u8> {
    let mut v = vec![region as u8];
    v.extend_from_slice(&offset.to_le_bytes());
    v.push(bytes.len() as u8 - 1);
    v.extend_from_slice(bytes);
    v
}

/// Writes the named corpus files (run by hand; see the module docs).
#[test]
#[ignore = "writes fuzz/corpus/wafa_open; run by hand to regenerate"]
fn regenerate_corpus() {
    assert!(!base_image().live.is_empty());
    // Regions: 0 the pool header, 1 the WAFA region, then each page's metadata
    // unit and start, alternating.
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("ok-image", Vec::new()),
        ("ok-same-magic", patch(1, 0, b"PMKWAFA2")),
        ("err-pool-magic", patch(0, 0, b"X")),
        ("err-region-magic", patch(1, 0, b"X")),
        // A kind-table byte no kind has (table at region + 128).
        ("err-kind-byte", patch(1, 128, &[9])),
        // Page 0's metadata bitmap cleared: a divided page without its metadata bit.
        ("err-meta-bit", patch(2, 0, &[0; 8])),
    ];
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("create corpus directory");
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("write corpus file");
    }
}
