//! Cuts and patches a valid WAL store directory (raft-nvm's baseline engine) and
//! opens it: a typed error or a prefix of the log holding every acknowledged
//! entry, never a panic. The logic lives in `raft_nvm::fuzzing::storage::wal`,
//! replayed by `crates/raft-nvm/tests/fuzz_wal.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = raft_nvm::fuzzing::storage::wal::wal_read(data);
});
