//! The persistent-allocator trait every allocator in pmkit implements, so wafa, nvwa
//! and the simple [`PageAllocator`] are interchangeable in benchmarks and in the
//! crates that store data (raft-nvm, defrag).
//!
//! Blocks are named by [`PPtr<u8>`] offsets. `free` takes the size, as Rust's
//! `dealloc(ptr, layout)` does, so allocators need no per-block size header.
//! [`PersistentAllocator::alloc_publish`] is the crash-safe path: after a crash
//! either the block is allocated *and* the slot points to it, or neither happened;
//! nothing leaks. Plain `alloc` followed by a crash before the caller links the block
//! may leak it; each allocator documents exactly what it leaks.

mod page;

pub use page::{PageAllocStats, PageAllocator};

use crate::ptr::{AtomicPPtr, PPtr};
use crate::{Pool, PoolError};

/// Errors from persistent allocators.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AllocError {
    /// No free space large enough.
    #[error("out of space: cannot allocate {requested} bytes")]
    OutOfSpace {
        /// Bytes requested.
        requested: u64,
    },
    /// Zero, or larger than the allocator could ever serve.
    #[error("invalid allocation size {size}")]
    InvalidSize {
        /// Bytes requested.
        size: u64,
    },
    /// `free` of something that is not a live block of that size.
    #[error("invalid free of offset {offset} size {size}: {reason}")]
    InvalidFree {
        /// Offset passed.
        offset: u64,
        /// Size passed.
        size: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// The slot passed to `alloc_publish` is not an aligned 8-byte word of the pool
    /// outside the allocator's metadata.
    #[error("invalid publication slot at offset {offset}: {reason}")]
    InvalidSlot {
        /// Slot offset.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// No allocator of this kind was ever formatted at this offset (no magic).
    #[error("no allocator is formatted at offset {offset}")]
    NotFormatted {
        /// Where the allocator's header was looked for.
        offset: u64,
    },
    /// The allocator's on-media metadata is inconsistent.
    #[error("allocator metadata: {reason}")]
    Corrupt {
        /// What is wrong.
        reason: String,
    },
    /// The pool failed (bounds, read-only, msync ...).
    #[error(transparent)]
    Pool(#[from] PoolError),
}

/// Checks a publication slot for `alloc_publish`: a non-null, 8-byte aligned
/// offset whose 8 bytes lie in the pool and outside the allocator's `metadata`
/// range. Allocators add their own rules after it.
pub fn check_publication_slot(
    pool: &Pool,
    slot: u64,
    metadata: std::ops::Range<u64>,
) -> Result<(), AllocError> {
    let bad = |reason| {
        Err(AllocError::InvalidSlot {
            offset: slot,
            reason,
        })
    };
    if slot == 0 || !slot.is_multiple_of(8) {
        return bad("not a non-null 8-byte aligned offset");
    }
    if slot.checked_add(8).is_none_or(|e| e > pool.len()) {
        return bad("outside the pool");
    }
    if metadata.contains(&slot) {
        return bad("inside the allocator's metadata");
    }
    Ok(())
}

/// A persistent allocator over (part of) a [`Pool`].
///
/// # Safety
/// Implementations promise that a block returned by `alloc` or `alloc_publish` lies
/// inside the pool, is aligned to [`PersistentAllocator::alignment`], and overlaps
/// neither another live block nor the allocator's own metadata, in this run and after
/// any crash and recovery.
pub unsafe trait PersistentAllocator: Send + Sync {
    /// A short name for reports (`page`, `wafa`, `nvwa`, ...).
    fn name(&self) -> &'static str;

    /// The pool the blocks live in.
    fn pool(&self) -> &Pool;

    /// The alignment of every block (a power of two, at least 8).
    fn alignment(&self) -> u64;

    /// Allocates `size` bytes. The allocation is durable when this returns; the
    /// block's contents are unspecified.
    fn alloc(&self, size: u64) -> Result<PPtr<u8>, AllocError>;

    /// Frees a block of `size` bytes (the size passed to `alloc`). Durable on return.
    ///
    /// # Safety
    /// No reference into the block may outlive this call, and the block must not be
    /// used afterwards (it can be handed out again).
    unsafe fn free(&self, ptr: PPtr<u8>, size: u64) -> Result<(), AllocError>;

    /// Allocates `size` bytes, lets `init` fill them, persists them, and publishes
    /// the block's offset into `slot`, crash-atomically: after a crash at any point,
    /// recovery leaves either the block allocated with `slot` pointing to it, or the
    /// block free with `slot` unchanged.
    ///
    /// # Safety
    /// While this runs, nothing else may access the slot's 8 bytes except through
    /// [`AtomicPPtr`] references.
    unsafe fn alloc_publish(
        &self,
        size: u64,
        slot: PPtr<AtomicPPtr<u8>>,
        init: &mut dyn FnMut(&mut [u8]),
    ) -> Result<PPtr<u8>, AllocError>;
}
