//! The list engine's on-media layout.
//!
//! The pool's root object is the [`ControlBlock`]; the pool's heap is cut into pages
//! of `page_size` bytes. Each page starts with a [`PageHeader`] (free offset, next
//! page) followed by records ([`crate::record`]), 8-byte aligned.
//!
//! | control block field | written | meaning |
//! | --- | --- | --- |
//! | geometry (magic .. `geometry_crc`) | at creation | checked at open |
//! | `head` | by compaction, one 8-byte store | first page of the used list |
//! | `durable_tail` | by every sync, one 8-byte store | end of the durable prefix: page and offset |
//! | `hard_state` | by `set_hard_state`, one 8-byte store | packed Raft term and vote |
//!
//! The used-page list is the chain from `head` to the durable tail's page. The free
//! list and the collector's `stale_head` of the thesis are kept in DRAM: recovery
//! rebuilds the free list as every page the chain does not reach (it walks the chain
//! anyway to rebuild the index), so a crash can neither leak a page nor leave one both
//! used and free, and no flush is spent on free-list bookkeeping.

use pmem_core::Pool;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::Result;
use crate::record::{decode, decode_unverified, Record};

/// Layout name recorded in the pool header.
pub const LAYOUT: &str = "raft-nvm-list";
/// "RAFTLIST".
pub const MAGIC: u64 = u64::from_le_bytes(*b"RAFTLIST");
/// Format version.
pub const VERSION: u32 = 1;
/// Size of [`PageHeader`]; records start here.
pub const PAGE_HEADER: u32 = 16;
/// Smallest page size accepted.
pub const MIN_PAGE: u32 = 256;
/// Largest page size accepted.
pub const MAX_PAGE: u32 = 1 << 20;

/// The pool-level control block (the pool's root object).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C, align(64))]
pub struct ControlBlock {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`VERSION`].
    pub version: u32,
    /// Bytes per page.
    pub page_size: u32,
    /// Pages in the heap.
    pub page_count: u64,
    /// Pool offset of page 0.
    pub pages_off: u64,
    /// crc32c of the four fields above.
    pub geometry_crc: u64,
    /// First page of the used list, plus one (0: none, never after creation).
    pub head: u64,
    /// `(page << 32) | offset`: where the durable prefix ends.
    pub durable_tail: u64,
    /// [`crate::HardState::pack`].
    pub hard_state: u64,
    /// Zero.
    pub reserved: [u64; 8],
}

/// The control block's identity in the pool header: stable across renames of the
/// Rust type; its layout version is the list format's.
impl pmem_core::RootType for ControlBlock {
    const ROOT_ID: &'static str = "raft-nvm-list/control-block";
    const LAYOUT_VERSION: u32 = VERSION;
}

/// Byte offsets of the control block's mutable words.
pub mod field {
    /// `head`.
    pub const HEAD: u64 = 40;
    /// `durable_tail`.
    pub const DURABLE_TAIL: u64 = 48;
    /// `hard_state`.
    pub const HARD_STATE: u64 = 56;
}

const _: () = assert!(std::mem::offset_of!(ControlBlock, head) == field::HEAD as usize);
const _: () =
    assert!(std::mem::offset_of!(ControlBlock, durable_tail) == field::DURABLE_TAIL as usize);
const _: () = assert!(std::mem::offset_of!(ControlBlock, hard_state) == field::HARD_STATE as usize);

impl ControlBlock {
    /// The checksum of the geometry fields.
    pub fn compute_geometry_crc(&self) -> u64 {
        u64::from(crc32c::crc32c(&self.as_bytes()[..32]))
    }
}

/// The header at the start of every page.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct PageHeader {
    /// Next page in the list, plus one (0: none).
    pub next: u64,
    /// End of the page's records (final once the page is sealed).
    pub used: u32,
    /// Zero.
    pub pad: u32,
}

/// A position in the list: a page and a byte offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    /// The page.
    pub page: u32,
    /// The byte offset in the page.
    pub off: u32,
}

impl Pos {
    /// The packed form stored in `durable_tail`.
    pub fn pack(self) -> u64 {
        (u64::from(self.page) << 32) | u64::from(self.off)
    }

    /// The inverse of [`Pos::pack`].
    pub fn unpack(w: u64) -> Pos {
        Pos {
            page: (w >> 32) as u32,
            off: w as u32,
        }
    }
}

/// The records' location in the index: a pool offset, with the top bit marking a
/// tombstone so reads need not touch the media to see a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc(pub u64);

impl Loc {
    const TOMB: u64 = 1 << 63;

    /// A location of a record at `offset`.
    pub fn new(offset: u64, tombstone: bool) -> Loc {
        Loc(offset | if tombstone { Self::TOMB } else { 0 })
    }

    /// The pool offset of the record.
    pub fn offset(self) -> u64 {
        self.0 & !Self::TOMB
    }
}

impl crate::index::Version for Loc {
    fn is_tombstone(&self) -> bool {
        self.0 & Loc::TOMB != 0
    }
}

/// Calls `f` on each record of page `page` (at pool offset `base`, filled up to
/// `end`), with the record's pool offset and its offset in the page, in order.
/// Bounds and kinds are always checked, checksums only if `verify`.
pub(crate) fn for_each_record(
    pool: &Pool,
    page: u32,
    base: u64,
    end: u32,
    verify: bool,
    mut f: impl FnMut(&Record<'_>, u64, usize) -> Result<()>,
) -> Result<()> {
    let bytes = pool.bytes(base, u64::from(end))?;
    let mut at = PAGE_HEADER as usize;
    while at < bytes.len() {
        let here = at;
        let what = || format!("page {page} offset {here}");
        let (rec, len) = if verify {
            decode(&bytes[at..], &what)?
        } else {
            decode_unverified(&bytes[at..], &what)?
        };
        f(&rec, base + at as u64, here)?;
        at += len;
    }
    Ok(())
}
