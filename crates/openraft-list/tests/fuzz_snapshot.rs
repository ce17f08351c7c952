//! The `snapshot_chunks` fuzz target's committed corpus, run as an ordinary test.
//!
//! Every file in `fuzz/corpus/snapshot_chunks/` goes through
//! [`openraft_list::fuzzing::install_snapshot_bytes`]: a snapshot file is read
//! frame by frame and installed into a fresh store, which then holds every key's
//! newest record; a damaged file is refused with a typed error. A counting global
//! allocator checks that no single allocation exceeds a bound taken from the
//! input's length (a frame's length field is not trusted). Files named `ok-*`
//! must install, `err-*` must be refused. The named files are made by the ignored
//! test `regenerate_corpus`:
//!
//! ```text
//! cargo test -p openraft-list --test fuzz_snapshot -- --ignored --exact regenerate_corpus
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};

use openraft_list::fuzzing::install_snapshot_bytes;
use raft_nvm::store::{SnapshotItem, SnapshotMeta};

/// Records the largest allocation of the current thread.
struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// bookkeeping touches only a thread-local cell, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(layout.size())));
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The largest allocation reading `data` as a snapshot file may make: a few
/// times its length, plus fixed buffers (the store's own allocations, a
/// frame's 64 KiB reserve).
fn bound(data: &[u8]) -> usize {
    4 * data.len() + (2 << 20)
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/snapshot_chunks")
}

#[test]
fn corpus_installs_or_is_refused_within_its_allocation_bound() {
    let dir = corpus_dir();
    let mut ran = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        let data = std::fs::read(&path).expect("readable corpus file");
        LARGEST.with(|l| l.set(0));
        let outcome = install_snapshot_bytes(&data);
        let largest = LARGEST.with(Cell::get);
        assert!(
            largest <= bound(&data),
            "{name}: an allocation of {largest} bytes for {} input bytes",
            data.len()
        );
        if name.starts_with("ok-") {
            assert!(
                matches!(outcome.installed, Some(Ok(_))),
                "{name} should install: {outcome:?}"
            );
        } else if name.starts_with("err-") {
            assert!(
                !matches!(outcome.installed, Some(Ok(_))),
                "{name} should be refused: {outcome:?}"
            );
        }
        ran += 1;
    }
    assert!(
        ran >= 5,
        "expected at least 5 corpus files in {}",
        dir.display()
    );
}

/// A frame whose length field says 1 GiB in a file of a few bytes: refused
/// without reserving the gigabyte (it once was, by `vec![0; len]`).
#[test]
fn a_frame_length_past_the_file_is_refused_without_allocating_it() {
    let data = std::fs::read(corpus_dir().join("regress-frame-length-past-the-file"))
        .expect("the regression input");
    LARGEST.with(|l| l.set(0));
    let outcome = install_snapshot_bytes(&data);
    let largest = LARGEST.with(Cell::get);
    assert!(outcome.parsed.is_err(), "{outcome:?}");
    assert!(largest <= bound(&data), "an allocation of {largest} bytes");
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut v = (body.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

fn file(meta: SnapshotMeta, chunks: &[Vec<SnapshotItem>]) -> Vec<u8> {
    let mut v = b"ORLSNAP1".to_vec();
    v.extend(frame(&postcard::to_stdvec(&meta).expect("encode")));
    for c in chunks {
        v.extend(frame(&postcard::to_stdvec(c).expect("encode")));
    }
    v.extend(0u32.to_le_bytes());
    v
}

fn item(key: &str, value: &str, index: u64) -> SnapshotItem {
    SnapshotItem {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        index,
    }
}

/// Writes the named corpus files (run by hand; see the module docs).
#[test]
#[ignore = "writes fuzz/corpus/snapshot_chunks; run by hand to regenerate"]
fn regenerate_corpus() {
    let meta = SnapshotMeta { index: 9, term: 2 };
    let chunks = vec![
        vec![item("a", "1", 3), item("b", "two", 5)],
        vec![item("a", "newer", 7), item("c", &"x".repeat(300), 9)],
    ];
    let good = file(meta, &chunks);
    let mut past_index = chunks.clone();
    past_index[1].push(item("d", "late", 10));
    let mut huge = b"ORLSNAP1".to_vec();
    huge.extend((1u32 << 30).to_le_bytes());
    huge.extend([1, 2, 3, 4]);
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("ok-two-chunks", good.clone()),
        ("ok-empty", file(meta, &[])),
        ("err-magic", {
            let mut v = good.clone();
            v[0] = b'X';
            v
        }),
        ("err-no-end-frame", good[..good.len() - 4].to_vec()),
        ("err-item-past-index", file(meta, &past_index)),
        ("err-cut-in-a-frame", good[..good.len() - 20].to_vec()),
        ("regress-frame-length-past-the-file", huge),
    ];
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("create corpus directory");
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("write corpus file");
    }
}
