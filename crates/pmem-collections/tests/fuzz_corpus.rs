//! The committed corpus of the `tx_ops` fuzz target, run as an ordinary test
//! through the target's own body ([`pmem_collections::fuzzing::run_ops`]): every
//! file must keep the target's promises (the body panics otherwise). The named
//! seeds are made by the ignored test `regenerate_corpus`:
//!
//! ```text
//! cargo test -p pmem-collections --test fuzz_corpus -- --ignored --exact regenerate_corpus
//! ```

use std::path::{Path, PathBuf};

use pmem_collections::fuzzing::{run_ops, Case, Op};
use pmem_core::tx::mutation::Site;
use pmem_core::tx::{Hint, LogMode};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/tx_ops")
}

#[test]
fn tx_ops_corpus_keeps_its_promises() {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 4, "tx_ops corpus: {} files", files.len());
    let mut injected = 0;
    for path in &files {
        let bytes = std::fs::read(path).expect("readable corpus file");
        let outcome = run_ops(&bytes);
        println!("{}: {outcome:?}", path.display());
        injected += usize::from(outcome.injected);
    }
    assert!(injected > 0, "no corpus input injects a failure");
}

/// Cases written as they decode; `encode` below turns them into input bytes.
fn seeds() -> Vec<(&'static str, Case)> {
    let ops = vec![
        Op::MapInsert { key: 1, value: 10 },
        Op::VecPush { value: 7 },
        Op::Words {
            mode: LogMode::Undo,
            hint: Hint::Word,
            writes: vec![(0, 1), (3, 2)],
        },
        Op::Object {
            mode: LogMode::Redo,
            at: 2,
            words: vec![5, 6, 7],
        },
        Op::Abort {
            mode: LogMode::Lazy,
            at: 1,
            value: 9,
        },
        Op::MapRemove { key: 1 },
        Op::VecSet { index: 0, value: 8 },
        Op::Checkpoint,
        Op::VecPop,
    ];
    let case = |mode, point, fail| Case {
        mode,
        ops: ops.clone(),
        point,
        cuts: vec![0, 1, 2, 3],
        fail,
    };
    vec![
        ("lazy-end", case(LogMode::Lazy, u32::MAX, None)),
        ("undo-mid", case(LogMode::Undo, 40, None)),
        ("redo-early", case(LogMode::Redo, 9, None)),
        (
            "fail-commit-point",
            case(LogMode::Redo, u32::MAX, Some((3, Site::CommitPointFence))),
        ),
        (
            "fail-lazy-commit",
            case(LogMode::Lazy, 30, Some((0, Site::LazyCommitFence))),
        ),
        (
            "fail-record-flush",
            case(LogMode::Undo, u32::MAX, Some((2, Site::RecordFlush))),
        ),
    ]
}

/// Writes the named seeds (run by hand; see the module docs).
#[test]
#[ignore = "writes fuzz/corpus/tx_ops; run by hand to regenerate"]
fn regenerate_corpus() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("create corpus directory");
    for (name, case) in seeds() {
        let bytes = pmem_collections::fuzzing::encode(&case);
        let back = Case::decode(&bytes).expect("a seed decodes");
        assert_eq!(
            format!("{back:?}"),
            format!("{case:?}"),
            "{name} round-trips"
        );
        std::fs::write(dir.join(name), bytes).expect("write corpus file");
    }
}
