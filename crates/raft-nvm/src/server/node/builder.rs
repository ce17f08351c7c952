//! [`NodeBuilder`]: a node in a few calls, for programs that embed the service.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{Member, Node, NodeConfig, NodeError};
use crate::consensus::machine::StateMachine;
use crate::consensus::replica::{Engine, StartMode, REPLICA_STORE_OPTIONS};
use crate::storage::list::ListOptions;
use crate::storage::wal::WalOptions;

/// The list page size a built node uses: 8 KiB, which won the node's catch-up
/// runs against 4 KiB (BENCHMARKS.md, "raft-nvm: the durable path").
pub const NODE_PAGE_SIZE: u32 = 8192;

/// Builds a [`Node`]: who the members are, where the store lives, whether to
/// create it, and the state machine it serves. Everything else takes
/// [`NodeConfig::new`]'s defaults; [`NodeBuilder::configure`] reaches the rest.
///
/// ```no_run
/// # async fn demo() -> Result<(), raft_nvm::node::NodeError> {
/// use raft_nvm::node::Node;
///
/// let node = Node::builder(1)
///     .member(1, "127.0.0.1:7101".parse().unwrap(), "127.0.0.1:6381".parse().unwrap())
///     .member(2, "127.0.0.1:7102".parse().unwrap(), "127.0.0.1:6382".parse().unwrap())
///     .member(3, "127.0.0.1:7103".parse().unwrap(), "127.0.0.1:6383".parse().unwrap())
///     .list("data/node1.pool", 256 << 20)
///     .bootstrap()
///     .start()
///     .await?;
/// # node.shutdown().await }
/// ```
#[must_use]
pub struct NodeBuilder {
    id: u16,
    members: BTreeMap<u16, Member>,
    engine: Option<Engine>,
    start: StartMode,
    machine: Option<Arc<dyn StateMachine>>,
    metrics_addr: Option<SocketAddr>,
    configure: Vec<Adjustment>,
}

/// A change [`NodeBuilder::configure`] makes to the built configuration.
type Adjustment = Box<dyn FnOnce(&mut NodeConfig) + Send>;

impl std::fmt::Debug for NodeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("id", &self.id)
            .field("members", &self.members)
            .field("engine", &self.engine)
            .field("start", &self.start)
            .field("machine", &self.machine)
            .field("metrics_addr", &self.metrics_addr)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// A builder for node `id` (see [`NodeBuilder`]).
    pub fn builder(id: u16) -> NodeBuilder {
        NodeBuilder {
            id,
            members: BTreeMap::new(),
            engine: None,
            start: StartMode::Existing,
            machine: None,
            metrics_addr: None,
            configure: Vec::new(),
        }
    }
}

impl NodeBuilder {
    /// Adds member `id` (this node included): its Raft address and its client
    /// (RESP) address. Port 0 lets the system choose (for this node only: peers
    /// must know each other's addresses).
    pub fn member(mut self, id: u16, raft: SocketAddr, client: SocketAddr) -> Self {
        self.members.insert(id, Member { raft, client });
        self
    }

    /// Adds every member of `members`.
    pub fn members(mut self, members: impl IntoIterator<Item = (u16, Member)>) -> Self {
        self.members.extend(members);
        self
    }

    /// Stores the log and state in a persistent list in the pool file `path` of
    /// `pool_size` bytes (its size when created), with [`NODE_PAGE_SIZE`] pages
    /// and the durability the file system offers (DAX if mapped so, msync
    /// otherwise).
    pub fn list(mut self, path: impl Into<PathBuf>, pool_size: u64) -> Self {
        self.engine = Some(Engine::List {
            path: path.into(),
            pool_size,
            opts: ListOptions {
                page_size: NODE_PAGE_SIZE,
                store: REPLICA_STORE_OPTIONS,
                ..ListOptions::default()
            },
        });
        self
    }

    /// Stores the log in the write-ahead-log baseline's directory `dir`.
    pub fn wal(mut self, dir: impl Into<PathBuf>) -> Self {
        self.engine = Some(Engine::Wal {
            dir: dir.into(),
            opts: WalOptions {
                store: REPLICA_STORE_OPTIONS,
                ..WalOptions::default()
            },
        });
        self
    }

    /// Any engine, with its options.
    pub fn engine(mut self, engine: Engine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// A founding member of a new cluster: creates the store if there is none
    /// ([`StartMode::Bootstrap`]). Without this or [`NodeBuilder::join`] the node
    /// opens its existing store and refuses to start without one.
    pub fn bootstrap(mut self) -> Self {
        self.start = StartMode::Bootstrap;
        self
    }

    /// An existing member whose data was lost: creates an empty store and stays
    /// passive until it caught up ([`StartMode::Join`]).
    pub fn join(mut self) -> Self {
        self.start = StartMode::Join;
        self
    }

    /// Starts as a learner of the cluster the other members founded (a node added
    /// to a running cluster with `RAFT.ADD-LEARNER`; see [`NodeConfig::learner`]).
    /// Use with [`NodeBuilder::join`] for its first start.
    pub fn learner(self) -> Self {
        self.configure(|c| c.learner = true)
    }

    /// Serves `machine` beside the key-value commands (see [`crate::consensus::machine`]).
    /// Every member must run the same machine.
    pub fn state_machine(mut self, machine: impl StateMachine) -> Self {
        self.machine = Some(Arc::new(machine));
        self
    }

    /// Answers reads from the leader's lease instead of a read-index round (off by
    /// default; see [`crate::consensus::raft::Config::lease_reads`] for the clock-drift bound
    /// it assumes and the risk).
    pub fn lease_reads(self, on: bool) -> Self {
        self.configure(move |c| c.raft.lease_reads = on)
    }

    /// Names the cluster (see [`NodeConfig::cluster_token`]).
    pub fn cluster_token(self, token: impl Into<String>) -> Self {
        let token = token.into();
        self.configure(move |c| c.cluster_token = token)
    }

    /// Serves Prometheus metrics on `addr` (`GET /metrics`).
    pub fn metrics(mut self, addr: SocketAddr) -> Self {
        self.metrics_addr = Some(addr);
        self
    }

    /// Sets the length of one Raft tick (default 10 ms; elections take 15–30
    /// ticks, heartbeats every 3).
    pub fn tick(self, tick: Duration) -> Self {
        self.configure(move |c| c.tick = tick)
    }

    /// Changes anything else of the [`NodeConfig`] the builder makes (after the
    /// builder's own settings).
    pub fn configure(mut self, f: impl FnOnce(&mut NodeConfig) + Send + 'static) -> Self {
        self.configure.push(Box::new(f));
        self
    }

    /// The configuration this builder makes.
    ///
    /// # Errors
    ///
    /// [`NodeError::Incomplete`] without a store ([`NodeBuilder::list`],
    /// [`NodeBuilder::wal`] or [`NodeBuilder::engine`]); [`NodeError::UnknownId`]
    /// when this node is not among the members.
    pub fn config(self) -> Result<NodeConfig, NodeError> {
        let engine = self.engine.ok_or(NodeError::Incomplete(
            "no store: call list(path, size), wal(dir) or engine(..)",
        ))?;
        if !self.members.contains_key(&self.id) {
            return Err(NodeError::UnknownId(self.id));
        }
        let mut cfg = NodeConfig::new(self.id, self.members, engine);
        cfg.start = self.start;
        cfg.machine = self.machine;
        cfg.metrics_addr = self.metrics_addr;
        for f in self.configure {
            f(&mut cfg);
        }
        Ok(cfg)
    }

    /// Builds the configuration and starts the node ([`Node::start`]).
    ///
    /// # Errors
    ///
    /// As [`NodeBuilder::config`] and [`Node::start`].
    pub async fn start(self) -> Result<Node, NodeError> {
        Node::start(self.config()?).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::machine::KvMachine;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn builds_the_configuration_it_is_told() {
        let cfg = Node::builder(2)
            .member(1, addr(7101), addr(6381))
            .member(2, addr(7102), addr(6382))
            .list("/tmp/x.pool", 1 << 20)
            .join()
            .state_machine(KvMachine)
            .tick(Duration::from_millis(5))
            .configure(|c| c.client_queue = 7)
            .config()
            .expect("complete");
        assert_eq!(cfg.id, 2);
        assert_eq!(cfg.members.len(), 2);
        assert_eq!(cfg.start, StartMode::Join);
        assert_eq!(cfg.tick, Duration::from_millis(5));
        assert_eq!(cfg.client_queue, 7);
        assert_eq!(cfg.machine.as_ref().map(|m| m.name()), Some("kv"));
        assert!(matches!(
            cfg.engine,
            Engine::List { pool_size: 1_048_576, ref opts, .. } if opts.page_size == NODE_PAGE_SIZE
        ));
        assert_eq!(cfg.raft_config().peers, vec![1, 2]);
    }

    #[test]
    fn refuses_an_incomplete_configuration() {
        let no_store = Node::builder(1).member(1, addr(1), addr(2)).config();
        assert!(matches!(no_store, Err(NodeError::Incomplete(_))));
        let not_member = Node::builder(3)
            .member(1, addr(1), addr(2))
            .wal("/tmp/w")
            .config();
        assert!(matches!(not_member, Err(NodeError::UnknownId(3))));
    }
}
