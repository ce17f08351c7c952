//! Support for fuzzing (hidden from the documentation; not a stable API).
//!
//! Each submodule holds the bodies of cargo-fuzz targets in `fuzz/`; the target
//! files only call them, and ordinary tests replay the committed corpus
//! (`fuzz/corpus/<target>/`) through the same functions, so CI exercises them on
//! stable Rust without a fuzzer.
//!
//! - [`wire`] (feature `server`): the wire formats a hostile client or peer
//!   controls — RESP requests and replies, transport frames — and the postcard
//!   decoders of membership entries and typed machine commands.

#[cfg(feature = "server")]
pub mod wire;
