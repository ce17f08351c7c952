//! A local cluster of the replicated key-value service: N nodes on loopback in this
//! process, data under `./target/cluster/`, RESP clients welcome.
//!
//! ```text
//! cargo run --release --example raft_cluster -- [--nodes 3] [--engine list|wal]
//!           [--pool-mode auto|force-dax] [--data-dir target/cluster]
//!           [--raft-base 7100] [--client-base 6380] [--spares 0]
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
//!
//! `--cluster-secret-file PATH` makes the nodes authenticate each other with the
//! secret in that file, and `--requirepass-file PATH` makes clients `AUTH` first
//! (`redis-cli -a PASSWORD`); both files must be private (chmod 600). Every port
//! is on 127.0.0.1.
//!
//! `--spares N` also starts N spare nodes (ids after the founders'), each a
//! would-be learner: idle until the leader adds it (`RAFT.ADD-LEARNER`, the
//! command is printed), then it receives the log and can be promoted
//! (`RAFT.PROMOTE`) to replace a member (`RAFT.REMOVE-NODE`); the README walks
//! through it.

#[path = "raft_common/mod.rs"]
mod raft_common;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use raft_common::{engine, init_logs, loopback_members, ClusterSpec, EngineKind, PoolMode};
use raft_nvm::node::{Member, Node, NodeConfig};
use raft_nvm::replica::StartMode;
use raft_nvm::secret::Secret;

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
    /// Spare nodes started beside the founders, as would-be learners.
    #[arg(long, default_value_t = 0)]
    spares: u16,
    /// A file holding the cluster secret the nodes authenticate each other with
    /// (a regular file, chmod 600).
    #[arg(long, value_name = "PATH")]
    cluster_secret_file: Option<PathBuf>,
    /// A file holding the password clients must give with AUTH (chmod 600).
    #[arg(long, value_name = "PATH")]
    requirepass_file: Option<PathBuf>,
}

/// The secrets the flags name.
#[derive(Clone, Default)]
struct Secrets {
    cluster: Option<Secret>,
    requirepass: Option<Secret>,
}

impl Secrets {
    fn read(args: &Args) -> Result<Secrets, String> {
        let read = |path: &Option<PathBuf>| {
            path.as_deref()
                .map(Secret::from_file)
                .transpose()
                .map_err(|e| e.to_string())
        };
        Ok(Secrets {
            cluster: read(&args.cluster_secret_file)?,
            requirepass: read(&args.requirepass_file)?,
        })
    }

    fn apply(&self, cfg: &mut NodeConfig) {
        cfg.cluster_secret = self.cluster.clone();
        cfg.requirepass = self.requirepass.clone();
    }
}

fn main() -> ExitCode {
    init_logs();
    let args = Args::parse();
    if args.nodes == 0 || args.nodes > 9 {
        eprintln!("raft_cluster: --nodes must be between 1 and 9");
        return ExitCode::FAILURE;
    }
    if args.nodes + args.spares > 9 {
        eprintln!("raft_cluster: --nodes plus --spares must be at most 9");
        return ExitCode::FAILURE;
    }
    raft_common::run_main("raft_cluster", run(args))
}

async fn run(args: Args) -> Result<(), String> {
    let secrets = Secrets::read(&args)?;
    let spec = ClusterSpec {
        members: loopback_members(args.nodes, args.raft_base, args.client_base),
        kind: args.engine,
        mode: args.pool_mode,
        dir: args.data_dir.clone(),
        cluster_secret: secrets.cluster.clone(),
    };
    let mut nodes = spec.start_all_with(|cfg| secrets.apply(cfg)).await?;
    println!(
        "{} nodes, engine {:?}, data in {}",
        nodes.len(),
        args.engine,
        args.data_dir.display()
    );
    for n in &nodes {
        println!("node {}: RESP on {}", n.id(), n.client_addr());
    }
    let all = loopback_members(args.nodes + args.spares, args.raft_base, args.client_base);
    for (&id, &member) in all.range(args.nodes + 1..) {
        let node = start_spare(&spec, id, member, &secrets).await?;
        println!(
            "spare node {id}: RESP on {}; add it: redis-cli -p {} -c RAFT.ADD-LEARNER {id} {} {}",
            node.client_addr(),
            args.client_base + 1,
            member.raft,
            member.client
        );
        nodes.push(node);
    }
    let auth = if secrets.requirepass.is_some() {
        " -a PASSWORD"
    } else {
        ""
    };
    println!(
        "ready; try: redis-cli -p {}{auth} -c SET k v   (Ctrl-C stops)",
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

/// Starts spare node `id` at `member`: a learner-to-be of the founders' cluster,
/// creating its store the first time (as a joining node) and reopening it after.
async fn start_spare(
    spec: &ClusterSpec,
    id: u16,
    member: Member,
    secrets: &Secrets,
) -> Result<Node, String> {
    let e = engine(spec.kind, spec.mode, &spec.dir, id);
    let has_store = e.has_store().map_err(|err| format!("node {id}: {err}"))?;
    let mut members = spec.members.clone();
    members.insert(id, member);
    let mut cfg = NodeConfig::new(id, members, e);
    cfg.learner = true;
    secrets.apply(&mut cfg);
    cfg.start = if has_store {
        StartMode::Existing
    } else {
        StartMode::Join
    };
    Node::start(cfg).await.map_err(|e| e.to_string())
}
