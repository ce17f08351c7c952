//! The growable array under [`crate::PVec`], [`crate::PBytes`] and
//! [`crate::PString`]: one header block and one array block of fixed-size slots.
//!
//! Header block (offsets from its start):
//!
//! | offset | bytes | field |
//! | --- | --- | --- |
//! | 0 | 64 | the type [`Tag`](crate::tag::Tag) |
//! | 64 | 8 | `len`: slots in use |
//! | 72 | 8 | `cap`: slots in the array block |
//! | 80 | 8 | `array`: the array block's offset (0 when `cap` is 0) |
//!
//! The array block holds `cap * slot` bytes; slots at and past `len` are garbage
//! (never read, never owning anything).
//!
//! **Why two ways to change it.** A change that writes at most [`IN_PLACE_LIMIT`]
//! bytes (a few slots, or the growth of a small array) runs as a [`Size::Small`]
//! transaction (the heap's mode, lazy by default: one fence), logging what it
//! writes. A change that would write more (the growth of a larger array, a shift
//! of many slots, a long append) instead copies the array into a fresh block as a
//! [`Size::Bulk`] undo transaction, whose writes into that block are not logged,
//! and swaps one pointer: the log never holds more than a few KiB for any
//! operation, whatever the array's size.

use pmem_core::tx::{Tx, TxError};
use pmem_core::PPtr;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::element::{write_u64, Media};
use crate::error::corrupt;
use crate::heap::{Access, PHeap, Size};
use crate::tag::TAG_BYTES;
use crate::{Error, Result};

/// The words after the tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub(crate) struct Header {
    /// Slots in use.
    pub len: u64,
    /// Slots in the array block.
    pub cap: u64,
    /// The array block (0: none).
    pub array: u64,
}

const LEN_AT: u64 = TAG_BYTES;
const CAP_AT: u64 = LEN_AT + 8;
const ARRAY_AT: u64 = CAP_AT + 8;
/// Bytes of the header block.
pub(crate) const HEADER_BYTES: u64 = ARRAY_AT + 8;
const _: () = assert!(HEADER_BYTES == TAG_BYTES + std::mem::size_of::<Header>() as u64);

/// Largest array block trusted from media or asked for (1 TiB).
const MAX_ARRAY_BYTES: u64 = 1 << 40;

/// Most bytes one operation writes in place (logged); beyond, it rebuilds into a
/// fresh block (not logged). A few KiB: far inside the default geometry's 64 KiB of
/// object data per lane and 256 KiB lazy ring.
pub(crate) const IN_PLACE_LIMIT: u64 = 4096;

/// Bytes copied per step of a rebuild (a bound on the DRAM it takes).
const COPY_CHUNK: u64 = 64 * 1024;

/// A copy of `count` slots from index `from` of the old array to index `to` of
/// the new one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotCopy {
    pub from: u64,
    pub to: u64,
    pub count: u64,
}

/// Where an array's header is and how big its slots are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Raw {
    /// The header block.
    pub at: u64,
    /// Bytes per slot (at least 1).
    pub slot: u64,
    /// The container's name, for errors.
    pub what: &'static str,
}

impl Raw {
    /// The header, checked: `len <= cap`, the array's size bounded, an array iff
    /// a capacity. A damaged header is [`Error::Corrupt`].
    pub fn header(&self, m: &(impl Media + ?Sized)) -> Result<Header> {
        let mut b = [0u8; std::mem::size_of::<Header>()];
        m.read_into(self.at + LEN_AT, &mut b)?;
        let h = Header::read_from_bytes(&b[..]).map_err(|_| corrupt(self.what, "short header"))?;
        let end = h
            .cap
            .checked_mul(self.slot)
            .filter(|&n| n <= MAX_ARRAY_BYTES)
            .and_then(|n| h.array.checked_add(n));
        let ok = h.len <= h.cap
            && end.is_some()
            && (h.cap == 0) == (h.array == 0)
            && h.array.is_multiple_of(8);
        if !ok {
            return Err(corrupt(
                self.what,
                format!(
                    "header at {:#x}: length {}, capacity {}, array {:#x}",
                    self.at, h.len, h.cap, h.array
                ),
            ));
        }
        Ok(h)
    }

    /// The offset of slot `i` (`i <= h.cap`, so within the checked block).
    pub fn slot_at(&self, h: &Header, i: u64) -> u64 {
        debug_assert!(i <= h.cap);
        h.array + i * self.slot
    }

    /// Reads slots `[from, from + out.len() / slot)` (within `h.cap`).
    pub fn read_slots(
        &self,
        m: &(impl Media + ?Sized),
        h: &Header,
        from: u64,
        out: &mut [u8],
    ) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        m.read_into(self.slot_at(h, from), out)
    }

    /// Writes the length.
    pub fn set_len(&self, tx: &mut Tx<'_>, len: u64) -> Result<()> {
        write_u64(tx, self.at + LEN_AT, len)
    }

    /// Bytes of an array of `cap` slots, or [`Error::TooLarge`].
    fn array_bytes(&self, cap: u64) -> Result<u64> {
        cap.checked_mul(self.slot)
            .filter(|&n| n > 0 && n <= MAX_ARRAY_BYTES)
            .ok_or_else(|| {
                Error::TooLarge(format!("{} of {cap} slots of {} B", self.what, self.slot))
            })
    }

    /// The capacity to grow to for `need` slots: at least double (amortised O(1)
    /// pushes) and at least one 64-byte page's worth.
    pub fn grown(&self, cap: u64, need: u64) -> Result<u64> {
        let min = (64 / self.slot).max(1);
        let new = need.max(cap.saturating_mul(2)).max(min);
        // Doubling may pass the bound where `need` does not: then just `need`.
        let new = if self.array_bytes(new).is_ok() {
            new
        } else {
            need
        };
        self.array_bytes(new)?;
        Ok(new)
    }

    /// Moves the array into a fresh block of `new_cap` slots, copying `copies`
    /// (slot ranges of the old array, within `h.len`, to the new one), freeing the
    /// old block at commit and pointing the header at the new. Writes into the new
    /// block are not logged (in an undo transaction). The length is the caller's.
    pub fn rebuild(
        &self,
        tx: &mut Tx<'_>,
        h: &Header,
        new_cap: u64,
        copies: &[SlotCopy],
    ) -> Result<Header> {
        let bytes = self.array_bytes(new_cap)?;
        for c in copies {
            let fits = |at: u64, cap: u64| at.checked_add(c.count).is_some_and(|e| e <= cap);
            if !fits(c.from, h.len) || !fits(c.to, new_cap) {
                return Err(corrupt(self.what, format!("a copy out of bounds: {c:?}")));
            }
        }
        let block = tx.alloc_uninit(bytes)?.offset();
        let mut buf = vec![0u8; bytes.min(COPY_CHUNK) as usize];
        for c in copies {
            let total = c.count * self.slot;
            let (src, dst) = (self.slot_at(h, c.from), block + c.to * self.slot);
            let mut done = 0;
            while done < total {
                let n = (total - done).min(COPY_CHUNK) as usize;
                tx.read_bytes(src + done, &mut buf[..n])?;
                tx.write_bytes(dst + done, &buf[..n])?;
                done += n as u64;
            }
        }
        if h.array != 0 {
            tx.free(PPtr::from_offset(h.array), h.cap * self.slot)?;
        }
        tx.write(
            PPtr::<[u64; 2]>::from_offset(self.at + CAP_AT),
            &[new_cap, block],
        )?;
        Ok(Header {
            len: h.len,
            cap: new_cap,
            array: block,
        })
    }

    /// The array to append into so that `need` slots fit: `h`'s own when they
    /// fit and `rebuild` is off, else a fresh one (grown if they do not fit)
    /// holding `h`'s slots.
    pub fn room(&self, tx: &mut Tx<'_>, h: Header, need: u64, rebuild: bool) -> Result<Header> {
        if !rebuild && need <= h.cap {
            return Ok(h);
        }
        let cap = if need > h.cap {
            self.grown(h.cap, need)?
        } else {
            h.cap
        };
        let all = SlotCopy {
            from: 0,
            to: 0,
            count: h.len,
        };
        self.rebuild(tx, &h, cap, &[all])
    }

    /// Creates an empty array's header block (tag written by the caller).
    pub fn create(tx: &mut Tx<'_>) -> Result<u64> {
        Ok(tx.alloc(HEADER_BYTES)?.offset())
    }

    /// Frees the array block and the header block at the commit of `tx`.
    pub fn destroy(&self, tx: &mut Tx<'_>, h: &Header) -> Result<()> {
        if h.array != 0 {
            tx.free(PPtr::from_offset(h.array), h.cap * self.slot)?;
        }
        Ok(tx.free(PPtr::from_offset(self.at), HEADER_BYTES)?)
    }

    /// The header block and the array block, if any.
    pub fn own_blocks(&self, h: &Header) -> Vec<u64> {
        let mut out = vec![self.at];
        if h.array != 0 {
            out.push(h.array);
        }
        out
    }

    /// The bytes a change writes when `need` slots must fit: `in_place` if they
    /// fit the capacity, else the whole grown contents (a copy).
    pub fn written(&self, h: &Header, need: u64, in_place: u64) -> u64 {
        if need <= h.cap {
            in_place
        } else {
            need.saturating_mul(self.slot)
        }
    }

    /// Runs one change as one transaction. When `written` (the bytes it writes,
    /// given the header) is at most [`IN_PLACE_LIMIT`], as a [`Size::Small`]
    /// transaction in the heap's mode, `op` called with `rebuild == false` (it may
    /// still grow a small array: a copy of a few KiB). Else, or if that try
    /// overflowed the log, as a [`Size::Bulk`] undo transaction, `op` called with
    /// `rebuild == true`: it must write into a fresh block, whose bytes are not
    /// logged. `op` gets the header as its transaction reads it, and may run more
    /// than once (an aborted try leaves nothing behind).
    pub fn change<R>(
        &self,
        heap: &PHeap,
        access: Access,
        written: impl Fn(&Header) -> u64,
        mut op: impl FnMut(&mut Tx<'_>, Header, bool) -> Result<R>,
    ) -> Result<R> {
        // The structure's handle is borrowed `&mut` by our caller: nothing changes
        // the header between this read and the transaction's.
        let h = self.header(heap.pool())?;
        if written(&h) <= IN_PLACE_LIMIT {
            match heap.run(access, Size::Small, |tx| {
                let h = self.header(&*tx)?;
                op(tx, h, false)
            }) {
                Err(Error::Tx(TxError::LogFull { .. })) => {}
                r => return r,
            }
        }
        heap.run(access, Size::Bulk, |tx| {
            let h = self.header(&*tx)?;
            op(tx, h, true)
        })
    }
}
