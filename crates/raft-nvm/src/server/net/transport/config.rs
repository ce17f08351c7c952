//! How a transport is set up ([`TransportConfig`]) and why it can fail
//! ([`TransportError`]).

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::server::net::frame::DEFAULT_MAX_FRAME;
use crate::server::secret::Secret;

/// The default [`TransportConfig::frame_budget`]: 256 MiB.
pub const DEFAULT_FRAME_BUDGET: usize = 256 << 20;

/// The default [`TransportConfig::max_connections`]: 256.
pub const DEFAULT_MAX_PEER_CONNECTIONS: usize = 256;

/// How a transport is set up.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// This node's id.
    pub id: u16,
    /// Where to listen for the peers' connections (ignored by
    /// [`Transport::start_with_listener`](super::Transport::start_with_listener)).
    pub listen: SocketAddr,
    /// The other nodes and where they listen (an entry for `id` itself is ignored).
    pub peers: BTreeMap<u16, SocketAddr>,
    /// The address this node's Hellos give peers to reply to (default: the
    /// listener's bound address; an unspecified IP there is read by the peer as
    /// the connection's source IP). A peer that does not know this node yet
    /// answers it there.
    pub advertise: Option<SocketAddr>,
    /// The capacity of each peer's outgoing queue (default 4096; at least 1).
    pub queue_depth: usize,
    /// The largest frame accepted or sent, prefix excluded (default 64 MiB). A
    /// message that encodes larger is dropped by its writer with a warning.
    pub max_frame: usize,
    /// The first delay before reconnecting after a failure (default 5 ms).
    pub backoff_min: Duration,
    /// The longest delay between reconnection attempts (default 500 ms).
    pub backoff_max: Duration,
    /// How long a connection attempt may take (default 1 s). Messages queue meanwhile.
    pub connect_timeout: Duration,
    /// How long one batch's write may take before the connection is considered dead
    /// (default 5 s).
    pub write_timeout: Duration,
    /// How long an accepted connection may take to send its Hello (default 5 s).
    pub hello_timeout: Duration,
    /// The cluster this node belongs to (default 0): sent in every Hello, and a
    /// Hello of another cluster is refused, so two clusters whose members share
    /// addresses or ids never exchange a message.
    pub cluster: u64,
    /// The cluster secret (default none): with one, a peer is admitted only once it
    /// answered a challenge with it (see the module docs), and this node answers
    /// its peers' challenges; every member must have the same. Without one, any
    /// process that reaches the listener and names the cluster id is admitted, and
    /// the transport warns that it is open when it starts.
    pub secret: Option<Secret>,
    /// The most bytes all incoming connections together may hold in unfinished
    /// frames (default [`DEFAULT_FRAME_BUDGET`], 256 MiB); a connection whose
    /// frame would exceed it is closed.
    pub frame_budget: usize,
    /// The most incoming connections served at once, admitted or still in their
    /// Hello (default [`DEFAULT_MAX_PEER_CONNECTIONS`], 256; at least 1): one
    /// more is closed at once, and the refusal logged and counted as a rejected
    /// frame. A cluster needs one per peer (two across a reconnection); the rest
    /// is room for strangers, each of which leaves after
    /// [`TransportConfig::hello_timeout`] at most if it sends no Hello.
    pub max_connections: usize,
}

impl TransportConfig {
    /// A configuration with the default limits and timings.
    pub fn new(id: u16, listen: SocketAddr, peers: BTreeMap<u16, SocketAddr>) -> Self {
        TransportConfig {
            id,
            listen,
            peers,
            advertise: None,
            queue_depth: 4096,
            max_frame: DEFAULT_MAX_FRAME,
            backoff_min: Duration::from_millis(5),
            backoff_max: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(1),
            write_timeout: Duration::from_secs(5),
            hello_timeout: Duration::from_secs(5),
            cluster: 0,
            secret: None,
            frame_budget: DEFAULT_FRAME_BUDGET,
            max_connections: DEFAULT_MAX_PEER_CONNECTIONS,
        }
    }
}

/// Why the transport could not do something.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The listener could not be set up.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The message is for a node that is not among the peers.
    #[error("unknown peer {0}")]
    UnknownPeer(u16),
    /// The transport is shut down.
    #[error("the transport is shut down")]
    Closed,
}
