//! Errors of opening and formatting a WAFA heap. Allocation errors are
//! `pmem_core::AllocError`, shared by every allocator.

/// Why a WAFA heap cannot be formatted or opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WafaError {
    /// The heap is too small for the header, the kind table and one page.
    #[error("heap of {len} bytes is too small for a WAFA heap")]
    TooSmall {
        /// Heap length.
        len: u64,
    },
    /// No WAFA heap was formatted here.
    #[error("no WAFA heap at offset {offset}")]
    NotFormatted {
        /// Where it was looked for.
        offset: u64,
    },
    /// The on-media metadata is inconsistent.
    #[error("corrupt WAFA heap: {reason}")]
    Corrupt {
        /// What is wrong.
        reason: String,
    },
    /// The pool failed.
    #[error(transparent)]
    Pool(#[from] pmem_core::PoolError),
}
