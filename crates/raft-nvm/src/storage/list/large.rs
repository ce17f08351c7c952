//! Values larger than one page.
//!
//! A put whose record would not fit a page — or, for a value of at least an eighth
//! of a page, would not fit what is left of the tail page when that is an eighth of
//! a page or more (so pages are not left a quarter empty) — is written as
//! [`Kind::Fragment`] records
//! holding the value's bytes in order (the first fills what is left of the tail
//! page, the others a page each), then one small [`Kind::PutLarge`] record with the
//! key whose value is the *table* of the fragments' pool offsets. The index points
//! at the `PutLarge`; a read follows the table. The fragments precede the `PutLarge`
//! in the list, so a crash that keeps the `PutLarge` keeps them all (recovery keeps
//! a prefix), and a crash that cuts between them leaves fragments nothing points to
//! (recovery skips them; compaction drops them).
//!
//! Table layout (little-endian): `total: u64`, `count: u32`, zero `u32`, then
//! `count` offsets `u64`. The table must fit one page, which bounds a value at
//! about `(page - 64) / 8` pages ([`max_large_value`]).

use super::append::Tail;
use super::Shared;
use crate::storage::error::{Result, StoreError};
use crate::storage::record::{decode_unverified, encoded_len, Kind, Record, HEADER_LEN};

/// Bytes of the table before its offsets.
const TABLE_HEAD: usize = 16;

/// Fragment payloads smaller than this are not worth a record: the next fragment
/// starts a fresh page instead.
const MIN_FRAGMENT: usize = 64;

/// The largest record a page holds (see `super::max_record`), as a `usize`.
fn room(s: &Shared) -> usize {
    usize::try_from(super::max_record(s.geo.page_size)).unwrap_or(usize::MAX)
}

/// The largest value a page of `page_size` bytes can hold through fragments, with
/// a key of `key_len` bytes.
pub(crate) fn max_large_value(page_size: u32, key_len: usize) -> usize {
    let room = usize::try_from(super::max_record(page_size)).unwrap_or(usize::MAX) & !7;
    let table_room = room.saturating_sub(HEADER_LEN + key_len + TABLE_HEAD);
    let fragments = table_room / 8;
    fragments * (room - HEADER_LEN)
}

/// Writes `value` of key `key` (entry `index`, `term`) as fragments and a
/// `PutLarge` record; returns the `PutLarge`'s pool offset.
pub(crate) fn write_put_large(
    s: &Shared,
    t: &mut Tail,
    index: u64,
    term: u64,
    key: &[u8],
    value: &[u8],
) -> Result<u64> {
    let max = max_large_value(s.geo.page_size, key.len());
    if value.len() > max {
        return Err(StoreError::TooLarge {
            size: (HEADER_LEN + key.len() + value.len()) as u64,
            max: max as u64,
        });
    }
    let page = s.geo.page_size as usize;
    let full = (room(s) - HEADER_LEN) & !7;
    let mut offsets = Vec::new();
    let mut rest = value;
    while !rest.is_empty() {
        let left = page.saturating_sub(t.used as usize + HEADER_LEN) & !7;
        let here = if t.must_advance || left < MIN_FRAGMENT {
            full
        } else {
            left
        };
        let n = rest.len().min(here);
        let fragment = Record {
            kind: Kind::Fragment,
            index,
            term,
            key: &[],
            value: &rest[..n],
        };
        offsets.push(s.write_record(t, &fragment)?);
        rest = &rest[n..];
    }
    let table = encode_table(value.len() as u64, &offsets);
    let rec = Record {
        kind: Kind::PutLarge,
        index,
        term,
        key,
        value: &table,
    };
    s.write_record(t, &rec)
}

/// The value of a `PutLarge` record's table.
pub(crate) fn encode_table(total: u64, offsets: &[u64]) -> Vec<u8> {
    let mut table = Vec::with_capacity(TABLE_HEAD + 8 * offsets.len());
    table.extend_from_slice(&total.to_le_bytes());
    table.extend_from_slice(&(offsets.len() as u32).to_le_bytes());
    table.extend_from_slice(&0u32.to_le_bytes());
    for off in offsets {
        table.extend_from_slice(&off.to_le_bytes());
    }
    table
}

/// The total length and fragment offsets of a `PutLarge` record's table.
pub(crate) fn decode_table(table: &[u8]) -> Result<(u64, Vec<u64>)> {
    let bad = || StoreError::Corrupt(format!("a large value's table of {} bytes", table.len()));
    let word = |at: usize| -> Result<u64> {
        let b: [u8; 8] = table
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(bad)?;
        Ok(u64::from_le_bytes(b))
    };
    let total = word(0)?;
    let count = word(8)? & u64::from(u32::MAX);
    let count = usize::try_from(count).map_err(|_| bad())?;
    if table.len() != TABLE_HEAD + 8 * count {
        return Err(bad());
    }
    let offsets = (0..count)
        .map(|i| word(TABLE_HEAD + 8 * i))
        .collect::<Result<Vec<u64>>>()?;
    Ok((total, offsets))
}

impl Shared {
    /// The fragment record at `off`, checked to belong to entry `index`.
    pub(crate) fn fragment_at(&self, off: u64, index: u64) -> Result<&[u8]> {
        let bytes = self.record_bytes(off)?;
        let (rec, _) = decode_unverified(bytes, &|| format!("fragment at offset {off}"))?;
        if rec.kind != Kind::Fragment || rec.index != index {
            return Err(StoreError::Corrupt(format!(
                "entry {index}: the record at offset {off} is not one of its fragments"
            )));
        }
        Ok(bytes)
    }

    /// Assembles the value of a `PutLarge` record of entry `index` from its table.
    pub(crate) fn large_value(&self, index: u64, table: &[u8]) -> Result<Vec<u8>> {
        let (total, offsets) = decode_table(table)?;
        // Reserved up to what the fragments can hold, not what the table claims:
        // a damaged `total` must not make a read allocate (recovery checks it).
        let bound = offsets.len().saturating_mul(room(self));
        let mut value = Vec::with_capacity(usize::try_from(total).unwrap_or(0).min(bound));
        for off in offsets {
            let bytes = self.fragment_at(off, index)?;
            let piece = crate::storage::record::value_of(bytes).ok_or_else(|| {
                StoreError::Corrupt(format!("fragment at offset {off} is cut short"))
            })?;
            value.extend_from_slice(piece);
        }
        if value.len() as u64 != total {
            return Err(StoreError::Corrupt(format!(
                "entry {index}: fragments hold {} bytes of a {total}-byte value",
                value.len()
            )));
        }
        Ok(value)
    }
}

/// Encoded lengths of the fragment records of a `PutLarge` whose table is `table`
/// (for compaction's page planning), read from the fragments' headers.
pub(crate) fn fragment_lens(s: &Shared, index: u64, table: &[u8]) -> Result<Vec<(u64, usize)>> {
    let (_, offsets) = decode_table(table)?;
    offsets
        .into_iter()
        .map(|off| {
            let bytes = s.fragment_at(off, index)?;
            let value = crate::storage::record::value_of(bytes).map_or(0, <[u8]>::len);
            Ok((off, encoded_len(0, value)))
        })
        .collect()
}
