//! Patches a valid defragmenting heap's metadata and opens it: a read-only
//! inspection must never write, an open must return a typed error or a working heap
//! with no compaction left. The logic lives in `pmem_defrag::fuzzing` so
//! `crates/defrag/tests/fuzz_corpus.rs` runs the committed corpus through it.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = pmem_defrag::fuzzing::open_patched(data);
});
