//! The built-in key-value commands as a [`StateMachine`], and the decision both
//! paths share.
//!
//! The node's own `SET`, `DEL` and `CAS` travel as native Raft commands (no
//! encoding on the hot path) and are decided by [`decide`] when appended;
//! [`KvMachine`] runs the same commands through the generic machine path (the
//! same [`Command`]s, encoded with postcard) and reaches the same decisions
//! through the same function. The
//! tests run one workload both ways and compare every reply and the final map.

use super::{Applied, MachineCall, MachineReply, StateMachine, StateView, Write};
use crate::consensus::raft::Command;
use crate::consensus::service::{KvReply, KvRequest};
use crate::storage::error::StoreError;
use crate::storage::store::Op;

/// What a key-value command does, decided against the state before its entry:
/// the operation the store keeps and the client's reply. `Command::Machine` is not
/// a key-value command and decides to nothing (the replica handles it).
pub(crate) fn decide<'c>(
    state: &StateView<'_>,
    cmd: &'c Command,
) -> Result<(Op<'c>, KvReply), StoreError> {
    if let Some(decided) = decide_blind(cmd) {
        return Ok(decided);
    }
    Ok(match cmd {
        Command::Delete { key } => {
            if state.get(key)?.is_some() {
                (Op::Delete { key }, KvReply::Deleted(true))
            } else {
                // Deleting an absent key changes nothing: no tombstone.
                (Op::Noop, KvReply::Deleted(false))
            }
        }
        Command::Cas { key, expected, new } => {
            if state.get(key)? == *expected {
                (Op::Put { key, value: new }, KvReply::Swapped(true))
            } else {
                (Op::Noop, KvReply::Swapped(false))
            }
        }
        // Decided by `decide_blind` above, or not a key-value command.
        _ => (Op::Noop, KvReply::Done),
    })
}

/// The decision of a command that reads no state (`SET`, a configuration, a
/// no-op), or `None` if it needs the state before it ([`decide`]). The replica
/// appends runs of such entries together ([`crate::storage::store::Store::append_batch`]).
pub(crate) fn decide_blind(cmd: &Command) -> Option<(Op<'_>, KvReply)> {
    Some(match cmd {
        Command::Put { key, value } => (Op::Put { key, value }, KvReply::Done),
        Command::Config { data } => (
            Op::Put {
                key: crate::consensus::raft::MEMBERSHIP_KEY,
                value: data,
            },
            KvReply::Done,
        ),
        Command::Noop => (Op::Noop, KvReply::Done),
        Command::Delete { .. } | Command::Cas { .. } | Command::Machine { .. } => return None,
    })
}

/// The replicated key-value map's `SET`, `DEL`, `CAS` and `GET` as a
/// [`StateMachine`]: the reference implementation of the trait.
///
/// The RESP front end parses these commands itself and sends them natively, so
/// [`StateMachine::parse`] accepts none; build calls with [`KvMachine::call`].
#[derive(Clone, Copy, Debug, Default)]
pub struct KvMachine;

impl KvMachine {
    /// The machine call doing what `req` does (`None` for `INFO` and custom calls).
    pub fn call(req: &KvRequest) -> Option<MachineCall> {
        let cmd = match req {
            KvRequest::Get { key } => return Some(MachineCall::Read(key.clone())),
            KvRequest::Set { key, value } => Command::Put {
                key: key.clone(),
                value: value.clone(),
            },
            KvRequest::Delete { key } => Command::Delete { key: key.clone() },
            KvRequest::Cas { key, expected, new } => Command::Cas {
                key: key.clone(),
                expected: expected.clone(),
                new: new.clone(),
            },
            KvRequest::Info
            | KvRequest::Machine(_)
            | KvRequest::TransferLeader { .. }
            | KvRequest::ChangeMembership(_)
            | KvRequest::ShowMembership => return None,
        };
        // Encoding into a vector fails only for types serde cannot express.
        postcard::to_allocvec(&cmd).ok().map(MachineCall::Write)
    }
}

impl StateMachine for KvMachine {
    fn name(&self) -> &str {
        "kv"
    }

    fn parse(&self, _args: &[Vec<u8>]) -> Option<Result<MachineCall, String>> {
        None
    }

    fn apply(&self, state: &StateView<'_>, command: &[u8]) -> Result<Applied, StoreError> {
        let cmd = match postcard::from_bytes::<Command>(command) {
            Ok(cmd @ (Command::Put { .. } | Command::Delete { .. } | Command::Cas { .. })) => cmd,
            _ => {
                return Ok(Applied::reply(MachineReply::Error(
                    "malformed key-value command".into(),
                )))
            }
        };
        let (op, reply) = decide(state, &cmd)?;
        let write = match op {
            Op::Put { key, value } => Some(Write::Put {
                key: key.to_vec(),
                value: value.to_vec(),
            }),
            Op::Delete { key } => Some(Write::Delete { key: key.to_vec() }),
            Op::Noop => None,
        };
        let reply = match reply {
            KvReply::Deleted(yes) | KvReply::Swapped(yes) => MachineReply::Integer(i64::from(yes)),
            _ => MachineReply::Ok,
        };
        Ok(Applied { write, reply })
    }

    fn query(&self, state: &StateView<'_>, key: &[u8]) -> Result<MachineReply, StoreError> {
        Ok(state
            .get(key)?
            .map_or(MachineReply::Nil, MachineReply::Bulk))
    }
}
