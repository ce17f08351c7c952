//! Structure-aware: NVWA alloc / publish / free / checkpoint sequences decoded
//! from the input, run on a simulated pool, crashed at a fuzz-chosen point and
//! reopened: the slots must equal the model (the in-flight operation whole or
//! not at all), every block keep its contents, and nothing leak beyond the one
//! block an in-flight plain alloc or free may hold. The logic lives in
//! `nvwa::fuzzing::ops` so `crates/nvwa/tests/fuzz_corpus.rs` runs the committed
//! corpus through it.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nvwa::fuzzing::ops::run_ops(data);
});
