//! A real three-node cluster on small list pools keeps serving long past the point
//! where its pools would have filled without compaction.
//!
//! Three `raft_node` processes run with `--pool-size 1 MiB`; four clients overwrite
//! a set of eight keys with 2000-byte values, several times the pool size in all.
//! Each write is a new record in every node's pool, so without compaction the
//! pools would fill after about a quarter of the run. The proof: every write
//! succeeds (the node's default `CompactionPolicy` compacts in time; no
//! out-of-memory refusal), every node is still running, the leader reports
//! compactions in `INFO`, and every key reads back as the last value written to it.
//! Takes a few seconds.

#[path = "proc_cluster/mod.rs"]
mod proc_cluster;

use std::time::Instant;

use proc_cluster::ProcCluster;
use raft_nvm::resp::{info_field, ClusterClient};

/// The pools' size.
const POOL: u64 = 1 << 20;
/// Bytes per value (a record of about 2 KiB: four to an 8 KiB page).
const VALUE: usize = 2000;
/// Writers, and keys per writer (each key has one writer, so its last value is
/// known).
const WRITERS: usize = 4;
const KEYS_PER_WRITER: usize = 2;
/// Total bytes of values written, as a multiple of the pool size.
const TIMES_POOL: u64 = 4;

fn value(key: &str, n: usize) -> Vec<u8> {
    let mut v = format!("{key}={n};").into_bytes();
    v.resize(VALUE, b'a' + (n % 26) as u8);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_pools_keep_serving_overwrites_past_their_size() {
    let started = Instant::now();
    let pool = POOL.to_string();
    let mut cluster = ProcCluster::start(&["--pool-size", &pool]);
    cluster.leader().await;
    let writes = (TIMES_POOL * POOL) as usize / VALUE;
    let per_writer = writes / WRITERS + 1;
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let addrs = cluster.client.clone();
            tokio::spawn(async move {
                let mut client = ClusterClient::new(addrs);
                let keys: Vec<String> = (0..KEYS_PER_WRITER).map(|k| format!("w{w}k{k}")).collect();
                let mut last = Vec::new();
                for n in 0..per_writer {
                    let key = &keys[n % keys.len()];
                    let v = value(key, n);
                    client
                        .set(key.as_bytes(), &v)
                        .await
                        .unwrap_or_else(|e| panic!("write {n} of {key} failed: {e}"));
                    last.push((key.clone(), n));
                }
                last.split_off(last.len() - keys.len())
            })
        })
        .collect();
    let mut expected = Vec::new();
    for t in tasks {
        expected.extend(t.await.expect("a writer finished"));
    }
    let written = (per_writer * WRITERS * VALUE) as u64;
    assert!(written >= TIMES_POOL * POOL);
    let mut client = ClusterClient::new(cluster.client.clone());
    for (key, n) in &expected {
        let got = client.get(key.as_bytes()).await.expect("read a key");
        assert_eq!(
            got.as_deref(),
            Some(&value(key, *n)[..]),
            "{key} reads back as its last write ({n})"
        );
    }
    cluster.assert_running();
    let leader = cluster.leader().await;
    for i in 0..3 {
        let info = cluster.info(i).await.expect("INFO");
        let field = |name: &str| info_field(&info, name).unwrap_or("?").to_string();
        eprintln!(
            "node {}: compactions {} (emergency {}, failed {}), oom_refusals {}, \
             full_appends {}, fill {}",
            i + 1,
            field("compactions"),
            field("compactions_emergency"),
            field("compactions_failed"),
            field("oom_refusals"),
            field("full_appends"),
            field("store_fill")
        );
        if i == leader {
            let runs: u64 = field("compactions").parse().expect("a count");
            assert!(runs > 0, "the leader compacted: {info}");
            assert_eq!(field("oom_refusals"), "0", "no write was refused");
        }
    }
    eprintln!(
        "{} writes of {VALUE} bytes ({:.1} × the {POOL}-byte pools) in {:.1?}",
        per_writer * WRITERS,
        written as f64 / POOL as f64,
        started.elapsed()
    );
}
