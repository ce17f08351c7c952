//! The key-value service's client interface: the requests a front end (the RESP
//! server, a test, an embedding program) hands to a node, and the replies it gets.
//!
//! The types are plain data so the deterministic simulation and the networked node
//! share them; the networked node pairs a request with the channel its reply goes back on
//! (`node::KvCall`, in the server layer).

/// What a client asks of the replicated map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvRequest {
    /// The value of `key` (linearizable: served through read-index by the leader).
    Get {
        /// The key.
        key: Vec<u8>,
    },
    /// Sets `key` to `value`.
    Set {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Deletes `key`; the reply says whether it existed.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// Sets `key` to `new` if it currently holds `expected` (`None`: is absent).
    Cas {
        /// The key.
        key: Vec<u8>,
        /// The value the key must hold (`None`: the key must be absent).
        expected: Option<Vec<u8>>,
        /// The value to set.
        new: Vec<u8>,
    },
    /// The node's state (role, term, commit and applied index, peers, engine).
    Info,
    /// A command for the node's [`StateMachine`](crate::consensus::machine::StateMachine).
    Machine(crate::consensus::machine::MachineCall),
    /// Hand the leadership to node `to` (`None`: the follower whose log matches
    /// furthest). Answered at once: [`KvReply::Done`] when the transfer started
    /// (the leader takes no writes until it ends, at most an election timeout).
    TransferLeader {
        /// The node to hand leadership to.
        to: Option<u16>,
    },
    /// A membership change ([`crate::consensus::raft::MembershipChange`]): answered
    /// [`KvReply::Done`] once its configuration entry is committed (a change of
    /// voters: the joint entry; the leader then leaves the joint configuration by
    /// itself), [`KvReply::Rejected`] when the change is refused (another one is
    /// under way, the node is not a member, ...). A promotion waits for a lagging
    /// or silent learner, up to
    /// [`PROMOTION_WAIT_ELECTIONS`](crate::consensus::replica::PROMOTION_WAIT_ELECTIONS)
    /// election timeouts.
    ChangeMembership(crate::consensus::raft::MembershipChange),
    /// This node's view of the configuration, answered at once as
    /// [`KvReply::Info`] text (`voters:`, `outgoing:`, `learners:`, `index:`,
    /// `pending:`, `addresses:` lines).
    ShowMembership,
}

impl KvRequest {
    /// Whether the request changes the map (goes through the log).
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            KvRequest::Set { .. }
                | KvRequest::Delete { .. }
                | KvRequest::Cas { .. }
                | KvRequest::Machine(crate::consensus::machine::MachineCall::Write(_))
                | KvRequest::ChangeMembership(_)
        )
    }
}

/// A node's answer to a [`KvRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvReply {
    /// The answer to [`KvRequest::Get`] (`None`: absent).
    Value(Option<Vec<u8>>),
    /// A [`KvRequest::Set`] is committed and applied.
    Done,
    /// A [`KvRequest::Delete`] is committed; whether the key existed.
    Deleted(bool),
    /// A [`KvRequest::Cas`] is committed; whether it swapped.
    Swapped(bool),
    /// The answer to [`KvRequest::Info`]: `field:value` lines, in Redis `INFO` style.
    Info(String),
    /// The state machine's answer to a [`KvRequest::Machine`] (a write's once it
    /// is committed and applied).
    Machine(crate::consensus::machine::MachineReply),
    /// This node is not the leader; the leader's client (RESP) address if known.
    NotLeader {
        /// The leader's client address (`host:port`), if this node knows a leader.
        leader: Option<String>,
    },
    /// The request is invalid (a key or value too large) and was not executed.
    Rejected(String),
    /// The store is full: the write was refused and not executed (it will not take
    /// effect later), in the manner of Redis's `-OOM` reply. Reads are still served;
    /// writes succeed again once compaction frees space, deletes make some
    /// reclaimable, or the pool is grown.
    OutOfMemory(String),
    /// The request could not be served (leadership lost before it committed, the
    /// store failed, the node is shutting down). The outcome of a write is then
    /// unknown: it may still commit.
    Unavailable(String),
}
