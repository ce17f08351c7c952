//! One node of the replicated key-value service: a Raft replica on the persistent
//! list (or the WAL baseline), its peers over TCP, its clients over RESP.
//!
//! ```text
//! cargo run --release --example raft_node -- --id 1 \
//!     --member 1=127.0.0.1:7101/127.0.0.1:6381 \
//!     --member 2=127.0.0.1:7102/127.0.0.1:6382 \
//!     --member 3=127.0.0.1:7103/127.0.0.1:6383 \
//!     --data-dir target/node1 --engine list --pool-mode auto
//! redis-cli -p 6381 -c SET greeting hello
//! ```
//!
//! Each `--member` is `ID=RAFT_ADDR/CLIENT_ADDR`, this node included. It runs until
//! Ctrl-C or SIGTERM (then syncs and exits 0); a store failure exits 1 with one line.

#[path = "raft_common/mod.rs"]
mod raft_common;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use raft_common::{engine, init_logs, parse_member, shutdown_signal, EngineKind, PoolMode};
use raft_nvm::node::{Node, NodeConfig};

#[derive(Parser, Debug)]
#[command(about = "One node of the Raft key-value service (RESP clients)")]
struct Args {
    /// This node's id.
    #[arg(long)]
    id: u16,
    /// A member as ID=RAFT_ADDR/CLIENT_ADDR (repeat for every node, this one included).
    #[arg(long = "member", value_parser = parse_member, required = true)]
    members: Vec<(u16, raft_nvm::node::Member)>,
    /// Where the store lives.
    #[arg(long)]
    data_dir: PathBuf,
    /// The storage engine.
    #[arg(long, value_enum, default_value_t = EngineKind::List)]
    engine: EngineKind,
    /// How the list engine maps its pool.
    #[arg(long, value_enum, default_value_t = PoolMode::Auto)]
    pool_mode: PoolMode,
    /// Milliseconds per Raft tick.
    #[arg(long, default_value_t = 10)]
    tick_ms: u64,
}

fn main() -> ExitCode {
    init_logs();
    let args = Args::parse();
    raft_common::run_main("raft_node", run(args))
}

async fn run(args: Args) -> Result<(), String> {
    std::fs::create_dir_all(&args.data_dir)
        .map_err(|e| format!("{}: {e}", args.data_dir.display()))?;
    let members = args.members.into_iter().collect();
    let mut cfg = NodeConfig::new(
        args.id,
        members,
        engine(args.engine, args.pool_mode, &args.data_dir, args.id),
    );
    cfg.tick = std::time::Duration::from_millis(args.tick_ms.max(1));
    let mut node = Node::start(cfg).await.map_err(|e| e.to_string())?;
    println!(
        "node {} serving RESP on {} (raft on {})",
        node.id(),
        node.client_addr(),
        node.raft_addr()
    );
    let stopped = tokio::select! {
        r = node.wait() => Some(r),
        _ = shutdown_signal() => None,
    };
    match stopped {
        Some(r) => r.map_err(|e| e.to_string()),
        None => {
            tracing::info!("shutting down");
            node.shutdown().await.map_err(|e| e.to_string())
        }
    }
}
