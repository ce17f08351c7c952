//! The facts a node restarts from, read from its store.

use crate::store::{HardState, Store};

use super::error::RaftError;

/// What the core needs from the store to restart. Its DRAM window starts with the
/// tail's terms only: a restarted leader reads the commands back from the store
/// when a follower needs them ([`super::LogRead`]).
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
    /// The store's durable index.
    pub durable_index: u64,
}

impl StoreFacts {
    /// Reads the facts from `store`.
    pub fn from_store(store: &dyn Store) -> Result<StoreFacts, RaftError> {
        let applied = store.applied();
        let last = store.last_index();
        let tail_terms = store.terms(applied + 1, last).ok_or_else(|| {
            RaftError::Facts(format!(
                "store lacks a term among entries {}..={last}",
                applied + 1
            ))
        })?;
        Ok(StoreFacts {
            hard_state: store.hard_state(),
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
