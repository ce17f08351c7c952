//! `list_recover` with the checksums a patch broke fixed first (pool header,
//! control block, page seals and `durable` words, every record's seeded checksum),
//! so mutations reach the checks behind them. The logic lives in
//! `raft_nvm::fuzzing::storage`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = raft_nvm::fuzzing::storage::list_open_resealed(data);
});
