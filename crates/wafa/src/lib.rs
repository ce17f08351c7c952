//! # wafa — a wear-leveling rotational fine-grained allocator (DAC'19)
//!
//! **Status: not implemented yet.** This crate is a placeholder so the workspace
//! layout is visible; it exports nothing.
//!
//! It will hold WAFA (seed `wafa-wear-leveling-allocator-dac19.txt`): 4 KiB pages of
//! 64 units of 64 B whose last unit holds the page metadata (bitmap, free-unit
//! count, max free segment, clock position), 64 buckets indexed by the max free
//! segment, Clockwise Best-Fit allocation, a DRAM metadata cache flushed to the
//! page after each allocation, a background reform pass, recovery by scanning page
//! metadata, and wear statistics. It will implement `pmem_core`'s
//! `PersistentAllocator` trait.
