//! openraft's own storage conformance suite (`openraft::testing::log::Suite`) on
//! the in-memory store of `examples/common/openraft_mem.rs`, the no-durability
//! baseline of `openraft_bench`: the baseline must be a correct store, or its
//! figures would not bound anything.

#[path = "../examples/common/openraft_mem.rs"]
mod openraft_mem;

use std::collections::BTreeMap;

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::{EntryPayload, StorageError};
use openraft_list::{Entry, Request, Response, TypeConfig};
use openraft_mem::{MemLog, MemState, MemStateMachine};
use serde::{Deserialize, Serialize};

/// A key-value state, as `openraft_bench`'s.
#[derive(Default, Serialize, Deserialize)]
struct Kv(BTreeMap<Vec<u8>, Vec<u8>>);

impl MemState<TypeConfig> for Kv {
    fn apply(&mut self, entry: &Entry) -> Response {
        let previous = match &entry.payload {
            EntryPayload::Normal(Request::Set { key, value }) => {
                self.0.insert(key.clone(), value.clone())
            }
            EntryPayload::Normal(Request::Delete { key }) => self.0.remove(key),
            _ => None,
        };
        Response { previous }
    }
}

struct Builder;

impl StoreBuilder<TypeConfig, MemLog<TypeConfig>, MemStateMachine<TypeConfig, Kv>> for Builder {
    async fn build(
        &self,
    ) -> Result<((), MemLog<TypeConfig>, MemStateMachine<TypeConfig, Kv>), StorageError<TypeConfig>>
    {
        Ok(((), MemLog::default(), MemStateMachine::default()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memstore_passes_openraft_suite() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(Builder).await
}
