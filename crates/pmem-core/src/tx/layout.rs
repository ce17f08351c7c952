//! The on-media format of the transaction log.
//!
//! The log is a region of the pool: a header line, then `lanes` lanes of equal size.
//! A lane serves one transaction at a time. Following the NVWA paper's hybrid
//! logging, its *word log* and *object log* live apart, each with its metadata apart
//! from its data, and a third small log records allocations and frees:
//!
//! | offset in lane | size | contents |
//! | ---: | ---: | --- |
//! | 0 | 64 | `LaneHeader`: the lane's state word (TID, mode, phase) |
//! | 64 | 24 × `word_records` | `WordRecord`s: address, data pointer, check |
//! | … | 8 × `word_records` | word data (one word per record) |
//! | … | 32 × `object_records` | `ObjectRecord`s: address, data pointer, check, size |
//! | … | `object_bytes` | object data (each object from a 64-byte boundary) |
//! | … | 32 × `alloc_records` | `AllocRecord`s: allocations and frees |
//!
//! Every section starts on a 64-byte boundary. A record is valid for the lane's
//! current transaction only if its `check` word carries that transaction's TID and a
//! crc32c over the record and its data: records of earlier transactions, and records
//! torn by a crash, are both recognised as not belonging, so a lane is never cleared.
//! TIDs increase per lane (`lane + lanes × n`), so they are unique in the log.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Magic of a formatted log. Format 2: an allocation record's check covers its
/// block, and the allocator's bits are marked by the log (`tx_mark`).
pub(crate) const LOG_MAGIC: [u8; 8] = *b"PMKTXLG2";
/// The magic's prefix, shared by every format version.
pub(crate) const LOG_MAGIC_PREFIX: &[u8; 7] = b"PMKTXLG";
/// Bytes of a word record's metadata (the paper's 24 B).
pub const WORD_RECORD_BYTES: u64 = 24;
/// Bytes of an object record's metadata (the paper's 28 B, padded to 32).
pub const OBJECT_RECORD_BYTES: u64 = 32;
/// Bytes of an allocation record.
pub const ALLOC_RECORD_BYTES: u64 = 32;
const LINE: u64 = 64;

/// The log's header, written once at format (one line).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub(crate) struct LogHeader {
    pub magic: [u8; 8],
    pub lanes: u32,
    pub word_records: u32,
    pub object_records: u32,
    pub alloc_records: u32,
    pub object_bytes: u64,
    pub lane_size: u64,
    /// Where the allocator the log releases blocks to starts (0: none recorded).
    pub alloc_region: u64,
    /// Bytes of the lazy-commit ring's entries (0: no ring), after the lanes.
    pub ring_bytes: u64,
    pub checksum: u64,
}
const _: () = assert!(std::mem::size_of::<LogHeader>() == 64);

impl LogHeader {
    pub fn sealed(mut self) -> Self {
        self.checksum = crc(&self.as_bytes()[..56]);
        self
    }

    pub fn valid(&self) -> bool {
        self.magic == LOG_MAGIC && self.checksum == crc(&self.as_bytes()[..56])
    }
}

/// The lane's state word: `tid << 3 | mode << 2 | phase`, stored and persisted as
/// one failure-atomic 8-byte word.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub(crate) struct LaneHeader {
    pub state: u64,
    pub reserved: [u64; 7],
}
const _: () = assert!(std::mem::size_of::<LaneHeader>() == 64);

/// Where a lane's transaction stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No transaction (the TID is the last one the lane ran).
    Idle,
    /// Running: undo records hold the old data; redo records are not yet valid.
    Active,
    /// Committed, work after the commit point pending (redo apply, frees).
    Committed,
}

/// The state word's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaneState {
    pub tid: u64,
    pub redo: bool,
    pub phase: Phase,
}

impl LaneState {
    pub fn encode(self) -> u64 {
        let phase = match self.phase {
            Phase::Idle => 0,
            Phase::Active => 1,
            Phase::Committed => 2,
        };
        self.tid << 3 | u64::from(self.redo) << 2 | phase
    }

    /// `None` for a phase value no build writes (corrupt lane).
    pub fn decode(word: u64) -> Option<LaneState> {
        let phase = match word & 3 {
            0 => Phase::Idle,
            1 => Phase::Active,
            2 => Phase::Committed,
            _ => return None,
        };
        Some(LaneState {
            tid: word >> 3,
            redo: word & 4 != 0,
            phase,
        })
    }
}

/// Set in a word record's `addr` (always 8-aligned otherwise) and an object record's
/// `flags` when the logged bytes lie in a block the transaction allocated: rollback
/// skips them (see `TxOptions::log_fresh`).
pub(crate) const FRESH_FLAG: u64 = 1;

/// A word record: the 8 bytes at `addr` (undo: before the transaction; redo: after),
/// with [`FRESH_FLAG`] or-ed in for a fresh block's word.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub(crate) struct WordRecord {
    pub addr: u64,
    /// Pool offset of the record's data word in the word-data section.
    pub data: u64,
    pub check: u64,
}
const _: () = assert!(std::mem::size_of::<WordRecord>() as u64 == WORD_RECORD_BYTES);

/// An object record: `size` bytes at `addr`, copied to `data`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub(crate) struct ObjectRecord {
    pub addr: u64,
    pub data: u64,
    pub check: u64,
    pub size: u32,
    /// [`FRESH_FLAG`] or 0.
    pub flags: u32,
}
const _: () = assert!(std::mem::size_of::<ObjectRecord>() as u64 == OBJECT_RECORD_BYTES);

impl ObjectRecord {
    /// The fields its check word covers: all but the check itself.
    pub fn checked_fields(&self) -> [u8; 24] {
        let b = self.as_bytes();
        let mut out = [0u8; 24];
        out[..16].copy_from_slice(&b[..16]);
        out[16..].copy_from_slice(&b[24..]);
        out
    }
}

/// What an allocation record says.
pub(crate) const KIND_ALLOC: u64 = 1;
pub(crate) const KIND_FREE: u64 = 2;

/// An allocation record: the transaction allocates (`KIND_ALLOC`) or frees
/// (`KIND_FREE`) `block` of `size` bytes. The check covers all three fields. The
/// record is durable before the allocator's bits for the block are marked, so a
/// rollback can always unmark them (an allocation) or mark them again (a free).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub(crate) struct AllocRecord {
    pub kind: u64,
    pub size: u64,
    pub block: u64,
    pub check: u64,
}
const _: () = assert!(std::mem::size_of::<AllocRecord>() as u64 == ALLOC_RECORD_BYTES);

pub(crate) fn crc(bytes: &[u8]) -> u64 {
    u64::from(crc32c::crc32c(bytes))
}

/// The check word of a record: the TID's low 32 bits over a crc32c of the record's
/// fields, the full TID and the data.
pub(crate) fn check_word(tid: u64, fields: &[u8], data: &[u8]) -> u64 {
    let c = crc32c::crc32c_append(crc32c::crc32c(fields), &tid.to_le_bytes());
    let c = crc32c::crc32c_append(c, data);
    (tid & 0xffff_ffff) << 32 | u64::from(c)
}

/// Sizes of one lane's sections, and where each starts (relative to the lane).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaneGeometry {
    pub word_records: u64,
    pub object_records: u64,
    pub object_bytes: u64,
    pub alloc_records: u64,
    pub word_meta: u64,
    pub word_data: u64,
    pub object_meta: u64,
    pub object_data: u64,
    pub alloc_meta: u64,
    pub size: u64,
}

fn round_line(n: u64) -> u64 {
    n.div_ceil(LINE) * LINE
}

impl LaneGeometry {
    pub fn new(
        word_records: u64,
        object_records: u64,
        object_bytes: u64,
        alloc_records: u64,
    ) -> Self {
        let word_meta = LINE;
        let word_data = word_meta + round_line(word_records * WORD_RECORD_BYTES);
        let object_meta = word_data + round_line(word_records * 8);
        let object_data = object_meta + round_line(object_records * OBJECT_RECORD_BYTES);
        let alloc_meta = object_data + round_line(object_bytes);
        let size = alloc_meta + round_line(alloc_records * ALLOC_RECORD_BYTES);
        LaneGeometry {
            word_records,
            object_records,
            object_bytes: round_line(object_bytes),
            alloc_records,
            word_meta,
            word_data,
            object_meta,
            object_data,
            alloc_meta,
            size,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_word_round_trips() {
        for phase in [Phase::Idle, Phase::Active, Phase::Committed] {
            for redo in [false, true] {
                let s = LaneState {
                    tid: 0x1234_5678_9abc,
                    redo,
                    phase,
                };
                assert_eq!(LaneState::decode(s.encode()), Some(s));
            }
        }
        assert_eq!(LaneState::decode(3), None);
    }

    #[test]
    fn sections_are_line_aligned_and_disjoint() {
        let g = LaneGeometry::new(10, 3, 100, 2);
        for off in [
            g.word_meta,
            g.word_data,
            g.object_meta,
            g.object_data,
            g.alloc_meta,
            g.size,
        ] {
            assert_eq!(off % 64, 0);
        }
        assert!(g.word_data >= g.word_meta + 10 * 24);
        assert!(g.object_meta >= g.word_data + 80);
        assert!(g.object_data >= g.object_meta + 96);
        assert!(g.alloc_meta >= g.object_data + 100);
        assert!(g.size >= g.alloc_meta + 64);
    }

    #[test]
    fn checks_bind_the_tid_and_the_data() {
        let a = check_word(7, b"fields", b"data");
        assert_ne!(a, check_word(8, b"fields", b"data"));
        assert_ne!(a, check_word(7, b"fields", b"datb"));
        assert_eq!(a >> 32, 7);
    }
}
