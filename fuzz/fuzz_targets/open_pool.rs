//! Opens arbitrary bytes as a pool: read-write, read-only, page-allocator inspection
//! and checked reads must return errors, never panic, and never change the file.
//! The logic lives in `pmem_core::fuzzing` so `crates/pmem-core/tests/fuzz_corpus.rs`
//! runs the committed corpus through it on stable Rust.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = pmem_core::fuzzing::open_arbitrary_bytes(data);
});
