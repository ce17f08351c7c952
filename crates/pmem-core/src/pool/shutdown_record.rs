//! The shutdown-state record of version-3 pools: was the pool open when the device
//! last shut down unsafely?
//!
//! After PMDK's `shutdown_state`: at every read-write open the pool records the
//! device's unsafe-shutdown count and identity (from [`crate::platform::shutdown`])
//! with the clean-close flag cleared; a clean close sets the flag. If a later open
//! finds the flag clear (the pool was open when the process or machine died), the
//! same device identity, and another count, the device lost power without flushing
//! while the pool was open: writes reported durable may be lost, so the open is
//! refused with [`PoolError::UnsafeShutdown`] unless the caller accepts it
//! ([`super::OpenOptions::accept_unsafe_shutdown`]). A different identity means the
//! pool was copied to other DIMMs, which is no evidence of loss (PMDK agrees).
//!
//! Crash safety: two checksummed copies (offsets in [`RECORD_OFFSETS`], layout in
//! [`super::header`]); a write goes to the copy that is not current, with the next
//! sequence number, and is persisted before the open or close returns. A torn write
//! fails its checksum and the other copy stays current.
//!
//! Where sysfs has no counter (every machine without persistent memory) nothing is
//! written, the record stays as it was, and the check is skipped, plainly: a record
//! without a count would prove nothing and cost a device flush per open and close.
//! Read-only opens never write; they only assess.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::Pool;
use crate::platform::{Detected, Probe, ShutdownState};
use crate::PoolError;

/// Where the two copies of the record lie in the header area.
pub const RECORD_OFFSETS: [u64; 2] = [1024, 1088];
const RECORD_MAGIC: [u8; 8] = *b"PMKITUSC";
const FLAG_CLEAN: u32 = 1;
const FLAG_COUNT_KNOWN: u32 = 2;

/// One copy of the record, as on media.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ShutdownRecord {
    magic: [u8; 8],
    /// Sequence number; the valid copy with the higher one is current.
    pub seq: u64,
    /// The device's unsafe-shutdown count at the last read-write open.
    pub count: u64,
    /// crc32c of the device identity.
    pub identity_crc: u32,
    flags: u32,
    reserved: [u8; 28],
    checksum: u32,
}

const _: () = assert!(std::mem::size_of::<ShutdownRecord>() == 64);

impl ShutdownRecord {
    fn new(seq: u64, state: Option<&ShutdownState>, clean: bool) -> Self {
        let mut r = ShutdownRecord {
            magic: RECORD_MAGIC,
            seq,
            count: state.map_or(0, |s| s.count),
            identity_crc: state.map_or(0, |s| crc32c::crc32c(s.identity.as_bytes())),
            flags: if clean { FLAG_CLEAN } else { 0 }
                | if state.is_some() { FLAG_COUNT_KNOWN } else { 0 },
            reserved: [0; 28],
            checksum: 0,
        };
        r.checksum = r.compute_checksum();
        r
    }

    fn compute_checksum(&self) -> u32 {
        crc32c::crc32c(&self.as_bytes()[..60])
    }

    fn is_valid(&self) -> bool {
        self.magic == RECORD_MAGIC && self.checksum == self.compute_checksum()
    }

    /// Whether the pool was closed cleanly after this record was written.
    pub fn clean(&self) -> bool {
        self.flags & FLAG_CLEAN != 0
    }

    /// Whether the count was known when it was recorded.
    pub fn count_known(&self) -> bool {
        self.flags & FLAG_COUNT_KNOWN != 0
    }
}

/// What the record and the platform say together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShutdownCheck {
    /// A version-2 pool: no record (upgrade it to record one).
    NotRecorded,
    /// The header area holds no valid copy of the record yet (a pool created where
    /// sysfs had no counter, or both copies damaged): the next read-write open
    /// writes one.
    NoValidRecord,
    /// The check cannot be made: the count is unknown now or was then.
    Skipped {
        /// Why.
        reason: String,
    },
    /// The pool was closed cleanly, or the count has not moved.
    Ok {
        /// Whether the last close was clean (false: a crash, but no unsafe shutdown).
        clean: bool,
        /// The count now.
        count: u64,
    },
    /// The pool was moved to other DIMMs (another identity): no evidence either way.
    OtherDevice,
    /// The count moved while the pool was open: durable writes may be lost.
    UnsafeShutdown {
        /// The count recorded at the last open.
        recorded: u64,
        /// The count now.
        now: u64,
    },
}

/// Compares the current record with the detected state.
pub fn assess(record: Option<ShutdownRecord>, detected: &Probe<ShutdownState>) -> ShutdownCheck {
    let state = match detected {
        Ok(Detected::Found { value, .. }) => value,
        Ok(Detected::Unknown { reason }) => {
            return ShutdownCheck::Skipped {
                reason: format!("unknown ({reason})"),
            }
        }
        Err(e) => {
            return ShutdownCheck::Skipped {
                reason: e.to_string(),
            }
        }
    };
    let Some(rec) = record else {
        return ShutdownCheck::NoValidRecord;
    };
    if !rec.count_known() {
        return ShutdownCheck::Skipped {
            reason: "no count was recorded at the last open (sysfs had no counter then)".to_owned(),
        };
    }
    if rec.identity_crc != crc32c::crc32c(state.identity.as_bytes()) {
        return ShutdownCheck::OtherDevice;
    }
    if !rec.clean() && rec.count != state.count {
        return ShutdownCheck::UnsafeShutdown {
            recorded: rec.count,
            now: state.count,
        };
    }
    ShutdownCheck::Ok {
        clean: rec.clean(),
        count: state.count,
    }
}

impl Pool {
    /// The current (valid, highest-sequence) record copy and its slot.
    fn current_record(&self) -> Option<(usize, ShutdownRecord)> {
        RECORD_OFFSETS
            .iter()
            .enumerate()
            .filter_map(|(slot, &off)| {
                let bytes = self.bytes(off, 64).ok()?;
                let r = ShutdownRecord::read_from_bytes(bytes).ok()?;
                r.is_valid().then_some((slot, r))
            })
            .max_by_key(|(_, r)| r.seq)
    }

    /// The unsafe-shutdown check of this pool, against the state detected at open.
    /// (After a read-write open, the record is the one that open wrote.)
    pub fn shutdown_check(&self) -> ShutdownCheck {
        if self.header.version < 3 {
            return ShutdownCheck::NotRecorded;
        }
        assess(
            self.opened_record.or(self.current_record().map(|(_, r)| r)),
            &self.platform.shutdown,
        )
    }

    /// Writes `rec` into the slot that is not current and persists it. Only for
    /// writable file pools of version 3.
    pub(super) fn write_record(
        &self,
        state: Option<&ShutdownState>,
        clean: bool,
    ) -> Result<(), PoolError> {
        let (slot, seq) = match self.current_record() {
            Some((slot, r)) => (slot ^ 1, r.seq.wrapping_add(1)),
            None => (0, 1),
        };
        let rec = ShutdownRecord::new(seq, state, clean);
        let off = RECORD_OFFSETS[slot];
        let bytes = rec.as_bytes();
        // SAFETY: the record slot lies inside the header area of a writable mapping
        // (callers check `read_only` and the version); the write API never hands
        // out references into the header area, and `&self` methods never read these
        // bytes except through `bytes()` copies made before or after this call on
        // the same thread (open and drop run with no other user of the pool).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.addr(off), bytes.len()) };
        crate::counters::add_bytes_written(bytes.len() as u64);
        self.persist(off, bytes.len() as u64)
    }

    /// At a read-write open of a version-3 file pool: refuses an unsafe shutdown
    /// (unless `accept`), then records the count with the clean flag cleared.
    pub(super) fn open_shutdown_record(&mut self, accept: bool) -> Result<(), PoolError> {
        if self.read_only || self.file.is_none() || self.header.version < 3 {
            return Ok(());
        }
        let before = self.current_record().map(|(_, r)| r);
        let check = assess(before, &self.platform.shutdown);
        if let ShutdownCheck::UnsafeShutdown { recorded, now } = check {
            if !accept {
                return Err(PoolError::UnsafeShutdown {
                    path: self.path.clone(),
                    recorded,
                    now,
                });
            }
            tracing::warn!(path = %self.path.display(), recorded, now, "unsafe shutdown accepted by the caller");
        }
        self.opened_record = before;
        // Without a counter a record says nothing, and writing it would cost a
        // device flush at every open and close of every pool on ordinary files.
        let state = self.platform.shutdown.as_ref().ok().and_then(|d| d.value());
        let Some(state) = state.cloned() else {
            return Ok(());
        };
        self.write_record(Some(&state), false)?;
        self.shutdown_recorded = true;
        Ok(())
    }

    /// At close: marks the record clean (the pool's data is drained by then).
    pub(super) fn close_shutdown_record(&self) -> Result<(), PoolError> {
        if !self.shutdown_recorded {
            return Ok(());
        }
        let state = self.platform.shutdown.as_ref().ok().and_then(|d| d.value());
        self.write_record(state, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(count: u64, id: &str) -> Probe<ShutdownState> {
        Ok(Detected::Found {
            value: ShutdownState {
                count,
                identity: id.to_owned(),
                dimms: Vec::new(),
            },
            from: "/sys/x".into(),
        })
    }

    #[test]
    fn assessment_cases() {
        let s = ShutdownState {
            count: 5,
            identity: "a".into(),
            dimms: Vec::new(),
        };
        let dirty = ShutdownRecord::new(1, Some(&s), false);
        let clean = ShutdownRecord::new(1, Some(&s), true);
        assert_eq!(
            assess(Some(dirty), &state(6, "a")),
            ShutdownCheck::UnsafeShutdown {
                recorded: 5,
                now: 6
            }
        );
        assert_eq!(
            assess(Some(dirty), &state(5, "a")),
            ShutdownCheck::Ok {
                clean: false,
                count: 5
            }
        );
        assert_eq!(
            assess(Some(clean), &state(6, "a")),
            ShutdownCheck::Ok {
                clean: true,
                count: 6
            }
        );
        assert_eq!(
            assess(Some(dirty), &state(6, "b")),
            ShutdownCheck::OtherDevice
        );
        assert!(matches!(
            assess(Some(dirty), &Ok(Detected::Unknown { reason: "x".into() })),
            ShutdownCheck::Skipped { .. }
        ));
        let unknown = ShutdownRecord::new(1, None, false);
        assert!(matches!(
            assess(Some(unknown), &state(6, "a")),
            ShutdownCheck::Skipped { .. }
        ));
        assert_eq!(assess(None, &state(6, "a")), ShutdownCheck::NoValidRecord);
        assert!(matches!(
            assess(None, &Ok(Detected::Unknown { reason: "x".into() })),
            ShutdownCheck::Skipped { .. }
        ));
    }

    #[test]
    fn a_torn_copy_fails_its_checksum() {
        let mut r = ShutdownRecord::new(3, None, true);
        assert!(r.is_valid());
        r.count = 1;
        assert!(!r.is_valid());
    }
}
