//! Direct PM pass-through (§4.3.3, Fig 9): a run of hidden sections mapped
//! straight into the program, bypassing the heap.
//!
//! The paper's kernel carves a region of hidden PM and exposes it as a device
//! `/dev/pmem_<size>_<addr>` that a program maps with `mmap`; the region never
//! enters the buddy system, so it costs no page descriptors and is not the
//! allocator's to reclaim. [`FusionHeap::pass_through`] does the same in user
//! space: it takes the highest run of contiguous hidden sections long enough (the
//! heap integrates from the bottom, so the two meet last), maps them with the
//! section space, and marks them passed — neither the heap nor the policy sees
//! them — until the [`PassThrough`] drops, which reclaims them (unmapped, hole
//! punched: the bytes are gone, as after `munmap` of the paper's device).
//!
//! The mapping is `MAP_SHARED` of the section file without `MAP_SYNC`: volatile
//! capacity, like the paper's (its STREAM benchmark uses it as an array). On a
//! tmpfs or disk file the "PM" is emulated, and [`PassThrough::emulated`] says so.

use std::fmt;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::global::Inside;
use super::heap::{FusionError, FusionHeap, Slot};

/// A PM region mapped for the program, outside the heap. See the module docs.
pub struct PassThrough<'h> {
    heap: &'h FusionHeap,
    first: usize,
    sections: usize,
    addr: usize,
    len: usize,
    emulated: bool,
}

impl fmt::Debug for PassThrough<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PassThrough")
            .field("name", &self.name())
            .field("sections", &(self.first..self.first + self.sections))
            .field("emulated", &self.emulated)
            .finish()
    }
}

impl FusionHeap {
    /// Maps `bytes` of hidden PM (rounded up to whole sections, contiguous) for
    /// direct use. Errors: [`FusionError::EmptyPassThrough`],
    /// [`FusionError::NoHiddenRun`] when no run of hidden sections is long enough,
    /// [`FusionError::Section`] when a mapping fails (sections mapped before it
    /// are given back).
    pub fn pass_through(&self, bytes: u64) -> Result<PassThrough<'_>, FusionError> {
        if bytes == 0 {
            return Err(FusionError::EmptyPassThrough);
        }
        let need = bytes.div_ceil(self.section_bytes());
        // Errors are built under the PM lock: off the heap.
        let _inside = Inside::enter();
        let mut pm = self.pm();
        let n = pm.slots.len();
        let count = usize::try_from(need).ok().filter(|&c| c <= n);
        let first = count.and_then(|count| {
            (0..=n - count).rev().find(|&s| {
                pm.slots[s..s + count]
                    .iter()
                    .all(|x| matches!(x, Slot::Hidden))
            })
        });
        let (Some(count), Some(first)) = (count, first) else {
            return Err(FusionError::NoHiddenRun {
                bytes,
                sections: need,
            });
        };
        for index in first..first + count {
            if let Err(e) = pm.space.integrate(index) {
                for done in first..index {
                    let _ = pm.space.reclaim(done);
                    pm.slots[done] = Slot::Hidden;
                }
                if pm.space.state(index) == Some(super::section::SectionState::Lost) {
                    pm.slots[index] = Slot::Lost;
                }
                return Err(e.into());
            }
            pm.slots[index] = Slot::Passed;
        }
        let emulated = pm.space.backing().emulated;
        drop(pm);
        let len = usize::try_from(bytes).unwrap_or(usize::MAX);
        tracing::debug!(first, count, bytes, "pass-through mapping made");
        Ok(PassThrough {
            heap: self,
            first,
            sections: count,
            addr: self.section_addr(first),
            len,
            emulated,
        })
    }
}

impl PassThrough<'_> {
    /// The paper's device name for the region: `pmem_<size>_<addr>` (size in
    /// bytes, address in hex).
    pub fn name(&self) -> String {
        format!("pmem_{}_{:x}", self.len, self.addr)
    }

    /// Bytes mapped for the program (as asked; the sections behind it may hold
    /// more).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: a pass-through mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the PM is emulated (tmpfs or disk).
    pub fn emulated(&self) -> bool {
        self.emulated
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *const u8 {
        std::ptr::with_exposed_provenance(self.addr)
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: [addr, addr + len) lies in sections mapped read-write for this
        // value alone (marked passed: the heap and the policy never touch them)
        // until it drops; `&self` keeps it alive, and no `&mut` exists while
        // this borrow lives.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let p: *mut u8 = std::ptr::with_exposed_provenance_mut(self.addr);
        // SAFETY: as in `as_slice`; `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(p, self.len) }
    }

    /// The bytes as a slice of `T` (whole elements; a page-aligned start suits any
    /// `T` up to 4 KiB alignment). For example `&mut [f64]` for STREAM's arrays.
    pub fn as_mut_slice_of<T>(&mut self) -> &mut [T]
    where
        T: FromBytes + IntoBytes + KnownLayout + Immutable,
    {
        let elems = self.len / size_of::<T>().max(1);
        let bytes = elems * size_of::<T>();
        let slice = &mut self.as_mut_slice()[..bytes];
        // A page-aligned region of whole elements always converts.
        <[T]>::mut_from_bytes(slice).unwrap_or_default()
    }
}

impl Drop for PassThrough<'_> {
    fn drop(&mut self) {
        let _inside = Inside::enter();
        let mut pm = self.heap.pm();
        for index in self.first..self.first + self.sections {
            match pm.space.reclaim(index) {
                Ok(_) => pm.slots[index] = Slot::Hidden,
                Err(e) => {
                    if pm.space.state(index) == Some(super::section::SectionState::Lost) {
                        pm.slots[index] = Slot::Lost;
                    }
                    tracing::warn!(index, error = %e, "pass-through section not given back");
                }
            }
        }
    }
}
