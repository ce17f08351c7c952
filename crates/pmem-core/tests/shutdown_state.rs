//! Version-3 pools record the device's unsafe-shutdown count at open and a clean
//! close, over a fake sysfs tree (`PMKIT_SYSFS_ROOT`); version-2 pools still open
//! and upgrade only when asked.
//!
//! The sysfs root is process-wide, so the tests share one tree under a lock.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use pmem_core::platform::{DeviceNode, SYSFS_ROOT_ENV};
use pmem_core::pool::header::{Header, HEADER_LEN};
use pmem_core::pool::shutdown_record::{ShutdownCheck, RECORD_OFFSETS};
use pmem_core::{OpenOptions, Pool, PoolError, PoolOptions};
use zerocopy::{FromBytes, IntoBytes};

const SIZE: u64 = 64 * 1024;
const COUNT: &str = "devices/ndbus0/nmem0/nfit/dirty_shutdown";

struct Tree {
    dir: tempfile::TempDir,
    root: PathBuf,
}

/// The shared fake tree (dirty_shutdown 3) and the lock every test holds.
fn tree() -> (MutexGuard<'static, ()>, &'static Tree) {
    static LOCK: Mutex<()> = Mutex::new(());
    static TREE: OnceLock<Tree> = OnceLock::new();
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let t = TREE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("sys");
        let region = root.join("devices/ndbus0/region0");
        for (p, text) in [
            (region.join("persistence_domain"), "memory_controller\n"),
            (region.join("mapping0"), "nmem0,0,1073741824,0\n"),
            (region.join("namespace0.0/block/pmem0/badblocks"), ""),
            (root.join("devices/ndbus0/nmem0/nfit/id"), "8089-a2-0001\n"),
        ] {
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        }
        std::fs::create_dir_all(root.join("bus/nd/devices")).expect("mkdir");
        symlink(
            "../../../devices/ndbus0/nmem0",
            root.join("bus/nd/devices/nmem0"),
        )
        .expect("symlink");
        let probe = dir.path().join("probe");
        std::fs::write(&probe, b"x").expect("probe");
        let node = DeviceNode::of(&std::fs::metadata(&probe).expect("stat")).expect("file");
        std::fs::create_dir_all(root.join("dev/block")).expect("mkdir");
        symlink(
            "../../devices/ndbus0/region0/namespace0.0/block/pmem0",
            root.join(format!("dev/block/{node}")),
        )
        .expect("symlink");
        std::env::set_var(SYSFS_ROOT_ENV, &root);
        Tree { dir, root }
    });
    t.set_count(3);
    (guard, t)
}

impl Tree {
    fn set_count(&self, n: u64) {
        let p = self.root.join(COUNT);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, format!("{n}\n")).expect("count");
    }

    fn path(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        let _ = std::fs::remove_file(&p);
        p
    }
}

/// A pool whose shutdown record says it was open when the machine died: the file
/// as it was while the pool was open read-write.
fn crashed_pool(t: &Tree, name: &str) -> PathBuf {
    let path = t.path(name);
    Pool::create(&path, &PoolOptions::new("usc", SIZE))
        .expect("create")
        .close()
        .expect("close");
    let pool = Pool::open(&path, "usc").expect("open");
    let image = std::fs::read(&path).expect("image while open");
    drop(pool);
    std::fs::write(&path, image).expect("restore the crash image");
    path
}

#[test]
fn an_unsafe_shutdown_while_open_is_refused_unless_accepted() {
    let (_g, t) = tree();
    let path = crashed_pool(t, "unsafe.pool");
    t.set_count(4);
    match Pool::open(&path, "usc") {
        Err(PoolError::UnsafeShutdown {
            recorded: 3,
            now: 4,
            ..
        }) => {}
        other => panic!("expected UnsafeShutdown, got {other:?}"),
    }
    // Inspection sees it and writes nothing.
    let before = std::fs::read(&path).expect("read");
    let ro = Pool::open_with(&path, &OpenOptions::new().read_only(true)).expect("read-only");
    assert_eq!(
        ro.shutdown_check(),
        ShutdownCheck::UnsafeShutdown {
            recorded: 3,
            now: 4
        }
    );
    drop(ro);
    assert_eq!(std::fs::read(&path).expect("read"), before);
    // Accepted: opens, and after a clean close it opens normally again.
    let pool =
        Pool::open_with(&path, &OpenOptions::new().accept_unsafe_shutdown(true)).expect("accepted");
    drop(pool);
    let pool = Pool::open(&path, "usc").expect("open after acceptance");
    assert_eq!(
        pool.shutdown_check(),
        ShutdownCheck::Ok {
            clean: true,
            count: 4
        }
    );
}

#[test]
fn a_crash_without_unsafe_shutdown_or_a_clean_close_opens() {
    let (_g, t) = tree();
    // Crashed, count unchanged: an ordinary crash, the data is durable.
    let path = crashed_pool(t, "crash.pool");
    let pool = Pool::open(&path, "usc").expect("open");
    assert_eq!(
        pool.shutdown_check(),
        ShutdownCheck::Ok {
            clean: false,
            count: 3
        }
    );
    drop(pool);
    // Closed cleanly, then the count moved: not while the pool was open.
    t.set_count(9);
    let pool = Pool::open(&path, "usc").expect("open");
    assert_eq!(
        pool.shutdown_check(),
        ShutdownCheck::Ok {
            clean: true,
            count: 9
        }
    );
}

#[test]
fn without_a_counter_the_check_is_skipped() {
    let (_g, t) = tree();
    let path = crashed_pool(t, "nocounter.pool");
    std::fs::remove_file(t.root.join(COUNT)).expect("remove counter");
    let before = std::fs::read(&path).expect("read");
    let pool = Pool::open(&path, "usc").expect("open");
    match pool.shutdown_check() {
        ShutdownCheck::Skipped { reason } => assert!(reason.contains("no counter"), "{reason}"),
        other => panic!("{other:?}"),
    }
    pool.close().expect("close");
    // Nothing to record: no write, no device flush, at open or close.
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

/// Rewrites a fresh pool as version 2: old header version, no records.
fn make_v2(path: &Path) -> Vec<u8> {
    Pool::create(path, &PoolOptions::new("usc", SIZE))
        .expect("create")
        .close()
        .expect("close");
    let mut bytes = std::fs::read(path).expect("read");
    let mut h = Header::read_from_bytes(&bytes[..HEADER_LEN]).expect("header");
    h.version = 2;
    h.checksum = h.compute_checksum();
    bytes[..HEADER_LEN].copy_from_slice(h.as_bytes());
    bytes[HEADER_LEN..4096].fill(0);
    std::fs::write(path, &bytes).expect("write");
    bytes
}

#[test]
fn version_2_pools_open_read_write_and_upgrade_only_when_asked() {
    let (_g, t) = tree();
    let path = t.path("v2.pool");
    make_v2(&path);
    let mut pool = Pool::open(&path, "usc").expect("open v2 read-write");
    assert_eq!(pool.info().version, 2);
    assert_eq!(pool.shutdown_check(), ShutdownCheck::NotRecorded);
    let heap = pool.heap().start;
    pool.write_bytes(heap, b"kept").expect("write");
    pool.persist(heap, 4).expect("persist");
    drop(pool);
    let bytes = std::fs::read(&path).expect("read");
    assert_eq!(&bytes[heap as usize..heap as usize + 4], b"kept");
    // Still version 2, and the record area untouched.
    assert_eq!(
        u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")),
        2
    );
    assert!(
        bytes[RECORD_OFFSETS[0] as usize..RECORD_OFFSETS[1] as usize + 64]
            .iter()
            .all(|&b| b == 0)
    );

    assert_eq!(Pool::upgrade(&path).expect("upgrade"), 2);
    let pool = Pool::open(&path, "usc").expect("open v3");
    assert_eq!(pool.info().version, 3);
    assert_eq!(
        pool.shutdown_check(),
        ShutdownCheck::Ok {
            clean: true,
            count: 3
        }
    );
    assert_eq!(pool.bytes(heap, 4).expect("read"), b"kept");
    drop(pool);
    assert_eq!(Pool::upgrade(&path).expect("again"), 3);
}

#[test]
fn a_read_only_open_of_a_v3_pool_writes_nothing() {
    let (_g, t) = tree();
    let path = crashed_pool(t, "ro.pool");
    let before = std::fs::read(&path).expect("read");
    drop(Pool::open_with(&path, &OpenOptions::new().read_only(true)).expect("read-only"));
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

/// The record copies' sequence numbers (0 for an invalid copy), slot A then B.
fn record_seqs(bytes: &[u8]) -> [u64; 2] {
    RECORD_OFFSETS.map(|off| {
        let r = &bytes[off as usize..off as usize + 64];
        let crc = u32::from_le_bytes(r[60..64].try_into().expect("4 bytes"));
        let valid = &r[..8] == b"PMKITUSC" && crc == crc32c::crc32c(&r[..60]);
        if valid {
            u64::from_le_bytes(r[8..16].try_into().expect("8 bytes"))
        } else {
            0
        }
    })
}

#[test]
fn each_write_goes_to_the_other_copy_so_a_torn_write_leaves_the_last_one() {
    let (_g, t) = tree();
    let path = t.path("slots.pool");
    // Create writes a not-clean record, the close a clean one: one in each slot.
    drop(Pool::create(&path, &PoolOptions::new("usc", SIZE)).expect("create"));
    let bytes = std::fs::read(&path).expect("read");
    assert_eq!(record_seqs(&bytes), [1, 2]);
    drop(Pool::open(&path, "usc").expect("open"));
    let mut bytes = std::fs::read(&path).expect("read");
    assert_eq!(record_seqs(&bytes), [3, 4]);
    // Tear the newest copy (the clean close): the older one (the open) is current.
    bytes[RECORD_OFFSETS[1] as usize + 20] ^= 1;
    std::fs::write(&path, &bytes).expect("write");
    t.set_count(5);
    match Pool::open(&path, "usc") {
        Err(PoolError::UnsafeShutdown {
            recorded: 3,
            now: 5,
            ..
        }) => {}
        other => panic!("expected UnsafeShutdown from the older copy, got {other:?}"),
    }
}
