//! The checks every message from a peer passes before it touches the core, the log
//! or the store: one place for everything that can be decided from the message
//! alone ([`Message::validate`]).
//!
//! A peer's bytes are input, not trust: a process that completed the transport's
//! Hello (or a bug in a sender) can say anything. Each field is checked against the
//! limits of the format it would end up in, so that nothing a peer says can make a
//! node panic, make its hard state unrepresentable, or write a record that a
//! restart cannot read back:
//!
//! - terms are at most [`MAX_TERM`] (what a store may hold when it opens, below the
//!   hard state's packed limit of 2^48), and the terms a message mentions are not
//!   above its own term;
//! - indexes stay below [`MAX_INDEX`], far above any real log, so that the core's
//!   `index + 1` arithmetic on them cannot overflow; the entries of an
//!   `AppendEntries` are consecutive from `prev_index + 1`, their terms never
//!   decrease;
//! - commands are what the service itself proposes: keys and values within the
//!   limits RESP applies to clients ([`MessageLimits`]), none of the cluster's
//!   reserved keys written directly, and configuration entries that decode into a
//!   valid configuration with at least one voter (an undecodable one, once
//!   persisted, would stop the node from ever restarting);
//! - snapshot metadata and items obey the same rules (every item at or below the
//!   snapshot's index).
//!
//! What depends on the node's state (is the sender a member, would a snapshot go
//! below the commit index, does an entry fit this node's store) is checked where
//! that state lives: in the core's `step` and in the replica.

use super::membership::{is_reserved_key, Membership, MembershipError, MEMBERSHIP_KEY};
use super::message::{Command, Entry, Message, MessageBody, SnapshotResume};
use crate::storage::store::{HardState, SnapshotItem, SnapshotMeta};

/// The largest term a message may carry: the largest a store may hold when it is
/// opened ([`HardState::MAX_OPEN_TERM`], 2^32 below the largest the hard state can
/// store), so no peer can move a node to a term its next restart would refuse, and
/// a node stops campaigning there (`start_election`).
pub const MAX_TERM: u64 = HardState::MAX_OPEN_TERM;

/// The largest index a message may carry. No log comes near it (2^62 entries), and
/// it leaves room for the `index + n` arithmetic the core does on indexes.
pub const MAX_INDEX: u64 = 1 << 62;

/// The size limits a message's commands and snapshot items are held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageLimits {
    /// The longest key (RESP's limit: a record stores a key's length in 16 bits).
    pub max_key: usize,
    /// The most bytes of key and value one entry or snapshot item may hold.
    pub max_entry: usize,
}

impl Default for MessageLimits {
    /// The service's limits: keys of at most `u16::MAX` bytes, entries of at most
    /// [`crate::consensus::replica::MAX_MESSAGE_BYTES`] (a replica's per-entry limit is this
    /// divided by its `max_entries_per_msg`, so never above it).
    fn default() -> Self {
        MessageLimits {
            max_key: usize::from(u16::MAX),
            max_entry: crate::consensus::replica::MAX_MESSAGE_BYTES,
        }
    }
}

/// Why a message was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidMessage {
    /// A node id is the reserved 65535, or the message is addressed to its sender.
    #[error("message from node {from} to node {to}: bad node id")]
    NodeId {
        /// The sender.
        from: u16,
        /// The recipient.
        to: u16,
    },
    /// A term is above [`MAX_TERM`].
    #[error("{field} {value} is above the largest term {MAX_TERM}")]
    Term {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// A term the message mentions is above the message's own term.
    #[error("{field} {value} is above the message's term {term}")]
    TermAhead {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The message's term.
        term: u64,
    },
    /// An index is above [`MAX_INDEX`].
    #[error("{field} {value} is above the largest index {MAX_INDEX}")]
    Index {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// The entries of an `AppendEntries` are not consecutive from `prev_index + 1`,
    /// or their terms decrease.
    #[error("entry {position} (index {index}, term {term}) does not follow the ones before it")]
    EntryOrder {
        /// The entry's position in the message.
        position: usize,
        /// Its index.
        index: u64,
        /// Its term.
        term: u64,
    },
    /// A key is longer than [`MessageLimits::max_key`].
    #[error("key of {len} bytes is longer than {max} bytes")]
    KeyTooLong {
        /// The key's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A key and value together exceed [`MessageLimits::max_entry`].
    #[error("entry of {len} bytes exceeds {max} bytes")]
    EntryTooLarge {
        /// The key's and value's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A command writes one of the cluster's reserved keys directly.
    #[error("a {0} of one of the cluster's reserved keys")]
    ReservedKey(&'static str),
    /// A configuration entry (or a snapshot's configuration) is invalid.
    #[error("bad configuration: {0}")]
    Config(#[from] MembershipError),
    /// A configuration has no voter.
    #[error("configuration without a voter")]
    NoVoter,
    /// A snapshot item was written above the snapshot's index.
    #[error("snapshot item at index {item} above the snapshot's index {snapshot}")]
    ItemAboveSnapshot {
        /// The item's index.
        item: u64,
        /// The snapshot's index.
        snapshot: u64,
    },
}

impl Message {
    /// Checks every field of the message that can be checked without the
    /// receiver's state (see the module docs). A message that fails is refused
    /// whole: none of it may reach the core, the log or the store.
    pub fn validate(&self, limits: &MessageLimits) -> Result<(), InvalidMessage> {
        if self.from == u16::MAX || self.to == u16::MAX || self.from == self.to {
            return Err(InvalidMessage::NodeId {
                from: self.from,
                to: self.to,
            });
        }
        let term = self.term;
        term_ok("term", term)?;
        // A term the message mentions (a last entry's, an entry's) is at most the
        // sender's term.
        let not_ahead = |field: &'static str, value: u64| {
            if value > term {
                Err(InvalidMessage::TermAhead { field, value, term })
            } else {
                Ok(())
            }
        };
        match &self.body {
            MessageBody::PreVote {
                last_index,
                last_term,
            }
            | MessageBody::RequestVote {
                last_index,
                last_term,
                ..
            } => {
                index_ok("last_index", *last_index)?;
                not_ahead("last_term", *last_term)?;
            }
            MessageBody::PreVoteResp { .. }
            | MessageBody::VoteResp { .. }
            | MessageBody::TimeoutNow
            | MessageBody::ReadIndex { .. }
            | MessageBody::HeartbeatResp { .. } => {}
            MessageBody::AppendEntries {
                prev_index,
                prev_term,
                entries,
                commit,
            } => {
                index_ok("prev_index", *prev_index)?;
                index_ok("commit", *commit)?;
                not_ahead("prev_term", *prev_term)?;
                validate_entries(*prev_index, *prev_term, term, entries, limits)?;
            }
            MessageBody::AppendResp { index, hint, .. } => {
                index_ok("index", *index)?;
                index_ok("hint", *hint)?;
            }
            MessageBody::Heartbeat { commit, .. } => index_ok("commit", *commit)?,
            MessageBody::SnapshotChunk { meta, items, .. } => {
                meta_ok(meta)?;
                not_ahead("snapshot term", meta.term)?;
                for item in items {
                    item_ok(meta, item, limits)?;
                }
            }
            MessageBody::SnapshotAck { index, resume, .. } => {
                index_ok("index", *index)?;
                if let Some(resume) = resume {
                    resume_ok(resume)?;
                }
            }
            MessageBody::SnapshotProgress { resume } => resume_ok(resume)?,
            MessageBody::ReadIndexResp { index, .. } => {
                if let Some(index) = index {
                    index_ok("index", *index)?;
                }
            }
        }
        Ok(())
    }
}

fn term_ok(field: &'static str, value: u64) -> Result<(), InvalidMessage> {
    if value > MAX_TERM {
        return Err(InvalidMessage::Term { field, value });
    }
    Ok(())
}

fn index_ok(field: &'static str, value: u64) -> Result<(), InvalidMessage> {
    if value > MAX_INDEX {
        return Err(InvalidMessage::Index { field, value });
    }
    Ok(())
}

fn meta_ok(meta: &SnapshotMeta) -> Result<(), InvalidMessage> {
    index_ok("snapshot index", meta.index)?;
    term_ok("snapshot term", meta.term)
}

fn resume_ok(resume: &SnapshotResume) -> Result<(), InvalidMessage> {
    meta_ok(&resume.meta)
}

/// Checks that `entries` follow `(prev_index, prev_term)` one index at a time,
/// with terms that never decrease and never pass the message's `term`, and that
/// each command is one the service could have proposed.
fn validate_entries(
    prev_index: u64,
    prev_term: u64,
    term: u64,
    entries: &[Entry],
    limits: &MessageLimits,
) -> Result<(), InvalidMessage> {
    let (mut index, mut last_term) = (prev_index, prev_term);
    for (position, e) in entries.iter().enumerate() {
        // `prev_index <= MAX_INDEX` and a frame holds far fewer than 2^62
        // entries, but the sum is checked all the same.
        let expected = index.checked_add(1);
        if expected != Some(e.index) || e.term < last_term || e.term > term {
            return Err(InvalidMessage::EntryOrder {
                position,
                index: e.index,
                term: e.term,
            });
        }
        index_ok("entry index", e.index)?;
        command_ok(&e.cmd, limits)?;
        (index, last_term) = (e.index, e.term);
    }
    Ok(())
}

/// Checks a command against the limits a leader applies before proposing it.
pub(crate) fn command_ok(cmd: &Command, limits: &MessageLimits) -> Result<(), InvalidMessage> {
    match cmd {
        Command::Put { key, value } => kv_ok("put", key, value.len(), limits),
        Command::Delete { key } => kv_ok("delete", key, 0, limits),
        Command::Cas { key, expected, new } => {
            kv_ok("compare-and-set", key, new.len(), limits)?;
            let expected = expected.as_ref().map_or(0, Vec::len);
            size_ok(key.len().saturating_add(expected), limits)
        }
        Command::Noop => Ok(()),
        Command::Machine { data } => size_ok(data.len(), limits),
        Command::Config { data } => {
            size_ok(data.len(), limits)?;
            config_ok(data)
        }
    }
}

/// A configuration as the store would keep it: decodable, valid, with a voter.
fn config_ok(data: &[u8]) -> Result<(), InvalidMessage> {
    let m = Membership::decode(data)?;
    if m.voters.is_empty() {
        return Err(InvalidMessage::NoVoter);
    }
    Ok(())
}

fn kv_ok(
    what: &'static str,
    key: &[u8],
    value_len: usize,
    limits: &MessageLimits,
) -> Result<(), InvalidMessage> {
    if is_reserved_key(key) {
        return Err(InvalidMessage::ReservedKey(what));
    }
    if key.len() > limits.max_key {
        return Err(InvalidMessage::KeyTooLong {
            len: key.len(),
            max: limits.max_key,
        });
    }
    size_ok(key.len().saturating_add(value_len), limits)
}

fn size_ok(len: usize, limits: &MessageLimits) -> Result<(), InvalidMessage> {
    if len > limits.max_entry {
        return Err(InvalidMessage::EntryTooLarge {
            len,
            max: limits.max_entry,
        });
    }
    Ok(())
}

/// A snapshot item: within the limits, at or below the snapshot's index, and, if
/// it is the configuration, a valid one. (Other reserved keys are never written.)
fn item_ok(
    meta: &SnapshotMeta,
    item: &SnapshotItem,
    limits: &MessageLimits,
) -> Result<(), InvalidMessage> {
    if item.index > meta.index {
        return Err(InvalidMessage::ItemAboveSnapshot {
            item: item.index,
            snapshot: meta.index,
        });
    }
    if item.key == MEMBERSHIP_KEY {
        size_ok(item.key.len().saturating_add(item.value.len()), limits)?;
        return config_ok(&item.value);
    }
    kv_ok("snapshot item", &item.key, item.value.len(), limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(term: u64, body: MessageBody) -> Message {
        Message {
            from: 1,
            to: 2,
            term,
            body,
        }
    }

    fn append(entries: Vec<Entry>) -> Message {
        msg(
            3,
            MessageBody::AppendEntries {
                prev_index: 4,
                prev_term: 2,
                entries,
                commit: 4,
            },
        )
    }

    fn put(index: u64, term: u64, key: Vec<u8>) -> Entry {
        Entry {
            index,
            term,
            cmd: Command::Put {
                key,
                value: b"v".to_vec(),
            },
        }
    }

    fn config(index: u64, data: Vec<u8>) -> Entry {
        Entry {
            index,
            term: 3,
            cmd: Command::Config { data },
        }
    }

    #[test]
    fn ordinary_messages_pass() {
        let l = MessageLimits::default();
        let good = append(vec![
            put(5, 2, b"k".to_vec()),
            put(6, 3, b"k".to_vec()),
            config(7, Membership::new([1, 2, 3], [4]).encode()),
        ]);
        assert_eq!(good.validate(&l), Ok(()));
        let hb = msg(
            MAX_TERM,
            MessageBody::Heartbeat {
                commit: MAX_INDEX,
                ctx: Some(u64::MAX),
                sent: u64::MAX,
            },
        );
        assert_eq!(hb.validate(&l), Ok(()));
    }

    #[test]
    fn out_of_range_numbers_are_refused() {
        let l = MessageLimits::default();
        for body in [
            MessageBody::TimeoutNow,
            MessageBody::Heartbeat {
                commit: 0,
                ctx: None,
                sent: 0,
            },
            MessageBody::RequestVote {
                last_index: 0,
                last_term: 0,
                transfer: false,
            },
        ] {
            assert!(matches!(
                msg(u64::MAX, body).validate(&l),
                Err(InvalidMessage::Term { .. })
            ));
        }
        let snap = |index, term| {
            msg(
                5,
                MessageBody::SnapshotChunk {
                    meta: SnapshotMeta { index, term },
                    seq: 0,
                    items: Vec::new(),
                    done: true,
                },
            )
        };
        assert!(matches!(
            snap(u64::MAX, 1).validate(&l),
            Err(InvalidMessage::Index { .. })
        ));
        assert!(matches!(
            snap(9, 6).validate(&l),
            Err(InvalidMessage::TermAhead { .. })
        ));
        let resp = msg(
            5,
            MessageBody::AppendResp {
                success: true,
                index: u64::MAX,
                hint: 0,
            },
        );
        assert!(matches!(
            resp.validate(&l),
            Err(InvalidMessage::Index { .. })
        ));
        let to_self = Message {
            from: 2,
            ..resp.clone()
        };
        assert!(matches!(
            to_self.validate(&l),
            Err(InvalidMessage::NodeId { .. })
        ));
    }

    #[test]
    fn entries_must_follow_on_and_be_proposable() {
        let l = MessageLimits::default();
        let refused = |entries| append(entries).validate(&l);
        assert!(matches!(
            refused(vec![put(6, 2, b"k".to_vec())]),
            Err(InvalidMessage::EntryOrder { position: 0, .. })
        ));
        assert!(matches!(
            refused(vec![put(5, 1, b"k".to_vec())]),
            Err(InvalidMessage::EntryOrder { .. })
        ));
        assert!(matches!(
            refused(vec![put(5, 4, b"k".to_vec())]),
            Err(InvalidMessage::EntryOrder { .. })
        ));
        assert!(matches!(
            refused(vec![put(5, 3, vec![b'x'; 70_000])]),
            Err(InvalidMessage::KeyTooLong { len: 70_000, .. })
        ));
        assert!(matches!(
            refused(vec![put(5, 3, MEMBERSHIP_KEY.to_vec())]),
            Err(InvalidMessage::ReservedKey(_))
        ));
        assert!(matches!(
            refused(vec![config(5, Vec::new())]),
            Err(InvalidMessage::Config(_))
        ));
        assert!(matches!(
            refused(vec![config(5, b"\xff\xff\xff".to_vec())]),
            Err(InvalidMessage::Config(_))
        ));
        assert!(matches!(
            refused(vec![config(5, Membership::new([], [4]).encode())]),
            Err(InvalidMessage::NoVoter)
        ));
        let small = MessageLimits {
            max_key: 8,
            max_entry: 16,
        };
        assert!(matches!(
            append(vec![put(5, 3, vec![b'k'; 20])]).validate(&small),
            Err(InvalidMessage::KeyTooLong { .. })
        ));
    }

    #[test]
    fn snapshot_items_are_checked() {
        let l = MessageLimits::default();
        let chunk = |items| {
            msg(
                5,
                MessageBody::SnapshotChunk {
                    meta: SnapshotMeta { index: 9, term: 4 },
                    seq: 0,
                    items,
                    done: true,
                },
            )
        };
        let item = |key: &[u8], value: Vec<u8>, index| SnapshotItem {
            key: key.to_vec(),
            value,
            index,
        };
        let members = Membership::new([1, 2], []).encode();
        assert_eq!(
            chunk(vec![
                item(b"k", b"v".to_vec(), 9),
                item(MEMBERSHIP_KEY, members, 1)
            ])
            .validate(&l),
            Ok(())
        );
        assert!(matches!(
            chunk(vec![item(b"k", b"v".to_vec(), 10)]).validate(&l),
            Err(InvalidMessage::ItemAboveSnapshot { .. })
        ));
        assert!(matches!(
            chunk(vec![item(MEMBERSHIP_KEY, b"junk".to_vec(), 1)]).validate(&l),
            Err(InvalidMessage::Config(_))
        ));
    }
}
