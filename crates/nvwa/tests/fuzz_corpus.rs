//! The committed corpus of the `nvwa_open` fuzz target, run as an ordinary test
//! through the target's own body ([`nvwa::fuzzing::open_patched`]).
//!
//! Files named `ok-*` must be inspected and opened, files named `err-*` must be
//! refused by both; others (inputs a fuzzer run kept, `regress-*` inputs of fixed
//! bugs) only have to keep the target's promises. The named seeds are made by the
//! ignored test `regenerate_corpus`:
//!
//! ```text
//! cargo test -p nvwa --test fuzz_corpus -- --ignored --exact regenerate_corpus
//! ```

use std::path::{Path, PathBuf};

use nvwa::fuzzing::{open_patched, template};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/nvwa_open")
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
fn nvwa_open_corpus_keeps_its_promises() {
    let files = corpus_files();
    assert!(files.len() >= 5, "nvwa_open corpus: {} files", files.len());
    for (name, bytes) in &files {
        let outcome = open_patched(bytes);
        if name.starts_with("ok-") {
            assert!(
                outcome.inspect.is_ok() && outcome.open.is_ok(),
                "{name} should open: {outcome:?}"
            );
        } else if name.starts_with("err-") {
            assert!(
                outcome.inspect.is_err() && outcome.open.is_err(),
                "{name} should be refused: {outcome:?}"
            );
        }
    }
}

/// An active word whose generation is near 2^63: opening must refuse it (the
/// first checkpoint stored `(generation + 1) << 1`, which wrapped to 0, and the
/// heap could not be opened again). Found by the `nvwa_open` fuzz target;
/// `regress-generation-wrap`.
#[test]
fn nvwa_generation_that_would_wrap_is_corrupt() {
    let input =
        std::fs::read(corpus_dir().join("regress-generation-wrap")).expect("the regression input");
    let outcome = open_patched(&input);
    assert!(
        outcome.inspect.is_err() && outcome.open.is_err(),
        "{outcome:?}"
    );
}

/// The `nvwa_ops` corpus: every file must keep the target's promises.
#[test]
fn nvwa_ops_corpus_keeps_its_promises() {
    let dir = corpus_dir().join("../nvwa_ops");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 3, "nvwa_ops corpus: {} files", files.len());
    for path in &files {
        let outcome = nvwa::fuzzing::ops::run_ops(&std::fs::read(path).expect("readable"));
        println!("{}: {outcome:?}", path.display());
    }
}

/// A patch of the input format: offset in the metadata, bytes.
fn patch(off: u16, bytes: &[u8]) -> Vec<u8> {
    let mut v = off.to_le_bytes().to_vec();
    v.push(bytes.len() as u8);
    v.extend_from_slice(bytes);
    v
}

/// Writes the named seeds (run by hand; see the module docs).
#[test]
#[ignore = "writes fuzz/corpus/nvwa_open; run by hand to regenerate"]
fn regenerate_corpus() {
    let (image, region) = template();
    let r = *region as usize;
    let active = u64::from_le_bytes(image[r + 64..r + 72].try_into().expect("8 bytes"));
    let with = |flags: u8, p: Vec<u8>| {
        let mut v = vec![flags];
        v.extend_from_slice(&p);
        v
    };
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("ok-template", vec![0]),
        ("ok-template-resealed", vec![1]),
        // The other log area (empty) made active: an empty heap.
        (
            "ok-other-area",
            with(0, patch(64, &(active ^ 1).to_le_bytes())),
        ),
        ("log-garbled", with(0, patch(128, &[0x5a; 24]))),
        ("err-magic", with(0, patch(0, b"X"))),
        ("err-version", with(0, patch(7, b"2"))),
        ("err-checksum", with(0, patch(20, &[0xff]))),
        ("err-active-zero", with(0, patch(64, &[0; 8]))),
        ("err-geometry-resealed", with(1, patch(24, &[0xff]))),
    ];
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("create corpus directory");
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes).expect("write corpus file");
    }
    // nvwa_ops: crash point (2 bytes), operations (kind = b % 4: alloc, publish,
    // free, checkpoint; slot = b / 4 % 6), 0xff, cuts.
    let op = |kind: u8, slot: u8| slot * 4 + kind;
    let ops_seeds: Vec<(&str, Vec<u8>)> = vec![
        (
            "alloc-free-end",
            vec![0xff, 0xff, op(0, 0), op(0, 3), op(2, 0), op(1, 1), 0xff],
        ),
        (
            "publish-checkpoint-mid",
            vec![
                7,
                0,
                op(1, 2),
                op(1, 4),
                op(3, 0),
                op(2, 2),
                op(0, 5),
                0xff,
                1,
                2,
                3,
            ],
        ),
        (
            "many-early",
            vec![
                3,
                0,
                op(0, 0),
                op(0, 1),
                op(0, 2),
                op(2, 1),
                op(1, 1),
                op(3, 0),
                op(2, 0),
                op(0, 0),
                0xff,
                0,
                0,
                1,
            ],
        ),
    ];
    let dir = corpus_dir().join("../nvwa_ops");
    std::fs::create_dir_all(&dir).expect("create corpus directory");
    for (name, bytes) in ops_seeds {
        std::fs::write(dir.join(name), bytes).expect("write corpus file");
    }
}
