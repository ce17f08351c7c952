//! The record format both engines write: a 32-byte header (checksum, lengths, Raft
//! index and term, kind) followed by the key and the value, padded to 8 bytes.
//!
//! The list engine lays records into pool pages; the WAL engine writes the same bytes
//! to its log file, so one decoder validates both. The crc32c covers everything after
//! the checksum field, so a torn or corrupt record is detected, never misread.
//!
//! The checksum can be *seeded*: the list engine stamps every record with the
//! generation of the page it lies in (a number never reused for another page link),
//! folded into the crc32c before the record's bytes. A record left in a reused page
//! by an earlier generation then fails its checksum, so recovery can scan past the
//! last known durable point and stop exactly where this generation's records end.
//! Seed 0 is the plain checksum (the WAL's).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::storage::error::{Result, StoreError};

/// Size of [`RecordHeader`].
pub const HEADER_LEN: usize = 32;

/// What a record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A new version of a key.
    Put = 1,
    /// A tombstone version of a key.
    Delete = 2,
    /// A Raft entry that changes no key (a new leader's first entry).
    Noop = 3,
    /// Discards every entry with an index above the record's index that precedes it.
    Rollback = 4,
    /// Everything at or below the record's index that is not in the list was
    /// compacted away or came with a snapshot; the record's term is that index's term.
    Base = 5,
    /// The Raft hard state (WAL engine only; the list keeps it in the control block).
    HardState = 6,
    /// A piece of a value too large for one list page (list engine only): it belongs
    /// to the [`Kind::PutLarge`] of the same index that follows it, and is nothing by
    /// itself.
    Fragment = 7,
    /// A new version of a key whose value lies in the [`Kind::Fragment`] records
    /// this record's value lists (list engine only; see `list::large`).
    PutLarge = 8,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Put,
            2 => Kind::Delete,
            3 => Kind::Noop,
            4 => Kind::Rollback,
            5 => Kind::Base,
            6 => Kind::HardState,
            7 => Kind::Fragment,
            8 => Kind::PutLarge,
            _ => return None,
        })
    }
}

/// The on-media header of a record (little-endian).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct RecordHeader {
    /// crc32c of the header after this field, the key and the value.
    pub crc: u32,
    /// Value length in bytes.
    pub value_len: u32,
    /// Raft index (the MVCC timestamp).
    pub index: u64,
    /// Raft term.
    pub term: u64,
    /// Key length in bytes.
    pub key_len: u16,
    /// [`Kind`] as a byte.
    pub kind: u8,
    /// Zero.
    pub pad: [u8; 5],
}

const _: () = assert!(std::mem::size_of::<RecordHeader>() == HEADER_LEN);

/// A decoded record borrowing its key and value from the media.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// What it is.
    pub kind: Kind,
    /// Raft index.
    pub index: u64,
    /// Raft term.
    pub term: u64,
    /// The key (empty for non-key records).
    pub key: &'a [u8],
    /// The value (empty unless `Put`).
    pub value: &'a [u8],
}

/// Bytes a record with these lengths occupies, padded to 8.
pub fn encoded_len(key_len: usize, value_len: usize) -> usize {
    (HEADER_LEN + key_len + value_len + 7) & !7
}

impl<'a> Record<'a> {
    /// The record of Raft entry `(index, term)` doing `op`.
    pub fn entry(index: u64, term: u64, op: crate::storage::store::Op<'a>) -> Record<'a> {
        use crate::storage::store::Op;
        let (kind, key, value): (Kind, &[u8], &[u8]) = match op {
            Op::Put { key, value } => (Kind::Put, key, value),
            Op::Delete { key } => (Kind::Delete, key, &[]),
            Op::Noop => (Kind::Noop, &[], &[]),
        };
        Record {
            kind,
            index,
            term,
            key,
            value,
        }
    }

    /// A record with no key and no value (no-op, rollback, base).
    pub fn bare(kind: Kind, index: u64, term: u64) -> Record<'static> {
        Record {
            kind,
            index,
            term,
            key: &[],
            value: &[],
        }
    }

    /// Appends the encoded record (with its padding) to `out`, with the plain
    /// checksum (seed 0).
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<()> {
        self.encode_seeded(out, 0)
    }

    /// Appends the encoded record (with its padding) to `out`, its checksum seeded
    /// with `seed` (see the module documentation).
    pub fn encode_seeded(&self, out: &mut Vec<u8>, seed: u64) -> Result<()> {
        let key_len = u16::try_from(self.key.len()).map_err(|_| {
            StoreError::Invalid(format!("key of {} bytes (max 65535)", self.key.len()))
        })?;
        let value_len = u32::try_from(self.value.len()).map_err(|_| {
            StoreError::Invalid(format!("value of {} bytes (max 4 GiB)", self.value.len()))
        })?;
        let start = out.len();
        let mut h = RecordHeader {
            crc: 0,
            value_len,
            index: self.index,
            term: self.term,
            key_len,
            kind: self.kind as u8,
            pad: [0; 5],
        };
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(self.key);
        out.extend_from_slice(self.value);
        out.resize(start + encoded_len(self.key.len(), self.value.len()), 0);
        let end = start + HEADER_LEN + self.key.len() + self.value.len();
        h.crc = checksum(seed, &out[start + 4..end]);
        out[start..start + 4].copy_from_slice(&h.crc.to_le_bytes());
        Ok(())
    }
}

/// The checksum of a record's bytes after the checksum field, seeded with `seed`
/// (0: the plain crc32c).
pub fn checksum(seed: u64, body: &[u8]) -> u32 {
    if seed == 0 {
        crc32c::crc32c(body)
    } else {
        crc32c::crc32c_append(crc32c::crc32c(&seed.to_le_bytes()), body)
    }
}

/// Rewrites the checksum of the encoded record at the start of `bytes` for `seed`
/// (a record copied into a page of another generation). The record's lengths must
/// have been checked: `bytes` holds at least the whole record.
pub fn reseed(bytes: &mut [u8], seed: u64) -> Result<()> {
    let (h, _) = RecordHeader::read_from_prefix(bytes)
        .map_err(|_| StoreError::Corrupt("reseeding a truncated record header".into()))?;
    let body = HEADER_LEN + usize::from(h.key_len) + h.value_len as usize;
    let Some(covered) = bytes.get(4..body) else {
        return Err(StoreError::Corrupt(format!(
            "reseeding a record of {body} bytes from {} bytes",
            bytes.len()
        )));
    };
    let crc = checksum(seed, covered);
    bytes[..4].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Decodes and verifies the record at the start of `bytes`; returns it and its
/// padded length. `what` names the place for error messages.
pub fn decode<'a>(bytes: &'a [u8], what: &dyn Fn() -> String) -> Result<(Record<'a>, usize)> {
    decode_checked(bytes, what, Some(0))
}

/// [`decode`] for a record whose checksum was seeded with `seed`.
pub fn decode_seeded<'a>(
    bytes: &'a [u8],
    seed: u64,
    what: &dyn Fn() -> String,
) -> Result<(Record<'a>, usize)> {
    decode_checked(bytes, what, Some(seed))
}

/// [`decode`] without the checksum pass (bounds and kind are still checked), for
/// records whose checksum is verified elsewhere: recovery checks them on a second
/// thread while it replays them, and reads come from records verified when they
/// were indexed.
pub fn decode_unverified<'a>(
    bytes: &'a [u8],
    what: &dyn Fn() -> String,
) -> Result<(Record<'a>, usize)> {
    decode_checked(bytes, what, None)
}

/// Decodes the record at the start of `bytes`, verifying its checksum with the seed
/// `verify` holds (none: not verified).
fn decode_checked<'a>(
    bytes: &'a [u8],
    what: &dyn Fn() -> String,
    verify: Option<u64>,
) -> Result<(Record<'a>, usize)> {
    let (h, _) = RecordHeader::read_from_prefix(bytes)
        .map_err(|_| StoreError::Corrupt(format!("{}: truncated record header", what())))?;
    let body = HEADER_LEN + usize::from(h.key_len) + h.value_len as usize;
    if body > bytes.len() {
        return Err(StoreError::Corrupt(format!(
            "{}: record of {body} bytes runs past the end ({} left)",
            what(),
            bytes.len()
        )));
    }
    if verify.is_some_and(|seed| checksum(seed, &bytes[4..body]) != h.crc) {
        return Err(StoreError::Corrupt(format!(
            "{}: record checksum mismatch",
            what()
        )));
    }
    let kind = Kind::from_u8(h.kind).ok_or_else(|| {
        StoreError::Corrupt(format!("{}: unknown record kind {}", what(), h.kind))
    })?;
    let key = &bytes[HEADER_LEN..HEADER_LEN + usize::from(h.key_len)];
    let value = &bytes[HEADER_LEN + usize::from(h.key_len)..body];
    let rec = Record {
        kind,
        index: h.index,
        term: h.term,
        key,
        value,
    };
    Ok((rec, encoded_len(key.len(), value.len()).min(bytes.len())))
}

/// Reads the value of a record already verified when it was indexed (no checksum
/// pass: this is the read path); bounds are still checked.
pub fn value_of(bytes: &[u8]) -> Option<&[u8]> {
    let (h, _) = RecordHeader::read_from_prefix(bytes).ok()?;
    let start = HEADER_LEN + usize::from(h.key_len);
    bytes.get(start..start + h.value_len as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn what() -> String {
        "test".into()
    }

    #[test]
    fn round_trip_and_padding() {
        let r = Record {
            kind: Kind::Put,
            index: 7,
            term: 3,
            key: b"key",
            value: b"value!",
        };
        let mut buf = Vec::new();
        r.encode_into(&mut buf).expect("encodes");
        assert_eq!(buf.len(), 48);
        let (d, len) = decode(&buf, &what).expect("decodes");
        assert_eq!((d, len), (r, 48));
        assert_eq!(value_of(&buf), Some(&b"value!"[..]));
    }

    #[test]
    fn every_flipped_byte_is_detected_or_harmless() {
        let r = Record {
            kind: Kind::Delete,
            index: 1,
            term: 1,
            key: b"k",
            value: b"",
        };
        let mut buf = Vec::new();
        r.encode_into(&mut buf).expect("encodes");
        let body = HEADER_LEN + 1;
        for i in 0..body {
            let mut bad = buf.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad, &what).is_err(), "flip at {i} went unnoticed");
        }
    }

    /// A record sealed for one generation fails under any other, and reseeding
    /// moves it to another generation; seed 0 is the plain checksum.
    #[test]
    fn seeded_checksums_tell_generations_apart() {
        let r = Record {
            kind: Kind::Put,
            index: 9,
            term: 2,
            key: b"key",
            value: b"value",
        };
        let mut buf = Vec::new();
        r.encode_seeded(&mut buf, 7).expect("encodes");
        assert!(decode_seeded(&buf, 7, &what).is_ok());
        assert!(decode_seeded(&buf, 8, &what).is_err());
        assert!(decode(&buf, &what).is_err());
        reseed(&mut buf, 8).expect("reseeds");
        assert_eq!(decode_seeded(&buf, 8, &what).expect("decodes").0, r);
        assert!(decode_seeded(&buf, 7, &what).is_err());
        let mut plain = Vec::new();
        r.encode_into(&mut plain).expect("encodes");
        reseed(&mut buf, 0).expect("reseeds");
        assert_eq!(buf, plain);
        assert!(reseed(&mut buf[..20], 1).is_err());
    }

    #[test]
    fn truncation_is_an_error_not_a_panic() {
        let r = Record {
            kind: Kind::Put,
            index: 1,
            term: 1,
            key: b"key",
            value: b"v",
        };
        let mut buf = Vec::new();
        r.encode_into(&mut buf).expect("encodes");
        for n in 0..buf.len() - 4 {
            assert!(decode(&buf[..n], &what).is_err());
        }
    }
}
