//! Membership entries and the typed machine's postcard decoder: typed errors,
//! canonical re-encoding of a valid entry, allocation bounded by the length.
//! The logic lives in `raft_nvm::fuzzing::wire` so `crates/raft-nvm/tests/fuzz_wire.rs`
//! runs the committed corpus through it on stable Rust.

#![no_main]

use libfuzzer_sys::fuzz_target;
use raft_nvm::fuzzing::wire::{self, CountingAlloc};

/// Counts allocations, so the body can bound them.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fuzz_target!(|data: &[u8]| {
    let _ = wire::membership_decode(data);
});
