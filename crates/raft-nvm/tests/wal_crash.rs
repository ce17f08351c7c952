//! Crash tests for the WAL engine: a crash loses the unsynced buffer and may tear
//! the last write of the log file anywhere. For random workloads, the log is cut at
//! a random byte (what a disk may hold after a crash, synced or not: a torn disk loses those too); recovery must succeed and
//! hold a prefix of the appended entries. Without tearing, the prefix includes every
//! synced entry. Snapshots (which start a new log) are in the mix. After a clean
//! stop ([`Store::sync_clean`], which records the log's synced end), a tear past
//! that end still recovers, and one below it is refused as corruption.

mod common;

use common::{apply, observe, step, Rec, View};
use proptest::prelude::*;
use raft_nvm::{Store, StoreError, StoreOptions, WalOptions, WalStore};

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
    fn after_a_clean_stop_only_a_tear_past_its_synced_end_recovers(
        before in proptest::collection::vec(step(KEYS, 30), 1..20),
        after in proptest::collection::vec(step(KEYS, 30), 0..20),
        cut in any::<u64>(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = WalStore::open(dir.path(), &opts()).expect("open");
        let mut log: Vec<Rec> = Vec::new();
        let mut views = vec![common::view_after(&log)];
        for st in &before {
            apply(&s, st, &mut log).expect("step");
            views.push(common::view_after(&log));
        }
        s.sync_clean().expect("clean stop");
        let clean = views.len() - 1;
        drop(s);
        let s = WalStore::open(dir.path(), &opts()).expect("clean restart");
        prop_assert_eq!(&observe(&s, KEYS).expect("observe"), &views[clean]);
        for st in &after {
            apply(&s, st, &mut log).expect("step");
            views.push(common::view_after(&log));
        }
        // A crash: the unsynced buffer is lost, and the log torn anywhere.
        drop(s);
        let log_file = std::fs::read_dir(dir.path()).expect("dir")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "log"))
            .expect("a log");
        let log_gen: u64 = log_file.file_stem().and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("wal-"))
            .and_then(|g| g.parse().ok())
            .expect("wal-<gen>.log");
        let mark = std::fs::read(dir.path().join("synced")).expect("the synced end");
        let word = |at: usize| u64::from_le_bytes(mark[at..at + 8].try_into().expect("8 bytes"));
        let (mark_gen, mark_len) = (word(8), word(16));
        let len = std::fs::metadata(&log_file).expect("meta").len();
        let keep = 16 + cut % (len - 15);
        let f = std::fs::OpenOptions::new().write(true).open(&log_file).expect("log");
        f.set_len(keep).expect("tear");
        drop(f);
        let below = mark_gen == log_gen && keep < mark_len;
        match WalStore::open(dir.path(), &opts()) {
            Ok(s) => {
                prop_assert!(!below, "a log cut at {keep}, below its synced end {mark_len}, opened");
                let got = observe(&s, KEYS).expect("observe");
                prop_assert!(views[clean..].contains(&got),
                    "recovered {got:?}; the clean stop left {:?}", views[clean]);
            }
            Err(StoreError::Corrupt(msg)) => {
                prop_assert!(below, "a tear at {keep} past the synced end {mark_len} (generation {mark_gen}, log {log_gen}) refused: {msg}");
            }
            Err(e) => prop_assert!(false, "recovery: {e}"),
        }
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
