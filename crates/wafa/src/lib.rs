//! # wafa — a wear-leveling rotational fine-grained allocator (DAC'19)
//!
//! WAFA divides 4 KiB pages into 64 units of 64 B; the last unit of a divided page
//! holds its metadata (bitmap, free-unit count `C_FU`, maximum free segment `S_MS`,
//! clock position `S_FF`). Pages sit in 64 buckets by the size of their maximum free
//! segment. *Clockwise Best-Fit* (the paper's Algorithm 1) serves a request of `n`
//! units from the first page of the smallest non-empty bucket `>= n`, at the page's
//! clock position, then moves the clock past the allocation to the largest free
//! segment in the rest of the run and the page to the tail of that segment's bucket.
//! So allocation sweeps every unit of a page in turn, and pages take turns: writes
//! spread evenly over the cells. A free only updates the DRAM metadata cache; a
//! *reform* pass ([`ReformMode`]: a background daemon by default, after every 4,096
//! frees) refreshes the pages of buckets whose average free units exceed their index
//! (`TF_k.avg > k`), backs their caches up to media and moves them to their proper
//! buckets. A page's clock starts a new run only when the rest of its run is used
//! up, and a used-up page starts one only when free pages run low (under 1/8 of the
//! heap): until then fresh pages take the requests, so every unit is written once
//! before any is written twice. (The paper resets a reformed page's clock to its
//! largest segment; measured on its own workloads, that sends alloc/free cycles
//! back to the same units — see BENCHMARKS.md.) A request that finds no room anywhere
//! restarts every page at its largest segment before reporting `OutOfSpace`.
//! Requests above 63 units (4032 B) take whole pages.
//!
//! ## Crash semantics
//! Proven by the crash-simulator suites in `tests/crash.rs`:
//! * `alloc` is durable when it returns (one metadata line flushed, one fence; a
//!   fresh page also gets its kind byte, after its metadata). A crash never lets a
//!   unit of a completed allocation be handed out again. A crash *during* `alloc`
//!   may leave that allocation's units allocated with no one holding them: a leak of
//!   the in-flight allocation (use `alloc_publish` to avoid it).
//! * A small `free` is **not** durable by itself: it reaches media with the page's
//!   next allocation or reform, which write the page's whole cached bitmap. A crash
//!   loses the frees of each page since its last metadata write: those units stay
//!   allocated (a leak, never a double use). That is the whole leak bound: units
//!   freed since their page's last allocation or reform, plus the in-flight
//!   operation's.
//! * Whole-page `alloc` and `free` write the kind table with one fence and are
//!   durable on return; a crash during one leaves orphan tail pages, which `open`
//!   frees, or a shorter run of the in-flight block (leaked, or its free lost).
//! * `alloc_publish` (the `PersistentAllocator` trait) is crash-atomic through an
//!   intent record: after a crash the block is allocated and the slot points to it,
//!   or neither.
//! * `open` rebuilds the DRAM state from the kind table and the page bitmaps (the
//!   bitmap is one aligned 8-byte word, so it never tears; the other fields are
//!   recomputed), frees orphan tails and finishes an interrupted `alloc_publish`.
//!   Clock positions restart at each page's maximum segment.
//!
//! ## Threads
//! One lock guards the DRAM state; alloc and free each take it once. It is biased
//! towards the first thread that takes it (the *owner*), which enters with a plain
//! store and a compiler fence instead of a locked read-modify-write. Any other
//! thread takes a spin lock that yields between attempts and revokes the bias: an
//! active owner acknowledges at its next operation; an idle one is fenced with
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` (Linux; elsewhere, or where the
//! call is refused, the bias is never granted and every thread takes the spin
//! lock). The owner takes its bias back after 64 operations in a row with no other
//! thread. Two threads on one heap serialise on the lock (`benches/wafa_pair.rs`,
//! BENCHMARKS.md); the reform daemon holds it for one pass. The protocol is
//! checked by a loom model (`RUSTFLAGS="--cfg loom" cargo test -p wafa --release
//! --lib loom`) and a stress test.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod buckets;
mod error;
#[doc(hidden)] // The fuzz targets' bodies: not an API promise.
pub mod fuzzing;
mod heap;
mod inspect;
#[doc(hidden)] // On-media layout: public for the crash suites, not an API promise.
pub mod layout;
mod lock;
mod recover;
mod reform;
pub mod segment;
mod state;
pub mod wear;

pub use error::WafaError;
pub use heap::{ReformMode, Wafa, WafaOptions, WafaStats, MAX_SMALL};
pub use inspect::WafaSummary;

/// The crate README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
