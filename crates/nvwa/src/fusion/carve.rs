//! The allocator inside one integrated section: chunks of [`CHUNK_BYTES`], each a
//! slab of one size class or part of a run for a large block.
//!
//! [`SectionCarver`] is the metadata the issue's "integrating a section builds its
//! allocator metadata" asks for. It is built when the heap integrates the section
//! and dropped when the section is reclaimed, so a hidden section costs none of
//! it. It lives in DRAM: one chunk descriptor per 64 KiB chunk (24 B, about
//! 48 KiB for a 128 MiB section, against the 1.75 MiB of page descriptors the
//! paper's kernel builds for the same section), a free-chunk bitmap and the heads
//! of the per-class lists. It works in offsets from the section's start; the heap
//! adds the section's address.
//!
//! # Blocks
//!
//! * **Small and medium** requests (up to [`MAX_SLAB`], 16 KiB) take a slot of a
//!   slab: a chunk cut into equal slots of one class (jemalloc's classes, four per
//!   doubling, 16-byte steps below 128 B). Slots are handed out by bumping a carve
//!   count first and from the chunk's free list after; the free list is in-band —
//!   a freed slot holds the index of the next free slot in its first four bytes —
//!   as in every slab allocator, so the DRAM metadata does not grow with the
//!   number of blocks. Slabs with a free slot are on a per-class list; a slab
//!   whose last block is freed goes back to the free chunks at once, so a section
//!   whose blocks are all freed is fully free and can be reclaimed.
//! * **Large** requests take a run of whole chunks (first fit in the bitmap).
//!   A request larger than a section, or aligned beyond 4 KiB, is not served here
//!   ([`SectionCarver::alloc`] returns `None`) and the heap serves it from DRAM.
//!
//! # Alignment
//!
//! A section starts on a page (4 KiB), and so does every chunk. A class whose size
//! is a power of two aligns its slots to that size (up to the page), so a request
//! aligned to more than 16 B is served from the power-of-two class at least as
//! large as its size and its alignment. Runs are page-aligned.
//!
//! # Trust
//!
//! The free list is in the section's memory, where a program that writes a freed
//! block (a use after free) can corrupt it. A popped index is checked against the
//! slab's carve count; a bad one drops the rest of that slab's list (its slots
//! leak, the slab stays usable for new carving) and is logged, instead of handing
//! out a slot twice or an address outside the section.

use std::fmt;

/// Bytes of one chunk: the unit of slabs and runs.
pub const CHUNK_BYTES: u64 = 64 << 10;

/// The largest request a slab serves; above it a block takes a run of chunks.
pub const MAX_SLAB: u64 = 16 << 10;

/// The largest alignment served from a section (the page); larger alignments go
/// to DRAM.
pub const MAX_ALIGN: u64 = 4096;

/// Slot sizes of the classes: jemalloc's small classes up to 2 KiB (as
/// [`crate::classes::SIZES`]) and its classes on to 16 KiB.
pub const CLASS_SIZES: [u64; 36] = [
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
    1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336,
    16384,
];

const CLASSES: usize = CLASS_SIZES.len();
const NONE: u32 = u32::MAX;

const _: () = assert!(CLASS_SIZES[CLASSES - 1] == MAX_SLAB);
const _: () = assert!(CHUNK_BYTES / MAX_SLAB >= 4);
const _: () = assert!(CHUNK_BYTES / 16 <= u16::MAX as u64 + 1);

/// The class serving `size` bytes aligned to `align` (a power of two), if a slab
/// serves it.
fn class_of(size: u64, align: u64) -> Option<usize> {
    if size > MAX_SLAB || align > MAX_ALIGN {
        return None;
    }
    let size = size.max(1);
    if align <= 16 {
        return CLASS_SIZES.iter().position(|&s| s >= size);
    }
    // A power-of-two class at least `size` and `align`: its slots are aligned to
    // it (chunks start on pages).
    let want = size.max(align).next_power_of_two();
    CLASS_SIZES.iter().position(|&s| s == want)
}

/// What a chunk holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkKind {
    /// Nothing: in the free bitmap.
    Free,
    /// Slots of one class.
    Slab,
    /// The first chunk of a large block's run.
    RunHead,
    /// A later chunk of a run.
    RunTail,
}

/// One chunk's descriptor (24 B).
#[derive(Clone, Copy, Debug)]
struct Chunk {
    kind: ChunkKind,
    /// The slab's class.
    class: u8,
    /// Slots handed out and not freed.
    live: u16,
    /// Slots carved so far (slots below it were handed out at least once).
    carved: u16,
    /// The first free slot + 1 (0: none); the list continues in-band.
    free_head: u32,
    /// A run head's length in chunks.
    run: u32,
    /// The class list's neighbours (slabs with a free slot), [`NONE`] at the ends.
    next: u32,
    prev: u32,
}

impl Chunk {
    const FREE: Chunk = Chunk {
        kind: ChunkKind::Free,
        class: 0,
        live: 0,
        carved: 0,
        free_head: 0,
        run: 0,
        next: NONE,
        prev: NONE,
    };
}

/// Why a free was refused: the offset is not a block this carver handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("offset {offset:#x} is not a live block of this section ({why})")]
pub struct InvalidFree {
    /// The offset given.
    pub offset: u64,
    /// What is wrong with it.
    pub why: &'static str,
}

/// The allocator metadata of one integrated section. See the module docs.
///
/// It reads and writes the section's memory only for the in-band free lists,
/// through the base address it is given; everything else is DRAM.
pub struct SectionCarver {
    /// The section's first byte (exposed provenance), page-aligned.
    base: usize,
    chunks: Vec<Chunk>,
    /// One bit per chunk, set when free.
    free_bits: Vec<u64>,
    free_chunks: u32,
    /// Head of each class's list of slabs with a free slot.
    nonfull: [u32; CLASSES],
    live_bytes: u64,
    live_blocks: u64,
}

impl fmt::Debug for SectionCarver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SectionCarver")
            .field("chunks", &self.chunks.len())
            .field("free_chunks", &self.free_chunks)
            .field("live_bytes", &self.live_bytes)
            .field("live_blocks", &self.live_blocks)
            .finish()
    }
}

impl SectionCarver {
    /// The metadata of a fresh section of `section_bytes` (a positive multiple of
    /// [`CHUNK_BYTES`]; anything less than a chunk at the end is not used) whose
    /// memory starts at `base`.
    ///
    /// # Safety
    ///
    /// `[base, base + section_bytes)` must be mapped read-write, page-aligned,
    /// and hold no live object, for as long as the carver is used; the carver
    /// writes its free lists there.
    pub unsafe fn new(base: usize, section_bytes: u64) -> SectionCarver {
        let n = usize::try_from(section_bytes / CHUNK_BYTES).unwrap_or(0);
        let words = n.div_ceil(64);
        let mut free_bits = vec![u64::MAX; words];
        if let Some(last) = free_bits.last_mut() {
            let tail = n % 64;
            if tail != 0 {
                *last = (1u64 << tail) - 1;
            }
        }
        SectionCarver {
            base,
            chunks: vec![Chunk::FREE; n],
            free_bits,
            free_chunks: u32::try_from(n).unwrap_or(u32::MAX),
            nonfull: [NONE; CLASSES],
            live_bytes: 0,
            live_blocks: 0,
        }
    }

    /// Bytes held by live blocks (slot or run sizes, not the request sizes).
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Live blocks.
    pub fn live_blocks(&self) -> u64 {
        self.live_blocks
    }

    /// Bytes in chunks that are free (not counting free slots of slabs).
    pub fn free_chunk_bytes(&self) -> u64 {
        u64::from(self.free_chunks) * CHUNK_BYTES
    }

    /// The chunks of the section.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// The DRAM this metadata takes: the struct and its vectors by capacity.
    pub fn metadata_bytes(&self) -> usize {
        size_of::<SectionCarver>()
            + self.chunks.capacity() * size_of::<Chunk>()
            + self.free_bits.capacity() * size_of::<u64>()
    }

    /// A block of at least `size` bytes aligned to `align` (a power of two), as an
    /// offset from the section's start; `None` if the section has no room or
    /// cannot serve the request (larger than the section, aligned beyond a page).
    pub fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        match class_of(size, align) {
            Some(class) => self.alloc_slot(class),
            None if align <= MAX_ALIGN => self.alloc_run(size.max(1).div_ceil(CHUNK_BYTES)),
            None => None,
        }
    }

    /// The usable bytes of the live block at `offset` (its slot or run size).
    pub fn usable_size(&self, offset: u64) -> Option<u64> {
        let chunk = self
            .chunks
            .get(usize::try_from(offset / CHUNK_BYTES).ok()?)?;
        match chunk.kind {
            ChunkKind::Slab => Some(CLASS_SIZES[usize::from(chunk.class)]),
            ChunkKind::RunHead => Some(u64::from(chunk.run) * CHUNK_BYTES),
            ChunkKind::Free | ChunkKind::RunTail => None,
        }
    }

    /// Frees the block at `offset`. A slab left empty and a run's chunks go back
    /// to the free chunks.
    ///
    /// The slot's first four bytes are overwritten (the in-band free list); the
    /// caller must not use the block again. A double free of a slot is not
    /// detected (the slot would be listed twice; the same contract as
    /// `GlobalAlloc::dealloc`).
    pub fn free(&mut self, offset: u64) -> Result<u64, InvalidFree> {
        let bad = |why| InvalidFree { offset, why };
        let index = usize::try_from(offset / CHUNK_BYTES)
            .ok()
            .filter(|&i| i < self.chunks.len())
            .ok_or(bad("outside the section"))?;
        let within = offset % CHUNK_BYTES;
        let chunk = self.chunks[index];
        match chunk.kind {
            ChunkKind::Slab => {
                let size = CLASS_SIZES[usize::from(chunk.class)];
                if !within.is_multiple_of(size) {
                    return Err(bad("not at a slot's start"));
                }
                let slot = within / size;
                if slot >= u64::from(chunk.carved) || chunk.live == 0 {
                    return Err(bad("a slot never handed out"));
                }
                self.push_slot(index, slot as u32);
                self.live_bytes -= size;
                self.live_blocks -= 1;
                Ok(size)
            }
            ChunkKind::RunHead => {
                if within != 0 {
                    return Err(bad("inside a large block"));
                }
                let run = chunk.run as usize;
                for i in index..index + run {
                    self.release_chunk(i);
                }
                let bytes = run as u64 * CHUNK_BYTES;
                self.live_bytes -= bytes;
                self.live_blocks -= 1;
                Ok(bytes)
            }
            ChunkKind::Free => Err(bad("a free chunk")),
            ChunkKind::RunTail => Err(bad("inside a large block")),
        }
    }

    fn slots_of(class: usize) -> u64 {
        CHUNK_BYTES / CLASS_SIZES[class]
    }

    fn alloc_slot(&mut self, class: usize) -> Option<u64> {
        let mut index = self.nonfull[class];
        if index == NONE {
            index = self.take_chunks(1)?;
            self.chunks[index as usize] = Chunk {
                kind: ChunkKind::Slab,
                class: class as u8,
                ..Chunk::FREE
            };
            self.link(class, index);
        }
        let i = index as usize;
        let slots = Self::slots_of(class);
        let size = CLASS_SIZES[class];
        let slot = match self.pop_slot(i, slots) {
            Some(slot) => slot,
            None => {
                let c = &mut self.chunks[i];
                let slot = u64::from(c.carved);
                c.carved += 1;
                slot
            }
        };
        let c = &mut self.chunks[i];
        c.live += 1;
        if c.free_head == 0 && u64::from(c.carved) == slots {
            self.unlink(class, index);
        }
        self.live_bytes += size;
        self.live_blocks += 1;
        Some(u64::from(index) * CHUNK_BYTES + slot * size)
    }

    /// Takes the first slot of chunk `i`'s in-band free list, if it has one.
    fn pop_slot(&mut self, i: usize, slots: u64) -> Option<u64> {
        let head = self.chunks[i].free_head;
        let slot = u64::from(head.checked_sub(1)?);
        let next = self.read_link(i, slot);
        let carved = u32::from(self.chunks[i].carved);
        // The link was written by `push_slot` as a slot + 1 below the carve count;
        // anything else means the freed slot was written after its free.
        let next = if next == 0 || (next - 1 < carved && u64::from(next - 1) < slots) {
            next
        } else {
            tracing::error!(
                chunk = i,
                slot,
                link = next,
                "fusion heap: a freed block was overwritten (use after free); \
                 the rest of this slab's free list is dropped"
            );
            0
        };
        self.chunks[i].free_head = next;
        Some(slot)
    }

    fn push_slot(&mut self, i: usize, slot: u32) {
        let class = usize::from(self.chunks[i].class);
        let was_full = self.chunks[i].free_head == 0
            && u64::from(self.chunks[i].carved) == Self::slots_of(class);
        let head = self.chunks[i].free_head;
        self.write_link(i, u64::from(slot), head);
        let c = &mut self.chunks[i];
        c.free_head = slot + 1;
        c.live -= 1;
        let empty = c.live == 0;
        if empty {
            if !was_full {
                self.unlink(class, i as u32);
            }
            self.release_chunk(i);
        } else if was_full {
            self.link(class, i as u32);
        }
    }

    fn slot_addr(&self, i: usize, slot: u64) -> usize {
        let size = CLASS_SIZES[usize::from(self.chunks[i].class)];
        self.base + i * CHUNK_BYTES as usize + (slot * size) as usize
    }

    fn read_link(&self, i: usize, slot: u64) -> u32 {
        let p: *const u32 = std::ptr::with_exposed_provenance(self.slot_addr(i, slot));
        // SAFETY: the slot is inside the section (`i` < chunks, slot < slots), which
        // `new`'s contract keeps mapped read-write; slots are at least 16 B and
        // 16-aligned, so four bytes at its start are in bounds and aligned. The slot
        // is free: no live object is read through another reference.
        unsafe { p.read_volatile() }
    }

    fn write_link(&mut self, i: usize, slot: u64, link: u32) {
        let p: *mut u32 = std::ptr::with_exposed_provenance_mut(self.slot_addr(i, slot));
        // SAFETY: as in `read_link`; the slot was just freed by its owner, so
        // nothing else refers to its bytes.
        unsafe { p.write_volatile(link) }
    }

    fn link(&mut self, class: usize, index: u32) {
        let head = self.nonfull[class];
        {
            let c = &mut self.chunks[index as usize];
            c.next = head;
            c.prev = NONE;
        }
        if head != NONE {
            self.chunks[head as usize].prev = index;
        }
        self.nonfull[class] = index;
    }

    fn unlink(&mut self, class: usize, index: u32) {
        let Chunk { next, prev, .. } = self.chunks[index as usize];
        if prev == NONE {
            self.nonfull[class] = next;
        } else {
            self.chunks[prev as usize].next = next;
        }
        if next != NONE {
            self.chunks[next as usize].prev = prev;
        }
        let c = &mut self.chunks[index as usize];
        c.next = NONE;
        c.prev = NONE;
    }

    /// Marks `run` consecutive free chunks used (first fit); the first's index.
    fn take_chunks(&mut self, run: u64) -> Option<u32> {
        let run = usize::try_from(run).ok()?;
        if run == 0 || run > self.free_chunks as usize {
            return None;
        }
        let n = self.chunks.len();
        let mut start = 0;
        while start + run <= n {
            // Skip to the next free chunk a word at a time.
            let word = start / 64;
            let bits = self.free_bits[word] >> (start % 64);
            if bits == 0 {
                start = (word + 1) * 64;
                continue;
            }
            start += bits.trailing_zeros() as usize;
            if start + run > n {
                return None;
            }
            match (start..start + run).find(|&i| !self.is_free(i)) {
                Some(used) => start = used + 1,
                None => {
                    for i in start..start + run {
                        self.free_bits[i / 64] &= !(1 << (i % 64));
                    }
                    self.free_chunks -= run as u32;
                    return Some(start as u32);
                }
            }
        }
        None
    }

    fn is_free(&self, i: usize) -> bool {
        self.free_bits[i / 64] & (1 << (i % 64)) != 0
    }

    fn release_chunk(&mut self, i: usize) {
        self.chunks[i] = Chunk::FREE;
        self.free_bits[i / 64] |= 1 << (i % 64);
        self.free_chunks += 1;
    }

    fn alloc_run(&mut self, run: u64) -> Option<u64> {
        let head = self.take_chunks(run)?;
        let run = run as u32;
        self.chunks[head as usize] = Chunk {
            kind: ChunkKind::RunHead,
            run,
            ..Chunk::FREE
        };
        for i in head + 1..head + run {
            self.chunks[i as usize] = Chunk {
                kind: ChunkKind::RunTail,
                ..Chunk::FREE
            };
        }
        self.live_bytes += u64::from(run) * CHUNK_BYTES;
        self.live_blocks += 1;
        Some(u64::from(head) * CHUNK_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A page-aligned buffer standing in for a section.
    struct Region {
        buf: Vec<u8>,
        start: usize,
    }

    impl Region {
        fn new(bytes: u64) -> Region {
            let buf = vec![0u8; bytes as usize + 4096];
            let addr = buf.as_ptr().expose_provenance();
            let start = addr.next_multiple_of(4096) - addr;
            Region { buf, start }
        }

        fn base(&self) -> usize {
            self.buf.as_ptr().expose_provenance() + self.start
        }

        fn carver(&self, bytes: u64) -> SectionCarver {
            // SAFETY: the buffer is live, writable and large enough for the test;
            // nothing else refers to it while the carver runs.
            unsafe { SectionCarver::new(self.base(), bytes) }
        }
    }

    #[test]
    fn classes_cover_sizes_and_alignments() {
        assert_eq!(class_of(0, 1), Some(0));
        assert_eq!(CLASS_SIZES[class_of(17, 8).expect("a class")], 32);
        assert_eq!(CLASS_SIZES[class_of(4096, 8).expect("a class")], 4096);
        assert_eq!(CLASS_SIZES[class_of(100, 64).expect("a class")], 128);
        assert_eq!(CLASS_SIZES[class_of(16, 4096).expect("a class")], 4096);
        assert_eq!(class_of(MAX_SLAB + 1, 8), None);
        assert_eq!(class_of(8, 8192), None);
    }

    #[test]
    fn slabs_empty_back_into_free_chunks() {
        let r = Region::new(4 * CHUNK_BYTES);
        let mut c = r.carver(4 * CHUNK_BYTES);
        let blocks: Vec<u64> = (0..CHUNK_BYTES / 64 + 1)
            .map(|_| c.alloc(64, 8).expect("room"))
            .collect();
        assert_eq!(c.free_chunk_bytes(), 2 * CHUNK_BYTES);
        for b in blocks {
            c.free(b).expect("a live block");
        }
        assert_eq!(c.live_bytes(), 0);
        assert_eq!(c.free_chunk_bytes(), 4 * CHUNK_BYTES);
        // A run of the whole section now fits.
        assert_eq!(c.alloc(4 * CHUNK_BYTES, 8), Some(0));
        assert_eq!(c.alloc(1, 1), None);
    }

    #[test]
    fn bad_frees_are_refused() {
        let r = Region::new(2 * CHUNK_BYTES);
        let mut c = r.carver(2 * CHUNK_BYTES);
        let a = c.alloc(100, 8).expect("room");
        assert!(c.free(a + 1).is_err());
        assert!(c.free(a + 112 * 3).is_err());
        assert!(c.free(CHUNK_BYTES).is_err());
        assert!(c.free(10 * CHUNK_BYTES).is_err());
        let big = c.alloc(CHUNK_BYTES, 8).expect("room");
        assert!(c.free(big + 16).is_err());
        c.free(big).expect("a live block");
        c.free(a).expect("a live block");
        assert!(c.free(a).is_err());
    }

    #[test]
    fn a_corrupted_free_list_is_dropped_not_followed() {
        let r = Region::new(CHUNK_BYTES);
        let mut c = r.carver(CHUNK_BYTES);
        let a = c.alloc(64, 8).expect("room");
        let b = c.alloc(64, 8).expect("room");
        let _keep = c.alloc(64, 8).expect("room");
        c.free(a).expect("a live block");
        c.free(b).expect("a live block");
        // A use after free writes garbage over `b`'s link.
        let p: *mut u32 = std::ptr::with_exposed_provenance_mut(r.base() + b as usize);
        // SAFETY: inside the region, aligned; the test owns it.
        unsafe { p.write(0xdead_beef) };
        assert_eq!(c.alloc(64, 8), Some(b));
        // The bad link was dropped: the next slot is freshly carved, never `a`
        // twice or an address outside.
        assert_eq!(c.alloc(64, 8), Some(3 * 64));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Alloc(u64, u32),
        Free(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (prop_oneof![1u64..64, 64u64..5000, 5000u64..20_000, 60_000u64..200_000], 0u32..13)
                .prop_map(|(s, a)| Op::Alloc(s, a)),
            2 => any::<usize>().prop_map(Op::Free),
        ]
    }

    proptest! {
        /// Blocks never overlap, stay inside the section, are aligned, keep their
        /// bytes; live bytes match; freeing everything frees every chunk.
        #[test]
        fn blocks_are_disjoint_and_keep_their_bytes(ops in proptest::collection::vec(op(), 1..300)) {
            let bytes = 16 * CHUNK_BYTES;
            let r = Region::new(bytes);
            let mut c = r.carver(bytes);
            let mut live: BTreeMap<u64, (u64, u8)> = BTreeMap::new();
            let mut fill = 0u8;
            for op in ops {
                match op {
                    Op::Alloc(size, align_log) => {
                        let align = 1u64 << align_log;
                        let Some(off) = c.alloc(size, align) else { continue };
                        let usable = c.usable_size(off).expect("a live block");
                        prop_assert!(usable >= size);
                        prop_assert!(off + usable <= bytes);
                        prop_assert_eq!((r.base() as u64 + off) % align, 0);
                        if let Some((&prev, &(len, _))) = live.range(..=off).next_back() {
                            prop_assert!(prev + len <= off, "overlaps the block before");
                        }
                        if let Some((&next, _)) = live.range(off + 1..).next() {
                            prop_assert!(off + usable <= next, "overlaps the block after");
                        }
                        fill = fill.wrapping_add(1);
                        let p: *mut u8 = std::ptr::with_exposed_provenance_mut(r.base() + off as usize);
                        // SAFETY: the block is inside the region and ours.
                        unsafe { std::ptr::write_bytes(p, fill, usable as usize) };
                        live.insert(off, (usable, fill));
                    }
                    Op::Free(pick) => {
                        if live.is_empty() { continue }
                        let off = *live.keys().nth(pick % live.len()).expect("non-empty");
                        let (len, byte) = live.remove(&off).expect("listed");
                        let p: *const u8 = std::ptr::with_exposed_provenance(r.base() + off as usize);
                        // SAFETY: as above.
                        let got = unsafe { std::slice::from_raw_parts(p, len as usize) };
                        prop_assert!(got.iter().all(|&b| b == byte), "a block's bytes changed");
                        prop_assert_eq!(c.free(off).expect("a live block"), len);
                    }
                }
                prop_assert_eq!(c.live_bytes(), live.values().map(|v| v.0).sum::<u64>());
            }
            for (off, _) in std::mem::take(&mut live) {
                c.free(off).expect("a live block");
            }
            prop_assert_eq!(c.live_bytes(), 0);
            prop_assert_eq!(c.free_chunk_bytes(), bytes);
        }
    }
}
