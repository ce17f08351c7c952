//! openraft's network over loopback TCP, shared by the `openraft_kv` example, the
//! `openraft_kill9` test and the `openraft_bench` example.
//!
//! Every message is one frame: a 4-byte little-endian length, then the postcard
//! encoding of a [`Rpc`] (or of its [`Reply`]). A [`Peer`] (openraft's
//! `RaftNetworkV2` for one target) keeps one connection and reuses it for every
//! call; it reconnects on the next call after an error. [`serve`] accepts
//! connections and answers each one's requests in order by calling the local
//! [`Raft`].
//!
//! Snapshots go in chunks of [`SNAPSHOT_CHUNK`] bytes, the last chunk carrying the
//! vote and the snapshot's meta; the receiver installs the whole snapshot once the
//! last chunk is in (openraft's `install_full_snapshot`).

#![allow(dead_code)] // each binary uses a different part

use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::net::SocketAddr;

use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::storage::RaftStateMachine;
use openraft::type_config::alias::{SnapshotMetaOf, SnapshotOf, VoteOf};
use openraft::{BasicNode, Raft, RaftNetworkV2, RaftTypeConfig};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Bytes of snapshot data per frame.
pub const SNAPSHOT_CHUNK: usize = 1 << 20;
/// The largest frame accepted: a bound against a corrupt length prefix.
const MAX_FRAME: usize = 256 << 20;

/// How a state machine's snapshot data travels: as bytes.
pub trait WireSnapshot: Sized + Send + 'static {
    /// The snapshot's bytes.
    fn to_bytes(&self) -> io::Result<Vec<u8>>;
    /// The snapshot the bytes of [`WireSnapshot::to_bytes`] describe.
    fn from_bytes(bytes: Vec<u8>) -> io::Result<Self>;
}

impl WireSnapshot for Vec<u8> {
    fn to_bytes(&self) -> io::Result<Vec<u8>> {
        Ok(self.clone())
    }
    fn from_bytes(bytes: Vec<u8>) -> io::Result<Self> {
        Ok(bytes)
    }
}

impl WireSnapshot for io::Cursor<Vec<u8>> {
    fn to_bytes(&self) -> io::Result<Vec<u8>> {
        Ok(self.get_ref().clone())
    }
    fn from_bytes(bytes: Vec<u8>) -> io::Result<Self> {
        Ok(io::Cursor::new(bytes))
    }
}

/// A snapshot file (openraft-list's snapshot data) travels as its bytes; the
/// receiver keeps them in an anonymous temporary file.
impl WireSnapshot for std::fs::File {
    fn to_bytes(&self) -> io::Result<Vec<u8>> {
        use std::io::{Read, Seek};
        let mut f = self.try_clone()?;
        f.rewind()?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        Ok(bytes)
    }
    fn from_bytes(bytes: Vec<u8>) -> io::Result<Self> {
        use std::io::{Seek, Write};
        let mut f = tempfile::tempfile()?;
        f.write_all(&bytes)?;
        f.rewind()?;
        Ok(f)
    }
}

/// A request from one node to another.
#[derive(Serialize, Deserialize)]
#[serde(bound = "")]
pub enum Rpc<C: RaftTypeConfig> {
    /// openraft's AppendEntries (also its heartbeat).
    Append(AppendEntriesRequest<C>),
    /// A vote request.
    Vote(VoteRequest<C>),
    /// A pre-vote request.
    PreVote(VoteRequest<C>),
    /// A piece of a snapshot; `last` is set on the final piece.
    SnapshotChunk {
        /// Where `data` starts in the snapshot.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
        /// On the final piece: the sender's vote and the snapshot's meta.
        last: Option<(VoteOf<C>, SnapshotMetaOf<C>)>,
    },
}

/// The answer to a [`Rpc`].
#[derive(Serialize, Deserialize)]
#[serde(bound = "")]
pub enum Reply<C: RaftTypeConfig> {
    /// To [`Rpc::Append`].
    Append(AppendEntriesResponse<C>),
    /// To [`Rpc::Vote`] and [`Rpc::PreVote`].
    Vote(VoteResponse<C>),
    /// To a non-final [`Rpc::SnapshotChunk`].
    ChunkTaken,
    /// To the final [`Rpc::SnapshotChunk`].
    Snapshot(SnapshotResponse<C>),
    /// The receiver could not serve the request (stopped, shutting down, bad data).
    Failed(String),
}

/// Writes `msg` as one frame.
pub async fn write_frame<T: Serialize>(s: &mut TcpStream, msg: &T) -> io::Result<()> {
    let body = postcard::to_stdvec(msg).map_err(io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(io::Error::other)?;
    // One write of prefix and body: two small writes would be two segments.
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    s.write_all(&frame).await
}

/// Reads one frame.
pub async fn read_frame<T: for<'de> Deserialize<'de>>(s: &mut TcpStream) -> io::Result<T> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes"),
        ));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await?;
    postcard::from_bytes(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// openraft's network factory: a [`Peer`] per target, at the target's `addr`.
pub struct Network<C, SD> {
    _types: PhantomData<fn() -> (C, SD)>,
}

impl<C, SD> Default for Network<C, SD> {
    fn default() -> Self {
        Network {
            _types: PhantomData,
        }
    }
}

impl<C, SD> RaftNetworkFactory<C> for Network<C, SD>
where
    C: RaftTypeConfig<Node = BasicNode>,
    SD: WireSnapshot,
{
    type Network = Peer<C, SD>;

    async fn new_client(&mut self, _target: C::NodeId, node: &BasicNode) -> Peer<C, SD> {
        Peer {
            addr: node.addr.clone(),
            conn: None,
            _types: PhantomData,
        }
    }
}

/// The client side of one target: one connection, opened on first use.
pub struct Peer<C, SD> {
    addr: String,
    conn: Option<TcpStream>,
    _types: PhantomData<fn() -> (C, SD)>,
}

impl<C: RaftTypeConfig, SD> Peer<C, SD> {
    /// Sends `rpc` and waits for its reply. A connection that fails is dropped, so
    /// the next call connects again; a failed connect is `Unreachable` (openraft
    /// backs off), a failure on an open connection a `NetworkError` (retried).
    ///
    /// The connection is taken out of `self` for the call and put back only once
    /// the reply is read: openraft drops a call that outlives its timeout (a
    /// heartbeat after one heartbeat interval), and a connection left with a
    /// request sent but its reply unread would answer the next call with the
    /// previous call's reply.
    async fn call(&mut self, rpc: &Rpc<C>) -> Result<Reply<C>, RPCError<C>> {
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => {
                let s = TcpStream::connect(&self.addr)
                    .await
                    .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
                s.set_nodelay(true)
                    .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
                s
            }
        };
        let res = async {
            write_frame(&mut conn, rpc).await?;
            read_frame::<Reply<C>>(&mut conn).await
        }
        .await;
        match res {
            Ok(reply) => {
                self.conn = Some(conn);
                match reply {
                    Reply::Failed(msg) => Err(RPCError::Unreachable(Unreachable::from_string(msg))),
                    reply => Ok(reply),
                }
            }
            Err(e) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }
}

fn unexpected<C: RaftTypeConfig>() -> RPCError<C> {
    RPCError::Network(NetworkError::from_string("unexpected reply kind"))
}

impl<C, SD> RaftNetworkV2<C> for Peer<C, SD>
where
    C: RaftTypeConfig<Node = BasicNode>,
    SD: WireSnapshot,
{
    type SnapshotData = SD;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<C>, RPCError<C>> {
        match self.call(&Rpc::Append(rpc)).await? {
            Reply::Append(r) => Ok(r),
            _ => Err(unexpected()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<C>,
        _option: RPCOption,
    ) -> Result<VoteResponse<C>, RPCError<C>> {
        match self.call(&Rpc::Vote(rpc)).await? {
            Reply::Vote(r) => Ok(r),
            _ => Err(unexpected()),
        }
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<C>,
        _option: RPCOption,
    ) -> Result<VoteResponse<C>, RPCError<C>> {
        match self.call(&Rpc::PreVote(rpc)).await? {
            Reply::Vote(r) => Ok(r),
            _ => Err(unexpected()),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<C>,
        snapshot: SnapshotOf<C, SD>,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<C>, StreamingError<C>> {
        let bytes = snapshot
            .snapshot
            .to_bytes()
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        let mut cancel = std::pin::pin!(cancel);
        let mut last = Some((vote, snapshot.meta));
        let mut offset = 0usize;
        loop {
            let end = (offset + SNAPSHOT_CHUNK).min(bytes.len());
            let is_last = end == bytes.len();
            let rpc = Rpc::SnapshotChunk {
                offset: offset as u64,
                data: bytes[offset..end].to_vec(),
                last: if is_last { last.take() } else { None },
            };
            // Replication may be closed (a new leader, a removed member) between
            // chunks: stop there.
            let reply = tokio::select! {
                closed = &mut cancel => return Err(StreamingError::Closed(closed)),
                r = self.call(&rpc) => r.map_err(rpc_to_streaming)?,
            };
            match reply {
                Reply::ChunkTaken if !is_last => offset = end,
                Reply::Snapshot(r) if is_last => return Ok(r),
                _ => {
                    return Err(StreamingError::Network(NetworkError::from_string(
                        "unexpected reply to a snapshot chunk",
                    )))
                }
            }
        }
    }
}

fn rpc_to_streaming<C: RaftTypeConfig>(e: RPCError<C>) -> StreamingError<C> {
    match e {
        RPCError::Timeout(t) => StreamingError::Timeout(t),
        RPCError::Unreachable(u) => StreamingError::Unreachable(u),
        RPCError::Network(n) => StreamingError::Network(n),
        RPCError::RemoteError(r) => StreamingError::Network(NetworkError::new(&r)),
    }
}

/// Binds `addr` (port 0: any free port) for [`serve`].
pub async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Answers every connection of `listener` with `raft`, until the task is dropped.
pub async fn serve<C, SM>(listener: TcpListener, raft: Raft<C, SM>)
where
    C: RaftTypeConfig,
    SM: RaftStateMachine<C>,
    SM::SnapshotData: WireSnapshot,
{
    loop {
        let (conn, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("accept: {e}");
                continue;
            }
        };
        let raft = raft.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_conn(conn, raft).await {
                tracing::debug!("peer connection closed: {e}");
            }
        });
    }
}

/// One connection's requests, in order.
async fn serve_conn<C, SM>(mut conn: TcpStream, raft: Raft<C, SM>) -> io::Result<()>
where
    C: RaftTypeConfig,
    SM: RaftStateMachine<C>,
    SM::SnapshotData: WireSnapshot,
{
    conn.set_nodelay(true)?;
    // A snapshot being received on this connection.
    let mut pending = Vec::new();
    loop {
        let rpc: Rpc<C> = read_frame(&mut conn).await?;
        let reply = match rpc {
            Rpc::Append(r) => raft
                .append_entries(r)
                .await
                .map_or_else(|e| Reply::Failed(e.to_string()), Reply::Append),
            Rpc::Vote(r) => raft
                .vote(r)
                .await
                .map_or_else(|e| Reply::Failed(e.to_string()), Reply::Vote),
            Rpc::PreVote(r) => raft
                .pre_vote(r)
                .await
                .map_or_else(|e| Reply::Failed(e.to_string()), Reply::Vote),
            Rpc::SnapshotChunk { offset, data, last } => {
                if offset == 0 {
                    pending.clear();
                }
                if offset != pending.len() as u64 {
                    Reply::Failed(format!(
                        "snapshot chunk at {offset}, expected {}",
                        pending.len()
                    ))
                } else {
                    pending.extend_from_slice(&data);
                    match last {
                        None => Reply::ChunkTaken,
                        Some((vote, meta)) => {
                            install(&raft, vote, meta, std::mem::take(&mut pending)).await
                        }
                    }
                }
            }
        };
        write_frame(&mut conn, &reply).await?;
    }
}

async fn install<C, SM>(
    raft: &Raft<C, SM>,
    vote: VoteOf<C>,
    meta: SnapshotMetaOf<C>,
    bytes: Vec<u8>,
) -> Reply<C>
where
    C: RaftTypeConfig,
    SM: RaftStateMachine<C>,
    SM::SnapshotData: WireSnapshot,
{
    let data = match SM::SnapshotData::from_bytes(bytes) {
        Ok(d) => d,
        Err(e) => return Reply::Failed(format!("snapshot data: {e}")),
    };
    let snapshot = openraft::Snapshot {
        meta,
        snapshot: data,
    };
    raft.install_full_snapshot(vote, snapshot)
        .await
        .map_or_else(|e| Reply::Failed(e.to_string()), Reply::Snapshot)
}
