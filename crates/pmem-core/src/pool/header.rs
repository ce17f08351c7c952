//! The on-media pool header and its validation.
//!
//! The first [`HEADER_AREA`] bytes of a pool are reserved for the header; the header
//! struct itself is [`HEADER_LEN`] bytes at offset 0, little-endian, written when
//! the pool is created and never modified afterwards, except once by an explicit
//! upgrade from version 2 (see below). The root object follows the header area; the
//! heap follows the root, page aligned.
//!
//! | offset | size | field |
//! | ---: | ---: | --- |
//! | 0 | 8 | magic `PMKITPOL` |
//! | 8 | 4 | format version ([`FORMAT_VERSION`]) |
//! | 12 | 4 | header area size (4096) |
//! | 16 | 8 | pool size in bytes |
//! | 24 | 16 | uuid |
//! | 40 | 64 | layout name, NUL padded |
//! | 104 | 8 | root offset (0 = no root) |
//! | 112 | 8 | root size |
//! | 120 | 8 | root alignment |
//! | 128 | 4 | root layout version ([`crate::RootType::LAYOUT_VERSION`]) |
//! | 132 | 4 | reserved, zero |
//! | 136 | 8 | heap offset |
//! | 144 | 8 | heap size |
//! | 152 | 8 | creation time, seconds since the Unix epoch |
//! | 160 | 64 | root id ([`crate::RootType::ROOT_ID`]), NUL padded |
//! | 224 | 28 | reserved, zero |
//! | 252 | 4 | crc32c of bytes 0..252 |
//! | 256 | 768 | zero |
//! | 1024 | 64 | version 3: shutdown-state record, copy A |
//! | 1088 | 64 | version 3: shutdown-state record, copy B |
//! | 1152 | 2944 | zero |
//!
//! Each shutdown-state record (the only mutable bytes of the header area, written by
//! the pool itself at every read-write open and close; see
//! [`super::shutdown_record`]) is:
//!
//! | offset | size | field |
//! | ---: | ---: | --- |
//! | 0 | 8 | magic `PMKITUSC` |
//! | 8 | 8 | sequence number (the valid copy with the higher one is current) |
//! | 16 | 8 | the device's unsafe-shutdown count at the last read-write open |
//! | 24 | 4 | crc32c of the device identity (the DIMMs' ids) |
//! | 28 | 4 | flags: 1 = closed cleanly, 2 = the count was known |
//! | 32 | 28 | reserved, zero |
//! | 60 | 4 | crc32c of bytes 0..60 |
//!
//! Version 1 recorded a hash of the root's Rust type name at 128 and the (truncated)
//! type name at 160; version 2 records the author-chosen root id and layout version
//! instead; version 3 adds the shutdown-state records. This build writes version 3
//! and reads 2 and 3 (a version-2 pool opens read-write without the records, and
//! becomes version 3 only through [`crate::Pool::upgrade`]); a version-1 file is
//! refused with [`PoolError::UnsupportedVersion`].
//!
//! An upgrade writes the records first, then the new version (offset 8) and checksum
//! (offset 252), which may persist in either order. A header whose checksum matches
//! it with the *other* of versions 2 and 3 is such a torn upgrade, and is read as the
//! version the checksum belongs to: before the checksum lands the pool is still
//! version 2; after, it is version 3, whose records are already durable.
//!
//! [`Header::parse`] is a pure function of the file's first bytes and its length, so
//! the fuzzer and the tests exercise exactly what `open` runs.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::root::{valid_root_id, RootType};
use crate::PoolError;

/// The magic at offset 0 of every pool.
pub const MAGIC: [u8; 8] = *b"PMKITPOL";
/// The format version this build writes.
pub const FORMAT_VERSION: u32 = 3;
/// The oldest format version this build reads (and upgrades in place when asked).
pub const MIN_FORMAT_VERSION: u32 = 2;
/// Bytes reserved at the start of the pool for the header.
pub const HEADER_AREA: u64 = 4096;
/// Size of the header struct.
pub const HEADER_LEN: usize = 256;
/// Maximum length of a layout name in bytes.
pub const MAX_LAYOUT_LEN: usize = 63;
/// Alignment of the heap and granularity of the layout.
pub const PAGE: u64 = 4096;

const CHECKSUM_OFFSET: usize = HEADER_LEN - 4;

/// The pool header as it lies on media.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`FORMAT_VERSION`].
    pub version: u32,
    /// [`HEADER_AREA`].
    pub header_area: u32,
    /// Total pool size in bytes.
    pub pool_size: u64,
    /// Random identity of this pool.
    pub uuid: [u8; 16],
    /// Layout name, NUL padded.
    pub layout: [u8; 64],
    /// Offset of the root object, 0 if the pool has none.
    pub root_off: u64,
    /// Size of the root object.
    pub root_size: u64,
    /// Alignment of the root object.
    pub root_align: u64,
    /// The root type's [`crate::RootType::LAYOUT_VERSION`] (0 without a root).
    pub root_layout_version: u32,
    /// Zero.
    pub root_reserved: u32,
    /// Offset of the heap (page aligned).
    pub heap_off: u64,
    /// Size of the heap.
    pub heap_size: u64,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// The root type's [`crate::RootType::ROOT_ID`], NUL padded (empty without a root).
    pub root_id: [u8; 64],
    /// Zero.
    pub reserved: [u8; 28],
    /// crc32c of the bytes before it.
    pub checksum: u32,
}

const _: () = assert!(std::mem::size_of::<Header>() == HEADER_LEN);
const _: () = assert!(std::mem::offset_of!(Header, checksum) == CHECKSUM_OFFSET);
const _: () = assert!(std::mem::offset_of!(Header, root_off) == 104);
const _: () = assert!(std::mem::offset_of!(Header, root_layout_version) == 128);
const _: () = assert!(std::mem::offset_of!(Header, root_id) == 160);
const _: () = assert!(HEADER_LEN as u64 <= HEADER_AREA);
const _: () = assert!(HEADER_AREA.is_multiple_of(PAGE));

/// A root type's identity as recorded in the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootSpec {
    /// `size_of::<T>()`.
    pub size: u64,
    /// `align_of::<T>()`.
    pub align: u64,
    /// [`RootType::ROOT_ID`].
    pub id: String,
    /// [`RootType::LAYOUT_VERSION`].
    pub layout_version: u32,
}

impl RootSpec {
    /// The spec of `T`: its author-chosen id and layout version, and its size and
    /// alignment. An invalid id (empty, over 63 bytes, or with a NUL) is a
    /// compile-time error where `T` is used as a root.
    pub fn of<T: RootType>() -> RootSpec {
        const {
            assert!(
                valid_root_id(T::ROOT_ID),
                "RootType::ROOT_ID must be 1..=63 bytes without NUL"
            )
        };
        RootSpec {
            size: std::mem::size_of::<T>() as u64,
            align: std::mem::align_of::<T>() as u64,
            id: T::ROOT_ID.to_owned(),
            layout_version: T::LAYOUT_VERSION,
        }
    }
}

fn padded<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

fn unpadded(bytes: &[u8]) -> Result<&str, ()> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    if bytes[end..].iter().any(|&b| b != 0) {
        return Err(());
    }
    std::str::from_utf8(&bytes[..end]).map_err(|_| ())
}

/// Checks a layout name: 1..=63 bytes, no NUL.
pub fn validate_layout_name(name: &str) -> Result<(), PoolError> {
    if name.is_empty() || name.len() > MAX_LAYOUT_LEN || name.contains('\0') {
        return Err(PoolError::InvalidLayoutName {
            name: name.to_owned(),
            max: MAX_LAYOUT_LEN,
        });
    }
    Ok(())
}

const fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

impl Header {
    /// Builds the header of a new pool of `pool_size` bytes.
    pub fn new(
        layout: &str,
        pool_size: u64,
        root: Option<&RootSpec>,
        uuid: [u8; 16],
        created_unix_s: u64,
    ) -> Result<Header, PoolError> {
        validate_layout_name(layout)?;
        let (root_off, root_size, root_align, root_version, root_id) = match root {
            Some(r) => {
                if r.align > PAGE || !r.align.is_power_of_two() {
                    return Err(PoolError::InvalidSize {
                        size: r.size,
                        reason: "root alignment must be a power of two up to 4096",
                    });
                }
                if !valid_root_id(&r.id) {
                    return Err(PoolError::InvalidRootId { id: r.id.clone() });
                }
                (
                    HEADER_AREA,
                    r.size,
                    r.align,
                    r.layout_version,
                    r.id.as_str(),
                )
            }
            None => (0, 0, 0, 0, ""),
        };
        let heap_off = round_up(HEADER_AREA + root_size, PAGE);
        if !pool_size.is_multiple_of(PAGE) {
            return Err(PoolError::InvalidSize {
                size: pool_size,
                reason: "must be a multiple of 4096",
            });
        }
        if pool_size < heap_off + PAGE {
            return Err(PoolError::InvalidSize {
                size: pool_size,
                reason: "too small for the header, the root and one heap page",
            });
        }
        let mut h = Header {
            magic: MAGIC,
            version: FORMAT_VERSION,
            header_area: HEADER_AREA as u32,
            pool_size,
            uuid,
            layout: padded(layout),
            root_off,
            root_size,
            root_align,
            root_layout_version: root_version,
            root_reserved: 0,
            heap_off,
            heap_size: pool_size - heap_off,
            created_unix_s,
            root_id: padded(root_id),
            reserved: [0; 28],
            checksum: 0,
        };
        h.checksum = h.compute_checksum();
        Ok(h)
    }

    /// crc32c of the header bytes before the checksum field.
    pub fn compute_checksum(&self) -> u32 {
        crc32c::crc32c(&self.as_bytes()[..CHECKSUM_OFFSET])
    }

    /// The layout name.
    pub fn layout_name(&self) -> &str {
        unpadded(&self.layout).unwrap_or("")
    }

    /// The root id recorded at creation ([`RootType::ROOT_ID`]), empty if none.
    pub fn root_id(&self) -> &str {
        unpadded(&self.root_id).unwrap_or("")
    }

    /// The uuid in its canonical text form.
    pub fn uuid_string(&self) -> String {
        uuid::Uuid::from_bytes(self.uuid).hyphenated().to_string()
    }

    /// Validates the first bytes of a file of `file_len` bytes as a pool header.
    ///
    /// `prefix` holds the file's first `min(file_len, HEADER_LEN)` bytes (or more).
    /// `exact_len` says whether the file must be exactly the pool's size (regular
    /// files) or may be larger (device DAX, whose size is the device's).
    /// Pure: the checks run in the order empty → magic → truncated header → version →
    /// checksum → size → internal consistency, so each bad file gets the most telling
    /// error.
    pub fn parse(prefix: &[u8], file_len: u64, exact_len: bool) -> Result<Header, PoolError> {
        if file_len == 0 || prefix.is_empty() {
            return Err(PoolError::Empty);
        }
        let have = prefix.len().min(MAGIC.len());
        if prefix[..have] != MAGIC[..have] {
            return Err(PoolError::NotAPool);
        }
        if prefix.len() < HEADER_LEN {
            return Err(PoolError::Truncated {
                actual: file_len,
                expected: HEADER_AREA,
            });
        }
        let h =
            Header::read_from_bytes(&prefix[..HEADER_LEN]).map_err(|_| PoolError::Truncated {
                actual: file_len,
                expected: HEADER_AREA,
            })?;
        if !(MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&h.version) {
            return Err(PoolError::UnsupportedVersion {
                found: h.version,
                supported: FORMAT_VERSION,
            });
        }
        let mut h = h;
        let computed = h.compute_checksum();
        if computed != h.checksum {
            // A torn 2 -> 3 upgrade: the checksum belongs to the other version.
            let mut other = h;
            other.version = MIN_FORMAT_VERSION + FORMAT_VERSION - h.version;
            if other.compute_checksum() != h.checksum {
                return Err(PoolError::BadChecksum {
                    stored: h.checksum,
                    computed,
                });
            }
            h = other;
        }
        if file_len < h.pool_size {
            return Err(PoolError::Truncated {
                actual: file_len,
                expected: h.pool_size,
            });
        }
        if exact_len && file_len > h.pool_size {
            return Err(PoolError::Corrupt {
                reason: format!(
                    "file is {file_len} bytes but the header records {}",
                    h.pool_size
                ),
            });
        }
        h.check_consistency()?;
        Ok(h)
    }

    fn check_consistency(&self) -> Result<(), PoolError> {
        let corrupt = |reason: &str| {
            Err(PoolError::Corrupt {
                reason: reason.to_owned(),
            })
        };
        if u64::from(self.header_area) != HEADER_AREA {
            return corrupt("header area size is not 4096");
        }
        if unpadded(&self.layout).is_err() || self.layout_name().is_empty() {
            return corrupt("layout name is not NUL-padded UTF-8");
        }
        if unpadded(&self.root_id).is_err() {
            return corrupt("root id is not NUL-padded UTF-8");
        }
        if self.root_reserved != 0 {
            return corrupt("reserved root field is not zero");
        }
        if !self.pool_size.is_multiple_of(PAGE) || !self.heap_off.is_multiple_of(PAGE) {
            return corrupt("pool size or heap offset is not page aligned");
        }
        if self.heap_off.checked_add(self.heap_size) != Some(self.pool_size) {
            return corrupt("heap does not end at the end of the pool");
        }
        if self.heap_off < HEADER_AREA || self.heap_size == 0 {
            return corrupt("heap overlaps the header or is empty");
        }
        if self.root_off == 0 {
            if self.root_size != 0
                || self.root_align != 0
                || self.root_layout_version != 0
                || !self.root_id().is_empty()
            {
                return corrupt("root fields set without a root");
            }
        } else {
            if self.root_off != HEADER_AREA {
                return corrupt("root does not follow the header area");
            }
            if self.root_id().is_empty() {
                return corrupt("root without a root id");
            }
            if !self.root_align.is_power_of_two() || self.root_align > PAGE {
                return corrupt("root alignment is not a power of two up to 4096");
            }
            match self.root_off.checked_add(self.root_size) {
                Some(end) if end <= self.heap_off => {}
                _ => return corrupt("root overlaps the heap"),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header::new(
            "layout",
            1 << 20,
            Some(&RootSpec::of::<[u64; 4]>()),
            [7; 16],
            1,
        )
        .expect("valid header")
    }

    #[test]
    fn round_trips() {
        let h = sample();
        let p = Header::parse(h.as_bytes(), 1 << 20, true).expect("parses");
        assert_eq!(p.layout_name(), "layout");
        assert_eq!(p.root_off, HEADER_AREA);
        assert_eq!(p.root_size, 32);
        assert_eq!(p.heap_off, 2 * PAGE);
        assert_eq!(p.heap_size, (1 << 20) - 2 * PAGE);
        assert_eq!(p.root_id(), "[u64; 4]");
        assert_eq!(p.root_layout_version, 1);
    }

    #[test]
    fn rejects_each_bad_case_with_its_own_error() {
        let h = sample();
        let good = h.as_bytes().to_vec();
        assert!(matches!(Header::parse(&[], 0, true), Err(PoolError::Empty)));
        assert!(matches!(
            Header::parse(b"hello world", 11, true),
            Err(PoolError::NotAPool)
        ));
        assert!(matches!(
            Header::parse(&good[..100], 100, true),
            Err(PoolError::Truncated { .. })
        ));
        assert!(matches!(
            Header::parse(&good, 1 << 19, true),
            Err(PoolError::Truncated { expected, .. }) if expected == 1 << 20
        ));
        assert!(matches!(
            Header::parse(&good, 2 << 20, true),
            Err(PoolError::Corrupt { .. })
        ));
        assert!(Header::parse(&good, 2 << 20, false).is_ok());
        let mut v = good.clone();
        v[8] = 4;
        assert!(matches!(
            Header::parse(&v, 1 << 20, true),
            Err(PoolError::UnsupportedVersion { found: 4, .. })
        ));
        // A version-1 header (root type hash and name), even with a valid checksum.
        let mut old = h;
        old.version = 1;
        old.checksum = old.compute_checksum();
        assert!(matches!(
            Header::parse(old.as_bytes(), 1 << 20, true),
            Err(PoolError::UnsupportedVersion {
                found: 1,
                supported: 3
            })
        ));
        let mut c = good.clone();
        c[50] ^= 1;
        assert!(matches!(
            Header::parse(&c, 1 << 20, true),
            Err(PoolError::BadChecksum { .. })
        ));
    }

    #[test]
    fn reads_version_2_and_either_half_of_a_torn_upgrade() {
        let h = sample();
        let mut v2 = h;
        v2.version = 2;
        v2.checksum = v2.compute_checksum();
        let parsed = Header::parse(v2.as_bytes(), 1 << 20, true).map(|p| p.version);
        assert_eq!(parsed.ok(), Some(2));
        // Version written, checksum not: still version 2.
        let mut torn = v2;
        torn.version = 3;
        let parsed = Header::parse(torn.as_bytes(), 1 << 20, true).map(|p| p.version);
        assert_eq!(parsed.ok(), Some(2));
        // Checksum written, version not: version 3.
        let mut torn = v2;
        torn.checksum = h.checksum;
        let parsed = Header::parse(torn.as_bytes(), 1 << 20, true).map(|p| p.version);
        assert_eq!(parsed.ok(), Some(3));
        // Any other mismatch is still a bad checksum.
        let mut bad = v2;
        bad.checksum ^= 1;
        assert!(matches!(
            Header::parse(bad.as_bytes(), 1 << 20, true),
            Err(PoolError::BadChecksum { .. })
        ));
    }

    #[test]
    fn rejects_consistent_checksum_over_inconsistent_fields() {
        let mut h = sample();
        h.heap_size += PAGE;
        h.checksum = h.compute_checksum();
        assert!(matches!(
            Header::parse(h.as_bytes(), 1 << 20, true),
            Err(PoolError::Corrupt { .. })
        ));
        let mut h = sample();
        h.root_size = 1 << 30;
        h.checksum = h.compute_checksum();
        assert!(matches!(
            Header::parse(h.as_bytes(), 1 << 20, true),
            Err(PoolError::Corrupt { .. })
        ));
    }

    #[test]
    fn validates_sizes_and_names() {
        assert!(Header::new("", 1 << 20, None, [0; 16], 0).is_err());
        assert!(Header::new(&"x".repeat(64), 1 << 20, None, [0; 16], 0).is_err());
        assert!(Header::new("a\0b", 1 << 20, None, [0; 16], 0).is_err());
        assert!(Header::new("ok", 4096, None, [0; 16], 0).is_err());
        assert!(Header::new("ok", 8192 + 1, None, [0; 16], 0).is_err());
        let h = Header::new("ok", 8192, None, [0; 16], 0).expect("smallest pool");
        assert_eq!(h.heap_off, PAGE);
        assert_eq!(h.root_off, 0);
    }
}
