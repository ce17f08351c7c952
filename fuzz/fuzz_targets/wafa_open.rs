//! Patches a valid WAFA heap's metadata and opens it: a read-only inspection must
//! never write, an open must return a typed error or a consistent heap on which
//! allocation and free work without handing a block out twice. The logic lives in
//! `wafa::fuzzing`, replayed by `crates/wafa/tests/fuzz_corpus.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wafa::fuzzing::open_patched(data);
});
