//! Support for fuzzing (hidden from the documentation; not a stable API).
//!
//! Each submodule holds the bodies of cargo-fuzz targets in `fuzz/`; the target
//! files only call them, and ordinary tests replay the committed corpus
//! (`fuzz/corpus/<target>/`) through the same functions, so CI exercises them on
//! stable Rust without a fuzzer.
//!
//! - [`storage`]: the on-media formats — the persistent list's recovery, its
//!   large-value tables, the WAL's files — and crash-cut list workloads.
//! - [`wire`] (feature `server`): the wire formats a hostile client or peer
//!   controls — RESP requests and replies, transport frames — and the postcard
//!   decoders of membership entries and typed machine commands.

pub mod storage;
#[cfg(feature = "server")]
pub mod wire;
