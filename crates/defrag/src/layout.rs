//! The heap's on-media format.
//!
//! * The pool's root object is a [`HeapRoot`]: a magic, the offset of the persisted
//!   type table, and 16 named roots.
//! * The type table is one allocator block: a [`TableHeader`] (magic, length,
//!   crc32c) and the registry's encoding.
//! * Objects live in *slab pages*, runs of pages from pmem-core's page allocator
//!   (one 4 KiB page, or several for one large object): a 64-byte [`PageHeader`]
//!   (slot size, capacity, used count, a bitmap of live slots), then the slots, each
//!   a 16-byte [`ObjHeader`] (type id, size) and the object. Objects are 16-byte
//!   aligned; a `PPtr<T>` points at the object, just after its header.
//!
//! Every change to these structures is made in a pmem-core transaction, so a crash
//! at any point leaves the heap as it was before or after each transaction.

use pmem_core::RootType;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Bytes of a page of the underlying page allocator.
pub const PAGE: u64 = 4096;
/// Bytes of a slab page's header.
pub const PAGE_HEADER: u64 = 64;
/// Bytes of an object's header.
pub const OBJ_HEADER: u64 = 16;
/// Slots a page can hold (its bitmap's bits).
pub const MAX_SLOTS: u64 = 256;
/// Named roots of a heap.
pub const ROOTS: usize = 16;
/// Longest root name, in bytes.
pub const ROOT_NAME: usize = 24;

/// The largest object a heap stores.
pub const MAX_OBJECT: u64 = 1 << 20;

/// Allocation records per transaction of a heap's log: a compaction round
/// allocates or frees up to this many pages in one transaction.
pub(crate) const ALLOC_RECORDS: u32 = 1024;

/// Relocation pages per plan: a plan allocates its destination pages in one
/// transaction and its release frees its relocation pages in another, each
/// within the log's allocation records ([`ALLOC_RECORDS`]).
pub(crate) const ROUND_PAGES: usize = ALLOC_RECORDS as usize - 16;

pub(crate) const HEAP_MAGIC: [u8; 8] = *b"PMKDFRG1";
pub(crate) const PAGE_MAGIC: u32 = u32::from_le_bytes(*b"DFPG");
pub(crate) const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"DFTYPES1");

/// One named root.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct RootSlot {
    /// The name, NUL-padded (empty: the slot is free).
    pub name: [u8; ROOT_NAME],
    /// The object (0: null).
    pub ptr: u64,
}

/// The pool's root object.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct HeapRoot {
    /// `PMKDFRG1` once formatted.
    pub magic: [u8; 8],
    /// Offset of the type table block.
    pub type_table: u64,
    /// The named roots.
    pub roots: [RootSlot; ROOTS],
    /// The compaction plan being carried out (0: none): recovery finishes it.
    pub compaction: u64,
}

impl RootType for HeapRoot {
    const ROOT_ID: &'static str = "pmkit/defrag-heap";
    const LAYOUT_VERSION: u32 = 2;
}

/// The header of a slab page.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct PageHeader {
    /// `DFPG`.
    pub magic: u32,
    /// Bytes of a slot (object header included), a multiple of 16.
    pub slot: u32,
    /// Slots in the page.
    pub capacity: u32,
    /// Live slots.
    pub used: u32,
    /// Bytes of the page run.
    pub bytes: u64,
    /// Live slots, bit `i` for slot `i`.
    pub bitmap: [u64; 4],
    /// Zero.
    pub reserved: u64,
}
const _: () = assert!(std::mem::size_of::<PageHeader>() as u64 == PAGE_HEADER);

impl PageHeader {
    /// Whether slot `i` holds a live object.
    pub fn is_live(&self, i: u64) -> bool {
        i < MAX_SLOTS && self.bitmap[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// Marks slot `i` live or free.
    pub fn set(&mut self, i: u64, live: bool) {
        let (w, b) = ((i / 64) as usize, i % 64);
        if live {
            self.bitmap[w] |= 1 << b;
        } else {
            self.bitmap[w] &= !(1 << b);
        }
    }

    /// The first free slot, if any.
    pub fn first_free(&self) -> Option<u64> {
        (0..u64::from(self.capacity)).find(|&i| !self.is_live(i))
    }
}

/// The header of an object.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ObjHeader {
    /// The object's type.
    pub type_id: u32,
    /// Bytes of the object.
    pub size: u32,
    /// During a compaction, the object's new place once its copy there is durable
    /// (0: not moved); the copy is then the authoritative one.
    pub forward: u64,
}
const _: () = assert!(std::mem::size_of::<ObjHeader>() as u64 == OBJ_HEADER);

/// The header of the type table block.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct TableHeader {
    /// `DFTYPES1`.
    pub magic: u64,
    /// Bytes of the encoded registry that follows.
    pub len: u64,
    /// crc32c of those bytes.
    pub crc: u64,
    /// Zero.
    pub reserved: u64,
}

/// The header of a compaction plan block (one line), followed by `moves` (source,
/// destination) pairs of object offsets and `pages` (page, bytes) relocation page
/// runs. A compaction's plans form a chain from the heap root, newest first.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct PlanHeader {
    /// `DFPLAN01`.
    pub magic: u64,
    /// Objects to move.
    pub moves: u64,
    /// Relocation page runs freed at the end.
    pub pages: u64,
    /// crc32c of the pairs that follow.
    pub crc: u64,
    /// The previous plan of the same compaction (0: none).
    pub next: u64,
    /// 1 while the plan's moves are tracked by the reached bitmap (FFCCD on ADR,
    /// [`crate::protocol`]): set once the plan is committed, cleared once its
    /// moves are durable. Recovery then decides each move from the bitmap.
    pub tracked: u64,
    /// 1 on the newest plan of a chain while the compaction is being planned
    /// (its plans are persisted in slices, transactions running between them):
    /// recovery undoes such a chain instead of finishing it. Each plan's
    /// transaction sets its own and clears the one before; the commit clears
    /// the last.
    pub pending: u64,
    /// Zero.
    pub reserved: u64,
}

/// The word of the plan block at `block` that says it is pending.
pub(crate) fn pending_word(block: u64) -> pmem_core::PPtr<u64> {
    pmem_core::PPtr::from_offset(block + std::mem::offset_of!(PlanHeader, pending) as u64)
}

/// Bytes of a [`PlanHeader`].
pub const PLAN_HEADER: u64 = 64;
const _: () = assert!(std::mem::size_of::<PlanHeader>() as u64 == PLAN_HEADER);

pub(crate) const PLAN_MAGIC: u64 = u64::from_le_bytes(*b"DFPLAN01");

/// Slot bytes, page-run bytes and capacity for objects of `size` bytes.
pub fn class_of(size: u64) -> (u64, u64, u64) {
    let slot = (OBJ_HEADER + size).div_ceil(16) * 16;
    if PAGE_HEADER + slot <= PAGE {
        let capacity = ((PAGE - PAGE_HEADER) / slot).min(MAX_SLOTS);
        (slot, PAGE, capacity)
    } else {
        (slot, (PAGE_HEADER + slot).div_ceil(PAGE) * PAGE, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_pack_small_objects_and_give_large_ones_a_run() {
        assert_eq!(class_of(8), (32, PAGE, 126));
        assert_eq!(class_of(1), (32, PAGE, 126));
        let (slot, run, cap) = class_of(128);
        assert_eq!((slot, run, cap), (144, PAGE, 28));
        assert_eq!(class_of(5000), (5024, 2 * PAGE, 1));
        // The smallest slot still fits the bitmap.
        assert!(class_of(0).2 <= MAX_SLOTS);
    }

    #[test]
    fn bitmap_finds_the_first_free_slot() {
        let mut h = PageHeader {
            capacity: 3,
            ..PageHeader::default()
        };
        h.set(0, true);
        assert_eq!(h.first_free(), Some(1));
        h.set(1, true);
        h.set(2, true);
        assert_eq!(h.first_free(), None);
        h.set(1, false);
        assert_eq!(h.first_free(), Some(1));
    }
}
