//! [`PBox`]: one owned persistent value, and [`PTx`]: a transaction over boxes.

use std::marker::PhantomData;

use pmem_core::tx::Tx;
use pmem_core::PPtr;

use crate::element::Media;
use crate::heap::{Access, Claim, PHeap, Size};
use crate::ptype::PType;
use crate::roots::{
    find_slot, root_key, rooted_name, sealed::Structure, write_slot, Container, Found,
};
use crate::tag::{Kind, Tag, TAG_BYTES};
use crate::{Error, Result};

const VERSION: u16 = 1;

/// An owned persistent value of type `T`: a block holding a type tag and the
/// value. Not `Clone`: one handle owns the box, freeing it ([`PTx::free_box`])
/// consumes the handle, and a freed box cannot be used again:
///
/// ```compile_fail,E0382
/// # use pmem_collections::{PBox, PHeap};
/// # fn f(heap: &PHeap) -> pmem_collections::Result<()> {
/// heap.transaction(|tx| {
///     let b = tx.alloc_box(&7u64)?;
///     tx.free_box(b)?;
///     tx.free_box(b) // error: use of moved value `b`
/// })
/// # }
/// ```
///
/// A box is found again after a restart only through a root: open it with
/// [`PHeap::root`] (`heap.root::<PBox<u64>>("counter")`), or give a new one a name
/// with [`PTx::set_root`] in the transaction that allocates it. A transaction that
/// allocates a box and neither names nor frees it fails with [`Error::Unrooted`]
/// and rolls back: nothing allocated can become unreachable.
pub struct PBox<T: PType> {
    claim: Claim,
    _t: PhantomData<fn() -> T>,
}

impl<T: PType> std::fmt::Debug for PBox<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PBox<{}>@{:?}", T::TYPE_KEY.name(), self.claim)
    }
}

fn box_tag<T: PType>() -> Tag {
    Tag::new(
        Kind::Box,
        VERSION,
        None,
        Some((T::TYPE_KEY, std::mem::size_of::<T>())),
    )
}

impl<T: PType> PBox<T> {
    fn value_at(&self) -> PPtr<T> {
        PPtr::from_offset(self.claim.at() + TAG_BYTES)
    }

    /// The value (no transaction: a read).
    pub fn get(&self, heap: &PHeap) -> Result<T> {
        self.claim.check(heap, "PBox")?;
        let mut v = T::new_zeroed();
        heap.pool()
            .read_into(self.value_at().offset(), v.as_mut_bytes())?;
        Ok(v)
    }

    /// Replaces the value, in one transaction.
    pub fn set(&mut self, heap: &PHeap, value: &T) -> Result<()> {
        self.claim.check(heap, "PBox")?;
        let at = self.value_at();
        heap.run(self.claim.access(), Size::Small, |tx| {
            Ok(tx.write(at, value)?)
        })
    }
}

impl<T: PType> Structure for PBox<T> {
    const WHAT: &'static str = "PBox";

    fn tag() -> Tag {
        box_tag::<T>()
    }

    fn create_in(tx: &mut Tx<'_>) -> Result<u64> {
        let tag = box_tag::<T>();
        tag.check_ids()?;
        let block = tx.alloc(TAG_BYTES + std::mem::size_of::<T>() as u64)?;
        tx.write(block.cast::<Tag>(), &tag)?;
        Ok(block.offset())
    }

    fn open_claimed(_heap: &PHeap, claim: Claim) -> Result<Self> {
        Ok(PBox {
            claim,
            _t: PhantomData,
        })
    }

    fn destroy_in(self, heap: &PHeap, tx: &mut Tx<'_>) -> Result<()> {
        self.claim.check(heap, "PBox")?;
        Ok(tx.free(
            PPtr::from_offset(self.claim.at()),
            TAG_BYTES + std::mem::size_of::<T>() as u64,
        )?)
    }

    fn offset(&self) -> u64 {
        self.claim.at()
    }
}

impl<T: PType> Container for PBox<T> {
    fn blocks(&self, heap: &PHeap) -> Result<Vec<u64>> {
        self.claim.check(heap, "PBox")?;
        Ok(vec![self.claim.at()])
    }
}

/// A running transaction of a [`PHeap`] ([`PHeap::transaction`]): boxes allocated,
/// written, named and freed in it commit together or not at all.
pub struct PTx<'a, 'log> {
    tx: &'a mut Tx<'log>,
    heap: &'a PHeap,
    /// Boxes allocated here and not yet named or freed.
    unrooted: Vec<u64>,
}

impl std::fmt::Debug for PTx<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PTx").field("tid", &self.tx.tid()).finish()
    }
}

impl PTx<'_, '_> {
    /// Allocates a box holding `value`. It is freed again if the transaction
    /// aborts; give it a root ([`PTx::set_root`]) to find it after a restart.
    pub fn alloc_box<T: PType>(&mut self, value: &T) -> Result<PBox<T>> {
        let at = PBox::<T>::create_in(self.tx)?;
        self.tx
            .write(PPtr::<T>::from_offset(at + TAG_BYTES), value)?;
        let claim = self.heap.claim(at, Access::Exclusive)?;
        self.unrooted.push(at);
        PBox::open_claimed(self.heap, claim)
    }

    /// Frees the box when the transaction commits (its handle is consumed, so it
    /// cannot be freed twice). A named box is refused with [`Error::Rooted`]:
    /// remove it with [`PHeap::remove_root`], which frees it and its name together.
    pub fn free_box<T: PType>(&mut self, b: PBox<T>) -> Result<()> {
        let at = b.claim.at();
        if let Some(name) = rooted_name(self.tx, self.heap.roots_offset()?, at)? {
            return Err(Error::Rooted { name });
        }
        b.destroy_in(self.heap, self.tx)?;
        self.unrooted.retain(|&u| u != at);
        Ok(())
    }

    /// Names `b` as the root `name` (a new name), so it is found after a restart
    /// with [`PHeap::root`].
    pub fn set_root<T: PType>(&mut self, name: &str, b: &PBox<T>) -> Result<()> {
        b.claim.check(self.heap, "PBox")?;
        let key = root_key(name)?;
        let roots_at = self.heap.roots_offset()?;
        match find_slot(self.tx, roots_at, &key)? {
            Found::Free(i) => {
                write_slot(self.tx, roots_at, i, &key, b.claim.at())?;
                self.unrooted.retain(|&u| u != b.claim.at());
                Ok(())
            }
            Found::Named(..) => Err(Error::RootTaken { name: name.into() }),
            Found::Full => Err(Error::RootsFull {
                slots: crate::roots::ROOT_SLOTS,
            }),
        }
    }

    /// The value of `b` as this transaction sees it.
    pub fn get<T: PType>(&self, b: &PBox<T>) -> Result<T> {
        b.claim.check(self.heap, "PBox")?;
        Ok(self.tx.read(b.value_at())?)
    }

    /// Writes `value` into `b`.
    pub fn set<T: PType>(&mut self, b: &mut PBox<T>, value: &T) -> Result<()> {
        b.claim.check(self.heap, "PBox")?;
        Ok(self.tx.write(b.value_at(), value)?)
    }
}

impl PHeap {
    /// Runs `f` as one transaction: every box it allocates, writes or frees, all or
    /// nothing. An error from `f` (or a panic) rolls it back. Runs in the heap's
    /// exclusive mode ([`crate::HeapOptions::mode`]).
    pub fn transaction<R>(&self, f: impl FnOnce(&mut PTx<'_, '_>) -> Result<R>) -> Result<R> {
        self.run_once(|tx| {
            let mut ptx = PTx {
                tx,
                heap: self,
                unrooted: Vec::new(),
            };
            let r = f(&mut ptx)?;
            match ptx.unrooted.first() {
                Some(&offset) => Err(Error::Unrooted { offset }),
                None => Ok(r),
            }
        })
    }
}
