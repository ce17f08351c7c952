//! Where an NVWA heap keeps its few persistent words, inside its region of a pool
//! (offsets from the region's start, which is 64-byte aligned):
//!
//! | offset | size | contents |
//! | ---: | ---: | --- |
//! | 0 | 64 | [`Header`]: magic `PMKNVWA1`, geometry, crc32c — written once at format |
//! | 64 | 8 (a line of its own) | the active word: `generation << 1 \| area` |
//! | 128 | 8 × log words | log area 0 |
//! | after it | 8 × log words | log area 1 |
//! | page aligned | pages × 4 KiB | the heap |
//!
//! The active word names which log area holds the allocation log; a checkpoint
//! writes the live records into the other area and then switches this one word
//! (an aligned 8-byte store, failure-atomic), so a crash finds one whole log or
//! the other.

use std::ops::Range;

use pmem_core::{AllocError, PPtr, Pool};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::record::PAGE;

/// The header's magic (its last byte is the format version).
pub const MAGIC: [u8; 8] = *b"PMKNVWA1";
const MAGIC_PREFIX: [u8; 7] = *b"PMKNVWA";
const ACTIVE_OFF: u64 = 64;
const LOGS_OFF: u64 = 128;
/// The largest generation an opening accepts (checkpoints add one each).
const MAX_GENERATION: u64 = 1 << 62;

/// The heap's header, written once at format.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Header {
    magic: [u8; 8],
    region_start: u64,
    region_len: u64,
    log_words: u64,
    heap_start: u64,
    heap_pages: u64,
    reserved: u64,
    checksum: u64,
}
const _: () = assert!(std::mem::size_of::<Header>() == 64);

fn crc_of(bytes: &[u8]) -> u64 {
    u64::from(crc32c::crc32c(bytes))
}

/// The geometry of a formatted region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Pool offset of the region (of the header).
    pub region_start: u64,
    /// Bytes of the region.
    pub region_len: u64,
    /// Words of each log area.
    pub log_words: u64,
    /// Pool offset of the heap's first page.
    pub heap_start: u64,
    /// Pages of the heap.
    pub heap_pages: u64,
}

impl Geometry {
    /// The geometry of `region` with `log_words` words per log area, or why it
    /// does not fit.
    pub fn plan(region: &Range<u64>, log_words: u64) -> Result<Geometry, AllocError> {
        let bad = |reason: String| AllocError::Corrupt { reason };
        let start = region.start;
        if !start.is_multiple_of(64) {
            return Err(bad(format!(
                "region start {start:#x} is not 64-byte aligned"
            )));
        }
        if log_words == 0 || log_words > u64::from(u32::MAX) {
            return Err(bad(format!(
                "{log_words} log words per area: 1 to 2^32 - 1"
            )));
        }
        let area = (log_words * 8).div_ceil(64) * 64;
        let heap_start = (start + LOGS_OFF + 2 * area).div_ceil(PAGE) * PAGE;
        let heap_pages = region.end.saturating_sub(heap_start) / PAGE;
        if heap_pages == 0 {
            return Err(bad(format!(
                "region {start:#x}..{:#x} leaves no page for the heap after two log areas of {log_words} words",
                region.end
            )));
        }
        Ok(Geometry {
            region_start: start,
            region_len: region.end - start,
            log_words,
            heap_start,
            heap_pages,
        })
    }

    /// Pool offset of the active word.
    pub fn active_word(&self) -> u64 {
        self.region_start + ACTIVE_OFF
    }

    /// Pool offset of log area `area` (0 or 1).
    pub fn log_base(&self, area: usize) -> u64 {
        let bytes = (self.log_words * 8).div_ceil(64) * 64;
        self.region_start + LOGS_OFF + area as u64 * bytes
    }

    /// The metadata's pool range (header to the end of the second log area).
    pub fn metadata(&self) -> Range<u64> {
        self.region_start..self.heap_start
    }

    /// The heap's pool range.
    pub fn heap(&self) -> Range<u64> {
        self.heap_start..self.heap_start + self.heap_pages * PAGE
    }

    fn header(&self) -> Header {
        let mut h = Header {
            magic: MAGIC,
            region_start: self.region_start,
            region_len: self.region_len,
            log_words: self.log_words,
            heap_start: self.heap_start,
            heap_pages: self.heap_pages,
            reserved: 0,
            checksum: 0,
        };
        h.checksum = crc_of(&h.as_bytes()[..56]);
        h
    }
}

/// The active word's value for `area` at `generation`.
pub fn active_value(generation: u64, area: usize) -> u64 {
    generation << 1 | area as u64
}

/// Writes a fresh heap's metadata: zeroed log areas, the active word (area 0,
/// generation 1), then the header, each persisted in that order, so a crash
/// during format leaves no header (and `open` refuses the region as not
/// formatted).
///
/// # Safety
/// Nothing else uses the region while this runs.
pub unsafe fn format(pool: &Pool, g: &Geometry) -> Result<(), AllocError> {
    let zeros = vec![0u8; 64 * 1024];
    let logs = g.log_base(0)..g.heap_start;
    let mut at = logs.start;
    while at < logs.end {
        let n = (logs.end - at).min(zeros.len() as u64);
        // SAFETY: the region is the caller's alone (this function's contract).
        unsafe { pool.write_bytes_shared(at, &zeros[..n as usize])? };
        at += n;
    }
    pool.flush(logs.start, logs.end - logs.start)?;
    // SAFETY: as above.
    unsafe { pool.write_bytes_shared(g.active_word(), &active_value(1, 0).to_le_bytes())? };
    pool.persist(g.active_word(), 8)?;
    // SAFETY: as above.
    unsafe { pool.write_bytes_shared(g.region_start, g.header().as_bytes())? };
    pool.persist(g.region_start, 64)?;
    Ok(())
}

/// Reads and checks the header at `region_start`: its geometry and the active
/// word's `(generation, area)`.
pub fn read(pool: &Pool, region_start: u64) -> Result<(Geometry, u64, usize), AllocError> {
    let corrupt = |reason: &str| AllocError::Corrupt {
        reason: format!("nvwa heap at {region_start:#x}: {reason}"),
    };
    if !region_start.is_multiple_of(64) || region_start + 128 > pool.len() {
        return Err(AllocError::NotFormatted {
            offset: region_start,
        });
    }
    let h = pool.read(PPtr::<Header>::from_offset(region_start))?;
    if h.magic != MAGIC {
        if h.magic[..7] == MAGIC_PREFIX && h.magic[7].is_ascii_digit() {
            return Err(AllocError::UnsupportedVersion {
                offset: region_start,
                found: u32::from(h.magic[7] - b'0'),
                supported: 1,
            });
        }
        return Err(AllocError::NotFormatted {
            offset: region_start,
        });
    }
    if h.checksum != crc_of(&h.as_bytes()[..56]) {
        return Err(corrupt("header checksum mismatch"));
    }
    let end = h.region_start.checked_add(h.region_len);
    if h.region_start != region_start || end.is_none_or(|e| e > pool.len()) {
        return Err(corrupt("the header's region does not match the pool"));
    }
    let g = Geometry::plan(
        &(h.region_start..h.region_start + h.region_len),
        h.log_words,
    )?;
    if g.heap_start != h.heap_start || g.heap_pages != h.heap_pages {
        return Err(corrupt("the header's geometry does not match its region"));
    }
    let active = pool.read(PPtr::<u64>::from_offset(g.active_word()))?;
    if active >> 1 == 0 {
        return Err(corrupt("the active log word is zero"));
    }
    // A checkpoint stores `(generation + 1) << 1`: a generation this close to the
    // top (no heap lives through 2^62 checkpoints) would wrap to an active word of
    // zero and lose the heap (found by the `nvwa_open` fuzz target).
    if active >> 1 > MAX_GENERATION {
        return Err(corrupt("the active log word's generation is past 2^62"));
    }
    Ok((g, active >> 1, (active & 1) as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem_core::PoolOptions;

    #[test]
    fn format_then_read_gives_the_same_geometry() {
        let pool = Pool::anonymous(&PoolOptions::new("nvwa", 1 << 20)).expect("pool");
        let g = Geometry::plan(&(4096..1 << 20), 1000).expect("fits");
        assert_eq!(g.heap_start % PAGE, 0);
        assert!(g.log_base(1) >= g.log_base(0) + 8000);
        assert!(g.heap_start >= g.log_base(1) + 8000);
        // SAFETY: a fresh pool, one thread.
        unsafe { format(&pool, &g) }.expect("format");
        let (again, generation, area) = read(&pool, 4096).expect("read");
        assert_eq!((again, generation, area), (g, 1, 0));
    }

    #[test]
    fn unformatted_corrupt_and_impossible_regions_are_refused() {
        let mut pool = Pool::anonymous(&PoolOptions::new("nvwa", 1 << 20)).expect("pool");
        assert!(matches!(
            read(&pool, 4096),
            Err(AllocError::NotFormatted { offset: 4096 })
        ));
        assert!(Geometry::plan(&(4096..8192), 1000).is_err());
        assert!(Geometry::plan(&(4100..1 << 20), 10).is_err());
        let g = Geometry::plan(&(4096..1 << 20), 64).expect("fits");
        // SAFETY: a fresh pool, one thread.
        unsafe { format(&pool, &g) }.expect("format");
        pool.write(PPtr::<u64>::from_offset(4096 + 24), &3)
            .expect("write");
        assert!(matches!(read(&pool, 4096), Err(AllocError::Corrupt { .. })));
    }
}
