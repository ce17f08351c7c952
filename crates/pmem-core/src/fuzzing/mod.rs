//! Support for fuzzing (hidden from the documentation; not a stable API).
//!
//! [`open_arbitrary_bytes`] is the body of the `open_pool` cargo-fuzz target in
//! `fuzz/`, and the ordinary test `tests/fuzz_corpus.rs` runs the committed corpus
//! through the same function, so CI exercises it without a nightly toolchain.
//!
//! [`open_resealed_bytes`] (the `open_pool_resealed` target) first fixes up the
//! checksums of the pool header and of a page-allocator header at the heap, so
//! mutations reach the consistency checks behind them instead of stopping at a
//! checksum mismatch.
//!
//! It checks the promise of [`crate::pool`]: whatever bytes a file holds, opening it
//! (read-write or read-only), inspecting its page allocator and reading through the
//! pool returns typed errors, never panics, and never changes a byte of the file.
//!
//! The other targets of pmem-core each have a module here:
//! * [`tx_recover`]: bytes laid over a transaction heap's log, then inspected
//!   read-only and recovered (`tx_recover`, `tx_recover_resealed`);
//! * [`page_alloc`]: bytes laid over a page allocator's intent and bitmap, then
//!   opened and recovered (`page_alloc_intents`);
//!
//! The structure-aware `tx_ops` target lives in `pmem_collections::fuzzing`: its
//! operations include that crate's containers.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub mod page_alloc;
pub mod tx_recover;

use crate::alloc::PageAllocStats;
use crate::pool::header::HEADER_LEN;
use crate::pool::shutdown_record::RECORD_OFFSETS;
use crate::{OpenOptions, PPtr, PageAllocator, Pool};

/// What happened to one input: the text of each error, so tests can check that a
/// valid pool opens and a corrupt one is refused.
#[derive(Debug)]
pub struct Outcome {
    /// The read-write open.
    pub read_write: Result<(), String>,
    /// The read-only open.
    pub read_only: Result<(), String>,
    /// [`PageAllocator::inspect`] of the heap, when the read-only open succeeded.
    pub allocator: Option<Result<PageAllocStats, String>>,
}

/// Writes `data` to a fresh temporary file, opens it as a pool read-write and then
/// read-only, exercises the open pools (header summary, page-allocator inspection,
/// checked reads of the root and the heap, writes refused on the read-only pool),
/// and removes the file.
///
/// # Panics
/// Only if the file's bytes changed (opening must never write, except a successful
/// read-write open's shutdown-state record of a version-3 pool), or if a bug in the
/// code under test panics. If the temporary file cannot be written (disk full, no
/// temporary directory) the input is skipped: that is the environment, not the code.
pub fn open_arbitrary_bytes(data: &[u8]) -> Outcome {
    let skipped = || Outcome {
        read_write: Err("skipped: cannot write the temporary file".to_owned()),
        read_only: Err("skipped".to_owned()),
        allocator: None,
    };
    let Some(file) = TempFile::with_contents(data) else {
        return skipped();
    };
    let read_write = open_and_exercise(&file.path, false).map(|_| ());
    let Ok(mid) = std::fs::read(&file.path) else {
        return skipped();
    };
    // A successful read-write open of a version-3 pool writes its shutdown-state
    // record (open and clean close), and nothing else; a refused open writes nothing.
    let may_change = if read_write.is_ok() {
        RECORD_OFFSETS[0] as usize..RECORD_OFFSETS[1] as usize + 64
    } else {
        0..0
    };
    let outside = |b: &[u8]| {
        let cut = may_change.start.min(b.len())..may_change.end.min(b.len());
        (b[..cut.start].to_vec(), b[cut.end..].to_vec())
    };
    assert!(
        mid.len() == data.len() && outside(&mid) == outside(data),
        "opening the pool read-write changed the file ({} bytes before, {} after)",
        data.len(),
        mid.len()
    );
    let (read_only, allocator) = match open_and_exercise(&file.path, true) {
        Ok(stats) => (Ok(()), Some(stats)),
        Err(e) => (Err(e), None),
    };
    let after = std::fs::read(&file.path);
    drop(file);
    match after {
        Ok(after) => assert!(
            after == mid,
            "opening the pool read-only changed the file ({} bytes before, {} after)",
            mid.len(),
            after.len()
        ),
        Err(_) => return skipped(),
    }
    Outcome {
        read_write,
        read_only,
        allocator,
    }
}

/// [`open_arbitrary_bytes`] of `data` with valid checksums: the crc32c of the pool
/// header (bytes 0..252, stored at 252) and, if the header's heap offset leaves room
/// for one, of the 64-byte page-allocator header there (bytes 0..56, stored at 56 as
/// a `u64`), following the layouts documented in [`crate::pool::header`] and
/// [`crate::alloc::PageAllocator`].
pub fn open_resealed_bytes(data: &[u8]) -> Outcome {
    let mut data = data.to_vec();
    if data.len() >= HEADER_LEN {
        let crc = crc32c::crc32c(&data[..HEADER_LEN - 4]);
        data[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        let mut heap_off = [0u8; 8];
        heap_off.copy_from_slice(&data[136..144]);
        let heap = usize::try_from(u64::from_le_bytes(heap_off)).unwrap_or(usize::MAX);
        if let Some(meta) = data.get_mut(heap..heap.saturating_add(64)) {
            let crc = u64::from(crc32c::crc32c(&meta[..56]));
            meta[56..].copy_from_slice(&crc.to_le_bytes());
        }
    }
    open_arbitrary_bytes(&data)
}

/// Opens `path` and exercises the pool; returns the allocator inspection result.
fn open_and_exercise(
    path: &Path,
    read_only: bool,
) -> Result<Result<PageAllocStats, String>, String> {
    let opts = OpenOptions::new().read_only(read_only);
    let mut pool = Pool::open_with(path, &opts).map_err(|e| e.to_string())?;
    let stats = exercise(&mut pool);
    if read_only {
        refuse_writes(&mut pool);
    }
    pool.close().map_err(|e| e.to_string())?;
    Ok(stats)
}

/// Reads through every checked accessor a tool would use; results are discarded,
/// only panics and crashes matter.
fn exercise(pool: &mut Pool) -> Result<PageAllocStats, String> {
    let info = pool.info();
    let heap = pool.heap();
    let len = pool.len();
    std::hint::black_box((&info, pool.layout(), pool.is_durable(), pool.is_empty()));

    let mut sum = 0u64;
    let mut touch = |bytes: Result<&[u8], crate::PoolError>| {
        if let Ok(b) = bytes {
            sum = b.iter().fold(sum, |s, &x| s.wrapping_add(u64::from(x)));
        }
    };
    touch(pool.bytes(0, HEADER_LEN as u64));
    touch(pool.bytes(heap.start, heap.end.saturating_sub(heap.start).min(4096)));
    touch(pool.bytes(len.saturating_sub(64), 64));
    touch(pool.bytes(len, 1));
    touch(pool.bytes(u64::MAX, 2));
    let h = pool.header();
    touch(pool.bytes(h.root_off, h.root_size.min(4096)));
    std::hint::black_box(sum);

    for off in [
        h.root_off,
        heap.start,
        heap.start + 1,
        len.saturating_sub(8),
        len,
        u64::MAX - 7,
    ] {
        std::hint::black_box(pool.get(PPtr::<u64>::from_offset(off)).ok());
        std::hint::black_box(pool.read(PPtr::<[u8; 64]>::from_offset(off)).ok());
    }
    std::hint::black_box(pool.root::<u64>().ok());
    std::hint::black_box(pool.root::<[u64; 4]>().ok());

    PageAllocator::inspect(pool, heap.start).map_err(|e| e.to_string())
}

/// Every write API must refuse a read-only pool (a write that got through would hit
/// a read-only mapping and crash the fuzzer, which is what we want to learn).
fn refuse_writes(pool: &mut Pool) {
    let at = pool.heap().start;
    std::hint::black_box(pool.write_bytes(at, &[0xA5]).is_err());
    std::hint::black_box(pool.bytes_mut(at, 1).is_err());
    std::hint::black_box(pool.get_mut(PPtr::<u64>::from_offset(at)).is_err());
}

/// A uniquely named file in the temporary directory, removed on drop (shared by
/// the fuzz targets of other crates, which also open pools from files).
#[derive(Debug)]
pub struct TempFile {
    /// The file's path.
    pub path: PathBuf,
}

impl TempFile {
    /// Creates the file (never reusing an existing one) and writes `data` to it;
    /// `None` if the temporary directory refuses (the environment, not the code
    /// under test).
    pub fn with_contents(data: &[u8]) -> Option<TempFile> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir();
        for _ in 0..16 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let path = dir.join(format!("pmkit-fuzz-{}-{n}-{nanos:08x}", std::process::id()));
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
