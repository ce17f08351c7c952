//! The storage's share of an openraft write: `RaftLogStorage::append` through the
//! adapter, until `IOFlushed` fires, on each engine, without openraft's core or a
//! network. Batches of 1 and 20 entries (openraft hands over what it gathered:
//! one entry per call at one client, about the client count at many) of `Set`s
//! with 10-byte keys and values.
//!
//! ```text
//! cargo run --release -p openraft-list --example adapter_append -- [DIR] [--json]
//! ```
//!
//! DIR (default: a temporary directory) is where the pools and WAL live: a DAX
//! file system for real persistent memory; elsewhere `list_dax` is a pool forced
//! to act as one (flushes and fences, no msync), and `list_file` the msync mode.

use std::time::{Duration, Instant};

use openraft::impls::leader_id_adv::LeaderId;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::type_config::TypeConfigExt;
use openraft::EntryPayload;
use openraft_list::{list_options, wal_options, Entry, ListRaftStore, LogId, Request, TypeConfig};
use pmem_core::ModeRequest;

const APPENDS: usize = 2000;

fn entry(index: u64) -> Entry {
    Entry {
        log_id: LogId::new(
            LeaderId {
                term: 1,
                node_id: 1,
            },
            index,
        ),
        payload: EntryPayload::Normal(Request::Set {
            key: format!("key{:07}", index % 10_000_000).into_bytes(),
            value: format!("val{:07}", index % 10_000_000).into_bytes(),
        }),
    }
}

/// `(p50 of one append until IOFlushed, entries per second)`.
async fn run(mut store: ListRaftStore, batch: usize) -> (Duration, f64) {
    let mut lat = Vec::with_capacity(APPENDS);
    let mut next = 0u64;
    let started = Instant::now();
    for _ in 0..APPENDS {
        let entries: Vec<Entry> = (0..batch as u64).map(|i| entry(next + i)).collect();
        next += batch as u64;
        let t = Instant::now();
        let (tx, rx) = TypeConfig::oneshot();
        store
            .append(entries, IOFlushed::signal(tx))
            .await
            .expect("append");
        rx.await.expect("callback").expect("flushed");
        lat.push(t.elapsed());
    }
    let total = started.elapsed();
    lat.sort();
    (lat[lat.len() / 2], next as f64 / total.as_secs_f64())
}

fn open(engine: &str, dir: &std::path::Path, tag: &str) -> ListRaftStore {
    match engine {
        "list_dax" => ListRaftStore::create_list(
            dir.join(format!("dax-{tag}.pool")),
            256 << 20,
            &list_options(ModeRequest::ForceDax),
        ),
        "list_file" => ListRaftStore::create_list(
            dir.join(format!("file-{tag}.pool")),
            256 << 20,
            &list_options(ModeRequest::Auto),
        ),
        _ => ListRaftStore::open_wal(dir.join(format!("wal-{tag}")), &wal_options()),
    }
    .expect("open")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let mut out = Vec::new();
    println!(
        "{:<10} {:>6} {:>12} {:>14}",
        "engine", "batch", "p50_us", "entries/s"
    );
    for engine in ["list_dax", "list_file", "wal"] {
        for batch in [1usize, 20] {
            let store = open(engine, &dir, &batch.to_string());
            let (p50, rate) = run(store, batch).await;
            let us = p50.as_secs_f64() * 1e6;
            println!("{engine:<10} {batch:>6} {us:>12.1} {rate:>14.0}");
            out.push(format!(
                "\"{engine}_b{batch}\":{{\"p50_us\":{us:.1},\"entries_per_sec\":{rate:.0}}}"
            ));
        }
    }
    if json {
        println!("{{{}}}", out.join(","));
    }
}
