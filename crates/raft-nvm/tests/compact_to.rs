//! `Store::compact_to`: compaction with its base capped, on both engines. Every
//! entry above the cap keeps its record (a layer above, such as openraft's purge,
//! still reads applied entries back), and the store still recovers after it.

use raft_nvm::{ListOptions, ListStore, Op, Store, StoreOptions, WalOptions, WalStore};

fn fill(store: &dyn Store, n: u64) {
    for i in 1..=n {
        let key = format!("k{}", i % 4);
        let value = format!("value-{i}-{}", "x".repeat(40));
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
        // Syncs along the way: the list compacts only pages below the previous
        // sync's end.
        if i % 10 == 0 {
            store.sync().expect("sync");
        }
    }
    store.sync().expect("sync");
}

fn check_capped(store: &dyn Store, n: u64, cap: u64) {
    store.set_applied(n - 2);
    store.compact_to(cap).expect("compact_to");
    for i in cap + 1..=n {
        let e = store.entry(i).expect("entry");
        assert_eq!(e.map(|e| e.index), Some(i), "entry {i} above the cap {cap}");
    }
    // Uncapped, the applied entries may go: the cap was what kept them.
    store.compact().expect("compact");
    assert!(
        (cap + 1..=n - 2).any(|i| store.entry(i).expect("entry").is_none()),
        "an uncapped compaction dropped nothing the cap kept: the test shows nothing"
    );
}

fn opts() -> ListOptions {
    ListOptions {
        store: StoreOptions {
            group: 1000,
            sync_interval: None,
        },
        page_size: 256,
        mode: pmem_core::ModeRequest::ForceDax,
        ..ListOptions::default()
    }
}

#[test]
fn the_list_keeps_every_entry_above_the_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pool");
    let n = 60;
    {
        let store = ListStore::create(&path, 256 * 1024, &opts()).expect("create");
        fill(&store, n);
        check_capped(&store, n, 10);
        store.close().expect("close");
    }
    let store = ListStore::open(&path, &opts()).expect("reopen");
    assert_eq!(store.last_index(), n);
}

#[test]
fn the_wal_keeps_every_entry_above_the_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = WalOptions {
        store: StoreOptions {
            group: 1000,
            sync_interval: None,
        },
        snapshot_every: 0,
    };
    let n = 60;
    {
        let store = WalStore::open(dir.path(), &opts).expect("open");
        fill(&store, n);
        check_capped(&store, n, 10);
        store.sync_clean().expect("sync");
    }
    let store = WalStore::open(dir.path(), &opts).expect("reopen");
    assert_eq!(store.last_index(), n);
}
