//! Typed objects: what the collector must know about a type (a stable id, its size,
//! where its persistent pointers are and what they point to), declared once with
//! [`persistent_type!`](crate::persistent_type) so no offset is written by hand, and
//! the [`Registry`] of a program's types that a heap persists at format and checks
//! at open.

use std::collections::BTreeMap;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::DefragError;

/// A persistent pointer field of a type: its byte offset in the object, and the
/// type id of what it points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PtrField {
    /// Offset of the field (a `PPtr<Target>`, 8 bytes) in the object.
    pub offset: u32,
    /// [`PersistentType::TYPE_ID`] of the target type.
    pub target: u32,
}

/// A type whose objects live in a [`DefragHeap`](crate::DefragHeap).
///
/// Implement it with [`persistent_type!`](crate::persistent_type), which computes
/// the pointer offsets with `offset_of!` and checks at compile time that each named
/// field is a `PPtr` to the named type. The collector follows exactly the declared
/// fields: a persistent pointer kept anywhere else (in a `u64`, say) is invisible to
/// it, and the object it points to may be reclaimed as a leak.
pub trait PersistentType: FromBytes + IntoBytes + KnownLayout + Immutable + Sized {
    /// A stable id, unique in the program's registry (never 0). Keep it across
    /// renames: it is what the heap stores.
    const TYPE_ID: u32;
    /// A name for reports.
    const NAME: &'static str;
    /// The persistent pointer fields.
    const POINTERS: &'static [PtrField];
}

/// Declares a `#[repr(C)]` zerocopy struct as a [`PersistentType`]:
///
/// ```
/// use pmem_defrag::{persistent_type, PersistentType};
/// use pmem_core::PPtr;
/// use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};
///
/// #[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
/// #[repr(C)]
/// struct Node {
///     value: u64,
///     next: PPtr<Node>,
/// }
/// persistent_type!(Node, id = 1, pointers = [next: Node]);
///
/// assert_eq!(Node::POINTERS.len(), 1);
/// assert_eq!(Node::POINTERS[0].offset, 8);
/// ```
///
/// An array of pointers is declared with its length, and counts as that many
/// pointer fields, in order:
///
/// ```
/// use pmem_defrag::{persistent_type, PersistentType};
/// use pmem_core::PPtr;
/// use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};
///
/// #[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
/// #[repr(C)]
/// struct Inner {
///     keys: [u64; 3],
///     parent: PPtr<Inner>,
///     children: [PPtr<Inner>; 4],
/// }
/// persistent_type!(Inner, id = 2, pointers = [parent: Inner, children[4]: Inner]);
///
/// let offsets: Vec<u32> = Inner::POINTERS.iter().map(|f| f.offset).collect();
/// assert_eq!(offsets, [24, 32, 40, 48, 56]);
/// ```
///
/// A field that is not a `PPtr` of the named type does not compile:
///
/// ```compile_fail
/// use pmem_defrag::persistent_type;
/// use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};
///
/// #[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
/// #[repr(C)]
/// struct Node {
///     value: u64,
///     next: u64,
/// }
/// persistent_type!(Node, id = 1, pointers = [next: Node]);
/// ```
#[macro_export]
macro_rules! persistent_type {
    // Pointer words a field declares: one, or an array's length.
    (@len) => { 1 };
    (@len $n:expr) => { $n };
    // Each declared field is a `PPtr` (or an array of them) to its target.
    (@check $v:ident, $field:ident, $target:ident) => {
        let _: &$crate::PPtr<$target> = &$v.$field;
    };
    (@check $v:ident, $field:ident, $target:ident, $n:expr) => {
        let _: &[$crate::PPtr<$target>; $n] = &$v.$field;
    };
    ($ty:ident, id = $id:expr, pointers = [$($field:ident $([$n:expr])? : $target:ident),* $(,)?]) => {
        impl $crate::PersistentType for $ty {
            const TYPE_ID: u32 = $id;
            const NAME: &'static str = stringify!($ty);
            const POINTERS: &'static [$crate::PtrField] = &{
                const N: usize = 0 $(+ $crate::persistent_type!(@len $($n)?))*;
                #[allow(unused_mut)]
                let mut out = [$crate::PtrField { offset: 0, target: 0 }; N];
                #[allow(unused_mut, unused_variables, unused_assignments)]
                let mut i = 0;
                $(
                    let base = ::core::mem::offset_of!($ty, $field);
                    let mut j = 0;
                    while j < $crate::persistent_type!(@len $($n)?) {
                        out[i] = $crate::PtrField {
                            offset: (base + j * ::core::mem::size_of::<$crate::PPtr<$target>>())
                                as u32,
                            target: <$target as $crate::PersistentType>::TYPE_ID,
                        };
                        i += 1;
                        j += 1;
                    }
                )*
                out
            };
        }
        const _: fn(&$ty) = |_v: &$ty| {
            $($crate::persistent_type!(@check _v, $field, $target $(, $n)?);)*
        };
    };
}

/// What the heap knows of a type at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeDesc {
    /// [`PersistentType::TYPE_ID`].
    pub id: u32,
    /// [`PersistentType::NAME`].
    pub name: String,
    /// Bytes of an object.
    pub size: u32,
    /// [`PersistentType::POINTERS`].
    pub pointers: Vec<PtrField>,
}

/// The types a program stores in a heap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Registry {
    types: BTreeMap<u32, TypeDesc>,
    duplicate: Option<u32>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds `T`. A second type with the same id is reported by the heap's `create`
    /// or `open` ([`DefragError::Registry`]).
    pub fn with<T: PersistentType>(mut self) -> Registry {
        let desc = TypeDesc {
            id: T::TYPE_ID,
            name: T::NAME.to_owned(),
            size: std::mem::size_of::<T>() as u32,
            pointers: T::POINTERS.to_vec(),
        };
        if self.types.insert(T::TYPE_ID, desc).is_some() {
            self.duplicate.get_or_insert(T::TYPE_ID);
        }
        self
    }

    /// The type with `id`.
    pub fn get(&self, id: u32) -> Option<&TypeDesc> {
        self.types.get(&id)
    }

    /// Every type, by id.
    pub fn types(&self) -> impl Iterator<Item = &TypeDesc> {
        self.types.values()
    }

    /// Checks the registry itself: ids unique and non-zero, sizes within what a
    /// heap stores, pointer fields inside their objects and aimed at known types.
    pub fn validate(&self) -> Result<(), DefragError> {
        let bad = |what: String| Err(DefragError::Registry(what));
        if let Some(id) = self.duplicate {
            return bad(format!("two types share the id {id}"));
        }
        for t in self.types.values() {
            if t.id == 0 {
                return bad(format!("type {} has the id 0", t.name));
            }
            if t.size == 0 || u64::from(t.size) > crate::layout::MAX_OBJECT {
                return bad(format!(
                    "type {} has an unsupported size {}",
                    t.name, t.size
                ));
            }
            for p in &t.pointers {
                if p.offset % 8 != 0 || p.offset + 8 > t.size {
                    return bad(format!(
                        "type {}: pointer at {} is misplaced",
                        t.name, p.offset
                    ));
                }
                if !self.types.contains_key(&p.target) {
                    return bad(format!(
                        "type {}: pointer at {} aims at unregistered type {}",
                        t.name, p.offset, p.target
                    ));
                }
            }
        }
        Ok(())
    }

    /// The persisted form: per type, id, size, name (length-prefixed) and pointers;
    /// deterministic (ordered by id).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(self.types.len() as u32).to_le_bytes());
        for t in self.types.values() {
            out.extend_from_slice(&t.id.to_le_bytes());
            out.extend_from_slice(&t.size.to_le_bytes());
            out.extend_from_slice(&(t.name.len() as u32).to_le_bytes());
            out.extend_from_slice(t.name.as_bytes());
            out.extend_from_slice(&(t.pointers.len() as u32).to_le_bytes());
            for p in &t.pointers {
                out.extend_from_slice(&p.offset.to_le_bytes());
                out.extend_from_slice(&p.target.to_le_bytes());
            }
        }
        out
    }

    /// Parses [`Registry::encode`]'s output; `None` if it is malformed.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Registry> {
        let mut c = Cursor { bytes, at: 0 };
        let n = c.u32()?;
        let mut r = Registry::new();
        for _ in 0..n {
            let id = c.u32()?;
            let size = c.u32()?;
            let name_len = c.u32()? as usize;
            let name = String::from_utf8(c.take(name_len)?.to_vec()).ok()?;
            let np = c.u32()?;
            let mut pointers = Vec::new();
            for _ in 0..np {
                pointers.push(PtrField {
                    offset: c.u32()?,
                    target: c.u32()?,
                });
            }
            r.types.insert(
                id,
                TypeDesc {
                    id,
                    name,
                    size,
                    pointers,
                },
            );
        }
        (c.at == bytes.len()).then_some(r)
    }
}

/// Reads little-endian fields in order.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let b = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(b)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}
