//! On-media layout of a WAFA heap (offsets relative to the pool; all little-endian).
//!
//! | where | size | what |
//! | --- | ---: | --- |
//! | heap start | 64 | [`RegionHeader`]: magic, page count, offsets, crc32c — written once at format |
//! | + 64 | 64 | [`Intent`]: redo record of an in-flight `alloc_publish` (pmem-core's publish-intent record) |
//! | + 128 | 1 × pages, rounded to 64 | page kind table, one byte per page ([`Kind`]) |
//! | page aligned | 4096 × pages | the pages |
//!
//! A *divided* page keeps its metadata in its last 64-byte unit (offset 4032):
//! word 0 is the allocation bitmap (bit `i` = unit `i`, bit 63 = the metadata unit
//! itself, always set), word 1 packs the free-unit count `C_FU`, the maximum
//! segment `S_MS` and the clock position `S_FF` for reading; recovery trusts only
//! the bitmap (one aligned 8-byte word, so it never tears) and recomputes the rest.
//! Undivided pages (free, or part of a whole-page run) have no metadata.
//!
//! Format 2 (magic `PMKWAFA2`) took pmem-core's shared publish-intent record, whose
//! checksum sits at byte 56 (format 1 had its own record, checksum at byte 32);
//! a format-1 heap is refused with a clear error.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Magic of the region header.
pub const MAGIC: [u8; 8] = *b"PMKWAFA2";
/// Page size.
pub const PAGE: u64 = 4096;
/// Unit size.
pub const UNIT: u64 = 64;
/// Offset of the metadata unit inside a divided page.
pub const META_OFF: u64 = PAGE - UNIT;
/// Offset of the intent record from the heap start.
pub const INTENT_OFF: u64 = 64;
/// Offset of the page kind table from the heap start.
pub const KINDS_OFF: u64 = 128;

/// What a page is, as recorded in the kind table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Not in use.
    Free = 0,
    /// Divided into units, with metadata in its last unit.
    Divided = 1,
    /// First page of a whole-page run.
    RunHead = 2,
    /// Following page of a whole-page run.
    RunTail = 3,
}

impl Kind {
    /// Decodes a table byte; unknown values are corrupt.
    pub fn from_byte(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Free),
            1 => Some(Kind::Divided),
            2 => Some(Kind::RunHead),
            3 => Some(Kind::RunTail),
            _ => None,
        }
    }
}

/// The region header.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct RegionHeader {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// Pages managed.
    pub pages: u64,
    /// Offset of the first page.
    pub first_page: u64,
    /// Offset of the heap start (this header).
    pub region_off: u64,
    /// Length of the region.
    pub region_len: u64,
    /// Zero.
    pub reserved: [u64; 2],
    /// crc32c of the bytes before it.
    pub checksum: u64,
}
const _: () = assert!(std::mem::size_of::<RegionHeader>() == 64);

impl RegionHeader {
    /// Seals the checksum.
    pub fn sealed(mut self) -> Self {
        self.checksum = u64::from(crc32c(&self.as_bytes()[..56]));
        self
    }

    /// Whether magic and checksum are right.
    pub fn valid(&self) -> bool {
        self.magic == MAGIC && self.checksum == u64::from(crc32c(&self.as_bytes()[..56]))
    }
}

/// The redo record of one `alloc_publish`: pmem-core's shared publish-intent
/// record, one cache line; its extent is the block's size in bytes.
pub use pmem_core::alloc::intent::{IntentKind, PublishIntent as Intent};

/// Packs `C_FU`, `S_MS` and `S_FF` into metadata word 1.
pub fn pack_info(c_fu: u32, s_ms: u32, pos: u32) -> u64 {
    u64::from(c_fu) | (u64::from(s_ms) << 8) | (u64::from(pos) << 16)
}

fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_answer() {
        // The standard check value of CRC-32C.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn intent_and_header_seal() {
        let armed = Intent::new(IntentKind::AllocPublish, 8, 4096, 64, 0);
        assert_eq!(armed.intact(), Some(IntentKind::AllocPublish));
        let mut i = armed;
        i.block += 1;
        assert_eq!(i.intact(), None);
        assert_eq!(Intent::default().intact(), None);
        let h = RegionHeader {
            magic: MAGIC,
            pages: 3,
            first_page: 8192,
            region_off: 4096,
            region_len: 16384,
            reserved: [0; 2],
            checksum: 0,
        }
        .sealed();
        assert!(h.valid());
    }
}
