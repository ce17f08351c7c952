//! Named roots: the pool's root object is a directory of up to [`ROOT_SLOTS`]
//! names, each naming one structure (a container, a box, a mutex). A structure is
//! reachable after a restart only through a root (or through a structure a root
//! reaches).

use pmem_core::tx::Tx;
use pmem_core::{PPtr, RootType};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::heap::{Access, Claim, PHeap, Size};
use crate::tag::Tag;
use crate::{Error, Result};

/// Longest root name, in bytes.
pub const MAX_ROOT_NAME: usize = 48;
/// Roots a heap can name.
pub const ROOT_SLOTS: usize = 31;

/// One name of the directory.
#[doc(hidden)]
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct RootSlot {
    name: [u8; MAX_ROOT_NAME],
    /// The structure's offset (0: a free slot).
    at: u64,
    reserved: u64,
}

/// The pool root of a heap: a directory of named roots (2 KiB).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Roots {
    reserved: [u64; 8],
    slots: [RootSlot; ROOT_SLOTS],
}

impl RootType for Roots {
    const ROOT_ID: &'static str = "pmem-collections/roots";
    const LAYOUT_VERSION: u32 = 1;
}

const SLOTS_AT: u64 = 64;
const SLOT_BYTES: u64 = std::mem::size_of::<RootSlot>() as u64;
const _: () = assert!(SLOT_BYTES == 64);

pub(crate) mod sealed {
    use super::*;

    /// What the heap needs of a structure it opens by name.
    pub trait Structure: Sized + Send + Sync + 'static {
        /// Its kind, for errors ("PHashMap").
        const WHAT: &'static str;
        /// The tag its header must carry.
        fn tag() -> Tag;
        /// Creates an empty one in `tx`; returns its offset.
        fn create_in(tx: &mut Tx<'_>) -> Result<u64>;
        /// The handle of the structure at `claim` (its tag already checked),
        /// claiming what it contains.
        fn open_claimed(heap: &PHeap, claim: Claim) -> Result<Self>;
        /// Frees every block of the structure (at the commit of `tx`), consuming
        /// its handle.
        fn destroy_in(self, heap: &PHeap, tx: &mut Tx<'_>) -> Result<()>;
        /// The offset of the structure's header.
        fn offset(&self) -> u64;
    }
}

/// A structure that can be a named root: every container, [`crate::PBox`] and
/// [`crate::PMutex`].
pub trait Container: sealed::Structure {
    /// Every allocator block the structure owns (for an exact leak check against
    /// [`PHeap::live_blocks`]).
    fn blocks(&self, heap: &PHeap) -> Result<Vec<u64>>;
}

fn slot_name(name: &str) -> Result<[u8; MAX_ROOT_NAME]> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() > MAX_ROOT_NAME || b.contains(&0) {
        return Err(Error::InvalidRootName {
            name: name.into(),
            max: MAX_ROOT_NAME,
        });
    }
    let mut out = [0u8; MAX_ROOT_NAME];
    out[..b.len()].copy_from_slice(b);
    Ok(out)
}

impl PHeap {
    fn roots_at(&self) -> Result<u64> {
        Ok(self.pool().root::<Roots>()?.offset())
    }

    pub(crate) fn roots_offset(&self) -> Result<u64> {
        self.roots_at()
    }

    fn read_roots(&self) -> Result<Roots> {
        Ok(self.pool().read(self.pool().root::<Roots>()?)?)
    }

    /// Opens the root structure `name` as a `C`, creating an empty one (in one
    /// transaction with its name) if there is none. Fails with
    /// [`Error::TypeMismatch`] if `name` holds another type, and with
    /// [`Error::AlreadyOpen`] if its handle is live.
    pub fn root<C: Container>(&self, name: &str) -> Result<C> {
        self.root_with(name, Access::Exclusive)
    }

    pub(crate) fn root_with<C: Container>(&self, name: &str, access: Access) -> Result<C> {
        let key = slot_name(name)?;
        let roots_at = self.roots_at()?;
        // Looked up and created under the heap's write lock, so two threads naming
        // roots at once never take the same slot.
        let at = self.run(Access::Exclusive, Size::Small, |tx| {
            match find_slot(tx, roots_at, &key)? {
                Found::Named(_, at) => Ok(at),
                Found::Free(i) => {
                    let at = C::create_in(tx)?;
                    write_slot(tx, roots_at, i, &key, at)?;
                    Ok(at)
                }
                Found::Full => Err(Error::RootsFull { slots: ROOT_SLOTS }),
            }
        })?;
        self.check_tag(at, &C::tag())?;
        let claim = self.claim(at, access)?;
        C::open_claimed(self, claim)
    }

    /// Removes the root `name` and frees its structure, whose handle `c` is
    /// consumed, in one transaction. Fails with [`Error::WrongHeap`] if `c` is not
    /// the structure `name` names in this heap.
    pub fn remove_root<C: Container>(&self, name: &str, c: C) -> Result<()> {
        let key = slot_name(name)?;
        let roots_at = self.roots_at()?;
        // Once, in the heap's mode (no retry: the handle moves into the
        // transaction). Frees only: the lazy ring takes them by the thousand, an
        // undo transaction `TxGeometry::alloc_records` of them; a structure with
        // more blocks than that fails with `LogFull`, unchanged.
        self.run_once(|tx| match find_slot(tx, roots_at, &key)? {
            Found::Named(i, at) if at == c.offset() => {
                c.destroy_in(self, tx)?;
                write_slot(tx, roots_at, i, &[0; MAX_ROOT_NAME], 0)
            }
            _ => Err(Error::WrongHeap {
                what: C::WHAT,
                offset: c.offset(),
            }),
        })
    }

    /// The names of the roots, in slot order.
    pub fn root_names(&self) -> Result<Vec<String>> {
        let roots = self.read_roots()?;
        Ok(roots
            .slots
            .iter()
            .filter(|s| s.at != 0)
            .map(|s| {
                let end = s.name.iter().position(|&b| b == 0).unwrap_or(MAX_ROOT_NAME);
                String::from_utf8_lossy(&s.name[..end]).into_owned()
            })
            .collect())
    }
}

/// What a name's lookup found.
pub(crate) enum Found {
    /// The slot and the structure's offset.
    Named(usize, u64),
    /// No such name; the first free slot.
    Free(usize),
    /// No such name and no free slot.
    Full,
}

/// Looks `key` up in the directory at `roots_at`, as `tx` sees it.
pub(crate) fn find_slot(tx: &Tx<'_>, roots_at: u64, key: &[u8; MAX_ROOT_NAME]) -> Result<Found> {
    let mut free = None;
    for i in 0..ROOT_SLOTS {
        let slot: RootSlot = tx.read(PPtr::from_offset(
            roots_at + SLOTS_AT + i as u64 * SLOT_BYTES,
        ))?;
        if slot.at != 0 && &slot.name == key {
            return Ok(Found::Named(i, slot.at));
        }
        if slot.at == 0 && free.is_none() {
            free = Some(i);
        }
    }
    Ok(free.map_or(Found::Full, Found::Free))
}

/// Writes slot `i` of the directory at `roots_at`.
pub(crate) fn write_slot(
    tx: &mut Tx<'_>,
    roots_at: u64,
    i: usize,
    key: &[u8; MAX_ROOT_NAME],
    at: u64,
) -> Result<()> {
    let slot = RootSlot {
        name: *key,
        at,
        reserved: 0,
    };
    Ok(tx.write(
        PPtr::<RootSlot>::from_offset(roots_at + SLOTS_AT + i as u64 * SLOT_BYTES),
        &slot,
    )?)
}

/// Checks a root name.
pub(crate) fn root_key(name: &str) -> Result<[u8; MAX_ROOT_NAME]> {
    slot_name(name)
}

/// The name of the root that names the structure at `at`, if any.
pub(crate) fn rooted_name(tx: &Tx<'_>, roots_at: u64, at: u64) -> Result<Option<String>> {
    for i in 0..ROOT_SLOTS {
        let slot: RootSlot = tx.read(PPtr::from_offset(
            roots_at + SLOTS_AT + i as u64 * SLOT_BYTES,
        ))?;
        if slot.at == at {
            let end = slot
                .name
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(MAX_ROOT_NAME);
            return Ok(Some(
                String::from_utf8_lossy(&slot.name[..end]).into_owned(),
            ));
        }
    }
    Ok(None)
}
