//! Fuzzed bytes over an NVWA heap's header, active word and allocation log,
//! inspected read-only and opened (log replay): typed errors or a heap whose live
//! blocks are inside it and disjoint. The logic lives in `nvwa::fuzzing` so
//! `crates/nvwa/tests/fuzz_corpus.rs` runs the committed corpus through it.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nvwa::fuzzing::open_patched(data);
});
