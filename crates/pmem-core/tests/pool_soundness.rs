//! Soundness of the pool's safe API: over-aligned types, the header
//! guard of every write API, and typed roots holding atomics.

use std::sync::atomic::{AtomicU64, Ordering};

use pmem_core::pool::header::{Header, HEADER_AREA, HEADER_LEN};
use pmem_core::{AtomicPPtr, PPtr, Pool, PoolError, PoolOptions, RootType};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A type more aligned than the page-aligned mapping guarantees.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C, align(8192))]
struct OverAligned {
    bytes: [u8; 8192],
}

const POOL: u64 = 64 * 1024;

/// An anonymous pool whose mapping is page aligned but *not* 8 KiB aligned, so an
/// 8 KiB-aligned offset is a misaligned address. mmap places mappings at page
/// granularity; pools of alternately an even and an odd number of pages, kept alive
/// at once, soon give one such base.
fn pool_with_odd_page_base() -> (Pool, Vec<Pool>) {
    let mut keep = Vec::new();
    for i in 0..32 {
        let size = POOL + 4096 * (i % 2);
        let p = Pool::anonymous(&PoolOptions::new("align", size)).expect("anonymous pool");
        if (p.base_ptr() as usize) % 8192 == 4096 {
            return (p, keep);
        }
        keep.push(p);
    }
    panic!("no mapping with an odd page base among 32 pools");
}

/// Every accessor either refuses an over-aligned type's pointer or hands out a
/// reference whose *address* is aligned; with the mapping at an odd page, the
/// offsets that are 8 KiB multiples are exactly the misaligned addresses.
#[test]
fn over_aligned_types_are_checked_by_address() {
    let (mut pool, _keep) = pool_with_odd_page_base();
    let base = pool.base_ptr() as u64;
    let len = pool.len();
    let mut accepted = 0;
    for off in (HEADER_AREA..len).step_by(4096) {
        let p = PPtr::<OverAligned>::from_offset(off);
        let fits = off + 8192 <= len;
        let aligned = (base + off).is_multiple_of(8192);
        let want_ok = fits && aligned;
        match pool.get(p) {
            Ok(r) => {
                assert!(want_ok, "get accepted offset {off}");
                assert_eq!(std::ptr::from_ref(r) as usize % 8192, 0);
                accepted += 1;
            }
            Err(PoolError::Misaligned { offset, align }) => {
                assert!(fits && !aligned, "offset {off}");
                assert_eq!((offset, align), (off, 8192));
            }
            Err(e) => assert!(!fits, "offset {off}: {e}"),
        }
        match pool.get_mut(p) {
            Ok(r) => {
                assert!(want_ok, "get_mut accepted offset {off}");
                assert_eq!(std::ptr::from_mut(r) as usize % 8192, 0);
            }
            Err(_) => assert!(!want_ok, "get_mut refused offset {off}"),
        }
        // SAFETY: nothing else references the pool.
        match unsafe { pool.get_shared(p) } {
            Ok(r) => {
                assert!(want_ok, "get_shared accepted offset {off}");
                assert_eq!(std::ptr::from_ref(r) as usize % 8192, 0);
            }
            Err(_) => assert!(!want_ok, "get_shared refused offset {off}"),
        }
    }
    assert!(accepted > 0, "some offsets are aligned addresses");
}

/// Ordinary types keep the offset check (the mapping is page aligned).
#[test]
fn ordinary_alignment_is_unchanged() {
    let pool = Pool::anonymous(&PoolOptions::new("align", POOL)).expect("anon");
    assert!(pool.get(PPtr::<u64>::from_offset(HEADER_AREA + 8)).is_ok());
    assert!(matches!(
        pool.get(PPtr::<u64>::from_offset(HEADER_AREA + 4)),
        Err(PoolError::Misaligned { align: 8, .. })
    ));
    assert!(matches!(
        pool.get(PPtr::<u64>::null()),
        Err(PoolError::Null)
    ));
    assert!(matches!(
        pool.get(PPtr::<u64>::from_offset(POOL - 4)),
        Err(PoolError::OutOfBounds { .. })
    ));
}

fn header_overlap<T>(r: Result<T, PoolError>, what: &str) {
    match r {
        Err(PoolError::HeaderOverlap { .. }) => {}
        Err(e) => panic!("{what}: wrong error {e}"),
        Ok(_) => panic!("{what}: wrote into the header area"),
    }
}

/// Every write API refuses ranges overlapping the header area; reads stay allowed;
/// the root right after the header area is writable.
#[test]
fn write_apis_refuse_the_header_area() {
    let mut pool = Pool::anonymous(&PoolOptions::new("guard", POOL).root::<u64>()).expect("anon");
    let before = pool.bytes(0, HEADER_AREA).expect("read header").to_vec();
    for off in [8u64, 64, HEADER_LEN as u64, HEADER_AREA - 8] {
        header_overlap(pool.write_bytes(off, &[1; 8]), "write_bytes");
        header_overlap(pool.write(PPtr::<u64>::from_offset(off), &7), "write");
        header_overlap(pool.bytes_mut(off, 8), "bytes_mut");
        header_overlap(pool.get_mut(PPtr::<u64>::from_offset(off)), "get_mut");
        header_overlap(
            pool.write_nt_u64(PPtr::<u64>::from_offset(off), 7),
            "write_nt_u64",
        );
        header_overlap(
            pool.publish(
                PPtr::<AtomicPPtr<u8>>::from_offset(off),
                PPtr::from_offset(HEADER_AREA),
            ),
            "publish",
        );
        // SAFETY: nothing else references the pool.
        header_overlap(
            unsafe { pool.write_bytes_shared(off, &[1; 8]) },
            "write_bytes_shared",
        );
        // SAFETY: as above.
        header_overlap(
            unsafe { pool.get_shared(PPtr::<AtomicU64>::from_offset(off)) },
            "get_shared",
        );
    }
    // A range starting in the header area and ending after it.
    header_overlap(pool.write_bytes(HEADER_AREA - 4, &[1; 8]), "straddling");
    header_overlap(pool.bytes_mut(0, POOL), "whole pool");
    assert_eq!(
        pool.bytes(0, HEADER_AREA).expect("read header"),
        &before[..]
    );
    // Reads of the header are fine.
    assert!(pool.get(PPtr::<u64>::from_offset(8)).is_ok());
    assert!(pool.read(PPtr::<[u8; 8]>::from_offset(16)).is_ok());
    // The root follows the header area and takes writes.
    let root = pool.root::<u64>().expect("root");
    assert_eq!(root.offset(), HEADER_AREA);
    *pool.get_mut(root).expect("root get_mut") = 5;
    pool.write(root, &6).expect("root write");
    pool.write_nt_u64(root, 7).expect("root write_nt");
    assert_eq!(pool.read(root).expect("read"), 7);
}

/// A root as its author first wrote it.
mod v1 {
    use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

    #[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
    #[repr(C)]
    pub struct AppRoot {
        pub count: u64,
        pub head: u64,
    }

    impl pmem_core::RootType for AppRoot {
        const ROOT_ID: &'static str = "soundness-app/root";
        const LAYOUT_VERSION: u32 = 1;
    }
}

/// The same root, renamed and moved: same id and version, so the same pools.
mod renamed {
    use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

    #[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
    #[repr(C)]
    pub struct ApplicationRoot {
        pub count: u64,
        pub head: u64,
    }

    impl pmem_core::RootType for ApplicationRoot {
        const ROOT_ID: &'static str = "soundness-app/root";
        const LAYOUT_VERSION: u32 = 1;
    }
}

/// A new layout of the same root: its version is bumped.
mod v2 {
    use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

    #[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
    #[repr(C)]
    pub struct AppRoot {
        pub head: u64,
        pub count: u64,
    }

    impl pmem_core::RootType for AppRoot {
        const ROOT_ID: &'static str = "soundness-app/root";
        const LAYOUT_VERSION: u32 = 2;
    }
}

/// The root's identity is the author's id and version, not the Rust type name:
/// a renamed or moved type opens its pools; a bumped version is refused with an
/// error naming both ids and versions.
#[test]
fn root_identity_survives_renames_and_checks_versions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("root.pool");
    {
        let mut pool = Pool::create(&path, &PoolOptions::new("app", POOL).root::<v1::AppRoot>())
            .expect("create");
        let root = pool.root::<v1::AppRoot>().expect("root");
        pool.get_mut(root).expect("get_mut").count = 41;
        pool.persist_ptr(root).expect("persist");
    }
    let pool = Pool::open(&path, "app").expect("open");
    assert_eq!(pool.info().root_id, "soundness-app/root");
    assert_eq!(pool.info().root_layout_version, 1);
    let root = pool
        .root::<renamed::ApplicationRoot>()
        .expect("a renamed root type opens the pool");
    assert_eq!(pool.get(root).expect("get").count, 41);
    match pool.root::<v2::AppRoot>() {
        Err(PoolError::RootMismatch {
            expected_id,
            expected_version,
            found_id,
            found_version,
            ..
        }) => {
            assert_eq!(expected_id, "soundness-app/root");
            assert_eq!(found_id, "soundness-app/root");
            assert_eq!((expected_version, found_version), (2, 1));
        }
        other => panic!("a new layout version must be refused: {other:?}"),
    }
    let e = pool.root::<u64>().expect_err("another id");
    let text = e.to_string();
    assert!(
        text.contains("\"u64\" version 1") && text.contains("\"soundness-app/root\" version 1"),
        "{text}"
    );
}

/// A file of header format version 1 (before root ids) is a clean typed error.
#[test]
fn old_header_versions_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("old.pool");
    drop(Pool::create(&path, &PoolOptions::new("old", POOL).root::<u64>()).expect("create"));
    let mut bytes = std::fs::read(&path).expect("read");
    let mut h = Header::read_from_bytes(&bytes[..HEADER_LEN]).expect("header");
    h.version = 1;
    h.checksum = h.compute_checksum();
    bytes[..HEADER_LEN].copy_from_slice(h.as_bytes());
    std::fs::write(&path, &bytes).expect("write");
    match Pool::open(&path, "old") {
        Err(PoolError::UnsupportedVersion {
            found: 1,
            supported: 3,
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read(&path).expect("read"),
        bytes,
        "open never writes"
    );
}

/// A root holding atomics: no `Immutable` needed. It is created zeroed, reached
/// exclusively with `get_mut` and shared with the unsafe `get_shared`.
#[derive(FromBytes, IntoBytes, KnownLayout)]
#[repr(C)]
struct AtomicRoot {
    head: AtomicPPtr<u64>,
    count: AtomicU64,
}

impl RootType for AtomicRoot {
    const ROOT_ID: &'static str = "soundness/atomic-root";
    const LAYOUT_VERSION: u32 = 1;
}

#[test]
fn a_root_can_hold_atomics() {
    let mut pool =
        Pool::anonymous(&PoolOptions::new("atomics", POOL).root::<AtomicRoot>()).expect("anon");
    let root = pool.root::<AtomicRoot>().expect("root");
    let heap = pool.heap().start;
    {
        let r = pool.get_mut(root).expect("get_mut");
        assert!(r.head.load(Ordering::Relaxed).is_null());
        *r.count.get_mut() = 10;
        r.head = AtomicPPtr::new(PPtr::from_offset(heap));
    }
    pool.persist_ptr(root).expect("persist");
    let pool = std::sync::Arc::new(pool);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let pool = std::sync::Arc::clone(&pool);
            std::thread::spawn(move || {
                // SAFETY: the root's bytes are only ever accessed as `AtomicRoot`.
                let r = unsafe { pool.get_shared(root) }.expect("get_shared");
                for _ in 0..100 {
                    r.count.fetch_add(1, Ordering::AcqRel);
                }
                r.head.load(Ordering::Acquire).offset()
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().expect("thread"), heap);
    }
    // SAFETY: as above.
    let r = unsafe { pool.get_shared(root) }.expect("get_shared");
    assert_eq!(r.count.load(Ordering::Acquire), 210);
}
