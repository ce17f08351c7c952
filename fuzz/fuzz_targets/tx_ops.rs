//! Structure-aware: a sequence of transactions (words, objects, aborts, hash-map
//! and vector operations) decoded from the input, run on a simulated pool, crashed
//! at a fuzz-chosen point (or failed at a log site), reopened and compared with a
//! model, then checked for integrity and leaks. The logic lives in
//! `pmem_collections::fuzzing` so `crates/pmem-collections/tests/fuzz_corpus.rs`
//! runs the committed corpus through it.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = pmem_collections::fuzzing::run_ops(data);
});
