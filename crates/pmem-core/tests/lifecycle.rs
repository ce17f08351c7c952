//! Create / open / close, permissions, the exclusive lock (in this process and in
//! another), durability modes, and the typed root.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use pmem_core::{
    DurabilityMode, ModeRequest, ModeSource, OpenOptions, PPtr, Pool, PoolError, PoolOptions,
};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Debug, PartialEq)]
#[repr(C)]
struct Root {
    generation: u64,
    head: PPtr<u64>,
    name: [u8; 16],
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct OtherRoot {
    x: [u64; 5],
}

impl pmem_core::RootType for Root {
    const ROOT_ID: &'static str = "lifecycle-test/root";
    const LAYOUT_VERSION: u32 = 1;
}

impl pmem_core::RootType for OtherRoot {
    const ROOT_ID: &'static str = "lifecycle-test/other-root";
    const LAYOUT_VERSION: u32 = 1;
}

const CHILD_ENV: &str = "PMEM_CORE_LOCK_CHILD_PATH";

#[test]
fn create_write_reopen_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.pool");
    let opts = PoolOptions::new("lifecycle", 1 << 20).root::<Root>();
    {
        let mut pool = Pool::create(&path, &opts).expect("create");
        let root = pool.root::<Root>().expect("root");
        assert_eq!(
            pool.get(root).expect("get").generation,
            0,
            "root starts zeroed"
        );
        let heap = pool.heap().start;
        let r = pool.get_mut(root).expect("get_mut");
        r.generation = 41;
        r.name = *b"hello, pool!\0\0\0\0";
        r.head = PPtr::from_offset(heap);
        pool.write(PPtr::<u64>::from_offset(pool.heap().start), &0xfeed)
            .expect("write");
        pool.persist(0, pool.len()).expect("persist");
        pool.close().expect("close");
    }
    let meta = std::fs::metadata(&path).expect("stat");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), 1 << 20);

    let mut pool = Pool::open(&path, "lifecycle").expect("reopen");
    let root = pool.root::<Root>().expect("root");
    pool.get_mut(root).expect("get_mut").generation += 1;
    let r = pool.get(root).expect("get");
    assert_eq!(r.generation, 42);
    assert_eq!(&r.name[..12], b"hello, pool!");
    assert_eq!(pool.read(r.head).expect("follow head"), 0xfeed);
    assert_eq!(pool.layout(), "lifecycle");
    assert_eq!(pool.info().root_id, "lifecycle-test/root");
    assert_eq!(pool.info().root_layout_version, 1);
}

#[test]
fn root_type_is_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("r.pool");
    let pool = Pool::create(&path, &PoolOptions::new("r", 1 << 16).root::<Root>()).expect("create");
    assert!(matches!(
        pool.root::<OtherRoot>(),
        Err(PoolError::RootMismatch { .. })
    ));
    assert!(matches!(
        pool.root::<u64>(),
        Err(PoolError::RootMismatch { .. })
    ));
    drop(pool);
    let path2 = dir.path().join("noroot.pool");
    let pool = Pool::create(&path2, &PoolOptions::new("r", 1 << 16)).expect("create");
    let e = pool.root::<Root>().expect_err("no root");
    assert!(e.to_string().contains("root mismatch"), "{e}");
}

#[test]
fn pointer_checks() {
    let pool = Pool::anonymous(&PoolOptions::new("p", 1 << 16)).expect("anon");
    let heap = pool.heap().start;
    assert!(matches!(
        pool.get(PPtr::<u64>::null()),
        Err(PoolError::Null)
    ));
    assert!(matches!(
        pool.get(PPtr::<u64>::from_offset(heap + 4)),
        Err(PoolError::Misaligned { align: 8, .. })
    ));
    assert!(matches!(
        pool.get(PPtr::<u64>::from_offset(pool.len() - 4)),
        Err(PoolError::OutOfBounds { .. })
    ));
    assert!(matches!(
        pool.get(PPtr::<u64>::from_offset(u64::MAX - 3)),
        Err(PoolError::OutOfBounds { .. })
    ));
    assert!(matches!(
        pool.bytes(pool.len(), 1),
        Err(PoolError::OutOfBounds { .. })
    ));
    assert!(pool.bytes(pool.len(), 0).is_ok());
    assert!(pool.get(PPtr::<u64>::from_offset(pool.len() - 8)).is_ok());
    assert!(matches!(
        pool.persist(pool.len() - 1, 2),
        Err(PoolError::OutOfBounds { .. })
    ));
}

#[test]
fn read_only_pools_refuse_writes_and_share_the_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ro.pool");
    Pool::create(&path, &PoolOptions::new("ro", 1 << 16).root::<Root>())
        .expect("create")
        .close()
        .expect("close");
    let before = std::fs::read(&path).expect("read");
    let ro = OpenOptions::new().read_only(true);
    let mut a = Pool::open_with(&path, &ro).expect("ro open");
    let b = Pool::open_with(&path, &ro).expect("second ro open shares the lock");
    assert!(a.is_read_only());
    let root = a.root::<Root>().expect("root");
    assert!(matches!(a.get_mut(root), Err(PoolError::ReadOnly)));
    assert!(matches!(
        a.write_bytes(4096, &[1]),
        Err(PoolError::ReadOnly)
    ));
    assert!(matches!(a.bytes_mut(4096, 1), Err(PoolError::ReadOnly)));
    assert!(matches!(
        Pool::open(&path, "ro"),
        Err(PoolError::Locked { .. })
    ));
    drop((a, b));
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

#[test]
fn second_open_in_this_process_is_locked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("l.pool");
    let pool = Pool::create(&path, &PoolOptions::new("l", 1 << 16)).expect("create");
    let e = Pool::open(&path, "l").expect_err("locked");
    assert!(matches!(e, PoolError::Locked { .. }), "{e}");
    assert!(e.to_string().contains("locked"));
    let e = Pool::open_with(&path, &OpenOptions::new().read_only(true)).expect_err("locked");
    assert!(matches!(e, PoolError::Locked { .. }), "{e}");
    drop(pool);
    Pool::open(&path, "l").expect("lock released on drop");
}

/// The child half of `second_open_in_another_process_is_locked`: when the variable is
/// set, try to open the pool and report through the exit code.
#[test]
fn lock_child_probe() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    match Pool::open(&path, "l") {
        Err(PoolError::Locked { .. }) => std::process::exit(3),
        Ok(_) => std::process::exit(0),
        Err(_) => std::process::exit(4),
    }
}

#[test]
fn second_open_in_another_process_is_locked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("l.pool");
    let pool = Pool::create(&path, &PoolOptions::new("l", 1 << 16)).expect("create");
    let run_child = || {
        Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "lock_child_probe"])
            .env(CHILD_ENV, &path)
            // The child's own test-harness summary must not mix into ours.
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("spawn child")
            .code()
    };
    assert_eq!(run_child(), Some(3), "child must see the pool locked");
    drop(pool);
    assert_eq!(run_child(), Some(0), "child opens once we closed");
}

#[test]
fn modes_are_reported_honestly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.pool");
    let pool = Pool::create(&path, &PoolOptions::new("m", 1 << 16)).expect("create");
    // A temp dir is not a DAX file system here: page cache, msync, durable — unless
    // the environment forces DAX, in which case the pool must say it is not durable.
    match pool.mode_source() {
        ModeSource::PageCache => {
            assert_eq!(pool.mode(), DurabilityMode::Msync);
            assert!(pool.is_durable());
        }
        ModeSource::Forced => assert!(!pool.is_durable()),
        ModeSource::MapSync => assert!(pool.is_durable()),
        other => panic!("unexpected mode source {other:?}"),
    }
    drop(pool);
    let forced =
        Pool::open_with(&path, &OpenOptions::new().mode(ModeRequest::ForceDax)).expect("open");
    assert_eq!(forced.mode(), DurabilityMode::Dax);
    if forced.mode_source() == ModeSource::Forced {
        assert!(!forced.is_durable(), "forced DAX must not claim durability");
        assert!(forced.info().mode_source.describe().contains("NOT durable"));
    }
    drop(forced);
    let v = Pool::open_with(&path, &OpenOptions::new().mode(ModeRequest::Volatile)).expect("open");
    assert_eq!(v.mode(), DurabilityMode::Volatile);
    assert!(!v.is_durable());
    let anon = Pool::anonymous(&PoolOptions::new("m", 1 << 16)).expect("anon");
    assert_eq!(anon.mode_source(), ModeSource::Anonymous);
    assert!(!anon.is_durable());
}

#[test]
fn msync_mode_persist_reaches_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.pool");
    let mut pool = Pool::create(
        &path,
        &PoolOptions::new("s", 1 << 16).mode(ModeRequest::Auto),
    )
    .expect("create");
    if pool.mode() != DurabilityMode::Msync {
        return; // forced by the environment; covered elsewhere
    }
    let off = pool.heap().start + 100;
    pool.write_bytes(off, b"durable bytes").expect("write");
    let (r, d) = pmem_core::Counters::measure(|| pool.persist(off, 13));
    r.expect("persist");
    assert_eq!(d.msyncs, 1, "one page range, one msync");
    assert_eq!(d.lines_flushed, 0, "msync mode flushes no cache lines");
    // An independent read of the file (not the mapping) sees the bytes.
    let bytes = std::fs::read(&path).expect("read file");
    assert_eq!(&bytes[off as usize..off as usize + 13], b"durable bytes");
    // A drain with nothing pending does no msync.
    let (r, d) = pmem_core::Counters::measure(|| pool.drain());
    r.expect("drain");
    assert_eq!(d.msyncs, 0);
}

/// In msync mode copies go to the file by `pwrite` (no write faults, no TLB
/// shootdowns when `msync` write-protects the pages): the mapping reads them at
/// once, raw stores through the mapping mix with them, and a persist makes both
/// durable. Other modes store through the mapping.
#[test]
fn msync_mode_copies_by_pwrite_and_the_mapping_sees_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p.pool");
    let mut pool = Pool::create(&path, &PoolOptions::new("p", 1 << 16)).expect("create");
    if pool.mode() != DurabilityMode::Msync {
        return; // forced by the environment; covered elsewhere
    }
    assert!(pool.copies_by_pwrite());
    let off = pool.heap().start + 4000; // across an OS page boundary
    let bytes: Vec<u8> = (0..200u8).collect();
    let (r, d) = pmem_core::Counters::measure(|| pool.write_bytes(off, &bytes));
    r.expect("write");
    assert_eq!(d.bytes_written, 200, "copies are counted");
    assert_eq!(
        pool.bytes(off, 200).expect("read"),
        &bytes[..],
        "one page cache"
    );
    // A raw store through the mapping next to the copied bytes.
    pool.bytes_mut(off + 200, 4)
        .expect("raw")
        .copy_from_slice(b"raw!");
    pool.write(PPtr::<u64>::from_offset(off + 208), &0x0123_4567_89ab_cdef)
        .expect("typed write");
    let (r, d) = pmem_core::Counters::measure(|| pool.persist(off, 216));
    r.expect("persist");
    assert_eq!(d.msyncs, 1);
    drop(pool);
    let file = std::fs::read(&path).expect("read file");
    let at = off as usize;
    assert_eq!(&file[at..at + 200], &bytes[..]);
    assert_eq!(&file[at + 200..at + 204], b"raw!");
    assert_eq!(
        u64::from_le_bytes(file[at + 208..at + 216].try_into().expect("8 bytes")),
        0x0123_4567_89ab_cdef
    );
    // Forced DAX, volatile and anonymous pools store through the mapping.
    let forced =
        Pool::open_with(&path, &OpenOptions::new().mode(ModeRequest::ForceDax)).expect("open");
    assert!(!forced.copies_by_pwrite());
    drop(forced);
    let v = Pool::open_with(&path, &OpenOptions::new().mode(ModeRequest::Volatile)).expect("open");
    assert!(!v.copies_by_pwrite());
    let anon = Pool::anonymous(&PoolOptions::new("p", 1 << 16)).expect("anon");
    assert!(!anon.copies_by_pwrite());
}
