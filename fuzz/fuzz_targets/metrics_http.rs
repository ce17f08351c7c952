//! One connection of the metrics listener fed the input (in memory, on a paused
//! clock): it must end by itself within its timeout, closed or silent client alike,
//! with an HTTP/1.x response or nothing; or, by the first byte's choice, the
//! Prometheus exposition parser: never a panic, allocation bounded.
//! The logic lives in `raft_nvm::fuzzing::wire` so `crates/raft-nvm/tests/fuzz_wire.rs`
//! runs the committed corpus through it on stable Rust.

#![no_main]

use libfuzzer_sys::fuzz_target;
use raft_nvm::fuzzing::wire::{self, CountingAlloc};

/// Counts allocations, so the body can bound them.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fuzz_target!(|data: &[u8]| {
    let _ = wire::metrics_http(data);
});
