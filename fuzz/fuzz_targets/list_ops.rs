//! Structure-aware: a list-store workload (puts, large values, deletes, batches,
//! truncations, syncs, compactions, hard states) decoded from the input with
//! `arbitrary`, run on a crash-simulated pool, cut at an input-chosen crash point
//! and in-flight choice, recovered and compared with a model (prefix of the log
//! holding every synced record, hard state, page partition, store keeps working).
//! The logic lives in `raft_nvm::fuzzing::storage::list_ops`, replayed by
//! `crates/raft-nvm/tests/fuzz_list_ops.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = raft_nvm::fuzzing::storage::list_ops::list_ops(data);
});
