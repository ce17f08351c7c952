//! Your own state machine on the persistent list.
//!
//! Two ways in: [`TypedMachine`] (start here), over your own serde command,
//! response, query and answer types, applied in batches, run on a node with
//! [`Typed`] and called with `Node::client_write` / `Node::client_read`; and
//! [`StateMachine`], the byte-level trait it runs on, whose commands are RESP
//! arguments (for a machine `redis-cli` talks to). Both keep their state in
//! the replicated map.
//!
//! A [`StateMachine`] turns client commands into changes of the replicated map
//! that the store holds. Its state *is* that map: the thesis's one persistent
//! list is the log, the state and the snapshot at once, so a machine has nothing
//! to snapshot or restore of its own. Compaction, recovery after a crash, and
//! snapshots streamed to a lagging follower all work on the map, the same way
//! for every machine; the built-in key-value commands ([`KvMachine`]) are one
//! implementation of the trait.
//!
//! How a command runs:
//!
//! 1. A client's command is parsed ([`StateMachine::parse`]) into a write or a
//!    read ([`MachineCall`]).
//! 2. A write becomes a Raft entry holding the command's bytes. **Every** replica
//!    applies it ([`StateMachine::apply_batch`], with the consecutive machine
//!    entries appended with it; see [`BatchState`]) when it appends the entry,
//!    against the state holding exactly the entries before it. By log matching that state is
//!    the same on every replica, so a deterministic `apply` makes the same
//!    [`Write`] everywhere. The store keeps only that write (a put, a delete, or
//!    nothing): entries read back from the store, for a lagging follower or after
//!    a restart, are already decided. The client gets [`Applied::reply`] from the
//!    leader once the entry is committed and applied.
//! 3. A read waits for a read-index round (linearizable) and is answered by
//!    [`StateMachine::query`] at the applied index.
//!
//! The rules a machine follows:
//!
//! - `apply` is a function of the state and the command alone: no clocks, no
//!   randomness, no state of its own that differs between replicas. Machines
//!   that differ between nodes, or a node without the machine, would diverge;
//!   a replica that gets a machine entry and has no machine stops with
//!   [`ReplicaError::NoMachine`](crate::consensus::replica::ReplicaError::NoMachine) rather
//!   than guess.
//! - A command changes at most one key. Raft commits entries one by one, so two
//!   entries of one command could be split by a leader change; one entry per
//!   command keeps every command atomic.
//! - A write's key is at most 65,535 bytes, and key and value together at most the
//!   largest entry a replication message carries (128 KiB on the node). A larger
//!   write is not stored; the client gets an error (decided the same way on every
//!   replica).
//!
//! ```
//! use raft_nvm::machine::{Applied, MachineCall, MachineReply, StateMachine, StateView};
//! use raft_nvm::StoreError;
//!
//! /// `INCR key`: adds one to a decimal counter (absent: 0).
//! #[derive(Debug)]
//! struct Counter;
//!
//! impl StateMachine for Counter {
//!     fn name(&self) -> &str {
//!         "counter"
//!     }
//!     fn parse(&self, args: &[Vec<u8>]) -> Option<Result<MachineCall, String>> {
//!         match args {
//!             [name, key] if name.eq_ignore_ascii_case(b"incr") => {
//!                 Some(Ok(MachineCall::Write(key.clone())))
//!             }
//!             _ => None,
//!         }
//!     }
//!     fn apply(&self, state: &StateView<'_>, key: &[u8]) -> Result<Applied, StoreError> {
//!         let now: i64 = match state.get(key)? {
//!             Some(v) => match std::str::from_utf8(&v).ok().and_then(|s| s.parse().ok()) {
//!                 Some(n) => n,
//!                 None => return Ok(Applied::reply(MachineReply::Error("not a counter".into()))),
//!             },
//!             None => 0,
//!         };
//!         let next = now + 1;
//!         Ok(Applied::put(key, next.to_string(), MachineReply::Integer(next)))
//!     }
//!     fn query(&self, _: &StateView<'_>, _: &[u8]) -> Result<MachineReply, StoreError> {
//!         Ok(MachineReply::Nil)
//!     }
//! }
//! ```

mod batch;
mod kv;
mod typed;

use crate::storage::error::StoreError;
use crate::storage::store::Store;

pub use self::batch::BatchState;
pub use self::kv::KvMachine;
pub(crate) use self::kv::{decide as decide_kv, decide_blind};
pub use self::typed::{decode, encode, Answer, Typed, TypedError, TypedMachine};

/// A state machine whose state is the replicated map (see the module docs).
///
/// `Debug` is required so configurations holding one can be printed.
pub trait StateMachine: Send + Sync + std::fmt::Debug + 'static {
    /// The machine's name, shown in `INFO` (`state_machine:`).
    fn name(&self) -> &str;

    /// Parses a client command (RESP arguments, the command name first, as sent)
    /// into a write or a read. `None`: not one of this machine's commands (the
    /// client gets `ERR unknown command`); `Some(Err(message))`: one of them, used
    /// wrongly (the client gets `ERR message`).
    ///
    /// The built-in commands (`GET`, `SET`, `DEL`, `CAS`, `INFO`, `PING` and the
    /// few Redis clients send on connecting) are parsed first and never reach here.
    fn parse(&self, args: &[Vec<u8>]) -> Option<Result<MachineCall, String>>;

    /// Applies the write `command` against `state` (every entry before it
    /// applied): returns the key it changes, if any, and the client's reply. Must
    /// be deterministic (see the module docs).
    ///
    /// # Errors
    ///
    /// Only the store's errors from `state`: the replica stops.
    fn apply(&self, state: &StateView<'_>, command: &[u8]) -> Result<Applied, StoreError>;

    /// Applies a batch of write commands, consecutive entries of the log (see
    /// [`BatchState`] for how a batch is formed): records each command's write in
    /// `state` and returns one reply per command, in order. The replica calls this,
    /// never [`StateMachine::apply`] directly; the default applies the commands
    /// one at a time with `apply`, each against the state after the ones before
    /// it. Override it to handle a batch at once, with the same outcome for each
    /// command as one at a time (replicas group entries differently).
    ///
    /// # Errors
    ///
    /// Only the store's errors from `state`: the replica stops.
    fn apply_batch(
        &self,
        state: &mut BatchState<'_>,
        commands: &[&[u8]],
    ) -> Result<Vec<MachineReply>, StoreError> {
        let mut replies = Vec::with_capacity(commands.len());
        for (pos, command) in commands.iter().enumerate() {
            let applied = self.apply(&state.view(pos), command)?;
            replies.push(state.record(pos, applied));
        }
        Ok(replies)
    }

    /// The reply a RESP client gets for `reply`, one of this machine's (the
    /// default: `reply` itself). A machine whose replies are made for other
    /// callers (a [`Typed`] machine's postcard answers) renders them for RESP here;
    /// it runs on the connection, not on the replica.
    fn resp_reply(&self, reply: MachineReply) -> MachineReply {
        reply
    }

    /// Answers the read `query` against `state` (the applied index, after the
    /// leader confirmed it still leads).
    ///
    /// # Errors
    ///
    /// Only the store's errors from `state`: the replica stops.
    fn query(&self, state: &StateView<'_>, query: &[u8]) -> Result<MachineReply, StoreError>;
}

/// What a client asks of a [`StateMachine`]: the bytes its `apply` or `query`
/// receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MachineCall {
    /// A write: replicated through the log, then [`StateMachine::apply`].
    Write(Vec<u8>),
    /// A read: [`StateMachine::query`] after a read-index round.
    Read(Vec<u8>),
}

/// A machine's answer to a client, in RESP's reply types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MachineReply {
    /// `+OK`.
    Ok,
    /// A nil bulk string.
    Nil,
    /// An integer.
    Integer(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// An error (`-ERR message`). A write that answers with an error may still
    /// have changed its key: that is the machine's choice.
    Error(String),
}

/// The one key a command changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Deletes `key` (nothing is stored if it is absent).
    Delete {
        /// The key.
        key: Vec<u8>,
    },
}

/// What [`StateMachine::apply`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The key the command changes, or `None` for a command that changes nothing.
    pub write: Option<Write>,
    /// The reply the client gets once the entry is committed.
    pub reply: MachineReply,
}

impl Applied {
    /// Changes nothing; answers `reply`.
    pub fn reply(reply: MachineReply) -> Applied {
        Applied { write: None, reply }
    }

    /// Sets `key` to `value`; answers `reply`.
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, reply: MachineReply) -> Applied {
        Applied {
            write: Some(Write::Put {
                key: key.into(),
                value: value.into(),
            }),
            reply,
        }
    }

    /// Deletes `key`; answers `reply`.
    pub fn delete(key: impl Into<Vec<u8>>, reply: MachineReply) -> Applied {
        Applied {
            write: Some(Write::Delete { key: key.into() }),
            reply,
        }
    }
}

/// The replicated map as a command sees it: read-only, at one point of the log.
#[derive(Clone, Copy)]
pub struct StateView<'a> {
    store: &'a dyn Store,
    /// Inside a batch: the batch and the command's position in it (the writes
    /// of the commands before it are not in the store yet).
    batch: Option<(&'a BatchState<'a>, usize)>,
    /// `None`: the newest version (an entry being applied: exactly the entries
    /// before it are in the store); `Some(i)`: the version at index `i`.
    at: Option<u64>,
    index: u64,
}

impl std::fmt::Debug for StateView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateView")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl<'a> StateView<'a> {
    /// The state before entry `index` is appended: the newest versions.
    pub(crate) fn before(store: &'a dyn Store, index: u64) -> StateView<'a> {
        StateView {
            store,
            batch: None,
            at: None,
            index,
        }
    }

    /// The state of command `pos` of `batch` (at log index `index`): the store
    /// and the writes of the batch's commands before it.
    pub(crate) fn in_batch(batch: &'a BatchState<'a>, pos: usize, index: u64) -> StateView<'a> {
        StateView {
            store: batch.store(),
            batch: Some((batch, pos)),
            at: None,
            index,
        }
    }

    /// The state at the applied index `applied`.
    pub(crate) fn applied(store: &'a dyn Store, applied: u64) -> StateView<'a> {
        StateView {
            store,
            batch: None,
            at: Some(applied),
            index: applied,
        }
    }

    /// The store under the view.
    pub(crate) fn store(&self) -> &'a dyn Store {
        self.store
    }

    /// The log index this view belongs to: the entry being applied, or the
    /// applied index a read is served at.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The value of `key`, or `None` if it is absent.
    ///
    /// # Errors
    ///
    /// The store's (a damaged record).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some((batch, pos)) = self.batch {
            return batch.get_before(pos, key);
        }
        match self.at {
            None => Ok(self.store.latest(key)?.and_then(|v| v.value)),
            Some(at) => self.store.get(key, at),
        }
    }
}
