//! The type tag at the start of every container's header: the layout version and
//! the ids and sizes of its key and value types, checked when the container is
//! opened so a structure is never read as another type.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::ptype::{TypeKey, MAX_TYPE_ID_LEN};
use crate::Error;

/// "PCOL", little-endian.
const MAGIC: u32 = u32::from_le_bytes(*b"PCOL");

/// The kinds of container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub(crate) enum Kind {
    Box = 1,
    Vec = 2,
    Bytes = 3,
    String = 4,
    HashMap = 5,
    BTreeMap = 6,
    Mutex = 7,
    ConcurrentHashMap = 8,
}

impl Kind {
    fn name(code: u16) -> &'static str {
        match code {
            1 => "PBox",
            2 => "PVec",
            3 => "PBytes",
            4 => "PString",
            5 => "PHashMap",
            6 => "PBTreeMap",
            7 => "PMutex",
            8 => "PConcurrentHashMap",
            _ => "an unknown structure",
        }
    }
}

/// The first 64 bytes of a container's header.
#[doc(hidden)]
#[derive(Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Tag {
    magic: u32,
    kind: u16,
    version: u16,
    key_size: u32,
    value_size: u32,
    key: [u8; MAX_TYPE_ID_LEN],
    value: [u8; MAX_TYPE_ID_LEN],
}

/// Bytes of a tag.
pub(crate) const TAG_BYTES: u64 = std::mem::size_of::<Tag>() as u64;
const _: () = assert!(TAG_BYTES == 64);

/// One type of a tag: its key and size (`None`: the kind has no such type).
pub(crate) type Part = Option<(TypeKey, usize)>;

impl Tag {
    /// The tag of a `kind` container at layout `version` holding keys `key` and
    /// values `value`.
    pub(crate) fn new(kind: Kind, version: u16, key: Part, value: Part) -> Tag {
        let (k, ks) = key.map_or(([0; MAX_TYPE_ID_LEN], 0), |(t, s)| (t.0, s as u32));
        let (v, vs) = value.map_or(([0; MAX_TYPE_ID_LEN], 0), |(t, s)| (t.0, s as u32));
        Tag {
            magic: MAGIC,
            kind: kind as u16,
            version,
            key_size: ks,
            value_size: vs,
            key: k,
            value: v,
        }
    }

    /// Whether every type id in the tag is valid (a type with an empty or too long
    /// id cannot be stored).
    pub(crate) fn check_ids(&self) -> Result<(), Error> {
        for (key, size) in [(self.key, self.key_size), (self.value, self.value_size)] {
            if size > 0 && !TypeKey(key).is_valid() {
                return Err(Error::TooLarge(format!(
                    "type id {:?} is not 1..=24 bytes without NUL",
                    TypeKey(key).name()
                )));
            }
        }
        Ok(())
    }

    /// Compares the tag found on media with `self` (the one expected).
    pub(crate) fn expect(&self, found: &Tag) -> Result<(), Error> {
        if self == found {
            return Ok(());
        }
        Err(Error::TypeMismatch {
            expected: self.describe(),
            found: found.describe(),
        })
    }

    /// The type as text: `PHashMap<u64 (8 B), PString (16 B)> v1`.
    pub(crate) fn describe(&self) -> String {
        if self.magic != MAGIC {
            return "no container (bad magic)".into();
        }
        let part =
            |key: [u8; MAX_TYPE_ID_LEN], size: u32| format!("{} ({size} B)", TypeKey(key).name());
        let mut parts = Vec::new();
        if self.key_size > 0 || self.key != [0; MAX_TYPE_ID_LEN] {
            parts.push(part(self.key, self.key_size));
        }
        if self.value_size > 0 || self.value != [0; MAX_TYPE_ID_LEN] {
            parts.push(part(self.value, self.value_size));
        }
        format!(
            "{}<{}> layout v{}",
            Kind::name(self.kind),
            parts.join(", "),
            self.version
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PType;

    #[test]
    fn a_mismatch_names_both_types() {
        let a = Tag::new(
            Kind::HashMap,
            1,
            Some((u64::TYPE_KEY, 8)),
            Some((u64::TYPE_KEY, 8)),
        );
        let b = Tag::new(
            Kind::HashMap,
            1,
            Some((u64::TYPE_KEY, 8)),
            Some((<[u8; 64]>::TYPE_KEY, 64)),
        );
        let e = a.expect(&b).expect_err("differs").to_string();
        assert!(e.contains("PHashMap<u64 (8 B), [u8; 64] (64 B)>"), "{e}");
        assert!(e.contains("PHashMap<u64 (8 B), u64 (8 B)>"), "{e}");
        assert!(a.expect(&a).is_ok());
    }
}
