//! A WAL recovery bug found by the cluster simulation (`CLUSTER_SEED=1099`), fixed:
//! a log torn inside the zero padding of its last record lost, at the *next*
//! recovery, every entry appended and synced after the first one.
//!
//! Records are padded to 8 bytes. If a crash leaves the last record's body whole but
//! not all of its padding, recovery accepts the record (its checksum covers only the
//! body); it used to report the file's length — not a multiple of 8 — as the end of
//! the valid part, and keep appending there. The next recovery steps over the first
//! record's full padded length, lands inside the record appended after it, finds
//! nothing that decodes at an 8-byte boundary after that, and takes everything
//! from there for a torn tail: synced, acknowledged entries are silently dropped.
//!
//! Recovery now pads such a record out to its full length before appending
//! (`wal::files::for_each_record` returns the padded end).

use raft_nvm::store::Op;
use raft_nvm::{Store, StoreOptions, WalOptions, WalStore};

fn opts() -> WalOptions {
    WalOptions {
        store: StoreOptions {
            group: 1,
            sync_interval: None,
        },
        snapshot_every: 0,
    }
}

fn put(s: &WalStore, index: u64) {
    // 32-byte header + 1 + 3 = 36 bytes, padded to 40.
    s.append(
        index,
        1,
        Op::Put {
            key: b"k",
            value: b"abc",
        },
    )
    .expect("append");
}

#[test]
fn a_tear_inside_the_padding_loses_nothing_synced_later() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store.wal");
    {
        let s = WalStore::open(&dir, &opts()).expect("open");
        for i in 1..=3 {
            put(&s, i);
        }
    }
    // The crash: the last record's body is on disk, two bytes of its padding not.
    let log = dir.join("wal-0.log");
    let len = std::fs::metadata(&log).expect("the log").len();
    assert_eq!(len % 8, 0);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .and_then(|f| f.set_len(len - 2))
        .expect("tear the log");
    let recovered = {
        let s = WalStore::open(&dir, &opts()).expect("recover the torn log");
        let last = s.last_index();
        assert!(last >= 2, "the untorn entries are there: {last}");
        for i in last + 1..=last + 3 {
            put(&s, i);
        }
        assert_eq!(s.durable_index(), last + 3, "synced (group 1)");
        last + 3
    };
    let s = WalStore::open(&dir, &opts()).expect("recover again");
    assert_eq!(
        s.last_index(),
        recovered,
        "entries synced after the first recovery were lost by the second"
    );
}
