//! The `page_alloc_intents` fuzz target: a page allocator whose intent record and
//! bitmap hold fuzzed bytes, inspected read-only, then opened (which redoes or
//! discards the intent) and used.
//!
//! As in [`super::tx_recover`], the input patches a valid template ([`template`]:
//! a pool whose root holds publication slots and whose heap is a page allocator of
//! [`PAGE_BYTES`]-byte pages with published and plain blocks). Input format: one
//! flag byte (bit 0: reseal the intent's checksum, so a mutated intent is redone
//! instead of discarded as torn), then patches of `offset` (1 byte, modulo the
//! span from the intent line to the bitmap's end), `len` (1 byte) and `len` bytes.
//!
//! What must hold ([`open_patched`]):
//! * [`PageAllocator::inspect`] and [`PageAllocator::inspect_blocks`] on a
//!   read-only pool return, never panic, and leave the file unchanged; so does an
//!   attempt to open the allocator there (which must fail if an intent is
//!   pending: its redo writes);
//! * [`PageAllocator::open`] returns a typed error or an allocator whose accounting
//!   is consistent: its live blocks lie in its pages, ascending, without overlap,
//!   and add up to its used pages; allocating (two dozen blocks) hands out only
//!   pages no live block holds, and freeing them restores the count; a slot the
//!   intent published points to a live block (or, for a redone free, not to the
//!   freed one); reopened read-only, no intent is pending and the blocks are the
//!   same.

use std::sync::{Arc, OnceLock};

use super::TempFile;
use crate::alloc::intent::PublishIntent;
use crate::alloc::{AllocError, PageAllocator, PersistentAllocator};
use crate::ptr::AtomicPPtr;
use crate::{OpenOptions, PPtr, Pool, PoolOptions};

/// Bytes of the template pool.
pub const POOL_BYTES: u64 = 24 * 1024;
/// The template allocator's page size (small, so the bitmap has several words).
pub const PAGE_BYTES: u64 = 64;
/// Publication slots in the template's root.
pub const SLOTS: usize = 4;

/// What happened to one input.
#[derive(Debug)]
pub struct Outcome {
    /// [`PageAllocator::inspect`] of the read-only pool (its error's text).
    pub inspect: Result<crate::alloc::PageAllocStats, String>,
    /// [`PageAllocator::open`] (its error's text), with the pages used after it.
    pub open: Result<u64, String>,
}

/// The template pool's bytes, the allocator's region start and the root's offset.
///
/// # Panics
/// If building the template fails (a bug, not an input).
pub fn template() -> &'static (Vec<u8>, u64, u64) {
    static TEMPLATE: OnceLock<(Vec<u8>, u64, u64)> = OnceLock::new();
    TEMPLATE.get_or_init(|| build_template().expect("the page_alloc_intents template"))
}

fn build_template() -> Result<(Vec<u8>, u64, u64), AllocError> {
    let pool = Arc::new(Pool::anonymous(
        &PoolOptions::new("pmkit-fuzz-page", POOL_BYTES).root::<[u64; SLOTS]>(),
    )?);
    let root = pool.root::<[u64; SLOTS]>()?.offset();
    let heap = pool.heap();
    // SAFETY: the fresh pool's heap is this allocator's alone.
    let alloc = unsafe { PageAllocator::format(Arc::clone(&pool), heap.clone(), PAGE_BYTES) }?;
    let slot = |i: u64| PPtr::<AtomicPPtr<u8>>::from_offset(root + 8 * i);
    // SAFETY: the slots are the root's, used by nothing else.
    unsafe { alloc.alloc_publish(100, slot(0), &mut |b| b.fill(0xaa)) }?;
    let a = alloc.alloc(64)?;
    // SAFETY: as above.
    unsafe { alloc.alloc_publish(300, slot(1), &mut |b| b.fill(0xbb)) }?;
    let b = alloc.alloc(200)?;
    // SAFETY: as above.
    let c = unsafe { alloc.alloc_publish(64, slot(2), &mut |b| b.fill(0xcc)) }?;
    // SAFETY: `a` was allocated above with this size and is not used.
    unsafe { alloc.free(a, 64) }?;
    // SAFETY: slot 2 holds the block published above, of this size.
    unsafe { alloc.free_unpublish(slot(2), c, 64) }?;
    std::hint::black_box(b);
    drop(alloc);
    let bytes = pool.bytes(0, pool.len())?.to_vec();
    Ok((bytes, heap.start, root))
}

/// Bytes from the intent line to the end of the template's bitmap.
fn span(image: &[u8], region: u64) -> usize {
    // The page count is the header's third word.
    let at = region as usize + 16;
    let pages = image
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    64 + pages.div_ceil(32) as usize * 8
}

/// The template with `data`'s patches (and the intent resealed, if asked).
pub fn patched_image(data: &[u8]) -> Vec<u8> {
    let (template, region, _) = template();
    let mut image = template.clone();
    let Some((&flags, mut rest)) = data.split_first() else {
        return image;
    };
    let span = span(&image, *region);
    let base = *region as usize + 64;
    while rest.len() >= 2 {
        let off = usize::from(rest[0]) % span;
        let len = usize::from(rest[1]);
        rest = &rest[2..];
        let take = len.min(rest.len()).min(span - off);
        image[base + off..base + off + take].copy_from_slice(&rest[..take]);
        rest = &rest[len.min(rest.len())..];
    }
    if flags & 1 != 0 {
        let intent = &mut image[base..base + 64];
        let crc = u64::from(crc32c::crc32c(&intent[..56]));
        intent[56..].copy_from_slice(&crc.to_le_bytes());
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
    let (_, region, root) = template();
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
    let open = open_and_check(&file, *region, *root);
    Outcome { inspect, open }
}

fn inspect_read_only(file: &TempFile, region: u64) -> Result<crate::alloc::PageAllocStats, String> {
    let mut pool = Pool::open_with(&file.path, &OpenOptions::new().read_only(true))
        .map_err(|e| e.to_string())?;
    let stats = PageAllocator::inspect(&mut pool, region).map_err(|e| e.to_string());
    let blocks = PageAllocator::inspect_blocks(&mut pool, region);
    if let (Ok(s), Ok(b)) = (&stats, &blocks) {
        let pages: u64 = b.iter().map(|&(_, size)| size / s.page_size).sum();
        assert_eq!(
            pages, s.pages_used,
            "inspect_blocks' blocks {b:?} disagree with inspect's used pages {s:?}"
        );
    }
    // SAFETY: nothing else uses the pool; the allocator is dropped at once.
    let opened = unsafe { PageAllocator::open(Arc::new(pool), region) };
    if let (Ok(s), Ok(_)) = (&stats, &opened) {
        assert!(
            !s.intent_pending,
            "a pending intent was recovered on a read-only pool: {s:?}"
        );
    }
    stats
}

fn open_and_check(file: &TempFile, region: u64, root: u64) -> Result<u64, String> {
    let pool =
        Arc::new(Pool::open_with(&file.path, &OpenOptions::new()).map_err(|e| e.to_string())?);
    let intent = intent_of(&pool, region);
    // SAFETY: the heap is this allocator's alone.
    let alloc =
        unsafe { PageAllocator::open(Arc::clone(&pool), region) }.map_err(|e| e.to_string())?;
    let live = checked_blocks(&alloc);
    let used = alloc.stats().pages_used;
    check_intent_outcome(&pool, &live, intent);
    // Allocate (a bounded number: each is an msync in a file pool): no page a
    // live block holds is handed out.
    let mut fresh = Vec::new();
    for size in [PAGE_BYTES, 3 * PAGE_BYTES].iter().cycle().take(24) {
        let Ok(p) = alloc.alloc(*size) else { break };
        let pages = alloc.pages();
        assert!(
            p.offset() >= pages.start && p.offset() + size <= pages.end,
            "alloc returned {:#x}+{size} outside the pages {pages:?}",
            p.offset()
        );
        for &(off, len) in live.iter().chain(&fresh) {
            assert!(
                p.offset() + size <= off || off + len <= p.offset(),
                "alloc returned {:#x}+{size}, overlapping the live block {off:#x}+{len}",
                p.offset()
            );
        }
        fresh.push((p.offset(), *size));
    }
    for &(off, size) in &fresh {
        // SAFETY: allocated above with this size, used by nothing.
        unsafe { alloc.free(PPtr::from_offset(off), size) }.expect("free of a fresh block");
    }
    assert_eq!(
        alloc.stats().pages_used,
        used,
        "alloc + free changed the count"
    );
    assert_eq!(
        checked_blocks(&alloc),
        live,
        "alloc + free changed the blocks"
    );
    drop(alloc);
    let mut pool = Arc::try_unwrap(pool).expect("the only handle of the pool");
    let stats = PageAllocator::inspect(&mut pool, region).expect("inspect after recovery");
    assert!(!stats.intent_pending, "recovery left an intent: {stats:?}");
    let blocks = PageAllocator::inspect_blocks(&mut pool, region).expect("blocks after recovery");
    assert_eq!(
        blocks, live,
        "the blocks on media differ from the recovered ones"
    );
    let _ = root;
    Ok(used)
}

/// The intent line's `(kind, slot, block, pages)` if it is intact, by the record's
/// own rule ([`PublishIntent::intact`]: reserved bytes zero too), so the checker
/// expects a redo exactly when recovery owes one.
fn intent_of(pool: &Pool, region: u64) -> Option<(u64, u64, u64, u64)> {
    let intent: PublishIntent = pool.read(PPtr::from_offset(region + 64)).ok()?;
    let kind = intent.intact()?;
    Some((kind as u64, intent.slot, intent.block, intent.extent))
}

/// After a redone intent: a publication's slot points to a live block, a free's
/// block is no longer live.
fn check_intent_outcome(pool: &Pool, live: &[(u64, u64)], intent: Option<(u64, u64, u64, u64)>) {
    let Some((state, slot, block, _)) = intent else {
        return;
    };
    let now = pool.read(PPtr::<u64>::from_offset(slot)).unwrap_or(0);
    let is_live = |b: u64| live.iter().any(|&(off, _)| off == b);
    match state {
        1 => assert!(
            now == block && is_live(block),
            "a redone alloc_publish left slot {slot:#x} = {now:#x}, block {block:#x} live: {}",
            is_live(block)
        ),
        2 => assert!(
            now != block || is_live(block),
            "a redone alloc_publish_if published the free block {block:#x}"
        ),
        _ => assert!(
            !is_live(block),
            "a redone free_unpublish left the block {block:#x} live"
        ),
    }
}

/// The allocator's live blocks, checked: in its pages, ascending, not
/// overlapping, adding up to its used pages.
fn checked_blocks(alloc: &PageAllocator) -> Vec<(u64, u64)> {
    let mut live = Vec::new();
    alloc
        .for_each_live_block(&mut |p: PPtr<u8>, size| live.push((p.offset(), size)))
        .expect("live blocks");
    let pages = alloc.pages();
    let mut end = pages.start;
    for &(off, size) in &live {
        assert!(
            off >= end && off + size <= pages.end,
            "live block {off:#x}+{size} overlaps another or lies outside the pages {pages:?}"
        );
        end = off + size;
    }
    let total: u64 = live.iter().map(|&(_, s)| s / alloc.page_size()).sum();
    assert_eq!(
        total,
        alloc.stats().pages_used,
        "live blocks {live:?} vs the used count"
    );
    live
}
