//! A small async RESP client for the service's own tools (the benchmark, the
//! process tests, examples): one connection ([`RespClient`]) and a cluster client
//! ([`ClusterClient`]) that follows `MOVED` redirections to the leader, waits out
//! `TRYAGAIN` while an election runs, and moves to another node when one dies.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::codec::Reply;
use super::command::Command;
use super::reply::{decode_reply, encode_command};

/// What a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The server sent something that is not RESP.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The server answered with an error.
    #[error("server: {0}")]
    Server(String),
    /// The reply had an unexpected type.
    #[error("unexpected reply {0:?}")]
    Unexpected(Reply),
    /// No node answered within the retry budget.
    #[error("no node could serve the request: {0}")]
    Exhausted(String),
    /// A write reached a node but its outcome never came back: the connection died
    /// before the reply, or the node lost its leadership before the entry
    /// committed. The write may or may not take effect; [`ClusterClient`] does not
    /// resend it, because a resent write can take effect twice.
    #[error("the write's outcome is unknown (it may or may not take effect): {0}")]
    Indeterminate(String),
}

/// One RESP connection.
#[derive(Debug)]
pub struct RespClient {
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    /// The command being sent (reused).
    buf: Vec<u8>,
    /// Bytes received and not yet decoded.
    input: Vec<u8>,
}

impl RespClient {
    /// Connects to `addr` (TCP_NODELAY).
    pub async fn connect(addr: SocketAddr) -> Result<RespClient, ClientError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (r, w) = stream.into_split();
        Ok(RespClient {
            reader: r,
            writer: w,
            buf: Vec::with_capacity(256),
            input: Vec::with_capacity(4096),
        })
    }

    /// Sends one command (an array of bulk strings) and reads its reply.
    pub async fn command(&mut self, args: &[&[u8]]) -> Result<Reply, ClientError> {
        self.send(args).await?;
        self.read_reply().await
    }

    /// Sends one command. An error means the server did not receive all of it, so
    /// it cannot have run it.
    async fn send(&mut self, args: &[&[u8]]) -> Result<(), ClientError> {
        self.buf.clear();
        encode_command(args, &mut self.buf);
        self.writer.write_all(&self.buf).await?;
        Ok(())
    }

    /// Reads one reply.
    async fn read_reply(&mut self) -> Result<Reply, ClientError> {
        loop {
            let decoded =
                decode_reply(&self.input).map_err(|e| ClientError::Protocol(e.to_string()))?;
            if let Some((reply, used)) = decoded {
                self.input.drain(..used);
                return Ok(reply);
            }
            if self.reader.read_buf(&mut self.input).await? == 0 {
                return Err(ClientError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
        }
    }
}

/// A client of the whole cluster: it sends to the node it believes leads, follows
/// `MOVED host:port`, retries `TRYAGAIN` and connection failures on the next node.
///
/// It retries only what cannot have taken effect, or what has no effect:
/// - a command that was never fully sent, a redirection (`MOVED`), or `TRYAGAIN`
///   (no leader, nothing appended) is resent, to the next node if need be;
/// - a read (`GET`, `INFO`) or a command answered by the node itself (`PING`,
///   `CONFIG GET`, ...) is resent after any failure;
/// - a write (`SET`, `DEL`, `CAS`, and any command it does not know) whose reply
///   was lost, or that the leader answered with "leadership lost", returns
///   [`ClientError::Indeterminate`]. Resending it could apply it twice: a `CAS`
///   would report the second attempt's outcome, and a `SET` applied twice could
///   overwrite another client's write made in between, which no single `SET`
///   could have done. The caller decides (read the key, or resend knowingly).
#[derive(Debug)]
pub struct ClusterClient {
    nodes: Vec<SocketAddr>,
    current: usize,
    conn: Option<RespClient>,
    /// How many redirections, retries and reconnections one call may take.
    pub max_attempts: u32,
    /// The pause before retrying after `TRYAGAIN` or a failed connection.
    pub retry_pause: Duration,
}

impl ClusterClient {
    /// A client of the nodes at `nodes` (RESP addresses).
    pub fn new(nodes: Vec<SocketAddr>) -> ClusterClient {
        ClusterClient {
            nodes,
            current: 0,
            conn: None,
            max_attempts: 200,
            retry_pause: Duration::from_millis(10),
        }
    }

    /// The node the client talks to now.
    pub fn current(&self) -> Option<SocketAddr> {
        self.nodes.get(self.current).copied()
    }

    /// Runs `args` on the leader; returns its reply (an error reply other than a
    /// redirection or `TRYAGAIN` is returned as [`Reply::Error`], not retried). A
    /// write whose outcome became unknown is [`ClientError::Indeterminate`].
    pub async fn command(&mut self, args: &[&[u8]]) -> Result<Reply, ClientError> {
        let mut last = String::from("no attempt");
        for _ in 0..self.max_attempts {
            if self.conn.is_none() {
                let Some(addr) = self.current() else {
                    return Err(ClientError::Exhausted("no nodes".into()));
                };
                match RespClient::connect(addr).await {
                    Ok(c) => self.conn = Some(c),
                    Err(e) => {
                        last = format!("{addr}: {e}");
                        self.next_node();
                        tokio::time::sleep(self.retry_pause).await;
                        continue;
                    }
                }
            }
            let Some(conn) = self.conn.as_mut() else {
                continue;
            };
            if let Err(e) = conn.send(args).await {
                // Not fully sent: the node cannot have run it.
                last = e.to_string();
                self.conn = None;
                self.next_node();
                tokio::time::sleep(self.retry_pause).await;
                continue;
            }
            match conn.read_reply().await {
                Ok(Reply::Error(e)) if e.starts_with("MOVED ") => {
                    last = e.to_string();
                    let target = e.rsplit(' ').next().and_then(|a| a.parse().ok());
                    match target.and_then(|a| self.nodes.iter().position(|&n| n == a)) {
                        Some(i) => self.current = i,
                        None => self.next_node(),
                    }
                    self.conn = None;
                }
                Ok(Reply::Error(e)) if e.starts_with("TRYAGAIN") => {
                    // This node knows no leader: another one may (a node removed
                    // from the cluster, or cut off, never learns one).
                    last = e.into_owned();
                    self.conn = None;
                    self.next_node();
                    tokio::time::sleep(self.retry_pause).await;
                }
                Ok(Reply::Error(e)) if e.contains("leadership lost") => {
                    if !is_read_only(args) {
                        return Err(ClientError::Indeterminate(e.into_owned()));
                    }
                    last = e.into_owned();
                    tokio::time::sleep(self.retry_pause).await;
                }
                Ok(reply) => return Ok(reply),
                Err(e) => {
                    self.conn = None;
                    self.next_node();
                    if !is_read_only(args) {
                        return Err(ClientError::Indeterminate(format!(
                            "sent, then the connection failed: {e}"
                        )));
                    }
                    last = e.to_string();
                    tokio::time::sleep(self.retry_pause).await;
                }
            }
        }
        Err(ClientError::Exhausted(last))
    }

    fn next_node(&mut self) {
        if !self.nodes.is_empty() {
            self.current = (self.current + 1) % self.nodes.len();
        }
    }

    /// `SET key value`.
    pub async fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), ClientError> {
        match self.command(&[b"SET", key, value]).await? {
            Reply::Simple(s) if s == "OK" => Ok(()),
            Reply::Error(e) => Err(ClientError::Server(e.into_owned())),
            other => Err(ClientError::Unexpected(other)),
        }
    }

    /// `GET key`.
    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
        match self.command(&[b"GET", key]).await? {
            Reply::Bulk(v) => Ok(Some(v)),
            Reply::Nil => Ok(None),
            Reply::Error(e) => Err(ClientError::Server(e.into_owned())),
            other => Err(ClientError::Unexpected(other)),
        }
    }

    /// `DEL key`: whether it existed.
    pub async fn del(&mut self, key: &[u8]) -> Result<bool, ClientError> {
        match self.command(&[b"DEL", key]).await? {
            Reply::Integer(n) => Ok(n > 0),
            Reply::Error(e) => Err(ClientError::Server(e.into_owned())),
            other => Err(ClientError::Unexpected(other)),
        }
    }

    /// `CAS key expected new`: whether it swapped.
    pub async fn cas(
        &mut self,
        key: &[u8],
        expected: &[u8],
        new: &[u8],
    ) -> Result<bool, ClientError> {
        match self.command(&[b"CAS", key, expected, new]).await? {
            Reply::Integer(n) => Ok(n == 1),
            Reply::Error(e) => Err(ClientError::Server(e.into_owned())),
            other => Err(ClientError::Unexpected(other)),
        }
    }
}

/// Whether `args` is a command that changes nothing, so resending it is harmless:
/// decided by the server's own parser ([`Command::parse`],
/// [`crate::consensus::service::KvRequest::is_write`]);
/// a command it does not know counts as a write.
fn is_read_only(args: &[&[u8]]) -> bool {
    match Command::parse(args.iter().map(|a| a.to_vec()).collect()) {
        Ok(Command::Kv(req)) => !req.is_write(),
        Ok(Command::Local(_)) => true,
        Err(_) => false,
    }
}

/// A field of an `INFO` text (`name:value` lines).
pub fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
        .map(str::trim)
}
