//! `pmkit pool info` and `pmkit pool check` on every layout pmkit writes.
//!
//! For each layout a healthy pool, made through its crate's public API, passes
//! `check` and `info` prints its summary; the same pool with bytes flipped in a
//! structure `check` covers (a checksummed header, a block map, a log) fails
//! `check` with one line naming the problem and exit code 1. `info` and `check`
//! leave every file, healthy or corrupt, byte for byte as it was.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pmem_core::{OpenOptions, Pool, PoolOptions};

fn pmkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmkit"))
        .args(args)
        .env_remove("PMKIT_FORCE_DAX")
        .env_remove("PMKIT_PERSISTENCE_DOMAIN")
        .output()
        .expect("run the pmkit binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn hash_of(path: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    std::fs::read(path).expect("read the pool").hash(&mut h);
    h.finish()
}

/// Runs `pmkit pool <cmd> FILE`, asserting the file's hash did not change.
fn run_unchanged(cmd: &str, path: &Path) -> Output {
    let before = hash_of(path);
    let out = pmkit(&["pool", cmd, path.to_str().expect("UTF-8 path")]);
    assert_eq!(hash_of(path), before, "`pool {cmd}` changed the file");
    out
}

/// A healthy pool: `check` exits 0 with an `ok` verdict naming `heap`, `info`
/// prints every string of `want` in its usage line.
fn assert_healthy(path: &Path, heap: &str, want: &[&str]) {
    let check = run_unchanged("check", path);
    let stdout = text(&check.stdout);
    assert!(
        check.status.success(),
        "check: {stdout} {}",
        text(&check.stderr)
    );
    let verdict = stdout.lines().last().unwrap_or_default();
    assert!(
        verdict.contains(": ok") && verdict.contains(heap),
        "{stdout}"
    );
    let info = run_unchanged("info", path);
    assert!(info.status.success(), "info: {}", text(&info.stderr));
    let stdout = text(&info.stdout);
    eprintln!("{}", stdout.lines().last().unwrap_or_default());
    let usage = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("usage"))
        .unwrap_or_default();
    assert!(usage.contains(heap), "{stdout}");
    for w in want {
        assert!(usage.contains(w), "{w:?} missing from {usage:?}");
    }
    let json = pmkit(&["pool", "info", "--json", path.to_str().expect("UTF-8 path")]);
    assert!(json.status.success());
    assert!(text(&json.stdout).contains(&format!("\"heap\":\"{heap}\"")));
}

/// A corrupt pool: `check` exits 1 with one line on stderr containing every
/// string of `want`, and no panic; `info` still succeeds and says `corrupt`.
fn assert_corrupt(path: &Path, want: &[&str]) {
    let check = run_unchanged("check", path);
    let stderr = text(&check.stderr);
    // Shown with `--nocapture`: the line a user sees.
    eprint!("{stderr}");
    assert_eq!(check.status.code(), Some(1), "check: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("pmkit: "), "{stderr}");
    for w in want {
        assert!(stderr.contains(w), "{w:?} missing from {stderr:?}");
    }
    for bad in ["panicked", "internal error"] {
        assert!(!stderr.contains(bad), "{stderr}");
    }
    let info = run_unchanged("info", path);
    assert!(info.status.success(), "info: {}", text(&info.stderr));
    assert!(
        text(&info.stdout).contains("corrupt"),
        "{}",
        text(&info.stdout)
    );
}

/// Flips every bit of the byte at `offset` of the file.
fn flip(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).expect("read");
    let i = usize::try_from(offset).expect("offset");
    bytes[i] ^= 0xff;
    std::fs::write(path, bytes).expect("write");
}

/// The heap's start and the root object's offset of the pool at `path`.
fn heap_and_root(path: &Path) -> (u64, u64) {
    let pool = Pool::open_with(path, &OpenOptions::new().read_only(true)).expect("open");
    let info = pool.info();
    (info.heap_offset, info.root_offset)
}

fn tx_heap(dir: &Path) -> PathBuf {
    use pmem_core::tx::{TxGeometry, TxHeap};
    let path = dir.join("tx.pool");
    let pool = Pool::create(&path, &PoolOptions::new("tx-app", 1 << 20)).expect("create");
    let mut heap = TxHeap::create(pool, &TxGeometry::default(), 256).expect("format");
    for v in 0..3u64 {
        heap.transaction(|tx| {
            let p = tx.alloc(16)?.cast::<[u64; 2]>();
            tx.write(p, &[v, v])
        })
        .expect("transaction");
    }
    drop(heap);
    path
}

#[test]
fn tx_heap_healthy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = tx_heap(dir.path());
    assert_healthy(&path, "tx heap", &["3 objects", "all idle"]);
}

/// The log header's lane count, under its checksum.
#[test]
fn tx_heap_log_header_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = tx_heap(dir.path());
    let (heap, _) = heap_and_root(&path);
    flip(&path, heap + 8);
    assert_corrupt(&path, &["transaction heap", "log header checksum"]);
}

/// A lane's state word: a phase no build writes.
#[test]
fn tx_heap_lane_state_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = tx_heap(dir.path());
    let (heap, _) = heap_and_root(&path);
    // Lane 0's state word follows the 64-byte log header; phase 3 is invalid.
    flip(&path, heap + 64);
    assert_corrupt(&path, &["transaction heap", "lane 0 has state word"]);
}

fn list_store(dir: &Path) -> PathBuf {
    use raft_nvm::{HardState, ListOptions, ListStore, Op, Store};
    let path = dir.join("node.pool");
    let opts = ListOptions {
        page_size: 512,
        ..ListOptions::default()
    };
    let store = ListStore::create(&path, 256 * 1024, &opts).expect("create");
    for i in 1..=5u64 {
        let key = format!("k{i}");
        let op = Op::Put {
            key: key.as_bytes(),
            value: b"value",
        };
        store.append(i, 2, op).expect("append");
    }
    store
        .set_hard_state(HardState {
            term: 2,
            vote: Some(1),
        })
        .expect("hard state");
    store.sync().expect("sync");
    store.close().expect("close");
    path
}

#[test]
fn list_store_healthy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = list_store(dir.path());
    assert_healthy(&path, "raft-nvm list", &["5 objects", "index 5", "term 2"]);
}

/// The control block's hard-state word, under `hard_check`.
#[test]
fn list_store_hard_state_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = list_store(dir.path());
    let (_, root) = heap_and_root(&path);
    flip(&path, root + 56);
    assert_corrupt(&path, &["raft-nvm list", "hard state", "checksum"]);
}

/// A record of the log (the first of the list's first page, after its 40-byte
/// header).
#[test]
fn list_store_record_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = list_store(dir.path());
    let (_, root) = heap_and_root(&path);
    let bytes = std::fs::read(&path).expect("read");
    let at = usize::try_from(root + 24).expect("offset");
    let pages_off = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    // The first record's value (after its 32-byte header and the key `k1`): only
    // the record's checksum can tell.
    flip(&path, pages_off + 40 + 32 + 2);
    assert_corrupt(&path, &["raft-nvm list", "record checksum mismatch"]);
}

fn wafa_heap(dir: &Path) -> PathBuf {
    use std::sync::Arc;
    use wafa::{ReformMode, Wafa, WafaOptions};
    let path = dir.join("wafa.pool");
    let pool = Pool::create(&path, &PoolOptions::new("wafa-app", 1 << 20)).expect("create");
    let pool = Arc::new(pool);
    let opts = WafaOptions::default().reform(ReformMode::Manual);
    // SAFETY: the heap is this allocator's alone, and the blocks are never used.
    let heap = unsafe { Wafa::format(Arc::clone(&pool), opts) }.expect("format");
    for size in [100, 200, 64, 10_000] {
        heap.alloc(size).expect("alloc");
    }
    drop(heap);
    drop(pool);
    path
}

/// The WAFA heap's region header, kind table and first divided page's bitmap.
fn wafa_places(path: &Path) -> (u64, u64, u64) {
    let (heap, _) = heap_and_root(path);
    let bytes = std::fs::read(path).expect("read");
    let at = usize::try_from(heap + 16).expect("offset");
    let first_page = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    (heap, heap + 128, first_page + 4096 - 64)
}

#[test]
fn wafa_heap_healthy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = wafa_heap(dir.path());
    // 100 + 200 + 64 bytes: 2 + 4 + 1 units in one page, one run; 10 000: a run
    // of 3 pages.
    assert_healthy(&path, "wafa heap", &["2 objects", "fragmentation", "clean"]);
}

#[test]
fn wafa_heap_header_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = wafa_heap(dir.path());
    let (header, _, _) = wafa_places(&path);
    flip(&path, header + 8);
    assert_corrupt(&path, &["wafa heap", "region header checksum mismatch"]);
}

/// The block map: a page's kind byte no build writes.
#[test]
fn wafa_heap_kind_table_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = wafa_heap(dir.path());
    let (_, kinds, _) = wafa_places(&path);
    flip(&path, kinds);
    assert_corrupt(&path, &["wafa heap", "page 0 has kind"]);
}

/// A divided page's bitmap without its metadata bit.
#[test]
fn wafa_heap_page_bitmap_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = wafa_heap(dir.path());
    let (_, _, bitmap) = wafa_places(&path);
    flip(&path, bitmap + 7);
    assert_corrupt(&path, &["wafa heap", "no metadata bit"]);
}

fn nvwa_heap(dir: &Path) -> PathBuf {
    use nvwa::{Nvwa, NvwaOptions};
    use pmem_core::PersistentAllocator;
    use std::sync::Arc;
    let path = dir.join("nvwa.pool");
    let pool = Pool::create(&path, &PoolOptions::new("nvwa-app", 1 << 20)).expect("create");
    let pool = Arc::new(pool);
    // SAFETY: the heap is this allocator's alone, and the blocks are never used.
    let heap =
        unsafe { Nvwa::format_heap(Arc::clone(&pool), &NvwaOptions::default()) }.expect("format");
    for size in [48, 48, 48, 20_000] {
        heap.alloc(size).expect("alloc");
    }
    drop(heap);
    drop(pool);
    path
}

/// The NVWA heap's header, and its active log area (area 0 of a heap never
/// checkpointed).
fn nvwa_places(path: &Path) -> (u64, u64) {
    let (heap, _) = heap_and_root(path);
    (heap, heap + 128)
}

fn word_at(path: &Path, offset: u64) -> u64 {
    let bytes = std::fs::read(path).expect("read");
    let at = usize::try_from(offset).expect("offset");
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

#[test]
fn nvwa_heap_healthy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = nvwa_heap(dir.path());
    assert_healthy(
        &path,
        "nvwa heap",
        &["4 objects", "fragmentation", "replays clean"],
    );
}

#[test]
fn nvwa_heap_header_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = nvwa_heap(dir.path());
    let (header, _) = nvwa_places(&path);
    flip(&path, header + 8);
    assert_corrupt(&path, &["nvwa heap", "header checksum mismatch"]);
}

/// A log record whose tag no build writes.
#[test]
fn nvwa_heap_log_record_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = nvwa_heap(dir.path());
    let (_, log) = nvwa_places(&path);
    assert_ne!(word_at(&path, log), 0, "the log starts with a record");
    flip(&path, log);
    assert_corrupt(&path, &["nvwa heap", "log word 0", "is not a record"]);
}

/// The log's first record (a run) repeated after the last: two runs claim the
/// same pages.
#[test]
fn nvwa_heap_overlapping_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = nvwa_heap(dir.path());
    let (_, log) = nvwa_places(&path);
    let first = word_at(&path, log);
    let mut tail = log;
    while word_at(&path, tail) != 0 {
        tail += 8;
    }
    let mut bytes = std::fs::read(&path).expect("read");
    let at = usize::try_from(tail).expect("offset");
    bytes[at..at + 8].copy_from_slice(&first.to_le_bytes());
    std::fs::write(&path, bytes).expect("write");
    assert_corrupt(&path, &["nvwa heap", "overlaps another"]);
}

/// A 128-byte list node, the defrag heap's one type.
#[derive(zerocopy::FromBytes, zerocopy::IntoBytes, zerocopy::KnownLayout, zerocopy::Immutable)]
#[repr(C)]
struct Node {
    value: u64,
    pad: [u64; 14],
    next: pmem_defrag::PPtr<Node>,
}
pmem_defrag::persistent_type!(Node, id = 1, pointers = [next: Node]);

/// A list of 40 nodes of which every other one was freed: fragmented.
fn defrag_heap(dir: &Path) -> PathBuf {
    use pmem_defrag::{DefragHeap, HeapRoot, Registry};
    let path = dir.join("defrag.pool");
    let opts = PoolOptions::new("defrag-app", 4 << 20).root::<HeapRoot>();
    let pool = Pool::create(&path, &opts).expect("create");
    let heap = DefragHeap::create(pool, &Registry::new().with::<Node>()).expect("heap");
    let mut nodes = Vec::new();
    for v in 0..40u64 {
        let p = heap
            .transaction(|t| {
                let next = t.root::<Node>("l")?;
                let p = t.alloc::<Node>()?;
                t.write(
                    p,
                    &Node {
                        value: v,
                        pad: [v; 14],
                        next,
                    },
                )?;
                t.set_root("l", p)?;
                Ok(p)
            })
            .expect("push");
        nodes.push(p);
    }
    // Unlink and free every other node but the head's neighbours' order: node
    // i+1 (pushed later) points at node i.
    for i in (1..39).step_by(2) {
        let (prev, gone, next) = (nodes[i + 1], nodes[i], nodes[i - 1]);
        heap.transaction(|t| {
            let mut n = t.read(prev)?;
            n.next = next;
            t.write(prev, &n)?;
            t.free(gone)
        })
        .expect("free");
    }
    drop(heap);
    path
}

/// The first slab page (by its magic `DFPG` after the allocator's start) and the
/// type table.
fn defrag_places(path: &Path) -> (u64, u64) {
    let (_, root) = heap_and_root(path);
    let type_table = word_at(path, root + 8);
    let bytes = std::fs::read(path).expect("read");
    let page = (0..bytes.len())
        .step_by(4096)
        .find(|&at| &bytes[at..at + 4] == b"DFPG")
        .expect("a slab page");
    (page as u64, type_table)
}

#[test]
fn defrag_heap_healthy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = defrag_heap(dir.path());
    assert_healthy(
        &path,
        "defrag heap",
        &[
            "21 objects",
            "fragmentation",
            "21 reachable",
            "1 types",
            "all idle",
        ],
    );
}

#[test]
fn defrag_heap_type_table_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = defrag_heap(dir.path());
    let (_, table) = defrag_places(&path);
    flip(&path, table + 32);
    assert_corrupt(&path, &["defrag heap", "type table checksum mismatch"]);
}

/// A slab page's live-slot count, which its bitmap contradicts.
#[test]
fn defrag_heap_page_header_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = defrag_heap(dir.path());
    let (page, _) = defrag_places(&path);
    flip(&path, page + 12);
    assert_corrupt(&path, &["defrag heap", "inconsistent header"]);
}

/// A live object's type id, which the type table does not hold.
#[test]
fn defrag_heap_object_header_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = defrag_heap(dir.path());
    let (page, _) = defrag_places(&path);
    flip(&path, page + 64);
    assert_corrupt(&path, &["defrag heap", "the type table does not hold"]);
}

/// A live object's `next` pointer, moved off the slot it pointed at: a dangling
/// reference the walk from the roots finds.
#[test]
fn defrag_heap_dangling_pointer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = defrag_heap(dir.path());
    let (page, _) = defrag_places(&path);
    let slot = word_at(&path, page) >> 32;
    // Node 2 sits in slot 2 and points at node 0 (node 1 was freed); its `next`
    // field is at byte 120 of the object, after the 16-byte object header.
    let next = page + 64 + 2 * slot + 16 + 120;
    assert_ne!(word_at(&path, next), 0, "node 2 has a successor");
    flip(&path, next);
    assert_corrupt(&path, &["defrag heap", "points at", "not at a slot"]);
}

/// A defrag heap over NVWA (`DefragHeap::create_with`) holding one object.
fn defrag_heap_over_nvwa(dir: &Path) -> PathBuf {
    use nvwa::{Nvwa, NvwaOptions};
    use pmem_defrag::{DefragHeap, HeapRoot, Registry};
    use std::sync::Arc;
    let path = dir.join("defrag-nvwa.pool");
    let opts = PoolOptions::new("defrag-nvwa", 8 << 20).root::<HeapRoot>();
    let pool = Pool::create(&path, &opts).expect("create");
    let registry = Registry::new().with::<Node>();
    let heap = DefragHeap::create_with(pool, &registry, |pool: Arc<Pool>, region| {
        // SAFETY: create_with gives the allocator its region alone.
        unsafe { Nvwa::format(pool, region, &NvwaOptions::default()) }
    })
    .expect("heap");
    heap.transaction(|t| {
        let p = t.alloc::<Node>()?;
        t.set_root("l", p)
    })
    .expect("alloc");
    drop(heap);
    path
}

/// Over NVWA the log, root and type table are checked, and the slab pages are
/// walked through NVWA's own block list, as over the page allocator.
#[test]
fn defrag_heap_over_nvwa_healthy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = defrag_heap_over_nvwa(dir.path());
    assert_healthy(
        &path,
        "defrag heap",
        &[
            "1 reachable from the roots, 1 slab pages",
            "1 types",
            "all idle",
        ],
    );
}

/// A live object's type id on a slab page NVWA holds: found by the walk.
#[test]
fn defrag_heap_over_nvwa_object_header_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = defrag_heap_over_nvwa(dir.path());
    let (page, _) = defrag_places(&path);
    flip(&path, page + 64);
    assert_corrupt(&path, &["defrag heap", "the type table does not hold"]);
}
