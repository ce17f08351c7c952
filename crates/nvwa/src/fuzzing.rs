//! Support for fuzzing (hidden from the documentation; not a stable API): the body
//! of the `nvwa_open` cargo-fuzz target, which the ordinary test
//! `tests/fuzz_corpus.rs` also runs over the committed corpus, and (with the
//! `sim` feature) [`ops`], the body of `nvwa_ops`.
//!
//! [`open_patched`] lays patches over the metadata of a valid template heap
//! ([`template`]: a heap whose log holds runs, objects (small and large), frees
//! and publications): the header, the active word and both log areas. Input
//! format: one flag byte (bit 0: recompute the header's checksum, so mutated
//! geometry reaches the checks behind it), then patches of `offset` (2 bytes,
//! little endian, modulo the metadata's size), `len` (1 byte) and `len` bytes. The
//! log's records carry no checksum (one record is one failure-atomic word), so
//! every mutation of the log reaches replay.
//!
//! What must hold:
//! * [`Nvwa::inspect`] on a read-only pool returns, never panics, and leaves the
//!   file unchanged; so does [`Nvwa::open`] there, which must fail if recovery has
//!   decisions to write;
//! * [`Nvwa::open`] returns a typed error or a heap whose live blocks lie inside
//!   the heap's pages without overlapping; allocating (small and large) hands out
//!   only blocks that overlap no live one, freeing them restores the live set, a
//!   checkpoint keeps it, and reopening finds the same set with nothing left to
//!   fix.

#[cfg(feature = "sim")]
#[path = "fuzzing_ops.rs"]
pub mod ops;

use std::sync::{Arc, OnceLock};

use pmem_core::fuzzing::TempFile;
use pmem_core::{
    AllocError, AtomicPPtr, OpenOptions, PPtr, PersistentAllocator, Pool, PoolOptions,
};

use crate::{Nvwa, NvwaOptions};

/// Bytes of the template pool.
pub const POOL_BYTES: u64 = 128 * 1024;
/// Words of each log area of the template (small, so the fuzzer reaches all).
pub const LOG_WORDS: u64 = 96;
/// Publication slots in the template's root.
const SLOTS: usize = 4;

/// The heap's options: one arena, the template's log size.
pub fn options() -> NvwaOptions {
    NvwaOptions {
        log_words: Some(LOG_WORDS),
        arenas: 1,
        ..NvwaOptions::default()
    }
}

/// What happened to one input.
#[derive(Debug)]
pub struct Outcome {
    /// [`Nvwa::inspect`] of the read-only pool (its error's text), objects found.
    pub inspect: Result<u64, String>,
    /// [`Nvwa::open`] (its error's text), with the number of live blocks.
    pub open: Result<usize, String>,
}

/// The template pool's bytes and the heap's region start.
///
/// # Panics
/// If building the template fails (a bug, not an input).
pub fn template() -> &'static (Vec<u8>, u64) {
    static TEMPLATE: OnceLock<(Vec<u8>, u64)> = OnceLock::new();
    TEMPLATE.get_or_init(|| build_template().expect("the nvwa_open template"))
}

fn build_template() -> Result<(Vec<u8>, u64), AllocError> {
    let pool = Arc::new(Pool::anonymous(
        &PoolOptions::new("pmkit-fuzz-nvwa", POOL_BYTES).root::<[u64; SLOTS]>(),
    )?);
    let root = pool.root::<[u64; SLOTS]>()?.offset();
    // SAFETY: the fresh pool's heap is this allocator's alone.
    let heap = unsafe { Nvwa::format_heap(Arc::clone(&pool), &options()) }?;
    let region = heap.geometry().region_start;
    let slot = |i: u64| PPtr::<AtomicPPtr<u8>>::from_offset(root + 8 * i);
    let a = heap.alloc(48)?;
    let b = heap.alloc(48)?;
    let c = heap.alloc(5000)?;
    // SAFETY: the slots are the root's, used by nothing else.
    unsafe { heap.alloc_publish(160, slot(0), &mut |m| m.fill(0xa0)) }?;
    // SAFETY: as above.
    unsafe { heap.alloc_publish(9000, slot(1), &mut |m| m.fill(0xa1)) }?;
    let d = heap.alloc(2000)?;
    // SAFETY: `b` and `c` were allocated above with these sizes, unused.
    unsafe { heap.free(b, 48) }?;
    // SAFETY: as above.
    unsafe { heap.free(c, 5000) }?;
    std::hint::black_box((a, d));
    drop(heap);
    let bytes = pool.bytes(0, pool.len())?.to_vec();
    Ok((bytes, region))
}

/// The template with `data`'s patches (and the header resealed, if asked).
pub fn patched_image(data: &[u8]) -> Vec<u8> {
    let (template, region) = template();
    let mut image = template.clone();
    let Some((&flags, mut rest)) = data.split_first() else {
        return image;
    };
    let r = *region as usize;
    // The header's fifth word is the heap's start: the metadata ends there.
    let span = crate::layout::Geometry::plan(&(*region..POOL_BYTES), LOG_WORDS)
        .map_or(64, |g| (g.heap_start - g.region_start) as usize);
    while rest.len() >= 3 {
        let off = usize::from(u16::from_le_bytes([rest[0], rest[1]])) % span;
        let len = usize::from(rest[2]);
        rest = &rest[3..];
        let take = len.min(rest.len()).min(span - off);
        image[r + off..r + off + take].copy_from_slice(&rest[..take]);
        rest = &rest[len.min(rest.len())..];
    }
    if flags & 1 != 0 {
        let head = &mut image[r..r + 64];
        let crc = u64::from(crc32c::crc32c(&head[..56]));
        head[56..].copy_from_slice(&crc.to_le_bytes());
    }
    image
}

/// The target's body: [`patched_image`] of `data`, then [`open_image`].
pub fn open_patched(data: &[u8]) -> Outcome {
    open_image(&patched_image(data))
}

/// Writes `image` to a temporary file and checks it as the module docs say.
///
/// # Panics
/// When a promise is broken (that is the finding), or if a bug panics.
pub fn open_image(image: &[u8]) -> Outcome {
    let (_, region) = template();
    let skipped = || Outcome {
        inspect: Err("skipped: cannot write the temporary file".into()),
        open: Err("skipped".into()),
    };
    let Some(file) = TempFile::with_contents(image) else {
        return skipped();
    };
    let inspect = inspect_read_only(&file, *region);
    match std::fs::read(&file.path) {
        Ok(after) => assert!(
            after == image,
            "inspecting a read-only pool changed the file"
        ),
        Err(_) => return skipped(),
    }
    let open = open_and_check(&file, *region);
    Outcome { inspect, open }
}

fn inspect_read_only(file: &TempFile, region: u64) -> Result<u64, String> {
    let mut pool = Pool::open_with(&file.path, &OpenOptions::new().read_only(true))
        .map_err(|e| e.to_string())?;
    let summary = Nvwa::inspect(&mut pool, region).map_err(|e| e.to_string());
    // SAFETY: nothing else uses the pool; the heap is dropped at once.
    let opened = unsafe { Nvwa::open(Arc::new(pool), region, &options()) };
    if let (Ok(s), Ok(_)) = (&summary, &opened) {
        assert_eq!(
            s.pending_fixes, 0,
            "recovery with decisions to write succeeded on a read-only pool: {s:?}"
        );
    }
    if let (Err(e), Ok(_)) = (&summary, &opened) {
        panic!("inspect refused the heap ({e}) but a read-only open accepted it");
    }
    summary.map(|s| s.objects)
}

fn open_and_check(file: &TempFile, region: u64) -> Result<usize, String> {
    let pool =
        Arc::new(Pool::open_with(&file.path, &OpenOptions::new()).map_err(|e| e.to_string())?);
    // SAFETY: the heap's region is this allocator's alone.
    let heap =
        unsafe { Nvwa::open(Arc::clone(&pool), region, &options()) }.map_err(|e| e.to_string())?;
    let live = checked_blocks(&heap);
    let mut fresh: Vec<(u64, u64, u64)> = Vec::new();
    for size in [16u64, 48, 160, 1000, 3000, 5000, 20_000] {
        let Ok(p) = heap.alloc(size) else { continue };
        let cap = heap.usable_size(p, size);
        let off = p.offset();
        let pages = heap.geometry().heap();
        assert!(
            off >= pages.start && off + cap <= pages.end,
            "alloc({size}) returned {off:#x}+{cap} outside the heap {pages:?}"
        );
        for &(o, l) in &live {
            assert!(
                off + cap <= o || o + l <= off,
                "alloc({size}) returned {off:#x}+{cap}, overlapping the live block {o:#x}+{l}"
            );
        }
        for &(o, _, l) in &fresh {
            assert!(
                off + cap <= o || o + l <= off,
                "alloc({size}) returned {off:#x}+{cap}, overlapping the fresh block {o:#x}+{l}"
            );
        }
        fresh.push((off, size, cap));
    }
    for &(off, size, _) in &fresh {
        // SAFETY: allocated above with this size, used by nothing.
        unsafe { heap.free(PPtr::from_offset(off), size) }.expect("free of a fresh block");
    }
    assert_eq!(
        checked_blocks(&heap),
        live,
        "alloc + free changed the live blocks"
    );
    if heap.checkpoint().is_ok() {
        assert_eq!(
            checked_blocks(&heap),
            live,
            "a checkpoint changed the live blocks"
        );
    }
    drop(heap);
    let mut pool = Arc::try_unwrap(pool).expect("the only handle of the pool");
    let s = Nvwa::inspect(&mut pool, region).expect("inspect after recovery");
    assert_eq!(s.pending_fixes, 0, "recovery left fixes pending: {s:?}");
    // SAFETY: as above.
    let heap = unsafe { Nvwa::open(Arc::new(pool), region, &options()) }
        .expect("a recovered heap opens again");
    assert_eq!(
        checked_blocks(&heap),
        live,
        "reopening changed the live blocks"
    );
    Ok(live.len())
}

/// The heap's live blocks `(offset, capacity)`, checked: inside the heap's pages,
/// ascending, not overlapping.
fn checked_blocks(heap: &Nvwa) -> Vec<(u64, u64)> {
    let mut live = Vec::new();
    heap.for_each_live_block(&mut |p: PPtr<u8>, size| live.push((p.offset(), size)))
        .expect("live blocks of an opened heap");
    let pages = heap.geometry().heap();
    let mut end = pages.start;
    for &(off, size) in &live {
        assert!(
            off >= end && off + size <= pages.end,
            "live block {off:#x}+{size} overlaps another or lies outside the heap {pages:?}"
        );
        end = off + size;
    }
    live
}
