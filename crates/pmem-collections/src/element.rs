//! [`Element`]: what a container can hold — any [`PType`] (stored as its bytes, in
//! place) or a byte string ([`PBytes`], [`PString`]: stored in a block of its own
//! that the container owns, its slot holding the block's offset and length).
//!
//! Each element occupies a *slot* of [`Element::SLOT`] bytes inside a container's
//! node or array; writing one may allocate (a byte string's block), dropping one may
//! free; both happen inside the operation's transaction.

use std::cmp::Ordering;

use pmem_core::tx::Tx;
use pmem_core::{PPtr, Pool};

use crate::bytes::{PBytes, PString};
use crate::error::corrupt;
use crate::hash::hash_bytes;
use crate::ptype::{PType, TypeKey};
use crate::{Error, Result};

/// Where a container's bytes are read from: the pool (a read outside any
/// transaction) or a running transaction (which sees its own writes).
pub trait Media {
    /// Copies `out.len()` bytes at `offset` into `out`.
    fn read_into(&self, offset: u64, out: &mut [u8]) -> Result<()>;
}

impl Media for Pool {
    fn read_into(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        out.copy_from_slice(self.bytes(offset, out.len() as u64)?);
        Ok(())
    }
}

impl Media for Tx<'_> {
    fn read_into(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        Ok(self.read_bytes(offset, out)?)
    }
}

/// Reads one 8-byte word.
pub(crate) fn read_u64(m: &(impl Media + ?Sized), offset: u64) -> Result<u64> {
    let mut w = [0u8; 8];
    m.read_into(offset, &mut w)?;
    Ok(u64::from_le_bytes(w))
}

/// Writes one 8-byte word in a transaction.
pub(crate) fn write_u64(tx: &mut Tx<'_>, offset: u64, v: u64) -> Result<()> {
    Ok(tx.write(PPtr::<u64>::from_offset(offset), &v)?)
}

/// A type a container can hold. Implemented for every [`PType`] and for the byte
/// strings [`PBytes`] and [`PString`]; its methods are the containers' business.
pub trait Element: Send + Sync + 'static {
    /// What an insertion takes: `T` for a `PType`, `[u8]` for [`PBytes`], `str` for
    /// [`PString`].
    type Arg: ?Sized;
    /// What a read returns: `T`, `Vec<u8>`, `String`.
    type Out;
    /// The id recorded in a container's header.
    const KEY: TypeKey;
    /// Bytes of a slot.
    const SLOT: usize;

    /// Fills `slot` with `arg`, allocating in `tx` what lives outside the slot.
    #[doc(hidden)]
    fn put(tx: &mut Tx<'_>, arg: &Self::Arg, slot: &mut [u8]) -> Result<()>;
    /// The value in `slot`.
    #[doc(hidden)]
    fn get(m: &(impl Media + ?Sized), slot: &[u8]) -> Result<Self::Out>;
    /// Frees (at the commit of `tx`) what `slot` owns outside itself.
    #[doc(hidden)]
    fn release(tx: &mut Tx<'_>, slot: &[u8]) -> Result<()>;
    /// Appends the allocator blocks `slot` owns (for leak checks).
    #[doc(hidden)]
    fn blocks(slot: &[u8], out: &mut Vec<u64>);
    /// The hash of a key (fixed for all time: tables store its choices).
    #[doc(hidden)]
    fn hash_arg(arg: &Self::Arg) -> u64;
    /// Whether `slot` holds `arg`.
    #[doc(hidden)]
    fn eq_slot(m: &(impl Media + ?Sized), slot: &[u8], arg: &Self::Arg) -> Result<bool>;
}

/// An [`Element`] with an order, for [`crate::PBTreeMap`] keys: a `PType` that is
/// `Ord` (compared as values: `u64` numerically), or a byte string (compared
/// bytewise).
pub trait OrdElement: Element {
    /// How `slot`'s value compares with `arg`.
    #[doc(hidden)]
    fn cmp_slot(m: &(impl Media + ?Sized), slot: &[u8], arg: &Self::Arg) -> Result<Ordering>;
    /// How two args compare.
    #[doc(hidden)]
    fn cmp_args(a: &Self::Arg, b: &Self::Arg) -> Ordering;
    /// A value read back as an arg (a B-tree copies a key into a separator so).
    #[doc(hidden)]
    fn out_arg(out: &Self::Out) -> &Self::Arg;
}

impl<T: PType> Element for T {
    type Arg = T;
    type Out = T;
    const KEY: TypeKey = T::TYPE_KEY;
    const SLOT: usize = std::mem::size_of::<T>();

    fn put(_tx: &mut Tx<'_>, arg: &T, slot: &mut [u8]) -> Result<()> {
        slot.copy_from_slice(arg.as_bytes());
        Ok(())
    }
    fn get(_m: &(impl Media + ?Sized), slot: &[u8]) -> Result<T> {
        T::read_from_bytes(slot).map_err(|_| corrupt("slot", "a slot of the wrong size"))
    }
    fn release(_tx: &mut Tx<'_>, _slot: &[u8]) -> Result<()> {
        Ok(())
    }
    fn blocks(_slot: &[u8], _out: &mut Vec<u64>) {}
    fn hash_arg(arg: &T) -> u64 {
        hash_bytes(arg.as_bytes())
    }
    fn eq_slot(_m: &(impl Media + ?Sized), slot: &[u8], arg: &T) -> Result<bool> {
        Ok(slot == arg.as_bytes())
    }
}

impl<T: PType + Ord> OrdElement for T {
    fn cmp_slot(m: &(impl Media + ?Sized), slot: &[u8], arg: &T) -> Result<Ordering> {
        Ok(T::get(m, slot)?.cmp(arg))
    }
    fn cmp_args(a: &T, b: &T) -> Ordering {
        a.cmp(b)
    }
    fn out_arg(out: &T) -> &T {
        out
    }
}

/// Longest byte string an element may hold (a bound on what is trusted from
/// media, too).
pub const MAX_BYTES: u64 = 1 << 32;

/// A byte string's slot: the block's offset (0 when empty) and the length.
fn string_slot(slot: &[u8]) -> (u64, u64) {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(&slot[..8]);
    b.copy_from_slice(&slot[8..16]);
    (u64::from_le_bytes(a), u64::from_le_bytes(b))
}

/// The allocator block size of a byte string of `len` bytes (at least 8).
pub(crate) fn string_block(len: u64) -> u64 {
    len.max(8)
}

fn put_bytes(tx: &mut Tx<'_>, bytes: &[u8], slot: &mut [u8]) -> Result<()> {
    let len = bytes.len() as u64;
    if len > MAX_BYTES {
        return Err(Error::TooLarge(format!("a byte string of {len} bytes")));
    }
    let at = if len == 0 {
        0
    } else {
        let block = tx.alloc_uninit(string_block(len))?;
        tx.write_bytes(block.offset(), bytes)?;
        block.offset()
    };
    slot[..8].copy_from_slice(&at.to_le_bytes());
    slot[8..16].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

fn get_bytes(m: &(impl Media + ?Sized), slot: &[u8]) -> Result<Vec<u8>> {
    let (at, len) = string_slot(slot);
    if len > MAX_BYTES || (len > 0 && at == 0) {
        return Err(corrupt(
            "byte string",
            format!("offset {at:#x}, length {len}"),
        ));
    }
    // Read in chunks, the buffer growing only as reads succeed: a damaged length
    // fails at the pool's end instead of sizing a buffer of up to 4 GiB first.
    const CHUNK: u64 = 64 * 1024;
    let mut out = Vec::with_capacity(len.min(CHUNK) as usize);
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(CHUNK);
        let start = out.len();
        out.resize(start + n as usize, 0);
        let from = at
            .checked_add(done)
            .ok_or_else(|| corrupt("byte string", format!("offset {at:#x}, length {len}")))?;
        m.read_into(from, &mut out[start..])?;
        done += n;
    }
    Ok(out)
}

fn release_bytes(tx: &mut Tx<'_>, slot: &[u8]) -> Result<()> {
    let (at, len) = string_slot(slot);
    if at != 0 {
        tx.free(PPtr::from_offset(at), string_block(len))?;
    }
    Ok(())
}

fn bytes_blocks(slot: &[u8], out: &mut Vec<u64>) {
    let (at, _) = string_slot(slot);
    if at != 0 {
        out.push(at);
    }
}

fn eq_bytes(m: &(impl Media + ?Sized), slot: &[u8], arg: &[u8]) -> Result<bool> {
    let (_, len) = string_slot(slot);
    if len != arg.len() as u64 {
        return Ok(false);
    }
    Ok(get_bytes(m, slot)? == arg)
}

impl Element for PBytes {
    type Arg = [u8];
    type Out = Vec<u8>;
    const KEY: TypeKey = TypeKey::named("PBytes");
    const SLOT: usize = 16;

    fn put(tx: &mut Tx<'_>, arg: &[u8], slot: &mut [u8]) -> Result<()> {
        put_bytes(tx, arg, slot)
    }
    fn get(m: &(impl Media + ?Sized), slot: &[u8]) -> Result<Vec<u8>> {
        get_bytes(m, slot)
    }
    fn release(tx: &mut Tx<'_>, slot: &[u8]) -> Result<()> {
        release_bytes(tx, slot)
    }
    fn blocks(slot: &[u8], out: &mut Vec<u64>) {
        bytes_blocks(slot, out)
    }
    fn hash_arg(arg: &[u8]) -> u64 {
        hash_bytes(arg)
    }
    fn eq_slot(m: &(impl Media + ?Sized), slot: &[u8], arg: &[u8]) -> Result<bool> {
        eq_bytes(m, slot, arg)
    }
}

impl OrdElement for PBytes {
    fn cmp_slot(m: &(impl Media + ?Sized), slot: &[u8], arg: &[u8]) -> Result<Ordering> {
        Ok(get_bytes(m, slot)?.as_slice().cmp(arg))
    }
    fn cmp_args(a: &[u8], b: &[u8]) -> Ordering {
        a.cmp(b)
    }
    fn out_arg(out: &Vec<u8>) -> &[u8] {
        out
    }
}

impl Element for PString {
    type Arg = str;
    type Out = String;
    const KEY: TypeKey = TypeKey::named("PString");
    const SLOT: usize = 16;

    fn put(tx: &mut Tx<'_>, arg: &str, slot: &mut [u8]) -> Result<()> {
        put_bytes(tx, arg.as_bytes(), slot)
    }
    fn get(m: &(impl Media + ?Sized), slot: &[u8]) -> Result<String> {
        let (at, _) = string_slot(slot);
        String::from_utf8(get_bytes(m, slot)?).map_err(|_| Error::NotUtf8 { offset: at })
    }
    fn release(tx: &mut Tx<'_>, slot: &[u8]) -> Result<()> {
        release_bytes(tx, slot)
    }
    fn blocks(slot: &[u8], out: &mut Vec<u64>) {
        bytes_blocks(slot, out)
    }
    fn hash_arg(arg: &str) -> u64 {
        hash_bytes(arg.as_bytes())
    }
    fn eq_slot(m: &(impl Media + ?Sized), slot: &[u8], arg: &str) -> Result<bool> {
        eq_bytes(m, slot, arg.as_bytes())
    }
}

impl OrdElement for PString {
    fn cmp_slot(m: &(impl Media + ?Sized), slot: &[u8], arg: &str) -> Result<Ordering> {
        Ok(get_bytes(m, slot)?.as_slice().cmp(arg.as_bytes()))
    }
    fn cmp_args(a: &str, b: &str) -> Ordering {
        a.cmp(b)
    }
    fn out_arg(out: &String) -> &str {
        out
    }
}
