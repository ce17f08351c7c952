//! Durable mode: the writing workloads again on ordinary files in `--durable-dir`,
//! pmkit in the mode the pool detects there (msync): the 8-byte-value hash-table
//! insert beside PMDK, in a child process (it must load without
//! `PMEM_IS_PMEM_FORCE`, so it takes its own msync path); the B-tree insert and the
//! vector push; and the concurrent map on 1 and 2 threads. Each operation is a
//! transaction whose persists are `msync` calls, so these figures are the device's
//! (page cache to disk), not the structures': they say what durability on a file
//! costs today, one flush per transaction per thread.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use pmem_collections::{PBTreeMap, PConcurrentHashMap, PHashMap, PVec};
use serde_json::{json, Value};

use crate::pmdk::{Pmdk, PmdkPool};
use crate::pmdk_map::PmdkMap;
use crate::workloads::{
    btree_pool_size, err, keys, map_pool_size, median_ns, pmkit_heap, vec_pool_size, PoolFile, Val,
};

/// The flag that makes the example the PMDK child.
pub const CHILD_FLAG: &str = "--pmdk-durable-child";

/// The durable figures.
pub struct DurableRun {
    /// pmkit's pool mode there ("Msync").
    pub mode: String,
    /// pmkit's median ns per hash-table insert.
    pub pmkit: f64,
    /// PMDK's (`None`: not installed).
    pub pmdk: Option<f64>,
    /// pmkit's median ns per B-tree insert (8 B values).
    pub btree_insert: f64,
    /// pmkit's median ns per vector push.
    pub vec_push: f64,
    /// The concurrent map's operations per second on 1 and on 2 threads (medians
    /// of the rounds), `n` keys per round.
    pub cmap: (f64, f64),
}

/// Rounds per thread count of the durable concurrent-map figure.
const CMAP_ROUNDS: usize = 3;

/// Runs both sides, `n` inserts each.
pub fn run_durable(dir: &Path, n: u64, pmdk: bool) -> Result<DurableRun, String> {
    let file = PoolFile::new(dir, "durable-map");
    let (heap, mode) = pmkit_heap(&file, map_pool_size(n, 8), true)?;
    let mut map: PHashMap<u64, u64> = heap.root("map").map_err(err)?;
    let ks = keys(n, 0xd0d0);
    let pmkit = median_ns(n, |i| {
        map.insert(&heap, &ks[i as usize], &u64::make(i))
            .map(|_| ())
            .map_err(err)
    })?;
    drop((map, heap));
    let btree_insert = {
        let file = PoolFile::new(dir, "durable-btree");
        let (heap, _) = pmkit_heap(&file, btree_pool_size(n, 8), true)?;
        let mut map: PBTreeMap<u64, u64> = heap.root("map").map_err(err)?;
        median_ns(n, |i| {
            map.insert(&heap, &ks[i as usize], &u64::make(i))
                .map(|_| ())
                .map_err(err)
        })?
    };
    let vec_push = {
        let file = PoolFile::new(dir, "durable-vec");
        let (heap, _) = pmkit_heap(&file, vec_pool_size(n, 8), true)?;
        let mut v: PVec<u64> = heap.root("vec").map_err(err)?;
        median_ns(n, |i| v.push(&heap, &u64::make(i)).map_err(err))?
    };
    let cmap = {
        let file = PoolFile::new(dir, "durable-cmap");
        let (heap, _) = pmkit_heap(&file, map_pool_size(n, 8) * 2, true)?;
        let map: PConcurrentHashMap<u64, u64> = heap.root("cmap").map_err(err)?;
        let ks = keys(n, 0xc0c0);
        let (mut t1, mut t2) = (Vec::new(), Vec::new());
        for r in 0..CMAP_ROUNDS {
            let order: [usize; 2] = if r % 2 == 0 { [1, 2] } else { [2, 1] };
            for threads in order {
                let (ops, _) = crate::cmap::round(&heap, &map, &ks, threads)?;
                if threads == 1 { &mut t1 } else { &mut t2 }.push(ops);
            }
        }
        (crate::cmap::median(t1), crate::cmap::median(t2))
    };
    let pmdk = if pmdk {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let out = std::process::Command::new(exe)
            .arg(CHILD_FLAG)
            .arg(dir)
            .arg(n.to_string())
            .env("PMEM_IS_PMEM_FORCE", "0")
            .output()
            .map_err(|e| format!("PMDK durable child: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "PMDK durable child failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().unwrap_or_default();
        let v: Value =
            serde_json::from_str(line).map_err(|e| format!("PMDK durable child: {e}"))?;
        v["hashmap_insert_ns"].as_f64()
    } else {
        None
    };
    Ok(DurableRun {
        mode,
        pmkit,
        pmdk,
        btree_insert,
        vec_push,
        cmap,
    })
}

/// The child process of the durable PMDK figure: prints one JSON line.
pub fn pmdk_child(args: &[String]) -> ExitCode {
    let run = || -> Result<Value, String> {
        let dir = PathBuf::from(args.first().ok_or("missing directory")?);
        let n: u64 = args
            .get(1)
            .ok_or("missing count")?
            .parse()
            .map_err(|e| format!("count: {e}"))?;
        let lib = Pmdk::load()?;
        let f = PoolFile::new(&dir, "durable-pmdk");
        let pool = PmdkPool::create(&lib, &f.0, map_pool_size(n, 8) * 2)?;
        let t = PmdkMap::create(&pool, crate::PMDK_INITIAL_CAPACITY, 8)?;
        let ks = keys(n, 0xd0d0);
        let ins = median_ns(n, |i| {
            t.insert(ks[i as usize], u64::make(i).bytes()).map(|_| ())
        })?;
        Ok(json!({ "hashmap_insert_ns": ins }))
    };
    match run() {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("collections_bench child: {e}");
            ExitCode::FAILURE
        }
    }
}
