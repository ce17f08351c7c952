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
//!
//! [`Wire::Hello`]: crate::server::net::frame::Wire::Hello
//! [`Wire::Challenge`]: crate::server::net::frame::Wire::Challenge
//! [`Wire::AuthHello`]: crate::server::net::frame::Wire::AuthHello

mod config;
mod reader;
mod stats;
mod writer;

use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;

pub use config::{
    TransportConfig, TransportError, DEFAULT_FRAME_BUDGET, DEFAULT_MAX_PEER_CONNECTIONS,
};
pub use stats::TransportStats;

use super::dialback::DialBack;
use crate::consensus::raft::Message;
use crate::server::budget::ByteBudget;
use reader::{accept_loop, ReaderCtx};
use stats::{bump, Counters};
use writer::Writer;

/// Peer announcements kept for [`Transport::take_peer_ups`] (more are dropped).
const PEER_UPS: usize = 64;
/// The limit on the first frame of a connection (a Hello is a few bytes: at most
/// 74 with an IPv6 address and a tag), so an unidentified dialler cannot make the
/// reader allocate much.
const HELLO_MAX: usize = 128;

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
            max_connections: cfg.max_connections.max(1),
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
        let (tx, rx) = mpsc::channel(self.cfg.queue_depth.max(1));
        let wake = Arc::new(Notify::new());
        let writer = Writer::new(self, peer, addr, rx, Arc::clone(&wake));
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

/// A read guard on `lock`, whoever panicked holding it (the maps stay valid).
fn read_lock<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// A write guard on `lock` (see [`read_lock`]).
fn write_lock<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}
