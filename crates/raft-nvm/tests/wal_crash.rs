//! Crash tests for the WAL engine: a crash loses the unsynced buffer and may tear
//! the last write of the log file anywhere. For random workloads, the log is cut at
//! a random byte (what a disk may hold after a crash, synced or not: a torn disk loses those too); recovery must succeed and
//! hold a prefix of the appended entries. Without tearing, the prefix includes every
//! synced entry. Snapshots (which start a new log) are in the mix.

mod common;

use common::{apply, observe, step, Rec, View};
use proptest::prelude::*;
use raft_nvm::{StoreOptions, WalOptions, WalStore};

const KEYS: u8 = 4;

fn opts() -> WalOptions {
    WalOptions {
        store: StoreOptions {
            group: 3,
            sync_interval: None,
        },
        snapshot_every: 0,
    }
}

/// Runs `steps` on a fresh WAL store in `dir`, then drops it (a crash: the unsynced
/// buffer is lost). Returns the model view after every step and the index of the
/// view the last explicit sync (or snapshot) left.
fn run(dir: &std::path::Path, steps: &[common::Step]) -> (Vec<View>, usize) {
    let s = WalStore::open(dir, &opts()).expect("open");
    let mut log: Vec<Rec> = Vec::new();
    let mut views = vec![common::view_after(&log)];
    let mut synced = 0;
    for st in steps {
        apply(&s, st, &mut log).expect("step");
        views.push(common::view_after(&log));
        if matches!(st, common::Step::Sync | common::Step::Compact) {
            synced = views.len() - 1;
        }
    }
    (views, synced)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
    ))]

    #[test]
    fn a_torn_log_recovers_a_prefix(
        steps in proptest::collection::vec(step(KEYS, 30), 1..40),
        cut in any::<u64>(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (views, _) = run(dir.path(), &steps);
        // Tear the log: keep a random length between the header and its end.
        let log = std::fs::read_dir(dir.path()).expect("dir")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "log"))
            .expect("a log");
        let len = std::fs::metadata(&log).expect("meta").len();
        let keep = 16 + cut % (len - 15);
        let f = std::fs::OpenOptions::new().write(true).open(&log).expect("log");
        f.set_len(keep).expect("tear");
        drop(f);
        let s = WalStore::open(dir.path(), &opts()).expect("recovery");
        let got = observe(&s, KEYS).expect("observe");
        prop_assert!(views.contains(&got), "recovered {got:?}, not a prefix of {views:?}");
    }

    #[test]
    fn an_untorn_log_keeps_every_synced_entry(
        steps in proptest::collection::vec(step(KEYS, 30), 1..40),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (views, synced) = run(dir.path(), &steps);
        let s = WalStore::open(dir.path(), &opts()).expect("recovery");
        let got = observe(&s, KEYS).expect("observe");
        prop_assert!(views[synced..].contains(&got),
            "recovered {got:?}; the last sync left {:?}", views[synced]);
    }
}
