//! The naive baseline (being written): the same allocator with its metadata on the
//! media, every update logged and flushed.

use std::sync::Arc;

use pmem_core::{AllocError, AtomicPPtr, PPtr, PersistentAllocator, Pool};

/// The naive baseline (being written).
#[derive(Debug)]
pub struct NaiveHeap {
    pool: Arc<Pool>,
}

impl NaiveHeap {
    /// Formats the pool's heap area.
    ///
    /// # Safety
    /// The heap area is this heap's alone.
    pub unsafe fn format_heap(pool: Arc<Pool>) -> Result<NaiveHeap, AllocError> {
        Ok(NaiveHeap { pool })
    }

    /// Opens the heap formatted by [`NaiveHeap::format_heap`].
    ///
    /// # Safety
    /// As [`NaiveHeap::format_heap`].
    pub unsafe fn open_heap(pool: Arc<Pool>) -> Result<NaiveHeap, AllocError> {
        Ok(NaiveHeap { pool })
    }
}

// SAFETY: placeholder that hands out nothing.
unsafe impl PersistentAllocator for NaiveHeap {
    fn name(&self) -> &'static str {
        "naive"
    }
    fn pool(&self) -> &Pool {
        &self.pool
    }
    fn alignment(&self) -> u64 {
        16
    }
    fn alloc(&self, size: u64) -> Result<PPtr<u8>, AllocError> {
        Err(AllocError::OutOfSpace { requested: size })
    }
    unsafe fn free(&self, ptr: PPtr<u8>, size: u64) -> Result<(), AllocError> {
        Err(AllocError::InvalidFree {
            offset: ptr.offset(),
            size,
            reason: "not built",
        })
    }
    unsafe fn alloc_publish(
        &self,
        size: u64,
        _slot: PPtr<AtomicPPtr<u8>>,
        _init: &mut dyn FnMut(&mut [u8]),
    ) -> Result<PPtr<u8>, AllocError> {
        Err(AllocError::OutOfSpace { requested: size })
    }
}
