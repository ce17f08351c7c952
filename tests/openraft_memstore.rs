//! openraft's own storage conformance suite (`openraft::testing::log::Suite`) on
//! the in-memory store of `examples/common/openraft_mem.rs`, the no-durability
//! baseline of `openraft_bench`: the baseline must be a correct store, or its
//! figures would not bound anything.

#[path = "../examples/common/openraft_mem.rs"]
mod openraft_mem;

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use openraft_list::TypeConfig;
use openraft_mem::{KvState, MemLog, MemStateMachine};

struct Builder;

impl StoreBuilder<TypeConfig, MemLog<TypeConfig>, MemStateMachine<TypeConfig, KvState>>
    for Builder
{
    async fn build(
        &self,
    ) -> Result<
        ((), MemLog<TypeConfig>, MemStateMachine<TypeConfig, KvState>),
        StorageError<TypeConfig>,
    > {
        Ok(((), MemLog::default(), MemStateMachine::default()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memstore_passes_openraft_suite() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(Builder).await
}
