//! A state machine over your own command and response types ([`TypedMachine`]),
//! and the adapter ([`Typed`]) that runs it through the replica as a
//! [`StateMachine`].
//!
//! Commands, responses, queries and answers are serde types, encoded with
//! postcard (compact, and already what the nodes' frames use). A command is one
//! Raft entry holding its encoding; the replica applies runs of consecutive
//! entries as one batch ([`BatchState`] says how batches are formed). The
//! machine's state lives in the replicated map, as for every [`StateMachine`]:
//! it reads keys through the batch and records at most one write per command,
//! so compaction, recovery and snapshots need nothing from it.
//!
//! Apply is deterministic by contract: each command's response and write must
//! follow from the map before it (what [`BatchState::get`] shows) and the
//! command alone: no clocks, no randomness, no state of the machine's own, and
//! no dependence on how the commands were grouped into batches, which differs
//! between the leader (its proposals of one round) and a follower (the entries
//! of one message). Every member runs the same machine: a command whose bytes
//! do not decode as [`TypedMachine::Command`] (another machine's) changes
//! nothing and answers [`Answer::Undecodable`] on every replica alike.
//!
//! On a node, `Node::client_write` and `Node::client_read` (feature `server`)
//! take and return the typed values.
//!
//! ```
//! use raft_nvm::machine::{BatchState, StateView, TypedMachine};
//! use raft_nvm::StoreError;
//! use serde::{Deserialize, Serialize};
//!
//! /// Adds to a named counter, or resets it.
//! #[derive(Debug, Serialize, Deserialize)]
//! enum Op {
//!     Add { name: String, by: i64 },
//!     Reset { name: String },
//! }
//!
//! /// Counters kept in the replicated map as 8 little-endian bytes each.
//! #[derive(Debug)]
//! struct Counters;
//!
//! fn count(bytes: Option<Vec<u8>>) -> i64 {
//!     bytes.and_then(|b| b.try_into().ok()).map_or(0, i64::from_le_bytes)
//! }
//!
//! impl TypedMachine for Counters {
//!     type Command = Op;
//!     type Response = i64; // the counter's new value
//!     type Query = String; // a counter's name
//!     type Answer = i64;
//!
//!     fn name(&self) -> &str {
//!         "counters"
//!     }
//!
//!     fn apply(&self, state: &mut BatchState<'_>, batch: &[Op]) -> Result<Vec<i64>, StoreError> {
//!         let mut out = Vec::with_capacity(batch.len());
//!         for (pos, op) in batch.iter().enumerate() {
//!             let (name, next) = match op {
//!                 Op::Add { name, by } => (name, count(state.get(name.as_bytes())?).wrapping_add(*by)),
//!                 Op::Reset { name } => (name, 0),
//!             };
//!             // Later commands of the batch see this write through `get`.
//!             state.put(pos, name.as_bytes(), next.to_le_bytes());
//!             out.push(next);
//!         }
//!         Ok(out)
//!     }
//!
//!     fn query(&self, state: &StateView<'_>, name: &String) -> Result<i64, StoreError> {
//!         Ok(count(state.get(name.as_bytes())?))
//!     }
//! }
//! ```

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::storage::error::StoreError;

use super::{Applied, BatchState, MachineCall, MachineReply, StateMachine, StateView};

/// A state machine over your own command and response types (see the module
/// docs). Run it on a node with [`Typed`] (`NodeBuilder::state_machine(Typed::new(m))`).
pub trait TypedMachine: Send + Sync + std::fmt::Debug + 'static {
    /// A write: replicated through the log, then applied on every replica.
    type Command: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What a write answers.
    type Response: Serialize + DeserializeOwned + Send + 'static;
    /// A read: answered by [`TypedMachine::query`] after the leader confirmed it
    /// leads (a read-index round, or its lease).
    type Query: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What a read answers.
    type Answer: Serialize + DeserializeOwned + Send + 'static;

    /// The machine's name, shown in `INFO` (`state_machine:`).
    fn name(&self) -> &str;

    /// Applies `batch`, consecutive commands of the log in log order: records
    /// command `i`'s write, if any, with `state.put(i, ..)` or `state.delete(i,
    /// ..)` and returns one response per command, in order. `state.get` sees
    /// the map after the writes recorded so far. Must be deterministic (see the
    /// module docs).
    ///
    /// # Errors
    ///
    /// Only the store's errors from `state`: the replica stops.
    fn apply(
        &self,
        state: &mut BatchState<'_>,
        batch: &[Self::Command],
    ) -> Result<Vec<Self::Response>, StoreError>;

    /// Answers `query` against `state` (the map at the applied index).
    ///
    /// # Errors
    ///
    /// Only the store's errors from `state`: the replica stops.
    fn query(&self, state: &StateView<'_>, query: &Self::Query)
        -> Result<Self::Answer, StoreError>;
}

/// Encoding or decoding a typed value failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TypedError {
    /// A value could not be encoded (serde could not express it in postcard,
    /// e.g. a sequence of unknown length).
    #[error("cannot encode the {what}: {reason}")]
    Encode {
        /// What was encoded (`command`, `response`, ...).
        what: &'static str,
        /// postcard's reason.
        reason: String,
    },
    /// Bytes do not decode as the expected type: another machine's, or damaged.
    #[error("the {what} does not decode as {ty}: {reason}")]
    Decode {
        /// What was decoded (`command`, `response`, ...).
        what: &'static str,
        /// The type it should have been.
        ty: &'static str,
        /// postcard's reason.
        reason: String,
    },
}

/// Encodes `value` (the `what` names it in the error).
///
/// # Errors
///
/// [`TypedError::Encode`].
pub fn encode<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<Vec<u8>, TypedError> {
    postcard::to_allocvec(value).map_err(|e| TypedError::Encode {
        what,
        reason: e.to_string(),
    })
}

/// Decodes a `T` from `bytes` (the `what` names it in the error).
///
/// # Errors
///
/// [`TypedError::Decode`].
pub fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, TypedError> {
    postcard::from_bytes(bytes).map_err(|e| TypedError::Decode {
        what,
        ty: std::any::type_name::<T>(),
        reason: e.to_string(),
    })
}

/// What a typed machine's entry or read answers, as the replica carries it
/// (postcard-encoded in a [`MachineReply::Bulk`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer<R> {
    /// The machine's response.
    Done(R),
    /// The command or query did not decode as the machine's type: nothing was
    /// done. The text is the decoding error.
    Undecodable(String),
}

/// Runs a [`TypedMachine`] as a [`StateMachine`]: commands and queries arrive
/// as postcard bytes and leave as [`Answer`]s in [`MachineReply::Bulk`]. RESP
/// clients cannot send typed commands ([`StateMachine::parse`] accepts none); the
/// built-in key-value commands keep working beside it.
#[derive(Debug)]
pub struct Typed<M>(M);

impl<M: TypedMachine> Typed<M> {
    /// Wraps `machine`.
    pub fn new(machine: M) -> Self {
        Typed(machine)
    }

    /// The machine.
    pub fn machine(&self) -> &M {
        &self.0
    }

    /// The reply carrying `answer`.
    fn reply<R: Serialize>(answer: &Answer<R>) -> MachineReply {
        match encode("response", answer) {
            Ok(bytes) => MachineReply::Bulk(bytes),
            Err(e) => MachineReply::Error(e.to_string()),
        }
    }

    /// The reply of a command or query that did not decode.
    fn undecodable(e: &TypedError) -> MachineReply {
        Self::reply(&Answer::<()>::Undecodable(e.to_string()))
    }
}

impl<M: TypedMachine> StateMachine for Typed<M> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn parse(&self, _args: &[Vec<u8>]) -> Option<Result<MachineCall, String>> {
        None
    }

    fn apply(&self, state: &StateView<'_>, command: &[u8]) -> Result<Applied, StoreError> {
        // The replica calls `apply_batch`; this serves callers of the
        // one-at-a-time method (a batch of one, its write checked by the caller).
        let mut batch = BatchState::over(*state, 1, usize::MAX);
        let reply = self.apply_batch(&mut batch, &[command])?.pop();
        Ok(Applied {
            write: batch.take_write(0),
            reply: batch.reply(0, reply),
        })
    }

    fn apply_batch(
        &self,
        state: &mut BatchState<'_>,
        commands: &[&[u8]],
    ) -> Result<Vec<MachineReply>, StoreError> {
        let mut replies = Vec::with_capacity(commands.len());
        let mut pos = 0;
        while pos < commands.len() {
            // The longest run of commands from `pos` that decode.
            let mut run = Vec::new();
            let mut failed = None;
            for bytes in &commands[pos..] {
                match decode::<M::Command>("command", bytes) {
                    Ok(cmd) => run.push(cmd),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if !run.is_empty() {
                state.set_window(pos, run.len());
                let responses = self.0.apply(state, &run);
                state.set_window(0, commands.len());
                let mut responses = responses?.into_iter();
                for at in pos..pos + run.len() {
                    let reply = responses.next().map(|r| Self::reply(&Answer::Done(r)));
                    replies.push(state.reply(at, reply));
                }
                pos += run.len();
            }
            if let Some(e) = failed {
                replies.push(Self::undecodable(&e));
                pos += 1;
            }
        }
        Ok(replies)
    }

    fn query(&self, state: &StateView<'_>, query: &[u8]) -> Result<MachineReply, StoreError> {
        Ok(match decode::<M::Query>("query", query) {
            Ok(q) => Self::reply(&Answer::Done(self.0.query(state, &q)?)),
            Err(e) => Self::undecodable(&e),
        })
    }
}
