//! Reads the input as an openraft-list snapshot file (magic, length-prefixed
//! postcard frames: position, chunks of records, end) and installs what parses
//! into a fresh list store: a typed error or a store holding every key's newest
//! record, never a panic, and no allocation its length does not bound (run with
//! `-malloc_limit_mb`). The logic lives in `openraft_list::fuzzing`, replayed by
//! `crates/openraft-list/tests/fuzz_snapshot.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = openraft_list::fuzzing::install_snapshot_bytes(data);
});
