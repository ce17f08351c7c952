//! The typed errors of the Raft core.

use super::config::ConfigError;

/// What the core refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RaftError {
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// Only the leader takes proposals and reads.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The leader this node knows of, if any.
        leader: Option<u16>,
    },
    /// A message came from a node that is not a peer, or is addressed elsewhere.
    #[error("message from {from} to {to} does not concern node {id}")]
    Misrouted {
        /// The sender.
        from: u16,
        /// The recipient.
        to: u16,
        /// This node.
        id: u16,
    },
    /// A message from a node outside the current configuration (voters, outgoing
    /// voters, learners): a removed node, or a stranger that got past the
    /// transport's Hello.
    #[error("message from node {from}, which is not a member of the configuration ({membership})")]
    NotAMember {
        /// The sender.
        from: u16,
        /// The configuration, as text.
        membership: String,
    },
    /// A message whose fields are out of range or inconsistent (see
    /// [`super::Message::validate`]).
    #[error("invalid {kind} message from node {from}: {reason}")]
    InvalidMessage {
        /// The sender.
        from: u16,
        /// The message's kind.
        kind: &'static str,
        /// What is wrong with it.
        reason: super::InvalidMessage,
    },
    /// A read with this context is already pending.
    #[error("read context {0} is already pending")]
    DuplicateRead(u64),
    /// The driver answered a [`super::LogRead`] with entries that do not match it.
    #[error("log read answered wrongly: {0}")]
    LogRead(String),
    /// The leader is handing its leadership to `target` and takes no proposals
    /// meanwhile (see [`super::RaftCore::transfer_leadership`]).
    #[error("leadership is moving to node {target}")]
    Transferring {
        /// The node leadership goes to.
        target: u16,
    },
    /// A leadership transfer named a node that is not another voter.
    #[error("node {0} is not another voter of this cluster")]
    NotAVoter(u16),
    /// A membership change is still under way (or the leader has not yet
    /// committed an entry of its term): one change at a time.
    #[error("a membership change is under way (configuration or log at index {index}); try again once it commits")]
    MembershipChangePending {
        /// The index the change waits for.
        index: u64,
    },
    /// A learner to promote lags too far behind the leader.
    #[error("learner {id} is {lag} entries behind (promotion needs at most {max})")]
    LearnerBehind {
        /// The learner.
        id: u16,
        /// How far its durable match is behind the leader's last index.
        lag: u64,
        /// [`super::Config::promote_max_lag`].
        max: u64,
    },
    /// A learner to promote answered no heartbeat within the last election
    /// timeout.
    #[error("learner {0} has not answered the leader lately; it is not promoted")]
    LearnerUnreachable(u16),
    /// The change does not fit the configuration.
    #[error("membership change refused: {0}")]
    Membership(#[from] super::membership::MembershipError),
    /// The facts a restart was given are inconsistent.
    #[error("inconsistent restart facts: {0}")]
    Facts(String),
}
