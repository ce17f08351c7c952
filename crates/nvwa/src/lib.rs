//! # nvwa — an NVM-write-aware allocator, hybrid logging, and AMF
//!
//! **Status: not implemented yet.** Built so far: the allocation log's record
//! format ([`record`]) and the log area threads append to ([`log`]). The
//! allocator, its recovery, CAA and AMF are not.
//!
//! It will hold the dual-use NVM allocator (seed `nvwa-dual-use-nvm-allocator-logging.txt`):
//! DRAM metadata with an append-only two-level allocation log in PM, hybrid
//! redo/undo logging with word and object hints, contiguity-aware page batches,
//! and adaptive memory fusion (seed `amf-adaptive-memory-fusion.txt`), which
//! integrates hidden PM sections into a volatile heap under memory pressure.

pub mod log;
pub mod record;
