//! Platform detection wired into pools: a fake sysfs tree (`PMKIT_SYSFS_ROOT`) in
//! which the pool file's real device is a pmem block device of an nd region.
//!
//! One test function: the sysfs root is a process-wide environment variable.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use pmem_core::platform::extents::Fiemap;
use pmem_core::platform::{BadRange, DeviceNode, ExtentSource, SYSFS_ROOT_ENV};
use pmem_core::{
    Counters, DomainSource, ModeRequest, OpenOptions, PersistenceDomain, Pool, PoolError,
    PoolOptions,
};

const REGION: &str = "devices/ndbus0/region0";
const BADBLOCKS: &str = "devices/ndbus0/region0/namespace0.0/block/pmem0/badblocks";
const SIZE: u64 = 64 * 1024;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

/// A region with an ADR domain, no DIMM counters, an empty bad-block list, and the
/// device of `dir` as its block device.
fn fake_tree(dir: &Path) -> PathBuf {
    let root = dir.join("sys");
    write(
        &root,
        &format!("{REGION}/persistence_domain"),
        "memory_controller\n",
    );
    write(&root, BADBLOCKS, "");
    let probe = dir.join("probe");
    std::fs::write(&probe, b"x").expect("probe");
    let node = DeviceNode::of(&std::fs::metadata(&probe).expect("stat")).expect("file");
    let link = root.join(format!("dev/block/{node}"));
    std::fs::create_dir_all(link.parent().expect("parent")).expect("mkdir");
    symlink(format!("../../{REGION}/namespace0.0/block/pmem0"), link).expect("symlink");
    root
}

/// The device offset of the pool file's byte `offset`, from FIEMAP.
fn physical(path: &Path, offset: u64) -> Option<u64> {
    let file = std::fs::File::open(path).expect("open");
    let ext = Fiemap::new(&file, path).extents(SIZE).expect("fiemap")?;
    ext.iter()
        .find(|e| e.logical <= offset && offset < e.logical + e.length)
        .map(|e| e.physical + (offset - e.logical))
}

#[test]
fn pools_detect_once_and_refuse_bad_blocks_unless_read_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = fake_tree(dir.path());
    std::env::set_var(SYSFS_ROOT_ENV, &root);
    let path = dir.path().join("p.pool");

    // A clean region: the pool opens and reports what was found, and where.
    let pool = Pool::create(&path, &PoolOptions::new("plat", SIZE)).expect("create");
    let domain = pool.platform().domain.clone().expect("readable");
    assert_eq!(domain.value(), Some(&PersistenceDomain::MemoryController));
    assert!(domain
        .from()
        .is_some_and(|p| p.ends_with("region0/persistence_domain")));
    // The detected domain is the pool's, with the file it came from.
    assert_eq!(
        pool.persistence_domain(),
        PersistenceDomain::MemoryController
    );
    assert!(
        matches!(pool.domain_source(), DomainSource::Detected(p) if p.ends_with("region0/persistence_domain")),
        "{:?}",
        pool.domain_source()
    );
    let info = pool.info();
    assert_eq!(
        info.platform
            .bad_blocks
            .as_ref()
            .ok()
            .map(|b| b.value().is_some()),
        Some(true)
    );
    pool.close().expect("close");

    let Some(phys) = physical(&path, 8192) else {
        eprintln!("skipped: this file system has no FIEMAP, bad blocks cannot be mapped");
        return;
    };
    // One bad sector at the pool's byte 8192 (FIEMAP gives block-aligned places).
    write(&root, BADBLOCKS, &format!("{} 1\n", phys / 512));
    let expected = vec![BadRange {
        offset: 8192,
        len: 512,
    }];
    match Pool::open(&path, "plat") {
        Err(PoolError::BadBlocks { path: p, ranges }) => {
            assert_eq!(p, path);
            assert_eq!(ranges, expected);
        }
        other => panic!("expected BadBlocks, got {other:?}"),
    }
    let ro = Pool::open_with(&path, &OpenOptions::new().read_only(true)).expect("read-only open");
    assert_eq!(ro.platform().bad_ranges(), expected.as_slice());
    drop(ro);

    // A bad sector elsewhere on the device does not concern the pool.
    write(
        &root,
        BADBLOCKS,
        &format!("{} 1\n", phys / 512 + 1_000_000_000),
    );
    Pool::open(&path, "plat")
        .expect("open")
        .close()
        .expect("close");

    // Creating a pool on bad media fails and leaves no file behind.
    write(&root, BADBLOCKS, "0 1099511627776\n");
    let path2 = dir.path().join("q.pool");
    let err = Pool::create(&path2, &PoolOptions::new("plat", SIZE)).err();
    assert!(matches!(err, Some(PoolError::BadBlocks { .. })), "{err:?}");
    assert!(!path2.exists());

    // A malformed list does not refuse the pool, and the pool says which file.
    write(&root, BADBLOCKS, "garbage\n");
    let pool = Pool::open(&path, "plat").expect("open");
    let errs = pool.platform().errors();
    assert_eq!(errs.len(), 1);
    assert!(errs[0].path().ends_with("pmem0/badblocks"), "{errs:?}");
    drop(pool);

    // An eADR region: a Dax mapping of the pool elides its flushes (forced here,
    // as this file is not on DAX; the detection is what is under test).
    write(&root, BADBLOCKS, "");
    write(
        &root,
        &format!("{REGION}/persistence_domain"),
        "cpu_cache\n",
    );
    let pool = Pool::open_with(
        &path,
        &OpenOptions::new()
            .layout("plat")
            .mode(ModeRequest::ForceDax),
    )
    .expect("open");
    assert_eq!(pool.persistence_domain(), PersistenceDomain::CpuCache);
    assert!(matches!(pool.domain_source(), DomainSource::Detected(_)));
    assert!(pool.domain_effective());
    let before = Counters::current();
    pool.persist(pool.heap().start, 64).expect("persist");
    let d = Counters::since(before);
    assert_eq!((d.lines_flushed, d.fences), (0, 1), "{d:?}");
}
