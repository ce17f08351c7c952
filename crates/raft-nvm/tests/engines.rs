//! Behaviour both engines share, run against each: MVCC reads, deletes, truncation,
//! reopening, compaction, snapshots, the hard state and the errors.

use raft_nvm::{
    HardState, ListOptions, ListStore, Op, SnapshotItem, Store, StoreError, StoreOptions,
    WalOptions, WalStore,
};
use tempfile::TempDir;

type Open = fn(&TempDir, bool) -> Box<dyn Store>;

fn list(dir: &TempDir, create: bool) -> Box<dyn Store> {
    let path = dir.path().join("store.pool");
    let opts = ListOptions {
        page_size: 256,
        ..ListOptions::default()
    };
    Box::new(if create {
        ListStore::create(&path, 1 << 20, &opts).expect("create")
    } else {
        ListStore::open(&path, &opts).expect("open")
    })
}

fn wal(dir: &TempDir, _create: bool) -> Box<dyn Store> {
    Box::new(WalStore::open(dir.path().join("wal"), &WalOptions::default()).expect("open"))
}

const ENGINES: [(&str, Open); 2] = [("list", list), ("wal", wal)];

fn put(s: &dyn Store, i: u64, k: &str, v: &str) {
    s.append(
        i,
        1,
        Op::Put {
            key: k.as_bytes(),
            value: v.as_bytes(),
        },
    )
    .expect("append");
}

fn get(s: &dyn Store, k: &str, at: u64) -> Option<String> {
    s.get(k.as_bytes(), at)
        .expect("get")
        .map(|v| String::from_utf8(v).expect("utf8"))
}

#[test]
fn reads_see_the_greatest_version_at_or_below_their_timestamp() {
    for (name, open) in ENGINES {
        let dir = TempDir::new().expect("tempdir");
        let s = open(&dir, true);
        put(&*s, 1, "a", "1");
        put(&*s, 2, "b", "2");
        put(&*s, 3, "a", "3");
        s.append(4, 1, Op::Delete { key: b"b" }).expect("delete");
        s.append(5, 2, Op::Noop).expect("noop");
        assert_eq!(get(&*s, "a", 0), None, "{name}");
        assert_eq!(get(&*s, "a", 2).as_deref(), Some("1"), "{name}");
        assert_eq!(get(&*s, "a", 9).as_deref(), Some("3"), "{name}");
        assert_eq!(get(&*s, "b", 3).as_deref(), Some("2"), "{name}");
        assert_eq!(get(&*s, "b", 4), None, "{name}");
        let latest = s.latest(b"b").expect("latest").expect("has versions");
        assert_eq!((latest.index, latest.value), (4, None), "{name}");
        assert_eq!((s.last_index(), s.last_term()), (5, 2), "{name}");
        assert_eq!(s.term_at(3), Some(1), "{name}");
        assert!(matches!(
            s.append(7, 2, Op::Noop),
            Err(StoreError::OutOfOrder { index: 7, last: 5 })
        ));
    }
}

#[test]
fn truncation_discards_the_suffix_durably() {
    for (name, open) in ENGINES {
        let dir = TempDir::new().expect("tempdir");
        {
            let s = open(&dir, true);
            for i in 1..=6 {
                put(&*s, i, "k", &format!("v{i}"));
            }
            s.set_applied(2);
            assert!(matches!(
                s.truncate_after(1, 2),
                Err(StoreError::TruncateApplied { .. })
            ));
            s.truncate_after(3, 2).expect("truncate");
            assert_eq!(s.last_index(), 3, "{name}");
            put(&*s, 4, "k", "new4");
            s.sync().expect("sync");
            assert_eq!(s.durable_index(), 4, "{name}");
        }
        let s = open(&dir, false);
        assert_eq!(s.last_index(), 4, "{name}");
        assert_eq!(get(&*s, "k", 9).as_deref(), Some("new4"), "{name}");
        assert_eq!(get(&*s, "k", 3).as_deref(), Some("v3"), "{name}");
    }
}

#[test]
fn unsynced_appends_are_a_prefix_after_reopen_and_synced_ones_survive() {
    for (name, open) in ENGINES {
        let dir = TempDir::new().expect("tempdir");
        {
            let s = open(&dir, true);
            for i in 1..=25 {
                put(&*s, i, &format!("k{i}"), "v");
            }
            // Groups of 10: 20 are durable, 5 are not yet.
            assert_eq!(s.durable_index(), 20, "{name}");
        }
        let s = open(&dir, false);
        // A clean drop does not sync (the process may as well have crashed).
        assert!(s.last_index() >= 20, "{name}");
        for i in 1..=s.last_index() {
            assert_eq!(
                get(&*s, &format!("k{i}"), 99).as_deref(),
                Some("v"),
                "{name}"
            );
        }
    }
}

#[test]
fn compaction_keeps_what_readers_at_applied_see_and_frees_space() {
    for (name, open) in ENGINES {
        let dir = TempDir::new().expect("tempdir");
        let s = open(&dir, true);
        let mut i = 0;
        for round in 0..40 {
            for k in 0..10 {
                i += 1;
                put(&*s, i, &format!("key{k}"), &format!("r{round}"));
            }
        }
        i += 1;
        s.append(i, 1, Op::Delete { key: b"key3" }).expect("delete");
        s.sync().expect("sync");
        s.set_applied(i);
        let stats = s.compact().expect("compact");
        assert!(stats.records_dropped > 300, "{name}: {stats:?}");
        for k in 0..10 {
            let want = (k != 3).then(|| "r39".to_string());
            assert_eq!(get(&*s, &format!("key{k}"), i), want, "{name}");
        }
        // Appends go on, and a reopen sees the compacted list plus the new entries.
        put(&*s, i + 1, "key3", "back");
        s.sync().expect("sync");
        drop(s);
        let s = open(&dir, false);
        assert_eq!(s.last_index(), i + 1, "{name}");
        assert_eq!(get(&*s, "key3", i + 1).as_deref(), Some("back"), "{name}");
        assert_eq!(get(&*s, "key5", i + 1).as_deref(), Some("r39"), "{name}");
        assert_eq!(s.term_at(i), Some(1), "{name}");
    }
}

#[test]
fn a_snapshot_installs_into_an_empty_store() {
    for (name, open) in ENGINES {
        let src_dir = TempDir::new().expect("tempdir");
        let s = open(&src_dir, true);
        for i in 1..=300u64 {
            put(&*s, i, &format!("k{}", i % 70), &format!("v{i}"));
        }
        s.set_applied(250);
        let (meta, items) = s.snapshot(250).expect("snapshot");
        let items: Vec<SnapshotItem> = items.collect::<Result<_, _>>().expect("stream");
        assert_eq!(items.len(), 70, "{name}");
        assert!(matches!(
            s.snapshot(260),
            Err(StoreError::SnapshotUnavailable { .. })
        ));
        let dst_dir = TempDir::new().expect("tempdir");
        {
            let d = open(&dst_dir, true);
            d.install_snapshot(meta, &mut items.clone().into_iter())
                .expect("install");
            assert!(matches!(
                d.install_snapshot(meta, &mut std::iter::empty()),
                Err(StoreError::NotEmpty { .. })
            ));
        }
        let d = open(&dst_dir, false);
        assert_eq!((d.last_index(), d.term_at(250)), (250, Some(1)), "{name}");
        for k in 0..70 {
            assert_eq!(
                get(&*d, &format!("k{k}"), 250),
                get(&*s, &format!("k{k}"), 250),
                "{name} k{k}"
            );
        }
        put(&*d, 251, "k1", "after");
        assert_eq!(get(&*d, "k1", 251).as_deref(), Some("after"), "{name}");
    }
}

#[test]
fn the_hard_state_is_durable() {
    for (name, open) in ENGINES {
        let dir = TempDir::new().expect("tempdir");
        {
            let s = open(&dir, true);
            assert_eq!(s.hard_state(), HardState::default(), "{name}");
            s.set_hard_state(HardState {
                term: 7,
                vote: Some(2),
            })
            .expect("set");
            assert!(s
                .set_hard_state(HardState {
                    term: 1 << 50,
                    vote: None
                })
                .is_err());
        }
        let s = open(&dir, false);
        assert_eq!(
            s.hard_state(),
            HardState {
                term: 7,
                vote: Some(2)
            },
            "{name}"
        );
    }
}

#[test]
fn list_errors_are_typed() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("p.pool");
    let opts = ListOptions {
        page_size: 256,
        ..ListOptions::default()
    };
    let s = ListStore::create(&path, 64 * 1024, &opts).expect("create");
    // Larger than a page is stored in fragments; larger than a page's table of
    // fragments can name, or a key that leaves no room for one, is refused.
    assert!(s.fits(1, 300) && !s.fits(1, 5000) && !s.fits(300, 1));
    for (key, len) in [(&b"k"[..], 5000), (&[7u8; 300][..], 1)] {
        let big = vec![0u8; len];
        assert!(matches!(
            s.append(1, 1, Op::Put { key, value: &big }),
            Err(StoreError::TooLarge { .. })
        ));
    }
    let mut i = 0;
    let full = loop {
        i += 1;
        if let Err(e) = s.append(
            i,
            1,
            Op::Put {
                key: b"k",
                value: &[7; 100],
            },
        ) {
            break e;
        }
    };
    assert!(matches!(full, StoreError::Full { .. }), "{full}");
    drop(s);
    let bad = ListOptions {
        page_size: 100,
        ..ListOptions::default()
    };
    assert!(matches!(
        ListStore::create(dir.path().join("q.pool"), 64 * 1024, &bad),
        Err(StoreError::Invalid(_))
    ));
    let zero = ListOptions {
        store: StoreOptions {
            group: 0,
            sync_interval: None,
        },
        ..ListOptions::default()
    };
    assert!(matches!(
        ListStore::open(&path, &zero),
        Err(StoreError::Invalid(_))
    ));
}

#[test]
fn the_list_timer_syncs_pending_appends() {
    let dir = TempDir::new().expect("tempdir");
    let opts = ListOptions {
        store: StoreOptions {
            group: 1000,
            sync_interval: Some(std::time::Duration::from_millis(1)),
        },
        ..ListOptions::default()
    };
    let s = ListStore::create(dir.path().join("t.pool"), 1 << 20, &opts).expect("create");
    put(&s, 1, "k", "v");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while s.durable_index() < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the timer never synced"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    s.close().expect("close");
}

#[test]
fn a_corrupt_list_pool_is_reported_and_left_unchanged() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("c.pool");
    let opts = ListOptions {
        page_size: 256,
        ..ListOptions::default()
    };
    {
        let s = ListStore::create(&path, 64 * 1024, &opts).expect("create");
        for i in 1..=20 {
            put(&s, i, &format!("key{i}"), "value");
        }
        s.sync().expect("sync");
    }
    let pristine = std::fs::read(&path).expect("read");
    // Find the first record's key bytes and flip one: the checksum catches it.
    let at = pristine
        .windows(4)
        .position(|w| w == b"key1")
        .expect("a record is in the file");
    let mut bad = pristine.clone();
    bad[at] ^= 0x20;
    std::fs::write(&path, &bad).expect("write");
    let err = ListStore::open(&path, &opts).expect_err("corruption must be reported");
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("checksum"), "{err}");
    assert_eq!(
        std::fs::read(&path).expect("read"),
        bad,
        "open wrote to a corrupt pool"
    );
}

/// A WAL store in `dir/w` holding keys k1..=k15 (one entry each), synced and closed.
fn synced_wal_of_15_keys(dir: &TempDir) -> std::path::PathBuf {
    let wal_dir = dir.path().join("w");
    let s = WalStore::open(&wal_dir, &WalOptions::default()).expect("open");
    for i in 1..=15 {
        put(&s, i, &format!("k{i}"), "v");
    }
    s.sync().expect("sync");
    wal_dir
}

#[test]
fn a_corrupt_record_in_the_middle_of_a_wal_is_an_error_not_a_cut() {
    let dir = TempDir::new().expect("tempdir");
    let wal_dir = synced_wal_of_15_keys(&dir);
    // Flip a byte of the record of k5: entries 6..=15 follow it, acknowledged.
    let log = wal_dir.join("wal-0.log");
    let mut bytes = std::fs::read(&log).expect("read");
    let at = bytes
        .windows(2)
        .position(|w| w == b"k5")
        .expect("k5 in the log");
    bytes[at] ^= 1;
    std::fs::write(&log, &bytes).expect("write");
    let err = WalStore::open(&wal_dir, &WalOptions::default()).expect_err("corrupt middle");
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("not a torn tail"), "{err}");
    assert_eq!(std::fs::read(&log).expect("read"), bytes, "nothing was cut");
    // A corrupt length field (the record now claims more than the file holds) does
    // not hide the records after it either.
    bytes[at] ^= 1;
    let header = at - 32; // the key follows the 32-byte record header
    bytes[header + 4..header + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&log, &bytes).expect("write");
    let err = WalStore::open(&wal_dir, &WalOptions::default()).expect_err("corrupt length");
    assert!(err.to_string().contains("not a torn tail"), "{err}");
    assert_eq!(std::fs::read(&log).expect("read"), bytes, "nothing was cut");
}

#[test]
fn a_corrupt_wal_snapshot_is_reported_and_a_torn_log_tail_is_dropped() {
    let dir = TempDir::new().expect("tempdir");
    let wal_dir = synced_wal_of_15_keys(&dir);
    // A torn tail: cut the log in the middle of its last record.
    let log = wal_dir.join("wal-0.log");
    let len = std::fs::metadata(&log).expect("meta").len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .expect("open log");
    f.set_len(len - 5).expect("truncate");
    drop(f);
    {
        let s = WalStore::open(&wal_dir, &WalOptions::default()).expect("reopen");
        assert_eq!(
            s.last_index(),
            14,
            "the torn record is dropped, the rest kept"
        );
        s.set_applied(14);
        s.compact().expect("snapshot");
    }
    let snap = wal_dir.join("snapshot");
    let mut bytes = std::fs::read(&snap).expect("read");
    let at = bytes
        .windows(3)
        .position(|w| w == b"k14")
        .expect("k14 in the snapshot");
    bytes[at + 1] ^= 1;
    std::fs::write(&snap, &bytes).expect("write");
    let err = WalStore::open(&wal_dir, &WalOptions::default()).expect_err("corrupt snapshot");
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    assert_eq!(std::fs::read(&snap).expect("read"), bytes);
}

/// Real threads: a writer rewriting keys, readers checking every value they see is
/// one the writer wrote for that key, and the background compactor running every
/// millisecond; afterwards the pages have been recycled and a reopen agrees.
#[test]
fn background_compaction_runs_beside_readers_and_writers() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("bg.pool");
    let opts = ListOptions {
        page_size: 256,
        compact_interval: Some(std::time::Duration::from_millis(1)),
        ..ListOptions::default()
    };
    // Small enough that the writer runs out of pages unless compaction recycles them.
    let s = Arc::new(ListStore::create(&path, 128 * 1024, &opts).expect("create"));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (s, done) = (Arc::clone(&s), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !done.load(Ordering::Acquire) {
                    for k in 0..8u8 {
                        if let Some(v) = s.get(&[k], s.applied()).expect("get") {
                            assert_eq!(v[0], k, "a value of another key: a stale location");
                            assert!(v.iter().all(|&b| b == v[0] || b == v[1]));
                            reads += 1;
                        }
                    }
                }
                reads
            })
        })
        .collect();
    let total = 6_000u64;
    for i in 1..=total {
        let k = (i % 8) as u8;
        let value = [k, (i % 251) as u8, (i % 251) as u8, (i % 251) as u8];
        let value: Vec<u8> = value.iter().cycle().take(40).copied().collect();
        let op = Op::Put {
            key: &[k],
            value: &value,
        };
        // The compactor runs every millisecond but may be descheduled on a busy
        // machine: a full pool may wait for it (boundedly), never more.
        let mut waited = 0;
        loop {
            match s.append(i, 1, op) {
                Ok(()) => break,
                Err(StoreError::Full { .. }) if waited < 5_000 => {
                    s.set_applied(s.durable_index());
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    waited += 1;
                }
                Err(e) => panic!("append {i} (pages recycled?): {e}"),
            }
        }
        s.set_applied(s.durable_index());
    }
    done.store(true, Ordering::Release);
    for r in readers {
        assert!(r.join().expect("reader") > 0);
    }
    let want: Vec<_> = (0..8u8).map(|k| s.get(&[k], total).expect("get")).collect();
    let s = Arc::try_unwrap(s).expect("sole owner");
    // Stops the compactor (mid-compaction, its fresh pages are on neither list).
    s.close().expect("close");
    let again = ListStore::open(
        &path,
        &ListOptions {
            compact_interval: None,
            ..opts
        },
    )
    .expect("reopen");
    let got: Vec<_> = (0..8u8)
        .map(|k| again.get(&[k], total).expect("get"))
        .collect();
    assert_eq!(got, want);
    let (used, free) = again.page_lists();
    assert_eq!(used.len() + free.len(), again.page_count() as usize);
    assert!(
        used.len() < 60,
        "compaction kept the list short: {} pages",
        used.len()
    );
}

#[test]
fn entries_read_back_until_compaction_drops_them() {
    use raft_nvm::{LogEntry, OwnedOp};
    for (name, open) in ENGINES {
        let dir = TempDir::new().expect("tempdir");
        let s = open(&dir, true);
        for i in 1..=60u64 {
            put(&*s, i, &format!("k{}", i % 3), &format!("v{i}"));
        }
        s.append(61, 2, Op::Delete { key: b"k0" }).expect("delete");
        s.append(62, 2, Op::Noop).expect("noop");
        s.truncate_after(61, 3).expect("truncate");
        s.append(
            62,
            3,
            Op::Put {
                key: b"k9",
                value: b"new",
            },
        )
        .expect("put");
        let want = |i: u64| match i {
            61 => LogEntry {
                index: 61,
                term: 2,
                op: OwnedOp::Delete {
                    key: b"k0".to_vec(),
                },
            },
            62 => LogEntry {
                index: 62,
                term: 3,
                op: OwnedOp::Put {
                    key: b"k9".to_vec(),
                    value: b"new".to_vec(),
                },
            },
            i => LogEntry {
                index: i,
                term: 1,
                op: OwnedOp::Put {
                    key: format!("k{}", i % 3).into_bytes(),
                    value: format!("v{i}").into_bytes(),
                },
            },
        };
        for i in 1..=62 {
            assert_eq!(
                s.entry(i).expect("entry"),
                Some(want(i)),
                "{name} entry {i}"
            );
        }
        assert_eq!(s.entry(63).expect("entry"), None, "{name}");
        s.sync().expect("sync");
        s.set_applied(55);
        s.compact().expect("compact");
        // Entries above the applied index survive compaction, whatever it moved.
        for i in 56..=62 {
            assert_eq!(
                s.entry(i).expect("entry"),
                Some(want(i)),
                "{name} entry {i} after compaction"
            );
        }
        // Applied ones are either still exact or gone, never wrong.
        for i in 1..=55 {
            if let Some(e) = s.entry(i).expect("entry") {
                assert_eq!(e, want(i), "{name} entry {i}");
            }
        }
        drop(s);
        let s = open(&dir, false);
        for i in 56..=62 {
            assert_eq!(
                s.entry(i).expect("entry"),
                Some(want(i)),
                "{name} entry {i} after reopen"
            );
        }
    }
}

/// A value of `n` bytes for key `k`, every byte depending on both.
fn large_value(k: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(131) ^ k).collect()
}

/// Values larger than a page (256-byte pages here) are stored in fragments: read
/// back, read as log entries, kept by compaction (which moves them), found again
/// after reopening, and carried by a snapshot into another store.
#[test]
fn list_values_larger_than_a_page_survive_compaction_reopen_and_snapshots() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("large.pool");
    let opts = ListOptions {
        page_size: 256,
        ..ListOptions::default()
    };
    let s = ListStore::create(&path, 256 * 1024, &opts).expect("create");
    let sizes = [300usize, 1000, 3000, 225, 40];
    let mut last = 0;
    let mut expect = std::collections::BTreeMap::new();
    for round in 0..3u8 {
        for (k, &n) in sizes.iter().enumerate() {
            last += 1;
            let key = vec![b'L', k as u8];
            let value = large_value(round ^ k as u8, n + usize::from(round));
            s.append(
                last,
                1,
                Op::Put {
                    key: &key,
                    value: &value,
                },
            )
            .expect("append");
            expect.insert(key, value);
        }
    }
    s.sync().expect("sync");
    let check = |s: &dyn Store, what: &str| {
        for (key, value) in &expect {
            assert_eq!(
                s.get(key, u64::MAX).expect("get").as_ref(),
                Some(value),
                "{what}"
            );
        }
    };
    check(&s, "before compaction");
    let entry = s.entry(last - 2).expect("entry").expect("present");
    assert!(
        matches!(&entry.op, raft_nvm::OwnedOp::Put { value, .. } if value.len() == 3002),
        "a large entry reads back whole"
    );
    s.set_applied(last);
    let stats = s.compact().expect("compact");
    assert!(stats.freed > 0, "the first two rounds were dead: {stats:?}");
    check(&s, "after compaction");
    s.close().expect("close");
    let s = ListStore::open(&path, &opts).expect("reopen");
    check(&s, "after reopening");
    assert_eq!(s.last_index(), last);
    s.set_applied(last);

    let (meta, stream) = s.snapshot(last).expect("snapshot");
    let items: Vec<_> = stream.collect::<Result<_, _>>().expect("stream");
    let other =
        ListStore::create(dir.path().join("other.pool"), 256 * 1024, &opts).expect("create");
    other
        .install_snapshot(meta, &mut items.into_iter())
        .expect("install");
    check(&other, "installed from a snapshot");
}

/// With the prefaulter on (it maps the pages the writer takes next from another
/// thread), appends across many fresh pages, a compaction that frees and reuses
/// pages, and a reopen keep every value.
#[test]
fn a_list_store_with_the_prefaulter_keeps_every_value() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("prefault.pool");
    let opts = ListOptions {
        page_size: 4096,
        prefault_pages: 64,
        ..ListOptions::default()
    };
    let s = ListStore::create(&path, 8 << 20, &opts).expect("create");
    let mut last = 0u64;
    for round in 0..3u8 {
        for k in 0..200u16 {
            last += 1;
            let key = k.to_le_bytes();
            let value = vec![round ^ k as u8; 700];
            s.append(
                last,
                1,
                Op::Put {
                    key: &key,
                    value: &value,
                },
            )
            .expect("append");
        }
        // Give the prefaulter a tick between rounds.
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    s.sync().expect("sync");
    s.set_applied(last);
    s.compact().expect("compact");
    s.close().expect("close");
    let s = ListStore::open(&path, &opts).expect("reopen");
    for k in 0..200u16 {
        assert_eq!(
            s.get(&k.to_le_bytes(), u64::MAX).expect("get"),
            Some(vec![2 ^ k as u8; 700])
        );
    }
}

/// A list store on a file (msync mode: its copies go by `pwrite`) that syncs only
/// when told.
fn list_unbatched(dir: &TempDir, group: u32) -> ListStore {
    let opts = ListOptions {
        store: StoreOptions {
            group,
            sync_interval: None,
        },
        page_size: 256,
        ..ListOptions::default()
    };
    ListStore::create(dir.path().join("store.pool"), 1 << 20, &opts).expect("create")
}

/// A WAL store that syncs only when told.
fn wal_unbatched(dir: &TempDir, group: u32) -> WalStore {
    let opts = WalOptions {
        store: StoreOptions {
            group,
            sync_interval: None,
        },
        ..WalOptions::default()
    };
    WalStore::open(dir.path().join("wal"), &opts).expect("open")
}

/// What runs between a split sync's two halves.
type Between<'a> = &'a mut dyn FnMut() -> raft_nvm::Result<()>;

/// The steps of one sync split by another writer's appends and truncation: it
/// publishes only what it covered, capped at the truncation.
fn sync_split_by_writers(
    name: &str,
    s: &dyn Store,
    sync_with: &dyn Fn(Between<'_>) -> raft_nvm::Result<()>,
) {
    for i in 1..=4 {
        put(s, i, &format!("k{i}"), "old");
    }
    // Entries 3 and 4 are cut and written anew while the sync of 1..=4 runs.
    sync_with(&mut || {
        s.truncate_after(2, 2)?;
        for i in 3..=4 {
            s.append(
                i,
                2,
                Op::Put {
                    key: format!("k{i}").as_bytes(),
                    value: b"new",
                },
            )?;
        }
        Ok(())
    })
    .expect("sync");
    assert_eq!(
        s.durable_index(),
        2,
        "{name}: the sync covered the old 3 and 4, not the new ones"
    );
    s.sync().expect("sync");
    assert_eq!(s.durable_index(), 4, "{name}");
    // Appends during a sync wait for the next one.
    put(s, 5, "k5", "v");
    sync_with(&mut || {
        put(s, 6, "k6", "v");
        Ok(())
    })
    .expect("sync");
    assert_eq!(s.durable_index(), 5, "{name}");
    s.sync().expect("sync");
    assert_eq!(s.durable_index(), 6, "{name}");
    assert_eq!(get(s, "k4", 9).as_deref(), Some("new"), "{name}");
}

#[test]
fn a_sync_split_by_appends_and_a_truncation_publishes_only_what_it_covered() {
    let dir = TempDir::new().expect("tempdir");
    let list = list_unbatched(&dir, u32::MAX);
    sync_split_by_writers("list", &list, &|between| list.sync_with(between));
    let wal = wal_unbatched(&dir, u32::MAX);
    sync_split_by_writers("wal", &wal, &|between| wal.sync_with(between));
}

#[test]
fn a_group_sync_during_a_split_sync_is_not_undone_by_it() {
    // The list counts appends since the last finished sync: entry 2 completes a
    // group of 2 during the split sync, whose own end (entry 1) then publishes
    // nothing below what the group sync published.
    let dir = TempDir::new().expect("tempdir");
    let list = list_unbatched(&dir, 2);
    put(&list, 1, "k1", "v");
    list.sync_with(&mut || {
        put(&list, 2, "k2", "v");
        Ok(())
    })
    .expect("sync");
    assert_eq!(list.durable_index(), 2);
}

#[test]
fn batched_appends_read_back_across_pages_and_after_reopen() {
    for (name, open) in ENGINES {
        let dir = TempDir::new().expect("tempdir");
        // Values from 1 byte to about four 256-byte list pages: records that share
        // pages, fill them, split across them and cover several.
        let values: Vec<Vec<u8>> = (1..=60u64)
            .map(|i| large_value(i as u8, ((i * i * 7) % 1000 + 1) as usize))
            .collect();
        let keys: Vec<String> = (1..=60).map(|i| format!("k{}", i % 17)).collect();
        {
            let s = open(&dir, true);
            let batch: Vec<(u64, u64, Op<'_>)> = (0..60)
                .map(|i| {
                    let op = if i % 13 == 12 {
                        Op::Delete {
                            key: keys[i].as_bytes(),
                        }
                    } else {
                        Op::Put {
                            key: keys[i].as_bytes(),
                            value: &values[i],
                        }
                    };
                    (i as u64 + 1, 1, op)
                })
                .collect();
            s.append_batch(&batch[..25]).expect("first batch");
            s.append_batch(&batch[25..]).expect("second batch");
            assert_eq!(s.last_index(), 60, "{name}");
            // An out-of-order batch appends nothing.
            assert!(matches!(
                s.append_batch(&[(62, 1, Op::Noop)]),
                Err(StoreError::OutOfOrder { .. })
            ));
            assert_eq!(s.last_index(), 60, "{name}");
            s.sync().expect("sync");
        }
        let s = open(&dir, false);
        assert_eq!(s.last_index(), 60, "{name}");
        for i in 0..60 {
            let newest = (i..60).rev().find(|&j| keys[j] == keys[i]).unwrap_or(i);
            if newest != i {
                continue;
            }
            let want = (i % 13 != 12).then(|| values[i].clone());
            assert_eq!(
                s.get(keys[i].as_bytes(), 60).expect("get"),
                want,
                "{name}: {} at entry {}",
                keys[i],
                i + 1
            );
        }
    }
}
