//! The crate's one error type.

use pmem_core::tx::TxError;
use pmem_core::PoolError;

/// What can go wrong with a persistent container.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A transaction failed (log full, allocator out of space, media error, ...).
    #[error(transparent)]
    Tx(#[from] TxError),
    /// A pool access failed (out of bounds, read-only, ...).
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A handle was used with a heap other than the one it was opened from.
    #[error("a handle of the {what} at offset {offset:#x} was used with another heap (or another opening of its own)")]
    WrongHeap {
        /// The kind of handle.
        what: &'static str,
        /// The handle's offset in its own heap.
        offset: u64,
    },
    /// The structure on media is of another type than the one it was opened as.
    #[error("type mismatch: the pool holds {found}, opened as {expected}")]
    TypeMismatch {
        /// The type asked for.
        expected: String,
        /// The type recorded on media.
        found: String,
    },
    /// The structure is already open through another handle in this heap (each
    /// structure has one handle at a time, so the borrow checker can guard it).
    #[error("the structure at offset {offset:#x} is already open through another handle")]
    AlreadyOpen {
        /// Its offset.
        offset: u64,
    },
    /// A root name that is empty, too long or holds a NUL byte.
    #[error("invalid root name {name:?}: 1 to {max} bytes, no NUL")]
    InvalidRootName {
        /// The name given.
        name: String,
        /// The longest name allowed.
        max: usize,
    },
    /// A transaction allocated a box and gave it no root: it would be unreachable
    /// after a restart (a leak), so the transaction is rolled back.
    #[error("a box allocated at offset {offset:#x} has no root at commit (it would leak): name it with PTx::set_root or free it")]
    Unrooted {
        /// The box's offset.
        offset: u64,
    },
    /// A named box was freed directly (its name would point at freed space).
    #[error("the box is the root {name:?}: remove it with PHeap::remove_root")]
    Rooted {
        /// Its root name.
        name: String,
    },
    /// A new root was given a name that is taken.
    #[error("the root name {name:?} is taken")]
    RootTaken {
        /// The name.
        name: String,
    },
    /// Every root slot is taken.
    #[error("all {slots} root slots are taken")]
    RootsFull {
        /// How many slots the heap has.
        slots: usize,
    },
    /// The pool was not made by [`crate::PHeap::create`] (its root is not this
    /// crate's directory of roots).
    #[error("the pool has no pmem-collections root directory: {0}")]
    NotAHeap(PoolError),
    /// An index past the end of a vector or string.
    #[error("index {index} is out of bounds (length {len})")]
    OutOfBounds {
        /// The index asked for.
        index: u64,
        /// The length.
        len: u64,
    },
    /// A `PString` cut inside a character.
    #[error("index {index} is not on a character boundary")]
    NotCharBoundary {
        /// The byte index asked for.
        index: u64,
    },
    /// A size that cannot be stored (a capacity overflowing, a value too long).
    #[error("impossible size: {0}")]
    TooLarge(String),
    /// The bytes on media break the structure's invariants (a damaged pool).
    #[error("corrupt {what}: {detail}")]
    Corrupt {
        /// The structure.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A `PString` whose bytes are not UTF-8 (a damaged pool).
    #[error("a persistent string at offset {offset:#x} is not UTF-8")]
    NotUtf8 {
        /// The string's bytes' offset.
        offset: u64,
    },
}

/// Shorthand.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A [`Error::Corrupt`].
pub(crate) fn corrupt(what: &'static str, detail: impl Into<String>) -> Error {
    Error::Corrupt {
        what,
        detail: detail.into(),
    }
}
