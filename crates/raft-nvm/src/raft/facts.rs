//! The facts a node restarts from, read from its store.

use crate::store::{HardState, OwnedOp, Store};

use super::error::RaftError;
use super::message::Command;

/// What the core needs from the store to restart (its DRAM window starts empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreFacts {
    /// The durable hard state.
    pub hard_state: HardState,
    /// The commit floor: the store's applied index (everything at or below it is
    /// committed).
    pub applied: u64,
    /// The term of `applied`, if the store still knows it.
    pub applied_term: Option<u64>,
    /// The terms of the entries `applied + 1 ..= last index`, in order.
    pub tail_terms: Vec<u64>,
    /// The commands of those entries where the store still has them (same order;
    /// missing or `None`: known by term only). With them a restarted leader can
    /// re-send its tail instead of falling back to a snapshot.
    pub tail_cmds: Vec<Option<Command>>,
    /// The store's durable index.
    pub durable_index: u64,
}

impl StoreFacts {
    /// Reads the facts from `store`.
    pub fn from_store(store: &dyn Store) -> Result<StoreFacts, RaftError> {
        let applied = store.applied();
        let last = store.last_index();
        let tail_terms = (applied + 1..=last)
            .map(|i| {
                store
                    .term_at(i)
                    .ok_or_else(|| RaftError::Facts(format!("store has no term for entry {i}")))
            })
            .collect::<Result<Vec<u64>, RaftError>>()?;
        let tail_cmds = (applied + 1..=last)
            .map(|i| {
                Ok(store
                    .entry(i)
                    .map_err(|e| RaftError::Facts(format!("entry {i}: {e}")))?
                    .map(|e| match e.op {
                        OwnedOp::Put { key, value } => Command::Put { key, value },
                        OwnedOp::Delete { key } => Command::Delete { key },
                        OwnedOp::Noop => Command::Noop,
                    }))
            })
            .collect::<Result<Vec<Option<Command>>, RaftError>>()?;
        Ok(StoreFacts {
            hard_state: store.hard_state(),
            tail_cmds,
            applied,
            applied_term: if applied == 0 {
                Some(0)
            } else {
                store.term_at(applied)
            },
            tail_terms,
            durable_index: store.durable_index(),
        })
    }

    /// The last index these facts describe.
    pub fn last_index(&self) -> u64 {
        self.applied + self.tail_terms.len() as u64
    }
}
