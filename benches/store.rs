//! Criterion benchmarks of raft-nvm's persistent-list store against its
//! write-ahead-log store, in one group per operation: the `store_bench` example's
//! insert and get (the thesis's table 4.2) with criterion's statistics and report.
//!
//! Engines (the same `Store` trait, group durability k = 10, 10-byte keys and
//! values):
//! * `list_dax`: the list store in a forced-DAX pool in `/dev/shm` (or
//!   `PMKIT_BENCH_DIR`): the `clwb` + `sfence` persistent memory would pay, **not
//!   durable** on a machine without PM;
//! * `list_file`: the list store on an ordinary file (msync mode: durable);
//! * `wal`: the WAL store on an ordinary file (an fsync per group: durable);
//! * `wal_tmpfs`: the WAL store in `/dev/shm` (fsync nearly free), for
//!   orientation beside `list_dax`.
//!
//! Ordinary files go to `PMKIT_BENCH_DISK_DIR`, else `./target`, else `.`.
//!
//! * `store_insert/<engine>`: one `append` of a put of a fresh key (every 10th
//!   syncs its group). A store is replaced by a fresh one, untimed, every
//!   [`MAX_ENTRIES`] appends.
//! * `store_get/<engine>`: a `get` of a random key in a store of [`GET_KEYS`] keys
//!   (all applied).
//!
//! Run: `cargo bench --bench store`; the report is target/criterion/report/index.html.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_main, Criterion};
use pmem_core::{splitmix64, ModeRequest};
use raft_nvm::{ListOptions, ListStore, Op, Store, WalOptions, WalStore};
use ten_byte_keys::{key, value};

#[path = "common/harness.rs"]
mod harness;
#[path = "../examples/common/ten_byte_keys.rs"]
mod ten_byte_keys;

/// Appends after which an insert benchmark starts a fresh store.
const MAX_ENTRIES: u64 = 50_000;
/// Keys of the store the gets run on (the thesis's 20,000).
const GET_KEYS: u64 = 20_000;
/// [`GET_KEYS`] in test mode (`cargo test --benches`: a debug build, one get).
const GET_KEYS_TEST: u64 = 500;

fn fail(what: &str, err: &dyn std::fmt::Display) -> ! {
    harness::fail("store", what, err)
}

/// An engine configuration under test.
#[derive(Clone, Copy)]
enum Engine {
    ListDax,
    ListFile,
    Wal,
    WalTmpfs,
}

impl Engine {
    const ALL: [Engine; 4] = [
        Engine::ListDax,
        Engine::ListFile,
        Engine::Wal,
        Engine::WalTmpfs,
    ];

    fn name(self) -> &'static str {
        match self {
            Engine::ListDax => "list_dax",
            Engine::ListFile => "list_file",
            Engine::Wal => "wal",
            Engine::WalTmpfs => "wal_tmpfs",
        }
    }

    /// Where the engine's store lives, named after `tag`.
    fn path(self, tag: &str) -> PathBuf {
        let dir = match self {
            Engine::ListDax | Engine::WalTmpfs => harness::bench_dir(),
            Engine::ListFile | Engine::Wal => disk_dir(),
        };
        dir.join(format!(
            "pmkit-store-criterion-{}-{tag}-{}",
            self.name(),
            std::process::id()
        ))
    }

    /// A fresh store named `tag` with room for `records` records.
    fn create(self, tag: &str, records: u64) -> StoreFile {
        let path = self.path(tag);
        remove(&path);
        let store: Result<Box<dyn Store>, _> = match self {
            Engine::ListDax | Engine::ListFile => {
                let opts = ListOptions {
                    mode: match self {
                        Engine::ListDax => ModeRequest::ForceDax,
                        _ => ModeRequest::Auto,
                    },
                    ..ListOptions::default()
                };
                // About 56 bytes per record, twice over, and slack.
                let size = ((records * 128).max(1 << 20) + (1 << 20)).next_multiple_of(4096);
                ListStore::create(&path, size, &opts).map(|s| Box::new(s) as _)
            }
            Engine::Wal | Engine::WalTmpfs => {
                WalStore::open(&path, &WalOptions::default()).map(|s| Box::new(s) as _)
            }
        };
        let store = store.unwrap_or_else(|e| fail(&format!("{}", path.display()), &e));
        StoreFile {
            store: Some(store),
            path,
        }
    }
}

/// A store and its file or directory, removed when dropped (after the store).
struct StoreFile {
    store: Option<Box<dyn Store>>,
    path: PathBuf,
}

impl StoreFile {
    fn store(&self) -> &dyn Store {
        match &self.store {
            Some(s) => &**s,
            None => fail("store", &"already closed"),
        }
    }
}

impl Drop for StoreFile {
    fn drop(&mut self) {
        drop(self.store.take());
        remove(&self.path);
    }
}

fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_dir_all(path);
}

fn disk_dir() -> PathBuf {
    std::env::var_os("PMKIT_BENCH_DISK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            ["target", "."]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_dir())
                .unwrap_or_else(|| PathBuf::from("."))
        })
}

/// Appends the put of key `i` as entry `i + 1`.
fn put(store: &dyn Store, i: u64) {
    let op = Op::Put {
        key: &key(i),
        value: &value(i),
    };
    if let Err(e) = store.append(i + 1, 1, op) {
        fail("append", &e);
    }
}

fn bench_insert(c: &mut Criterion) {
    let mut g = c.benchmark_group("store_insert");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(20);
    for engine in Engine::ALL {
        // The store and the next key (restarting at 0 in a fresh store).
        let mut state = (engine.create("insert", MAX_ENTRIES), 0u64);
        let mut done = 0u64;
        g.bench_function(engine.name(), |b| {
            b.iter_custom(|iters| {
                harness::timed_with_resets(
                    iters,
                    MAX_ENTRIES,
                    &mut done,
                    &mut state,
                    |(s, i)| {
                        put(s.store(), *i);
                        *i += 1;
                    },
                    |(s, i)| {
                        // The old store is closed and removed before the new one
                        // takes its name.
                        drop(s.store.take());
                        remove(&s.path);
                        *s = engine.create("insert", MAX_ENTRIES);
                        *i = 0;
                    },
                )
            })
        });
    }
    g.finish();
}

fn bench_get(c: &mut Criterion) {
    let n = if harness::test_mode() {
        GET_KEYS_TEST
    } else {
        GET_KEYS
    };
    let mut g = c.benchmark_group("store_get");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    for engine in Engine::ALL {
        let s = engine.create("get", n);
        let store = s.store();
        for i in 0..n {
            put(store, i);
        }
        if let Err(e) = store.sync() {
            fail("sync", &e);
        }
        store.set_applied(n);
        let mut seed = 1u64;
        g.bench_function(engine.name(), |b| {
            b.iter(|| {
                let i = splitmix64(&mut seed) % n;
                match store.get(&key(i), n) {
                    Ok(Some(v)) => black_box(v),
                    Ok(None) => fail("get", &format!("key {i} missing")),
                    Err(e) => fail("get", &e),
                }
            })
        });
    }
    g.finish();
}

/// The criterion group (its generated function has no doc comment of its own).
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench_insert, super::bench_get);
}

criterion_main!(group::benches);
