//! A networked node's configuration: who it is, where its peers listen, where its
//! store lives, how fast its clock ticks, its secrets, and its memory limits.
//!
//! # Memory bound
//!
//! What peers and clients can make a node hold in unfinished input is bounded:
//! the unfinished requests of all RESP clients by
//! [`NodeConfig::max_client_buffers`] (plus at most one 256 KiB read per
//! connection being served at that moment), and the unfinished frames of all peer
//! connections by [`NodeConfig::peer_frame_budget`]: with the defaults, 256 MiB
//! each, 512 MiB together. One client request is at most
//! [`NodeConfig::max_request_bytes`] (65 MiB), and before it authenticates (with a
//! password set) 16 KiB; one peer frame at most 64 MiB. A client or peer past a
//! limit gets an error (clients) or a logged refusal (peers) and its connection
//! is closed.
//!
//! # Hostile clients
//!
//! Each listener serves a bounded number of connections at once:
//! [`NodeConfig::max_clients`] RESP clients (default 1024),
//! [`NodeConfig::max_peer_connections`] incoming transport connections (default
//! 256) and [`NodeConfig::max_metrics_connections`] metrics scrapes (default 64).
//! One more is refused at once (a RESP client is told `-ERR max number of clients
//! reached`) and the refusal logged. A client that begins a request and does not
//! finish it within [`NodeConfig::request_timeout`] (default 10 s; slow loris) is
//! closed; a transport connection must send its Hello within 5 s, and a metrics
//! connection is done within 5 s. An idle client with no request begun stays
//! connected.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::consensus::machine::StateMachine;
use crate::consensus::raft::Config;
use crate::consensus::replica::{CompactionPolicy, Engine, StartMode};
use crate::server::secret::Secret;

/// Where one member of the cluster listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its Raft (node-to-node) address.
    pub raft: SocketAddr,
    /// Its client (RESP) address.
    pub client: SocketAddr,
}

/// The configuration of one node.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id (a key of `members`).
    pub id: u16,
    /// The founding members and where they listen, this node included. Members
    /// added later are learned from the configuration entries in the log, which
    /// carry their addresses ([`crate::consensus::raft::Membership::addresses`]).
    pub members: BTreeMap<u16, Member>,
    /// This node starts as a learner of the cluster the other `members` founded
    /// (a node added to a running cluster with `RAFT.ADD-LEARNER`): it receives
    /// the log, never votes, and becomes a voter when promoted. Off by default.
    pub learner: bool,
    /// The storage engine and where its files live.
    pub engine: Engine,
    /// What to do when the store does not exist: refuse
    /// ([`StartMode::Existing`], the default), or create it as a founding member
    /// ([`StartMode::Bootstrap`]) or as a member rejoining after losing its data
    /// ([`StartMode::Join`]).
    pub start: StartMode,
    /// The length of one Raft tick (election timeouts and heartbeats count ticks).
    pub tick: Duration,
    /// Election timeout range and heartbeat interval, in ticks; flow control and the
    /// replication window. `id` and `peers` are filled from the fields above.
    pub raft: Config,
    /// Snapshot chunk payload in bytes.
    pub snapshot_chunk_bytes: usize,
    /// Depth of the client request queue (back-pressure on the RESP connections).
    pub client_queue: usize,
    /// Reconnection backoff to a peer (first, largest). Messages to an unreachable
    /// peer are dropped meanwhile, so the largest pause bounds how long a restarted
    /// peer waits to hear from this node.
    pub reconnect_backoff: (Duration, Duration),
    /// When the node compacts its store (on by default; compactions run on a
    /// blocking thread, one at a time, beside the event loop).
    pub compaction: CompactionPolicy,
    /// The share of the store kept free for entries that must fit: writes that
    /// would eat into it get `-OOM` (see [`crate::consensus::replica::ReplicaConfig::write_reserve`]).
    pub write_reserve: f64,
    /// Where to serve the node's metrics in the Prometheus text format
    /// (`GET /metrics` over plain HTTP, see [`crate::server::metrics::serve_http`]), or
    /// `None` (the default) for no listener. The text is also available from
    /// [`crate::server::node::Node::metrics_text`].
    pub metrics_addr: Option<SocketAddr>,
    /// The state machine beside the key-value commands (`None`, the default: the
    /// key-value commands only). Every member must run the same one; its RESP
    /// commands are served by this node's client listener (see [`crate::consensus::machine`]).
    pub machine: Option<Arc<dyn StateMachine>>,
    /// The operator's name for the cluster (default `raft-nvm`): with the members'
    /// ids, it makes the cluster id a new cluster is founded with
    /// ([`NodeConfig::cluster_id`]). Give every cluster that shares hosts or
    /// directories its own.
    pub cluster_token: String,
    /// The cluster secret peers authenticate with (a challenge-response in the
    /// transport's Hello, see [`crate::server::net::transport`]; the same on every
    /// member), read with [`Secret::from_file`]. `None` (the default): any process
    /// that reaches the Raft port and knows the cluster id is taken for a peer;
    /// the node warns at start that its transport is open.
    pub cluster_secret: Option<Secret>,
    /// The password RESP clients must give with `AUTH` before any other command
    /// (Redis's `requirepass`, see [`crate::server::resp::server`]); `None` (the default):
    /// none.
    pub requirepass: Option<Secret>,
    /// The most bytes one client request may hold, headers included (default
    /// [`crate::server::resp::DEFAULT_MAX_REQUEST`], 65 MiB).
    pub max_request_bytes: usize,
    /// The most bytes all client connections together may hold in unfinished
    /// requests (default [`crate::server::resp::DEFAULT_MAX_BUFFERED`], 256 MiB).
    pub max_client_buffers: usize,
    /// The most bytes all peer connections together may hold in unfinished frames
    /// (default [`crate::server::net::DEFAULT_FRAME_BUDGET`], 256 MiB).
    pub peer_frame_budget: usize,
    /// The most RESP client connections served at once (default
    /// [`crate::server::resp::DEFAULT_MAX_CLIENTS`], 1024); one more is answered
    /// `-ERR max number of clients reached` and closed.
    pub max_clients: usize,
    /// How long a RESP client may take to finish a request once its first byte
    /// arrived (default [`crate::server::resp::DEFAULT_REQUEST_TIMEOUT`], 10 s);
    /// a slower one is answered `-ERR timed out ...` and closed. Raise it for
    /// requests of many megabytes over slow links.
    pub request_timeout: Duration,
    /// The most incoming transport connections served at once (default
    /// [`crate::server::net::DEFAULT_MAX_PEER_CONNECTIONS`], 256).
    pub max_peer_connections: usize,
    /// The most metrics connections served at once (default
    /// [`crate::server::metrics::DEFAULT_MAX_METRICS_CONNECTIONS`], 64).
    pub max_metrics_connections: usize,
}

impl NodeConfig {
    /// A node that opens its existing store ([`StartMode::Existing`]), with default
    /// timing: 10 ms ticks, elections after 150–300 ms
    /// (15–30 ticks), a heartbeat every 30 ms (3 ticks).
    pub fn new(id: u16, members: BTreeMap<u16, Member>, engine: Engine) -> NodeConfig {
        let mut raft = Config::new(id, members.keys().copied().collect());
        raft.election_ticks_min = 15;
        raft.election_ticks_max = 30;
        raft.heartbeat_ticks = 3;
        raft.max_entries_per_msg = 256;
        raft.max_inflight_msgs = 16;
        raft.seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(id);
        NodeConfig {
            id,
            members,
            learner: false,
            engine,
            start: StartMode::Existing,
            tick: Duration::from_millis(10),
            raft,
            snapshot_chunk_bytes: crate::consensus::replica::DEFAULT_CHUNK_BYTES,
            client_queue: 4096,
            reconnect_backoff: (Duration::from_millis(2), Duration::from_millis(20)),
            compaction: CompactionPolicy::default(),
            write_reserve: crate::consensus::replica::DEFAULT_WRITE_RESERVE,
            metrics_addr: None,
            machine: None,
            cluster_token: "raft-nvm".to_string(),
            cluster_secret: None,
            requirepass: None,
            max_request_bytes: crate::server::resp::DEFAULT_MAX_REQUEST,
            max_client_buffers: crate::server::resp::DEFAULT_MAX_BUFFERED,
            peer_frame_budget: crate::server::net::DEFAULT_FRAME_BUDGET,
            max_clients: crate::server::resp::DEFAULT_MAX_CLIENTS,
            request_timeout: crate::server::resp::DEFAULT_REQUEST_TIMEOUT,
            max_peer_connections: crate::server::net::DEFAULT_MAX_PEER_CONNECTIONS,
            max_metrics_connections: crate::server::metrics::DEFAULT_MAX_METRICS_CONNECTIONS,
        }
    }

    /// The id of the cluster this configuration founds (or, for a learner, joins):
    /// a hash of [`NodeConfig::cluster_token`] and the founders' ids (not their
    /// addresses,
    /// which may change between runs; the token is what tells two clusters of the
    /// same ids apart). Recorded beside the store when it is created; a restart uses the
    /// recorded id, and a node told to bootstrap or join over another cluster's
    /// store refuses (see [`NodeError::OtherCluster`](super::NodeError::OtherCluster)).
    pub fn cluster_id(&self) -> u64 {
        let mut bytes = self.cluster_token.as_bytes().to_vec();
        for id in self.founders() {
            bytes.extend_from_slice(&id.to_le_bytes());
        }
        let hi = crc32c::crc32c(&bytes);
        let lo = crc32c::crc32c_append(0x5a17_c0de, &bytes);
        (u64::from(hi) << 32) | u64::from(lo)
    }

    /// The founding voters: every member, less this node when it starts as a
    /// learner.
    pub fn founders(&self) -> Vec<u16> {
        self.members
            .keys()
            .copied()
            .filter(|&id| !(self.learner && id == self.id))
            .collect()
    }

    /// The Raft core's configuration with the membership filled in.
    pub fn raft_config(&self) -> Config {
        let mut c = self.raft.clone();
        c.id = self.id;
        c.peers = self.founders();
        c.learners = if self.learner {
            vec![self.id]
        } else {
            Vec::new()
        };
        c
    }
}
