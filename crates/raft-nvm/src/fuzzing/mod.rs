//! Support for fuzzing (hidden from the documentation; not a stable API): the
//! bodies of the cargo-fuzz targets in `fuzz/`, one module per area, so the
//! crate's ordinary tests replay the committed corpora through the same code.

pub mod storage;
