//! The client side of a node process of `openraft_kv --node`: a small request
//! protocol over TCP (the frames of [`super::openraft_net`]) so that a test in
//! another process can write and read. Writes go through openraft's
//! `client_write` on the node that receives them; a follower answers
//! [`ClientReply::NotLeader`] with the leader it knows. Reads are linearizable
//! (`ensure_linearizable`, then the store's applied state) or local (the node's
//! applied state as it is, to check what a node holds).

#![allow(dead_code)] // each binary uses a different part

use std::io;
use std::net::SocketAddr;

use openraft::async_runtime::watch::WatchReceiver;
use openraft::{Raft, ReadPolicy};
use openraft_list::{ListRaftStore, Request, TypeConfig};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};

use super::openraft_net::{read_frame, write_frame};

/// A client's request to one node.
#[derive(Debug, Serialize, Deserialize)]
pub enum ClientReq {
    /// Sets `key` to `value` (through Raft; only the leader takes it).
    Set {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// A linearizable read (only the leader serves it).
    Get {
        /// The key.
        key: Vec<u8>,
    },
    /// This node's applied value of `key`, without asking the cluster.
    LocalGet {
        /// The key.
        key: Vec<u8>,
    },
    /// The node's view: its leader and its last applied index.
    Status,
}

/// A node's answer.
#[derive(Debug, Serialize, Deserialize)]
pub enum ClientReply {
    /// The write is committed and applied.
    Written,
    /// The value read.
    Value(Option<Vec<u8>>),
    /// Not the leader; the leader this node knows, if any.
    NotLeader(Option<u64>),
    /// The node's leader and last applied log index.
    Status {
        /// The leader it knows.
        leader: Option<u64>,
        /// Its last applied log index.
        applied: Option<u64>,
    },
    /// Anything else that went wrong.
    Failed(String),
}

/// The raft of a node whose store is a [`ListRaftStore`].
pub type ListRaft = Raft<TypeConfig, ListRaftStore>;

/// Answers the clients of `listener` with `raft` and its `store`.
pub async fn serve_clients(listener: TcpListener, raft: ListRaft, store: ListRaftStore) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            continue;
        };
        let (raft, store) = (raft.clone(), store.clone());
        tokio::spawn(async move {
            let _ = conn.set_nodelay(true);
            while let Ok(req) = read_frame::<ClientReq>(&mut conn).await {
                let reply = answer(&raft, &store, req).await;
                if write_frame(&mut conn, &reply).await.is_err() {
                    break;
                }
            }
        });
    }
}

async fn answer(raft: &ListRaft, store: &ListRaftStore, req: ClientReq) -> ClientReply {
    match req {
        ClientReq::Set { key, value } => match raft.client_write(Request::Set { key, value }).await
        {
            Ok(_) => ClientReply::Written,
            Err(e) => match e.forward_to_leader() {
                Some(f) => ClientReply::NotLeader(f.leader_id),
                None => ClientReply::Failed(e.to_string()),
            },
        },
        ClientReq::Get { key } => match raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
            Ok(_) => store
                .get(&key)
                .map_or_else(|e| ClientReply::Failed(e.to_string()), ClientReply::Value),
            Err(e) => match e.forward_to_leader() {
                Some(f) => ClientReply::NotLeader(f.leader_id),
                None => ClientReply::Failed(e.to_string()),
            },
        },
        ClientReq::LocalGet { key } => store
            .get(&key)
            .map_or_else(|e| ClientReply::Failed(e.to_string()), ClientReply::Value),
        ClientReq::Status => {
            let m = raft.metrics().borrow_watched().clone();
            ClientReply::Status {
                leader: m.current_leader,
                applied: m.last_applied.map(|l| l.index),
            }
        }
    }
}

/// One connection to a node's client port.
pub struct KvClient {
    conn: TcpStream,
}

impl KvClient {
    /// Connects to the node serving clients at `addr`.
    pub async fn connect(addr: SocketAddr) -> io::Result<KvClient> {
        let conn = TcpStream::connect(addr).await?;
        conn.set_nodelay(true)?;
        Ok(KvClient { conn })
    }

    /// Sends `req` and waits for the answer.
    pub async fn call(&mut self, req: &ClientReq) -> io::Result<ClientReply> {
        write_frame(&mut self.conn, req).await?;
        read_frame(&mut self.conn).await
    }
}
