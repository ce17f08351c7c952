//! The RESP (Redis protocol) front end: clients such as `redis-cli` and
//! `redis-benchmark` talk to a node through it.
//!
//! [`serve`] (or [`RespServer`]) accepts TCP clients and turns each request into a
//! [`KvCall`](crate::server::node::KvCall) on the node's [`KvHandle`](crate::server::node::KvHandle);
//! the node's [`KvReply`](crate::consensus::service::KvReply) goes back as a RESP2 reply.
//! Requests may be pipelined; replies always come back in request order.
//!
//! * [`codec`]: the RESP2 request [`Decoder`] (arrays of bulk strings and inline
//!   commands, with limits) and the reply encoder;
//! * [`command`]: the commands (`GET`, `SET`, `DEL`, `CAS`, `INFO`, `PING`, and the
//!   few administrative ones `redis-cli` and `redis-benchmark` send), their errors,
//!   and the encoding of node replies. `CAS key expected new` is this service's own
//!   command: it answers `:1` if it swapped, `:0` if not, and compares `expected`
//!   with a *present* value only (an absent key never matches);
//! * [`server`]: the tokio server, one task per connection;
//! * [`client`]: a small async client (one connection, or the whole cluster with
//!   redirections followed) for the service's own tools and tests.
//!
//! # Leader redirection
//!
//! Only the leader serves requests. A follower that knows the leader answers
//! `-MOVED 0 <leader host:port>`, which is Redis Cluster's redirection (slot 0 is a
//! placeholder: the whole key space lives in one Raft group): `redis-cli -c` and
//! cluster-aware client libraries follow it unmodified, reconnecting to the leader's
//! RESP address and repeating the command. A node that knows no leader (an election
//! is under way) answers `-TRYAGAIN no leader elected yet`, Redis Cluster's "retry
//! later" error. A request the node cannot serve for another reason gets
//! `-ERR <reason>`; for a write this means its outcome is unknown (it may still
//! commit).
//!
//! ```no_run
//! # async fn demo(node: raft_nvm::node::KvHandle) -> std::io::Result<()> {
//! let (stop, shutdown) = tokio::sync::watch::channel(false);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:6379").await?;
//! let server = tokio::spawn(raft_nvm::resp::serve(listener, node, shutdown));
//! // redis-cli -p 6379 SET k v; redis-cli -p 6379 CAS k v w
//! stop.send(true).ok();
//! server.await??;
//! # Ok(()) }
//! ```

pub mod client;
pub mod codec;
pub mod command;
pub mod reply;
pub mod server;

pub use client::{info_field, ClientError, ClusterClient, RespClient};
pub use codec::{
    write_array_header, write_bulk, write_error, write_integer, write_nil, write_simple, Args,
    Decoder, Reply, RespError, DEFAULT_MAX_REQUEST, MAX_ARGS, MAX_BULK_LEN, MAX_INLINE_LEN,
};
pub use command::{encode_kv_reply, AuthArgs, Command, CommandError, Local, NOAUTH, WRONGPASS};
pub use reply::{decode_reply, encode_command, ReplyError};
pub use server::{
    serve, RespServer, DEFAULT_MAX_BUFFERED, DEFAULT_MAX_CLIENTS, DEFAULT_REQUEST_TIMEOUT,
    MAX_BATCH, READ_LIMIT, SHUTDOWN_GRACE, UNAUTHENTICATED_MAX_REQUEST,
};
