//! The RESP request decoder fed the input whole and in fuzz-chosen chunks (same
//! requests, same error), prefixes asking for more, allocation bounded by the bytes
//! received, the command parser on each request, and the client's reply decoder.
//! The logic lives in `raft_nvm::fuzzing::wire` so `crates/raft-nvm/tests/fuzz_wire.rs`
//! runs the committed corpus through it on stable Rust.

#![no_main]

use libfuzzer_sys::fuzz_target;
use raft_nvm::fuzzing::wire::{self, CountingAlloc};

/// Counts allocations, so the body can bound them.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fuzz_target!(|data: &[u8]| {
    let _ = wire::resp_decode(data);
});
