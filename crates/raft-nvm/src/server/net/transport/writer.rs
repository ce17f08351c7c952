//! A peer's writer: it owns the peer's bounded queue and a lazily (re)connected
//! outgoing connection, sends a batch of queued messages per write, and backs off
//! (dropping what arrives meanwhile) while the peer cannot be reached.

use std::hash::BuildHasher;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::reader::wire_kind;
use super::stats::{bump, Counters};
use super::{Transport, HELLO_MAX};
use crate::consensus::raft::Message;
use crate::server::net::frame::{encode, read_frame, FrameError, Wire, LEN_PREFIX};
use crate::server::secret::{HelloFields, Secret};

/// A writer stops taking queued messages into a batch once it holds this many bytes.
const BATCH_BYTES: usize = 256 << 10;
/// Buffers that grew beyond this (a large snapshot chunk) are shrunk after use.
const KEEP_BUF: usize = 1 << 20;

/// Exponential backoff with jitter: the n-th delay is drawn from `[d/2, d]` with
/// `d = min * 2^n` capped at `max`, and never below `min`.
struct Backoff {
    min: Duration,
    max: Duration,
    attempt: u32,
    rng: pmem_core::SplitMix64,
}

impl Backoff {
    /// Delays from `min` to `max`, jittered by a generator seeded with `seed`.
    fn new(min: Duration, max: Duration, seed: u64) -> Backoff {
        Backoff {
            min,
            max: max.max(min),
            attempt: 0,
            rng: pmem_core::SplitMix64::new(seed),
        }
    }

    /// Starts again from `min` (a new outage).
    fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The next delay.
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
        let span = u64::try_from((base - lo).as_nanos()).unwrap_or(u64::MAX);
        lo + Duration::from_nanos(self.rng.below(span.saturating_add(1)))
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
pub(super) struct Writer {
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
    /// The writer of `peer` at `addr` for transport `t`, taking its messages from
    /// `rx`, woken by `wake` when the peer dials in.
    pub(super) fn new(
        t: &Transport,
        peer: u16,
        addr: SocketAddr,
        rx: mpsc::Receiver<Message>,
        wake: Arc<Notify>,
    ) -> Writer {
        let cfg = &t.cfg;
        let mut hello = Vec::new();
        if let Err(e) = encode(
            &Wire::Hello {
                from: cfg.id,
                to: peer,
                cluster: cfg.cluster,
                reply_to: t.reply_to,
            },
            &mut hello,
        ) {
            // Unreachable: a Hello is a few bytes.
            tracing::error!(peer, error = %e, "raft transport: cannot encode a Hello");
        }
        Writer {
            me: cfg.id,
            peer,
            addr,
            rx,
            counters: Arc::clone(&t.counters),
            hello,
            secret: cfg.secret.clone(),
            cluster: cfg.cluster,
            reply_to: t.reply_to,
            handshake_timeout: cfg.hello_timeout,
            buf: Vec::with_capacity(4096),
            max_frame: cfg.max_frame,
            connect_timeout: cfg.connect_timeout,
            write_timeout: cfg.write_timeout,
            backoff: Backoff::new(
                cfg.backoff_min,
                cfg.backoff_max,
                t.seeds.hash_one((cfg.id, peer)),
            ),
            in_outage: false,
            wake,
        }
    }

    /// Sends the queue's messages to the peer, reconnecting with backoff, until
    /// the queue closes.
    pub(super) async fn run(mut self) {
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

    /// Dials the peer, within the connect timeout.
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
