//! The records of NVWA's allocation log (the paper's §4.2, Fig. 12): the only
//! allocator state on the media. The paper names two levels — one record per
//! allocated object (level 1) and one per page run that locates it (level 2) — but
//! gives no layout; this is ours.
//!
//! **One record is one aligned 8-byte word.** An aligned 8-byte store is
//! failure-atomic on x86, so no record can tear, even under the crash simulator's
//! word model, and none needs a checksum. Eight records share a cache line, so an
//! append costs one line flush, and the in-place updates (a free's exclude bit, a
//! realloc's length) rewrite one word. The word 0 is never a record: the log is
//! zeroed, and a zero word is a slot no operation wrote (a hole left by a thread
//! that crashed between reserving and writing it, or the unused tail).
//!
//! | bits | `Run` (level 2) | `Obj` (level 1) | `Del` | `Pub` |
//! | --- | --- | --- | --- | --- |
//! | 0–2 | tag 1 | tag 2 | tag 3 | tag 4 |
//! | 3 | class (7 bits, 3–9) | exclude | position (61 bits) | slot / 8 (61 bits) |
//! | 4 | | publish pending | | |
//! | 5–24 | pages (14 bits, 10–23) | length / 16 (20 bits) | | |
//! | 24/25–63 | first page (40 bits) | offset / 16 (39 bits) | | |
//!
//! Offsets of objects and pages are relative to the heap's start; a slot is a
//! pool offset. A `Del` names the log position of the `Obj` record it deletes, not
//! the object's offset: threads append into their own chunks of the log, so
//! positions do not follow the order of operations across threads, and an offset
//! can have several records (earlier lives of the space); a position has one.

/// Bytes of the heap's pages.
pub const PAGE: u64 = 4096;
/// Object alignment and the unit of object offsets and lengths.
pub const UNIT: u64 = 16;
/// Longest object a record describes (20 bits of 16-byte units).
pub const MAX_LEN: u64 = ((1 << 20) - 1) * UNIT;
/// Largest object offset (39 bits of 16-byte units: 8 TiB).
pub const MAX_OFFSET: u64 = ((1 << 39) - 1) * UNIT;
/// Most pages of a run (14 bits).
pub const MAX_RUN_PAGES: u64 = (1 << 14) - 1;
/// Largest log position a `Del` names (61 bits).
pub const MAX_POSITION: u64 = (1 << 61) - 1;
/// Most size classes (7 bits).
pub const MAX_CLASSES: u8 = 127;

const TAG_BITS: u32 = 3;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const TAG_RUN: u64 = 1;
const TAG_OBJ: u64 = 2;
const TAG_DEL: u64 = 3;
const TAG_PUB: u64 = 4;

const OBJ_EXCLUDE: u64 = 1 << 3;
const OBJ_PENDING: u64 = 1 << 4;
const OBJ_LEN_SHIFT: u32 = 5;
const OBJ_LEN_BITS: u32 = 20;
const OBJ_OFFSET_SHIFT: u32 = 25;

const RUN_CLASS_SHIFT: u32 = 3;
const RUN_PAGES_SHIFT: u32 = 10;
const RUN_PAGE_SHIFT: u32 = 24;

/// One record of the allocation log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// Level 2: a run of `pages` pages from heap page `first_page`, holding
    /// objects of size class `class` (a large object's run has its own class).
    Run {
        /// The size class.
        class: u8,
        /// Pages of the run.
        pages: u64,
        /// The run's first page (heap offset / [`PAGE`]).
        first_page: u64,
    },
    /// Level 1: an allocated object.
    Obj {
        /// Heap offset of the object.
        offset: u64,
        /// Its length in bytes (a multiple of [`UNIT`]).
        len: u64,
        /// Freed in place (the paper's exclude bit): the record no longer counts.
        exclude: bool,
        /// An `alloc_publish` whose slot store may not be durable yet; the
        /// [`Record::Pub`] just before it names the slot.
        pending: bool,
    },
    /// The object whose `Obj` record is at log position `position` was freed
    /// (the free-by-append mode).
    Del {
        /// Log position of the deleted object's record.
        position: u64,
    },
    /// The publication slot of the `Obj` record that follows.
    Pub {
        /// Pool offset of the slot (8-byte aligned).
        slot: u64,
    },
}

/// A record that cannot be encoded, or a word that is not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// A field does not fit its bits or breaks its alignment.
    #[error("{field} {value:#x} cannot be recorded: {reason}")]
    Field {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A log word with an unknown tag or impossible fields (a corrupt log).
    #[error("log word {0:#018x} is not a record")]
    NotARecord(u64),
}

fn field(
    name: &'static str,
    value: u64,
    unit: u64,
    max: u64,
    what: &'static str,
) -> Result<u64, RecordError> {
    if !value.is_multiple_of(unit) {
        return Err(RecordError::Field {
            field: name,
            value,
            reason: "misaligned",
        });
    }
    if value > max {
        return Err(RecordError::Field {
            field: name,
            value,
            reason: what,
        });
    }
    Ok(value / unit)
}

/// An object length as the record's 16-byte units (not 0, at most [`MAX_LEN`]).
fn len_units(len: u64) -> Result<u64, RecordError> {
    let units = field("length", len, UNIT, MAX_LEN, "longer than 16 MiB")?;
    if units == 0 {
        return Err(RecordError::Field {
            field: "length",
            value: 0,
            reason: "an empty object",
        });
    }
    Ok(units)
}

impl Record {
    /// The record's word (never 0).
    pub fn encode(self) -> Result<u64, RecordError> {
        Ok(match self {
            Record::Run {
                class,
                pages,
                first_page,
            } => {
                if class > MAX_CLASSES {
                    return Err(RecordError::Field {
                        field: "class",
                        value: u64::from(class),
                        reason: "more than 127 classes",
                    });
                }
                let pages = field("pages", pages, 1, MAX_RUN_PAGES, "longer than a run")?;
                if pages == 0 {
                    return Err(RecordError::Field {
                        field: "pages",
                        value: 0,
                        reason: "an empty run",
                    });
                }
                let first = field("first page", first_page, 1, (1 << 40) - 1, "past 4 PiB")?;
                TAG_RUN
                    | u64::from(class) << RUN_CLASS_SHIFT
                    | pages << RUN_PAGES_SHIFT
                    | first << RUN_PAGE_SHIFT
            }
            Record::Obj {
                offset,
                len,
                exclude,
                pending,
            } => {
                let units = len_units(len)?;
                let at = field("offset", offset, UNIT, MAX_OFFSET, "past 8 TiB")?;
                TAG_OBJ
                    | if exclude { OBJ_EXCLUDE } else { 0 }
                    | if pending { OBJ_PENDING } else { 0 }
                    | units << OBJ_LEN_SHIFT
                    | at << OBJ_OFFSET_SHIFT
            }
            Record::Del { position } => {
                TAG_DEL | field("position", position, 1, MAX_POSITION, "past the log")? << TAG_BITS
            }
            Record::Pub { slot } => {
                TAG_PUB | field("slot", slot, 8, u64::MAX >> TAG_BITS << 3, "too far")? << TAG_BITS
            }
        })
    }

    /// The record of a log word: `None` for 0 (a slot no operation wrote).
    pub fn decode(word: u64) -> Result<Option<Record>, RecordError> {
        let body = word >> TAG_BITS;
        Ok(Some(match word & TAG_MASK {
            0 if word == 0 => return Ok(None),
            TAG_RUN => {
                let pages = (word >> RUN_PAGES_SHIFT) & MAX_RUN_PAGES;
                if pages == 0 {
                    return Err(RecordError::NotARecord(word));
                }
                Record::Run {
                    class: ((word >> RUN_CLASS_SHIFT) & 0x7f) as u8,
                    pages,
                    first_page: word >> RUN_PAGE_SHIFT,
                }
            }
            TAG_OBJ => {
                let units = (word >> OBJ_LEN_SHIFT) & ((1 << OBJ_LEN_BITS) - 1);
                if units == 0 {
                    return Err(RecordError::NotARecord(word));
                }
                Record::Obj {
                    offset: (word >> OBJ_OFFSET_SHIFT) * UNIT,
                    len: units * UNIT,
                    exclude: word & OBJ_EXCLUDE != 0,
                    pending: word & OBJ_PENDING != 0,
                }
            }
            TAG_DEL => Record::Del { position: body },
            TAG_PUB => Record::Pub { slot: body * 8 },
            _ => return Err(RecordError::NotARecord(word)),
        }))
    }
}

/// `word` (an `Obj` record) with its exclude bit set: a free in place.
pub fn excluded(word: u64) -> u64 {
    word | OBJ_EXCLUDE
}

/// `word` (an `Obj` record) with its publish-pending bit cleared.
pub fn published(word: u64) -> u64 {
    word & !OBJ_PENDING
}

/// `word` (an `Obj` record) with length `len`: a realloc in place.
pub fn with_len(word: u64, len: u64) -> Result<u64, RecordError> {
    let units = len_units(len)?;
    let mask = ((1 << OBJ_LEN_BITS) - 1) << OBJ_LEN_SHIFT;
    Ok(word & !mask | units << OBJ_LEN_SHIFT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record() -> impl Strategy<Value = Record> {
        prop_oneof![
            (0..=MAX_CLASSES, 1..=MAX_RUN_PAGES, 0u64..(1 << 40)).prop_map(
                |(class, pages, first_page)| {
                    Record::Run {
                        class,
                        pages,
                        first_page,
                    }
                }
            ),
            (
                0..=MAX_OFFSET / UNIT,
                1..=MAX_LEN / UNIT,
                any::<bool>(),
                any::<bool>()
            )
                .prop_map(|(o, l, exclude, pending)| Record::Obj {
                    offset: o * UNIT,
                    len: l * UNIT,
                    exclude,
                    pending,
                }),
            (0..=MAX_POSITION).prop_map(|position| Record::Del { position }),
            (0u64..(1 << 60)).prop_map(|s| Record::Pub { slot: s * 8 }),
        ]
    }

    proptest! {
        #[test]
        fn every_record_round_trips_and_is_never_zero(r in record()) {
            let w = r.encode().map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_ne!(w, 0);
            prop_assert_eq!(Record::decode(w), Ok(Some(r)));
        }

        #[test]
        fn in_place_updates_touch_only_their_field(
            o in 0..=MAX_OFFSET / UNIT,
            l in 1..=MAX_LEN / UNIT,
            l2 in 1..=MAX_LEN / UNIT,
        ) {
            let r = Record::Obj { offset: o * UNIT, len: l * UNIT, exclude: false, pending: true };
            let w = r.encode().map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(
                Record::decode(excluded(w)),
                Ok(Some(Record::Obj { offset: o * UNIT, len: l * UNIT, exclude: true, pending: true }))
            );
            prop_assert_eq!(
                Record::decode(published(w)),
                Ok(Some(Record::Obj { offset: o * UNIT, len: l * UNIT, exclude: false, pending: false }))
            );
            let w2 = with_len(w, l2 * UNIT).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(
                Record::decode(w2),
                Ok(Some(Record::Obj { offset: o * UNIT, len: l2 * UNIT, exclude: false, pending: true }))
            );
        }

        #[test]
        fn any_word_decodes_or_is_refused_without_panic(w in any::<u64>()) {
            if let Ok(Some(r)) = Record::decode(w) {
                // What decodes encodes back to the same word.
                prop_assert_eq!(r.encode(), Ok(w));
            }
        }
    }

    #[test]
    fn zero_is_an_empty_slot_and_bad_fields_are_refused() {
        assert_eq!(Record::decode(0), Ok(None));
        assert!(matches!(Record::decode(7), Err(RecordError::NotARecord(7))));
        let bad = [
            Record::Obj {
                offset: 8,
                len: 16,
                exclude: false,
                pending: false,
            },
            Record::Obj {
                offset: 0,
                len: 0,
                exclude: false,
                pending: false,
            },
            Record::Obj {
                offset: 0,
                len: MAX_LEN + UNIT,
                exclude: false,
                pending: false,
            },
            Record::Obj {
                offset: MAX_OFFSET + UNIT,
                len: 16,
                exclude: false,
                pending: false,
            },
            Record::Run {
                class: 128,
                pages: 1,
                first_page: 0,
            },
            Record::Run {
                class: 1,
                pages: 0,
                first_page: 0,
            },
            Record::Run {
                class: 1,
                pages: MAX_RUN_PAGES + 1,
                first_page: 0,
            },
            Record::Pub { slot: 12 },
        ];
        for r in bad {
            assert!(r.encode().is_err(), "{r:?}");
        }
    }
}
