//! [`PType`]: the stable identity of a value type stored in a container.
//!
//! A container's header records the ids and sizes of its key and value types, so a
//! pool's structure opened as another type fails with
//! [`crate::Error::TypeMismatch`] naming both, instead of being misread. As with
//! [`pmem_core::RootType`], the id is chosen by the type's author, not derived from
//! the Rust type name: renaming or moving the type keeps its pools usable.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Longest [`PType::TYPE_ID`], in bytes (the header keeps 24 NUL-padded bytes).
pub const MAX_TYPE_ID_LEN: usize = 24;

/// A fixed-size value type a container can hold, stored as its bytes.
///
/// Any zerocopy type (no padding, every bit pattern valid) qualifies; give it a
/// stable id:
///
/// ```
/// use pmem_collections::PType;
/// use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};
///
/// #[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy, Debug, PartialEq)]
/// #[repr(C)]
/// struct Point {
///     x: i64,
///     y: i64,
/// }
///
/// impl PType for Point {
///     const TYPE_ID: &'static str = "my-app/point";
/// }
/// ```
///
/// Two types with the same id and size are taken for one another: bump the id
/// (`"my-app/point.v2"`) when the layout changes.
pub trait PType:
    FromBytes + IntoBytes + Immutable + KnownLayout + Sized + Send + Sync + 'static
{
    /// A stable identity, 1..=24 bytes without NUL (checked when a container of
    /// this type is created).
    const TYPE_ID: &'static str;
    /// What a container's header records (leave it: arrays derive theirs from their
    /// element's, as `[u64; 8]`).
    const TYPE_KEY: TypeKey = TypeKey::named(Self::TYPE_ID);
}

/// A type's identity as a header records it: up to 24 bytes, NUL padded.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TypeKey(pub(crate) [u8; MAX_TYPE_ID_LEN]);

impl TypeKey {
    /// The key of a type named `id` (truncated to 24 bytes; an invalid id is caught
    /// when a container is created, by [`TypeKey::is_valid`]).
    pub const fn named(id: &str) -> TypeKey {
        let b = id.as_bytes();
        let mut out = [0u8; MAX_TYPE_ID_LEN];
        let mut i = 0;
        while i < b.len() && i < MAX_TYPE_ID_LEN {
            out[i] = b[i];
            i += 1;
        }
        TypeKey(out)
    }

    /// The key of an array of `n` elements of key `elem`: `[elem; n]`, truncated.
    pub const fn array(elem: TypeKey, n: usize) -> TypeKey {
        let mut out = [0u8; MAX_TYPE_ID_LEN];
        let mut at = 0;
        out[0] = b'[';
        at += 1;
        let mut i = 0;
        while i < MAX_TYPE_ID_LEN && elem.0[i] != 0 && at < MAX_TYPE_ID_LEN {
            out[at] = elem.0[i];
            at += 1;
            i += 1;
        }
        // "; n]"
        let mut digits = [0u8; 20];
        let mut nd = 0;
        let mut v = n;
        loop {
            digits[nd] = b'0' + (v % 10) as u8;
            nd += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        let tail_len = 3 + nd;
        // Keep the length and the bracket whole, cutting the element's id if needed.
        if at + tail_len > MAX_TYPE_ID_LEN {
            at = MAX_TYPE_ID_LEN - tail_len;
        }
        out[at] = b';';
        out[at + 1] = b' ';
        at += 2;
        while nd > 0 {
            nd -= 1;
            out[at] = digits[nd];
            at += 1;
        }
        out[at] = b']';
        TypeKey(out)
    }

    /// The bytes, NUL padded.
    pub fn as_bytes(&self) -> &[u8; MAX_TYPE_ID_LEN] {
        &self.0
    }

    /// Whether the key is 1..=24 bytes without NUL inside.
    pub fn is_valid(&self) -> bool {
        let end = self
            .0
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(MAX_TYPE_ID_LEN);
        end > 0 && self.0[end..].iter().all(|&b| b == 0)
    }

    /// The key as text (for messages).
    pub fn name(&self) -> String {
        let end = self
            .0
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(MAX_TYPE_ID_LEN);
        String::from_utf8_lossy(&self.0[..end]).into_owned()
    }
}

impl std::fmt::Debug for TypeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TypeKey({:?})", self.name())
    }
}

macro_rules! ptype {
    ($($t:ty => $id:literal),* $(,)?) => {
        $(impl PType for $t {
            const TYPE_ID: &'static str = $id;
        })*
    };
}

ptype!(
    u8 => "u8", u16 => "u16", u32 => "u32", u64 => "u64", u128 => "u128",
    i8 => "i8", i16 => "i16", i32 => "i32", i64 => "i64", i128 => "i128",
    f32 => "f32", f64 => "f64", () => "()",
);

/// An array's key names its element and length: `[u64; 8]`.
impl<T: PType, const N: usize> PType for [T; N] {
    const TYPE_ID: &'static str = "array";
    const TYPE_KEY: TypeKey = TypeKey::array(T::TYPE_KEY, N);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_keys_name_element_and_length() {
        assert_eq!(<[u64; 8]>::TYPE_KEY.name(), "[u64; 8]");
        assert_eq!(<[u8; 64]>::TYPE_KEY.name(), "[u8; 64]");
        assert_eq!(<[[u8; 4]; 3]>::TYPE_KEY.name(), "[[u8; 4]; 3]");
        assert!(<[[u8; 4]; 3]>::TYPE_KEY.is_valid());
        assert!(!TypeKey::named("").is_valid());
    }
}
