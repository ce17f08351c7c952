//! The openraft type configuration of this crate: a key-value state machine whose
//! requests set or delete a key, on `u64` node ids with [`openraft::BasicNode`].

use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    /// The type configuration the store implements openraft's storage traits for.
    /// `NodeId = u64` (below 65535: the list's hard state holds a 16-bit vote),
    /// `Node = BasicNode`, the rest openraft's defaults (the advanced leader id:
    /// a log id carries its leader's term and node id; terms below 2^47).
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = u64,
        Node = openraft::BasicNode,
);

/// A client's command: what one normal log entry does to the key-value state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Sets `key` to `value`.
    Set {
        /// The key.
        key: Vec<u8>,
        /// The new value.
        value: Vec<u8>,
    },
    /// Deletes `key`.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Request::Set { key, value } => {
                write!(
                    f,
                    "set {} ({} B)",
                    String::from_utf8_lossy(key),
                    value.len()
                )
            }
            Request::Delete { key } => write!(f, "delete {}", String::from_utf8_lossy(key)),
        }
    }
}

/// What applying an entry answers: the key's value just before the entry (`None`
/// if it had none, and for blank and membership entries).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The previous value of the key the request named.
    pub previous: Option<Vec<u8>>,
}

/// openraft's log id under [`TypeConfig`].
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
/// openraft's vote under [`TypeConfig`].
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
/// openraft's log entry under [`TypeConfig`].
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
/// openraft's snapshot metadata under [`TypeConfig`].
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
/// openraft's stored membership under [`TypeConfig`].
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
