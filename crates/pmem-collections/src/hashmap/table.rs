//! The table algorithm of [`super::PHashMap`], over the offset of a header, so
//! that other maps (a striped concurrent map: one header per stripe) reuse it.
//!
//! Layout, every part an allocator block:
//!
//! | block | contents |
//! | --- | --- |
//! | header ([`HEADER_BYTES`]) | the 64-byte [`Tag`], then `len`, `capacity`, `table`, `retired`, `retired_capacity`, a reserved word |
//! | table | `capacity` slots of [`stride`] bytes: a control word, the key slot, the value slot |
//!
//! Open addressing with linear probing. A control word is 0 for an empty slot,
//! else `hash | 1 << 63` (`hash = K::hash_arg(key)`), so a probe compares whole
//! hashes before it reads a key, and a slot's home (`hash & (capacity - 1)`) is
//! known without reading its key (growth and deletion need it). `capacity` is a
//! power of two, at least [`MIN_CAPACITY`]; the table grows x2 when an insert would
//! load it past 7/8. Removal is backward-shift deletion: no tombstones, so a probe
//! ends at the first empty slot and a table never degrades.
//!
//! `clear` empties a map in one transaction by swapping in an empty table; the
//! old one is *retired* (recorded in the header) and its entries' blocks are freed
//! by later bounded transactions ([`drain_step`]), so that no transaction frees
//! more blocks than a log holds. A crash between them leaves the map empty and the
//! retired table reachable (no leak); opening the map finishes the draining.
//!
//! Every function here runs inside the caller's transaction (or reads through any
//! [`Media`]); nothing here chooses how it commits. Everything read from media is
//! checked before it steers a loop: a damaged header or a table without an empty
//! slot gives [`Error::Corrupt`], never a panic or an endless probe.

use pmem_core::tx::{Logging, Tx};
use pmem_core::PPtr;

use crate::element::{write_u64, Element, Media};
use crate::error::corrupt;
use crate::tag::{Tag, TAG_BYTES};
use crate::{Error, Result};

mod clear;
pub(crate) use clear::{clear, destroy, drain_step};

/// Layout version recorded in the tag.
pub(crate) const VERSION: u16 = 1;
/// Offset in the header of the entry count.
pub(crate) const LEN: u64 = TAG_BYTES;
/// Offset in the header of the capacity (the table's offset follows it).
pub(crate) const CAPACITY: u64 = TAG_BYTES + 8;
/// Offset in the header of the table's offset.
pub(crate) const TABLE: u64 = TAG_BYTES + 16;
/// Offset in the header of a cleared table still being drained (0: none); its
/// capacity follows.
pub(crate) const RETIRED: u64 = TAG_BYTES + 24;
// `grow_to` and `clear` write the capacity and the table's offset as one range.
const _: () = assert!(TABLE == CAPACITY + 8 && CAPACITY == LEN + 8 && RETIRED == TABLE + 8);
/// Bytes of a header block.
pub(crate) const HEADER_BYTES: u64 = TAG_BYTES + 48;
/// The smallest capacity.
pub(crate) const MIN_CAPACITY: u64 = 8;
/// The largest capacity trusted from media (also a bound on every walk).
pub(crate) const MAX_CAPACITY: u64 = 1 << 40;
/// The bit that marks a slot occupied.
const OCCUPIED: u64 = 1 << 63;
/// Slots read at once when a walk goes through the whole table.
const CHUNK: u64 = 1024;
/// Slots up to this size are staged on the stack.
const INLINE: usize = 128;

const WHAT: &str = "PHashMap";

/// Bytes of one slot: the control word, key slot and value slot, rounded up to 8.
pub(crate) const fn stride<K: Element, V: Element>() -> u64 {
    ((8 + K::SLOT + V::SLOT).div_ceil(8) * 8) as u64
}

/// The tag of a `PHashMap<K, V>` header.
pub(crate) fn tag<K: Element, V: Element>() -> Tag {
    Tag::new(
        crate::tag::Kind::HashMap,
        VERSION,
        Some((K::KEY, K::SLOT)),
        Some((V::KEY, V::SLOT)),
    )
}

/// The control word of a key's slot.
fn control<K: Element>(key: &K::Arg) -> u64 {
    K::hash_arg(key) | OCCUPIED
}

/// A header's words, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// Entries.
    pub len: u64,
    /// Slots (a power of two).
    pub capacity: u64,
    /// The table block's offset.
    pub table: u64,
}

impl Header {
    fn mask(&self) -> u64 {
        self.capacity - 1
    }

    /// The offset of slot `i` (`i < capacity`, so no overflow: checked in
    /// [`header`]).
    fn slot(&self, i: u64, stride: u64) -> u64 {
        self.table + i * stride
    }

    /// Whether an insert of a new key must grow the table first.
    pub fn needs_growth(&self) -> bool {
        // `len < capacity <= 2^40`: no overflow.
        self.len + 1 > self.capacity / 8 * 7
    }
}

/// Reads and checks the header at `at`.
pub(crate) fn header<K: Element, V: Element>(m: &(impl Media + ?Sized), at: u64) -> Result<Header> {
    let mut w = [0u8; 24];
    m.read_into(at + LEN, &mut w)?;
    let word = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&w[i * 8..i * 8 + 8]);
        u64::from_le_bytes(b)
    };
    let h = Header {
        len: word(0),
        capacity: word(1),
        table: word(2),
    };
    check_table::<K, V>(&h, at)?;
    // At least one empty slot always: probes end there.
    if h.len >= h.capacity {
        return Err(corrupt(
            WHAT,
            format!("{} entries in {} slots at {at:#x}", h.len, h.capacity),
        ));
    }
    Ok(h)
}

/// Checks a table's capacity and offset.
fn check_table<K: Element, V: Element>(h: &Header, at: u64) -> Result<()> {
    if !h.capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&h.capacity) {
        return Err(corrupt(WHAT, format!("capacity {} at {at:#x}", h.capacity)));
    }
    let end = h
        .capacity
        .checked_mul(stride::<K, V>())
        .and_then(|b| h.table.checked_add(b));
    if h.table == 0 || !h.table.is_multiple_of(8) || end.is_none() {
        return Err(corrupt(
            WHAT,
            format!("table offset {:#x} at {at:#x}", h.table),
        ));
    }
    Ok(())
}

/// The retired table of the map at `at` (left by [`clear`] until drained), if
/// any; its `len` is 0 (its entries are not counted).
pub(crate) fn retired<K: Element, V: Element>(
    m: &(impl Media + ?Sized),
    at: u64,
) -> Result<Option<Header>> {
    let mut w = [0u8; 16];
    m.read_into(at + RETIRED, &mut w)?;
    let mut b = [0u8; 8];
    b.copy_from_slice(&w[..8]);
    let table = u64::from_le_bytes(b);
    b.copy_from_slice(&w[8..]);
    let capacity = u64::from_le_bytes(b);
    if table == 0 {
        return Ok(None);
    }
    let h = Header {
        len: 0,
        capacity,
        table,
    };
    check_table::<K, V>(&h, at)?;
    Ok(Some(h))
}

/// Reads `out.len()` bytes of the table at `offset`: a read outside the pool means
/// the header's table offset is damaged.
fn read_table(m: &(impl Media + ?Sized), h: &Header, offset: u64, out: &mut [u8]) -> Result<()> {
    m.read_into(offset, out).map_err(|e| match e {
        Error::Pool(_) | Error::Tx(pmem_core::tx::TxError::Pool(_)) => corrupt(
            WHAT,
            format!(
                "table at {:#x} ({} slots) is not readable: {e}",
                h.table, h.capacity
            ),
        ),
        e => e,
    })
}

/// Runs `f` with a zeroed buffer of `len` bytes (on the stack when small).
fn with_buf<R>(len: u64, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
    let len = len as usize;
    if len <= INLINE {
        let mut b = [0u8; INLINE];
        f(&mut b[..len])
    } else {
        f(&mut vec![0u8; len])
    }
}

fn ctrl_of(slot: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&slot[..8]);
    u64::from_le_bytes(b)
}

/// The key part of a slot.
fn key_range<K: Element>() -> std::ops::Range<usize> {
    8..8 + K::SLOT
}

/// The value part of a slot.
fn value_range<K: Element, V: Element>() -> std::ops::Range<usize> {
    8 + K::SLOT..8 + K::SLOT + V::SLOT
}

/// Where a probe for a key ended.
enum Probe {
    /// The key's slot (its bytes are in the probe's buffer).
    Found(u64),
    /// The first empty slot on its path.
    Vacant(u64),
}

/// Probes for `key` from its home slot; `buf` (one slot) ends holding the last
/// slot read. At most `capacity` slots: a table without an empty slot is corrupt.
fn probe<K: Element, V: Element>(
    m: &(impl Media + ?Sized),
    h: &Header,
    key: &K::Arg,
    buf: &mut [u8],
) -> Result<Probe> {
    let stride = stride::<K, V>();
    let ctrl = control::<K>(key);
    let mut i = ctrl & h.mask();
    for _ in 0..h.capacity {
        read_table(m, h, h.slot(i, stride), buf)?;
        let c = ctrl_of(buf);
        if c == 0 {
            return Ok(Probe::Vacant(i));
        }
        if c == ctrl && K::eq_slot(m, &buf[key_range::<K>()], key)? {
            return Ok(Probe::Found(i));
        }
        i = (i + 1) & h.mask();
    }
    Err(corrupt(
        WHAT,
        format!("no empty slot among {} (table {:#x})", h.capacity, h.table),
    ))
}

/// Creates an empty table of `capacity` slots (a power of two, at least
/// [`MIN_CAPACITY`]) whose header carries `tag`; returns the header's offset.
pub(crate) fn create<K: Element, V: Element>(
    tx: &mut Tx<'_>,
    tag: &Tag,
    capacity: u64,
) -> Result<u64> {
    tag.check_ids()?;
    let bytes = table_bytes::<K, V>(capacity)?;
    let header = tx.alloc(HEADER_BYTES)?;
    // Zeroed: every control word says "empty".
    let table = tx.alloc(bytes)?;
    tx.write(header.cast::<Tag>(), tag)?;
    tx.write(
        PPtr::<[u64; 3]>::from_offset(header.offset() + LEN),
        &[0, capacity, table.offset()],
    )?;
    Ok(header.offset())
}

/// Bytes of a table of `capacity` slots, or an error if impossible.
fn table_bytes<K: Element, V: Element>(capacity: u64) -> Result<u64> {
    if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
        return Err(Error::TooLarge(format!("a hash table of {capacity} slots")));
    }
    capacity
        .checked_mul(stride::<K, V>())
        .ok_or_else(|| Error::TooLarge(format!("a hash table of {capacity} slots")))
}

/// The number of entries (the header's word).
pub(crate) fn len<K: Element, V: Element>(m: &(impl Media + ?Sized), at: u64) -> Result<u64> {
    Ok(header::<K, V>(m, at)?.len)
}

/// Whether an insert of a new key must first grow the table ([`grow`]).
pub(crate) fn needs_growth<K: Element, V: Element>(
    m: &(impl Media + ?Sized),
    at: u64,
) -> Result<bool> {
    Ok(header::<K, V>(m, at)?.needs_growth())
}

/// The value of `key`.
pub(crate) fn get<K: Element, V: Element>(
    m: &(impl Media + ?Sized),
    at: u64,
    key: &K::Arg,
) -> Result<Option<V::Out>> {
    let h = header::<K, V>(m, at)?;
    with_buf(stride::<K, V>(), |buf| {
        match probe::<K, V>(m, &h, key, buf)? {
            Probe::Found(_) => Ok(Some(V::get(m, &buf[value_range::<K, V>()])?)),
            Probe::Vacant(_) => Ok(None),
        }
    })
}

/// Inserts `key` or replaces its value, in `tx`; returns the old value. A new key
/// writes its slot and the count, both logged by one `add_ranges` call (one
/// snapshot fence in undo mode); a replacement writes the value slot and releases
/// the old value's block. The caller grows the table first when [`needs_growth`];
/// a new key in a table with one empty slot left fails with [`Error::TooLarge`].
pub(crate) fn insert<K: Element, V: Element>(
    tx: &mut Tx<'_>,
    at: u64,
    key: &K::Arg,
    value: &V::Arg,
    logging: Logging,
) -> Result<Option<V::Out>> {
    let h = header::<K, V>(tx, at)?;
    let stride = stride::<K, V>();
    with_buf(stride, |buf| match probe::<K, V>(tx, &h, key, buf)? {
        Probe::Found(i) => {
            let vr = value_range::<K, V>();
            let old = V::get(tx, &buf[vr.clone()])?;
            V::release(tx, &buf[vr.clone()])?;
            // A byte string's fresh block is logged only under `log_fresh`, then
            // with the hint of a large write.
            tx.set_hint(logging.hint_for(u64::MAX));
            V::put(tx, value, &mut buf[vr.clone()])?;
            let off = h.slot(i, stride) + vr.start as u64;
            let vlen = V::SLOT as u64;
            tx.add_ranges(&[(off, vlen, logging.hint_for(vlen))])?;
            tx.set_hint(logging.hint_for(vlen));
            tx.write_bytes(off, &buf[vr])?;
            Ok(Some(old))
        }
        Probe::Vacant(i) => {
            if h.len + 2 > h.capacity {
                return Err(Error::TooLarge(format!(
                    "a hash table of {} slots is full (grow it first)",
                    h.capacity
                )));
            }
            buf[..8].copy_from_slice(&control::<K>(key).to_le_bytes());
            tx.set_hint(logging.hint_for(u64::MAX));
            K::put(tx, key, &mut buf[key_range::<K>()])?;
            V::put(tx, value, &mut buf[value_range::<K, V>()])?;
            let off = h.slot(i, stride);
            // The slot and the count: everything the insert changes in place,
            // logged with one fence (a byte string's fresh block is not logged).
            tx.add_ranges(&[
                (off, stride, logging.hint_for(stride)),
                (at + LEN, 8, logging.hint_for(8)),
            ])?;
            tx.set_hint(logging.hint_for(stride));
            tx.write_bytes(off, buf)?;
            tx.set_hint(logging.hint_for(8));
            write_u64(tx, at + LEN, h.len + 1)?;
            Ok(None)
        }
    })
}

/// Whether `home` lies in the cyclic range `(hole, k]`: then the entry at `k`
/// cannot move back into `hole` (it would sit before its home).
fn between(hole: u64, home: u64, k: u64) -> bool {
    if hole <= k {
        hole < home && home <= k
    } else {
        hole < home || home <= k
    }
}

/// Removes `key` in `tx`; returns its value. Backward-shift deletion: each later
/// entry of the cluster that may move closer to its home moves into the hole, so
/// no tombstone is left. The moved slots and the count are logged by one
/// `add_ranges` call (runs of adjacent slots as one range each), then written.
pub(crate) fn remove<K: Element, V: Element>(
    tx: &mut Tx<'_>,
    at: u64,
    key: &K::Arg,
    logging: Logging,
) -> Result<Option<V::Out>> {
    let h = header::<K, V>(tx, at)?;
    let stride = stride::<K, V>();
    with_buf(stride, |buf| {
        let i = match probe::<K, V>(tx, &h, key, buf)? {
            Probe::Found(i) => i,
            Probe::Vacant(_) => return Ok(None),
        };
        let old = V::get(tx, &buf[value_range::<K, V>()])?;
        K::release(tx, &buf[key_range::<K>()])?;
        V::release(tx, &buf[value_range::<K, V>()])?;
        // Plan the shift (reads only): the slots that receive an entry, in order.
        let mut dsts = vec![i];
        let mut srcs = Vec::new();
        let (mut hole, mut k) = (i, i);
        let mut ended = false;
        let mut w = [0u8; 8];
        for _ in 0..h.capacity {
            k = (k + 1) & h.mask();
            read_table(tx, &h, h.slot(k, stride), &mut w)?;
            let c = u64::from_le_bytes(w);
            if c == 0 {
                ended = true;
                break;
            }
            if !between(hole, c & h.mask(), k) {
                srcs.push(k);
                dsts.push(k);
                hole = k;
            }
        }
        if !ended {
            return Err(corrupt(
                WHAT,
                format!("no empty slot among {} (table {:#x})", h.capacity, h.table),
            ));
        }
        // Every slot written lies between the removed one and the last hole (all
        // of `dsts`): log that span whole (at most two ranges, where it wraps
        // around the table's end), and the count. The slots in between that
        // stay put are logged too, so a long cluster costs log bytes but never
        // more than three records (runs of moved slots alone could take one
        // record each, and a cluster more records than a lane holds).
        let mut ranges = Vec::with_capacity(3);
        let first = dsts[0];
        let last = *dsts.last().unwrap_or(&first);
        if last >= first {
            let bytes = (last - first + 1) * stride;
            ranges.push((h.slot(first, stride), bytes, logging.hint_for(bytes)));
        } else {
            let tail = (h.capacity - first) * stride;
            ranges.push((h.slot(first, stride), tail, logging.hint_for(tail)));
            let head = (last + 1) * stride;
            ranges.push((h.slot(0, stride), head, logging.hint_for(head)));
        }
        ranges.push((at + LEN, 8, logging.hint_for(8)));
        tx.add_ranges(&ranges)?;
        // Each source is read before it is overwritten (it becomes the next
        // move's destination), so the moves read what was there.
        tx.set_hint(logging.hint_for(stride));
        for (n, &src) in srcs.iter().enumerate() {
            read_table(tx, &h, h.slot(src, stride), buf)?;
            tx.write_bytes(h.slot(dsts[n], stride), buf)?;
        }
        tx.set_hint(logging.hint_for(8));
        write_u64(tx, h.slot(hole, stride), 0)?;
        write_u64(tx, at + LEN, h.len - 1)?;
        Ok(Some(old))
    })
}

/// Calls `f(index, slot)` for every occupied slot, reading the table in chunks;
/// fails if their number is not the header's count.
pub(crate) fn for_each<K: Element, V: Element>(
    m: &(impl Media + ?Sized),
    h: &Header,
    f: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    let seen = for_each_slot::<K, V>(m, h, 0, h.capacity, f)?;
    if seen != h.len {
        return Err(corrupt(
            WHAT,
            format!("{seen} occupied slots but the count is {}", h.len),
        ));
    }
    Ok(())
}

/// Calls `f(index, slot)` for every occupied slot of `from..to` (clamped to the
/// capacity), reading in chunks; returns how many there were.
fn for_each_slot<K: Element, V: Element>(
    m: &(impl Media + ?Sized),
    h: &Header,
    from: u64,
    to: u64,
    mut f: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<u64> {
    let stride = stride::<K, V>();
    let to = to.min(h.capacity);
    let mut chunk = vec![0u8; (CHUNK.min(h.capacity) * stride) as usize];
    let mut seen = 0u64;
    let mut start = from;
    while start < to {
        let n = CHUNK.min(to - start);
        let bytes = &mut chunk[..(n * stride) as usize];
        read_table(m, h, h.slot(start, stride), bytes)?;
        for (j, slot) in bytes.chunks_exact(stride as usize).enumerate() {
            if ctrl_of(slot) != 0 {
                seen += 1;
                f(start + j as u64, slot)?;
            }
        }
        start += n;
    }
    Ok(seen)
}

/// Moves every entry into a fresh table of `capacity` slots (room for the
/// entries: see [`capacity_for`]), in `tx`: the new table is built in DRAM and written into a block the
/// transaction allocated (not logged in undo mode); out-of-line keys and values
/// move by pointer. Then the header's capacity and table change (logged) and the
/// old table is freed at commit.
pub(crate) fn grow_to<K: Element, V: Element>(
    tx: &mut Tx<'_>,
    at: u64,
    capacity: u64,
) -> Result<()> {
    let h = header::<K, V>(tx, at)?;
    let bytes = table_bytes::<K, V>(capacity)?;
    if capacity < capacity_for(h.len)? {
        return Err(Error::TooLarge(format!(
            "a table of {capacity} slots for {} entries",
            h.len
        )));
    }
    let stride = stride::<K, V>();
    let mask = capacity - 1;
    let len = usize::try_from(bytes).map_err(|_| Error::TooLarge(format!("{bytes} bytes")))?;
    let mut image = vec![0u8; len];
    for_each::<K, V>(tx, &h, |_, slot| {
        let mut i = ctrl_of(slot) & mask;
        // The new table has empty slots left: a probe ends.
        for _ in 0..capacity {
            let at = (i * stride) as usize;
            if ctrl_of(&image[at..at + 8]) == 0 {
                image[at..at + stride as usize].copy_from_slice(slot);
                return Ok(());
            }
            i = (i + 1) & mask;
        }
        Err(corrupt(WHAT, "more entries than the new table holds"))
    })?;
    let table = tx.alloc_uninit(bytes)?;
    tx.write_bytes(table.offset(), &image)?;
    tx.add_ranges(&[(at + CAPACITY, 16, pmem_core::tx::Hint::Object)])?;
    tx.write(
        PPtr::<[u64; 2]>::from_offset(at + CAPACITY),
        &[capacity, table.offset()],
    )?;
    tx.free(PPtr::from_offset(h.table), h.capacity * stride)?;
    Ok(())
}

/// Doubles the table (see [`grow_to`]).
pub(crate) fn grow<K: Element, V: Element>(tx: &mut Tx<'_>, at: u64) -> Result<()> {
    let h = header::<K, V>(tx, at)?;
    grow_to::<K, V>(tx, at, h.capacity * 2)
}

/// The capacity a table needs to hold `n` entries without growing.
pub(crate) fn capacity_for(n: u64) -> Result<u64> {
    // len + 1 <= capacity / 8 * 7  <=>  capacity >= (n + 1) * 8 / 7 (rounded up).
    let need = n
        .checked_add(1)
        .and_then(|x| x.checked_mul(8))
        .map(|x| x.div_ceil(7))
        .and_then(u64::checked_next_power_of_two)
        .filter(|&c| c <= MAX_CAPACITY)
        .ok_or_else(|| Error::TooLarge(format!("a hash table of {n} entries")))?;
    Ok(need.max(MIN_CAPACITY))
}

/// Every allocator block of the map at `at` (header, table, out-of-line keys and
/// values, a retired table and what it still owns), sorted; checks the count on
/// the way.
pub(crate) fn blocks<K: Element, V: Element>(
    m: &(impl Media + ?Sized),
    at: u64,
) -> Result<Vec<u64>> {
    let h = header::<K, V>(m, at)?;
    let mut out = vec![at, h.table];
    let mut add = |_, slot: &[u8]| {
        K::blocks(&slot[key_range::<K>()], &mut out);
        V::blocks(&slot[value_range::<K, V>()], &mut out);
        Ok(())
    };
    for_each::<K, V>(m, &h, &mut add)?;
    if let Some(r) = retired::<K, V>(m, at)? {
        for_each_slot::<K, V>(m, &r, 0, r.capacity, &mut add)?;
        out.push(r.table);
    }
    out.sort_unstable();
    Ok(out)
}

/// Checks every entry sits where a probe finds it (between its home and its slot
/// no slot is empty) and returns how many entries there are: for tests and
/// `fsck`-like checks after a crash.
pub(crate) fn check<K: Element, V: Element>(m: &(impl Media + ?Sized), at: u64) -> Result<u64> {
    let h = header::<K, V>(m, at)?;
    let stride = stride::<K, V>();
    let mut n = 0;
    let mut w = [0u8; 8];
    for_each::<K, V>(m, &h, |i, slot| {
        n += 1;
        let mut j = ctrl_of(slot) & h.mask();
        for _ in 0..h.capacity {
            if j == i {
                return Ok(());
            }
            read_table(m, &h, h.slot(j, stride), &mut w)?;
            if u64::from_le_bytes(w) == 0 {
                return Err(corrupt(
                    WHAT,
                    format!("slot {i} is not reachable from its home (slot {j} is empty)"),
                ));
            }
            j = (j + 1) & h.mask();
        }
        Err(corrupt(
            WHAT,
            format!("slot {i} is not reachable from its home"),
        ))
    })?;
    Ok(n)
}

/// The first occupied slot at or after `from`: its index and bytes (for iteration).
pub(crate) fn next_occupied<K: Element, V: Element>(
    m: &(impl Media + ?Sized),
    h: &Header,
    from: u64,
    buf: &mut [u8],
) -> Result<Option<u64>> {
    let stride = stride::<K, V>();
    let mut i = from;
    while i < h.capacity {
        read_table(m, h, h.slot(i, stride), buf)?;
        if ctrl_of(buf) != 0 {
            return Ok(Some(i));
        }
        i += 1;
    }
    Ok(None)
}

/// The key and value in an occupied slot.
pub(crate) fn entry<K: Element, V: Element>(
    m: &(impl Media + ?Sized),
    slot: &[u8],
) -> Result<(K::Out, V::Out)> {
    Ok((
        K::get(m, &slot[key_range::<K>()])?,
        V::get(m, &slot[value_range::<K, V>()])?,
    ))
}
