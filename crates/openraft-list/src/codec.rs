//! How openraft's values map onto raft-nvm's store.
//!
//! - **Indexes.** openraft numbers its log from 0, the store from 1: openraft index
//!   `i` is store index `i + 1`, and a store index of 0 means "none".
//! - **Log ids.** openraft's default (advanced) leader id is a term and a node id;
//!   the store keeps one `u64` term per entry, so it holds `term << 16 | node_id`
//!   (terms below 2^47, node ids below 2^16). The packing keeps the order: packed
//!   values compare as the `(term, node_id)` pairs do.
//! - **Vote.** The store's hard state is one word: a 48-bit term and a 16-bit
//!   vote. It holds `term << 1 | committed` and the vote's node id, so a vote is
//!   published by one failure-atomic 8-byte store (the list) or one hard-state
//!   file (the WAL). No vote saved reads as the default hard state.
//! - **Entries.** A `Set` is a put of `u` + key, a `Delete` a delete of `u` + key,
//!   a blank entry a no-op, and a membership entry a put of the key `m` whose
//!   value is the JSON of the membership and its log id. User keys and the
//!   membership key live in separate spaces (`u` and `m` prefixes), so no user key
//!   is reserved, and the applied membership is a plain read at the applied index
//!   that travels with every snapshot.

use openraft::impls::leader_id_adv::LeaderId;
use openraft::{EntryPayload, Membership, StoredMembership};
use raft_nvm::store::{HardState, LogEntry, OwnedOp, Store};
use serde::{Deserialize, Serialize};

use crate::error::OpenraftListError;
use crate::types::{Entry, LogId, Request, Vote};

/// The key of the membership record.
pub(crate) const MEMBERSHIP_KEY: &[u8] = b"m";
/// The prefix of every user key.
pub(crate) const USER_PREFIX: u8 = b'u';

/// The largest openraft term the packings hold.
pub const MAX_TERM: u64 = (1 << 47) - 1;
/// The largest node id the packings hold.
pub const MAX_NODE_ID: u64 = u16::MAX as u64 - 1;

/// The store key of user key `key`.
pub(crate) fn user_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(USER_PREFIX);
    k.extend_from_slice(key);
    k
}

fn range(what: String) -> OpenraftListError {
    OpenraftListError::Range(what)
}

/// Packs a committed leader id into the store's per-entry term.
pub(crate) fn pack_leader(leader: &LeaderId<u64, u64>) -> Result<u64, OpenraftListError> {
    if leader.term > MAX_TERM || leader.node_id > MAX_NODE_ID {
        return Err(range(format!(
            "leader id (term {}, node {}): terms below 2^47 and node ids below 65535",
            leader.term, leader.node_id
        )));
    }
    Ok((leader.term << 16) | leader.node_id)
}

/// The inverse of [`pack_leader`].
pub(crate) fn unpack_leader(packed: u64) -> LeaderId<u64, u64> {
    LeaderId {
        term: packed >> 16,
        node_id: packed & 0xffff,
    }
}

/// The openraft log id of store index `index` (>= 1) whose packed term is `term`.
pub(crate) fn log_id(index: u64, term: u64) -> LogId {
    LogId::new(unpack_leader(term), index - 1)
}

/// The openraft log id of store index `index`, if the store knows its term.
pub(crate) fn log_id_at(store: &dyn Store, index: u64) -> Option<LogId> {
    if index == 0 {
        return None;
    }
    store.term_at(index).map(|t| log_id(index, t))
}

/// The log id of the store's compaction base (what is physically purged), read
/// when a store is opened: after a restart the applied index is the base.
pub(crate) fn base_log_id(store: &dyn Store) -> Result<Option<LogId>, OpenraftListError> {
    let base = store.applied();
    if base == 0 {
        return Ok(None);
    }
    match log_id_at(store, base) {
        Some(id) => Ok(Some(id)),
        None => Err(OpenraftListError::Corrupt(format!(
            "the store's base index {base} has no term"
        ))),
    }
}

/// Packs a vote into the store's hard state.
pub(crate) fn pack_vote(vote: &Vote) -> Result<HardState, OpenraftListError> {
    let leader = vote.leader_id();
    if leader.term > MAX_TERM || leader.node_id > MAX_NODE_ID {
        return Err(range(format!(
            "vote (term {}, node {}): terms below 2^47 and node ids below 65535",
            leader.term, leader.node_id
        )));
    }
    Ok(HardState {
        term: (leader.term << 1) | u64::from(vote.committed),
        vote: Some(leader.node_id as u16),
    })
}

/// The inverse of [`pack_vote`]: `None` for the default hard state (no vote saved).
pub(crate) fn unpack_vote(hs: HardState) -> Option<Vote> {
    let node = hs.vote?;
    let leader = LeaderId {
        term: hs.term >> 1,
        node_id: u64::from(node),
    };
    Some(Vote {
        leader_id: leader,
        committed: hs.term & 1 == 1,
    })
}

/// The membership record's value.
#[derive(Serialize, Deserialize)]
struct MembershipRecord {
    log_id: LogId,
    membership: Membership<u64, openraft::BasicNode>,
}

/// The key an entry writes, owned (a user key takes its prefix; the membership
/// record its JSON value): what the store operation borrows besides the entry.
pub(crate) enum Encoded {
    /// A set or delete of this store key (the value, if any, is the entry's).
    Key(Vec<u8>),
    /// The membership record's value.
    Membership(Vec<u8>),
    /// Nothing (a blank entry).
    Blank,
}

/// What entry `entry` writes to the store, without copying its value.
pub(crate) fn encode_entry(entry: &Entry) -> Result<Encoded, OpenraftListError> {
    Ok(match &entry.payload {
        EntryPayload::Blank => Encoded::Blank,
        EntryPayload::Normal(Request::Set { key, .. } | Request::Delete { key }) => {
            Encoded::Key(user_key(key))
        }
        EntryPayload::Membership(m) => {
            let rec = MembershipRecord {
                log_id: entry.log_id,
                membership: m.clone(),
            };
            let value = serde_json::to_vec(&rec)
                .map_err(|e| OpenraftListError::Corrupt(format!("membership encoding: {e}")))?;
            Encoded::Membership(value)
        }
    })
}

/// The store operation of `entry`, borrowing from it and from its encoding.
pub(crate) fn store_op<'a>(entry: &'a Entry, enc: &'a Encoded) -> raft_nvm::store::Op<'a> {
    use raft_nvm::store::Op;
    match (enc, &entry.payload) {
        (Encoded::Key(key), EntryPayload::Normal(Request::Set { value, .. })) => {
            Op::Put { key, value }
        }
        (Encoded::Key(key), _) => Op::Delete { key },
        (Encoded::Membership(value), _) => Op::Put {
            key: MEMBERSHIP_KEY,
            value,
        },
        (Encoded::Blank, _) => Op::Noop,
    }
}

/// The openraft entry a store entry holds.
pub(crate) fn decode_entry(e: LogEntry) -> Result<Entry, OpenraftListError> {
    let log_id = log_id(e.index, e.term);
    let payload = match e.op {
        OwnedOp::Noop => EntryPayload::Blank,
        OwnedOp::Put { key, value } => match key.split_first() {
            Some((&USER_PREFIX, k)) => EntryPayload::Normal(Request::Set {
                key: k.to_vec(),
                value,
            }),
            _ if key == MEMBERSHIP_KEY => EntryPayload::Membership(decode_membership(&value)?.1),
            _ => return Err(corrupt_key(e.index, &key)),
        },
        OwnedOp::Delete { key } => match key.split_first() {
            Some((&USER_PREFIX, k)) => EntryPayload::Normal(Request::Delete { key: k.to_vec() }),
            _ => return Err(corrupt_key(e.index, &key)),
        },
    };
    Ok(Entry { log_id, payload })
}

fn corrupt_key(index: u64, key: &[u8]) -> OpenraftListError {
    OpenraftListError::Corrupt(format!(
        "entry {index}: key {:?} is neither a user key nor the membership key",
        String::from_utf8_lossy(key)
    ))
}

/// Decodes a membership record's value.
pub(crate) fn decode_membership(
    value: &[u8],
) -> Result<(LogId, Membership<u64, openraft::BasicNode>), OpenraftListError> {
    let rec: MembershipRecord = serde_json::from_slice(value)
        .map_err(|e| OpenraftListError::Corrupt(format!("membership record: {e}")))?;
    Ok((rec.log_id, rec.membership))
}

/// The membership applied at store index `at`.
pub(crate) fn membership_at(
    store: &dyn Store,
    at: u64,
) -> Result<StoredMembership<LeaderId<u64, u64>, u64, openraft::BasicNode>, OpenraftListError> {
    Ok(match store.get(MEMBERSHIP_KEY, at)? {
        Some(v) => {
            let (id, m) = decode_membership(&v)?;
            StoredMembership::new(Some(id), m)
        }
        None => StoredMembership::default(),
    })
}
