//! The `list_ops` fuzz target's committed corpus, run as an ordinary test (needs
//! the `fuzzing` feature, which `cargo test --all-features` turns on).
//!
//! Every file in `fuzz/corpus/list_ops/` is decoded into a workload and a crash
//! point and run by [`raft_nvm::fuzzing::storage::list_ops::list_ops`]: the crash
//! image must recover to a prefix of the model log holding everything a sync
//! promised, the last completed hard state, partitioned pages, and a store that
//! keeps working. The named files are made by the ignored test `regenerate_corpus`:
//!
//! ```text
//! cargo test -p raft-nvm --features fuzzing --test fuzz_list_ops -- --ignored --exact regenerate_corpus
//! ```

#![cfg(feature = "fuzzing")]

use std::path::{Path, PathBuf};

use raft_nvm::fuzzing::storage::list_ops::{list_ops, run_case, ListOp, ListOpsCase};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/list_ops")
}

#[test]
fn corpus_workloads_recover_from_their_crashes() {
    let dir = corpus_dir();
    let mut ran = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        let bytes = std::fs::read(&path).expect("readable corpus file");
        let report = list_ops(&bytes);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("ok-") {
            let report = report.unwrap_or_else(|| panic!("{name} does not decode"));
            assert!(report.steps_run > 0, "{name}: {report:?}");
        }
        ran += 1;
    }
    assert!(
        ran >= 4,
        "expected at least 4 corpus files in {}",
        dir.display()
    );
}

/// Fixed workloads crashed at the start, in the middle and at the end: each
/// checks the model, so a store that lost a synced record fails here.
#[test]
fn fixed_workloads_survive_crashes_anywhere() {
    for (name, case) in named_cases() {
        for crash in [0, 1 << 12, 1 << 14, 1 << 15, 3 << 14, u16::MAX] {
            for cut in [vec![0], vec![255], vec![1, 7, 3]] {
                let case = ListOpsCase {
                    crash,
                    cut,
                    ..case.clone()
                };
                let report = run_case(&case);
                assert_eq!(report.steps_run, case.ops.len(), "{}: {report:?}", name);
                if crash == u16::MAX {
                    assert!(report.last_index > 0, "{name}: {report:?}");
                }
            }
        }
    }
}

fn named_cases() -> Vec<(&'static str, ListOpsCase)> {
    use ListOp::*;
    let case = |ops: Vec<ListOp>| ListOpsCase {
        ops,
        crash: u16::MAX / 2,
        cut: vec![0x5a, 0x01, 0xff],
    };
    vec![
        (
            "ok-puts-sync-compact",
            case(vec![
                Put { key: 0, len: 40 },
                Put { key: 1, len: 300 },
                Sync,
                Delete(0),
                Put { key: 2, len: 900 },
                Compact,
                Put { key: 3, len: 10 },
            ]),
        ),
        (
            "ok-batches-truncate",
            case(vec![
                Batch(vec![(0, Some(20)), (1, None), (2, Some(500))]),
                Truncate(2),
                HardState(1),
                Batch(vec![(3, Some(100))]),
                Sync,
                Truncate(3),
                Put { key: 4, len: 60 },
            ]),
        ),
        (
            "ok-hard-states",
            case(vec![
                HardState(1),
                Put { key: 0, len: 8 },
                HardState(2),
                Sync,
                HardState(3),
            ]),
        ),
        (
            "ok-many-compactions",
            case(
                (0..30)
                    .map(|i| match i % 5 {
                        4 => Compact,
                        _ => Put {
                            key: i % 3,
                            len: 150,
                        },
                    })
                    .collect(),
            ),
        ),
    ]
}

/// Encodes `case` as the bytes [`ListOpsCase`]'s `Arbitrary` implementation
/// decodes back to it.
fn encode(case: &ListOpsCase) -> Vec<u8> {
    // `int_in_range` over a range that fits a byte reads one byte; the arms of
    // `ListOp::arbitrary` are 0..=3 put, 4 delete, 5 batch, 6 truncate, 7 sync,
    // 9 compact, 10 hard state.
    let mut out = case.crash.to_le_bytes().to_vec();
    for op in &case.ops {
        out.push(1); // another op follows
        match op {
            ListOp::Put { key, len } => {
                out.extend([0, *key]);
                out.extend(len.to_le_bytes());
            }
            ListOp::Delete(key) => out.extend([4, *key]),
            ListOp::Batch(ops) => {
                out.extend([5, ops.len() as u8 - 1]);
                for (key, len) in ops {
                    out.push(*key);
                    match len {
                        Some(n) => {
                            out.push(1);
                            out.extend(n.to_le_bytes());
                        }
                        None => out.push(0),
                    }
                }
            }
            ListOp::Truncate(n) => out.extend([6, n - 1]),
            ListOp::Sync => out.push(7),
            ListOp::Compact => out.push(9),
            ListOp::HardState(v) => out.extend([10, *v]),
        }
    }
    out.push(0); // no more ops
    out.extend(&case.cut);
    out
}

#[test]
fn the_encoding_round_trips() {
    use arbitrary::{Arbitrary, Unstructured};
    for (name, case) in named_cases() {
        let bytes = encode(&case);
        let back = ListOpsCase::arbitrary_take_rest(Unstructured::new(&bytes)).expect("decodes");
        assert_eq!(back, case, "{name}");
    }
}

/// Writes the named corpus files (run by hand; see the module docs).
#[test]
#[ignore = "writes fuzz/corpus/list_ops; run by hand to regenerate"]
fn regenerate_corpus() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("create corpus directory");
    for (name, case) in named_cases() {
        std::fs::write(dir.join(name), encode(&case)).expect("write corpus file");
    }
}
