//! # nvwa — an NVM-write-aware allocator, hybrid logging, and AMF
//!
//! **Status: not implemented yet.** This crate is a placeholder so the workspace
//! layout is visible; it exports nothing.
//!
//! It will hold the dual-use NVM allocator (seed `nvwa-dual-use-nvm-allocator-logging.txt`):
//! DRAM metadata with an append-only two-level allocation log in PM, hybrid
//! redo/undo logging with word and object hints, contiguity-aware page batches,
//! and adaptive memory fusion (seed `amf-adaptive-memory-fusion.txt`), which
//! integrates hidden PM sections into a volatile heap under memory pressure.
