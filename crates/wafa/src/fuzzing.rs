//! Support for fuzzing (hidden from the documentation; not a stable API).
//!
//! [`open_patched`] is the body of the `wafa_open` cargo-fuzz target and
//! [`open_patched_resealed`] of `wafa_open_resealed`; the ordinary test
//! `tests/fuzz_corpus.rs` replays the committed corpus (`fuzz/corpus/wafa_open/`)
//! through both on stable Rust.
//!
//! An input overlays patches on a valid WAFA heap image made once per process (a
//! mix of small and whole-page blocks, some freed), each relative to a region: the
//! pool header, the WAFA region (header, intent record, kind table), each page's
//! metadata unit, each page's start. The resealed variant fixes the region header's
//! and an armed intent's checksums first. What it checks:
//! * [`Wafa::inspect`] of a read-only pool never panics and never writes;
//! * [`Wafa::open`] returns a typed error or a heap whose DRAM state is consistent
//!   with its pages ([`Wafa::check_consistency`]), and a heap that inspected clean
//!   opens;
//! * after an open, allocation and free work: a new block lies in the heap, is
//!   live, overlaps no other new block and no block the image held that is still
//!   live; after freeing them the heap is consistent again.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use pmem_core::pool::header::HEADER_LEN;
use pmem_core::{ModeRequest, OpenOptions, PPtr, Pool, PoolOptions};
use zerocopy::{FromBytes, IntoBytes};

use crate::layout::{Intent, IntentKind, RegionHeader, INTENT_OFF, MAGIC, META_OFF};
use crate::{ReformMode, Wafa, WafaSummary};

const LAYOUT: &str = "wafa-fuzz";
/// Bytes of the image's pool: a few dozen pages.
const POOL_BYTES: u64 = 160 << 10;
/// Sizes the image allocates, cycled (small blocks in divided pages, runs).
const SIZES: [u64; 10] = [24, 64, 100, 200, 640, 3000, 5000, 9000, 64, 17];
/// Sizes allocated after an open.
const AFTER: [u64; 8] = [16, 64, 200, 1000, 4096, 10_000, 64, 64];

/// The valid image and the offsets its patches are relative to.
#[derive(Debug)]
pub struct BaseImage {
    /// The pool file's bytes.
    pub bytes: Vec<u8>,
    /// Region starts (see the module docs).
    pub regions: Vec<u64>,
    /// Offset of the WAFA region header.
    pub region_off: u64,
    /// Blocks the image holds live: offset and size.
    pub live: Vec<(u64, u64)>,
}

/// What happened to one input.
#[derive(Debug)]
pub struct Outcome {
    /// [`Wafa::inspect`] of the image, opened read-only.
    pub inspect: Result<WafaSummary, String>,
    /// [`Wafa::open`] and the work done on it: blocks allocated after the open.
    pub open: Result<usize, String>,
}

fn options() -> crate::WafaOptions {
    crate::WafaOptions::default().reform(ReformMode::Manual)
}

/// The base image, made on first use.
///
/// # Panics
/// If the image cannot be made.
pub fn base_image() -> &'static BaseImage {
    static IMAGE: OnceLock<BaseImage> = OnceLock::new();
    IMAGE.get_or_init(|| make_image().expect("a WAFA heap image"))
}

fn make_image() -> Result<BaseImage, Box<dyn std::error::Error>> {
    let pool = Pool::anonymous(&PoolOptions::new(LAYOUT, POOL_BYTES))?;
    // SAFETY: the fresh pool is used by nothing but this allocator.
    let wafa = unsafe { Wafa::format(Arc::new(pool), options()) }?;
    let mut live = Vec::new();
    for (i, &size) in SIZES.iter().cycle().take(30).enumerate() {
        let Ok(p) = wafa.alloc(size) else { continue };
        if i % 3 == 1 {
            // SAFETY: `p` was allocated above with `size` and is not used again.
            unsafe { wafa.free(p, size) }?;
        } else {
            live.push((p.offset(), size));
        }
    }
    let pool = Arc::clone(wafa.pool());
    let bytes = pool.bytes(0, pool.len())?.to_vec();
    let heap = pool.heap();
    let region_off = (heap.start..heap.end)
        .step_by(64)
        .find(|&at| bytes.get(at as usize..at as usize + 8) == Some(&MAGIC[..]))
        .ok_or("no WAFA region header")?;
    let pages = wafa.stats().pages;
    let mut regions = vec![0, region_off];
    for p in 0..pages.min(120) {
        regions.push(wafa.page_offset(p) + META_OFF);
        regions.push(wafa.page_offset(p));
    }
    drop(wafa);
    Ok(BaseImage {
        bytes,
        regions,
        region_off,
        live,
    })
}

/// The image with the patches of `data`: each a region byte, a little-endian
/// `u16` offset in it, a length byte (1 to 16 bytes) and the bytes.
pub fn patched(data: &[u8]) -> Vec<u8> {
    let image = base_image();
    let mut bytes = image.bytes.clone();
    let mut rest = data;
    while let [region, lo, hi, len, tail @ ..] = rest {
        let start = image.regions[usize::from(*region) % image.regions.len()];
        let at = start + u64::from(u16::from_le_bytes([*lo, *hi]));
        let len = (usize::from(*len) % 16 + 1).min(tail.len());
        let (patch, next) = tail.split_at(len);
        if let Some(at) = usize::try_from(at).ok().filter(|&a| a < bytes.len()) {
            let end = (at + patch.len()).min(bytes.len());
            bytes[at..end].copy_from_slice(&patch[..end - at]);
        }
        rest = next;
    }
    bytes
}

/// The `wafa_open` target.
pub fn open_patched(data: &[u8]) -> Outcome {
    open_image(&patched(data))
}

/// The `wafa_open_resealed` target: the region header's checksum, an armed
/// intent's and the pool header's fixed after the patches.
pub fn open_patched_resealed(data: &[u8]) -> Outcome {
    let mut bytes = patched(data);
    let at = base_image().region_off as usize;
    if let Some(h) = bytes.get_mut(at..at + 64) {
        if let Ok(header) = RegionHeader::read_from_bytes(h) {
            h.copy_from_slice(header.sealed().as_bytes());
        }
    }
    let at = at + INTENT_OFF as usize;
    if let Some(i) = bytes.get_mut(at..at + 64) {
        if let Ok(intent) = Intent::read_from_bytes(i) {
            if intent.kind == IntentKind::AllocPublish as u64 {
                let armed = Intent::new(
                    IntentKind::AllocPublish,
                    intent.slot,
                    intent.block,
                    intent.extent,
                    intent.expected,
                );
                i.copy_from_slice(armed.as_bytes());
            }
        }
    }
    if bytes.len() >= HEADER_LEN {
        let c = crc32c::crc32c(&bytes[..HEADER_LEN - 4]);
        bytes[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&c.to_le_bytes());
    }
    open_image(&bytes)
}

/// Writes `bytes` to a temporary file, inspects it read-only (never writing),
/// opens it and allocates and frees on it.
///
/// # Panics
/// On a broken promise (see the module docs) or a panic of the code under test.
pub fn open_image(bytes: &[u8]) -> Outcome {
    let Some(file) = TempFile::with_contents(bytes) else {
        return Outcome {
            inspect: Err("skipped: cannot write the temporary file".into()),
            open: Err("skipped".into()),
        };
    };
    let inspect = inspect_read_only(&file.path, bytes);
    let open = open_and_allocate(&file.path);
    if let (Ok(summary), Err(e)) = (&inspect, &open) {
        panic!("inspected clean ({summary:?}) but the open failed: {e}");
    }
    Outcome { inspect, open }
}

fn inspect_read_only(path: &Path, bytes: &[u8]) -> Result<WafaSummary, String> {
    let result = (|| {
        let opts = OpenOptions::new().layout(LAYOUT).read_only(true);
        let mut pool = Pool::open_with(path, &opts).map_err(|e| e.to_string())?;
        let s = Wafa::inspect(&mut pool).map_err(|e| e.to_string());
        pool.close().map_err(|e| e.to_string())?;
        s
    })();
    if let Ok(after) = std::fs::read(path) {
        assert!(after == bytes, "a read-only inspection changed the file");
    }
    result
}

/// Opens the heap, checks it, allocates [`AFTER`] and frees it all again.
fn open_and_allocate(path: &Path) -> Result<usize, String> {
    // Volatile: no msync per operation (durability is the crash suites' business).
    let opts = OpenOptions::new()
        .layout(LAYOUT)
        .mode(ModeRequest::Volatile);
    let pool = Pool::open_with(path, &opts).map_err(|e| e.to_string())?;
    // SAFETY: the pool was opened here and is used by nothing but this allocator.
    let wafa = unsafe { Wafa::open(Arc::new(pool), options()) }.map_err(|e| e.to_string())?;
    if let Err(e) = wafa.check_consistency() {
        panic!("an open accepted an inconsistent heap: {e}");
    }
    let heap = wafa.pool().heap();
    let old: Vec<(u64, u64)> = base_image()
        .live
        .iter()
        .copied()
        .filter(|&(p, size)| wafa.is_allocated(PPtr::from_offset(p), size))
        .collect();
    let mut new: Vec<(u64, u64)> = Vec::new();
    for size in AFTER {
        let Ok(p) = wafa.alloc(size) else { continue };
        let (at, end) = (p.offset(), p.offset() + size);
        assert!(
            heap.start <= at && end <= heap.end,
            "block {at:#x}+{size} outside the heap"
        );
        assert!(wafa.is_allocated(p, size), "a new block is not live");
        let overlaps = |&(q, n): &(u64, u64)| at < q + n && q < end;
        assert!(
            !new.iter().chain(&old).any(overlaps),
            "block {at:#x}+{size} handed out twice"
        );
        new.push((at, size));
    }
    for &(p, size) in new.iter().rev() {
        // SAFETY: each block was allocated above with its size and is freed once.
        unsafe { wafa.free(PPtr::from_offset(p), size) }.map_err(|e| e.to_string())?;
    }
    if let Err(e) = wafa.check_consistency() {
        panic!("inconsistent after allocating and freeing: {e}");
    }
    Ok(new.len())
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
            let path = dir.join(format!("pmkit-fuzz-wafa-{}-{n}", std::process::id()));
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
