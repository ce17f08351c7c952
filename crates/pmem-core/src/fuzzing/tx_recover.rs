//! The `tx_recover` and `tx_recover_resealed` fuzz targets: a transaction heap whose
//! log region holds fuzzed bytes, inspected read-only and then recovered.
//!
//! The input is not a whole pool: the pool header would eat the fuzzer's effort.
//! It is a list of patches laid over the log region of a valid template heap
//! ([`template`]): a heap of [`GEOMETRY`] that ran undo, redo and lazy
//! transactions (word and object records, allocations and frees), so its lanes
//! still hold records of past transactions and its ring a pending entry. Input
//! format: one flag byte (bit 0: reseal), then patches of `offset` (2 bytes, little
//! endian, taken modulo the log's size), `len` (1 byte) and `len` bytes.
//!
//! *Resealed* (flag bit 0, [`reseal`]): the log header's checksum is recomputed,
//! and, while the header still records the template's geometry, every record whose
//! check word carries its lane's TID (its high half) gets a correct check, and so
//! does every ring entry recovery would reach: mutated addresses, sizes, kinds and
//! data then reach the logic of recovery instead of stopping at a checksum.
//!
//! What must hold ([`recover_patched`]):
//! * [`TxHeap::inspect`] on a read-only open returns, never panics, and leaves the
//!   file's bytes unchanged;
//! * [`TxHeap::open`] returns a typed error or a heap; after a successful open, the
//!   heap's live blocks lie in its allocator's pages without overlap, a transaction
//!   that allocates, writes and frees works (or reports a typed error), and a
//!   second open finds nothing left to recover and the same live blocks
//!   (recovery is idempotent and complete).

use std::sync::OnceLock;

use zerocopy::{FromBytes, IntoBytes};

use super::TempFile;
use crate::tx::layout::{
    check_word, AllocRecord, LaneGeometry, LogHeader, ObjectRecord, WordRecord, ALLOC_RECORD_BYTES,
    OBJECT_RECORD_BYTES, WORD_RECORD_BYTES,
};
use crate::tx::{Hint, LogMode, TxGeometry, TxHeap, TxOptions};
use crate::{OpenOptions, PPtr, PersistentAllocator as _, Pool, PoolOptions};

/// The template heap's log: two lanes with small sections, and a lazy ring.
pub const GEOMETRY: TxGeometry = TxGeometry {
    lanes: 2,
    word_records: 8,
    object_records: 4,
    object_bytes: 256,
    alloc_records: 4,
    lazy_ring_bytes: 512,
};
/// Bytes of the template pool.
pub const POOL_BYTES: u64 = 32 * 1024;
/// Page size of the template heap's page allocator.
pub const PAGE_BYTES: u64 = 256;

/// What happened to one input.
#[derive(Debug)]
pub struct Outcome {
    /// [`TxHeap::inspect`] of the read-only open (its error's text).
    pub inspect: Result<crate::tx::TxHeapSummary, String>,
    /// [`TxHeap::open`] (its error's text), with the recovery report.
    pub open: Result<crate::tx::RecoveryReport, String>,
}

/// The template pool's bytes and where its log starts: a heap made by
/// [`TxHeap::create`] on an anonymous pool, then transactions of every mode. The
/// last is lazy and not checkpointed, so the ring holds an entry to replay.
///
/// # Panics
/// If building the template fails (a bug, not an input).
pub fn template() -> &'static (Vec<u8>, u64) {
    static TEMPLATE: OnceLock<(Vec<u8>, u64)> = OnceLock::new();
    TEMPLATE.get_or_init(|| build_template().expect("the tx_recover template heap"))
}

fn build_template() -> Result<(Vec<u8>, u64), crate::tx::TxError> {
    let pool = Pool::anonymous(&PoolOptions::new("pmkit-fuzz-tx", POOL_BYTES))?;
    let region = pool.heap().start;
    let mut heap = TxHeap::create(pool, &GEOMETRY, PAGE_BYTES)?;
    let logged = TxOptions::new().log_fresh(true);
    // An allocation written through object records (logged: `log_fresh`).
    let a = heap.transaction_with(logged, |tx| {
        let a = tx.alloc(100)?;
        tx.write_bytes(a.offset(), &[0x11; 100])?;
        Ok(a)
    })?;
    // Word records over the same block, and an allocation freed again.
    heap.transaction_with(logged.hint(Hint::Word), |tx| {
        tx.write(a.cast::<[u64; 3]>(), &[1, 2, 3])?;
        let b = tx.alloc(300)?;
        tx.write(b.cast::<u64>(), &7)?;
        tx.free(b, 300)
    })?;
    // Redo records, with a second block that stays allocated.
    heap.transaction_with(TxOptions::new().mode(LogMode::Redo), |tx| {
        tx.write_bytes(a.offset() + 8, &[0x22; 40])?;
        let c = tx.alloc(64)?;
        tx.write(c.cast::<u64>(), &0xc0ffee)
    })?;
    // A lazy entry left in the ring (data, an allocation and a free).
    heap.transaction_with(TxOptions::new().mode(LogMode::Lazy), |tx| {
        tx.write(a.cast::<u64>(), &0x1a2a)?;
        let d = tx.alloc(32)?;
        tx.write(d.cast::<u64>(), &5)?;
        tx.free(d, 32)
    })?;
    let len = heap.pool().len();
    let bytes = heap.pool().bytes(0, len)?.to_vec();
    Ok((bytes, region))
}

/// Bytes of the template's log region.
pub fn log_bytes() -> u64 {
    crate::tx::TxLog::region_size(&GEOMETRY)
}

/// The template with `data`'s patches (and reseal, if its flag asks) applied.
pub fn patched_image(data: &[u8]) -> Vec<u8> {
    let (template, region) = template();
    let mut image = template.clone();
    let Some((&flags, mut rest)) = data.split_first() else {
        return image;
    };
    let span = log_bytes() as usize;
    while rest.len() >= 3 {
        let off = usize::from(u16::from_le_bytes([rest[0], rest[1]])) % span;
        let len = usize::from(rest[2]);
        rest = &rest[3..];
        let take = len.min(rest.len()).min(span - off);
        let at = *region as usize + off;
        image[at..at + take].copy_from_slice(&rest[..take]);
        rest = &rest[len.min(rest.len())..];
    }
    if flags & 1 != 0 {
        reseal(&mut image, *region);
    }
    image
}

/// Fixes up the checksums of the log at `region` in `image` (see the module docs).
pub fn reseal(image: &mut [u8], region: u64) {
    let r = region as usize;
    let Some(head) = image.get_mut(r..r + 64) else {
        return;
    };
    let Ok(header) = LogHeader::read_from_bytes(head) else {
        return;
    };
    let header = header.sealed();
    head.copy_from_slice(header.as_bytes());
    let template_shape = header.lanes == GEOMETRY.lanes
        && header.word_records == GEOMETRY.word_records
        && header.object_records == GEOMETRY.object_records
        && header.alloc_records == GEOMETRY.alloc_records
        && header.object_bytes == GEOMETRY.object_bytes
        && header.ring_bytes == GEOMETRY.lazy_ring_bytes;
    if !template_shape {
        return;
    }
    let geo = LaneGeometry::new(
        u64::from(GEOMETRY.word_records),
        u64::from(GEOMETRY.object_records),
        GEOMETRY.object_bytes,
        u64::from(GEOMETRY.alloc_records),
    );
    for lane in 0..u64::from(GEOMETRY.lanes) {
        let base = region + 64 + lane * geo.size;
        reseal_lane(image, base, &geo);
    }
    let ring = region + 64 + u64::from(GEOMETRY.lanes) * geo.size;
    reseal_ring(image, ring, GEOMETRY.lazy_ring_bytes);
}

/// The `len` bytes at `off` of `image`, if they lie inside it.
fn slice(image: &[u8], off: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(off).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    image.get(start..end)
}

fn read_u64(image: &[u8], off: u64) -> u64 {
    slice(image, off, 8)
        .and_then(|b| u64::read_from_bytes(b).ok())
        .unwrap_or(0)
}

fn write_at(image: &mut [u8], off: u64, bytes: &[u8]) {
    if let Some(dst) = usize::try_from(off)
        .ok()
        .and_then(|s| image.get_mut(s..s + bytes.len()))
    {
        dst.copy_from_slice(bytes);
    }
}

/// Reseals the records of the lane at `base` that carry its TID's mark.
fn reseal_lane(image: &mut [u8], base: u64, geo: &LaneGeometry) {
    let tid = read_u64(image, base) >> 3;
    let marked = |check: u64| check >> 32 == tid & 0xffff_ffff;
    for i in 0..geo.word_records {
        let at = base + geo.word_meta + i * WORD_RECORD_BYTES;
        let Some(mut r) =
            slice(image, at, WORD_RECORD_BYTES).and_then(|b| WordRecord::read_from_bytes(b).ok())
        else {
            return;
        };
        if !marked(r.check) {
            continue;
        }
        let Some(data) = slice(image, r.data, 8) else {
            continue;
        };
        r.check = check_word(tid, &r.as_bytes()[..16], data);
        write_at(image, at, r.as_bytes());
    }
    for i in 0..geo.object_records {
        let at = base + geo.object_meta + i * OBJECT_RECORD_BYTES;
        let Some(mut r) = slice(image, at, OBJECT_RECORD_BYTES)
            .and_then(|b| ObjectRecord::read_from_bytes(b).ok())
        else {
            return;
        };
        if !marked(r.check) {
            continue;
        }
        let Some(data) = slice(image, r.data, u64::from(r.size)) else {
            continue;
        };
        r.check = check_word(tid, &r.checked_fields(), data);
        write_at(image, at, r.as_bytes());
    }
    for i in 0..geo.alloc_records {
        let at = base + geo.alloc_meta + i * ALLOC_RECORD_BYTES;
        let Some(mut r) =
            slice(image, at, ALLOC_RECORD_BYTES).and_then(|b| AllocRecord::read_from_bytes(b).ok())
        else {
            return;
        };
        if !marked(r.check) {
            continue;
        }
        r.check = check_word(tid, &r.as_bytes()[..24], &[]);
        write_at(image, at, r.as_bytes());
    }
}

/// Reseals the ring's entries that recovery's scan would reach (sequence numbers
/// following on from the truncation point, sizes that fit).
fn reseal_ring(image: &mut [u8], ring: u64, capacity: u64) {
    let truncated = read_u64(image, ring);
    let mut last = truncated;
    let mut off = 0u64;
    let mut first = true;
    while off + crate::tx::lazy::ENTRY_HEADER <= capacity {
        let at = ring + 64 + off;
        let seq = read_u64(image, at);
        let head = read_u64(image, at + 8);
        let (bytes, records) = (head as u32, (head >> 32) as u32);
        let size = u64::from(bytes);
        let follows = if first {
            seq > truncated
        } else {
            last.checked_add(1) == Some(seq)
        };
        if !follows
            || size < crate::tx::lazy::ENTRY_HEADER
            || !size.is_multiple_of(64)
            || off + size > capacity
        {
            return;
        }
        let entry = crate::tx::lazy::ENTRY_HEADER;
        let Some(body) = slice(image, at + entry, size - entry) else {
            return;
        };
        let check = crate::tx::lazy::entry_check(seq, bytes, records, body);
        write_at(image, at + 16, &check.to_le_bytes());
        first = false;
        last = seq;
        off += size;
    }
}

/// The body of both targets: [`patched_image`] of `data`, then [`recover_image`].
pub fn recover_patched(data: &[u8]) -> Outcome {
    recover_image(&patched_image(data))
}

/// Writes `image` to a temporary file, inspects it read-only (the file must not
/// change), opens and recovers it read-write, and checks the recovered heap (see
/// the module docs).
///
/// # Panics
/// When a promise is broken (that is the finding), or if a bug panics.
pub fn recover_image(image: &[u8]) -> Outcome {
    let skipped = || Outcome {
        inspect: Err("skipped: cannot write the temporary file".into()),
        open: Err("skipped".into()),
    };
    let Some(file) = TempFile::with_contents(image) else {
        return skipped();
    };
    let inspect = inspect_read_only(&file);
    match std::fs::read(&file.path) {
        Ok(after) => assert!(
            after == image,
            "TxHeap::inspect of a read-only pool changed the file"
        ),
        Err(_) => return skipped(),
    }
    let open = open_and_check(&file);
    Outcome { inspect, open }
}

fn inspect_read_only(file: &TempFile) -> Result<crate::tx::TxHeapSummary, String> {
    let mut pool = Pool::open_with(&file.path, &OpenOptions::new().read_only(true))
        .map_err(|e| e.to_string())?;
    let summary = TxHeap::inspect(&mut pool).map_err(|e| e.to_string());
    // Opening the heap on a read-only pool runs recovery, whose writes the pool
    // must refuse with an error (not a fault); with nothing to recover it opens.
    let r = TxHeap::open(pool);
    if let (Ok(s), Ok(_)) = (&summary, &r) {
        assert!(
            !s.recovery_pending(),
            "recovery of a pending heap on a read-only pool succeeded: {s:?}"
        );
    }
    summary
}

/// Opens read-write (recovery), then checks the heap as the module docs say.
fn open_and_check(file: &TempFile) -> Result<crate::tx::RecoveryReport, String> {
    let pool = Pool::open_with(&file.path, &OpenOptions::new()).map_err(|e| e.to_string())?;
    let (mut heap, report) = TxHeap::open(pool).map_err(|e| e.to_string())?;
    let live = checked_blocks(&heap);
    // A transaction that allocates, writes and frees: it works, or fails with a
    // typed error (the allocator may be full); either way it leaves no trace.
    let r = heap.transaction(|tx| {
        let p = tx.alloc(48)?;
        tx.write(p.cast::<[u64; 2]>(), &[1, 2])?;
        tx.free(p, 48)
    });
    std::hint::black_box(&r);
    assert_eq!(
        checked_blocks(&heap),
        live,
        "a transaction that allocated and freed a block changed the live blocks ({r:?})"
    );
    drop(heap);
    // Recovery was complete: nothing is pending, and recovering again changes
    // nothing.
    let mut pool = Pool::open_with(&file.path, &OpenOptions::new().read_only(true))
        .expect("a recovered pool opens read-only");
    let summary = TxHeap::inspect(&mut pool).expect("a recovered heap inspects");
    assert!(
        !summary.recovery_pending(),
        "recovery left work pending: {summary:?} (first recovery: {report:?})"
    );
    drop(pool);
    let pool = Pool::open_with(&file.path, &OpenOptions::new()).expect("a recovered pool opens");
    let (heap, again) = TxHeap::open(pool).expect("a recovered heap opens again");
    assert_eq!(
        (again.rolled_back, again.rolled_forward, again.lazy_replayed),
        (0, 0, 0),
        "a second recovery found work"
    );
    assert_eq!(
        checked_blocks(&heap),
        live,
        "a second recovery changed the live blocks"
    );
    Ok(report)
}

/// The heap's live blocks `(offset, size)`, checked: inside the allocator's pages,
/// ascending, not overlapping.
fn checked_blocks(heap: &TxHeap) -> Vec<(u64, u64)> {
    let mut live = Vec::new();
    heap.allocator()
        .for_each_live_block(&mut |p: PPtr<u8>, size| live.push((p.offset(), size)))
        .expect("live blocks of a recovered heap");
    let pages = heap.allocator().pages();
    let mut end = pages.start;
    for &(off, size) in &live {
        assert!(
            off >= end && off + size <= pages.end,
            "live block {off:#x}+{size} overlaps another or lies outside the pages {pages:?}"
        );
        end = off + size;
    }
    live
}
