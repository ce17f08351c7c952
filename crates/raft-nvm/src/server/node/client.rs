//! The typed client API of a node running a [`TypedMachine`]:
//! [`Node::client_write`] and [`Node::client_read`], with [`ClientWriteError`].
//!
//! A node that does not lead answers [`ClientWriteError::NotLeader`], naming the
//! leader it knows; it does not forward. The node has no path that carries a
//! client's request to another node (RESP followers redirect with `MOVED` and
//! the client follows), and a forwarded write whose connection fails has an
//! unknown outcome the caller must handle anyway. The caller, which holds the
//! nodes or their addresses, retries at the leader (or waits for one, through
//! [`Node::status`]).

use serde::de::DeserializeOwned;

use crate::consensus::machine::{
    decode, encode, Answer, MachineCall, MachineReply, TypedError, TypedMachine,
};
use crate::consensus::service::{KvReply, KvRequest};

use super::Node;

/// Why a typed write or read did not return the machine's response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientWriteError {
    /// This node does not lead: nothing was done. Retry at the leader.
    #[error("node does not lead (leader: {leader:?} at {leader_addr:?})")]
    NotLeader {
        /// The leader this node knows in its term, if any.
        leader: Option<u16>,
        /// That leader's client (RESP) address, if known.
        leader_addr: Option<String>,
    },
    /// The command or query could not be encoded (not sent), or the answer did
    /// not decode as the machine's type (the cluster runs another machine).
    #[error(transparent)]
    Codec(#[from] TypedError),
    /// The cluster's machine could not decode the command or query: it runs
    /// another machine. Nothing was done.
    #[error("the cluster's state machine could not decode it: {0}")]
    Undecodable(String),
    /// The node refused the request before proposing it (too large, no state
    /// machine): nothing was done.
    #[error("rejected: {0}")]
    Rejected(String),
    /// The command was committed, but the write it made was refused (over the
    /// entry limits, or one of the cluster's own keys): nothing was written.
    #[error("write refused: {0}")]
    WriteRefused(String),
    /// The store is full: the write was refused and will not take effect.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// The request could not be served (leadership lost before it committed,
    /// the node stopped). A write's outcome is unknown: it may still commit.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl Node {
    /// Runs `cmd` through the cluster's [`TypedMachine`] `M` and returns its
    /// response: on the leader, proposes it and waits until its entry is
    /// committed and applied; elsewhere returns [`ClientWriteError::NotLeader`] (see
    /// the module docs). `M` is the machine the node runs
    /// (`NodeBuilder::state_machine(Typed::new(m))`); with another, the answer
    /// fails to decode ([`ClientWriteError::Undecodable`] or [`ClientWriteError::Codec`]).
    ///
    /// ```no_run
    /// use raft_nvm::machine::TypedMachine;
    /// use raft_nvm::node::{ClientWriteError, Node};
    ///
    /// /// Writes `cmd` at whichever of `nodes` leads, following `NotLeader`.
    /// async fn write<M: TypedMachine>(
    ///     nodes: &[Node],
    ///     cmd: M::Command,
    /// ) -> Result<M::Response, ClientWriteError>
    /// where
    ///     M::Command: Clone,
    /// {
    ///     let mut at = 0;
    ///     loop {
    ///         match nodes[at].client_write::<M>(cmd.clone()).await {
    ///             // Nothing was done: retry at the leader it names, or the next
    ///             // node while an election runs.
    ///             Err(ClientWriteError::NotLeader { leader, .. }) => {
    ///                 at = nodes
    ///                     .iter()
    ///                     .position(|n| Some(n.id()) == leader)
    ///                     .unwrap_or((at + 1) % nodes.len());
    ///                 tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    ///             }
    ///             other => return other,
    ///         }
    ///     }
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// See [`ClientWriteError`]; only [`ClientWriteError::Unavailable`] leaves a write's
    /// outcome unknown.
    pub async fn client_write<M: TypedMachine>(
        &self,
        cmd: M::Command,
    ) -> Result<M::Response, ClientWriteError> {
        let bytes = encode("command", &cmd)?;
        let reply = self
            .call(KvRequest::Machine(MachineCall::Write(bytes)))
            .await;
        self.typed_answer(reply)
    }

    /// Answers `query` with the cluster's [`TypedMachine`] `M`, linearizably:
    /// the leader serves it at its applied index once it confirmed it still
    /// leads (a read-index round, or its lease with lease reads on); a learner
    /// through the leader's read index; a follower answers
    /// [`ClientWriteError::NotLeader`].
    ///
    /// # Errors
    ///
    /// See [`ClientWriteError`].
    pub async fn client_read<M: TypedMachine>(
        &self,
        query: M::Query,
    ) -> Result<M::Answer, ClientWriteError> {
        let bytes = encode("query", &query)?;
        let reply = self
            .call(KvRequest::Machine(MachineCall::Read(bytes)))
            .await;
        self.typed_answer(reply)
    }

    /// The typed value in a machine's `reply`, or why there is none.
    fn typed_answer<R: DeserializeOwned>(&self, reply: KvReply) -> Result<R, ClientWriteError> {
        match reply {
            KvReply::Machine(MachineReply::Bulk(bytes)) => {
                match decode::<Answer<R>>("answer", &bytes)? {
                    Answer::Done(r) => Ok(r),
                    Answer::Undecodable(why) => Err(ClientWriteError::Undecodable(why)),
                }
            }
            KvReply::Machine(MachineReply::Error(why)) => Err(ClientWriteError::WriteRefused(why)),
            KvReply::NotLeader {
                leader: leader_addr,
            } => Err(ClientWriteError::NotLeader {
                // The node's own view of its term's leader; `None` while an
                // election or a transfer runs.
                leader: self.status.borrow().leader.filter(|&l| l != self.id),
                leader_addr,
            }),
            KvReply::Rejected(why) => Err(ClientWriteError::Rejected(why)),
            KvReply::OutOfMemory(why) => Err(ClientWriteError::OutOfMemory(why)),
            KvReply::Unavailable(why) => Err(ClientWriteError::Unavailable(why)),
            other => Err(ClientWriteError::Codec(TypedError::Decode {
                what: "answer",
                ty: "a typed machine's answer",
                reason: format!("the node answered {other:?}"),
            })),
        }
    }
}
