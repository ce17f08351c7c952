//! [`PBytes`] and [`PString`]: growable persistent byte and UTF-8 strings, and the
//! element types through which containers hold byte strings.
//!
//! As root containers they are laid out as a [`PVec`](crate::PVec) of bytes: a
//! header block (the type tag, then length, capacity and the data block's offset)
//! and one data block.
//!
//! Each operation is one transaction: an append within the capacity writes the
//! new bytes and the length only; one beyond it copies the string into a fresh
//! block at least twice the size and swaps the pointer (an append of more than
//! 4 KiB, or a copy of a string longer than that, goes by an undo transaction
//! whose copy is not logged); `set` replaces the contents in place when they fit (4 KiB at most),
//! else in a fresh block; `truncate` and `clear` write the length only.
//!
//! A `PString` is UTF-8 by construction (only `&str` goes in, and `truncate` cuts
//! at character boundaries only); reading it checks again, so a damaged pool gives
//! [`Error::NotUtf8`], never an invalid `String`.

use pmem_core::tx::Tx;
use pmem_core::PPtr;

use crate::heap::{Claim, PHeap, Size};
use crate::raw::{Header, Raw};
use crate::roots::{sealed::Structure, Container};
use crate::tag::{Kind, Tag};
use crate::{Error, Result};

const VERSION: u16 = 1;

/// A persistent, growable byte string. As a container's element type
/// (`PHashMap<PBytes, PBytes>`), a byte string the container owns: inserted as
/// `&[u8]`, read as `Vec<u8>`.
pub struct PBytes {
    claim: Claim,
}

/// A persistent, growable UTF-8 string. As a container's element type
/// (`PHashMap<PString, PString>`), a string the container owns: inserted as
/// `&str`, read as `String`.
///
/// ```
/// # fn main() -> pmem_collections::Result<()> {
/// # let dir = tempfile::tempdir().map_err(|e| pmem_collections::Error::TooLarge(e.to_string()))?;
/// use pmem_collections::{PHeap, PString};
/// let pool = pmem_core::Pool::create(dir.path().join("s.pool"), &PHeap::pool_options("doc", 8 << 20))?;
/// let heap = PHeap::create(pool)?;
/// let mut s: PString = heap.root("greeting")?;
/// s.push_str(&heap, "grüße")?;
/// s.push(&heap, '!')?;
/// assert!(s.truncate(&heap, 3).is_err()); // inside 'ü'
/// s.truncate(&heap, 4)?;
/// assert_eq!(s.to_string(&heap)?, "grü");
/// # Ok(()) }
/// ```
pub struct PString {
    claim: Claim,
}

impl std::fmt::Debug for PBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PBytes@{:?}", self.claim)
    }
}

impl std::fmt::Debug for PString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PString@{:?}", self.claim)
    }
}

/// The operations both strings share, on the header at `claim`.
struct Core<'a> {
    claim: &'a Claim,
    what: &'static str,
}

impl Core<'_> {
    fn raw(&self) -> Raw {
        Raw {
            at: self.claim.at(),
            slot: 1,
            what: self.what,
        }
    }

    fn header(&self, heap: &PHeap) -> Result<Header> {
        self.claim.check(heap, self.what)?;
        self.raw().header(heap.pool())
    }

    fn to_vec(&self, heap: &PHeap) -> Result<(Vec<u8>, u64)> {
        let h = self.header(heap)?;
        let raw = self.raw();
        if let Some(last) = h.len.checked_sub(1) {
            // The last byte first: a damaged length past the pool's end fails here,
            // before it sizes a buffer.
            raw.read_slots(heap.pool(), &h, last, &mut [0u8; 1])?;
        }
        let mut out = vec![0u8; h.len as usize];
        raw.read_slots(heap.pool(), &h, 0, &mut out)?;
        Ok((out, h.array))
    }

    fn append(&self, heap: &PHeap, bytes: &[u8]) -> Result<()> {
        self.claim.check(heap, self.what)?;
        if bytes.is_empty() {
            return Ok(());
        }
        let n = bytes.len() as u64;
        let raw = self.raw();
        raw.change(
            heap,
            self.claim.access(),
            |h| raw.written(h, h.len.saturating_add(n), n),
            |tx, h, rebuild| {
                let need = h.len.checked_add(n).ok_or_else(|| too_long(self.what))?;
                let h = raw.room(tx, h, need, rebuild)?;
                tx.write_bytes(raw.slot_at(&h, h.len), bytes)?;
                raw.set_len(tx, need)
            },
        )
    }

    fn set(&self, heap: &PHeap, bytes: &[u8]) -> Result<()> {
        self.claim.check(heap, self.what)?;
        let n = bytes.len() as u64;
        let raw = self.raw();
        raw.change(
            heap,
            self.claim.access(),
            |_| n,
            |tx, h, rebuild| {
                let h = if (rebuild || n > h.cap) && n > 0 {
                    // Nothing to copy: the old contents go.
                    let cap = raw.grown(0, n)?;
                    raw.rebuild(tx, &h, cap, &[])?
                } else {
                    h
                };
                if n > 0 {
                    tx.write_bytes(raw.slot_at(&h, 0), bytes)?;
                }
                raw.set_len(tx, n)
            },
        )
    }

    /// Cuts to `len` bytes; `boundary` says whether a cut there is allowed (it is
    /// given the byte at `len`).
    fn truncate(&self, heap: &PHeap, len: u64, boundary: impl Fn(u8) -> bool) -> Result<()> {
        let h = self.header(heap)?;
        if len >= h.len {
            return Ok(());
        }
        let raw = self.raw();
        let mut b = [0u8; 1];
        raw.read_slots(heap.pool(), &h, len, &mut b)?;
        if !boundary(b[0]) {
            return Err(Error::NotCharBoundary { index: len });
        }
        heap.run(self.claim.access(), Size::Small, |tx| raw.set_len(tx, len))
    }

    fn reserve(&self, heap: &PHeap, additional: u64) -> Result<()> {
        let h = self.header(heap)?;
        let need = h
            .len
            .checked_add(additional)
            .ok_or_else(|| too_long(self.what))?;
        if need <= h.cap {
            return Ok(());
        }
        let raw = self.raw();
        raw.change(
            heap,
            self.claim.access(),
            // A copy of the bytes (the new capacity costs nothing to log).
            |h| h.len,
            |tx, h, _| {
                let need = h
                    .len
                    .checked_add(additional)
                    .ok_or_else(|| too_long(self.what))?;
                raw.room(tx, h, need, false).map(|_| ())
            },
        )
    }

    fn blocks(&self, heap: &PHeap) -> Result<Vec<u64>> {
        let h = self.header(heap)?;
        Ok(self.raw().own_blocks(&h))
    }

    fn create_in(tx: &mut Tx<'_>, tag: &Tag) -> Result<u64> {
        let at = Raw::create(tx)?;
        tx.write(PPtr::<Tag>::from_offset(at), tag)?;
        Ok(at)
    }

    fn destroy_in(&self, heap: &PHeap, tx: &mut Tx<'_>) -> Result<()> {
        self.claim.check(heap, self.what)?;
        let raw = self.raw();
        let h = raw.header(&*tx)?;
        raw.destroy(tx, &h)
    }
}

fn too_long(what: &str) -> Error {
    Error::TooLarge(format!("a {what} longer than 2^64 bytes"))
}

impl PBytes {
    fn core(&self) -> Core<'_> {
        Core {
            claim: &self.claim,
            what: "PBytes",
        }
    }

    /// Bytes stored.
    pub fn len(&self, heap: &PHeap) -> Result<u64> {
        Ok(self.core().header(heap)?.len)
    }

    /// Whether it is empty.
    pub fn is_empty(&self, heap: &PHeap) -> Result<bool> {
        Ok(self.len(heap)? == 0)
    }

    /// Bytes it holds without growing.
    pub fn capacity(&self, heap: &PHeap) -> Result<u64> {
        Ok(self.core().header(heap)?.cap)
    }

    /// The contents (a read: no transaction).
    pub fn to_vec(&self, heap: &PHeap) -> Result<Vec<u8>> {
        Ok(self.core().to_vec(heap)?.0)
    }

    /// Appends one byte. One transaction.
    pub fn push(&mut self, heap: &PHeap, byte: u8) -> Result<()> {
        self.core().append(heap, &[byte])
    }

    /// Appends `bytes`. One transaction: the new bytes and the length when they fit
    /// the capacity, else a copy into a fresh block.
    pub fn extend_from_slice(&mut self, heap: &PHeap, bytes: &[u8]) -> Result<()> {
        self.core().append(heap, bytes)
    }

    /// Replaces the whole contents with `bytes`. One transaction.
    pub fn set(&mut self, heap: &PHeap, bytes: &[u8]) -> Result<()> {
        self.core().set(heap, bytes)
    }

    /// Keeps the first `len` bytes (nothing if it is not shorter). One
    /// transaction writing the length.
    pub fn truncate(&mut self, heap: &PHeap, len: u64) -> Result<()> {
        self.core().truncate(heap, len, |_| true)
    }

    /// Empties it (the capacity stays). One transaction.
    pub fn clear(&mut self, heap: &PHeap) -> Result<()> {
        self.truncate(heap, 0)
    }

    /// Makes room for at least `additional` more bytes.
    pub fn reserve(&mut self, heap: &PHeap, additional: u64) -> Result<()> {
        self.core().reserve(heap, additional)
    }
}

/// Whether a cut before `byte` falls on a character boundary (it is not a UTF-8
/// continuation byte).
fn char_boundary(byte: u8) -> bool {
    (byte as i8) >= -0x40
}

impl PString {
    fn core(&self) -> Core<'_> {
        Core {
            claim: &self.claim,
            what: "PString",
        }
    }

    /// Bytes stored (its UTF-8 length).
    pub fn len(&self, heap: &PHeap) -> Result<u64> {
        Ok(self.core().header(heap)?.len)
    }

    /// Whether it is empty.
    pub fn is_empty(&self, heap: &PHeap) -> Result<bool> {
        Ok(self.len(heap)? == 0)
    }

    /// Bytes it holds without growing.
    pub fn capacity(&self, heap: &PHeap) -> Result<u64> {
        Ok(self.core().header(heap)?.cap)
    }

    /// The contents (a read: no transaction); [`Error::NotUtf8`] if the pool's
    /// bytes are not UTF-8 (a damaged pool).
    pub fn to_string(&self, heap: &PHeap) -> Result<String> {
        let (bytes, at) = self.core().to_vec(heap)?;
        String::from_utf8(bytes).map_err(|_| Error::NotUtf8 { offset: at })
    }

    /// Appends one character. One transaction.
    pub fn push(&mut self, heap: &PHeap, c: char) -> Result<()> {
        self.core()
            .append(heap, c.encode_utf8(&mut [0u8; 4]).as_bytes())
    }

    /// Appends `s`. One transaction: the new bytes and the length when they fit
    /// the capacity, else a copy into a fresh block.
    pub fn push_str(&mut self, heap: &PHeap, s: &str) -> Result<()> {
        self.core().append(heap, s.as_bytes())
    }

    /// Replaces the whole contents with `s`. One transaction.
    pub fn set(&mut self, heap: &PHeap, s: &str) -> Result<()> {
        self.core().set(heap, s.as_bytes())
    }

    /// Keeps the first `len` bytes (nothing if it is not shorter);
    /// [`Error::NotCharBoundary`] if `len` falls inside a character. One
    /// transaction writing the length.
    pub fn truncate(&mut self, heap: &PHeap, len: u64) -> Result<()> {
        self.core().truncate(heap, len, char_boundary)
    }

    /// Empties it (the capacity stays). One transaction.
    pub fn clear(&mut self, heap: &PHeap) -> Result<()> {
        self.truncate(heap, 0)
    }

    /// Makes room for at least `additional` more bytes.
    pub fn reserve(&mut self, heap: &PHeap, additional: u64) -> Result<()> {
        self.core().reserve(heap, additional)
    }
}

fn bytes_tag() -> Tag {
    Tag::new(Kind::Bytes, VERSION, None, None)
}

fn string_tag() -> Tag {
    Tag::new(Kind::String, VERSION, None, None)
}

impl Structure for PBytes {
    const WHAT: &'static str = "PBytes";

    fn tag() -> Tag {
        bytes_tag()
    }

    fn create_in(tx: &mut Tx<'_>) -> Result<u64> {
        Core::create_in(tx, &bytes_tag())
    }

    fn open_claimed(heap: &PHeap, claim: Claim) -> Result<Self> {
        let b = PBytes { claim };
        b.core().header(heap)?;
        Ok(b)
    }

    fn destroy_in(self, heap: &PHeap, tx: &mut Tx<'_>) -> Result<()> {
        self.core().destroy_in(heap, tx)
    }

    fn offset(&self) -> u64 {
        self.claim.at()
    }
}

impl Container for PBytes {
    fn blocks(&self, heap: &PHeap) -> Result<Vec<u64>> {
        self.core().blocks(heap)
    }
}

impl Structure for PString {
    const WHAT: &'static str = "PString";

    fn tag() -> Tag {
        string_tag()
    }

    fn create_in(tx: &mut Tx<'_>) -> Result<u64> {
        Core::create_in(tx, &string_tag())
    }

    fn open_claimed(heap: &PHeap, claim: Claim) -> Result<Self> {
        let s = PString { claim };
        s.core().header(heap)?;
        Ok(s)
    }

    fn destroy_in(self, heap: &PHeap, tx: &mut Tx<'_>) -> Result<()> {
        self.core().destroy_in(heap, tx)
    }

    fn offset(&self) -> u64 {
        self.claim.at()
    }
}

impl Container for PString {
    fn blocks(&self, heap: &PHeap) -> Result<Vec<u64>> {
        self.core().blocks(heap)
    }
}
