//! `wafa_open` with the region header's and an armed intent's checksums fixed
//! first, so mutations reach the checks behind them. The logic lives in
//! `wafa::fuzzing`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wafa::fuzzing::open_patched_resealed(data);
});
