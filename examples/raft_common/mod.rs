//! What the Raft examples share: the storage-engine choices, member lists on
//! loopback, and starting a whole local cluster in this process.

#![allow(dead_code)] // each example uses a different part

pub mod hops;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pmem_core::ModeRequest;
use raft_nvm::node::{Member, Node, NodeConfig, NodeError};
use raft_nvm::replica::{Engine, StartMode, REPLICA_STORE_OPTIONS};
use raft_nvm::{ListOptions, WalOptions};

/// The storage engines the examples offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineKind {
    /// The persistent list in a pool file (its durability mode from `--pool-mode`).
    List,
    /// The write-ahead log with fsync per group, plus snapshot files.
    Wal,
}

/// How the list engine's pool is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PoolMode {
    /// Real PM if the file is on DAX (MAP_SYNC), else msync: durable either way.
    Auto,
    /// clwb + sfence even on a non-DAX file (tmpfs: PM-like cost, not durable).
    ForceDax,
}

impl PoolMode {
    pub fn request(self) -> ModeRequest {
        match self {
            PoolMode::Auto => ModeRequest::Auto,
            PoolMode::ForceDax => ModeRequest::ForceDax,
        }
    }
}

/// Pool size of the list engine. The pool is allocated up front (`fallocate`, as
/// PMDK does, so a full disk is an error at creation and not a SIGBUS later); on
/// tmpfs that costs about 35 ms per 256 MiB here, paid again by a snapshot
/// installation, which builds a fresh pool.
pub const POOL_SIZE: u64 = 256 << 20;
/// Pages of the list engine kept mapped ahead of the writer: none. 2 MiB ahead cut
/// a store-only probe of 15,000 × 2 KB appends from 74 to 50 ms, but three
/// `raft_bench` runs with it showed no clear gain end to end (BENCHMARKS.md).
pub const PREFAULT_PAGES: u32 = 0;
/// Page size of the list engine: a key and value up to about 8 KiB fit one record;
/// larger values are stored in fragments.
pub const PAGE_SIZE: u32 = 8192;

/// The engine of node `id` under `dir`.
pub fn engine(kind: EngineKind, mode: PoolMode, dir: &Path, id: u16) -> Engine {
    match kind {
        EngineKind::List => Engine::List {
            path: dir.join(format!("node{id}.pool")),
            pool_size: POOL_SIZE,
            opts: ListOptions {
                store: REPLICA_STORE_OPTIONS,
                page_size: PAGE_SIZE,
                mode: mode.request(),
                compact_interval: Some(Duration::from_secs(30)),
                prefault_pages: PREFAULT_PAGES,
            },
        },
        EngineKind::Wal => Engine::Wal {
            dir: dir.join(format!("node{id}.wal")),
            opts: WalOptions {
                store: REPLICA_STORE_OPTIONS,
                ..WalOptions::default()
            },
        },
    }
}

/// `n` members on loopback: Raft ports `raft_base + id`, client ports `client_base + id`.
pub fn loopback_members(n: u16, raft_base: u16, client_base: u16) -> BTreeMap<u16, Member> {
    (1..=n)
        .map(|id| {
            let ip = std::net::Ipv4Addr::LOCALHOST;
            (
                id,
                Member {
                    raft: SocketAddr::from((ip, raft_base + id)),
                    client: SocketAddr::from((ip, client_base + id)),
                },
            )
        })
        .collect()
}

/// A local cluster's layout.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    pub members: BTreeMap<u16, Member>,
    pub kind: EngineKind,
    pub mode: PoolMode,
    pub dir: PathBuf,
    /// The secret the nodes authenticate each other with, if any.
    pub cluster_secret: Option<raft_nvm::secret::Secret>,
}

impl ClusterSpec {
    /// The configuration of node `id` (opening its existing store).
    pub fn config(&self, id: u16) -> NodeConfig {
        let mut cfg = NodeConfig::new(
            id,
            self.members.clone(),
            engine(self.kind, self.mode, &self.dir, id),
        );
        cfg.cluster_secret = self.cluster_secret.clone();
        cfg
    }

    /// Restarts node `id` on its existing store (refused if it has none).
    pub async fn start(&self, id: u16) -> Result<Node, NodeError> {
        Node::start(self.config(id)).await
    }

    /// Starts every node. A new cluster (no member has a store yet) bootstraps;
    /// an existing one reopens its stores. A member without a store beside members
    /// with theirs lost its data and must not come back empty on its own: refused,
    /// with one line saying so.
    pub async fn start_all(&self) -> Result<Vec<Node>, String> {
        self.start_all_with(|_| {}).await
    }

    /// [`ClusterSpec::start_all`], with `tweak` applied to every node's
    /// configuration.
    pub async fn start_all_with(
        &self,
        tweak: impl Fn(&mut NodeConfig),
    ) -> Result<Vec<Node>, String> {
        let mut missing = Vec::new();
        for &id in self.members.keys() {
            let e = engine(self.kind, self.mode, &self.dir, id);
            if !e.has_store().map_err(|err| format!("node {id}: {err}"))? {
                missing.push((id, e.store_path().to_path_buf()));
            }
        }
        let start = if missing.is_empty() {
            StartMode::Existing
        } else if missing.len() == self.members.len() {
            StartMode::Bootstrap
        } else {
            let (id, path) = &missing[0];
            return Err(format!(
                "node {id}: no store at {}, but other members have theirs — its data is gone, and a member must not come back empty on its own (a fresh cluster: remove {})",
                path.display(),
                self.dir.display()
            ));
        };
        if start == StartMode::Bootstrap {
            std::fs::create_dir_all(&self.dir)
                .map_err(|e| format!("{}: {e}", self.dir.display()))?;
        }
        let mut nodes = Vec::new();
        for &id in self.members.keys() {
            let mut cfg = self.config(id);
            cfg.start = start;
            tweak(&mut cfg);
            nodes.push(Node::start(cfg).await.map_err(|e| e.to_string())?);
        }
        Ok(nodes)
    }
}

/// Parses `ID=RAFT_ADDR/CLIENT_ADDR`.
pub fn parse_member(s: &str) -> Result<(u16, Member), String> {
    let (id, addrs) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected ID=RAFT_ADDR/CLIENT_ADDR"))?;
    let (raft, client) = addrs
        .split_once('/')
        .ok_or_else(|| format!("`{s}`: expected ID=RAFT_ADDR/CLIENT_ADDR"))?;
    let id = id.parse::<u16>().map_err(|e| format!("`{id}`: {e}"))?;
    let raft = raft.parse().map_err(|e| format!("`{raft}`: {e}"))?;
    let client = client.parse().map_err(|e| format!("`{client}`: {e}"))?;
    Ok((id, Member { raft, client }))
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_logs() {
    init_logs_at("info");
}

/// Logs warnings and errors only (benchmarks), unless `RUST_LOG` says otherwise.
/// The transport's "connection lost" warnings are left out: a benchmark stops and
/// restarts nodes on purpose, and its peers' warnings would interleave its table.
pub fn init_logs_quiet() {
    init_logs_at("warn,raft_nvm::net=error");
}

/// As [`init_logs_quiet`], plus `recorder` receiving the nodes' hop events.
pub fn init_logs_quiet_recording(recorder: hops::Recorder) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,raft_nvm::net=error"));
    let hops_only = tracing_subscriber::filter::Targets::new()
        .with_target(raft_nvm::HOP_TRACE_TARGET, tracing::Level::TRACE);
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(stderr_is_terminal())
                .with_filter(filter),
        )
        .with(recorder.with_filter(hops_only))
        .try_init();
}

fn init_logs_at(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(stderr_is_terminal())
        .try_init();
}

/// Whether the logs' stream (stderr) is a terminal: colour codes only then, so a
/// log redirected to a file or a pipe (`raft_cluster 2> out.log`) stays plain text.
fn stderr_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Runs `main` on a multi-threaded runtime; an error becomes one line
/// `<name>: <error>` on stderr and exit status 1.
pub fn run_main<F>(name: &str, main: F) -> std::process::ExitCode
where
    F: std::future::Future<Output = Result<(), String>>,
{
    let result = tokio::runtime::Runtime::new()
        .map_err(|e| format!("cannot start the runtime: {e}"))
        .and_then(|rt| rt.block_on(main));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
