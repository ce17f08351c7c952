//! A pure, deterministic Raft core in the style of etcd/raft's `RawNode`/`Ready`.
//!
//! [`RaftCore`] has no clock, thread, I/O or ambient randomness: time advances by
//! [`RaftCore::tick`], randomness comes from [`Config::seed`], and all effects come
//! out as a [`Ready`] for a driver to carry out (persist the hard state, append to
//! the store, send messages, apply, serve reads, stream snapshots — in that order).
//!
//! The store *is* the log: a leader's proposals and a follower's received entries
//! are appended to the [`crate::storage::store::Store`] by the driver, a follower's conflicting
//! suffix becomes a rollback record ([`Ready::truncate_after`]), and the core keeps
//! only a window of recent entries in DRAM for replication. A follower that needs
//! an entry older than the window gets it read back from the store
//! ([`Ready::log_reads`]); only once compaction dropped it does the follower get a
//! snapshot ([`Ready::snapshots_to_send`]).
//!
//! Durability: nothing counts before the store made it durable. A follower
//! acknowledges only entries that are durable *and* verified against the current
//! leader, and a leader counts its own log only up to the durable index reported by
//! [`RaftCore::on_persisted`]. [`Ready::must_sync`] asks for an immediate flush
//! whenever entries were appended, so an idle node never waits for a group timer.
//!
//! Elections use randomised timeouts, pre-vote (no term bump unless a quorum would
//! grant) and check-quorum (a leader without a quorum for an election timeout steps
//! down; followers ignore campaigns while they hear from a leader). Reads use
//! read-index: the leader first commits a no-op of its term, then records the
//! commit index and confirms it with a quorum heartbeat round.
//!
//! Membership changes by configuration entries in the log, voters through a joint
//! configuration, with learners that receive the log without voting
//! ([`Membership`], `membership.rs` and `reconfig.rs`).
//!
//! A peer's message is input, not trust: [`Message::validate`] (`validate.rs`)
//! checks every field that can be judged alone (terms that fit the hard state,
//! indexes far from overflow, entries that follow on, commands a leader could
//! have proposed, valid configuration entries, sane snapshot metadata); the
//! transport refuses a message that fails it and [`RaftCore::step`] checks it
//! again, then refuses senders outside the configuration (see
//! `RaftCore::check_sender` for the two exceptions that keep a removed leader's
//! handover and a lagging node's catch-up working).

mod config;
mod core;
mod election;
mod error;
mod facts;
mod learner_reads;
mod lease;
mod log;
mod membership;
mod message;
mod progress;
mod read_index;
mod ready;
mod reconfig;
mod replication;
pub(crate) mod rng;
mod role;
#[cfg(test)]
mod tests;
mod transfer;
mod validate;

pub use self::config::{Config, ConfigError};
pub use self::core::{unsent_above, RaftCore};
pub use self::error::RaftError;
pub use self::facts::{stored_membership, StoreFacts};
pub use self::lease::Lease;
pub use self::membership::{
    is_reserved_key, Membership, MembershipChange, MembershipError, MembershipLog, VoteResult,
    MEMBERSHIP_KEY, RESERVED_PREFIX,
};
pub use self::message::{Command, Entry, Message, MessageBody, SnapshotResume};
pub use self::progress::{Progress, ProgressState};
pub use self::read_index::ReadState;
pub use self::ready::{IncomingChunk, LogRead, Ready, SnapshotRequest};
pub use self::role::Role;
pub use self::validate::{InvalidMessage, MessageLimits, MAX_INDEX, MAX_TERM};
