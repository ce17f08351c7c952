//! A client request on its way into the networked node: the request with the
//! channel its reply goes back on, and the sending end of the node's queue. (The
//! request and reply types themselves are plain data in the consensus layer's
//! `service`, shared with the deterministic simulation.)

use crate::consensus::service::{KvReply, KvRequest};

/// A request with the channel its reply goes back on (the networked node's input).
#[derive(Debug)]
pub struct KvCall {
    /// The request.
    pub req: KvRequest,
    /// Where the reply goes.
    pub reply: tokio::sync::oneshot::Sender<KvReply>,
}

/// The sending end of a node's client queue.
pub type KvHandle = tokio::sync::mpsc::Sender<KvCall>;
