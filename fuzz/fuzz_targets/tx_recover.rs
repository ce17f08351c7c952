//! Fuzzed bytes over a transaction heap's log (optionally with its checksums
//! resealed), inspected read-only and recovered: typed errors or a consistent
//! heap, and no write by the read-only inspection. The logic lives in
//! `pmem_core::fuzzing::tx_recover` so `crates/pmem-core/tests/fuzz_tx.rs` runs the
//! committed corpus through it on stable Rust.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = pmem_core::fuzzing::tx_recover::recover_patched(data);
});
