//! What Raft nodes say to each other, and the log entries they replicate. Every type
//! is serde-serialisable so a transport can frame it.

use serde::{Deserialize, Serialize};

use crate::storage::store::{LogEntry, Op, OwnedOp, SnapshotItem, SnapshotMeta};

/// A client command, as ordered by the log.
///
/// The core only orders commands; it never evaluates them. In particular the
/// outcome of [`Command::Cas`] is decided by whoever applies the entry, against the
/// state produced by all entries before it in the log. That state is the same on
/// every replica (log matching), so the decision is deterministic everywhere; a
/// driver on the list store may equally decide it when appending, with
/// [`crate::storage::store::Store::latest`], which sees exactly the entries before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        /// The value.
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
    },
    /// Deletes `key`.
    Delete {
        /// The key.
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
    },
    /// Sets `key` to `new` if its current value is `expected` (`None`: absent).
    Cas {
        /// The key.
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        /// The value the key must hold (`None`: the key must be absent).
        #[serde(with = "serde_bytes")]
        expected: Option<Vec<u8>>,
        /// The value to set.
        #[serde(with = "serde_bytes")]
        new: Vec<u8>,
    },
    /// Changes nothing (a new leader's first entry).
    Noop,
    /// A command for the replica's [`crate::consensus::machine::StateMachine`], which decides
    /// when it appends the entry what the command writes (like [`Command::Cas`]).
    Machine {
        /// The command's bytes, as the machine parsed them.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// A cluster configuration ([`super::Membership`], encoded): it takes effect
    /// when appended. The store keeps it as the value of
    /// [`super::MEMBERSHIP_KEY`].
    Config {
        /// [`super::Membership::encode`]'s bytes.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
}

impl Command {
    /// The store operation of an unconditional command (`None` for
    /// [`Command::Cas`] and [`Command::Machine`], whose operation depends on the
    /// state they are applied to).
    pub fn as_op(&self) -> Option<Op<'_>> {
        match self {
            Command::Put { key, value } => Some(Op::Put { key, value }),
            Command::Delete { key } => Some(Op::Delete { key }),
            Command::Noop => Some(Op::Noop),
            Command::Config { data } => Some(Op::Put {
                key: super::MEMBERSHIP_KEY,
                value: data,
            }),
            Command::Cas { .. } | Command::Machine { .. } => None,
        }
    }
}

impl From<OwnedOp> for Command {
    /// The command a stored operation replays as (a stored entry's conditional
    /// writes are already decided: a swap that happened is a put, one that did not
    /// is a no-op).
    fn from(op: OwnedOp) -> Command {
        match op {
            OwnedOp::Put { key, value } if key == super::MEMBERSHIP_KEY => {
                Command::Config { data: value }
            }
            OwnedOp::Put { key, value } => Command::Put { key, value },
            OwnedOp::Delete { key } => Command::Delete { key },
            OwnedOp::Noop => Command::Noop,
        }
    }
}

/// One entry of the replicated log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Its position (the first entry is 1).
    pub index: u64,
    /// The leader's term when it was proposed.
    pub term: u64,
    /// What it does.
    pub cmd: Command,
}

impl From<LogEntry> for Entry {
    /// An entry read back from the store.
    fn from(e: LogEntry) -> Entry {
        Entry {
            index: e.index,
            term: e.term,
            cmd: e.op.into(),
        }
    }
}

/// A message between two nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// The sender.
    pub from: u16,
    /// The recipient.
    pub to: u16,
    /// The sender's term (for pre-votes: the term it would campaign in).
    pub term: u64,
    /// What it says.
    pub body: MessageBody,
}

/// The kinds of message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MessageBody {
    /// "Would you vote for me in `term`?" (no term change on either side).
    PreVote {
        /// The candidate's last index.
        last_index: u64,
        /// The candidate's last term.
        last_term: u64,
    },
    /// The answer to a [`MessageBody::PreVote`].
    PreVoteResp {
        /// Whether the pre-vote is granted.
        granted: bool,
    },
    /// "Vote for me in `term`."
    RequestVote {
        /// The candidate's last index.
        last_index: u64,
        /// The candidate's last term.
        last_term: u64,
        /// The candidate campaigns because the leader told it to
        /// ([`MessageBody::TimeoutNow`]): voters grant it even while they still
        /// follow that leader (the leader lease does not apply).
        transfer: bool,
    },
    /// The answer to a [`MessageBody::RequestVote`].
    VoteResp {
        /// Whether the vote is granted.
        granted: bool,
    },
    /// Entries after `prev_index` (whose term is `prev_term`) and the leader's commit.
    AppendEntries {
        /// The index before the first entry.
        prev_index: u64,
        /// Its term.
        prev_term: u64,
        /// The entries (possibly none: a probe).
        entries: Vec<Entry>,
        /// The leader's commit index.
        commit: u64,
    },
    /// The answer to [`MessageBody::AppendEntries`]. A success is only sent once the
    /// acknowledged entries are durable on the follower.
    AppendResp {
        /// Whether the follower's log matched at `prev_index`.
        success: bool,
        /// On success: the follower's log matches the leader's up to here and is
        /// durable. On failure: the rejected `prev_index`.
        index: u64,
        /// On failure: the follower's last index (where the leader may probe next).
        hint: u64,
    },
    /// A leader's heartbeat; `ctx` is the newest pending read-index request.
    Heartbeat {
        /// The commit index the follower may adopt (never above what it matched).
        commit: u64,
        /// The read-index context this round confirms, if any.
        ctx: Option<u64>,
        /// The leader's tick count when it sent the heartbeat (its lease starts
        /// there, see [`super::Config::lease_reads`]).
        sent: u64,
    },
    /// The answer to a [`MessageBody::Heartbeat`], echoing its context and tick.
    HeartbeatResp {
        /// The echoed read-index context.
        ctx: Option<u64>,
        /// The echoed tick count.
        sent: u64,
    },
    /// One chunk of a snapshot of the leader's store. Chunk `seq == 0` is the offer:
    /// the follower starts a new installation with it. The driver produces chunks
    /// from [`crate::storage::store::Store::snapshot`] after the core asked for a snapshot.
    SnapshotChunk {
        /// Where the snapshot stands.
        meta: SnapshotMeta,
        /// The chunk's number (0 = first).
        seq: u32,
        /// The live records of this chunk.
        items: Vec<SnapshotItem>,
        /// Whether this is the last chunk.
        done: bool,
    },
    /// A follower's answer to a snapshot: installed up to `index` (success) or failed.
    SnapshotAck {
        /// Whether it was installed.
        success: bool,
        /// The follower's index after installing it (its last index on failure).
        index: u64,
        /// On failure: the follower still holds the first chunks of this snapshot
        /// in its staging store and asks the leader to resume the stream there
        /// (a chunk went missing). `None`: start over.
        resume: Option<SnapshotResume>,
    },
    /// The leader hands its leadership to the recipient (Raft thesis §3.10): the
    /// recipient, whose log matches the leader's last index, campaigns at once,
    /// without a pre-vote round.
    TimeoutNow,
    /// A follower's progress installing a snapshot: chunks `0..resume.seq` of
    /// `resume.meta` are in its staging store. The leader remembers it, so that a
    /// stream broken by a lost connection resumes at `resume.seq` rather than at 0.
    SnapshotProgress {
        /// The snapshot and the next chunk the follower needs.
        resume: SnapshotResume,
    },
    /// A learner asks its leader for a read index (a linearizable read it will
    /// serve itself once it applied that far): the leader confirms its leadership
    /// with a quorum heartbeat round, as for its own reads.
    ReadIndex {
        /// The learner's context for the read.
        ctx: u64,
    },
    /// The leader's answer to [`MessageBody::ReadIndex`]: the commit index the
    /// read must observe, or `None` when the leader lost its leadership first.
    ReadIndexResp {
        /// The learner's context.
        ctx: u64,
        /// The index to read at.
        index: Option<u64>,
    },
}

/// Where a snapshot installation can resume: the snapshot and the number of the
/// next chunk the follower needs (the chunks before it are installed in its
/// staging store).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotResume {
    /// The snapshot being installed.
    pub meta: SnapshotMeta,
    /// The next chunk the follower needs.
    pub seq: u32,
}

impl MessageBody {
    /// A short name for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            MessageBody::PreVote { .. } => "PreVote",
            MessageBody::PreVoteResp { .. } => "PreVoteResp",
            MessageBody::RequestVote { .. } => "RequestVote",
            MessageBody::TimeoutNow => "TimeoutNow",
            MessageBody::ReadIndex { .. } => "ReadIndex",
            MessageBody::ReadIndexResp { .. } => "ReadIndexResp",
            MessageBody::VoteResp { .. } => "VoteResp",
            MessageBody::AppendEntries { .. } => "AppendEntries",
            MessageBody::AppendResp { .. } => "AppendResp",
            MessageBody::Heartbeat { .. } => "Heartbeat",
            MessageBody::HeartbeatResp { .. } => "HeartbeatResp",
            MessageBody::SnapshotChunk { .. } => "SnapshotChunk",
            MessageBody::SnapshotAck { .. } => "SnapshotAck",
            MessageBody::SnapshotProgress { .. } => "SnapshotProgress",
        }
    }
}
