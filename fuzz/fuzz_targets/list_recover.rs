//! Patches a valid list store (raft-nvm's persistent list) and opens it: a
//! read-only inspection must never write, an open must return a typed error or a
//! store whose records all read back, and a store that inspects cleanly must open
//! to the same log. The input also goes through the large-value table decoder.
//! The logic lives in `raft_nvm::fuzzing::storage`, replayed by
//! `crates/raft-nvm/tests/fuzz_list.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = raft_nvm::fuzzing::storage::list_open_patched(data);
});
