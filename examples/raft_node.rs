//! One node of the replicated key-value service: a Raft replica on the persistent
//! list (or the WAL baseline), its peers over TCP, its clients over RESP.
//!
//! ```text
//! cargo run --release --example raft_node -- --id 1 --bootstrap \
//!     --member 1=127.0.0.1:7101/127.0.0.1:6381 \
//!     --member 2=127.0.0.1:7102/127.0.0.1:6382 \
//!     --member 3=127.0.0.1:7103/127.0.0.1:6383 \
//!     --data-dir target/node1 --engine list --pool-mode auto
//! redis-cli -p 6381 -c SET greeting hello
//! ```
//!
//! Each `--member` is `ID=RAFT_ADDR/CLIENT_ADDR`, this node included. It runs until
//! Ctrl-C or SIGTERM (then syncs and exits 0); a store failure exits 1 with one line.
//!
//! A node starts without a store only when told to:
//!
//! - `--bootstrap`: a founding member of a new cluster. Creates the store if there
//!   is none; over an existing store it simply reopens it, so the founding command
//!   can be re-run after a restart.
//! - `--join`: an existing member whose data was lost. Creates an empty store if
//!   there is none and stays passive (no votes, no campaigns, so it cannot vote
//!   twice in a term or elect a leader missing entries it had helped commit) until
//!   it caught up with the leader.
//! - neither (restarts): opens the existing store. Without one it exits 1 with one
//!   line saying so, and writes nothing: a member whose data directory was wiped
//!   must not silently come back empty.
//!
//! Whatever the flags, a store that is damaged is refused the same way (exit 1,
//! one `raft_node:` line naming the file, nothing written): a record that fails
//! its checksum, or a log cut short, below the durable end the last clean stop
//! recorded; a WAL directory whose log is gone; a hard state that fails its
//! checksum or holds an implausible term; another node's store (the node id is
//! recorded in `<store>.node`); a join marker holding garbage; and anything that
//! is not a regular file (a FIFO, a device) where a store file belongs. A node
//! killed without a clean stop can still lose only the records of its last sync
//! to damage undetected (they read as a torn tail).
//!
//! Metrics: `INFO` (`redis-cli -p 6381 INFO`) shows the Raft state, the store's
//! fill (`# Store`), and per command the calls (`# Commandstats`) and the latency
//! percentiles from the node taking a request to its reply (`# Latencystats`),
//! in Redis 7's format. With `--metrics ADDR` the node also serves the same figures
//! and more (each follower's lag, on the leader) in the Prometheus text format on
//! `http://ADDR/metrics`, all named `raftnvm_*`:
//!
//! ```text
//! cargo run --release --example raft_node -- ... --metrics 127.0.0.1:9101
//! curl http://127.0.0.1:9101/metrics
//! ```
//!
//! Leadership: `redis-cli -p 6381 RAFT.TRANSFER-LEADER 2` hands it to node 2 (no
//! election timeout; the leader refuses writes with `-TRYAGAIN` for the moment it
//! takes), and a leader stopped with Ctrl-C or SIGTERM hands it to the most
//! caught-up follower first. `--lease-reads` answers reads from the leader's lease
//! (off by default: it assumes bounded clock drift, see the README).
//!
//! Membership: a new machine joins a running cluster as a learner and is then
//! promoted; a member is removed (the README walks through replacing a node):
//!
//! ```text
//! cargo run --release --example raft_node -- --id 4 --join --learner \
//!     --member 1=127.0.0.1:7101/127.0.0.1:6381 --member 2=... --member 3=... \
//!     --member 4=127.0.0.1:7104/127.0.0.1:6384 --data-dir target/node4
//! redis-cli -p 6381 -c RAFT.ADD-LEARNER 4 127.0.0.1:7104 127.0.0.1:6384
//! redis-cli -p 6381 -c RAFT.PROMOTE 4
//! redis-cli -p 6381 -c RAFT.REMOVE-NODE 1
//! redis-cli -p 6382 RAFT.CONFIG
//! ```
//!
//! Security: `--cluster-secret-file PATH` makes peers authenticate (every member
//! gives a file with the same secret; without one the node warns that its Raft
//! port is open to anyone who can reach it), and `--requirepass-file PATH` makes
//! clients `AUTH` first (`redis-cli -a PASSWORD`, or `--askpass`). Both files must
//! be regular files readable by their owner only (chmod 600). The node listens
//! where its own `--member` entry says: give `127.0.0.1` addresses to keep either
//! port on the machine.
//!
//! ```text
//! head -c 32 /dev/urandom | base64 > cluster.secret; chmod 600 cluster.secret
//! cargo run --release --example raft_node -- ... --cluster-secret-file cluster.secret
//! ```
//!
//! Memory: `--max-request-bytes`, `--max-client-buffers` and `--max-peer-buffers`
//! bound what clients and peers can make the node hold in unfinished input
//! (defaults 65 MiB per request, 256 MiB for all clients, 256 MiB for all peers).
//!
//! Residual risk of `--join` for a member that lost its data: "caught up" is
//! judged against the leader the node hears from, and the votes it cast before
//! losing its data in terms above that leader's are forgotten. Removing it and
//! adding it back as a learner under a new id has no such risk.

#[path = "raft_common/mod.rs"]
mod raft_common;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use raft_common::{engine, init_logs, parse_member, shutdown_signal, EngineKind, PoolMode};
use raft_nvm::node::{Node, NodeConfig};
use raft_nvm::replica::{Engine, StartMode};
use raft_nvm::secret::Secret;

#[derive(Parser, Debug)]
#[command(
    about = "One node of the Raft key-value service (RESP clients)",
    after_help = "Without --bootstrap or --join the node opens its existing store and refuses to start (exit 1, nothing written) if there is none."
)]
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
    /// The list engine's pool size in bytes, fixed when the pool is created (the
    /// pool never grows: compaction keeps a long-running node inside it).
    #[arg(long, default_value_t = raft_common::POOL_SIZE)]
    pool_size: u64,
    /// Milliseconds per Raft tick.
    #[arg(long, default_value_t = 10)]
    tick_ms: u64,
    /// A founding member of a new cluster: create the store if there is none
    /// (an existing one is reopened).
    #[arg(long, conflicts_with = "join")]
    bootstrap: bool,
    /// An existing member whose data was lost: create an empty store if there is
    /// none, and neither vote nor campaign until caught up with the leader.
    #[arg(long)]
    join: bool,
    /// A node added to a running cluster (`RAFT.ADD-LEARNER`): it starts as a
    /// learner of the cluster the other --member entries founded (they are its
    /// voters; their cluster id is its), receives the log, never votes, and
    /// votes once promoted (`RAFT.PROMOTE`). Give it with --join at the first
    /// start; its store records the configuration from then on.
    #[arg(long)]
    learner: bool,
    /// The list engine compacts every this many milliseconds (default 30 s).
    #[arg(long)]
    compact_ms: Option<u64>,
    /// Payload bytes per snapshot chunk (default 1 MiB).
    #[arg(long)]
    snapshot_chunk_bytes: Option<usize>,
    /// Entries the leader keeps in DRAM for lagging followers (beyond them it reads
    /// its store, and once compaction dropped them it sends a snapshot).
    #[arg(long)]
    window_entries: Option<usize>,
    /// Serve Prometheus metrics on http://ADDR/metrics (for example 127.0.0.1:9101).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Answer reads from the leader's lease instead of a read-index round. Every
    /// member should say it. Assumes clocks drift apart by at most
    /// --lease-drift-ticks over an election timeout (see the README: the risk).
    #[arg(long)]
    lease_reads: bool,
    /// The clock-drift bound lease reads assume, in ticks.
    #[arg(long, default_value_t = 2)]
    lease_drift_ticks: u32,
    /// The cluster's name: with the member ids it makes the cluster id recorded
    /// beside the store at --bootstrap/--join. Peers of another cluster are
    /// refused, and so is bootstrapping or joining over another cluster's data.
    #[arg(long, default_value = "raft-nvm")]
    cluster_token: String,
    /// A file holding the cluster secret peers authenticate with (the same on
    /// every member; a regular file, chmod 600). Without it the Raft port accepts
    /// any process that knows the cluster id.
    #[arg(long, value_name = "PATH")]
    cluster_secret_file: Option<PathBuf>,
    /// A file holding the password clients must give with AUTH (Redis's
    /// requirepass; a regular file, chmod 600).
    #[arg(long, value_name = "PATH")]
    requirepass_file: Option<PathBuf>,
    /// The most bytes one client request may hold (default 65 MiB).
    #[arg(long, value_name = "BYTES")]
    max_request_bytes: Option<usize>,
    /// The most bytes all clients together may hold in unfinished requests
    /// (default 256 MiB).
    #[arg(long, value_name = "BYTES")]
    max_client_buffers: Option<usize>,
    /// The most bytes all peers together may hold in unfinished frames (default
    /// 256 MiB).
    #[arg(long, value_name = "BYTES")]
    max_peer_buffers: Option<usize>,
}

impl Args {
    /// The start mode the flags ask for.
    fn start_mode(&self) -> StartMode {
        if self.bootstrap {
            StartMode::Bootstrap
        } else if self.join {
            StartMode::Join
        } else {
            StartMode::Existing
        }
    }
}

fn main() -> ExitCode {
    init_logs();
    let args = Args::parse();
    raft_common::run_main("raft_node", run(args))
}

async fn run(args: Args) -> Result<(), String> {
    // Read first: a refused start touches nothing.
    let cluster_secret = read_secret(args.cluster_secret_file.as_deref())?;
    let requirepass = read_secret(args.requirepass_file.as_deref())?;
    let start = args.start_mode();
    if start != StartMode::Existing {
        // Only a node told to create its store may create its directory.
        std::fs::create_dir_all(&args.data_dir)
            .map_err(|e| format!("{}: {e}", args.data_dir.display()))?;
    }
    let members = args.members.into_iter().collect();
    let mut engine = engine(args.engine, args.pool_mode, &args.data_dir, args.id);
    if let (raft_nvm::replica::Engine::List { opts, .. }, Some(ms)) = (&mut engine, args.compact_ms)
    {
        opts.compact_interval = Some(std::time::Duration::from_millis(ms.max(1)));
    }
    if let Engine::List { pool_size, .. } = &mut engine {
        *pool_size = args.pool_size;
    }
    let mut cfg = NodeConfig::new(args.id, members, engine);
    if let Some(bytes) = args.snapshot_chunk_bytes {
        cfg.snapshot_chunk_bytes = bytes.max(1);
    }
    if let Some(entries) = args.window_entries {
        cfg.raft.window_entries = entries.max(1);
    }
    cfg.start = start;
    cfg.learner = args.learner;
    cfg.tick = std::time::Duration::from_millis(args.tick_ms.max(1));
    cfg.metrics_addr = args.metrics;
    cfg.raft.lease_reads = args.lease_reads;
    cfg.raft.lease_drift_ticks = args.lease_drift_ticks;
    cfg.cluster_token = args.cluster_token;
    cfg.cluster_secret = cluster_secret;
    cfg.requirepass = requirepass;
    if let Some(bytes) = args.max_request_bytes {
        cfg.max_request_bytes = bytes;
    }
    if let Some(bytes) = args.max_client_buffers {
        cfg.max_client_buffers = bytes;
    }
    if let Some(bytes) = args.max_peer_buffers {
        cfg.peer_frame_budget = bytes;
    }
    let mut node = Node::start(cfg).await.map_err(|e| e.to_string())?;
    println!(
        "node {} serving RESP on {} (raft on {})",
        node.id(),
        node.client_addr(),
        node.raft_addr()
    );
    if let Some(addr) = node.metrics_addr() {
        println!(
            "node {} serving metrics on http://{addr}/metrics",
            node.id()
        );
    }
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

/// The secret in the file at `path`, if one is given.
fn read_secret(path: Option<&std::path::Path>) -> Result<Option<Secret>, String> {
    path.map(Secret::from_file)
        .transpose()
        .map_err(|e| e.to_string())
}
