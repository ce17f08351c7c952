//! pmkit's persistent list as openraft's log store and state machine: three
//! openraft nodes on loopback, each over its own `ListRaftStore`, and a client
//! doing sets and gets.
//!
//! ```text
//! cargo run --example openraft_kv                     # three nodes in this process
//! cargo run --example openraft_kv -- --node 1 --dir D --client 127.0.0.1:7001 \
//!     --peers 1=127.0.0.1:6001,2=127.0.0.1:6002,3=127.0.0.1:6003 [--init]
//! ```
//!
//! What a user writes is this file: one `ListRaftStore` per node, given to
//! `Raft::new` as both the log store and the state machine (the log and the
//! applied state are one structure), a network (here `examples/common`'s loopback
//! TCP), and reads through openraft's linearizable read, then the store's `get`.
//! With `--node`, one node per process on plain files (durable by msync), with a
//! client port: the `openraft_kill9` test runs three of them.

#[path = "common/openraft_app.rs"]
mod openraft_app;
#[path = "common/openraft_net.rs"]
mod openraft_net;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Parser;
use openraft::{BasicNode, Config, Raft, ReadPolicy, SnapshotPolicy};
use openraft_list::{ListRaftStore, Request, TypeConfig};
use pmem_core::ModeRequest;
use tokio::net::TcpListener;

#[derive(Parser)]
struct Args {
    /// Run only node ID (one node per process) instead of the three-node demo.
    #[arg(long)]
    node: Option<u64>,
    /// The node's data directory.
    #[arg(long, default_value = "target/openraft_kv")]
    dir: PathBuf,
    /// Every member's Raft address, `ID=ADDR,...`.
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// The node's client address.
    #[arg(long)]
    client: Option<std::net::SocketAddr>,
    /// Initialize the cluster with the members of `--peers`.
    #[arg(long)]
    init: bool,
    /// Snapshot (and purge the log) every N applied entries (openraft's default: 5000).
    #[arg(long, default_value_t = 5000)]
    snapshot_every: u64,
}

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Opens the node's list store in `dir`, creating it on the first start.
fn open_store(dir: &Path, mode: ModeRequest) -> Res<ListRaftStore> {
    let opts = openraft_list::list_options(mode);
    let pool = dir.join("node.pool");
    std::fs::create_dir_all(dir)?;
    Ok(if pool.exists() {
        ListRaftStore::open_list(&pool, &opts)?
    } else {
        ListRaftStore::create_list(&pool, 64 << 20, &opts)?
    })
}

/// Starts node `id` over `store`, serving Raft on `listener`, snapshotting every
/// `snapshot_every` entries.
async fn start(
    id: u64,
    listener: TcpListener,
    store: &ListRaftStore,
    snapshot_every: u64,
) -> Res<Raft<TypeConfig, ListRaftStore>> {
    let config = Config {
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_every),
        max_in_snapshot_log_to_keep: 0,
        ..Config::default()
    };
    let config = Arc::new(config.validate()?);
    let network = openraft_net::Network::<TypeConfig, std::fs::File>::default();
    let raft = Raft::new(id, config, network, store.clone(), store.clone()).await?;
    tokio::spawn(openraft_net::serve(listener, raft.clone()));
    Ok(raft)
}

#[tokio::main]
async fn main() -> Res<()> {
    let args = Args::parse();
    match args.node {
        Some(id) => node(id, &args).await,
        None => demo().await,
    }
}

/// Three nodes in this process on forced-DAX pools, a client doing sets and gets.
async fn demo() -> Res<()> {
    let dir = tempfile::tempdir()?;
    let mut members = BTreeMap::new();
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let store = open_store(&dir.path().join(format!("node{id}")), ModeRequest::ForceDax)?;
        nodes.push((start(id, listener, &store, 5000).await?, store));
        members.insert(id, BasicNode { addr });
    }
    nodes[0].0.initialize(members).await?;
    let (leader, store) = loop {
        if let Some(l) = nodes[0].0.current_leader().await {
            break &nodes[usize::try_from(l)? - 1];
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    println!("leader: node {}", leader.node_id());
    for (k, v) in [("apple", "red"), ("banana", "yellow"), ("apple", "green")] {
        let r = leader
            .client_write(Request::Set {
                key: k.into(),
                value: v.into(),
            })
            .await?;
        let previous = r
            .data
            .previous
            .map(|p| String::from_utf8_lossy(&p).into_owned());
        println!("set {k} = {v} at {} (was {previous:?})", r.log_id.index);
    }
    leader
        .client_write(Request::Delete {
            key: b"banana".to_vec(),
        })
        .await?;
    println!("delete banana");
    for k in ["apple", "banana"] {
        // Linearizable: confirm leadership, wait until applied, then read the store.
        leader.ensure_linearizable(ReadPolicy::ReadIndex).await?;
        let v = store
            .get(k.as_bytes())?
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        println!("get {k} -> {v:?}");
    }
    for (raft, _) in &nodes {
        raft.shutdown().await?;
    }
    Ok(())
}

/// One node per process on plain files (msync), with a client port.
async fn node(id: u64, args: &Args) -> Res<()> {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: a log sent to a file or a pipe stays text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let mut members = BTreeMap::new();
    for p in &args.peers {
        let (pid, addr) = p.split_once('=').ok_or("--peers: ID=ADDR")?;
        members.insert(
            pid.parse::<u64>()?,
            BasicNode {
                addr: addr.to_owned(),
            },
        );
    }
    let addr = members
        .get(&id)
        .ok_or("--node not in --peers")?
        .addr
        .clone();
    let store = open_store(&args.dir, ModeRequest::Auto)?;
    let listener = TcpListener::bind(&addr).await?;
    let raft = start(id, listener, &store, args.snapshot_every).await?;
    let client = TcpListener::bind(args.client.ok_or("--client ADDR")?).await?;
    tokio::spawn(openraft_app::serve_clients(client, raft.clone(), store));
    if args.init && !raft.is_initialized().await? {
        raft.initialize(members).await?;
    }
    println!("node {id} ready");
    tokio::signal::ctrl_c().await?;
    raft.shutdown().await?;
    Ok(())
}
