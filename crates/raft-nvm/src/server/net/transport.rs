//! The TCP transport between nodes: a listener that accepts the peers' connections
//! and reads their messages, and one writer per peer that owns a bounded queue and a
//! lazily (re)connected outgoing connection.
//!
//! Connections are one-way. A node dials each peer once at startup (announcing
//! itself) and after that whenever it has something to say, opens with
//! [`Wire::Hello`] and from then on only writes; the accepting node only
//! reads, checks that every frame is a message from the dialler to itself and hands
//! it to the node's inbound channel (awaiting space: backpressure reaches the
//! dialler through TCP). A frame that breaks these rules closes that connection
//! only, with a warning; the peer's writer then reconnects.
//!
//! A Hello also cuts short the accepting node's backoff toward the dialler: a
//! restarted peer is reached at once, not after the next backoff delay. A Hello is
//! accepted from any other node of the same cluster (the cluster id it carries),
//! known or not: membership changes ([`Transport::add_peer`]), and a node may hear
//! from a member added since before it learns where to reach it. Such a node is
//! answered at the address its Hello announces (`reply_to`): the first message
//! for it adopts it as a guest peer (bounded; see `dialback`).
//!
//! Loss is allowed, since Raft retries: [`Transport::send`] drops a message when its
//! peer's queue is full, a writer drops what arrives while it is disconnected and
//! backing off (so a healed partition does not deliver stale traffic), and the batch
//! in flight when a connection fails is lost. Only [`Transport::send_wait`] waits for
//! queue space (snapshot chunks); it too cannot survive a broken connection.
//!
//! A writer sends a batch at a time: it awaits one message, takes whatever else is
//! already queued without awaiting, encodes all of it into one reused buffer and
//! issues one `write_all`. Both ends set `TCP_NODELAY`.
//!
//! # Authentication
//!
//! With a cluster secret ([`TransportConfig::secret`], the same on every member)
//! a peer must prove it knows the secret before anything it sends is read: the
//! acceptor writes a [`Wire::Challenge`] holding 32 fresh random bytes, and the
//! dialler opens with a [`Wire::AuthHello`] whose tag is
//! HMAC-SHA256(secret, nonce ‖ from ‖ to ‖ cluster ‖ reply_to). The acceptor checks the tag in
//! constant time; a wrong or missing answer (a plain Hello, nothing within
//! `hello_timeout`) closes the connection with a warning, and nothing that peer
//! sent reaches the node. A fresh nonce per connection means a recorded handshake
//! cannot be replayed. What the secret does not give: secrecy of the traffic, or
//! protection against someone on the network path taking over an authenticated TCP
//! connection (that needs TLS). Without a secret the transport is open to any
//! process that can reach the port and guess the cluster id; it says so with a
//! warning when it starts.
//!
//! # Memory
//!
//! An unfinished incoming frame holds at most [`TransportConfig::max_frame`] bytes,
//! and all connections' unfinished frames together at most
//! [`TransportConfig::frame_budget`] bytes: a frame's bytes are reserved from that
//! shared budget as they arrive (256 KiB at a time), before the buffer grows, and
//! given back once it is decoded or its connection ends. A peer whose frame does
//! not fit is logged and its connection closed (its writer reconnects; a frame
//! that can never fit is dropped by the sender's `max_frame`). Besides that, each
//! admitted connection keeps a 64 KiB read buffer and at most 64 KiB of frame
//! buffer between frames (a connection still in its handshake reads at most a
//! 128-byte Hello, unbuffered), and decoded messages wait in the node's inbound
//! channel (a bounded number of messages).

use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::dialback::{reply_address, DialBack};
use super::frame::{
    encode, read_frame, read_frame_held, FrameError, HeldReadError, Wire, DEFAULT_MAX_FRAME,
    LEN_PREFIX,
};
use crate::consensus::raft::Message;
use crate::server::budget::{ByteBudget, Held};
use crate::server::secret::{HelloFields, Secret, TAG_LEN};

/// Peer announcements kept for [`Transport::take_peer_ups`] (more are dropped).
const PEER_UPS: usize = 64;

/// A writer stops taking queued messages into a batch once it holds this many bytes.
const BATCH_BYTES: usize = 256 << 10;
/// Buffers that grew beyond this (a large snapshot chunk) are shrunk after use.
const KEEP_BUF: usize = 1 << 20;
/// The read buffer of a connection's `BufReader`.
const READ_BUF: usize = 64 << 10;
/// A reader's frame buffer grown beyond this is given back after the frame, so an
/// idle connection holds little outside the shared budget.
const READER_KEEP: usize = 64 << 10;
/// The default [`TransportConfig::frame_budget`]: 256 MiB.
pub const DEFAULT_FRAME_BUDGET: usize = 256 << 20;
/// The limit on the first frame of a connection (a Hello is a few bytes: at most
/// 74 with an IPv6 address and a tag), so an unidentified dialler cannot make the
/// reader allocate much.
const HELLO_MAX: usize = 128;

/// How a transport is set up.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// This node's id.
    pub id: u16,
    /// Where to listen for the peers' connections (ignored by
    /// [`Transport::start_with_listener`]).
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

/// Counters since the transport started (all messages are counted once).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Messages written to a connection (in a batch whose `write_all` succeeded).
    pub sent: u64,
    /// Messages received from peers and handed to the inbound channel.
    pub received: u64,
    /// Messages [`Transport::send`] dropped because the peer's queue was full.
    pub dropped_full: u64,
    /// Messages for a node that is not a peer (and not adoptable as a guest: see
    /// [`TransportStats::guests_adopted`]).
    pub dropped_unknown: u64,
    /// Nodes outside the peers that dialled in and were then answered at the
    /// address their Hello gave (guest peers adopted).
    pub guests_adopted: u64,
    /// Messages a writer dropped while disconnected or backing off, messages of a
    /// batch whose write failed, and messages given to a shut-down transport.
    pub dropped_disconnected: u64,
    /// Messages that encode larger than `max_frame` (never sent).
    pub dropped_oversized: u64,
    /// Incoming frames refused (malformed, oversized, missing or wrong Hello,
    /// misrouted message); each closed its connection.
    pub frames_rejected: u64,
    /// Outgoing connections established.
    pub connects: u64,
    /// Outgoing connection attempts that failed.
    pub connect_failures: u64,
    /// Incoming connections accepted.
    pub accepted: u64,
    /// Bytes held now in unfinished incoming frames, all connections together
    /// (at most [`TransportConfig::frame_budget`]).
    pub frame_bytes_held: u64,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    received: AtomicU64,
    dropped_full: AtomicU64,
    dropped_unknown: AtomicU64,
    guests_adopted: AtomicU64,
    dropped_disconnected: AtomicU64,
    dropped_oversized: AtomicU64,
    frames_rejected: AtomicU64,
    connects: AtomicU64,
    connect_failures: AtomicU64,
    accepted: AtomicU64,
}

fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    fn snapshot(&self) -> TransportStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TransportStats {
            sent: get(&self.sent),
            received: get(&self.received),
            dropped_full: get(&self.dropped_full),
            dropped_unknown: get(&self.dropped_unknown),
            guests_adopted: get(&self.guests_adopted),
            dropped_disconnected: get(&self.dropped_disconnected),
            dropped_oversized: get(&self.dropped_oversized),
            frames_rejected: get(&self.frames_rejected),
            connects: get(&self.connects),
            connect_failures: get(&self.connect_failures),
            accepted: get(&self.accepted),
            frame_bytes_held: 0,
        }
    }
}

/// A running transport: the listener, its connections' readers and one writer per
/// peer, all tasks on the tokio runtime it was started on. Dropping it shuts it down.
/// Peers can be added and removed while it runs ([`Transport::add_peer`]), as the
/// cluster's membership changes.
pub struct Transport {
    id: u16,
    local_addr: SocketAddr,
    queues: RwLock<BTreeMap<u16, mpsc::Sender<Message>>>,
    counters: Arc<Counters>,
    closed: AtomicBool,
    /// Tells the listener to stop (it then stops its readers and ends).
    stop: watch::Sender<bool>,
    /// The listener's task first, then the writers'.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Peers that announced themselves, until [`Transport::take_peer_ups`].
    peer_ups: Mutex<Option<mpsc::Receiver<u16>>>,
    /// Each peer's writer's wake-up, shared with the readers (which hold the
    /// inbound sender: the transport must not, or that channel would outlive
    /// [`Transport::shutdown_wait`]).
    wakes: Arc<RwLock<BTreeMap<u16, Arc<Notify>>>>,
    /// What a new writer is made of.
    cfg: TransportConfig,
    seeds: RandomState,
    /// What the incoming connections' unfinished frames hold.
    budget: Arc<ByteBudget>,
    /// Where this node's Hellos say to reply.
    reply_to: SocketAddr,
    /// Addresses heard from diallers that are not peers, and the guest peers.
    dialback: Arc<DialBack>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("id", &self.id)
            .field("local_addr", &self.local_addr)
            .field("peers", &self.peers())
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Transport {
    /// Binds the listener on `cfg.listen` ([`TransportError::Bind`] on failure) and
    /// spawns the tasks on the current tokio runtime; received messages go to
    /// `inbound`.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (with I/O and time enabled).
    pub async fn start(
        cfg: TransportConfig,
        inbound: mpsc::Sender<Message>,
    ) -> Result<Transport, TransportError> {
        let listener =
            TcpListener::bind(cfg.listen)
                .await
                .map_err(|source| TransportError::Bind {
                    addr: cfg.listen,
                    source,
                })?;
        Self::spawn(cfg, listener, inbound)
    }

    /// Like [`Transport::start`], but serves an already bound listener (`cfg.listen`
    /// is ignored). Binding every node's listener first lets a test or a launcher
    /// learn all addresses (port 0) before building the configurations, which
    /// each need the others' addresses.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (with I/O and time enabled).
    pub fn start_with_listener(
        cfg: TransportConfig,
        listener: std::net::TcpListener,
        inbound: mpsc::Sender<Message>,
    ) -> Result<Transport, TransportError> {
        let addr = listener.local_addr().unwrap_or(cfg.listen);
        let listener = listener
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(listener))
            .map_err(|source| TransportError::Bind { addr, source })?;
        Self::spawn(cfg, listener, inbound)
    }

    fn spawn(
        cfg: TransportConfig,
        listener: TcpListener,
        inbound: mpsc::Sender<Message>,
    ) -> Result<Transport, TransportError> {
        let local_addr = listener
            .local_addr()
            .map_err(|source| TransportError::Bind {
                addr: cfg.listen,
                source,
            })?;
        let counters = Arc::new(Counters::default());
        let hello_max = HELLO_MAX.min(cfg.max_frame);
        let (peer_up_tx, peer_ups) = mpsc::channel(PEER_UPS);
        let wakes = Arc::new(RwLock::new(BTreeMap::new()));
        let budget = ByteBudget::new(cfg.frame_budget);
        let dialback = Arc::new(DialBack::default());
        if cfg.secret.is_none() {
            tracing::warn!(
                id = cfg.id,
                %local_addr,
                "raft transport is OPEN: no cluster secret is set, so any process that can reach this port and knows the cluster id is accepted as a peer; set a cluster secret (raft_node --cluster-secret-file) and bind the Raft port to a private address"
            );
        }
        let ctx = Arc::new(ReaderCtx {
            secret: cfg.secret.clone(),
            budget: Arc::clone(&budget),
            peer_ups: peer_up_tx,
            wakes: Arc::clone(&wakes),
            dialback: Arc::clone(&dialback),
            id: cfg.id,
            cluster: cfg.cluster,
            max_frame: cfg.max_frame,
            hello_timeout: cfg.hello_timeout,
            hello_max,
            inbound,
            counters: Arc::clone(&counters),
            warned: Mutex::new((None, 0)),
        });
        let (stop, stopped) = watch::channel(false);
        let tasks = vec![tokio::spawn(accept_loop(
            listener,
            Arc::clone(&ctx),
            stopped,
        ))];
        let peers = cfg.peers.clone();
        let transport = Transport {
            id: cfg.id,
            local_addr,
            queues: RwLock::new(BTreeMap::new()),
            counters,
            closed: AtomicBool::new(false),
            stop,
            tasks: Mutex::new(tasks),
            peer_ups: Mutex::new(Some(peer_ups)),
            wakes,
            reply_to: cfg.advertise.unwrap_or(local_addr),
            cfg,
            seeds: RandomState::new(),
            budget,
            dialback,
        };
        for (peer, addr) in peers {
            transport.add_peer(peer, addr);
        }
        tracing::debug!(id = transport.id, %local_addr, peers = ?transport.peers(), "raft transport started");
        Ok(transport)
    }

    /// The peers this transport sends to. (Connections are accepted from any node
    /// of the same cluster.)
    pub fn peers(&self) -> Vec<u16> {
        read_lock(&self.queues).keys().copied().collect()
    }

    /// Starts sending to `peer` at `addr` (a member added to the cluster). Returns
    /// false, changing nothing, if `peer` is this node, already a peer, or the
    /// transport is shut down. A guest peer (adopted at the address its Hello
    /// gave, see [`TransportStats::guests_adopted`]) becomes a member at `addr`.
    pub fn add_peer(&self, peer: u16, addr: SocketAddr) -> bool {
        let mut queues = write_lock(&self.queues);
        if self.dialback.forget_guest(peer) {
            // The configuration's address is the authority, not the Hello's.
            queues.remove(&peer);
            write_lock(&self.wakes).remove(&peer);
        }
        self.add_peer_locked(&mut queues, peer, addr)
    }

    /// [`Transport::add_peer`] with the queues' lock held (throughout, so that two
    /// callers cannot both add `peer`).
    fn add_peer_locked(
        &self,
        queues: &mut BTreeMap<u16, mpsc::Sender<Message>>,
        peer: u16,
        addr: SocketAddr,
    ) -> bool {
        if peer == self.id || self.closed.load(Ordering::Relaxed) || queues.contains_key(&peer) {
            return false;
        }
        let cfg = &self.cfg;
        let (tx, rx) = mpsc::channel(cfg.queue_depth.max(1));
        let mut hello = Vec::new();
        if let Err(e) = encode(
            &Wire::Hello {
                from: cfg.id,
                to: peer,
                cluster: cfg.cluster,
                reply_to: self.reply_to,
            },
            &mut hello,
        ) {
            // Unreachable: a Hello is a few bytes.
            tracing::error!(peer, error = %e, "raft transport: cannot encode a Hello");
        }
        let wake = Arc::new(Notify::new());
        let writer = Writer {
            me: cfg.id,
            peer,
            addr,
            rx,
            counters: Arc::clone(&self.counters),
            hello,
            secret: cfg.secret.clone(),
            cluster: cfg.cluster,
            reply_to: self.reply_to,
            handshake_timeout: cfg.hello_timeout,
            buf: Vec::with_capacity(4096),
            max_frame: cfg.max_frame,
            connect_timeout: cfg.connect_timeout,
            write_timeout: cfg.write_timeout,
            backoff: Backoff::new(
                cfg.backoff_min,
                cfg.backoff_max,
                self.seeds.hash_one((cfg.id, peer)),
            ),
            in_outage: false,
            wake: Arc::clone(&wake),
        };
        write_lock(&self.wakes).insert(peer, wake);
        queues.insert(peer, tx);
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tokio::spawn(writer.run()));
        tracing::debug!(id = self.id, peer, %addr, "raft transport: peer added");
        true
    }

    /// Stops sending to `peer` (a member removed from the cluster); its writer
    /// ends once its queue is dropped. Returns whether it was a peer.
    pub fn remove_peer(&self, peer: u16) -> bool {
        let removed = write_lock(&self.queues).remove(&peer).is_some();
        write_lock(&self.wakes).remove(&peer);
        self.dialback.forget_guest(peer);
        if removed {
            tracing::debug!(id = self.id, peer, "raft transport: peer removed");
        }
        removed
    }

    /// The ids of peers as they dial this node (each accepted Hello: the peer just
    /// started or reconnected), for the node to react at once (a leader sends the
    /// peer a heartbeat rather than wait for its next one). The first call gets the
    /// receiver; later calls get `None`.
    pub fn take_peer_ups(&self) -> Option<mpsc::Receiver<u16>> {
        self.peer_ups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The address the listener is bound to (with the actual port if `listen` asked
    /// for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Queues `msg` for `msg.to` without blocking or awaiting. If that peer is
    /// unknown, its queue is full or the transport is shut down, the message is
    /// dropped (Raft tolerates loss), counted and logged at debug. Returns whether it
    /// was queued (not whether it will arrive).
    ///
    /// `msg.from` must be this node's id: the receiver closes a connection that
    /// carries a message from anyone but its dialler.
    pub fn send(&self, msg: Message) -> bool {
        let queue = self.queue_for(msg.to);
        let Some(queue) = queue else {
            bump(&self.counters.dropped_unknown, 1);
            tracing::debug!(
                id = self.id,
                to = msg.to,
                kind = msg.body.kind(),
                "raft transport: no such peer; message dropped"
            );
            return false;
        };
        if self.closed.load(Ordering::Relaxed) {
            bump(&self.counters.dropped_disconnected, 1);
            return false;
        }
        match queue.try_send(msg) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(msg)) => {
                bump(&self.counters.dropped_full, 1);
                tracing::debug!(
                    id = self.id,
                    to = msg.to,
                    kind = msg.body.kind(),
                    "raft transport: queue full; message dropped"
                );
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                bump(&self.counters.dropped_disconnected, 1);
                false
            }
        }
    }

    /// Queues `msg` for `msg.to`, awaiting space in the peer's queue (for snapshot
    /// chunks, which a full queue must not drop). Once queued, the message is subject
    /// to the same losses as any other (a broken connection). Fails with
    /// [`TransportError::UnknownPeer`] if `msg.to` is not a peer and
    /// [`TransportError::Closed`] if the transport is (or gets) shut down.
    pub async fn send_wait(&self, msg: Message) -> Result<(), TransportError> {
        let queue = self.queue_for(msg.to);
        let Some(queue) = queue else {
            bump(&self.counters.dropped_unknown, 1);
            return Err(TransportError::UnknownPeer(msg.to));
        };
        if self.closed.load(Ordering::Relaxed) {
            bump(&self.counters.dropped_disconnected, 1);
            return Err(TransportError::Closed);
        }
        queue.send(msg).await.map_err(|_| {
            bump(&self.counters.dropped_disconnected, 1);
            TransportError::Closed
        })
    }

    /// The queue of peer `to`; a node that is not a peer but dialled in is adopted
    /// as a guest at the address its Hello gave, if there is room (see
    /// `dialback`).
    fn queue_for(&self, to: u16) -> Option<mpsc::Sender<Message>> {
        if let Some(q) = read_lock(&self.queues).get(&to) {
            return Some(q.clone());
        }
        let mut queues = write_lock(&self.queues);
        if let Some(q) = queues.get(&to) {
            // Added meanwhile (by another sender's adoption, or as a member).
            return Some(q.clone());
        }
        let addr = self.dialback.adopt(to)?;
        if !self.add_peer_locked(&mut queues, to, addr) {
            // This node, or the transport is shut down.
            self.dialback.forget_guest(to);
            return None;
        }
        bump(&self.counters.guests_adopted, 1);
        tracing::info!(id = self.id, peer = to, %addr, "raft transport: answering a node outside the peers at the address its Hello gave");
        queues.get(&to).cloned()
    }

    /// The counters so far.
    pub fn stats(&self) -> TransportStats {
        TransportStats {
            frame_bytes_held: self.budget.used() as u64,
            ..self.counters.snapshot()
        }
    }

    /// Stops every task (listener, readers, writers), which closes their sockets
    /// soon after; messages still queued are lost. Returns at once (see
    /// [`Transport::shutdown_wait`]). Idempotent; also done on drop.
    pub fn shutdown(&self) {
        self.closed.store(true, Ordering::Relaxed);
        // The listener stops its readers itself, so that it ends only after them.
        self.stop.send_replace(true);
        let tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        for writer in tasks.iter().skip(1) {
            writer.abort();
        }
    }

    /// [`Transport::shutdown`], then waits until every task has ended: the
    /// listener's port is free again (to restart a node on the same address), every
    /// socket is closed and no task holds the inbound sender any more.
    pub async fn shutdown_wait(&self) {
        self.shutdown();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        for task in tasks {
            // A task ends normally or cancelled; either way it is gone.
            let _ = task.await;
        }
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Exponential backoff with jitter: the n-th delay is drawn from `[d/2, d]` with
/// `d = min * 2^n` capped at `max`, and never below `min`.
struct Backoff {
    min: Duration,
    max: Duration,
    attempt: u32,
    rng: u64,
}

impl Backoff {
    fn new(min: Duration, max: Duration, seed: u64) -> Backoff {
        Backoff {
            min,
            max: max.max(min),
            attempt: 0,
            rng: seed | 1,
        }
    }

    fn reset(&mut self) {
        self.attempt = 0;
    }

    fn next(&mut self) -> Duration {
        let base = self
            .min
            .saturating_mul(1 << self.attempt.min(20))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let lo = (base / 2).max(self.min);
        if base <= lo {
            return base;
        }
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let span = u64::try_from((base - lo).as_nanos()).unwrap_or(u64::MAX);
        lo + Duration::from_nanos(self.rng % span.saturating_add(1))
    }
}

/// Why a connection ended.
enum Lost {
    /// The queue's senders are gone: the writer ends.
    Done,
    /// The peer closed the connection.
    PeerClosed,
    /// A write did not finish within the write timeout.
    Stalled,
    /// Reading or writing failed.
    Io(io::Error),
    /// The peer's challenge did not come or was not one.
    Handshake(String),
}

/// How a writer's backoff ended.
enum BackoffEnd {
    /// The delay passed: reconnect once there is something to send.
    Elapsed,
    /// The peer announced itself: reconnect now.
    Woken,
    /// The queue's senders are gone: the writer ends.
    Closed,
}

/// One peer's writer: its queue, its connection and its backoff.
struct Writer {
    me: u16,
    peer: u16,
    addr: SocketAddr,
    rx: mpsc::Receiver<Message>,
    counters: Arc<Counters>,
    /// The encoded Hello frame (sent when there is no secret).
    hello: Vec<u8>,
    /// The cluster secret, to answer the peer's challenge with.
    secret: Option<Secret>,
    /// This node's cluster id (in the answer to a challenge).
    cluster: u64,
    /// Where this node's Hello says to reply (in the answer to a challenge).
    reply_to: SocketAddr,
    /// How long the peer may take to send its challenge.
    handshake_timeout: Duration,
    /// The batch being encoded (reused).
    buf: Vec<u8>,
    max_frame: usize,
    connect_timeout: Duration,
    write_timeout: Duration,
    backoff: Backoff,
    /// Whether the current outage has been reported (one warning per outage).
    in_outage: bool,
    /// Notified when the peer dials this node: it is up, so stop backing off.
    wake: Arc<Notify>,
}

impl Writer {
    async fn run(mut self) {
        // Announce this node once at startup (a Hello alone): a peer backing off
        // toward it (it was down) reconnects at once.
        let mut announce = true;
        loop {
            // After that, connect lazily: once there is something to send, or at
            // once when the peer announces itself (it just came up).
            let first = if std::mem::take(&mut announce) {
                None
            } else {
                tokio::select! {
                    biased;
                    msg = self.rx.recv() => match msg {
                        Some(msg) => Some(msg),
                        None => return,
                    },
                    () = self.wake.notified() => None,
                }
            };
            let stream = match self.connect().await {
                Ok(stream) => stream,
                Err(e) if first.is_none() => {
                    // The peer is not up yet; it will announce itself.
                    tracing::debug!(id = self.me, peer = self.peer, error = %e, "raft transport: peer not up at startup");
                    continue;
                }
                Err(e) => {
                    bump(&self.counters.connect_failures, 1);
                    bump(&self.counters.dropped_disconnected, 1);
                    self.report("cannot connect", &e);
                    match self.back_off().await {
                        BackoffEnd::Elapsed => {}
                        BackoffEnd::Woken => announce = true,
                        BackoffEnd::Closed => return,
                    }
                    continue;
                }
            };
            bump(&self.counters.connects, 1);
            tracing::debug!(id = self.me, peer = self.peer, addr = %self.addr, "raft transport: connected");
            let since = Instant::now();
            let lost = self.pump(stream, first).await;
            if since.elapsed() >= self.backoff.max {
                // The connection was healthy: this is a new outage.
                self.backoff.reset();
                self.in_outage = false;
            }
            match lost {
                Lost::Done => return,
                Lost::PeerClosed => self.report("connection lost", &"closed by the peer"),
                Lost::Stalled => self.report("connection lost", &"write timed out"),
                Lost::Io(e) => self.report("connection lost", &e),
                Lost::Handshake(why) => self.report("handshake failed", &why),
            }
            match self.back_off().await {
                BackoffEnd::Elapsed => {}
                BackoffEnd::Woken => announce = true,
                BackoffEnd::Closed => return,
            }
        }
    }

    async fn connect(&self) -> io::Result<TcpStream> {
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(self.addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// Warns once per outage, then only at debug.
    fn report(&mut self, what: &str, error: &dyn std::fmt::Display) {
        if self.in_outage {
            tracing::debug!(id = self.me, peer = self.peer, addr = %self.addr, error = %error, "raft transport: {what}");
        } else {
            self.in_outage = true;
            tracing::warn!(id = self.me, peer = self.peer, addr = %self.addr, error = %error, "raft transport: {what}; dropping messages to this peer while reconnecting");
        }
    }

    /// Sleeps for the next backoff delay, dropping (and counting) what arrives
    /// meanwhile, unless the peer announces itself first.
    async fn back_off(&mut self) -> BackoffEnd {
        let sleep = tokio::time::sleep(self.backoff.next());
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                biased;
                () = &mut sleep => return BackoffEnd::Elapsed,
                () = self.wake.notified() => return BackoffEnd::Woken,
                msg = self.rx.recv() => match msg {
                    Some(_) => bump(&self.counters.dropped_disconnected, 1),
                    None => return BackoffEnd::Closed,
                },
            }
        }
    }

    /// Sends `first` and everything after it over `stream` until the connection is
    /// lost or the queue closes.
    async fn pump(&mut self, stream: TcpStream, first: Option<Message>) -> Lost {
        let (mut rd, mut wr) = stream.into_split();
        // The Hello goes out in the same write as the first batch, or alone when
        // announcing.
        self.buf.clear();
        match self.secret.clone() {
            None => self.buf.extend_from_slice(&self.hello),
            Some(secret) => {
                if let Err(lost) = self.answer_challenge(&mut rd, &secret).await {
                    return lost;
                }
            }
        }
        if first.is_none() {
            let written = tokio::time::timeout(self.write_timeout, wr.write_all(&self.buf)).await;
            self.buf.clear();
            match written {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Lost::Io(e),
                Err(_) => return Lost::Stalled,
            }
        }
        let mut next = first;
        let mut probe = [0u8; 64];
        loop {
            let msg = match next.take() {
                Some(msg) => msg,
                // The peer never writes on this connection, so a readable read half
                // means it closed (or broke) the connection: notice it before
                // writing into a dead socket.
                None => {
                    let event = tokio::select! {
                        biased;
                        read = rd.read(&mut probe) => Err(read),
                        msg = self.rx.recv() => Ok(msg),
                    };
                    match event {
                        Ok(Some(msg)) => msg,
                        Ok(None) => return Lost::Done,
                        Err(Ok(0)) => return Lost::PeerClosed,
                        Err(Ok(_)) => continue, // stray bytes: ignored
                        Err(Err(e)) => return Lost::Io(e),
                    }
                }
            };
            let count = self.fill(msg);
            if self.buf.is_empty() {
                continue;
            }
            let written = tokio::time::timeout(self.write_timeout, wr.write_all(&self.buf)).await;
            self.buf.clear();
            if self.buf.capacity() > KEEP_BUF {
                self.buf.shrink_to(BATCH_BYTES);
            }
            crate::server::hops::hop!("sent", self.me, peer = self.peer);
            match written {
                Ok(Ok(())) => bump(&self.counters.sent, count),
                Ok(Err(e)) => {
                    bump(&self.counters.dropped_disconnected, count);
                    return Lost::Io(e);
                }
                Err(_) => {
                    bump(&self.counters.dropped_disconnected, count);
                    return Lost::Stalled;
                }
            }
        }
    }

    /// Reads the peer's challenge and puts the answering [`Wire::AuthHello`] in the
    /// buffer.
    async fn answer_challenge(
        &mut self,
        rd: &mut tokio::net::tcp::OwnedReadHalf,
        secret: &Secret,
    ) -> Result<(), Lost> {
        let mut scratch = Vec::new();
        let read = tokio::time::timeout(
            self.handshake_timeout,
            read_frame(rd, &mut scratch, HELLO_MAX.min(self.max_frame)),
        )
        .await;
        let nonce = match read {
            Ok(Ok(Some(Wire::Challenge { nonce }))) => nonce,
            Ok(Ok(Some(other))) => {
                return Err(Lost::Handshake(format!(
                    "expected a challenge, got {}",
                    wire_kind(&other)
                )))
            }
            Ok(Ok(None)) => return Err(Lost::PeerClosed),
            Ok(Err(FrameError::Io(e))) => return Err(Lost::Io(e)),
            Ok(Err(e)) => return Err(Lost::Handshake(format!("bad challenge: {e}"))),
            Err(_) => {
                return Err(Lost::Handshake(format!(
                    "no challenge within {:?} (does the peer have the cluster secret?)",
                    self.handshake_timeout
                )))
            }
        };
        let fields = HelloFields {
            from: self.me,
            to: self.peer,
            cluster: self.cluster,
            reply_to: self.reply_to,
        };
        let Some(tag) = secret.hello_tag(&nonce, &fields) else {
            return Err(Lost::Handshake("cannot compute the answer".into()));
        };
        let hello = Wire::AuthHello {
            from: self.me,
            to: self.peer,
            cluster: self.cluster,
            reply_to: self.reply_to,
            tag,
        };
        encode(&hello, &mut self.buf).map_err(|e| Lost::Handshake(e.to_string()))
    }

    /// Encodes `first` and whatever else is queued (up to [`BATCH_BYTES`]) into the
    /// buffer; returns how many messages it holds.
    fn fill(&mut self, first: Message) -> u64 {
        let mut count = u64::from(self.push(first));
        while self.buf.len() < BATCH_BYTES {
            match self.rx.try_recv() {
                Ok(msg) => count += u64::from(self.push(msg)),
                Err(_) => break,
            }
        }
        count
    }

    /// Appends one message's frame to the buffer, unless it is too large.
    fn push(&mut self, msg: Message) -> bool {
        let start = self.buf.len();
        let kind = msg.body.kind();
        let result = encode(&Wire::Msg(msg), &mut self.buf);
        let len = self.buf.len() - start;
        match result {
            Ok(()) if len - LEN_PREFIX <= self.max_frame => return true,
            Ok(()) => {
                self.buf.truncate(start);
                tracing::warn!(
                    id = self.me,
                    peer = self.peer,
                    kind,
                    len,
                    max = self.max_frame,
                    "raft transport: message larger than the frame limit dropped"
                );
            }
            Err(e) => {
                tracing::warn!(id = self.me, peer = self.peer, kind, error = %e, "raft transport: message cannot be encoded; dropped");
            }
        }
        bump(&self.counters.dropped_oversized, 1);
        false
    }
}

/// A read guard on `lock`, whoever panicked holding it (the maps stay valid).
fn read_lock<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// A write guard on `lock` (see [`read_lock`]).
fn write_lock<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// A frame's kind, for a log line.
fn wire_kind(wire: &Wire) -> String {
    match wire {
        Wire::Hello { .. } => "a Hello".into(),
        Wire::AuthHello { .. } => "an authenticated Hello".into(),
        Wire::Challenge { .. } => "a challenge".into(),
        Wire::Msg(msg) => format!("a {} message", msg.body.kind()),
    }
}

/// What every connection's reader needs.
struct ReaderCtx {
    id: u16,
    /// The cluster secret peers must prove they know, if any.
    secret: Option<Secret>,
    /// The bytes all connections may hold in unfinished frames.
    budget: Arc<ByteBudget>,
    /// When a refusal was last logged as a warning, and how many were logged at
    /// debug since.
    warned: Mutex<(Option<Instant>, u64)>,
    cluster: u64,
    max_frame: usize,
    hello_timeout: Duration,
    hello_max: usize,
    inbound: mpsc::Sender<Message>,
    counters: Arc<Counters>,
    /// Each peer's writer's wake-up (see [`Writer::wake`]).
    wakes: Arc<RwLock<BTreeMap<u16, Arc<Notify>>>>,
    /// Where accepted Hellos are reported (see [`Transport::take_peer_ups`]).
    peer_ups: mpsc::Sender<u16>,
    /// Where the addresses of diallers that are not peers are remembered.
    dialback: Arc<DialBack>,
}

impl ReaderCtx {
    /// Counts and reports a refused frame; the caller then closes the connection.
    ///
    /// At most one warning a second: a misconfigured member (another secret)
    /// reconnects every few milliseconds, and each refusal would be a line. The
    /// others go to debug and are counted in the next warning.
    fn reject(&self, remote: SocketAddr, peer: Option<u16>, reason: &dyn std::fmt::Display) {
        bump(&self.counters.frames_rejected, 1);
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        let (last, suppressed) = &mut *warned;
        if last.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            tracing::warn!(id = self.id, %remote, peer = ?peer, reason = %reason, suppressed = *suppressed, "raft transport: closing an incoming connection");
            *last = Some(Instant::now());
            *suppressed = 0;
        } else {
            *suppressed += 1;
            tracing::debug!(id = self.id, %remote, peer = ?peer, reason = %reason, "raft transport: closing an incoming connection");
        }
    }
}

/// Accepts connections and runs one reader task per connection until told to stop
/// (then ends its readers, and ends after them) or aborted (then the readers are
/// aborted too, when the set is dropped).
async fn accept_loop(listener: TcpListener, ctx: Arc<ReaderCtx>, mut stop: watch::Receiver<bool>) {
    let mut readers = JoinSet::new();
    let mut last_warning: Option<Instant> = None;
    loop {
        tokio::select! {
            // Told to stop, or the transport is gone (the sender dropped).
            () = async { let _ = stop.wait_for(|&stop| stop).await; } => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    bump(&ctx.counters.accepted, 1);
                    readers.spawn(read_connection(stream, remote, Arc::clone(&ctx)));
                }
                Err(e) => {
                    // Typically out of file descriptors: pause instead of spinning,
                    // and warn at most once a second.
                    if last_warning.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
                        tracing::warn!(id = ctx.id, error = %e, "raft transport: accept failed");
                        last_warning = Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = readers.join_next(), if !readers.is_empty() => {}
        }
    }
    drop(listener);
    readers.shutdown().await;
}

/// Reads one incoming connection: its Hello, then messages, until it ends or breaks
/// a rule.
async fn read_connection(stream: TcpStream, remote: SocketAddr, ctx: Arc<ReaderCtx>) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(id = ctx.id, %remote, error = %e, "raft transport: cannot set TCP_NODELAY");
    }
    // The handshake reads the stream unbuffered (a frame's reads never go past
    // it), so a connection that is not admitted costs no read buffer.
    let mut stream = stream;
    let mut buf = Vec::new();
    // With a secret, challenge the dialler before reading anything it sends.
    let nonce = match &ctx.secret {
        None => None,
        Some(_) => {
            let mut nonce = [0u8; TAG_LEN];
            if let Err(e) = getrandom::fill(&mut nonce) {
                tracing::error!(id = ctx.id, %remote, error = %e, "raft transport: no randomness for a challenge; connection closed");
                return;
            }
            Some(nonce)
        }
    };
    let handshake = async {
        if let Some(nonce) = nonce {
            let mut challenge = Vec::new();
            encode(&Wire::Challenge { nonce }, &mut challenge)?;
            stream.write_all(&challenge).await?;
        }
        read_frame(&mut stream, &mut buf, ctx.hello_max).await
    };
    let first = tokio::time::timeout(ctx.hello_timeout, handshake).await;
    // An authenticated Hello is checked against the challenge, then treated as a
    // Hello; a plain one is refused when a secret is required.
    let first = match (first, &ctx.secret, nonce) {
        (
            Ok(Ok(Some(Wire::AuthHello {
                from,
                to,
                cluster,
                reply_to,
                tag,
            }))),
            Some(secret),
            Some(nonce),
        ) => {
            let fields = HelloFields {
                from,
                to,
                cluster,
                reply_to,
            };
            if !secret.verify_hello(&nonce, &fields, &tag) {
                let reason = format!(
                    "authentication failed: node {from}'s answer to the challenge does not match this node's cluster secret"
                );
                return ctx.reject(remote, None, &reason);
            }
            Ok(Ok(Some(Wire::Hello {
                from,
                to,
                cluster,
                reply_to,
            })))
        }
        (Ok(Ok(Some(Wire::Hello { from, .. }))), Some(_), _) => {
            let reason = format!(
                "a Hello from node {from} without authentication, but this node requires the cluster secret"
            );
            return ctx.reject(remote, None, &reason);
        }
        (Ok(Ok(Some(Wire::AuthHello { from, .. }))), None, _) => {
            let reason = format!(
                "an authenticated Hello from node {from}, but this node has no cluster secret (give every member the same one)"
            );
            return ctx.reject(remote, None, &reason);
        }
        (first, _, _) => first,
    };
    let (from, reply_to) = match first {
        Ok(Ok(Some(Wire::Hello {
            from,
            to,
            cluster,
            reply_to,
        })))
            // Any other member of this cluster is welcome, known or not: a node
            // hears from members added since it last looked at the
            // configuration (a learner's new leader, say) before it knows them;
            // the cluster id is what keeps strangers out.
            if to == ctx.id && from != ctx.id && cluster == ctx.cluster =>
        {
            (from, reply_to)
        }
        Ok(Ok(Some(Wire::Hello { cluster, .. }))) if cluster != ctx.cluster => {
            let reason = format!(
                "Hello from a node of cluster {cluster:016x}, but this node belongs to cluster {:016x}",
                ctx.cluster
            );
            return ctx.reject(remote, None, &reason);
        }
        Ok(Ok(Some(Wire::Hello { from, to, .. }))) => {
            let reason = format!(
                "Hello from node {from} to node {to}, but this is node {}",
                ctx.id
            );
            return ctx.reject(remote, None, &reason);
        }
        Ok(Ok(Some(other))) => {
            let reason = format!("{} before the Hello", wire_kind(&other));
            return ctx.reject(remote, None, &reason);
        }
        Ok(Ok(None)) => {
            tracing::debug!(id = ctx.id, %remote, "raft transport: connection closed before its Hello");
            return;
        }
        Ok(Err(FrameError::Io(e))) => {
            tracing::debug!(id = ctx.id, %remote, error = %e, "raft transport: connection failed before its Hello");
            return;
        }
        Ok(Err(e)) => {
            return ctx.reject(
                remote,
                None,
                &format_args!("first frame: {e} (expected a Hello)"),
            );
        }
        Err(_) => {
            let reason = format!("no Hello within {:?}", ctx.hello_timeout);
            return ctx.reject(remote, None, &reason);
        }
    };
    tracing::debug!(id = ctx.id, %remote, peer = from, "raft transport: accepted a connection");
    let wake = read_lock(&ctx.wakes).get(&from).cloned();
    match (wake, reply_address(reply_to, remote)) {
        (Some(wake), _) => wake.notify_one(),
        // Not a peer: remember where it listens, to answer it (`dialback`).
        (None, Some(addr)) => ctx.dialback.heard(from, addr),
        (None, None) => {}
    }
    // Best effort: a full channel (nobody listening) only loses the hint.
    let _ = ctx.peer_ups.try_send(from);
    buf = Vec::with_capacity(4096);
    let mut reader = BufReader::with_capacity(READ_BUF, stream);
    // This connection's share of the budget; given back when the task ends,
    // however it ends.
    let mut held = Held::new(&ctx.budget);
    loop {
        match read_frame_held(&mut reader, &mut buf, ctx.max_frame, &mut held).await {
            Ok(Some(Wire::Msg(msg))) if msg.from == from && msg.to == ctx.id => {
                // Every field checked before the node sees it (`raft::validate`).
                if let Err(e) = msg.validate(&crate::consensus::raft::MessageLimits::default()) {
                    let reason = format!("invalid {} message: {e}", msg.body.kind());
                    return ctx.reject(remote, Some(from), &reason);
                }
                crate::server::hops::hop!("received", ctx.id, peer = from);
                bump(&ctx.counters.received, 1);
                if ctx.inbound.send(msg).await.is_err() {
                    tracing::debug!(id = ctx.id, %remote, peer = from, "raft transport: inbound channel closed; connection dropped");
                    return;
                }
            }
            Ok(Some(Wire::Msg(msg))) => {
                let reason = format!(
                    "misrouted {} message from node {} to node {}",
                    msg.body.kind(),
                    msg.from,
                    msg.to
                );
                return ctx.reject(remote, Some(from), &reason);
            }
            Ok(Some(
                other @ (Wire::Hello { .. } | Wire::AuthHello { .. } | Wire::Challenge { .. }),
            )) => {
                let reason = format!("{} after the Hello", wire_kind(&other));
                return ctx.reject(remote, Some(from), &reason);
            }
            Ok(None) => {
                tracing::debug!(id = ctx.id, %remote, peer = from, "raft transport: connection closed by the peer");
                return;
            }
            Err(HeldReadError::Frame(FrameError::Io(e))) => {
                tracing::debug!(id = ctx.id, %remote, peer = from, error = %e, "raft transport: connection failed");
                return;
            }
            Err(e) => return ctx.reject(remote, Some(from), &e),
        }
        if buf.capacity() > READER_KEEP {
            buf = Vec::with_capacity(4096);
        }
    }
}
