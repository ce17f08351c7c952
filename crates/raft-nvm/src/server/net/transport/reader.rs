//! The listener's side: one reader task per accepted connection, which checks the
//! dialler's Hello (and, with a cluster secret, its answer to a challenge), then
//! checks every message it sends and hands it to the node's inbound channel.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;
use tokio::time::error::Elapsed;
use tokio::time::Instant;

use super::read_lock;
use super::stats::{bump, Counters};
use crate::consensus::raft::Message;
use crate::server::budget::{ByteBudget, Held};
use crate::server::net::dialback::{reply_address, DialBack};
use crate::server::net::frame::{
    encode, read_frame, read_frame_held, FrameError, HeldReadError, Wire,
};
use crate::server::secret::{HelloFields, Secret, TAG_LEN};

/// The read buffer of a connection's `BufReader`.
const READ_BUF: usize = 64 << 10;
/// A reader's frame buffer grown beyond this is given back after the frame, so an
/// idle connection holds little outside the shared budget.
const READER_KEEP: usize = 64 << 10;

/// A frame's kind, for a log line.
pub(super) fn wire_kind(wire: &Wire) -> String {
    match wire {
        Wire::Hello { .. } => "a Hello".into(),
        Wire::AuthHello { .. } => "an authenticated Hello".into(),
        Wire::Challenge { .. } => "a challenge".into(),
        Wire::Msg(msg) => format!("a {} message", msg.body.kind()),
    }
}

/// What every connection's reader needs.
pub(super) struct ReaderCtx {
    pub(super) id: u16,
    /// The cluster secret peers must prove they know, if any.
    pub(super) secret: Option<Secret>,
    /// The bytes all connections may hold in unfinished frames.
    pub(super) budget: Arc<ByteBudget>,
    /// When a refusal was last logged as a warning, and how many were logged at
    /// debug since.
    pub(super) warned: Mutex<(Option<Instant>, u64)>,
    pub(super) cluster: u64,
    pub(super) max_frame: usize,
    pub(super) hello_timeout: Duration,
    pub(super) hello_max: usize,
    /// The most connections served at once (see `TransportConfig::max_connections`).
    pub(super) max_connections: usize,
    pub(super) inbound: mpsc::Sender<Message>,
    pub(super) counters: Arc<Counters>,
    /// Each peer's writer's wake-up (see [`Writer`](super::writer::Writer)'s `wake`).
    pub(super) wakes: Arc<RwLock<BTreeMap<u16, Arc<Notify>>>>,
    /// Where accepted Hellos are reported (see [`Transport::take_peer_ups`](super::Transport::take_peer_ups)).
    pub(super) peer_ups: mpsc::Sender<u16>,
    /// Where the addresses of diallers that are not peers are remembered.
    pub(super) dialback: Arc<DialBack>,
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
pub(super) async fn accept_loop(
    listener: TcpListener,
    ctx: Arc<ReaderCtx>,
    mut stop: watch::Receiver<bool>,
) {
    let mut readers = JoinSet::new();
    let mut last_warning: Option<Instant> = None;
    loop {
        tokio::select! {
            // Told to stop, or the transport is gone (the sender dropped).
            () = async { let _ = stop.wait_for(|&stop| stop).await; } => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    bump(&ctx.counters.accepted, 1);
                    // Readers that ended since the last reaping do not count.
                    while readers.try_join_next().is_some() {}
                    if readers.len() >= ctx.max_connections {
                        // Dropped: closed at once, before a byte is read.
                        let reason = format!(
                            "{} connections open, the most this node serves (max_connections)",
                            readers.len()
                        );
                        ctx.reject(remote, None, &reason);
                    } else {
                        readers.spawn(read_connection(stream, remote, Arc::clone(&ctx)));
                    }
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
    let Some((from, reply_to)) = handshake(&mut stream, remote, &ctx).await else {
        return;
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
    let reader = BufReader::with_capacity(READ_BUF, stream);
    read_messages(reader, remote, from, &ctx).await;
}

/// The first frame of a connection as read: in time or not, whole or not.
type First = Result<Result<Option<Wire>, FrameError>, Elapsed>;

/// Challenges the dialler if there is a secret, reads its first frame and checks
/// it is a Hello (authenticated if need be) to this node from another member of its
/// cluster; returns the dialler's id and the address its Hello gave, or `None`
/// (refused and reported, or closed) if it is not.
async fn handshake(
    stream: &mut TcpStream,
    remote: SocketAddr,
    ctx: &ReaderCtx,
) -> Option<(u16, SocketAddr)> {
    let mut buf = Vec::new();
    // With a secret, challenge the dialler before reading anything it sends.
    let nonce = match &ctx.secret {
        None => None,
        Some(_) => {
            let mut nonce = [0u8; TAG_LEN];
            if let Err(e) = getrandom::fill(&mut nonce) {
                tracing::error!(id = ctx.id, %remote, error = %e, "raft transport: no randomness for a challenge; connection closed");
                return None;
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
        read_frame(stream, &mut buf, ctx.hello_max).await
    };
    let first = tokio::time::timeout(ctx.hello_timeout, handshake).await;
    let first = authenticate(first, nonce, remote, ctx)?;
    check_hello(first, remote, ctx)
}

/// An authenticated Hello is checked against the challenge (`nonce`), then treated
/// as a Hello; a plain one is refused when a secret is required, and an
/// authenticated one when there is none. `None`: refused (and reported).
fn authenticate(
    first: First,
    nonce: Option<[u8; TAG_LEN]>,
    remote: SocketAddr,
    ctx: &ReaderCtx,
) -> Option<First> {
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
                ctx.reject(remote, None, &reason);
                return None;
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
            ctx.reject(remote, None, &reason);
            return None;
        }
        (Ok(Ok(Some(Wire::AuthHello { from, .. }))), None, _) => {
            let reason = format!(
                "an authenticated Hello from node {from}, but this node has no cluster secret (give every member the same one)"
            );
            ctx.reject(remote, None, &reason);
            return None;
        }
        (first, _, _) => first,
    };
    Some(first)
}

/// The dialler's id and reply address if `first` is a Hello to this node from
/// another member of its cluster; otherwise `None`, refused and reported (or
/// logged at debug if the connection closed or failed first).
fn check_hello(first: First, remote: SocketAddr, ctx: &ReaderCtx) -> Option<(u16, SocketAddr)> {
    let reason = match first {
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
            return Some((from, reply_to));
        }
        Ok(Ok(Some(Wire::Hello { cluster, .. }))) if cluster != ctx.cluster => format!(
            "Hello from a node of cluster {cluster:016x}, but this node belongs to cluster {:016x}",
            ctx.cluster
        ),
        Ok(Ok(Some(Wire::Hello { from, to, .. }))) => format!(
            "Hello from node {from} to node {to}, but this is node {}",
            ctx.id
        ),
        Ok(Ok(Some(other))) => format!("{} before the Hello", wire_kind(&other)),
        Ok(Ok(None)) => {
            tracing::debug!(id = ctx.id, %remote, "raft transport: connection closed before its Hello");
            return None;
        }
        Ok(Err(FrameError::Io(e))) => {
            tracing::debug!(id = ctx.id, %remote, error = %e, "raft transport: connection failed before its Hello");
            return None;
        }
        Ok(Err(e)) => format!("first frame: {e} (expected a Hello)"),
        Err(_) => format!("no Hello within {:?}", ctx.hello_timeout),
    };
    ctx.reject(remote, None, &reason);
    None
}

/// Reads the messages of an admitted connection from node `from` and hands them
/// to the node, until the connection ends or breaks a rule (a message not from
/// `from` to this node, an invalid one, another Hello).
async fn read_messages(
    mut reader: BufReader<TcpStream>,
    remote: SocketAddr,
    from: u16,
    ctx: &ReaderCtx,
) {
    let mut buf = Vec::with_capacity(4096);
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
