//! The `open_pool` fuzz target's committed corpus, run as an ordinary test.
//!
//! Every file in `fuzz/corpus/open_pool/` goes through
//! [`pmem_core::fuzzing::open_arbitrary_bytes`], exactly what the fuzz target runs:
//! opening must never panic and never change the file. Files named `ok-*` must open
//! (read-write and read-only), files named `err-*` must be refused; other names (inputs
//! a fuzzer run added) only have to survive. Every file also goes through
//! [`pmem_core::fuzzing::open_resealed_bytes`], the `open_pool_resealed` target.
//!
//! The named files are made by the ignored test `regenerate_corpus`:
//!
//! ```text
//! cargo test -p pmem-core --test fuzz_corpus -- --ignored --exact regenerate_corpus
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pmem_core::fuzzing::{open_arbitrary_bytes, open_resealed_bytes};
use pmem_core::pool::header::Header;
use pmem_core::{PageAllocator, PersistentAllocator, Pool, PoolOptions};
use zerocopy::{FromBytes, IntoBytes};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/open_pool")
}

fn corpus_files() -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir();
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("directory entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .expect("UTF-8 file name")
                .to_owned();
            let bytes = std::fs::read(&path).expect("readable corpus file");
            (name, bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn corpus_opens_without_panics_or_writes() {
    let files = corpus_files();
    assert!(
        files.len() >= 8,
        "expected at least 8 corpus files in {}, found {}",
        corpus_dir().display(),
        files.len()
    );
    for (name, bytes) in &files {
        open_resealed_bytes(bytes);
        let outcome = open_arbitrary_bytes(bytes);
        if name.starts_with("ok-") {
            assert!(
                outcome.read_write.is_ok() && outcome.read_only.is_ok(),
                "{name} should open: {outcome:?}"
            );
        } else if name.starts_with("err-") {
            assert!(
                outcome.read_write.is_err() && outcome.read_only.is_err(),
                "{name} should be refused: {outcome:?}"
            );
        }
        if name.starts_with("ok-alloc-") {
            let stats = outcome.allocator.as_ref().map(|r| r.as_ref());
            if name.contains("bad") {
                assert!(matches!(stats, Some(Err(_))), "{name}: {outcome:?}");
            } else {
                assert!(
                    matches!(stats, Some(Ok(s)) if s.pages_used == 1),
                    "{name}: {outcome:?}"
                );
            }
        }
    }
}

#[test]
fn arbitrary_small_inputs_survive() {
    for data in [
        &b""[..],
        b"P",
        b"PMKITPOL",
        b"PMKITPOL\x01\x00\x00\x00",
        &[0u8; 300],
        &[0xFF; 8192],
    ] {
        let outcome = open_arbitrary_bytes(data);
        assert!(outcome.read_write.is_err(), "{data:?}: {outcome:?}");
    }
}

/// A pool whose heap starts with a page-allocator header that checksums correctly
/// but records a page size of 0, or one larger than its region: `inspect` must
/// report corrupt metadata. (Found by the `open_pool_resealed` fuzz target.)
#[test]
fn forged_allocator_page_size() {
    for page_size in [0u64, 0x6a_1000] {
        let mut bytes = pool_bytes(8192, |_| Ok(()));
        let heap = 4096;
        let mut meta = Vec::with_capacity(64);
        meta.extend_from_slice(b"PMKPAGE1");
        // page size, page count, region offset, region length, first page, reserved
        for field in [page_size, 0, 4096, 4096, 0, 0] {
            meta.extend_from_slice(&field.to_le_bytes());
        }
        let crc = u64::from(crc32c::crc32c(&meta));
        meta.extend_from_slice(&crc.to_le_bytes());
        bytes[heap..heap + 64].copy_from_slice(&meta);
        let outcome = open_arbitrary_bytes(&bytes);
        assert!(
            matches!(outcome.allocator, Some(Err(_))),
            "page size {page_size}: {outcome:?}"
        );
    }
}

/// Creates a pool of `size` bytes in a temporary directory, lets `fill` work on it,
/// and returns the file's bytes.
fn pool_bytes(
    size: u64,
    fill: impl FnOnce(Pool) -> Result<(), Box<dyn std::error::Error>>,
) -> Vec<u8> {
    pool_bytes_with(PoolOptions::new("fuzz", size), fill)
}

fn pool_bytes_with(
    opts: PoolOptions,
    fill: impl FnOnce(Pool) -> Result<(), Box<dyn std::error::Error>>,
) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("p");
    let pool = Pool::create(&path, &opts).expect("create pool");
    fill(pool).expect("fill pool");
    std::fs::read(&path).expect("read pool file")
}

/// Re-seals the header of `bytes` after `edit`, so only the edited fields are wrong.
fn reseal(bytes: &mut [u8], edit: impl FnOnce(&mut Header)) {
    let mut h = Header::read_from_bytes(&bytes[..256]).expect("header bytes");
    edit(&mut h);
    h.checksum = h.compute_checksum();
    bytes[..256].copy_from_slice(h.as_bytes());
}

/// Writes the named corpus files (run by hand; see the module docs).
#[test]
#[ignore = "writes fuzz/corpus/open_pool; run by hand to regenerate"]
fn regenerate_corpus() {
    let minimal = pool_bytes(8192, |_| Ok(()));
    let with_root = pool_bytes_with(PoolOptions::new("fuzz", 12288).root::<[u64; 4]>(), |_| {
        Ok(())
    });
    let with_alloc = pool_bytes_with(PoolOptions::new("fuzz", 16384).root::<[u64; 4]>(), |pool| {
        // SAFETY: the fresh pool is used by nothing else while the allocator lives.
        let alloc = unsafe { PageAllocator::format_heap(Arc::new(pool)) }?;
        alloc.alloc(100)?;
        Ok(())
    });
    // The bitmap word after the 128-byte allocator header (heap at 8192): bit 5 is
    // the start bit of page 2 (two bits a page), inconsistent in a 1-page allocator.
    let mut bad_bitmap = with_alloc.clone();
    bad_bitmap[8192 + 128] |= 1 << 5;

    let mut files: Vec<(&str, Vec<u8>)> = vec![
        ("ok-minimal-8k", minimal.clone()),
        ("ok-root-12k", with_root),
        ("ok-alloc-16k", with_alloc.clone()),
        ("ok-alloc-bad-bitmap-16k", bad_bitmap),
        ("err-empty", Vec::new()),
        ("err-truncated-header", minimal[..100].to_vec()),
        ("err-truncated-body", minimal[..4096].to_vec()),
        ("err-trailing-bytes", {
            let mut v = minimal.clone();
            v.extend_from_slice(&[0; 4096]);
            v
        }),
    ];
    let mut flip = |name, offset: usize, value: u8| {
        let mut v = minimal.clone();
        v[offset] = value;
        files.push((name, v));
    };
    flip("err-bad-magic", 0, b'X');
    flip("err-bad-checksum", 50, minimal[50] ^ 1);
    // Format version 1 (before root ids) and a future version 4.
    flip("err-version-1", 8, 1);
    flip("err-version-4", 8, 4);
    // A torn 2 <-> 3 upgrade: the version of one, the checksum of the other; read
    // as the version the checksum belongs to.
    flip("ok-torn-upgrade", 8, 5 - minimal[8]);
    let mut inconsistent = minimal.clone();
    reseal(&mut inconsistent, |h| h.heap_size += 4096);
    files.push(("err-inconsistent-heap", inconsistent));

    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("create corpus directory");
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("write corpus file");
    }
}
