//! Crash tests for the WAL engine: a crash loses the unsynced buffer and may tear
//! the last write of the log file anywhere. For random workloads, the log is cut at
//! a random byte (what a disk may hold after a crash, synced or not: a torn disk loses those too); recovery must succeed and
//! hold a prefix of the appended entries. Without tearing, the prefix includes every
//! synced entry. Snapshots (which start a new log) are in the mix.

use std::collections::BTreeMap;

use proptest::prelude::*;
use raft_nvm::{Op, Store, StoreOptions, WalOptions, WalStore};

#[derive(Clone, Debug)]
enum Step {
    Put(u8, u8),
    Delete(u8),
    Truncate(u8),
    Sync,
    Snapshot,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..4, 1u8..30).prop_map(|(k, n)| Step::Put(k, n)),
        2 => (0u8..4).prop_map(Step::Delete),
        1 => (1u8..3).prop_map(Step::Truncate),
        2 => Just(Step::Sync),
        1 => Just(Step::Snapshot),
    ]
}

type View = (u64, BTreeMap<Vec<u8>, Vec<u8>>);
/// Model entries: (index, key, value or tombstone).
type Entries = Vec<(u64, Vec<u8>, Option<Vec<u8>>)>;

/// The model: entries (index, key, value or tombstone) after each step.
fn view(entries: &Entries) -> View {
    let mut map = BTreeMap::new();
    for (_, k, v) in entries {
        match v {
            Some(v) => map.insert(k.clone(), v.clone()),
            None => map.remove(k),
        };
    }
    (entries.last().map_or(0, |e| e.0), map)
}

fn observe(s: &WalStore) -> View {
    let last = s.last_index();
    let mut map = BTreeMap::new();
    for k in 0..4u8 {
        if let Some(v) = s.get(&[k], u64::MAX).expect("get") {
            map.insert(vec![k], v);
        }
    }
    (last, map)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
    ))]

    #[test]
    fn a_torn_log_recovers_a_prefix_with_every_synced_entry(
        steps in proptest::collection::vec(step(), 1..40),
        cut in any::<u64>(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = WalOptions {
            store: StoreOptions { group: 3, sync_interval: None },
            snapshot_every: 0,
        };
        let mut entries: Entries = Vec::new();
        // Model views after every append.
        let mut views: Vec<View> = vec![view(&entries)];
        {
            let s = WalStore::open(dir.path(), &opts).expect("open");
            for st in &steps {
                let last = s.last_index();
                match st {
                    Step::Put(k, n) => {
                        let v = vec![*k ^ *n; usize::from(*n)];
                        s.append(last + 1, 1, Op::Put { key: &[*k], value: &v }).expect("put");
                        entries.push((last + 1, vec![*k], Some(v)));
                    }
                    Step::Delete(k) => {
                        s.append(last + 1, 1, Op::Delete { key: &[*k] }).expect("delete");
                        entries.push((last + 1, vec![*k], None));
                    }
                    Step::Truncate(n) => {
                        let after = last.saturating_sub(u64::from(*n)).max(s.applied());
                        if after < last {
                            s.truncate_after(after, 2).expect("truncate");
                            entries.retain(|e| e.0 <= after);
                        }
                    }
                    Step::Sync => s.sync().expect("sync"),
                    Step::Snapshot => {
                        s.sync().expect("sync");
                        s.set_applied(s.durable_index());
                        s.compact().expect("snapshot");
                    }
                }
                views.push(view(&entries));
            }
            // The crash: the buffer is dropped unwritten (no sync on drop).
        }
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
        let s = WalStore::open(dir.path(), &opts).expect("recovery");
        let got = observe(&s);
        // Any prefix is allowed (the cut may remove synced bytes too: a torn disk
        // loses them as well), but what recovery holds must be some prefix.
        prop_assert!(views.contains(&got), "recovered {got:?}, not a prefix of {views:?}");
    }

    #[test]
    fn an_untorn_log_keeps_every_synced_entry(
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = WalOptions {
            store: StoreOptions { group: 3, sync_interval: None },
            snapshot_every: 0,
        };
        let mut entries: Entries = Vec::new();
        let mut views: Vec<View> = vec![view(&entries)];
        let mut synced = 0usize;
        {
            let s = WalStore::open(dir.path(), &opts).expect("open");
            for st in &steps {
                let last = s.last_index();
                match st {
                    Step::Put(k, n) => {
                        let v = vec![*k ^ *n; usize::from(*n)];
                        s.append(last + 1, 1, Op::Put { key: &[*k], value: &v }).expect("put");
                        entries.push((last + 1, vec![*k], Some(v)));
                    }
                    Step::Delete(k) => {
                        s.append(last + 1, 1, Op::Delete { key: &[*k] }).expect("delete");
                        entries.push((last + 1, vec![*k], None));
                    }
                    Step::Truncate(n) => {
                        let after = last.saturating_sub(u64::from(*n)).max(s.applied());
                        if after < last {
                            s.truncate_after(after, 2).expect("truncate");
                            entries.retain(|e| e.0 <= after);
                        }
                    }
                    Step::Sync => s.sync().expect("sync"),
                    Step::Snapshot => {
                        s.sync().expect("sync");
                        s.set_applied(s.durable_index());
                        s.compact().expect("snapshot");
                    }
                }
                views.push(view(&entries));
                if matches!(st, Step::Sync | Step::Snapshot) {
                    synced = views.len() - 1;
                }
            }
        }
        let s = WalStore::open(dir.path(), &opts).expect("recovery");
        let got = observe(&s);
        prop_assert!(views[synced..].contains(&got),
            "recovered {got:?}; the last sync left {:?}", views[synced]);
    }
}
