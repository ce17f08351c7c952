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
//!
//! Beyond these, the trait has operations not every allocator offers; their default
//! implementations say so with [`AllocError::Unsupported`] rather than pretend:
//!
//! * [`PersistentAllocator::for_each_live_block`]: every live block with its size
//!   (for tracers and defragmenters);
//! * [`PersistentAllocator::usable_size`]: the real capacity of a block (the default
//!   is the size asked for, which is always usable);
//! * [`PersistentAllocator::alloc_publish_if`]: `alloc_publish` that stores into the
//!   slot only if it still holds an expected value (compare-and-publish), with a
//!   recovery that can never overwrite a later update of the slot;
//! * [`PersistentAllocator::free_unpublish`]: clear a slot and free the block it
//!   points to as one crash-atomic step;
//! * the transactional operations [`PersistentAllocator::tx_reserve`],
//!   [`PersistentAllocator::tx_check_live`], [`PersistentAllocator::tx_mark`] and
//!   [`PersistentAllocator::tx_release`]: hold a block in DRAM, then mark it
//!   allocated or free on media without a fence of the allocator's own, so a
//!   transaction log (`pmem_core::tx`) pays one fence for all its allocations.
//!
//! [`PageAllocator`] implements all of them; `wafa::Wafa` uses the defaults for
//! `for_each_live_block`, `alloc_publish_if`, `free_unpublish` and the
//! transactional operations (so it cannot serve `tx` transactions yet).

// An on-media record shared by the allocators that publish: not an API promise.
#[doc(hidden)]
pub mod intent;
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
    /// The allocator does not implement this operation (a default method of
    /// [`PersistentAllocator`]).
    #[error("the {allocator} allocator does not support {op}")]
    Unsupported {
        /// The allocator's [`PersistentAllocator::name`].
        allocator: &'static str,
        /// The operation.
        op: &'static str,
    },
    /// `alloc_publish_if` or `free_unpublish` found the slot holding another value
    /// than expected; nothing was changed.
    #[error("slot at offset {slot} holds {found:#x}, expected {expected:#x}")]
    SlotMismatch {
        /// Slot offset.
        slot: u64,
        /// The value the caller expected.
        expected: u64,
        /// The value found.
        found: u64,
    },
    /// The allocator's metadata is of an on-media format version this build does
    /// not read.
    #[error("allocator at offset {offset} has format version {found}; this build reads version {supported}")]
    UnsupportedVersion {
        /// Where the allocator's header is.
        offset: u64,
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The pool failed (bounds, read-only, msync ...).
    #[error(transparent)]
    Pool(#[from] PoolError),
}

/// Checks a publication slot for `alloc_publish`: a non-null, 8-byte aligned
/// offset whose 8 bytes lie in the pool, after the pool header, and outside the
/// allocator's `metadata` range. Allocators add their own rules after it.
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
    if slot < crate::pool::header::HEADER_AREA {
        return bad("inside the pool header");
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
    /// [`AtomicPPtr`] references, and nothing else may store to them: recovery after a
    /// crash during the call redoes the store unconditionally, which would overwrite
    /// a concurrent update (use [`PersistentAllocator::alloc_publish_if`] to publish
    /// only over an expected value).
    unsafe fn alloc_publish(
        &self,
        size: u64,
        slot: PPtr<AtomicPPtr<u8>>,
        init: &mut dyn FnMut(&mut [u8]),
    ) -> Result<PPtr<u8>, AllocError>;

    /// Calls `f(block, size)` for every live block, in address order, where `size` is
    /// the block's capacity ([`PersistentAllocator::usable_size`]). Blocks allocated
    /// or freed concurrently may or may not be reported. `f` may call the allocator.
    ///
    /// Crash semantics: after recovery the enumeration reports exactly the blocks
    /// recovery left allocated: every published block of a completed
    /// `alloc_publish`/`alloc_publish_if`, none freed by a completed `free` or
    /// `free_unpublish`, plus whatever the allocator documents it may leak.
    ///
    /// The default returns [`AllocError::Unsupported`].
    fn for_each_live_block(&self, f: &mut dyn FnMut(PPtr<u8>, u64)) -> Result<(), AllocError> {
        let _ = f;
        Err(AllocError::Unsupported {
            allocator: self.name(),
            op: "for_each_live_block",
        })
    }

    /// The pool range of the allocator's own metadata (headers, bitmaps, logs),
    /// if it is one range: a transaction log's recovery refuses records that would
    /// write there (only corrupt media make one). The default, `None`, says
    /// nothing.
    fn metadata_range(&self) -> Option<std::ops::Range<u64>> {
        None
    }

    /// The capacity of the live block `ptr` allocated with `size` bytes: at least
    /// `size`; writing up to that many bytes is within the block. The default returns
    /// `size`, which is always usable.
    fn usable_size(&self, ptr: PPtr<u8>, size: u64) -> u64 {
        let _ = ptr;
        size
    }

    /// Like [`PersistentAllocator::alloc_publish`], but publishes only if the slot
    /// still holds `expected` (compare-and-publish): allocates `size` bytes, lets
    /// `init` fill them, persists them, and stores the block into `slot` if it holds
    /// `expected`, else frees the block and returns [`AllocError::SlotMismatch`].
    ///
    /// Crash semantics: after a crash at any point, recovery leaves either the block
    /// allocated with `slot` pointing to it, or the block free with `slot` unchanged;
    /// nothing leaks. Recovery never overwrites a later update of the slot (even one
    /// that stored `expected` again): the operation's redo record is durably retired
    /// before the call returns, and no one else stores to the slot while it runs.
    ///
    /// The default returns [`AllocError::Unsupported`].
    ///
    /// # Safety
    /// While this runs, nothing may store to the slot's 8 bytes except this
    /// allocator's own `alloc_publish_if`/`free_unpublish` (which it serialises);
    /// reads through [`AtomicPPtr`] references are fine.
    unsafe fn alloc_publish_if(
        &self,
        size: u64,
        slot: PPtr<AtomicPPtr<u8>>,
        expected: PPtr<u8>,
        init: &mut dyn FnMut(&mut [u8]),
    ) -> Result<PPtr<u8>, AllocError> {
        let _ = (size, slot, expected, init);
        Err(AllocError::Unsupported {
            allocator: self.name(),
            op: "alloc_publish_if",
        })
    }

    /// Clears `slot` (which must point to `block`) and frees `block` of `size` bytes,
    /// as one crash-atomic step: after a crash at any point, recovery leaves either
    /// the slot pointing to the still-allocated block, or the slot null and the block
    /// free. Nothing leaks and the slot never points to a free block. If the slot
    /// does not hold `block`, nothing changes and [`AllocError::SlotMismatch`] is
    /// returned. Durable on return.
    ///
    /// The default returns [`AllocError::Unsupported`].
    ///
    /// # Safety
    /// As for [`PersistentAllocator::free`] (no reference into the block outlives the
    /// call), and as for [`PersistentAllocator::alloc_publish_if`] for the slot.
    unsafe fn free_unpublish(
        &self,
        slot: PPtr<AtomicPPtr<u8>>,
        block: PPtr<u8>,
        size: u64,
    ) -> Result<(), AllocError> {
        let _ = (slot, block, size);
        Err(AllocError::Unsupported {
            allocator: self.name(),
            op: "free_unpublish",
        })
    }

    /// Transactional allocation, step 1: finds a free block of `size` bytes and
    /// *holds* it in DRAM, so no other allocation is given its space. Nothing on media
    /// changes (a crash forgets the hold) and the block's contents are unspecified.
    /// The caller logs the block, then makes it allocated on media with
    /// [`PersistentAllocator::tx_mark`] and lets go of the hold with
    /// [`PersistentAllocator::tx_release`].
    ///
    /// These four `tx_` operations let a transaction log (`pmem_core::tx`) allocate
    /// and free with no fence of the allocator's own: the log makes its records
    /// durable first, then every mark of the transaction under its commit fence, and
    /// undoes the marks from its records after a crash.
    ///
    /// The default returns [`AllocError::Unsupported`].
    fn tx_reserve(&self, size: u64) -> Result<PPtr<u8>, AllocError> {
        let _ = size;
        Err(AllocError::Unsupported {
            allocator: self.name(),
            op: "tx_reserve",
        })
    }

    /// Checks that `block` is a live block of `size` bytes, as
    /// [`PersistentAllocator::free`] would accept it (so a transaction can refuse a
    /// bad free when it is asked for, not at its commit).
    ///
    /// The default returns [`AllocError::Unsupported`].
    fn tx_check_live(&self, block: PPtr<u8>, size: u64) -> Result<(), AllocError> {
        let _ = (block, size);
        Err(AllocError::Unsupported {
            allocator: self.name(),
            op: "tx_check_live",
        })
    }

    /// Writes the block `[block, block + size)` as allocated (`allocated`) or free in
    /// the allocator's on-media metadata and flushes it, **without a fence**: the
    /// caller's next fence makes it durable. The block is held (as by
    /// [`PersistentAllocator::tx_reserve`]) until [`PersistentAllocator::tx_release`],
    /// so space marked free is not handed out before the caller's commit is durable.
    /// Idempotent: marking a block as what it already is rewrites the same state.
    ///
    /// The default returns [`AllocError::Unsupported`].
    ///
    /// # Safety
    /// The block is the caller's: held by its `tx_reserve`, or live and owned by it.
    /// Before the mark can become durable, the caller has durably recorded how to
    /// undo it (a crash may persist it at any later fence, even another thread's).
    unsafe fn tx_mark(
        &self,
        block: PPtr<u8>,
        size: u64,
        allocated: bool,
    ) -> Result<(), AllocError> {
        let _ = (block, size, allocated);
        Err(AllocError::Unsupported {
            allocator: self.name(),
            op: "tx_mark",
        })
    }

    /// Lets go of the hold on a block (from [`PersistentAllocator::tx_reserve`] or
    /// [`PersistentAllocator::tx_mark`]): a free block can be handed out again. Call
    /// it once the block's final state is durable. DRAM only; a block not held is
    /// ignored. The default does nothing.
    fn tx_release(&self, block: PPtr<u8>, size: u64) {
        let _ = (block, size);
    }
}
