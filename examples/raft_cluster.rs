//! A local cluster of the replicated key-value service: N nodes on loopback in this
//! process, data under `./target/cluster/`, RESP clients welcome.
//!
//! ```text
//! cargo run --release --example raft_cluster -- [--nodes 3] [--engine list|wal]
//!           [--pool-mode auto|force-dax] [--data-dir target/cluster]
//!           [--raft-base 7100] [--client-base 6380]
//! redis-cli -p 6381 -c SET greeting hello      # -c follows the MOVED redirection
//! redis-cli -p 6382 -c GET greeting
//! redis-cli -p 6381 INFO
//! ```
//!
//! It prints each node's RESP address and runs until Ctrl-C (or SIGTERM), then stops
//! every node cleanly (store synced) and exits 0. Run it again: the data persists.
//!
//! A new data directory (no node has a store) founds a new cluster: every node
//! bootstraps. Otherwise every node reopens its store; if some node's store is gone
//! while others have theirs, it refuses to start (exit 1, one line): a member whose
//! data is lost must not come back empty on its own (see `raft_node --join`).

#[path = "raft_common/mod.rs"]
mod raft_common;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use raft_common::{init_logs, loopback_members, ClusterSpec, EngineKind, PoolMode};

#[derive(Parser, Debug)]
#[command(about = "A local Raft key-value cluster (RESP clients)")]
struct Args {
    /// Number of nodes.
    #[arg(long, default_value_t = 3)]
    nodes: u16,
    /// The storage engine.
    #[arg(long, value_enum, default_value_t = EngineKind::List)]
    engine: EngineKind,
    /// How the list engine maps its pools.
    #[arg(long, value_enum, default_value_t = PoolMode::Auto)]
    pool_mode: PoolMode,
    /// Where the nodes keep their stores.
    #[arg(long, default_value = "target/cluster")]
    data_dir: PathBuf,
    /// Node i's Raft port is raft-base + i.
    #[arg(long, default_value_t = 7100)]
    raft_base: u16,
    /// Node i's RESP port is client-base + i.
    #[arg(long, default_value_t = 6380)]
    client_base: u16,
}

fn main() -> ExitCode {
    init_logs();
    let args = Args::parse();
    if args.nodes == 0 || args.nodes > 9 {
        eprintln!("raft_cluster: --nodes must be between 1 and 9");
        return ExitCode::FAILURE;
    }
    raft_common::run_main("raft_cluster", run(args))
}

async fn run(args: Args) -> Result<(), String> {
    let spec = ClusterSpec {
        members: loopback_members(args.nodes, args.raft_base, args.client_base),
        kind: args.engine,
        mode: args.pool_mode,
        dir: args.data_dir.clone(),
    };
    let nodes = spec.start_all().await?;
    println!(
        "{} nodes, engine {:?}, data in {}",
        nodes.len(),
        args.engine,
        args.data_dir.display()
    );
    for n in &nodes {
        println!("node {}: RESP on {}", n.id(), n.client_addr());
    }
    println!(
        "ready; try: redis-cli -p {} -c SET k v   (Ctrl-C stops)",
        args.client_base + 1
    );
    raft_common::shutdown_signal().await;
    println!("stopping");
    let mut failed = None;
    for n in nodes {
        let id = n.id();
        if let Err(e) = n.shutdown().await {
            failed = Some(format!("node {id}: {e}"));
        }
    }
    match failed {
        Some(e) => Err(e),
        None => {
            println!("stopped cleanly");
            Ok(())
        }
    }
}
