//! Loom models of the list store's concurrent publication (run with
//! `RUSTFLAGS="--cfg loom" cargo test -p raft-nvm --no-default-features --test loom_list --release`).
//!
//! Under `--cfg loom` the store's locks and atomics are loom's, so every
//! interleaving of their acquisitions (up to the preemption bound) is explored:
//! * **durable tail**: a reader that sees `durable_index() >= i` must read entry
//!   `i`'s value (the index entry is published before the durable index moves);
//! * **compaction's index swap**: readers running during a compaction, and an
//!   appender reusing the pages it frees, always read the right value (a location
//!   is never used after its page went back to the free list);
//! * **a sync beside a writer**: the sync thread flushes and fences without the
//!   tail lock while another thread appends, truncates and rewrites, and a reader
//!   that sees `durable_index() >= i` reads the entry `i` that is in the log; no
//!   interleaving deadlocks or publishes an index the log no longer holds.
#![cfg(loom)]

use std::sync::Arc;

use loom::thread;
use pmem_core::{ModeRequest, Pool};
use raft_nvm::{ListOptions, ListStore, Op, Store, StoreOptions};

fn opts(group: u32) -> ListOptions {
    ListOptions {
        store: StoreOptions {
            group,
            sync_interval: None,
        },
        page_size: 256,
        mode: ModeRequest::Volatile,
        compact_interval: None,
        prefault_pages: 0,
    }
}

fn store(group: u32) -> ListStore {
    let o = opts(group);
    let pool = Pool::anonymous(&ListStore::pool_options(64 * 1024, &o)).expect("pool");
    ListStore::format(pool, &o).expect("format")
}

fn model(f: impl Fn() + Send + Sync + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

#[test]
fn durable_index_publishes_readable_entries() {
    model(|| {
        let s = Arc::new(store(1));
        let w = Arc::clone(&s);
        let writer = thread::spawn(move || {
            for i in 1..=2u64 {
                w.append(
                    i,
                    1,
                    Op::Put {
                        key: &[i as u8],
                        value: &[i as u8; 8],
                    },
                )
                .expect("append");
            }
        });
        for _ in 0..2 {
            let d = s.durable_index();
            for i in 1..=d {
                let v = s.get(&[i as u8], u64::MAX).expect("get");
                assert_eq!(
                    v.as_deref(),
                    Some(&[i as u8; 8][..]),
                    "entry {i} durable but unreadable"
                );
            }
        }
        writer.join().expect("writer");
        assert_eq!(s.durable_index(), 2);
    });
}

#[test]
fn compaction_swaps_the_index_under_concurrent_readers_and_writers() {
    model(|| {
        let s = Arc::new(store(4));
        // Key 3 written once (its record stays in the first page, which compaction
        // rewrites), then three keys rewritten until several pages are full; all
        // applied.
        s.append(
            1,
            1,
            Op::Put {
                key: &[3],
                value: &[3; 40],
            },
        )
        .expect("fill");
        let mut i = 1u64;
        for round in 0..6u8 {
            for k in 0..3u8 {
                i += 1;
                s.append(
                    i,
                    1,
                    Op::Put {
                        key: &[k],
                        value: &[round; 40],
                    },
                )
                .expect("fill");
            }
        }
        s.sync().expect("sync");
        s.set_applied(i);
        let last = i;
        let c = Arc::clone(&s);
        let compactor = thread::spawn(move || {
            c.compact().expect("compact");
        });
        let w = Arc::clone(&s);
        let writer = thread::spawn(move || {
            for j in 1..=3u64 {
                w.append(
                    last + j,
                    1,
                    Op::Put {
                        key: &[9],
                        value: &[7; 40],
                    },
                )
                .expect("append");
            }
            w.sync().expect("sync");
        });
        for _ in 0..2 {
            let v = s.get(&[3], last).expect("get");
            assert_eq!(
                v.as_deref(),
                Some(&[3u8; 40][..]),
                "key 3 read during compaction"
            );
        }
        compactor.join().expect("compactor");
        writer.join().expect("writer");
        for k in 0..3u8 {
            assert_eq!(
                s.get(&[k], u64::MAX).expect("get").as_deref(),
                Some(&[5u8; 40][..])
            );
        }
        assert_eq!(
            s.get(&[3], u64::MAX).expect("get").as_deref(),
            Some(&[3u8; 40][..])
        );
        assert_eq!(
            s.get(&[9], u64::MAX).expect("get").as_deref(),
            Some(&[7u8; 40][..])
        );
        let (used, free) = s.page_lists();
        assert_eq!(used.len() + free.len(), s.page_count() as usize);
    });
}

#[test]
fn a_sync_beside_appends_and_a_truncation_publishes_what_the_log_holds() {
    model(|| {
        // No group syncs: only the sync thread's sync makes entries durable.
        let s = Arc::new(store(u32::MAX));
        for i in 1..=2u64 {
            s.append(
                i,
                1,
                Op::Put {
                    key: &[i as u8],
                    value: &[1; 8],
                },
            )
            .expect("append");
        }
        let w = Arc::clone(&s);
        let writer = thread::spawn(move || {
            // Entry 2 is cut and written anew (term 2, another value).
            w.truncate_after(1, 2).expect("truncate");
            w.append(
                2,
                2,
                Op::Put {
                    key: &[2],
                    value: &[2; 8],
                },
            )
            .expect("append");
        });
        let y = Arc::clone(&s);
        let syncer = thread::spawn(move || y.sync().expect("sync"));
        let d = s.durable_index();
        assert!(d <= 2, "durable index {d} beyond the log");
        if d >= 1 {
            assert_eq!(
                s.get(&[1], u64::MAX).expect("get").as_deref(),
                Some(&[1u8; 8][..])
            );
        }
        writer.join().expect("writer");
        syncer.join().expect("syncer");
        // The new entry 2 not covered by a finished sync: not durable either (a
        // sync that started before the truncation must not publish its old 2).
        if s.unsynced_records() > 0 {
            assert!(
                s.durable_index() < 2,
                "an unsynced entry 2 reported durable"
            );
        }
        // One more sync covers everything: the new entry 2 is durable and read.
        s.sync().expect("sync");
        assert_eq!(s.durable_index(), 2);
        assert_eq!(
            s.get(&[2], u64::MAX).expect("get").as_deref(),
            Some(&[2u8; 8][..])
        );
    });
}
