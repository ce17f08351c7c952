//! What the core hands to its driver in one batch, and the order the driver must
//! process it in.

use crate::storage::store::{HardState, SnapshotItem, SnapshotMeta};

use super::message::{Entry, Message, SnapshotResume};
use super::read_index::ReadState;

/// The leader asks the driver to send a snapshot of its store to `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotRequest {
    /// The follower.
    pub to: u16,
    /// The index to take it at (the leader's applied index; pass it to
    /// [`crate::storage::store::Store::snapshot`]).
    pub index: u64,
    /// Resume an installation the follower started: skip the chunks before
    /// `resume.seq`, and stream only if the store still gives exactly `resume.meta`
    /// at `index` (otherwise report [`super::RaftCore::report_snapshot_stale`]).
    pub resume: Option<SnapshotResume>,
}

/// The leader needs entries its DRAM window no longer holds to replicate them to a
/// lagging follower: the driver reads them from the store (the store is the log)
/// and hands them back with [`super::RaftCore::send_stored_entries`], or reports
/// with [`super::RaftCore::report_entries_unavailable`] that compaction dropped one
/// (the follower then gets a snapshot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogRead {
    /// The follower.
    pub to: u16,
    /// The first entry to read (the term of `from - 1` is needed too).
    pub from: u64,
    /// The last entry to read.
    pub last: u64,
    /// The leader's term when it asked (a late answer in another term is ignored).
    pub term: u64,
}

/// A snapshot chunk that arrived from the leader, for the driver to install.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncomingChunk {
    /// The leader that sent it.
    pub from: u16,
    /// The leader's term (a stream is resumable only within one leader's term).
    pub term: u64,
    /// Where the snapshot stands.
    pub meta: SnapshotMeta,
    /// The chunk's number (0 starts a new installation).
    pub seq: u32,
    /// Its records.
    pub items: Vec<SnapshotItem>,
    /// Whether it is the last chunk.
    pub done: bool,
}

/// One batch of work for the driver. Process the fields **in this order**:
///
/// 1. [`Ready::hard_state`]: persist it ([`crate::storage::store::Store::set_hard_state`] is durable
///    on return) *before* anything else leaves the node — the messages may carry a
///    vote or a term that must survive a crash.
/// 2. [`Ready::truncate_after`] then [`Ready::entries`]: truncate (a rollback
///    record) and append to the store, in order. If [`Ready::must_sync`], sync now
///    (the thesis flushes immediately on client requests and heartbeats, so an idle
///    node never waits for a group timer); otherwise group durability may delay it.
///    "Now" may be on another thread while the driver goes on with the next
///    `Ready`s: nothing in the messages claims the entries durable (step 8 tells
///    the core once they are).
/// 3. [`Ready::messages`]: send them. A leader's own entries were appended in step 2,
///    so it appends before it replicates; its acknowledgements are counted only once
///    the store reports them durable (step 8).
/// 4. [`Ready::committed`] / [`Ready::apply_to`]: apply in order (evaluating
///    [`super::Command::Cas`] against the state before each entry), then
///    [`crate::storage::store::Store::set_applied`]`(apply_to)`.
/// 5. [`Ready::read_states`]: serve each read once the applied index reaches its
///    index; [`Ready::dropped_reads`] failed (leadership lost) and may be retried.
/// 6. [`Ready::log_reads`]: read those entries from the store and hand them back
///    ([`super::RaftCore::send_stored_entries`]); a later `Ready` carries the
///    `AppendEntries` built from them. The driver may spread the reads over
///    several later `Ready`s (to send the first before reading the rest), but must
///    answer every read, in the order given; until it has answered all reads for a
///    follower, the core sends that follower nothing but more reads.
/// 7. [`Ready::snapshots_to_send`] and [`Ready::snapshot_chunks`]: stream or install
///    snapshots, then report with [`super::RaftCore::on_snapshot_installed`] /
///    [`super::RaftCore::report_snapshot_sent`] /
///    [`super::RaftCore::report_snapshot_failed`].
/// 8. Call [`super::RaftCore::on_persisted`] with the store's durable index after
///    all of the above (it must describe the log as written by this and every
///    earlier `Ready`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "a Ready must be processed"]
pub struct Ready {
    /// A new hard state to persist first.
    pub hard_state: Option<HardState>,
    /// Discard the store's entries above this index before appending.
    pub truncate_after: Option<u64>,
    /// Entries to append, in index order.
    pub entries: Vec<Entry>,
    /// Sync the store now instead of waiting for a group: entries were appended
    /// (a client request or replication) or a heartbeat was sent or received while
    /// some appended entries are not yet durable. Following it, an idle node never
    /// makes a commit wait for a group timer.
    pub must_sync: bool,
    /// Messages to send.
    pub messages: Vec<Message>,
    /// Committed entries to apply (those the core still holds in its window; none
    /// if [`super::Config::committed_entries`] is off).
    pub committed: Vec<Entry>,
    /// Apply everything up to this index (covers [`Ready::committed`] and entries
    /// the store recovered that the core knows by term only).
    pub apply_to: Option<u64>,
    /// Reads confirmed by a quorum.
    pub read_states: Vec<ReadState>,
    /// Reads abandoned because the node is no longer leader.
    pub dropped_reads: Vec<u64>,
    /// Entries the leader wants read back from the store for a lagging follower.
    pub log_reads: Vec<LogRead>,
    /// Snapshots the leader wants sent.
    pub snapshots_to_send: Vec<SnapshotRequest>,
    /// Snapshot chunks received, to install.
    pub snapshot_chunks: Vec<IncomingChunk>,
}

impl Ready {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        *self == Ready::default()
    }
}
