//! `defrag_open` with the checksums a patch broke fixed first (pool header,
//! allocator header, type table, every plan), so mutations reach the checks behind
//! them. The logic lives in `pmem_defrag::fuzzing`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = pmem_defrag::fuzzing::open_patched_resealed(data);
});
