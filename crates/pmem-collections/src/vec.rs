//! [`PVec<T>`]: a growable persistent array of any [`Element`] — `PVec<u64>`,
//! `PVec<[u8; 64]>`, `PVec<PString>` — with crash-atomic operations.
//!
//! On media it is a header block and one array block of `T::SLOT`-byte slots
//! (`cap * T::SLOT` bytes; the slots at and past `len` are garbage, never read):
//!
//! | offset | bytes | field |
//! | --- | --- | --- |
//! | 0 | 64 | the type tag: kind, layout version, `T`'s id and slot size |
//! | 64 | 8 | `len` |
//! | 72 | 8 | `cap` |
//! | 80 | 8 | the array block's offset (0 when `cap` is 0) |
//!
//! Each operation is one transaction:
//!
//! - `push`, `pop`, `set` write one slot and the length (the heap's mode: lazy by
//!   default, one fence);
//! - growth (a `push` into a full array, `reserve`) copies the array into a fresh
//!   block twice the size and swaps the pointer (amortised O(1) pushes): in the
//!   same small transaction while the array is at most 4 KiB, else as an undo
//!   transaction whose copy is not logged, so the log holds a few words whatever
//!   the length;
//! - `insert` and `remove` shift the slots after the index in place when they are
//!   at most 4 KiB, else rebuild the array into a fresh block the same way.
//!
//! Elements that own blocks ([`crate::PBytes`], [`crate::PString`]) are allocated
//! in the transaction that writes them and freed in the one that removes,
//! overwrites or truncates them. Such a transaction records one allocation or
//! free per element: an `extend`, `truncate` or `clear` of more such elements than
//! the log records in one transaction (the default geometry's 32 allocation
//! records under undo logging, as behind a [`crate::PMutex`]; thousands in the
//! lazy ring) fails with [`Error::Tx`]`(LogFull)` and changes nothing: do it in
//! steps. The same bound applies to [`PHeap::remove_root`] of such a vector.

use std::marker::PhantomData;

use pmem_core::tx::Tx;
use pmem_core::PPtr;

use crate::element::Element;
use crate::heap::{Claim, PHeap, Size};
use crate::raw::{Header, Raw, SlotCopy};
use crate::roots::{sealed::Structure, Container};
use crate::tag::{Kind, Tag};
use crate::{Error, Result};

const VERSION: u16 = 1;
const WHAT: &str = "PVec";

/// Slots read at once when walking many (a bound on the DRAM a walk takes).
const WALK_BYTES: u64 = 4096;

/// A growable persistent array of `T` (see the [module documentation](self)).
///
/// ```
/// # fn main() -> pmem_collections::Result<()> {
/// # let dir = tempfile::tempdir().map_err(|e| pmem_collections::Error::TooLarge(e.to_string()))?;
/// use pmem_collections::{PHeap, PString, PVec};
/// let pool = pmem_core::Pool::create(dir.path().join("v.pool"), &PHeap::pool_options("doc", 8 << 20))?;
/// let heap = PHeap::create(pool)?;
/// let mut names: PVec<PString> = heap.root("names")?;
/// names.push(&heap, "ada")?;
/// names.extend(&heap, ["grace", "edsger"])?;
/// names.insert(&heap, 1, "alan")?;
/// assert_eq!(names.remove(&heap, 0)?, "ada");
/// assert_eq!(names.to_vec(&heap)?, ["alan", "grace", "edsger"]);
/// # Ok(()) }
/// ```
pub struct PVec<T: Element> {
    claim: Claim,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> std::fmt::Debug for PVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PVec<{}>@{:?}", T::KEY.name(), self.claim)
    }
}

fn vec_tag<T: Element>() -> Tag {
    Tag::new(Kind::Vec, VERSION, None, Some((T::KEY, T::SLOT)))
}

/// `(first slot, slots)` chunks covering `[from, to)`, each at most
/// [`WALK_BYTES`] (and at least one slot).
fn chunks(slot: u64, from: u64, to: u64) -> impl Iterator<Item = (u64, u64)> {
    let per = (WALK_BYTES / slot).max(1);
    (from..to)
        .step_by(per as usize)
        .map(move |s| (s, per.min(to - s)))
}

/// An error for index `index` of a vector of `len`.
fn out_of_bounds(index: u64, len: u64) -> Error {
    Error::OutOfBounds { index, len }
}

impl<T: Element> PVec<T> {
    fn raw(&self) -> Raw {
        Raw {
            at: self.claim.at(),
            slot: T::SLOT as u64,
            what: WHAT,
        }
    }

    /// The header, read from the pool after checking the handle's heap.
    fn header(&self, heap: &PHeap) -> Result<Header> {
        self.claim.check(heap, WHAT)?;
        self.raw().header(heap.pool())
    }

    fn slot_buf() -> Vec<u8> {
        vec![0u8; T::SLOT]
    }

    /// Elements stored.
    pub fn len(&self, heap: &PHeap) -> Result<u64> {
        Ok(self.header(heap)?.len)
    }

    /// Whether it holds no element.
    pub fn is_empty(&self, heap: &PHeap) -> Result<bool> {
        Ok(self.len(heap)? == 0)
    }

    /// Elements it holds without growing.
    pub fn capacity(&self, heap: &PHeap) -> Result<u64> {
        Ok(self.header(heap)?.cap)
    }

    /// The element at `index`, or `None` past the end (a read: no transaction).
    pub fn get(&self, heap: &PHeap, index: u64) -> Result<Option<T::Out>> {
        let h = self.header(heap)?;
        if index >= h.len {
            return Ok(None);
        }
        read_one::<T>(heap, &self.raw(), &h, index).map(Some)
    }

    /// Replaces the element at `index`, returning the old one (whose blocks are
    /// freed); [`Error::OutOfBounds`] past the end. One transaction.
    pub fn set(&mut self, heap: &PHeap, index: u64, value: &T::Arg) -> Result<T::Out> {
        self.claim.check(heap, WHAT)?;
        let raw = self.raw();
        let slot = raw.slot;
        raw.change(
            heap,
            self.claim.access(),
            |_| slot,
            |tx, h, rebuild| {
                if index >= h.len {
                    return Err(out_of_bounds(index, h.len));
                }
                let mut old = Self::slot_buf();
                raw.read_slots(&*tx, &h, index, &mut old)?;
                let out = T::get(&*tx, &old)?;
                T::release(tx, &old)?;
                let mut new = Self::slot_buf();
                T::put(tx, value, &mut new)?;
                // A slot too big for the log goes with a copy of the others.
                let h = if rebuild {
                    let after = h.len - index - 1;
                    let copies = [keep(0, index), keep(index + 1, after)];
                    raw.rebuild(tx, &h, h.cap, &copies)?
                } else {
                    h
                };
                tx.write_bytes(raw.slot_at(&h, index), &new)?;
                Ok(out)
            },
        )
    }

    /// Appends `value`. One transaction: the new slot and the length when there is
    /// room, else a growth (double the capacity, copied into a fresh block).
    pub fn push(&mut self, heap: &PHeap, value: &T::Arg) -> Result<()> {
        self.claim.check(heap, WHAT)?;
        let raw = self.raw();
        let slot = raw.slot;
        raw.change(
            heap,
            self.claim.access(),
            |h| raw.written(h, h.len.saturating_add(1), slot),
            |tx, h, rebuild| {
                let need = h.len.checked_add(1).ok_or_else(|| too_long(h.len))?;
                let h = raw.room(tx, h, need, rebuild)?;
                let mut s = Self::slot_buf();
                T::put(tx, value, &mut s)?;
                tx.write_bytes(raw.slot_at(&h, h.len), &s)?;
                raw.set_len(tx, need)
            },
        )
    }

    /// Appends every element of `values`, in one transaction (one growth at most).
    pub fn extend<'v, I>(&mut self, heap: &PHeap, values: I) -> Result<()>
    where
        I: IntoIterator<Item = &'v T::Arg>,
        T::Arg: 'v,
    {
        self.claim.check(heap, WHAT)?;
        let values: Vec<&T::Arg> = values.into_iter().collect();
        if values.is_empty() {
            return Ok(());
        }
        let n = values.len() as u64;
        let bytes = n.checked_mul(T::SLOT as u64).ok_or_else(|| too_long(n))?;
        let raw = self.raw();
        raw.change(
            heap,
            self.claim.access(),
            |h| raw.written(h, h.len.saturating_add(n), bytes),
            |tx, h, rebuild| {
                let need = h.len.checked_add(n).ok_or_else(|| too_long(h.len))?;
                let h = raw.room(tx, h, need, rebuild)?;
                let mut buf = vec![0u8; bytes as usize];
                for (v, s) in values.iter().zip(buf.chunks_exact_mut(T::SLOT)) {
                    T::put(tx, v, s)?;
                }
                tx.write_bytes(raw.slot_at(&h, h.len), &buf)?;
                raw.set_len(tx, need)
            },
        )
    }

    /// Removes the last element and returns it (`None` if empty). One transaction.
    pub fn pop(&mut self, heap: &PHeap) -> Result<Option<T::Out>> {
        if self.header(heap)?.len == 0 {
            return Ok(None);
        }
        let raw = self.raw();
        heap.run(self.claim.access(), Size::Small, |tx| {
            let h = raw.header(&*tx)?;
            let Some(last) = h.len.checked_sub(1) else {
                return Ok(None);
            };
            let mut s = Self::slot_buf();
            raw.read_slots(&*tx, &h, last, &mut s)?;
            let out = T::get(&*tx, &s)?;
            T::release(tx, &s)?;
            raw.set_len(tx, last)?;
            Ok(Some(out))
        })
    }

    /// Inserts `value` at `index`, shifting the elements after it up;
    /// [`Error::OutOfBounds`] past the length. One transaction.
    pub fn insert(&mut self, heap: &PHeap, index: u64, value: &T::Arg) -> Result<()> {
        self.claim.check(heap, WHAT)?;
        let raw = self.raw();
        raw.change(
            heap,
            self.claim.access(),
            |h| {
                let moved = h.len.saturating_sub(index).saturating_add(1);
                raw.written(h, h.len.saturating_add(1), moved.saturating_mul(raw.slot))
            },
            |tx, h, rebuild| {
                if index > h.len {
                    return Err(out_of_bounds(index, h.len));
                }
                let need = h.len.checked_add(1).ok_or_else(|| too_long(h.len))?;
                let mut s = Self::slot_buf();
                T::put(tx, value, &mut s)?;
                if rebuild || need > h.cap {
                    let cap = if need > h.cap {
                        raw.grown(h.cap, need)?
                    } else {
                        h.cap
                    };
                    let copies = [keep(0, index), shift(index, index + 1, h.len - index)];
                    let h = raw.rebuild(tx, &h, cap, &copies)?;
                    tx.write_bytes(raw.slot_at(&h, index), &s)?;
                } else {
                    // The new slot and the shifted tail as one logged range.
                    let tail = ((h.len - index) * raw.slot) as usize;
                    s.resize(T::SLOT + tail, 0);
                    raw.read_slots(&*tx, &h, index, &mut s[T::SLOT..])?;
                    tx.write_bytes(raw.slot_at(&h, index), &s)?;
                }
                raw.set_len(tx, need)
            },
        )
    }

    /// Removes the element at `index` and returns it, shifting the elements after
    /// it down; [`Error::OutOfBounds`] past the end. One transaction.
    pub fn remove(&mut self, heap: &PHeap, index: u64) -> Result<T::Out> {
        self.claim.check(heap, WHAT)?;
        let raw = self.raw();
        raw.change(
            heap,
            self.claim.access(),
            |h| {
                let moved = h.len.saturating_sub(index).saturating_sub(1);
                moved.saturating_mul(raw.slot)
            },
            |tx, h, rebuild| {
                if index >= h.len {
                    return Err(out_of_bounds(index, h.len));
                }
                let mut s = Self::slot_buf();
                raw.read_slots(&*tx, &h, index, &mut s)?;
                let out = T::get(&*tx, &s)?;
                T::release(tx, &s)?;
                let after = h.len - index - 1;
                if rebuild {
                    let copies = [keep(0, index), shift(index + 1, index, after)];
                    raw.rebuild(tx, &h, h.cap, &copies)?;
                } else if after > 0 {
                    let mut tail = vec![0u8; (after * raw.slot) as usize];
                    raw.read_slots(&*tx, &h, index + 1, &mut tail)?;
                    tx.write_bytes(raw.slot_at(&h, index), &tail)?;
                }
                raw.set_len(tx, h.len - 1)?;
                Ok(out)
            },
        )
    }

    /// Keeps the first `len` elements, freeing the others' blocks (nothing if `len`
    /// is not less than the length). One transaction (see the [module
    /// documentation](self) for its bound).
    pub fn truncate(&mut self, heap: &PHeap, len: u64) -> Result<()> {
        if len >= self.header(heap)?.len {
            return Ok(());
        }
        let raw = self.raw();
        heap.run(self.claim.access(), Size::Small, |tx| {
            let h = raw.header(&*tx)?;
            if len >= h.len {
                return Ok(());
            }
            release_slots::<T>(tx, &raw, &h, len)?;
            raw.set_len(tx, len)
        })
    }

    /// Removes every element (the capacity stays). One transaction.
    pub fn clear(&mut self, heap: &PHeap) -> Result<()> {
        self.truncate(heap, 0)
    }

    /// Makes room for at least `additional` more elements (a growth, one
    /// transaction, if the capacity is short).
    pub fn reserve(&mut self, heap: &PHeap, additional: u64) -> Result<()> {
        let h = self.header(heap)?;
        let need = h
            .len
            .checked_add(additional)
            .ok_or_else(|| too_long(h.len))?;
        if need <= h.cap {
            return Ok(());
        }
        let raw = self.raw();
        raw.change(
            heap,
            self.claim.access(),
            // A copy of the elements (the new capacity costs nothing to log).
            |h| h.len.saturating_mul(raw.slot),
            |tx, h, _| {
                let need = h
                    .len
                    .checked_add(additional)
                    .ok_or_else(|| too_long(h.len))?;
                raw.room(tx, h, need, false).map(|_| ())
            },
        )
    }

    /// The elements in order (reads: no transaction). A damaged pool ends the walk
    /// with an error.
    pub fn iter<'a>(&'a self, heap: &'a PHeap) -> Iter<'a, T> {
        let (header, pending) = match self.header(heap) {
            Ok(h) => (h, None),
            Err(e) => (
                Header {
                    len: 0,
                    cap: 0,
                    array: 0,
                },
                Some(e),
            ),
        };
        Iter {
            raw: self.raw(),
            heap,
            header,
            next: 0,
            pending,
            _t: PhantomData,
        }
    }

    /// Every element, in order, in a `Vec` (reads: no transaction).
    pub fn to_vec(&self, heap: &PHeap) -> Result<Vec<T::Out>> {
        self.iter(heap).collect()
    }
}

/// Slots `[from, from + count)` stay where they are.
fn keep(from: u64, count: u64) -> SlotCopy {
    SlotCopy {
        from,
        to: from,
        count,
    }
}

/// Slots `[from, from + count)` move to `to`.
fn shift(from: u64, to: u64, count: u64) -> SlotCopy {
    SlotCopy { from, to, count }
}

fn too_long(len: u64) -> Error {
    Error::TooLarge(format!("a vector of {len} elements cannot grow"))
}

/// Releases (at commit) the blocks of the elements at `[from, h.len)`.
fn release_slots<T: Element>(tx: &mut Tx<'_>, raw: &Raw, h: &Header, from: u64) -> Result<()> {
    for (start, count) in chunks(raw.slot, from, h.len) {
        let mut buf = vec![0u8; (count * raw.slot) as usize];
        raw.read_slots(&*tx, h, start, &mut buf)?;
        for s in buf.chunks_exact(T::SLOT) {
            T::release(tx, s)?;
        }
    }
    Ok(())
}

/// The element at `index` (below `h.len`), read from the pool; small slots go
/// through a stack buffer (a read allocates nothing but what `T::Out` needs).
fn read_one<T: Element>(heap: &PHeap, raw: &Raw, h: &Header, index: u64) -> Result<T::Out> {
    let mut small = [0u8; 64];
    let mut large = Vec::new();
    let s = if T::SLOT <= small.len() {
        &mut small[..T::SLOT]
    } else {
        large.resize(T::SLOT, 0);
        &mut large[..]
    };
    raw.read_slots(heap.pool(), h, index, s)?;
    T::get(heap.pool(), s)
}

/// The elements of a [`PVec`], in order: [`PVec::iter`].
pub struct Iter<'a, T: Element> {
    raw: Raw,
    heap: &'a PHeap,
    header: Header,
    next: u64,
    /// An error to yield first (the header could not be read).
    pending: Option<Error>,
    _t: PhantomData<&'a PVec<T>>,
}

impl<T: Element> std::fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Iter({}/{})", self.next, self.header.len)
    }
}

impl<T: Element> Iterator for Iter<'_, T> {
    type Item = Result<T::Out>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending.take() {
            return Some(Err(e));
        }
        if self.next >= self.header.len {
            return None;
        }
        let r = read_one::<T>(self.heap, &self.raw, &self.header, self.next);
        // An error ends the walk.
        self.next = if r.is_ok() {
            self.next + 1
        } else {
            self.header.len
        };
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.header.len - self.next).unwrap_or(usize::MAX);
        (
            n,
            Some(n.saturating_add(usize::from(self.pending.is_some()))),
        )
    }
}

impl<T: Element> Structure for PVec<T> {
    const WHAT: &'static str = WHAT;

    fn tag() -> Tag {
        vec_tag::<T>()
    }

    fn create_in(tx: &mut Tx<'_>) -> Result<u64> {
        if T::SLOT == 0 {
            return Err(Error::TooLarge(format!(
                "a PVec of the zero-sized {}",
                T::KEY.name()
            )));
        }
        let tag = vec_tag::<T>();
        tag.check_ids()?;
        let at = Raw::create(tx)?;
        tx.write(PPtr::<Tag>::from_offset(at), &tag)?;
        Ok(at)
    }

    fn open_claimed(heap: &PHeap, claim: Claim) -> Result<Self> {
        let v = PVec {
            claim,
            _t: PhantomData,
        };
        // A damaged header is refused at the door.
        v.header(heap)?;
        Ok(v)
    }

    fn destroy_in(self, heap: &PHeap, tx: &mut Tx<'_>) -> Result<()> {
        self.claim.check(heap, WHAT)?;
        let raw = self.raw();
        let h = raw.header(&*tx)?;
        release_slots::<T>(tx, &raw, &h, 0)?;
        raw.destroy(tx, &h)
    }

    fn offset(&self) -> u64 {
        self.claim.at()
    }
}

impl<T: Element> Container for PVec<T> {
    fn blocks(&self, heap: &PHeap) -> Result<Vec<u64>> {
        let h = self.header(heap)?;
        let raw = self.raw();
        let mut out = raw.own_blocks(&h);
        for (start, count) in chunks(raw.slot, 0, h.len) {
            let mut buf = vec![0u8; (count * raw.slot) as usize];
            raw.read_slots(heap.pool(), &h, start, &mut buf)?;
            for s in buf.chunks_exact(T::SLOT) {
                T::blocks(s, &mut out);
            }
        }
        out.sort_unstable();
        Ok(out)
    }
}
