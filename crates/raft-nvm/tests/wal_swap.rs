//! Crash points of the WAL engine's snapshot installation.
//!
//! A WAL store is a directory, so a follower installs a snapshot by staging a whole
//! new store beside the old one and swapping the directories: (1) build
//! `<dir>.incoming` and make it durable, (2) rename `<dir>` to `<dir>.old`, (3) rename
//! `<dir>.incoming` to `<dir>`, (4) sync the parent, (5) remove `<dir>.old`
//! (the WAL engine's staged install being committed). Renames are atomic, so a crash leaves the file
//! state of one of the points between those steps. This test builds each of those
//! states and opens the store through the provider, as a restarted node does
//! (`recover_wal_swap` first): it must find exactly the old store or exactly the new
//! one — never an error, a mix, or an empty store — and leave no sibling behind.
//! The one state the protocol cannot produce (the store gone, only its old copy
//! left) is refused with a typed error and left as it was.

use std::path::{Path, PathBuf};

use raft_nvm::replica::{Engine, FileStoreProvider, StartMode, StoreProvider};
use raft_nvm::{HardState, Op, SnapshotItem, SnapshotMeta, Store, StoreError, WalOptions};

fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().expect("named").to_os_string();
    name.push(suffix);
    dir.with_file_name(name)
}

fn open(dir: &Path) -> raft_nvm::Result<std::sync::Arc<dyn Store>> {
    // Bootstrap: the tests create their stores through it too.
    FileStoreProvider::with_start(
        Engine::Wal {
            dir: dir.to_path_buf(),
            opts: WalOptions::default(),
        },
        StartMode::Bootstrap,
    )
    .open()
}

/// The store before the snapshot: entries 1..=5 of term 1.
fn write_old(dir: &Path) {
    let store = open(dir).expect("create the old store");
    for i in 1..=5u64 {
        let key = format!("k{i}");
        let value = format!("old{i}");
        store
            .append(
                i,
                1,
                Op::Put {
                    key: key.as_bytes(),
                    value: value.as_bytes(),
                },
            )
            .expect("append");
    }
    store.sync().expect("sync");
    store
        .set_hard_state(HardState {
            term: 1,
            vote: Some(1),
        })
        .expect("hard state");
}

const NEW_AT: SnapshotMeta = SnapshotMeta { index: 9, term: 2 };

/// The installed snapshot: state at index 9 of term 2.
fn write_new(dir: &Path) {
    let store = open(dir).expect("create the staged store");
    let mut items = (1..=3u64).map(|i| SnapshotItem {
        key: format!("k{i}").into_bytes(),
        value: format!("new{i}").into_bytes(),
        index: 6 + i,
    });
    store.install_snapshot(NEW_AT, &mut items).expect("install");
    store
        .set_hard_state(HardState {
            term: 2,
            vote: None,
        })
        .expect("hard state");
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Found {
    Old,
    New,
}

/// Opens `dir` as a restarted node would and says which store it found.
fn found(dir: &Path) -> Found {
    let store = open(dir).expect("the store opens after the crash");
    let value = |key: &str| {
        store
            .get(key.as_bytes(), store.last_index())
            .expect("get")
            .map(|v| String::from_utf8_lossy(&v).into_owned())
    };
    let found = match (store.last_index(), store.hard_state().term) {
        (5, 1) => {
            for i in 1..=5 {
                assert_eq!(value(&format!("k{i}")), Some(format!("old{i}")));
            }
            Found::Old
        }
        (9, 2) => {
            for i in 1..=3 {
                assert_eq!(value(&format!("k{i}")), Some(format!("new{i}")));
            }
            assert_eq!(value("k4"), None, "nothing of the old store");
            Found::New
        }
        other => panic!("neither store: last index and term {other:?}"),
    };
    for suffix in [".incoming", ".old"] {
        assert!(
            !sibling(dir, suffix).exists(),
            "{suffix} left behind after recovery"
        );
    }
    found
}

/// Builds the file state of one crash point in a fresh directory.
fn crash_state(point: usize) -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("wal");
    let (staging, old) = (sibling(&dir, ".incoming"), sibling(&dir, ".old"));
    write_old(&dir);
    if point >= 1 {
        write_new(&staging);
    }
    if point >= 2 {
        std::fs::rename(&dir, &old).expect("rename aside");
    }
    if point >= 3 {
        std::fs::rename(&staging, &dir).expect("rename in");
    }
    if point >= 5 {
        std::fs::remove_dir_all(&old).expect("remove old");
    }
    (root, dir)
}

#[test]
fn every_crash_point_of_the_swap_opens_the_old_or_the_new_store() {
    // Point 0: nothing staged yet; 1: staged; 2: renamed aside; 3 and 4: renamed
    // in (4 is 3 made durable: the same files); 5: old copy removed.
    let expected = [
        Found::Old,
        Found::Old,
        Found::New,
        Found::New,
        Found::New,
        Found::New,
    ];
    for (point, &want) in expected.iter().enumerate() {
        let (_root, dir) = crash_state(point);
        assert_eq!(found(&dir), want, "crash point {point}");
        // Recovery is idempotent: a crash during it changes nothing.
        assert_eq!(found(&dir), want, "crash point {point}, reopened");
    }
}

#[test]
fn a_torn_staging_directory_is_discarded() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("wal");
    write_old(&dir);
    // A crash while the snapshot was being written: partial files in staging.
    let staging = sibling(&dir, ".incoming");
    std::fs::create_dir(&staging).expect("staging");
    std::fs::write(staging.join("garbage"), b"torn").expect("write");
    assert_eq!(found(&dir), Found::Old);
}

#[test]
fn a_store_with_only_its_old_copy_left_is_refused_and_kept() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("wal");
    write_old(&dir);
    let old = sibling(&dir, ".old");
    std::fs::rename(&dir, &old).expect("rename aside");
    let Err(err) = open(&dir) else {
        panic!("opened a store whose directory is gone");
    };
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    assert!(!dir.exists(), "nothing created in its place");
    assert!(old.exists(), "the old copy is kept for the operator");
}
