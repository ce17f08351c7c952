//! The list engine's on-media layout.
//!
//! The pool's root object is the [`ControlBlock`]; the pool's heap is cut into pages
//! of `page_size` bytes. Each page starts with a [`PageHeader`] (its generation, and
//! once sealed its fill and the next page with that page's generation) followed by
//! records ([`crate::storage::record`]), 8-byte aligned, each checksummed with its page's
//! generation as the seed.
//!
//! | control block field | written | meaning |
//! | --- | --- | --- |
//! | geometry (magic .. `geometry_crc`) | at creation | checked at open |
//! | `head` | by compaction, one 8-byte store | first page of the used list |
//! | `durable_tail` | by a sync whose predecessor ended on another page, one 8-byte store, in the same flush as the records | a *hint*: a durable point (the previous sync's end, as of the last page change) |
//! | `hard_state` | by `set_hard_state`, one 8-byte store | packed Raft term and vote |
//! | `epoch` | once per open, persisted before any page of the new epoch is written | the high half of every generation taken in that run |
//! | `hard_check` | by `set_hard_state`, fenced *before* the `hard_state` word | crc32c of the new `hard_state` word (low half) and of the one it replaces (high half) |
//!
//! **The hard state's checksum.** `hard_state` is one 8-byte word, so it is
//! published failure-atomically, and it has no bit to spare for a checksum: the
//! checksum lives in `hard_check`, on another cache line. An update writes and
//! fences `hard_check` first, then the word, so whatever a crash leaves, the word
//! on media is one of the two `hard_check` covers (the old one until the second
//! fence, the new one after), and recovery accepts a word whose crc32c is either
//! half. A word that matches neither was damaged, and is refused. A `hard_check`
//! of zero is a pool from before the checksum: its word is trusted (after the
//! plausibility checks every hard state gets) and checked from its next update
//! on.
//!
//! **Generations.** Every time a page is taken from the free list and linked it gets
//! a generation `epoch << 32 | counter` that no other link ever had (the epoch is
//! bumped and persisted at every open). Records carry it in their checksum, and a
//! sealed page's header names its successor's, so stale records of an earlier life
//! of a reused page never pass for records of the current one.
//!
//! **One fence per sync.** A sync flushes the records written since the previous one
//! (with the headers of the pages sealed meanwhile) and the `durable` word of the
//! page where the *previous* sync ended (in that page's header: the same OS page as
//! the records when pages are 4 KiB), then fences once; only when the previous
//! sync ended on another page than the control block's `durable_tail` hint does it
//! move that hint too (so most syncs dirty no page but the records'). Recovery
//! follows the list from `head`: up to the `durable_tail` hint every record and
//! header must be valid, and past it every record up to a page's `durable` word
//! (anything else is [`crate::storage::error::StoreError::Corrupt`]); beyond, it keeps reading
//! records while their generation-seeded checksums hold and follows a sealed page's
//! link only when every record up to its fill was there — the first gap ends the
//! list. What survives is therefore a prefix of what was appended that includes
//! every completed sync, and corruption before the previous sync is reported, not
//! cut.
//!
//! The used-page list is the chain from `head`. The free list and the collector's
//! `stale_head` of the thesis are kept in DRAM: recovery rebuilds the free list as
//! every page the chain does not reach (it walks the chain anyway to rebuild the
//! index), so a crash can neither leak a page nor leave one both used and free, and
//! no flush is spent on free-list bookkeeping.

use pmem_core::Pool;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::storage::error::Result;
use crate::storage::record::{decode_seeded, decode_unverified, Record};

/// Layout name recorded in the pool header.
pub const LAYOUT: &str = "raft-nvm-list";
/// "RAFTLIST".
pub const MAGIC: u64 = u64::from_le_bytes(*b"RAFTLIST");
/// Format version (2: generations and the one-fence sync).
pub const VERSION: u32 = 2;
/// Size of [`PageHeader`]; records start here.
pub const PAGE_HEADER: u32 = 40;
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
    /// `(page << 32) | offset`: a point the list is known durable up to (a hint:
    /// more may follow).
    pub durable_tail: u64,
    /// [`crate::storage::store::HardState::pack`].
    pub hard_state: u64,
    /// The epoch of the last open: the high half of every generation it took.
    pub epoch: u64,
    /// crc32c of `hard_state` (low half) and of the word it replaced (high half);
    /// zero in pools from before it existed.
    pub hard_check: u64,
    /// Zero.
    pub reserved: [u64; 6],
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
    /// `epoch`.
    pub const EPOCH: u64 = 64;
    /// `hard_check`.
    pub const HARD_CHECK: u64 = 72;
}

/// The `hard_check` word for the hard-state word `word` replacing `previous`.
pub fn hard_check(word: u64, previous: u64) -> u64 {
    u64::from(crc32c::crc32c(&previous.to_le_bytes())) << 32
        | u64::from(crc32c::crc32c(&word.to_le_bytes()))
}

/// Whether `check` vouches for the hard-state word `word` (see the module docs):
/// `Some(true)` if it does, `Some(false)` if it does not, `None` if the pool has
/// no checksum yet (`check` is zero).
pub fn hard_check_holds(word: u64, check: u64) -> Option<bool> {
    if check == 0 {
        return None;
    }
    let crc = u64::from(crc32c::crc32c(&word.to_le_bytes()));
    Some(check & 0xffff_ffff == crc || check >> 32 == crc)
}

const _: () = assert!(std::mem::offset_of!(ControlBlock, head) == field::HEAD as usize);
const _: () =
    assert!(std::mem::offset_of!(ControlBlock, durable_tail) == field::DURABLE_TAIL as usize);
const _: () = assert!(std::mem::offset_of!(ControlBlock, hard_state) == field::HARD_STATE as usize);
const _: () = assert!(std::mem::offset_of!(ControlBlock, epoch) == field::EPOCH as usize);
const _: () = assert!(std::mem::offset_of!(ControlBlock, hard_check) == field::HARD_CHECK as usize);

impl ControlBlock {
    /// The checksum of the geometry fields.
    pub fn compute_geometry_crc(&self) -> u64 {
        u64::from(crc32c::crc32c(&self.as_bytes()[..32]))
    }
}

/// The header at the start of every page.
///
/// `gen` is written when the page is taken and stays until it is freed. `next`,
/// `used` and `next_gen` are written when the page is sealed (its successor
/// linked), together with `seal_crc`, which makes a torn seal read as no seal.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct PageHeader {
    /// This page's generation (never 0 on a page in use).
    pub gen: u64,
    /// Next page in the list, plus one (0: none yet).
    pub next: u32,
    /// End of the page's records (once sealed).
    pub used: u32,
    /// The next page's generation (once sealed).
    pub next_gen: u64,
    /// crc32c of the 24 bytes above once sealed; 0 before.
    pub seal_crc: u32,
    /// Zero.
    pub pad: u32,
    /// A point of this page the list is known durable up to, written by a sync in
    /// the same flush as its records (the previous sync's end): its offset in the
    /// low half, in the high half a checksum of it with the page's generation (so
    /// a word left by an earlier life of the page is never believed). See
    /// [`PageHeader::durable_word`].
    pub durable: u64,
}

const _: () = assert!(std::mem::size_of::<PageHeader>() == PAGE_HEADER as usize);

/// Offset of [`PageHeader::durable`] in a page.
pub const DURABLE_WORD: u32 = 32;
const _: () = assert!(std::mem::offset_of!(PageHeader, durable) == DURABLE_WORD as usize);

impl PageHeader {
    /// The header of a page just taken, generation `gen`, not sealed.
    pub fn fresh(gen: u64) -> PageHeader {
        PageHeader {
            gen,
            ..PageHeader::default()
        }
    }

    /// The header of page `gen` sealed at fill `used`, followed by page `next` of
    /// generation `next_gen`.
    pub fn sealed(gen: u64, used: u32, next: u32, next_gen: u64) -> PageHeader {
        let mut h = PageHeader {
            gen,
            next: next + 1,
            used,
            next_gen,
            seal_crc: 0,
            pad: 0,
            durable: 0,
        };
        h.seal_crc = h.compute_seal_crc();
        h
    }

    /// The `durable` word saying that records of generation `gen` are durable up
    /// to offset `off` of their page.
    pub fn durable_word(gen: u64, off: u32) -> u64 {
        let tag = crc32c::crc32c_append(crc32c::crc32c(&gen.to_le_bytes()), &off.to_le_bytes());
        u64::from(tag) << 32 | u64::from(off)
    }

    /// The offset this header's `durable` word vouches for, if it was written for
    /// generation `gen`.
    pub fn durable_of(&self, gen: u64) -> Option<u32> {
        let off = self.durable as u32;
        (self.durable != 0 && Self::durable_word(gen, off) == self.durable).then_some(off)
    }

    fn compute_seal_crc(&self) -> u32 {
        crc32c::crc32c(&self.as_bytes()[..24])
    }

    /// If this is the intact seal of a page of generation `gen`: its fill, and the
    /// next page with its generation.
    pub fn seal_of(&self, gen: u64) -> Option<(u32, u32, u64)> {
        let intact = self.gen == gen
            && self.next != 0
            && self.next_gen != 0
            && self.seal_crc == self.compute_seal_crc();
        intact.then(|| (self.used, self.next - 1, self.next_gen))
    }
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

impl crate::storage::index::Version for Loc {
    fn is_tombstone(&self) -> bool {
        self.0 & Loc::TOMB != 0
    }
}

/// Calls `f` on each record of page `page` (at pool offset `base`, filled up to
/// `end`), with the record's pool offset and its offset in the page, in order.
/// Bounds and kinds are always checked, checksums only if `verify` names the page's
/// generation.
pub(crate) fn for_each_record(
    pool: &Pool,
    page: u32,
    base: u64,
    end: u32,
    verify: Option<u64>,
    mut f: impl FnMut(&Record<'_>, u64, usize) -> Result<()>,
) -> Result<()> {
    let bytes = pool.bytes(base, u64::from(end))?;
    let mut at = PAGE_HEADER as usize;
    while at < bytes.len() {
        let here = at;
        // The pool maps its file from byte 0: a pool offset is a file offset.
        let what = || {
            format!(
                "file offset {} (page {page} offset {here})",
                base + here as u64
            )
        };
        let (rec, len) = if let Some(gen) = verify {
            decode_seeded(&bytes[at..], gen, &what)?
        } else {
            decode_unverified(&bytes[at..], &what)?
        };
        f(&rec, base + at as u64, here)?;
        at += len;
    }
    Ok(())
}

/// How far the records of generation `gen` reach in `bytes` (a page's bytes, header
/// included) from offset `from`: the offset of the first position that does not
/// hold a record of that generation (bad checksum, kind or bounds), or `limit`.
pub(crate) fn valid_end(bytes: &[u8], gen: u64, from: u32, limit: u32) -> u32 {
    let limit = (limit as usize).min(bytes.len());
    let mut at = from as usize;
    while at < limit {
        match decode_seeded(&bytes[at..limit], gen, &String::new) {
            Ok((_, len)) if len > 0 => at += len,
            _ => break,
        }
    }
    at.min(limit) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hard_check_vouches_for_the_old_and_the_new_word_only() {
        let (old, new) = (3u64 << 16 | 2, 4u64 << 16);
        let check = hard_check(new, old);
        // Before the word is written, and after.
        assert_eq!(hard_check_holds(old, check), Some(true));
        assert_eq!(hard_check_holds(new, check), Some(true));
        // Any flipped bit of the word is caught.
        for bit in 0..64 {
            assert_eq!(
                hard_check_holds(new ^ 1 << bit, check),
                Some(false),
                "bit {bit}"
            );
        }
        // A pool from before the check.
        assert_eq!(hard_check_holds(new, 0), None);
    }
}
