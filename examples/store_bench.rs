//! The thesis's table 4.2 (insert / get / delete on 20,000 keys), plus recovery and
//! snapshot transfer, for the persistent-list store and the write-ahead-log store.
//!
//! ```text
//! cargo run --release --example store_bench -- [--json] [--quick] [--keys N]
//!           [--startup-keys N] [--rounds N] [--shm DIR] [--disk DIR] [--engines LIST]
//! ```
//!
//! Engines (same `Store` trait, group durability k = 10, 10-byte keys and values):
//! * `list` — the list store in a forced-DAX pool on tmpfs (`/dev/shm`): real
//!   `clwb` + `sfence`, the instruction cost persistent memory would pay; **not
//!   durable** on this machine (no PM), which the table says;
//! * `list_file` — the list store in a pool on a plain file (msync mode: durable);
//! * `wal` — the WAL store on a plain file (fsync per group: durable);
//! * `wal_tmpfs` — the WAL store on tmpfs (fsync is nearly free there), for
//!   orientation.
//!
//! Each figure is the median over `--rounds` fresh stores of the average ns per
//! operation. Startup is the time to open (recover) a store holding `--startup-keys`
//! keys; snapshot transfer streams such a store into an empty one of the same engine.
//! With `--json` the last line is one JSON object (keys `<engine>.insert_ns`,
//! `<engine>.get_ns`, `<engine>.delete_ns`, `<engine>.startup_ms_50k`,
//! `<engine>.snapshot_transfer_ms_50k`, `<engine>.flushes_per_insert`,
//! `<engine>.fences_per_insert`, `<engine>.msyncs_per_insert`,
//! `<engine>.compact_ms` and `<engine>.compact_max_pause_us` (compaction of the 2N
//! records after the deletes, all applied; the pause is the longest hold of a lock
//! readers or writers wait on — for the WAL, the whole snapshot), and the peers
//! `btreemap.lookup_ns` and `btreemap.insert_random_ns`: a bare `BTreeMap` doing the
//! index's part of a get and of a delete on the same keys in the same order, the
//! floor for an index of this shape on this machine.

#[path = "../benches/common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "common/progress.rs"]
mod progress;
#[path = "common/ten_byte_keys.rs"]
mod ten_byte_keys;

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use pmem_core::{Counters, ModeRequest};
use raft_nvm::{ListOptions, ListStore, Op, Store, WalOptions, WalStore};
use serde_json::{Map, Value};
use ten_byte_keys::{key, value};

/// Targets of the issue (thesis: 884 / 340 / 612 ns on Optane; 40 ms startup).
const TARGET_INSERT_NS: f64 = 400.0;
const TARGET_GET_NS: f64 = 150.0;
const TARGET_DELETE_NS: f64 = 400.0;
const TARGET_STARTUP_MS: f64 = 20.0;

/// The thesis's table 4.2 (insert / get / delete), recovery and snapshot transfer,
/// for the persistent-list store and the write-ahead-log store.
#[derive(Parser, Debug)]
#[command(name = "store_bench")]
struct Args {
    /// End the output with one line of JSON holding the figures.
    #[arg(long)]
    json: bool,
    /// 2,000 keys, 5,000 startup keys, 1 round (CI); the flags below override it.
    #[arg(long)]
    quick: bool,
    /// Keys per insert/get/delete run [default: 20000].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    keys: Option<u64>,
    /// Keys in the recovery and snapshot runs [default: 50000].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    startup_keys: Option<u64>,
    /// Fresh stores per engine; medians are reported [default: 5].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    rounds: Option<u64>,
    /// Tmpfs directory for the forced-DAX pool (/dev/shm, else ./target, when not given).
    #[arg(long, value_name = "DIR", default_value_os_t = common::default_dir())]
    shm: PathBuf,
    /// Directory on a real file system.
    #[arg(long, value_name = "DIR", default_value = "target/store_bench")]
    disk: PathBuf,
    /// Comma-separated subset of the engines.
    #[arg(
        long,
        value_name = "LIST",
        value_enum,
        value_delimiter = ',',
        default_value = "list,list_file,wal,wal_tmpfs"
    )]
    engines: Vec<Engine>,
}

/// One run's settings, `--quick` and the explicit flags resolved.
struct Config {
    json: bool,
    keys: u64,
    startup_keys: u64,
    rounds: usize,
    shm: PathBuf,
    disk: PathBuf,
    engines: Vec<Engine>,
}

impl Config {
    /// The settings `args` ask for: an explicit size wins over `--quick`'s.
    fn new(args: Args) -> Config {
        let (keys, startup_keys, rounds) = if args.quick {
            (2_000, 5_000, 1)
        } else {
            (20_000, 50_000, 5)
        };
        Config {
            json: args.json,
            keys: args.keys.unwrap_or(keys),
            startup_keys: args.startup_keys.unwrap_or(startup_keys),
            rounds: args
                .rounds
                .map_or(rounds, |r| usize::try_from(r).unwrap_or(usize::MAX)),
            shm: args.shm,
            disk: args.disk,
            engines: args.engines,
        }
    }
}

/// An engine configuration under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Engine {
    List,
    #[value(name = "list_file")]
    ListFile,
    Wal,
    #[value(name = "wal_tmpfs")]
    WalTmpfs,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::List => "list",
            Engine::ListFile => "list_file",
            Engine::Wal => "wal",
            Engine::WalTmpfs => "wal_tmpfs",
        }
    }

    fn place(self, cfg: &Config) -> &Path {
        match self {
            Engine::List | Engine::WalTmpfs => &cfg.shm,
            Engine::ListFile | Engine::Wal => &cfg.disk,
        }
    }

    fn list_options(self) -> ListOptions {
        ListOptions {
            mode: match self {
                Engine::List => ModeRequest::ForceDax,
                _ => ModeRequest::Auto,
            },
            ..ListOptions::default()
        }
    }

    /// Where the store named `tag` lives.
    fn path(self, dir: &Path, tag: &str) -> PathBuf {
        let name = format!("store_bench-{}-{tag}-{}", self.name(), std::process::id());
        dir.join(name)
    }

    /// Creates a fresh store under `dir` (named `tag`) sized for `keys` records.
    fn create(self, dir: &Path, tag: &str, keys: u64) -> Result<Box<dyn Store>, String> {
        self.remove(dir, tag);
        // ~56 B per record, twice over (inserts and deletes), plus slack.
        let size = ((keys * 2 * 64 * 2).max(1 << 20) + (1 << 20)).next_multiple_of(4096);
        self.open_store(dir, tag, Some(size))
    }

    /// Opens (recovers) the store named `tag`.
    fn reopen(self, dir: &Path, tag: &str) -> Result<Box<dyn Store>, String> {
        self.open_store(dir, tag, None)
    }

    /// Creates a list pool of `create` bytes, or opens an existing store.
    fn open_store(
        self,
        dir: &Path,
        tag: &str,
        create: Option<u64>,
    ) -> Result<Box<dyn Store>, String> {
        let path = self.path(dir, tag);
        let store: Result<Box<dyn Store>, _> = match (self, create) {
            (Engine::List | Engine::ListFile, Some(size)) => {
                ListStore::create(&path, size, &self.list_options()).map(|s| Box::new(s) as _)
            }
            (Engine::List | Engine::ListFile, None) => {
                ListStore::open(&path, &self.list_options()).map(|s| Box::new(s) as _)
            }
            (Engine::Wal | Engine::WalTmpfs, _) => {
                WalStore::open(&path, &WalOptions::default()).map(|s| Box::new(s) as _)
            }
        };
        store.map_err(|e| format!("{}: {e}", path.display()))
    }

    fn remove(self, dir: &Path, tag: &str) {
        let path = self.path(dir, tag);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// A fixed pseudo-random permutation of `0..n`.
fn shuffled(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    common::Rng::new(0x9e37_79b9_7f4a_7c15).shuffle(&mut v);
    v
}

/// Inserts keys `0..n` as entries `1..=n` and syncs.
fn insert_keys(store: &dyn Store, n: u64) -> Result<(), String> {
    for i in 0..n {
        let op = Op::Put {
            key: &key(i),
            value: &value(i),
        };
        store.append(i + 1, 1, op).map_err(|x| x.to_string())?;
    }
    store.sync().map_err(|x| x.to_string())
}

/// Per-operation figures of one round.
struct Round {
    insert_ns: f64,
    get_ns: f64,
    delete_ns: f64,
    insert_counters: Counters,
    compact_ms: f64,
    compact_pause_us: f64,
}

fn one_round(engine: Engine, cfg: &Config, r: usize) -> Result<Round, String> {
    let e = |x: raft_nvm::StoreError| x.to_string();
    let tag = format!("ops{r}");
    let dir = engine.place(cfg);
    let store = engine.create(dir, &tag, cfg.keys)?;
    let n = cfg.keys;
    let before = Counters::current();
    let t = Instant::now();
    insert_keys(&*store, n)?;
    let insert_ns = t.elapsed().as_nanos() as f64 / n as f64;
    let insert_counters = Counters::since(before);
    store.set_applied(n);
    let order = shuffled(n);
    let t = Instant::now();
    let mut found = 0u64;
    for &i in &order {
        found += u64::from(store.get(&key(i), n).map_err(e)?.is_some());
    }
    let get_ns = t.elapsed().as_nanos() as f64 / n as f64;
    if found != n {
        return Err(format!(
            "{}: only {found} of {n} keys read back",
            engine.name()
        ));
    }
    let t = Instant::now();
    for (j, &i) in order.iter().enumerate() {
        store
            .append(n + 1 + j as u64, 1, Op::Delete { key: &key(i) })
            .map_err(e)?;
    }
    store.sync().map_err(e)?;
    let delete_ns = t.elapsed().as_nanos() as f64 / n as f64;
    if store.get(&key(0), 2 * n).map_err(e)?.is_some() {
        return Err(format!("{}: a deleted key is still visible", engine.name()));
    }
    // Everything applied: compaction drops all 2n records.
    store.set_applied(2 * n);
    let stats = store.compact().map_err(e)?;
    drop(store);
    engine.remove(dir, &tag);
    Ok(Round {
        insert_ns,
        get_ns,
        delete_ns,
        insert_counters,
        compact_ms: stats.total.as_secs_f64() * 1e3,
        compact_pause_us: stats.max_pause.as_secs_f64() * 1e6,
    })
}

/// Startup (recovery) time and snapshot transfer of a store with `startup_keys` keys.
fn startup(engine: Engine, cfg: &Config) -> Result<(f64, f64), String> {
    let e = |x: raft_nvm::StoreError| x.to_string();
    let dir = engine.place(cfg);
    let n = cfg.startup_keys;
    {
        let store = engine.create(dir, "startup", n)?;
        insert_keys(&*store, n)?;
    }
    let t = Instant::now();
    let store = engine.reopen(dir, "startup")?;
    let startup_ms = t.elapsed().as_secs_f64() * 1e3;
    if store.last_index() != n {
        return Err(format!(
            "{}: recovered {} of {n} entries",
            engine.name(),
            store.last_index()
        ));
    }
    store.set_applied(n);
    let target = engine.create(dir, "install", n)?;
    let t = Instant::now();
    {
        let (meta, items) = store.snapshot(n).map_err(e)?;
        let mut items = items.map_while(Result::ok);
        target.install_snapshot(meta, &mut items).map_err(e)?;
    }
    let transfer_ms = t.elapsed().as_secs_f64() * 1e3;
    if target.get(&key(n - 1), n).map_err(e)?.as_deref() != Some(&value(n - 1)[..]) {
        return Err(format!(
            "{}: the installed snapshot misses keys",
            engine.name()
        ));
    }
    drop(store);
    drop(target);
    engine.remove(dir, "startup");
    engine.remove(dir, "install");
    Ok((startup_ms, transfer_ms))
}

/// The peers of `get` and `delete`: a bare `BTreeMap` keyed like the index (the
/// same 24-byte encoding, compared as the index compares its inline keys: three
/// big-endian words), no lock, no media: the lookup of the same keys in the same
/// order, and the insertion of a second version of each key in that (random)
/// order, which is what a delete does to the index. Returns (lookup ns, insert
/// ns), medians of 5.
fn btreemap_peer_ns(n: u64) -> (f64, f64) {
    let inline = |i: u64, ts: u64| -> [u64; 3] {
        let mut k = [0u8; 24];
        k[..2].copy_from_slice(&10u16.to_be_bytes());
        k[2..12].copy_from_slice(&key(i));
        k[12..20].copy_from_slice(&ts.to_be_bytes());
        let word = |w: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&k[w * 8..w * 8 + 8]);
            u64::from_be_bytes(b)
        };
        [word(0), word(1), word(2)]
    };
    let order = shuffled(n);
    let (mut lookups, mut inserts) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let mut map: std::collections::BTreeMap<[u64; 3], u64> =
            (0..n).map(|i| (inline(i, i + 1), i)).collect();
        let t = Instant::now();
        let mut sum = 0u64;
        for &i in &order {
            let probe = inline(i, n);
            sum = sum.wrapping_add(map.range(..=probe).next_back().map_or(0, |e| *e.1));
        }
        std::hint::black_box(sum);
        lookups.push(t.elapsed().as_nanos() as f64 / n as f64);
        let t = Instant::now();
        for (j, &i) in order.iter().enumerate() {
            map.insert(inline(i, n + 1 + j as u64), i);
        }
        inserts.push(t.elapsed().as_nanos() as f64 / n as f64);
        std::hint::black_box(&map);
    }
    (median(lookups), median(inserts))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run(cfg: &Config) -> Result<(), String> {
    std::fs::create_dir_all(&cfg.disk).map_err(|e| format!("{}: {e}", cfg.disk.display()))?;
    let mut json = Map::new();
    println!(
        "store_bench: {} keys of 10 B, 10 B values, k = 10, median of {} round(s); startup and snapshot with {} keys",
        cfg.keys, cfg.rounds, cfg.startup_keys
    );
    println!(
        "{:<10} {:>10} {:>9} {:>10} {:>10} {:>9} {:>9} {:>11} {:>13}  durable?",
        "engine",
        "insert ns",
        "get ns",
        "delete ns",
        "flush/ins",
        "fence/ins",
        "msync/ins",
        "startup ms",
        "snapshot ms"
    );
    // A step per round and one for the startup runs, per engine, then the peer; each
    // engine's row prints with the bar off the screen.
    let steps = cfg.engines.len() * (cfg.rounds + 1) + 1;
    let section = progress::Section::new("store_bench", steps as u64);
    for &engine in &cfg.engines {
        let mut rounds = Vec::new();
        for r in 0..cfg.rounds {
            section.step(format!("{} round {}", engine.name(), r + 1));
            rounds.push(one_round(engine, cfg, r)?);
        }
        let per = |f: fn(&Counters) -> u64| {
            median(
                rounds
                    .iter()
                    .map(|r| f(&r.insert_counters) as f64 / cfg.keys as f64)
                    .collect(),
            )
        };
        let insert = median(rounds.iter().map(|r| r.insert_ns).collect());
        let get = median(rounds.iter().map(|r| r.get_ns).collect());
        let delete = median(rounds.iter().map(|r| r.delete_ns).collect());
        let flushes = per(|c| c.lines_flushed);
        let fences = per(|c| c.fences);
        let msyncs = per(|c| c.msyncs);
        let compact_ms = median(rounds.iter().map(|r| r.compact_ms).collect());
        let compact_pause_us = median(rounds.iter().map(|r| r.compact_pause_us).collect());
        section.step(format!("{} startup and snapshot", engine.name()));
        let (startup_ms, transfer_ms) = startup(engine, cfg)?;
        let durable = match engine {
            Engine::List => "no (forced DAX on tmpfs)",
            Engine::WalTmpfs => "no (tmpfs)",
            _ => "yes",
        };
        progress::outln!(
            "{:<10} {insert:>10.0} {get:>9.0} {delete:>10.0} {flushes:>10.2} {fences:>9.2} {msyncs:>9.3} {startup_ms:>11.1} {transfer_ms:>13.1} {compact_ms:>10.2} {compact_pause_us:>9.0}  {durable}",
            engine.name()
        );
        let name = engine.name();
        for (k, v) in [
            ("insert_ns", insert),
            ("get_ns", get),
            ("delete_ns", delete),
            ("flushes_per_insert", flushes),
            ("fences_per_insert", fences),
            ("msyncs_per_insert", msyncs),
            ("startup_ms_50k", startup_ms),
            ("snapshot_transfer_ms_50k", transfer_ms),
            ("compact_ms", compact_ms),
            ("compact_max_pause_us", compact_pause_us),
        ] {
            json.insert(
                format!("{name}.{k}"),
                Value::from((v * 1000.0).round() / 1000.0),
            );
        }
    }
    section.step("btreemap peer");
    let (peer, peer_insert) = btreemap_peer_ns(cfg.keys);
    drop(section);
    println!(
        "{:<10} {:>10} {peer:>9.0} {peer_insert:>10.0}   (peers: bare BTreeMap lookup / random-order insert)",
        "btreemap", "-"
    );
    for (k, v) in [
        ("btreemap.lookup_ns", peer),
        ("btreemap.insert_random_ns", peer_insert),
    ] {
        json.insert(k.into(), Value::from((v * 1000.0).round() / 1000.0));
    }
    let fig = |k: &str| json.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    println!();
    println!("targets (list engine, k = 10):");
    for (what, key, target) in [
        ("insert", "list.insert_ns", TARGET_INSERT_NS),
        ("get", "list.get_ns", TARGET_GET_NS),
        ("delete", "list.delete_ns", TARGET_DELETE_NS),
        ("startup", "list.startup_ms_50k", TARGET_STARTUP_MS),
    ] {
        let v = fig(key);
        let verdict = if v <= target { "met" } else { "NOT met" };
        println!("  {what:<8} {v:>10.1} (target <= {target}) {verdict}");
    }
    println!(
        "  list get / bare BTreeMap lookup = {:.2}; list delete / bare random insert = {:.2}",
        fig("list.get_ns") / peer,
        fig("list.delete_ns") / peer_insert
    );
    if cfg.startup_keys != 50_000 {
        println!(
            "  (startup measured with {} keys, not 50,000)",
            cfg.startup_keys
        );
    }
    if cfg.json {
        println!("{}", Value::Object(json));
    }
    Ok(())
}

fn main() {
    let cfg = Config::new(Args::parse());
    if let Err(e) = run(&cfg) {
        eprintln!("store_bench: {e}");
        std::process::exit(1);
    }
}
