//! The TCP server: one tokio task per client connection, pipelined requests answered
//! strictly in order.
//!
//! A connection task loops over *batches*: it decodes every complete request in its
//! read buffer (at most [`MAX_BATCH`] of them), submits each node request to the node
//! in order (`KvHandle::send(..).await`, so a full node queue slows the client down
//! instead of growing memory), keeps the oneshot receivers — and the local replies of
//! `PING`, `CONFIG GET` and friends — in one FIFO, then awaits that FIFO front to back
//! into one output buffer and writes it with a single `write_all`. The node therefore
//! sees a client's pipelined batch all at once (and can commit it as one group),
//! while the replies leave in request order whatever order the node completes them
//! in.
//!
//! One connection's commands take effect in the order it sent them, as Redis's
//! do: the node serves a read at its applied index, which may already include a
//! write taken after the read (or not yet one taken before it), so a read is not
//! submitted while a write of the same connection is still in flight, nor a write
//! while a read is: the replies owed so far are awaited and written first. Runs of
//! writes, and runs of reads, still go to the node together.
//!
//! Failures are contained to one connection: a protocol error is answered with
//! `-ERR Protocol error: <reason>` after the replies of the requests before it and
//! the connection is closed; a closed node queue (or a reply channel the node dropped)
//! is answered with `-ERR node is shutting down`. The server never panics on input.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

use super::codec::{write_error, Decoder, RespError};
use super::command::{encode_kv_reply, Command, CommandError, Local};
use crate::machine::{MachineCall, StateMachine};
use crate::node::LeaseGate;
use crate::service::{KvCall, KvHandle, KvReply, KvRequest};

/// The most requests a connection decodes and submits before it writes their replies.
pub const MAX_BATCH: usize = 1024;
/// How long [`RespServer::run`] waits, after shutdown is signalled, for connections to
/// finish the batch they are serving before it aborts them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The free space ensured in a connection's read buffer before each read.
const READ_CHUNK: usize = 16 << 10;
/// Pending replies are written early once this many bytes are buffered.
const WRITE_EARLY: usize = 1 << 20;
/// Idle buffers grown beyond this (by a large value) are shrunk back.
const KEEP_CAPACITY: usize = 1 << 20;

/// The reply to a request whose node is gone.
const NODE_GONE: &[u8] = b"ERR node is shutting down";

/// The RESP server of one node.
///
/// ```no_run
/// # async fn demo(handle: raft_nvm::service::KvHandle) -> std::io::Result<()> {
/// use raft_nvm::resp::RespServer;
///
/// let (stop, shutdown) = tokio::sync::watch::channel(false);
/// let server = RespServer::bind("127.0.0.1:6379", handle).await?;
/// println!("RESP on {}", server.local_addr()?);
/// let task = tokio::spawn(server.run(shutdown));
/// // ...
/// stop.send(true).ok();
/// task.await??;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RespServer {
    listener: TcpListener,
    handle: KvHandle,
    machine: Option<Arc<dyn StateMachine>>,
    lease_gate: Option<Arc<LeaseGate>>,
}

impl RespServer {
    /// Binds a listener to `addr`; requests go to the node behind `handle`.
    ///
    /// # Errors
    ///
    /// The error of binding the socket.
    pub async fn bind<A: ToSocketAddrs>(addr: A, handle: KvHandle) -> io::Result<Self> {
        Ok(Self::from_listener(TcpListener::bind(addr).await?, handle))
    }

    /// A server on an already bound listener.
    pub fn from_listener(listener: TcpListener, handle: KvHandle) -> Self {
        Self {
            listener,
            handle,
            machine: None,
            lease_gate: None,
        }
    }

    /// Answers `GET` from the node's lease read point when it holds (see
    /// `LeaseGate`), without a trip through the node's loop.
    #[must_use]
    pub(crate) fn with_lease_gate(mut self, gate: Option<Arc<LeaseGate>>) -> Self {
        self.lease_gate = gate;
        self
    }

    /// Also serves `machine`'s commands: a command that is not one of the
    /// built-in ones goes to [`StateMachine::parse`] before it is called unknown.
    #[must_use]
    pub fn with_machine(mut self, machine: Option<Arc<dyn StateMachine>>) -> Self {
        self.machine = machine;
        self
    }

    /// The address the server listens on (with the port the OS chose for port 0).
    ///
    /// # Errors
    ///
    /// The error of querying the socket.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts clients until `shutdown` holds `true` (or its sender is dropped),
    /// serving each on its own task.
    ///
    /// On shutdown the listener is closed at once; each connection finishes the batch
    /// it is serving (writing its replies) and closes, and connections still open
    /// after [`SHUTDOWN_GRACE`] are aborted. Returns when all are gone.
    ///
    /// # Errors
    ///
    /// Only if the listener itself is unusable (`InvalidInput`: not listening). Other
    /// accept errors concern one connection or a passing shortage (file descriptors,
    /// memory); they are logged and accepting goes on, after a short pause for the
    /// latter.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> io::Result<()> {
        let Self {
            listener,
            handle,
            machine,
            lease_gate,
        } = self;
        let mut conns = JoinSet::new();
        let sessions = shutdown.clone();
        let result = crate::accept::accept_until_shutdown(
            &listener,
            &mut shutdown,
            &mut conns,
            "RESP",
            |stream, peer, conns| {
                let mut conn = Connection::new(stream, handle.clone(), machine.clone());
                conn.lease_gate = lease_gate.clone();
                let shutdown = sessions.clone();
                conns.spawn(async move {
                    if let Err(e) = conn.run(shutdown).await {
                        tracing::debug!(%peer, error = %e, "RESP connection failed");
                    }
                });
            },
        )
        .await;
        drop(listener);
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while conns.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                open = conns.len(),
                "RESP connections still open after the shutdown grace period; aborting them"
            );
            conns.shutdown().await;
        }
        result
    }
}

/// Serves RESP clients on `listener` until `shutdown` holds `true`, sending their
/// requests to the node behind `handle`: [`RespServer::run`] on
/// [`RespServer::from_listener`].
///
/// # Errors
///
/// As [`RespServer::run`].
pub async fn serve(
    listener: TcpListener,
    handle: KvHandle,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    RespServer::from_listener(listener, handle)
        .run(shutdown)
        .await
}

/// Which requests a request must not overtake, nor be overtaken by, at the node
/// (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Reads the map at the node's applied index (`GET`, a state machine's query).
    Read,
    /// Changes the map through the log.
    Write,
    /// Neither (`INFO`, a leadership transfer, the configuration's text).
    Other,
}

impl Class {
    fn of(req: &KvRequest) -> Class {
        match req {
            KvRequest::Get { .. } | KvRequest::Machine(MachineCall::Read(_)) => Class::Read,
            r if r.is_write() => Class::Write,
            _ => Class::Other,
        }
    }

    /// The class whose requests in flight a request of this class must wait for.
    fn waits_for(self) -> Option<Class> {
        match self {
            Class::Read => Some(Class::Write),
            Class::Write => Some(Class::Read),
            Class::Other => None,
        }
    }
}

/// A reply owed to the client, in request order.
enum Pending {
    /// The node's answer to a request of this class, to come.
    Node(oneshot::Receiver<KvReply>, Class),
    /// An answer already known (a `GET` read from the lease read point).
    Ready(KvReply),
    /// A local command's reply.
    Local(Local),
    /// A command that could not be run.
    Error(CommandError),
    /// The node's queue is closed.
    NodeGone,
}

/// Why a connection closes after its current batch.
enum End {
    /// The client sent `QUIT`.
    Quit,
    /// The client sent something that is not RESP.
    Protocol(RespError),
}

/// One client connection's state; the buffers live as long as the connection.
struct Connection {
    stream: TcpStream,
    handle: KvHandle,
    machine: Option<Arc<dyn StateMachine>>,
    lease_gate: Option<Arc<LeaseGate>>,
    decoder: Decoder,
    /// Received bytes not yet consumed by the decoder.
    input: Vec<u8>,
    /// Encoded replies not yet written.
    output: Vec<u8>,
    /// The replies owed, oldest first.
    fifo: VecDeque<Pending>,
}

impl Connection {
    fn new(stream: TcpStream, handle: KvHandle, machine: Option<Arc<dyn StateMachine>>) -> Self {
        Self {
            stream,
            handle,
            machine,
            lease_gate: None,
            decoder: Decoder::new(),
            input: Vec::with_capacity(READ_CHUNK),
            output: Vec::with_capacity(READ_CHUNK),
            fifo: VecDeque::new(),
        }
    }

    /// Serves the connection until the client leaves, sends `QUIT` or garbage, or
    /// shutdown is signalled.
    async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> io::Result<()> {
        // Replies are written whole, so Nagle's algorithm would only add delay.
        if let Err(e) = self.stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY failed");
        }
        loop {
            let (decoded, end) = self.submit_batch().await?;
            self.write_replies(end.as_ref()).await?;
            if end.is_some() {
                break;
            }
            if decoded == MAX_BATCH {
                // More complete requests may be buffered: serve them before reading.
                continue;
            }
            self.shrink_idle_buffers();
            if self.input.capacity() - self.input.len() < READ_CHUNK / 4 {
                self.input.reserve(READ_CHUNK);
            }
            let read = tokio::select! {
                biased;
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow_and_update() {
                        break;
                    }
                    continue;
                }
                read = self.stream.read_buf(&mut self.input) => read?,
            };
            if read == 0 {
                // The client closed its side (a partial request is dropped).
                return Ok(());
            }
        }
        self.stream.shutdown().await
    }

    /// Decodes up to [`MAX_BATCH`] requests from the input buffer, submitting node
    /// requests and queueing every reply owed. Returns how many were decoded and
    /// whether the connection must close after this batch. Writes the replies owed
    /// so far early when a request must wait for them (see the module docs).
    ///
    /// # Errors
    ///
    /// Writing those early replies failed.
    async fn submit_batch(&mut self) -> io::Result<(usize, Option<End>)> {
        let mut pos = 0;
        let mut decoded = 0;
        let mut end = None;
        while decoded < MAX_BATCH {
            let args = match self.decoder.decode(&self.input[pos..]) {
                Ok((used, Some(args))) => {
                    pos += used;
                    args
                }
                Ok((used, None)) => {
                    pos += used;
                    break;
                }
                Err(e) => {
                    end = Some(End::Protocol(e));
                    break;
                }
            };
            decoded += 1;
            let pending = match Command::parse_with(args, self.machine.as_deref()) {
                Ok(Command::Kv(KvRequest::Get { key })) if self.may_read_directly() => {
                    match self.read_directly(&key) {
                        Some(reply) => Pending::Ready(reply),
                        None => self.submit(KvRequest::Get { key }).await,
                    }
                }
                Ok(Command::Kv(req)) => {
                    if let Some(other) = Class::of(&req).waits_for() {
                        if self.in_flight(other) {
                            self.write_replies(None).await?;
                        }
                    }
                    self.submit(req).await
                }
                Ok(Command::Local(Local::Quit)) => {
                    end = Some(End::Quit);
                    Pending::Local(Local::Quit)
                }
                Ok(Command::Local(local)) => Pending::Local(local),
                Err(e) => Pending::Error(e),
            };
            self.fifo.push_back(pending);
            if end.is_some() {
                break;
            }
        }
        self.input.drain(..pos);
        Ok((decoded, end))
    }

    /// Whether a request of `class` is still waiting on the node.
    fn in_flight(&self, class: Class) -> bool {
        self.fifo
            .iter()
            .any(|p| matches!(p, Pending::Node(_, c) if *c == class))
    }

    /// Whether a `GET` may be answered from the lease read point: there is one,
    /// and no earlier request of this connection is still waiting on the node (its
    /// commands take effect in order, as Redis's do).
    fn may_read_directly(&self) -> bool {
        self.lease_gate.is_some() && !self.in_flight(Class::Write)
    }

    /// `GET key` from the lease read point, or `None` when the lease does not
    /// hold now (or the store failed: the node then answers).
    fn read_directly(&self, key: &[u8]) -> Option<KvReply> {
        let (store, applied) = self.lease_gate.as_ref()?.read_point()?;
        store.get(key, applied).ok().map(KvReply::Value)
    }

    /// Hands `req` to the node.
    async fn submit(&mut self, req: KvRequest) -> Pending {
        crate::hops::hop!("request", 0u16);
        let class = Class::of(&req);
        let (reply, rx) = oneshot::channel();
        match self.handle.send(KvCall { req, reply }).await {
            Ok(()) => Pending::Node(rx, class),
            Err(_) => Pending::NodeGone,
        }
    }

    /// Encodes the owed replies in order (awaiting the node's) and writes them, then
    /// the protocol error that ends the connection, if any.
    async fn write_replies(&mut self, end: Option<&End>) -> io::Result<()> {
        while let Some(pending) = self.fifo.pop_front() {
            match pending {
                Pending::Node(rx, _) => match rx.await {
                    Ok(reply) => encode_kv_reply(&reply, &mut self.output),
                    Err(_) => write_error(&mut self.output, NODE_GONE),
                },
                Pending::Ready(reply) => encode_kv_reply(&reply, &mut self.output),
                Pending::Local(local) => local.encode_reply(&mut self.output),
                Pending::Error(e) => e.encode_reply(&mut self.output),
                Pending::NodeGone => write_error(&mut self.output, NODE_GONE),
            }
            if self.output.len() >= WRITE_EARLY {
                self.stream.write_all(&self.output).await?;
                self.output.clear();
            }
        }
        if let Some(End::Protocol(e)) = end {
            write_error(
                &mut self.output,
                format!("ERR Protocol error: {e}").as_bytes(),
            );
        }
        if !self.output.is_empty() {
            self.stream.write_all(&self.output).await?;
            crate::hops::hop!("reply", 0u16);
            self.output.clear();
        }
        Ok(())
    }

    /// Gives back the memory of buffers a large request or reply grew, once empty.
    fn shrink_idle_buffers(&mut self) {
        if self.input.is_empty() && self.input.capacity() > KEEP_CAPACITY {
            self.input = Vec::with_capacity(READ_CHUNK);
        }
        if self.output.capacity() > KEEP_CAPACITY {
            self.output = Vec::with_capacity(READ_CHUNK);
        }
    }
}
