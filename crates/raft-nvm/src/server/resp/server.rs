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
//!
//! # Memory
//!
//! A request may hold at most [`RespServer::with_limits`]' `max_request` bytes
//! (default [`DEFAULT_MAX_REQUEST`], 65 MiB), headers included: a larger one is
//! answered `-ERR Protocol error: request too large ...` and its connection closed,
//! as soon as a header announces it. The bytes all connections hold in unfinished
//! requests (their read buffers and the arguments decoded so far) share one budget,
//! `max_buffered` (default [`DEFAULT_MAX_BUFFERED`], 256 MiB): each read takes at
//! most [`READ_LIMIT`] bytes and is then counted; a connection that would take the
//! total past the budget is answered `-ERR ...` and closed. So the bytes of
//! unfinished requests stay under `max_buffered` plus one read per connection
//! being served at that moment. (Requests already handed to the node wait in its
//! queue, whose depth is bounded in requests.)
//!
//! # Hostile clients
//!
//! At most [`RespServer::with_max_clients`] connections (default
//! [`DEFAULT_MAX_CLIENTS`], 1024) are served at once: one more is answered
//! `-ERR max number of clients reached` (Redis's words for its `maxclients`) and
//! closed at once, and the refusal is logged. A client that has begun a request
//! must finish it within [`RespServer::with_request_timeout`] (default
//! [`DEFAULT_REQUEST_TIMEOUT`], 10 s) from the moment its first byte was read: a
//! slow-loris client, which sends part of a request and then trickles or stops,
//! is answered `-ERR ... timed out ...` and closed. The clock runs only while a
//! request is incomplete, so an idle connection between requests stays open (as
//! with Redis's default `timeout 0`), and a client pipelining requests
//! back-to-back is timed per request, not per connection. A request of many
//! megabytes over a slow link needs a longer timeout.
//!
//! # Password
//!
//! With a password ([`RespServer::with_password`], Redis's `requirepass`), a
//! connection must authenticate first: `AUTH password` or `AUTH default password`
//! answers `+OK`, a wrong password or another user
//! `-WRONGPASS invalid username-password pair or user is disabled.`, and every other
//! command but `HELLO` and `QUIT` is answered `-NOAUTH Authentication required.`
//! until then. Pipelined commands after a successful `AUTH` in the same batch are
//! served. Until it authenticates a connection's requests are limited to
//! [`UNAUTHENTICATED_MAX_REQUEST`] bytes (as Redis limits unauthenticated clients),
//! so strangers cannot make the node buffer much. The password is compared in
//! constant time.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::codec::{write_error, Decoder, Reply, RespError, DEFAULT_MAX_REQUEST};
use super::command::{encode_kv_reply, Command, CommandError, Local, NOAUTH, WRONGPASS};
use crate::consensus::machine::{MachineCall, StateMachine};
use crate::consensus::service::{KvReply, KvRequest};
use crate::server::budget::{ByteBudget, Held};
use crate::server::node::LeaseGate;
use crate::server::node::{KvCall, KvHandle};
use crate::server::secret::Secret;

/// The most requests a connection decodes and submits before it writes their replies.
pub const MAX_BATCH: usize = 1024;
/// How long [`RespServer::run`] waits, after shutdown is signalled, for connections to
/// finish the batch they are serving before it aborts them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The free space ensured in a connection's read buffer before each read.
const READ_CHUNK: usize = 16 << 10;
/// The most bytes one read takes from a client before they are counted against
/// the shared budget.
pub const READ_LIMIT: usize = 256 << 10;
/// The default limit on the bytes all connections hold in unfinished requests
/// (256 MiB).
pub const DEFAULT_MAX_BUFFERED: usize = 256 << 20;
/// The limit on a request before its connection authenticated, when the server
/// has a password (16 KiB: an `AUTH` with the longest password fits).
pub const UNAUTHENTICATED_MAX_REQUEST: usize = 16 << 10;
/// The default limit on the connections served at once ([`RespServer::with_max_clients`]).
pub const DEFAULT_MAX_CLIENTS: usize = 1024;
/// The default time a client may take to finish a request it has begun
/// ([`RespServer::with_request_timeout`]).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// What a connection over the cap is told before it is closed (Redis's words).
const MAX_CLIENTS_REACHED: &[u8] = b"-ERR max number of clients reached\r\n";
/// Pending replies are written early once this many bytes are buffered.
const WRITE_EARLY: usize = 1 << 20;
/// Idle buffers grown beyond this (by a large value) are shrunk back.
const KEEP_CAPACITY: usize = 1 << 20;

/// The reply to a request whose node is gone.
const NODE_GONE: &[u8] = b"ERR node is shutting down";

/// The RESP server of one node.
///
/// ```no_run
/// # async fn demo(handle: raft_nvm::node::KvHandle) -> std::io::Result<()> {
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
    max_request: usize,
    budget: Arc<ByteBudget>,
    password: Option<Secret>,
    max_clients: usize,
    request_timeout: Duration,
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
            max_request: DEFAULT_MAX_REQUEST,
            budget: ByteBudget::new(DEFAULT_MAX_BUFFERED),
            password: None,
            max_clients: DEFAULT_MAX_CLIENTS,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// Serves at most `max_clients` connections at once (default
    /// [`DEFAULT_MAX_CLIENTS`]; at least 1): one more is answered `-ERR max number
    /// of clients reached` and closed (see the module docs).
    #[must_use]
    pub fn with_max_clients(mut self, max_clients: usize) -> Self {
        self.max_clients = max_clients.max(1);
        self
    }

    /// Closes a connection whose request, once begun, is not complete within
    /// `timeout` (default [`DEFAULT_REQUEST_TIMEOUT`]; see the module docs).
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Limits one request to `max_request` bytes (headers included) and the
    /// unfinished requests of all connections together to `max_buffered` bytes
    /// (see the module docs; defaults [`DEFAULT_MAX_REQUEST`] and
    /// [`DEFAULT_MAX_BUFFERED`]).
    #[must_use]
    pub fn with_limits(mut self, max_request: usize, max_buffered: usize) -> Self {
        self.max_request = max_request;
        self.budget = ByteBudget::new(max_buffered);
        self
    }

    /// Requires clients to authenticate with `password` (`AUTH`, as Redis's
    /// `requirepass`; see the module docs). `None`, the default: no password.
    #[must_use]
    pub fn with_password(mut self, password: Option<Secret>) -> Self {
        self.password = password;
        self
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
            max_request,
            budget,
            password,
            max_clients,
            request_timeout,
        } = self;
        let mut conns = JoinSet::new();
        let sessions = shutdown.clone();
        let result = crate::server::accept::accept_until_shutdown(
            &listener,
            &mut shutdown,
            &mut conns,
            crate::server::accept::Admission {
                what: "RESP",
                max_conns: max_clients,
                refusal: MAX_CLIENTS_REACHED,
            },
            |stream, peer, conns| {
                let mut conn = Connection::new(stream, handle.clone(), machine.clone());
                conn.lease_gate = lease_gate.clone();
                conn.request_timeout = request_timeout;
                conn.peer = Some(peer);
                conn.held = Some(Held::new(&budget));
                conn.set_password(password.clone(), max_request);
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

/// Whether a command may run before its connection authenticated: `AUTH`,
/// `HELLO` and `QUIT`, as in Redis.
fn allowed_before_auth(args: &[Vec<u8>]) -> bool {
    args.first().is_some_and(|name| {
        [&b"auth"[..], b"hello", b"quit"]
            .iter()
            .any(|ok| name.eq_ignore_ascii_case(ok))
    })
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
    /// A reply the connection gives itself (`AUTH`, `NOAUTH`).
    Reply(Reply),
}

/// Why a connection closes after its current batch.
enum End {
    /// The client sent `QUIT`.
    Quit,
    /// The client sent something that is not RESP.
    Protocol(RespError),
    /// A request begun this long ago is still incomplete (slow loris).
    Timeout(Duration),
    /// The connections' unfinished requests would exceed their budget.
    OverBudget {
        /// The bytes all connections held.
        used: usize,
        /// The budget.
        limit: usize,
    },
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
    /// This connection's share of the server's budget for unfinished requests
    /// (`None`: not counted, outside a server).
    held: Option<Held>,
    /// The password clients must give.
    password: Option<Secret>,
    /// Whether this connection gave it.
    authenticated: bool,
    /// The request limit once authenticated.
    max_request: usize,
    /// How long a begun request may take to complete.
    request_timeout: Duration,
    /// The client's address, for logs (`None` outside a server).
    peer: Option<SocketAddr>,
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
            held: None,
            password: None,
            authenticated: false,
            max_request: DEFAULT_MAX_REQUEST,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            peer: None,
        }
    }

    /// Sets the request limit, and the password this connection must give first
    /// (its requests are limited to [`UNAUTHENTICATED_MAX_REQUEST`] until then).
    fn set_password(&mut self, password: Option<Secret>, max_request: usize) {
        self.max_request = max_request;
        let limit = if password.is_some() {
            max_request.min(UNAUTHENTICATED_MAX_REQUEST)
        } else {
            max_request
        };
        self.decoder.set_max_request(limit);
        self.password = password;
    }

    /// Counts what this connection holds (its unread input, the arguments decoded
    /// so far) against the shared budget; false if that exceeds it.
    fn account(&mut self) -> bool {
        let bytes = self.input.len() + self.decoder.held_bytes();
        self.held.as_mut().is_none_or(|held| held.set(bytes))
    }

    /// Serves the connection until the client leaves, sends `QUIT` or garbage, or
    /// shutdown is signalled.
    async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> io::Result<()> {
        // Replies are written whole, so Nagle's algorithm would only add delay.
        if let Err(e) = self.stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY failed");
        }
        // When the first byte of the request still incomplete was read (`None`:
        // between requests).
        let mut partial_since: Option<Instant> = None;
        loop {
            let (decoded, end) = self.submit_batch().await?;
            // Consumed input is gone: this lowers what the connection holds.
            let _ = self.account();
            self.write_replies(end.as_ref()).await?;
            if end.is_some() {
                break;
            }
            partial_since = self.partial_request(partial_since, decoded);
            if decoded == MAX_BATCH {
                // More complete requests may be buffered: serve them before reading.
                continue;
            }
            self.shrink_idle_buffers();
            if self.input.capacity() - self.input.len() < READ_CHUNK / 4 {
                self.input.reserve(READ_CHUNK);
            }
            // At most READ_LIMIT at a time, counted right after.
            let deadline = partial_since.map(|since| since + self.request_timeout);
            let mut limited = (&mut self.stream).take(READ_LIMIT as u64);
            let read = tokio::select! {
                biased;
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow_and_update() {
                        break;
                    }
                    continue;
                }
                () = sleep_until_some(deadline) => {
                    tracing::warn!(
                        peer = ?self.peer,
                        timeout = ?self.request_timeout,
                        buffered = self.input.len() + self.decoder.held_bytes(),
                        "RESP: a request was not completed in time (slow client); closing its connection"
                    );
                    self.input = Vec::new();
                    self.write_replies(Some(&End::Timeout(self.request_timeout))).await?;
                    break;
                }
                read = limited.read_buf(&mut self.input) => read?,
            };
            if read == 0 {
                // The client closed its side (a partial request is dropped).
                return Ok(());
            }
            if !self.account() {
                let (used, limit) = self
                    .held
                    .as_ref()
                    .map_or((0, 0), |h| (h.budget().used(), h.budget().limit()));
                tracing::warn!(
                    used,
                    limit,
                    held = self.input.len() + self.decoder.held_bytes(),
                    "RESP: unfinished requests of all clients reached their memory limit; closing a connection"
                );
                self.input = Vec::new();
                self.write_replies(Some(&End::OverBudget { used, limit }))
                    .await?;
                break;
            }
        }
        self.stream.shutdown().await
    }

    /// When the request still incomplete began: `None` if there is none (the
    /// input is empty and the decoder between requests); otherwise `since` if it
    /// was already running and no request completed in this batch (`decoded` is
    /// 0), else now (a new request began after the last complete one).
    fn partial_request(&self, since: Option<Instant>, decoded: usize) -> Option<Instant> {
        if self.input.is_empty() && !self.decoder.is_mid_request() {
            return None;
        }
        match since {
            Some(since) if decoded == 0 => Some(since),
            _ => Some(Instant::now()),
        }
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
            if self.password.is_some() && !self.authenticated && !allowed_before_auth(&args) {
                self.fifo
                    .push_back(Pending::Reply(Reply::Error(NOAUTH.into())));
                continue;
            }
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
                Ok(Command::Local(Local::Auth(creds))) if self.password.is_some() => {
                    let right = self
                        .password
                        .as_ref()
                        .is_some_and(|p| p.matches(&creds.password));
                    if right && creds.is_default_user() {
                        self.authenticated = true;
                        self.decoder.set_max_request(self.max_request);
                        Pending::Reply(Reply::Simple("OK".into()))
                    } else {
                        tracing::debug!("RESP: AUTH with a wrong password or user");
                        Pending::Reply(Reply::Error(WRONGPASS.into()))
                    }
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
        crate::server::hops::hop!("request", 0u16);
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
                    Ok(KvReply::Machine(reply)) => {
                        // The machine renders its own replies for RESP.
                        let reply = match &self.machine {
                            Some(m) => m.resp_reply(reply),
                            None => reply,
                        };
                        encode_kv_reply(&KvReply::Machine(reply), &mut self.output)
                    }
                    Ok(reply) => encode_kv_reply(&reply, &mut self.output),
                    Err(_) => write_error(&mut self.output, NODE_GONE),
                },
                Pending::Ready(reply) => encode_kv_reply(&reply, &mut self.output),
                Pending::Local(local) => local.encode_reply(&mut self.output),
                Pending::Error(e) => e.encode_reply(&mut self.output),
                Pending::NodeGone => write_error(&mut self.output, NODE_GONE),
                Pending::Reply(reply) => reply.encode(&mut self.output),
            }
            if self.output.len() >= WRITE_EARLY {
                self.stream.write_all(&self.output).await?;
                self.output.clear();
            }
        }
        match end {
            Some(End::Protocol(e)) => write_error(
                &mut self.output,
                format!("ERR Protocol error: {e}").as_bytes(),
            ),
            Some(End::OverBudget { used, limit }) => write_error(
                &mut self.output,
                format!("ERR max client buffers reached: unfinished requests of all clients hold {used} bytes, the limit is {limit}; closing the connection").as_bytes(),
            ),
            Some(End::Timeout(after)) => write_error(
                &mut self.output,
                format!("ERR timed out: a request begun {after:?} ago is still incomplete; closing the connection").as_bytes(),
            ),
            Some(End::Quit) | None => {}
        }
        if !self.output.is_empty() {
            self.stream.write_all(&self.output).await?;
            crate::server::hops::hop!("reply", 0u16);
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

/// Sleeps until `deadline`, or forever if there is none.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
