//! openraft over pmkit's storage, against raft-nvm's own node: three nodes on
//! loopback per engine, all in this process, set requests with 10-byte keys and
//! values.
//!
//! ```text
//! cargo run --release --example openraft_bench -- [--json] [--quick]
//!           [--engines list_dax,list_file,wal,mem,raft_nvm] [--shm DIR] [--disk DIR]
//! ```
//!
//! Engines (openraft 0.10's `Raft` over `examples/common`'s loopback TCP network,
//! only the store differs):
//! * `list_dax` — openraft-list's `ListRaftStore`, the persistent list in
//!   forced-DAX pools on tmpfs (`--shm`, default `/dev/shm`): `clwb` + `sfence`,
//!   what persistent memory would pay; not durable on this machine (no PM);
//! * `list_file` — the same store in pools on plain files (`--disk`), made
//!   durable by `msync`;
//! * `wal` — `ListRaftStore` over raft-nvm's write-ahead log (`fdatasync` per
//!   group) on `--disk`;
//! * `mem` — openraft's memstore pattern (`examples/common/openraft_mem.rs`):
//!   nothing durable, the upper bound of any store under openraft;
//! * `raft_nvm` — raft-nvm's own node (its consensus, its network), the list in
//!   forced-DAX pools on `--shm` as `list_dax`; the requests are made in-process
//!   (`Node::call(KvRequest::Set)`) as openraft's are (`Raft::client_write`).
//!
//! Figures per engine: `seq_write_p50_us`/`p99`: one client, each write after the
//! previous one's answer; `c20_ops_per_sec` (and `c20_p50_us`/`p99`): 20 clients
//! writing at once. Every write is made at the leader, in this process: no client
//! network hop for any engine.
//!
//! With `--json` the last line is one JSON object:
//! `{"seq_write_p50_us": {engine: ..}, "c20_ops_per_sec": {engine: ..}, ...}`.
//!
//! All nodes and clients share this process and the machine's cores.

#[path = "../benches/common/mod.rs"]
mod common;
#[path = "common/openraft_mem.rs"]
mod openraft_mem;
#[path = "common/openraft_net.rs"]
mod openraft_net;
#[allow(dead_code)]
#[path = "common/progress.rs"]
mod progress;
#[path = "raft_common/mod.rs"]
mod raft_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use openraft::storage::RaftStateMachine;
use openraft::{BasicNode, Config, Raft};
use openraft_list::{ListRaftStore, Request, TypeConfig};
use openraft_mem::{KvState, MemLog, MemStateMachine};
use openraft_net::WireSnapshot;
use pmem_core::ModeRequest;
use raft_common::{loopback_members, ClusterSpec, EngineKind, PoolMode};
use raft_nvm::node::Node;
use raft_nvm::service::{KvReply, KvRequest};
use serde_json::{Map, Value};

#[derive(Parser, Debug)]
#[command(about = "openraft over pmkit's list, WAL and memory stores, and raft-nvm's node")]
struct Args {
    /// Print a final JSON line of all figures.
    #[arg(long)]
    json: bool,
    /// A tenth of the operations.
    #[arg(long)]
    quick: bool,
    /// Engines to run, comma-separated.
    #[arg(
        long,
        default_value = "list_dax,list_file,wal,mem,raft_nvm",
        value_delimiter = ','
    )]
    engines: Vec<String>,
    /// Directory of the forced-DAX pools (default: /dev/shm).
    #[arg(long)]
    shm: Option<PathBuf>,
    /// Directory of the plain files (list_file, wal).
    #[arg(long, default_value = "target")]
    disk: PathBuf,
    /// First loopback port of raft-nvm's node (its 3 Raft and 3 client ports).
    #[arg(long, default_value_t = 27_400)]
    port: u16,
}

/// Bytes of each list pool.
const POOL_BYTES: u64 = 256 << 20;
/// Concurrent clients of the second figure.
const CLIENTS: usize = 20;

/// One engine's figures, in table order.
type Row = Vec<(&'static str, f64)>;

fn main() -> ExitCode {
    let args = Args::parse();
    raft_common::init_logs_quiet();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("openraft_bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("openraft_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<(), String> {
    let shm = args.shm.clone().unwrap_or_else(common::default_dir);
    let tag = format!("pmkit-openraft-bench-{}", std::process::id());
    let mut table = Vec::new();
    let mut figures = Map::new();
    // A step per engine; its line prints with the bar off the screen.
    let section = progress::Section::new("openraft_bench", args.engines.len() as u64);
    for name in &args.engines {
        let name = name.as_str();
        section.step(name);
        let dir = match name {
            "list_dax" | "raft_nvm" => shm.join(&tag).join(name),
            _ => args.disk.join(&tag).join(name),
        };
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let row = match name {
            "list_dax" => {
                bench_openraft(list_nodes(&dir, ModeRequest::ForceDax).await?, args).await
            }
            "list_file" => bench_openraft(list_nodes(&dir, ModeRequest::Auto).await?, args).await,
            "wal" => bench_openraft(wal_nodes(&dir).await?, args).await,
            "mem" => bench_openraft(mem_nodes().await?, args).await,
            "raft_nvm" => bench_raft_nvm(&dir, args).await,
            other => Err(format!("unknown engine `{other}`")),
        };
        let _ = std::fs::remove_dir_all(&dir);
        let row = row.map_err(|e| format!("{name}: {e}"))?;
        progress::outln!("[{name}] {row:?}");
        for (k, v) in &row {
            let slot = figures
                .entry(k.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = slot {
                m.insert(name.to_owned(), Value::from((v * 100.0).round() / 100.0));
            }
        }
        table.push((name, row));
    }
    drop(section);
    for d in [shm.join(&tag), args.disk.join(&tag)] {
        let _ = std::fs::remove_dir_all(d);
    }
    print_table(&table);
    if args.json {
        println!("{}", Value::Object(figures));
    }
    Ok(())
}

/// Three openraft nodes over `stores`, on loopback, initialized; the leader's
/// no-op committed.
async fn start<SM>(stores: Vec<(ListOrMemLog, SM)>) -> Result<Vec<Raft<TypeConfig, SM>>, String>
where
    SM: RaftStateMachine<TypeConfig>,
    SM::SnapshotData: WireSnapshot,
{
    let config = Arc::new(Config::default().validate().map_err(|e| e.to_string())?);
    let mut members = BTreeMap::new();
    let mut nodes = Vec::new();
    for (i, (log, sm)) in stores.into_iter().enumerate() {
        let id = i as u64 + 1;
        // Bound before the node starts: its address is known, and cannot be taken.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener
            .local_addr()
            .map_err(|e| e.to_string())?
            .to_string();
        let net = openraft_net::Network::<TypeConfig, SM::SnapshotData>::default();
        let raft = match log {
            ListOrMemLog::List(s) => Raft::new(id, config.clone(), net, s, sm).await,
            ListOrMemLog::Mem(s) => Raft::new(id, config.clone(), net, s, sm).await,
        }
        .map_err(|e| e.to_string())?;
        tokio::spawn(openraft_net::serve(listener, raft.clone()));
        members.insert(id, BasicNode { addr });
        nodes.push(raft);
    }
    nodes[0]
        .initialize(members)
        .await
        .map_err(|e| e.to_string())?;
    Ok(nodes)
}

/// The log store of a node: openraft-list's or the memstore's.
enum ListOrMemLog {
    List(ListRaftStore),
    Mem(MemLog<TypeConfig>),
}

async fn list_nodes(
    dir: &Path,
    mode: ModeRequest,
) -> Result<Vec<Raft<TypeConfig, ListRaftStore>>, String> {
    // The adapter's options: one sync per openraft append.
    let opts = openraft_list::list_options(mode);
    let mut stores = Vec::new();
    for id in 1..=3 {
        let s = ListRaftStore::create_list(dir.join(format!("node{id}.pool")), POOL_BYTES, &opts)
            .map_err(|e| e.to_string())?;
        stores.push((ListOrMemLog::List(s.clone()), s));
    }
    start(stores).await
}

async fn wal_nodes(dir: &Path) -> Result<Vec<Raft<TypeConfig, ListRaftStore>>, String> {
    let mut stores = Vec::new();
    for id in 1..=3 {
        let s = ListRaftStore::open_wal(
            dir.join(format!("node{id}.wal")),
            &openraft_list::wal_options(),
        )
        .map_err(|e| e.to_string())?;
        stores.push((ListOrMemLog::List(s.clone()), s));
    }
    start(stores).await
}

async fn mem_nodes() -> Result<Vec<Raft<TypeConfig, MemStateMachine<TypeConfig, KvState>>>, String>
{
    let stores = (0..3)
        .map(|_| {
            (
                ListOrMemLog::Mem(MemLog::default()),
                MemStateMachine::default(),
            )
        })
        .collect();
    start(stores).await
}

/// The leader among `nodes`, once it has committed a write.
async fn leader<SM: RaftStateMachine<TypeConfig>>(
    nodes: &[Raft<TypeConfig, SM>],
) -> Result<Raft<TypeConfig, SM>, String> {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(l) = nodes[0].current_leader().await {
            let raft = &nodes[usize::try_from(l).map_err(|e| e.to_string())? - 1];
            let w = raft.client_write(set(b"warmup".to_vec())).await;
            if w.is_ok() {
                return Ok(raft.clone());
            }
        }
        if Instant::now() > end {
            return Err("no leader".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn set(key: Vec<u8>) -> Request {
    Request::Set {
        key,
        value: b"0123456789".to_vec(),
    }
}

/// A 10-byte key: `k` and 9 digits.
fn key(i: usize) -> Vec<u8> {
    format!("k{:09}", i % 1_000_000_000).into_bytes()
}

/// The sizes of the two workloads.
fn sizes(args: &Args) -> (usize, usize) {
    let scale = if args.quick { 10 } else { 1 };
    (5000 / scale, 2000 / scale)
}

async fn bench_openraft<SM: RaftStateMachine<TypeConfig>>(
    nodes: Vec<Raft<TypeConfig, SM>>,
    args: &Args,
) -> Result<Row, String> {
    let raft = leader(&nodes).await?;
    let (n, per) = sizes(args);
    let write = |i: usize| {
        let raft = raft.clone();
        async move {
            raft.client_write(set(key(i)))
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    };
    let row = workload(write, n, per).await;
    for r in nodes {
        r.shutdown().await.map_err(|e| e.to_string())?;
    }
    row
}

async fn bench_raft_nvm(dir: &Path, args: &Args) -> Result<Row, String> {
    let spec = ClusterSpec {
        members: loopback_members(3, args.port, args.port + 10),
        kind: EngineKind::List,
        mode: PoolMode::ForceDax,
        dir: dir.to_path_buf(),
        cluster_secret: None,
    };
    // Shared with the clients' futures; taken back to shut down.
    let nodes: Vec<Arc<Node>> = spec.start_all().await?.into_iter().map(Arc::new).collect();
    let end = Instant::now() + Duration::from_secs(20);
    let leader = loop {
        let mut found = None;
        for n in &nodes {
            let r = n
                .call(KvRequest::Set {
                    key: b"warmup".to_vec(),
                    value: b"1".to_vec(),
                })
                .await;
            if matches!(r, KvReply::Done) {
                found = Some(Arc::clone(n));
                break;
            }
        }
        if let Some(n) = found {
            break n;
        }
        if Instant::now() > end {
            return Err("no leader".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (n, per) = sizes(args);
    let write = |i: usize| {
        let node = Arc::clone(&leader);
        async move {
            match node
                .call(KvRequest::Set {
                    key: key(i),
                    value: b"0123456789".to_vec(),
                })
                .await
            {
                KvReply::Done => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    };
    let row = workload(write, n, per).await;
    drop(leader);
    for node in nodes {
        if let Ok(node) = Arc::try_unwrap(node) {
            node.shutdown().await.map_err(|e| e.to_string())?;
        }
    }
    row
}

/// `n` sequential writes, then `CLIENTS` clients of `per` writes each.
async fn workload<F, Fut>(write: F, n: usize, per: usize) -> Result<Row, String>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let mut h = hist();
    for i in 0..n {
        let t = Instant::now();
        write(i).await?;
        record(&mut h, t);
    }
    let mut row: Row = vec![
        ("seq_write_p50_us", q(&h, 0.5)),
        ("seq_write_p99_us", q(&h, 0.99)),
    ];

    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        // Each client's writes, made ahead as futures: the client awaits one
        // answer before it sends its next write.
        let futs: Vec<Fut> = (0..per).map(|j| write(n + c * per + j)).collect();
        tasks.push(tokio::spawn(async move {
            let mut h = hist();
            for f in futs {
                let t = Instant::now();
                f.await?;
                record(&mut h, t);
            }
            Ok::<_, String>(h)
        }));
    }
    let mut all = hist();
    for t in tasks {
        let h = t.await.map_err(|e| e.to_string())??;
        all.add(&h).map_err(|e| e.to_string())?;
    }
    let secs = started.elapsed().as_secs_f64();
    row.push(("c20_p50_us", q(&all, 0.5)));
    row.push(("c20_p99_us", q(&all, 0.99)));
    row.push(("c20_ops_per_sec", (CLIENTS * per) as f64 / secs));
    Ok(row)
}

fn hist() -> Histogram<u64> {
    // 1 µs .. 60 s, 3 significant digits; the bounds are constants.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

fn record(h: &mut Histogram<u64>, t: Instant) {
    let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
    h.saturating_record(us.max(1));
}

fn q(h: &Histogram<u64>, quantile: f64) -> f64 {
    h.value_at_quantile(quantile) as f64
}

fn print_table(table: &[(&str, Row)]) {
    println!();
    println!(
        "{:<10} {:>14} {:>14} {:>14} {:>14} {:>14}",
        "engine", "c1 p50 µs", "c1 p99 µs", "c20 p50 µs", "c20 p99 µs", "c20 ops/s"
    );
    for (name, row) in table {
        let get = |k: &str| row.iter().find(|(n, _)| *n == k).map_or(f64::NAN, |r| r.1);
        println!(
            "{:<10} {:>14.0} {:>14.0} {:>14.0} {:>14.0} {:>14.0}",
            name,
            get("seq_write_p50_us"),
            get("seq_write_p99_us"),
            get("c20_p50_us"),
            get("c20_p99_us"),
            get("c20_ops_per_sec")
        );
    }
}
