//! Fuzzed bytes over a page allocator's intent record and bitmap (optionally with
//! the intent's checksum resealed), opened and recovered: typed errors or
//! consistent accounting. The logic lives in `pmem_core::fuzzing::page_alloc` so
//! `crates/pmem-core/tests/fuzz_tx.rs` runs the committed corpus through it.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = pmem_core::fuzzing::page_alloc::open_patched(data);
});
