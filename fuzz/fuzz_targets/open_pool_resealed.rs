//! As `open_pool`, but the header checksums (pool header, page-allocator header)
//! are fixed up first, so mutations reach the consistency checks behind them.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = pmem_core::fuzzing::open_resealed_bytes(data);
});
