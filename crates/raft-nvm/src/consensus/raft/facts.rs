//! The facts a node restarts from, read from its store.

use crate::storage::store::{HardState, Store};

use super::error::RaftError;
use super::membership::{Membership, MEMBERSHIP_KEY};

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
    /// The last configuration entry in the store: its index, term and
    /// configuration (`None`: none, the node's starting configuration holds).
    pub membership: Option<(u64, u64, Membership)>,
    /// The configuration in force before that entry (`None`: the starting one).
    pub membership_before: Option<Membership>,
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
        let (membership, membership_before) = match store
            .latest(MEMBERSHIP_KEY)
            .map_err(|e| stored_config_error("read", &e))?
        {
            Some(crate::storage::store::Version {
                index,
                value: Some(value),
            }) => {
                let current =
                    Membership::decode(&value).map_err(|e| stored_config_error("decode", &e))?;
                let before = stored_membership(store, index.saturating_sub(1))?;
                let term = store.term_at(index).unwrap_or(0);
                (Some((index, term, current)), before)
            }
            _ => (None, None),
        };
        Ok(StoreFacts {
            membership,
            membership_before,
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

/// The configuration the store holds at `at` (the value of [`MEMBERSHIP_KEY`]
/// there; `None`: none was ever stored).
pub fn stored_membership(store: &dyn Store, at: u64) -> Result<Option<Membership>, RaftError> {
    store
        .get(MEMBERSHIP_KEY, at)
        .map_err(|e| stored_config_error("read", &e))?
        .map(|v| Membership::decode(&v))
        .transpose()
        .map_err(|e| stored_config_error("decode", &e))
}

/// A failure to `what` (read or decode) the stored configuration.
fn stored_config_error(what: &str, e: &dyn std::fmt::Display) -> RaftError {
    RaftError::Facts(format!("the stored configuration: {what}: {e}"))
}
