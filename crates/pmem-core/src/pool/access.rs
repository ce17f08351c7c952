//! Reading and writing a pool: bounds- and alignment-checked dereference of
//! [`PPtr`]s, the typed root, and the byte write API (which the counters, and the
//! crash simulator, see at store granularity).

use std::sync::atomic::Ordering;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::header::{RootSpec, HEADER_AREA};
use super::root::RootType;
use super::{DurabilityMode, Pool};

/// The alignment every mapping is known to have (a page).
const MAPPING_ALIGN: u64 = 4096;
use crate::ptr::{AtomicPPtr, PPtr};
use crate::{counters, PoolError};

/// How the stores of one write call are ordered, for the crash simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteOrder {
    /// One group for the whole call (a `memcpy`: no order promised).
    Unordered,
    /// One group per word (the caller stores word by word, in address order).
    WordByWord,
    /// One unordered group that is a relocation: the simulator's reached bitmap
    /// tracks whether its stores reach the media.
    Relocation,
}

impl Pool {
    /// Whether copies into the pool ([`Pool::write`], [`Pool::write_bytes`],
    /// [`Pool::write_bytes_shared`]) go to the pool's file with `pwrite` instead of
    /// through the mapping: in msync mode, for a pool on a file (not simulated).
    ///
    /// Why: a store through a shared file mapping takes a write fault on every OS
    /// page after each `msync` (writeback write-protects the page again), and that
    /// write-protection costs a TLB shootdown, an interrupt to every other CPU
    /// running the process, per page. A `pwrite` dirties the same page cache
    /// without either, the mapping reads the new bytes at once (there is one page
    /// cache), and [`Pool::drain`]'s `msync` writes them back like any dirty page.
    /// Raw access ([`Pool::bytes_mut`], typed references, [`Pool::publish`],
    /// [`Pool::write_words_ordered`]) still stores through the mapping. Callers
    /// that write many small adjacent pieces do better to gather them and copy
    /// once (one system call each copy).
    #[inline]
    pub fn copies_by_pwrite(&self) -> bool {
        self.pwrite_file().is_some()
    }

    /// The file [`Pool::copies_by_pwrite`] writes to, if it does.
    #[inline]
    fn pwrite_file(&self) -> Option<&std::fs::File> {
        #[cfg(feature = "sim")]
        if self.sim.is_some() {
            return None;
        }
        if self.mode != DurabilityMode::Msync {
            return None;
        }
        self.file.as_ref()
    }

    /// Checks that `[offset, offset + len)` lies inside the pool.
    #[inline]
    pub(crate) fn check_range(&self, offset: u64, len: u64) -> Result<(), PoolError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(PoolError::OutOfBounds {
                offset,
                len,
                pool_len: self.len(),
            }),
        }
    }

    /// Checks that `[offset, offset + len)` lies inside the pool and after the
    /// header area: the check of every write API (the header is written once, at
    /// creation, and never through the public API).
    #[inline]
    pub(crate) fn check_write_range(&self, offset: u64, len: u64) -> Result<(), PoolError> {
        if offset < HEADER_AREA {
            return Err(PoolError::HeaderOverlap { offset, len });
        }
        self.check_range(offset, len)
    }

    /// Whether the bits of `align_mask` are clear in the *address* of byte `off`.
    ///
    /// The mapping is page aligned, so for alignments up to a page the offset's
    /// alignment is the address's, and the test is `off & mask` as before; only
    /// over-aligned types (`align_of::<T>() > 4096`, a compile-time fact) pay for
    /// adding the base. Either way it is one `and` and one compare.
    #[inline(always)]
    fn addr_aligned<T>(&self, off: u64) -> bool {
        let align_mask = std::mem::align_of::<T>() as u64 - 1;
        if std::mem::align_of::<T>() as u64 <= MAPPING_ALIGN {
            off & align_mask == 0
        } else {
            (self.map.base().as_ptr() as u64).wrapping_add(off) & align_mask == 0
        }
    }

    /// Checks a typed pointer: non-null, in bounds, its address aligned for `T`. The
    /// common case is one fused comparison; building the error is kept out of line.
    #[inline(always)]
    fn check_ptr<T>(&self, p: PPtr<T>) -> Result<(), PoolError> {
        let off = p.offset();
        let size = std::mem::size_of::<T>() as u64;
        // off - 1 < len - size  <=>  1 <= off && off + size <= len (no overflow: a
        // null offset wraps to u64::MAX, a T larger than the pool saturates to 0).
        if off.wrapping_sub(1) < self.len().saturating_sub(size) && self.addr_aligned::<T>(off) {
            Ok(())
        } else {
            Err(self.ptr_error::<T>(off))
        }
    }

    /// [`Pool::check_ptr`] for the write APIs: also outside the header area.
    #[inline(always)]
    fn check_ptr_mut<T>(&self, p: PPtr<T>) -> Result<(), PoolError> {
        let off = p.offset();
        let size = std::mem::size_of::<T>() as u64;
        // off - H < len + 1 - size - H  <=>  H <= off && off + size <= len, with
        // H = HEADER_AREA (a null or header offset wraps to a huge value).
        let room = (self.len() + 1).saturating_sub(size.saturating_add(HEADER_AREA));
        if off.wrapping_sub(HEADER_AREA) < room && self.addr_aligned::<T>(off) {
            Ok(())
        } else {
            Err(self.ptr_error::<T>(off))
        }
    }

    #[cold]
    #[inline(never)]
    fn ptr_error<T>(&self, off: u64) -> PoolError {
        let size = std::mem::size_of::<T>() as u64;
        if off == 0 {
            PoolError::Null
        } else if let Err(e) = self.check_range(off, size) {
            e
        } else if !self.addr_aligned::<T>(off) {
            PoolError::Misaligned {
                offset: off,
                align: std::mem::align_of::<T>() as u64,
            }
        } else {
            PoolError::HeaderOverlap {
                offset: off,
                len: size,
            }
        }
    }

    /// Address of byte `offset`. Computing it is always sound (a wrapping pointer
    /// offset); *dereferencing* it is sound only for ranges checked against the
    /// mapping ([`Pool::check_range`] and friends), which every caller does first.
    #[inline]
    pub(crate) fn addr(&self, offset: u64) -> *mut u8 {
        self.map.base().as_ptr().wrapping_add(offset as usize)
    }

    /// Hints the CPU to bring the line at `offset` into the cache for writing, so a
    /// later store to it does not wait for the line (a log about to be appended
    /// to). Only a hint: no effect on contents or durability; out-of-range offsets
    /// are ignored.
    pub(crate) fn prefetch_for_write(&self, offset: u64) {
        if offset >= self.len() {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch never faults and changes no memory; the address is
        // inside the mapping (checked above); SSE is part of the x86_64 baseline.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0};
            _mm_prefetch::<_MM_HINT_ET0>(self.addr(offset).cast::<i8>());
        }
    }

    /// The base address of the mapping, for code that must hand raw addresses to the
    /// flush primitives or compare against a raw-pointer baseline. Dereferencing it is
    /// the caller's responsibility.
    ///
    /// Under the crash simulator, handing out the base pointer makes the recorder
    /// scan the whole pool for raw writes at every later event (it cannot tell which
    /// lines the caller will write): prefer the typed accessors in crash tests.
    pub fn base_ptr(&self) -> *mut u8 {
        #[cfg(feature = "sim")]
        if let Some(sim) = &self.sim {
            sim.watch_all();
        }
        self.map.base().as_ptr()
    }

    /// The pool offset of `addr` if it points into this pool's mapping.
    pub fn offset_of<T: ?Sized>(&self, addr: *const T) -> Option<u64> {
        let a = addr.cast::<u8>() as usize;
        let base = self.base_ptr() as usize;
        (a >= base && a < base + self.map.len()).then(|| (a - base) as u64)
    }

    /// The typed root object, checked against the root recorded at creation: the
    /// same [`RootType::ROOT_ID`], [`RootType::LAYOUT_VERSION`] and size, else
    /// [`PoolError::RootMismatch`] naming both. Only a pointer is returned, so `T`
    /// may hold atomics; reach it with [`Pool::get_mut`] or [`Pool::get_shared`].
    pub fn root<T: RootType>(&self) -> Result<PPtr<T>, PoolError> {
        let want = RootSpec::of::<T>();
        let h = &self.header;
        if h.root_off == 0
            || h.root_id() != want.id
            || h.root_layout_version != want.layout_version
            || h.root_size != want.size
        {
            return Err(PoolError::RootMismatch {
                expected_id: want.id,
                expected_version: want.layout_version,
                expected_size: want.size,
                found_id: h.root_id().to_owned(),
                found_version: h.root_layout_version,
                found_size: h.root_size,
            });
        }
        let p = PPtr::from_offset(h.root_off);
        self.check_ptr(p)?;
        Ok(p)
    }

    /// A shared reference to the `T` at `p`. `T: Immutable` (no interior mutability),
    /// so nothing can change it while the reference lives.
    #[inline]
    pub fn get<T: FromBytes + KnownLayout + Immutable>(&self, p: PPtr<T>) -> Result<&T, PoolError> {
        self.check_ptr(p)?;
        // SAFETY: in bounds and aligned (checked); every bit pattern is a valid T
        // (FromBytes); T has no interior mutability (Immutable) and safe writes need
        // `&mut self`, which cannot coexist with the returned borrow of `self`.
        Ok(unsafe { &*self.addr(p.offset()).cast::<T>() })
    }

    /// An exclusive reference to the `T` at `p`. Writes through it are not counted in
    /// [`crate::Counters::bytes_written`] (the crash simulator sees them by diffing).
    #[inline]
    pub fn get_mut<T: FromBytes + IntoBytes + KnownLayout>(
        &mut self,
        p: PPtr<T>,
    ) -> Result<&mut T, PoolError> {
        self.check_writable()?;
        self.check_ptr_mut(p)?;
        #[cfg(feature = "sim")]
        self.sim_watch(p.offset(), std::mem::size_of::<T>() as u64, true);
        // SAFETY: in bounds, aligned, any bytes are a valid T and any T is valid bytes;
        // `&mut self` guarantees no other reference into the pool is live.
        Ok(unsafe { &mut *self.addr(p.offset()).cast::<T>() })
    }

    /// A copy of the `T` at `p`.
    pub fn read<T: FromBytes + KnownLayout + Immutable>(&self, p: PPtr<T>) -> Result<T, PoolError> {
        self.check_ptr(p)?;
        // SAFETY: as in `get`; read_unaligned copies without forming a reference.
        Ok(unsafe { self.addr(p.offset()).cast::<T>().read_unaligned() })
    }

    /// Writes `value` at `p` (counted in [`crate::Counters::bytes_written`]).
    #[track_caller]
    pub fn write<T: IntoBytes + Immutable>(
        &mut self,
        p: PPtr<T>,
        value: &T,
    ) -> Result<(), PoolError> {
        if p.is_null() {
            return Err(PoolError::Null);
        }
        let align = std::mem::align_of::<T>() as u64;
        if p.offset() & (align - 1) != 0 {
            return Err(PoolError::Misaligned {
                offset: p.offset(),
                align,
            });
        }
        self.write_bytes(p.offset(), value.as_bytes())
    }

    /// Copies `bytes` to `offset` (counted in [`crate::Counters::bytes_written`]).
    #[inline]
    #[track_caller]
    pub fn write_bytes(&mut self, offset: u64, bytes: &[u8]) -> Result<(), PoolError> {
        // SAFETY: `&mut self` means no reference into the pool is live.
        unsafe { self.write_bytes_shared(offset, bytes) }
    }

    /// The bytes `[offset, offset + len)`.
    pub fn bytes(&self, offset: u64, len: u64) -> Result<&[u8], PoolError> {
        self.check_range(offset, len)?;
        // SAFETY: in bounds; u8 has no invalid values; no safe write can happen while
        // `self` is borrowed shared.
        Ok(unsafe { std::slice::from_raw_parts(self.addr(offset), len as usize) })
    }

    /// The bytes `[offset, offset + len)`, writable.
    pub fn bytes_mut(&mut self, offset: u64, len: u64) -> Result<&mut [u8], PoolError> {
        self.check_writable()?;
        self.check_write_range(offset, len)?;
        #[cfg(feature = "sim")]
        self.sim_watch(offset, len, true);
        // SAFETY: in bounds; exclusive because of `&mut self`.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.addr(offset), len as usize) })
    }

    /// Stores `value` into the slot and persists the slot: the failure-atomic
    /// publication of an object (an aligned 8-byte store never tears).
    /// The object itself must be persisted before it is published.
    #[track_caller]
    pub fn publish<T>(
        &mut self,
        slot: PPtr<AtomicPPtr<T>>,
        value: PPtr<T>,
    ) -> Result<(), PoolError> {
        self.check_writable()?;
        self.check_ptr_mut(slot)?;
        // SAFETY: in bounds and aligned (checked); `&mut self`: no other reference
        // into the pool is live. Formed directly (not through `get_shared`), so the
        // simulator does not watch the slot for the pool's life.
        let s = unsafe { &*self.addr(slot.offset()).cast::<AtomicPPtr<T>>() };
        let bytes = value.offset().to_le_bytes();
        self.recorded_store(slot.offset(), &bytes, false, WriteOrder::Unordered, || {
            s.store(value, Ordering::Release)
        });
        counters::add_bytes_written(8);
        self.persist_ptr(slot)
    }

    /// A shared reference to a `T` that may have interior mutability (atomics such as
    /// [`AtomicPPtr`]), for structures shared between threads.
    ///
    /// # Safety
    /// While the returned reference lives, the caller must ensure that the bytes of
    /// this `T` are accessed only through references of this same type `T` (no
    /// [`Pool::get`] of another type over them, no `write_bytes_shared` into them);
    /// otherwise a safe `&U` could observe a concurrent write.
    pub unsafe fn get_shared<T: FromBytes + KnownLayout + Sync>(
        &self,
        p: PPtr<T>,
    ) -> Result<&T, PoolError> {
        self.check_ptr_mut(p)?;
        #[cfg(feature = "sim")]
        self.sim_watch(p.offset(), std::mem::size_of::<T>() as u64, false);
        // SAFETY: in bounds, aligned, any bytes are a valid T; T: Sync so sharing it
        // across threads is sound; aliasing with other types is excluded by the caller.
        Ok(unsafe { &*self.addr(p.offset()).cast::<T>() })
    }

    /// Copies `bytes` to `offset` through `&self`, for structures that share a pool
    /// between threads under their own synchronisation (counted in bytes written).
    ///
    /// # Safety
    /// No reference to any of the written bytes may be live, and no other thread may
    /// read or write them concurrently (the caller owns them, typically under a lock).
    #[inline]
    #[track_caller]
    pub unsafe fn write_bytes_shared(&self, offset: u64, bytes: &[u8]) -> Result<(), PoolError> {
        // SAFETY: the caller's contract is this one's.
        unsafe { self.copy_shared(offset, bytes, WriteOrder::Unordered) }
    }

    /// [`Pool::write_bytes_shared`], recorded in `order` (a relocation is an
    /// unordered copy the simulator's reached bitmap tracks).
    ///
    /// # Safety
    /// As for [`Pool::write_bytes_shared`].
    #[inline]
    #[track_caller]
    pub(crate) unsafe fn copy_shared(
        &self,
        offset: u64,
        bytes: &[u8],
        order: WriteOrder,
    ) -> Result<(), PoolError> {
        self.check_writable()?;
        self.check_write_range(offset, bytes.len() as u64)?;
        if let Some(file) = self.pwrite_file() {
            use std::os::unix::fs::FileExt;
            // The file offset is the pool offset: the mapping starts at byte 0.
            file.write_all_at(bytes, offset)
                .map_err(|e| PoolError::io("pwrite", &self.path, e))?;
            counters::add_bytes_written(bytes.len() as u64);
            return Ok(());
        }
        let dst = self.addr(offset);
        // SAFETY: in bounds (checked), writable mapping (checked); the source is a
        // separate slice (it cannot overlap bytes the caller guarantees are
        // unreferenced); exclusivity of the destination is the caller's contract.
        let copy = || unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
        self.recorded_store(offset, bytes, false, order, copy);
        counters::add_bytes_written(bytes.len() as u64);
        Ok(())
    }

    /// Stores `words` at the 8-aligned `offset` one word at a time, in address order
    /// (volatile stores, which the compiler keeps in program order; x86 keeps stores
    /// to one line in order on their way to memory). Code whose crash consistency
    /// depends on the order of the words inside one cache line must write them this
    /// way: a `write`/`write_bytes` of several words is a `memcpy`, which promises no
    /// order, and the crash simulator lets its words persist as any subset.
    #[track_caller]
    pub fn write_words_ordered(&mut self, offset: u64, words: &[u64]) -> Result<(), PoolError> {
        // SAFETY: `&mut self` means no reference into the pool is live.
        unsafe { self.write_words_ordered_shared(offset, words) }
    }

    /// [`Pool::write_words_ordered`] through `&self`, for structures that share a pool
    /// between threads under their own synchronisation.
    ///
    /// # Safety
    /// As for [`Pool::write_bytes_shared`].
    #[track_caller]
    pub unsafe fn write_words_ordered_shared(
        &self,
        offset: u64,
        words: &[u64],
    ) -> Result<(), PoolError> {
        self.check_writable()?;
        if offset & 7 != 0 {
            return Err(PoolError::Misaligned { offset, align: 8 });
        }
        let len = (words.len() as u64).saturating_mul(8);
        self.check_write_range(offset, len)?;
        let dst = self.addr(offset).cast::<u64>();
        let store = || {
            for (i, w) in words.iter().enumerate() {
                // SAFETY: in bounds and 8-aligned (checked; the mapping is page
                // aligned); exclusivity is the caller's contract.
                unsafe { dst.add(i).write_volatile(w.to_le()) };
            }
        };
        // The crate is little-endian only, so the words' bytes are their LE encoding.
        self.recorded_store(
            offset,
            words.as_bytes(),
            false,
            WriteOrder::WordByWord,
            store,
        );
        counters::add_bytes_written(len);
        Ok(())
    }

    /// Runs `store`, which writes `bytes` at `offset`; a simulated pool records it
    /// as one step (`nt`: a non-temporal store; `order`: how its stores group).
    #[inline(always)]
    #[track_caller]
    fn recorded_store<R>(
        &self,
        offset: u64,
        bytes: &[u8],
        nt: bool,
        order: WriteOrder,
        store: impl FnOnce() -> R,
    ) -> R {
        #[cfg(feature = "sim")]
        if let Some(sim) = &self.sim {
            return sim.write(
                offset,
                bytes,
                nt,
                order,
                std::panic::Location::caller(),
                store,
            );
        }
        let _ = (offset, bytes, nt, order);
        store()
    }

    /// Under the crash simulator, watch a range handed out for raw writes: until the
    /// next event issued through the pool (`transient`) or for the pool's life.
    #[cfg(feature = "sim")]
    #[inline]
    pub(crate) fn sim_watch(&self, offset: u64, len: u64, transient: bool) {
        if let Some(sim) = &self.sim {
            sim.watch(offset, len, transient);
        }
    }

    /// Stores `value` at `p` with a non-temporal store (`movnti` on x86-64 in `Dax`
    /// mode): it bypasses the cache and becomes durable at the next [`Pool::drain`],
    /// with no flush. In `Msync` mode the page is remembered for the next drain.
    #[track_caller]
    pub fn write_nt_u64(&mut self, p: PPtr<u64>, value: u64) -> Result<(), PoolError> {
        self.check_writable()?;
        self.check_ptr_mut(p)?;
        let addr = self.addr(p.offset()).cast::<u64>();
        let mode = self.mode;
        let store = || match mode {
            // SAFETY: in bounds and 8-aligned (checked), exclusive (`&mut self`).
            DurabilityMode::Dax => unsafe { crate::flush::store_nt_u64(addr, value) },
            // SAFETY: as above.
            _ => unsafe { addr.write(value) },
        };
        self.recorded_store(
            p.offset(),
            &value.to_le_bytes(),
            true,
            WriteOrder::Unordered,
            store,
        );
        if self.mode == DurabilityMode::Msync {
            self.remember_pages(p.offset(), 8);
        }
        counters::add_bytes_written(8);
        Ok(())
    }
}
