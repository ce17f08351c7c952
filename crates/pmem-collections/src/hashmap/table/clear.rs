//! Emptying and freeing a table: [`clear`] swaps in an empty table and retires
//! the old one, [`drain_step`] frees a retired table's byte strings a few at a
//! time (so no transaction frees more than a log holds), [`destroy`] frees it all.

use pmem_core::tx::{Hint, Tx};
use pmem_core::PPtr;

use super::{
    for_each_slot, header, key_range, retired, stride, value_range, Header, CHUNK, HEADER_BYTES,
    LEN, MIN_CAPACITY, RETIRED, WHAT,
};
use crate::element::{write_u64, Element};
use crate::error::corrupt;
use crate::Result;

/// Whether `K` or `V` keeps blocks outside its slot (a byte string). Asked of a
/// slot of all-ones bytes: a byte string's slot then names a block, a plain
/// value's never does.
fn owns_blocks<K: Element, V: Element>() -> bool {
    let slot = vec![0xFFu8; K::SLOT.max(V::SLOT)];
    let mut out = Vec::new();
    K::blocks(&slot[..K::SLOT], &mut out);
    V::blocks(&slot[..V::SLOT], &mut out);
    !out.is_empty()
}

/// Empties the map at `at` in `tx`: an empty table of [`MIN_CAPACITY`] slots
/// replaces the current one. When entries own blocks (byte strings), the old
/// table is retired, to be drained by [`drain_step`] in later transactions;
/// otherwise it is freed at commit. Fails if a retired table is still there
/// (drain it first).
pub(crate) fn clear<K: Element, V: Element>(tx: &mut Tx<'_>, at: u64) -> Result<()> {
    let h = header::<K, V>(tx, at)?;
    if retired::<K, V>(tx, at)?.is_some() {
        return Err(corrupt(WHAT, "a cleared table is still being drained"));
    }
    let stride = stride::<K, V>();
    let table = tx.alloc(MIN_CAPACITY * stride)?;
    let (retired, retired_capacity) = if owns_blocks::<K, V>() && h.len > 0 {
        (h.table, h.capacity)
    } else {
        tx.free(PPtr::from_offset(h.table), h.capacity * stride)?;
        (0, 0)
    };
    tx.add_ranges(&[(at + LEN, 40, Hint::Object)])?;
    tx.write(
        PPtr::<[u64; 5]>::from_offset(at + LEN),
        &[0, MIN_CAPACITY, table.offset(), retired, retired_capacity],
    )?;
    Ok(())
}

/// One transaction's share of draining the retired table of the map at `at`:
/// from slot `from` on, releases (at commit) the blocks of at most `batch`
/// entries and empties their slots (so a step after a crash skips them), reading
/// at most [`CHUNK`] slots. Returns the slot to go on from, or `None` when the
/// table is drained: that step frees it and clears the header's record of it.
pub(crate) fn drain_step<K: Element, V: Element>(
    tx: &mut Tx<'_>,
    at: u64,
    from: u64,
    batch: usize,
) -> Result<Option<u64>> {
    let Some(r) = retired::<K, V>(tx, at)? else {
        return Ok(None);
    };
    let stride = stride::<K, V>();
    let to = from.saturating_add(CHUNK).min(r.capacity);
    let mut owners: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut next = to;
    let mut blocks = Vec::new();
    for_each_slot::<K, V>(tx, &r, from, to, |i, slot| {
        if owners.len() >= batch.max(1) {
            next = next.min(i);
            return Ok(());
        }
        blocks.clear();
        K::blocks(&slot[key_range::<K>()], &mut blocks);
        V::blocks(&slot[value_range::<K, V>()], &mut blocks);
        if !blocks.is_empty() {
            owners.push((i, slot.to_vec()));
        }
        Ok(())
    })?;
    let ranges: Vec<_> = owners
        .iter()
        .map(|&(i, _)| (r.slot(i, stride), 8, Hint::Word))
        .collect();
    tx.add_ranges(&ranges)?;
    tx.set_hint(Hint::Word);
    for (i, slot) in &owners {
        K::release(tx, &slot[key_range::<K>()])?;
        V::release(tx, &slot[value_range::<K, V>()])?;
        write_u64(tx, r.slot(*i, stride), 0)?;
    }
    if next < r.capacity {
        return Ok(Some(next));
    }
    tx.free(PPtr::from_offset(r.table), r.capacity * stride)?;
    tx.add_ranges(&[(at + RETIRED, 16, Hint::Object)])?;
    tx.write(PPtr::<[u64; 2]>::from_offset(at + RETIRED), &[0, 0])?;
    Ok(None)
}

/// Releases (at commit) every out-of-line key and value of the table `h`.
fn release_all<K: Element, V: Element>(tx: &mut Tx<'_>, h: &Header) -> Result<()> {
    let mut slots = Vec::new();
    for_each_slot::<K, V>(tx, h, 0, h.capacity, |_, slot| {
        let mut b = Vec::new();
        K::blocks(&slot[key_range::<K>()], &mut b);
        V::blocks(&slot[value_range::<K, V>()], &mut b);
        if !b.is_empty() {
            slots.push(slot.to_vec());
        }
        Ok(())
    })?;
    for slot in &slots {
        K::release(tx, &slot[key_range::<K>()])?;
        V::release(tx, &slot[value_range::<K, V>()])?;
    }
    Ok(())
}

/// Frees (at commit) every block of the map at `at`: entries, table, a retired
/// table and its entries, header. Each byte string is one free record: a map
/// of many byte strings needs a log that holds them all.
pub(crate) fn destroy<K: Element, V: Element>(tx: &mut Tx<'_>, at: u64) -> Result<()> {
    let stride = stride::<K, V>();
    let h = header::<K, V>(tx, at)?;
    release_all::<K, V>(tx, &h)?;
    tx.free(PPtr::from_offset(h.table), h.capacity * stride)?;
    if let Some(r) = retired::<K, V>(tx, at)? {
        release_all::<K, V>(tx, &r)?;
        tx.free(PPtr::from_offset(r.table), r.capacity * stride)?;
    }
    tx.free(PPtr::from_offset(at), HEADER_BYTES)?;
    Ok(())
}
