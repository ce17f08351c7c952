//! The record format both engines write: a 32-byte header (checksum, lengths, Raft
//! index and term, kind) followed by the key and the value, padded to 8 bytes.
//!
//! The list engine lays records into pool pages; the WAL engine writes the same bytes
//! to its log file, so one decoder validates both. The crc32c covers everything after
//! the checksum field, so a torn or corrupt record is detected, never misread.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::{Result, StoreError};

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
    pub fn entry(index: u64, term: u64, op: crate::store::Op<'a>) -> Record<'a> {
        use crate::store::Op;
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

    /// Appends the encoded record (with its padding) to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<()> {
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
        h.crc = crc32c::crc32c(&out[start + 4..end]);
        out[start..start + 4].copy_from_slice(&h.crc.to_le_bytes());
        Ok(())
    }
}

/// Decodes and verifies the record at the start of `bytes`; returns it and its
/// padded length. `what` names the place for error messages.
pub fn decode<'a>(bytes: &'a [u8], what: &dyn Fn() -> String) -> Result<(Record<'a>, usize)> {
    decode_checked(bytes, what, true)
}

/// [`decode`] without the checksum pass (bounds and kind are still checked), for
/// records whose checksum is verified elsewhere: recovery checks them on a second
/// thread while it replays them, and reads come from records verified when they
/// were indexed.
pub fn decode_unverified<'a>(
    bytes: &'a [u8],
    what: &dyn Fn() -> String,
) -> Result<(Record<'a>, usize)> {
    decode_checked(bytes, what, false)
}

fn decode_checked<'a>(
    bytes: &'a [u8],
    what: &dyn Fn() -> String,
    verify: bool,
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
    if verify && crc32c::crc32c(&bytes[4..body]) != h.crc {
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
