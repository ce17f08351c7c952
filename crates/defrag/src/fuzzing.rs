//! Support for fuzzing (hidden from the documentation; not a stable API).
//!
//! [`open_patched`] is the body of the `defrag_open` cargo-fuzz target and
//! [`open_patched_resealed`] the body of `defrag_open_resealed`; the ordinary test
//! `tests/fuzz_corpus.rs` runs the committed corpus (`fuzz/corpus/defrag_open/`)
//! through both on stable Rust.
//!
//! The fuzzer does not write whole pool files: it would rarely get past the pool
//! header's checksum. An input picks one of three valid heap images made once per
//! process ([`base_images`]: a fragmented heap at rest, the same heap with a
//! compaction interrupted after some moves, and one interrupted while it was being
//! planned) and overlays patches on its metadata, each relative to the start of a
//! region (the pool header, the log, the heap root, the type table and every block
//! of the page allocator: slab pages, plan blocks). The resealed variant then fixes
//! the checksums a patch broke (pool header, allocator header, type table, every
//! plan of the chain), so mutations reach the consistency checks behind them.
//!
//! What it checks is what [`DefragHeap`] promises:
//! * [`DefragHeap::inspect`] of a read-only pool never panics and never writes;
//! * [`DefragHeap::open`] returns a typed error or a heap that works: its objects
//!   can be read from the roots, an object can be allocated and freed;
//! * after a successful open no compaction is left (finished or undone), and a heap
//!   that inspected clean and carried no plan still inspects clean.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use pmem_core::pool::header::HEADER_LEN;
use pmem_core::{ModeRequest, OpenOptions, PPtr, Pool, PoolOptions};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::layout::{HeapRoot, PlanHeader, TableHeader, PLAN_HEADER};
use crate::{persistent_type, CompactOptions, DefragHeap, DefragSummary, Registry};

/// The list node the images hold.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Node {
    /// A payload.
    pub value: u64,
    /// The next node (null at the end).
    pub next: PPtr<Node>,
}
persistent_type!(Node, id = 1, pointers = [next: Node]);

/// A larger object without pointers, in its own size class.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Blob {
    /// A payload.
    pub words: [u64; 30],
    /// A pointer into the list.
    pub node: PPtr<Node>,
}
persistent_type!(Blob, id = 2, pointers = [node: Node]);

/// The registry the images were made with.
pub fn registry() -> Registry {
    Registry::new().with::<Node>().with::<Blob>()
}

/// Bytes of an image's pool.
const POOL_BYTES: u64 = 1 << 20;
const LAYOUT: &str = "defrag-fuzz";
/// Longest walk along a list (a corrupt `next` may make a cycle).
const WALK_LIMIT: usize = 4096;
/// Nodes allocated in an image (four pages' worth).
const NODES: u64 = 500;
/// Blobs allocated in an image.
const BLOBS: u64 = 60;

/// A valid heap image and the offsets its patches are relative to.
#[derive(Debug)]
pub struct BaseImage {
    /// What it is (for messages).
    pub name: &'static str,
    /// The pool file's bytes.
    pub bytes: Vec<u8>,
    /// Region starts: the pool header, the heap, the heap root, the allocator's
    /// header, the type table and every live allocator block.
    pub regions: Vec<u64>,
    /// Offset of the heap root (the pool's root object).
    pub root: u64,
    /// Offset of the page allocator's header.
    pub allocator: u64,
}

/// What happened to one input.
#[derive(Debug)]
pub struct Outcome {
    /// [`DefragHeap::inspect`] of the image, opened read-only.
    pub inspect_before: Result<DefragSummary, String>,
    /// [`DefragHeap::open`] of the image and the work done on it.
    pub open: Result<(), String>,
    /// [`DefragHeap::inspect`] after a successful open.
    pub inspect_after: Option<Result<DefragSummary, String>>,
}

/// The three base images, made on first use.
///
/// # Panics
/// If a valid heap cannot be made (no temporary directory): no input can be run.
pub fn base_images() -> &'static [BaseImage] {
    static IMAGES: OnceLock<Vec<BaseImage>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let at_rest = make_image("at-rest", |_| Ok(None)).expect("a heap at rest");
        let compacting = make_image("compacting", |heap| {
            let opts = CompactOptions::new().target(1.0).plan_pages(2);
            let Some(mut c) = heap.begin_compaction(&opts)? else {
                return Ok(None);
            };
            c.step(c.moves() / 2)?;
            // The image is taken while the plans are in the root (the drop then
            // finishes the compaction on the live heap).
            let taken = capture(heap)?;
            drop(c);
            Ok(Some(taken))
        })
        .expect("a heap with an interrupted compaction");
        let planning = make_image("planning", |heap| {
            let opts = CompactOptions::new().target(1.0).plan_pages(1);
            let mut taken = None;
            let mut between = |h: &DefragHeap| {
                if taken.is_none() {
                    taken = Some(capture(h));
                }
            };
            let c = heap.begin_compaction_between(&opts, &mut between)?;
            drop(c);
            Ok(taken.and_then(Result::ok))
        })
        .expect("a heap with an interrupted planning");
        vec![at_rest, compacting, planning]
    })
}

/// The bytes and regions of a live heap.
type Capture = (Vec<u8>, Vec<u64>);

fn capture(heap: &DefragHeap) -> Result<Capture, crate::DefragError> {
    let pool = heap.tx_heap().pool();
    let bytes = pool.bytes(0, pool.len())?.to_vec();
    let mut regions = vec![0, pool.heap().start, heap.root.offset()];
    regions.extend(heap.tx_heap().live_blocks()?);
    Ok((bytes, regions))
}

/// Makes a fragmented heap in a temporary file and runs `then` on it; the image is
/// what `then` captured, or the file as `then` left it.
fn make_image(
    name: &'static str,
    then: impl FnOnce(&DefragHeap) -> Result<Option<Capture>, crate::DefragError>,
) -> Result<BaseImage, Box<dyn std::error::Error>> {
    // An anonymous pool: no msync per transaction, and its bytes are the file a
    // pool of the same options would hold.
    let pool = Pool::anonymous(&PoolOptions::new(LAYOUT, POOL_BYTES).root::<HeapRoot>())?;
    let heap = DefragHeap::create(pool, &registry())?;
    // Small transactions: each stays within the log's records.
    for chunk in 0..NODES / 10 {
        heap.transaction(|t| {
            let mut next = t.root::<Node>("list")?;
            for value in chunk * 10..(chunk + 1) * 10 {
                let n = t.alloc::<Node>()?;
                t.write(n, &Node { value, next })?;
                next = n;
            }
            t.set_root("list", next)
        })?;
    }
    for i in 0..BLOBS {
        heap.transaction(|t| {
            let b = t.alloc::<Blob>()?;
            let node = t.root::<Node>("list")?;
            t.write(
                b,
                &Blob {
                    words: [i; 30],
                    node,
                },
            )?;
            if i % 6 == 0 {
                t.set_root(&format!("blob{i}"), b)?;
            }
            Ok(())
        })?;
    }
    // Keep one node in four on the list and one blob in six under a root; the
    // rest are leaks marking reclaims: a heap spread over more pages than its live
    // objects need, which a compaction has work in.
    let mut at = heap.root::<Node>("list")?;
    while !at.is_null() {
        at = heap.transaction(|t| {
            let mut n = t.read(at)?;
            for _ in 0..3 {
                if n.next.is_null() {
                    break;
                }
                n.next = t.read(n.next)?.next;
            }
            t.write(at, &n)?;
            Ok(n.next)
        })?;
    }
    heap.collect_leaks()?;
    let captured = then(&heap)?;
    let (bytes, regions) = match captured {
        Some(c) => c,
        None => capture(&heap)?,
    };
    let mut regions = regions;
    regions.sort_unstable();
    regions.dedup();
    let root = heap.root.offset();
    let allocator = heap_allocator_start(&bytes)?;
    regions.push(allocator);
    Ok(BaseImage {
        name,
        bytes,
        regions,
        root,
        allocator,
    })
}

/// The page allocator's start, as the log header of the image names it.
fn heap_allocator_start(bytes: &[u8]) -> Result<u64, Box<dyn std::error::Error>> {
    let file = TempFile::with_contents(bytes).ok_or("temporary file")?;
    let mut pool = Pool::open_with(&file.path, &OpenOptions::new().read_only(true))?;
    let s = pmem_core::tx::TxHeap::inspect(&mut pool)?;
    Ok(s.allocator_start)
}

/// Applies the patches of `data` to a copy of the image it selects: byte 0 picks the
/// image; then each patch is a region byte, a little-endian `u16` offset in it, a
/// length byte (1 to 16 bytes) and the bytes. A patch past the end is cut.
pub fn patched(data: &[u8]) -> (&'static BaseImage, Vec<u8>) {
    let images = base_images();
    let image = &images[usize::from(data.first().copied().unwrap_or(0)) % images.len()];
    let mut bytes = image.bytes.clone();
    let mut rest = data.get(1..).unwrap_or(&[]);
    while let [region, lo, hi, len, tail @ ..] = rest {
        let start = image.regions[usize::from(*region) % image.regions.len()];
        let at = start + u64::from(u16::from_le_bytes([*lo, *hi]));
        let len = (usize::from(*len) % 16 + 1).min(tail.len());
        let (patch, next) = tail.split_at(len);
        if let Ok(at) = usize::try_from(at) {
            if at < bytes.len() {
                let end = (at + patch.len()).min(bytes.len());
                bytes[at..end].copy_from_slice(&patch[..end - at]);
            }
        }
        rest = next;
    }
    (image, bytes)
}

/// The `defrag_open` target: [`open_image`] of [`patched`] `data`.
pub fn open_patched(data: &[u8]) -> Outcome {
    let (_, bytes) = patched(data);
    open_image(&bytes)
}

/// The `defrag_open_resealed` target: as [`open_patched`], after fixing the
/// checksums of the pool header, the allocator header, the type table and every
/// plan the chain from the heap root reaches.
pub fn open_patched_resealed(data: &[u8]) -> Outcome {
    let (image, mut bytes) = patched(data);
    reseal(image, &mut bytes);
    open_image(&bytes)
}

/// Recomputes the checksums a patch may have broken (see [`open_patched_resealed`]).
pub fn reseal(image: &BaseImage, bytes: &mut [u8]) {
    let word = |b: &[u8], at: u64| -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        let w = b.get(at..at.checked_add(8)?)?;
        Some(u64::from_le_bytes(w.try_into().ok()?))
    };
    let put = |b: &mut [u8], at: u64, v: u64| {
        if let Some(w) = usize::try_from(at)
            .ok()
            .and_then(|at| b.get_mut(at..at.checked_add(8)?))
        {
            w.copy_from_slice(&v.to_le_bytes());
        }
    };
    let crc_of = |b: &[u8], at: u64, len: u64| -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        let len = usize::try_from(len).ok()?;
        Some(u64::from(crc32c::crc32c(b.get(at..at.checked_add(len)?)?)))
    };
    // The type table: magic, len, crc, then the encoding.
    let root = image.root;
    let table_field = std::mem::offset_of!(HeapRoot, type_table) as u64;
    // Offsets past the image are left alone (and cannot overflow the sums below).
    let inside = |at: &u64| *at < bytes.len() as u64;
    if let Some(table) = word(bytes, root + table_field).filter(inside) {
        let len_at = table + std::mem::offset_of!(TableHeader, len) as u64;
        let crc_at = table + std::mem::offset_of!(TableHeader, crc) as u64;
        if let Some(c) = word(bytes, len_at).and_then(|len| crc_of(bytes, table + 32, len)) {
            put(bytes, crc_at, c);
        }
    }
    // Every plan of the chain (bounded: a patched chain may loop).
    let mut at = word(
        bytes,
        root + std::mem::offset_of!(HeapRoot, compaction) as u64,
    );
    for _ in 0..64 {
        let Some(block) = at.filter(|&b| b != 0 && b < bytes.len() as u64) else {
            break;
        };
        let field = |f: usize| block + f as u64;
        let moves = word(bytes, field(std::mem::offset_of!(PlanHeader, moves)));
        let pages = word(bytes, field(std::mem::offset_of!(PlanHeader, pages)));
        let len = moves
            .zip(pages)
            .and_then(|(m, p)| m.checked_add(p)?.checked_mul(16));
        if let Some(c) = len.and_then(|len| crc_of(bytes, block + PLAN_HEADER, len)) {
            put(bytes, field(std::mem::offset_of!(PlanHeader, crc)), c);
        }
        at = word(bytes, field(std::mem::offset_of!(PlanHeader, next)));
    }
    // The page allocator's header: crc32c of bytes 0..56, stored at 56.
    if let Some(c) = crc_of(bytes, image.allocator, 56) {
        put(bytes, image.allocator + 56, c);
    }
    // The pool header last (nothing above is in it).
    if bytes.len() >= HEADER_LEN {
        let c = crc32c::crc32c(&bytes[..HEADER_LEN - 4]);
        bytes[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&c.to_le_bytes());
    }
}

/// Writes `bytes` to a temporary file; inspects it read-only (which must not
/// change a byte), opens it as a heap and works on it, then inspects it again.
///
/// # Panics
/// If a read-only inspection wrote, if a successful open left a compaction behind,
/// if a heap that inspected clean without a plan does not after being opened, or if
/// the code under test panics. An input is skipped (every field an error) if the
/// temporary file cannot be written.
pub fn open_image(bytes: &[u8]) -> Outcome {
    let skipped = || Outcome {
        inspect_before: Err("skipped: cannot write the temporary file".into()),
        open: Err("skipped".into()),
        inspect_after: None,
    };
    let Some(file) = TempFile::with_contents(bytes) else {
        return skipped();
    };
    let inspect_before = inspect_read_only(&file.path, bytes);
    let open = open_and_work(&file.path);
    let inspect_after = open
        .is_ok()
        .then(|| inspect_read_only(&file.path, &std::fs::read(&file.path).unwrap_or_default()));
    if let Some(Ok(after)) = &inspect_after {
        assert_eq!(
            after.compaction_plans, 0,
            "an open left a compaction behind: {after:?}"
        );
    }
    if let Ok(before) = &inspect_before {
        if before.compaction_plans == 0 && open.is_ok() {
            assert!(
                matches!(inspect_after, Some(Ok(_))),
                "a heap that inspected clean ({before:?}) does not after an open: {inspect_after:?}"
            );
        }
    }
    Outcome {
        inspect_before,
        open,
        inspect_after,
    }
}

/// [`DefragHeap::inspect`] of the file at `path` opened read-only; asserts that the
/// file still holds `bytes` afterwards.
fn inspect_read_only(path: &Path, bytes: &[u8]) -> Result<DefragSummary, String> {
    let result = (|| {
        let mut pool = Pool::open_with(path, &OpenOptions::new().read_only(true))
            .map_err(|e| e.to_string())?;
        let s = DefragHeap::inspect(&mut pool).map_err(|e| e.to_string());
        pool.close().map_err(|e| e.to_string())?;
        s
    })();
    if let Ok(after) = std::fs::read(path) {
        assert!(
            after == bytes,
            "a read-only inspection changed the file ({} bytes before, {} after)",
            bytes.len(),
            after.len()
        );
    }
    result
}

/// Opens the heap read-write and works on it: stats, every list and blob from the
/// roots read, an object allocated, written and freed.
fn open_and_work(path: &Path) -> Result<(), String> {
    // Volatile: the stores reach the file's pages without an msync per
    // transaction (what is durable when is the crash suites' business).
    let opts = OpenOptions::new()
        .layout(LAYOUT)
        .mode(ModeRequest::Volatile);
    let pool = Pool::open_with(path, &opts).map_err(|e| e.to_string())?;
    let (heap, _) = DefragHeap::open(pool, &registry()).map_err(|e| e.to_string())?;
    let e = |e: crate::DefragError| e.to_string();
    std::hint::black_box(heap.stats().map_err(e)?);
    let mut at = heap.root::<Node>("list").map_err(e)?;
    for _ in 0..WALK_LIMIT {
        if at.is_null() {
            break;
        }
        at = heap.read(at).map_err(e)?.next;
    }
    for i in (0..BLOBS).step_by(6) {
        let b = heap.root::<Blob>(&format!("blob{i}")).map_err(e)?;
        if !b.is_null() {
            std::hint::black_box(heap.read(b).map_err(e)?.words[0]);
        }
    }
    heap.transaction(|t| {
        let n = t.alloc::<Node>()?;
        t.write(
            n,
            &Node {
                value: 7,
                next: PPtr::null(),
            },
        )?;
        t.free(n)
    })
    .map_err(e)?;
    std::hint::black_box(heap.collect_leaks().map_err(e)?);
    Ok(())
}

/// A uniquely named file in the temporary directory, removed on drop.
struct TempFile {
    path: PathBuf,
}

impl TempFile {
    /// Creates the file (never reusing an existing one) and writes `data` to it.
    fn with_contents(data: &[u8]) -> Option<TempFile> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir();
        for _ in 0..16 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("pmkit-fuzz-defrag-{}-{n}", std::process::id()));
            let mut f = match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(_) => return None,
            };
            let file = TempFile { path };
            return f.write_all(data).ok().map(|()| file);
        }
        None
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
