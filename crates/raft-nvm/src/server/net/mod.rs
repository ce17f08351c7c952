//! The TCP transport between Raft nodes: length-prefixed frames of postcard-encoded
//! [`crate::consensus::raft::Message`]s ([`frame`]), a bounded queue and a reconnecting writer
//! per peer, and a listener whose readers check and forward what peers send
//! ([`transport`]); a node not yet known is answered at the address its Hello
//! announces (`dialback`).
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use raft_nvm::net::{Transport, TransportConfig};
//! use raft_nvm::raft::{Message, MessageBody};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let peers = BTreeMap::from([(2, "10.0.0.2:7000".parse()?), (3, "10.0.0.3:7000".parse()?)]);
//! let (inbound_tx, mut inbound) = tokio::sync::mpsc::channel(1024);
//! let transport = Transport::start(TransportConfig::new(1, "0.0.0.0:7000".parse()?, peers), inbound_tx).await?;
//! transport.send(Message { from: 1, to: 2, term: 1, body: MessageBody::Heartbeat { commit: 0, ctx: None, sent: 0 } });
//! while let Some(msg) = inbound.recv().await {
//!     // hand `msg` to the Raft core
//! #   let _ = msg;
//! }
//! # Ok(())
//! # }
//! ```

mod dialback;
pub mod frame;
pub mod transport;

pub use frame::{decode, encode, read_frame, FrameError, Wire, DEFAULT_MAX_FRAME, LEN_PREFIX};
pub use transport::{
    Transport, TransportConfig, TransportError, TransportStats, DEFAULT_FRAME_BUDGET,
    DEFAULT_MAX_PEER_CONNECTIONS,
};
