//! Typed roots: the stable identity a root type's author gives it.
//!
//! A pool created with [`crate::PoolOptions::root`] records its root type's
//! [`RootType::ROOT_ID`] and [`RootType::LAYOUT_VERSION`] (and size) in the header;
//! [`crate::Pool::root`] hands out the root only to a type declaring the same id,
//! version and size. The id is chosen by the type's author, not derived from the Rust
//! type name, so renaming the type or moving it to another module or crate keeps its
//! pools usable; changing the layout is announced by bumping the version, which makes
//! old pools fail with [`crate::PoolError::RootMismatch`] instead of being misread.
//!
//! The root needs only [`FromBytes`] (zero bytes and torn bytes are valid values) and
//! [`KnownLayout`]: not `Immutable`, so a root may hold atomics such as
//! [`crate::AtomicPPtr`] and [`std::sync::atomic::AtomicU64`].

use zerocopy::{FromBytes, KnownLayout};

/// Longest root id, in bytes (the header keeps 64 NUL-padded bytes).
pub const MAX_ROOT_ID_LEN: usize = 63;

/// A type that can be a pool's root object.
///
/// ```
/// use pmem_core::{AtomicPPtr, RootType};
/// use std::sync::atomic::AtomicU64;
/// use zerocopy::{FromBytes, IntoBytes, KnownLayout};
///
/// #[derive(FromBytes, IntoBytes, KnownLayout)]
/// #[repr(C)]
/// struct Root {
///     head: AtomicPPtr<u64>,
///     count: AtomicU64,
/// }
///
/// impl RootType for Root {
///     const ROOT_ID: &'static str = "my-app/root";
///     const LAYOUT_VERSION: u32 = 1;
/// }
/// ```
pub trait RootType: FromBytes + KnownLayout + Sized {
    /// A stable identity, 1..=63 bytes without NUL (checked at compile time when the
    /// type is used as a root). Choose it once and keep it across renames and moves.
    const ROOT_ID: &'static str;
    /// The version of the type's layout; bump it whenever the layout changes.
    const LAYOUT_VERSION: u32;
}

/// Whether `id` is a valid root id: 1..=63 bytes without NUL.
pub const fn valid_root_id(id: &str) -> bool {
    let b = id.as_bytes();
    if b.is_empty() || b.len() > MAX_ROOT_ID_LEN {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if b[i] == 0 {
            return false;
        }
        i += 1;
    }
    true
}

macro_rules! primitive_roots {
    ($($t:ty),*) => {$(
        impl RootType for $t {
            const ROOT_ID: &'static str = stringify!($t);
            const LAYOUT_VERSION: u32 = 1;
        }
    )*};
}

primitive_roots!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128);

macro_rules! array_roots {
    ($t:ty: $($n:literal)*) => {$(
        impl RootType for [$t; $n] {
            const ROOT_ID: &'static str = concat!("[", stringify!($t), "; ", stringify!($n), "]");
            const LAYOUT_VERSION: u32 = 1;
        }
    )*};
}

array_roots!(u64: 1 2 3 4 5 6 7 8 16 32 64);
array_roots!(u8: 8 16 32 64 128 256 512 1024 4096);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_builtin_roots() {
        assert_eq!(<u64 as RootType>::ROOT_ID, "u64");
        assert_eq!(<[u64; 4] as RootType>::ROOT_ID, "[u64; 4]");
        assert!(valid_root_id("a"));
        assert!(!valid_root_id(""));
        assert!(!valid_root_id("a\0b"));
        assert!(!valid_root_id(&"x".repeat(64)));
        assert!(valid_root_id(&"x".repeat(63)));
    }
}
