//! Detection over fake sysfs trees built in a tempdir, shaped like the real ones
//! (symlinks from `dev/block/MAJ:MIN` and `bus/nd/devices` into `devices/...`).

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::extents::Extent;
use super::sysfs::DeviceKind;
use super::*;

const REGION: &str = "devices/platform/e820_pmem/ndbus0/region0";

/// A fake sysfs tree at `<tmp>/sys` and a pool file at `<tmp>/pool` whose real
/// device number is linked to a pmem block device of region0.
struct Fake {
    _dir: tempfile::TempDir,
    root: PathBuf,
    pool: PathBuf,
}

impl Fake {
    fn new() -> Fake {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("sys");
        let pool = dir.path().join("pool");
        std::fs::write(&pool, vec![0u8; 16384]).expect("pool file");
        let f = Fake {
            _dir: dir,
            root,
            pool,
        };
        f.write(
            &format!("{REGION}/persistence_domain"),
            "memory_controller\n",
        );
        f.write(&format!("{REGION}/mapping0"), "nmem0,0,4294967296,0\n");
        f.write(&format!("{REGION}/mapping1"), "nmem1,0,4294967296,1\n");
        f.write(&format!("{REGION}/resource"), "0x100000000\n");
        f.write(&format!("{REGION}/namespace0.0/block/pmem0/badblocks"), "");
        for (i, n) in [(0, 3), (1, 4)] {
            let dimm = format!("devices/platform/e820_pmem/ndbus0/nmem{i}");
            f.write(&format!("{dimm}/nfit/dirty_shutdown"), &format!("{n}\n"));
            f.write(
                &format!("{dimm}/nfit/id"),
                &format!("8089-a2-1837-0000{i}\n"),
            );
            f.link(
                &format!("bus/nd/devices/nmem{i}"),
                &format!("../../../{dimm}"),
            );
        }
        let node = f.node();
        f.link(
            &format!("dev/block/{node}"),
            &format!("../../{REGION}/namespace0.0/block/pmem0"),
        );
        f
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    fn remove(&self, rel: &str) {
        std::fs::remove_file(self.root.join(rel)).expect("remove");
    }

    fn link(&self, rel: &str, target: &str) {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        symlink(target, p).expect("symlink");
    }

    fn node(&self) -> DeviceNode {
        let meta = std::fs::metadata(&self.pool).expect("stat");
        DeviceNode::of(&meta).expect("regular file")
    }

    fn detect_with(&self, extents: &dyn ExtentSource) -> Platform {
        let meta = std::fs::metadata(&self.pool).expect("stat");
        Platform::detect_in(&self.root, &meta, extents, 16384)
    }

    fn detect(&self) -> Platform {
        self.detect_with(&Vec::<Extent>::new())
    }

    fn region(&self, rel: &str) -> PathBuf {
        std::fs::canonicalize(self.root.join(REGION))
            .expect("region")
            .join(rel)
    }
}

fn malformed_path<T: std::fmt::Debug>(probe: &Probe<T>) -> PathBuf {
    match probe {
        Err(PlatformError::Malformed { path, .. }) => path.clone(),
        other => panic!("expected a Malformed error, got {other:?}"),
    }
}

#[test]
fn adr_region_reports_memory_controller_and_where_from() {
    let f = Fake::new();
    let p = f.detect();
    assert_eq!(
        p.domain,
        Ok(Detected::found(
            PersistenceDomain::MemoryController,
            f.region("persistence_domain")
        ))
    );
    let loc = p.device.expect("located");
    assert_eq!(
        loc.value().map(|l| l.region_dir.clone()),
        Some(f.region(""))
    );
}

#[test]
fn eadr_region_reports_cpu_cache() {
    let f = Fake::new();
    f.write(&format!("{REGION}/persistence_domain"), "cpu_cache\n");
    assert_eq!(
        f.detect().domain.ok().and_then(|d| d.value().copied()),
        Some(PersistenceDomain::CpuCache)
    );
}

#[test]
fn empty_or_missing_domain_is_unknown() {
    let f = Fake::new();
    f.write(&format!("{REGION}/persistence_domain"), "\n");
    assert!(matches!(f.detect().domain, Ok(Detected::Unknown { .. })));
    f.remove(&format!("{REGION}/persistence_domain"));
    assert!(matches!(f.detect().domain, Ok(Detected::Unknown { .. })));
}

#[test]
fn shutdown_count_sums_dimms_and_sees_a_moved_count() {
    let f = Fake::new();
    let before = f.detect().shutdown.expect("read");
    let state = before.value().expect("found");
    assert_eq!(state.count, 7);
    assert_eq!(state.identity, "8089-a2-1837-00000+8089-a2-1837-00001");
    assert_eq!(state.dimms.len(), 2);
    f.write(
        "devices/platform/e820_pmem/ndbus0/nmem1/nfit/dirty_shutdown",
        "5\n",
    );
    let after = f.detect().shutdown.expect("read");
    assert_eq!(after.value().map(|s| s.count), Some(8));
    assert_eq!(after.value().map(|s| &s.identity), Some(&state.identity));
}

#[test]
fn no_counter_in_sysfs_is_unknown_and_says_so() {
    let f = Fake::new();
    f.remove("devices/platform/e820_pmem/ndbus0/nmem0/nfit/dirty_shutdown");
    match f.detect().shutdown {
        Ok(Detected::Unknown { reason }) => assert!(reason.contains("no counter"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_blocks_inside_the_pool_are_listed_outside_ignored() {
    let f = Fake::new();
    // The file's 16 KiB lie at device offset 1 MiB.
    let ext = vec![Extent {
        logical: 0,
        physical: 1 << 20,
        length: 16384,
    }];
    // Sector 2048 = 1 MiB (file offset 0), one sector; sector 10 is elsewhere.
    f.write(
        &format!("{REGION}/namespace0.0/block/pmem0/badblocks"),
        "10 4\n2056 2\n",
    );
    let p = f.detect_with(&ext);
    let bb = p.bad_blocks.clone().expect("read");
    let v = bb.value().expect("found");
    assert_eq!(
        v.in_pool,
        vec![BadRange {
            offset: 8 * 512,
            len: 1024
        }]
    );
    assert_eq!(v.on_device, 2);
    assert_eq!(p.bad_ranges().len(), 1);
    // Only outside ranges: none in the pool.
    f.write(
        &format!("{REGION}/namespace0.0/block/pmem0/badblocks"),
        "10 4\n",
    );
    let p = f.detect_with(&ext);
    assert_eq!(p.bad_ranges(), &[]);
    assert!(matches!(p.bad_blocks, Ok(Detected::Found { .. })));
}

#[test]
fn partition_bad_blocks_shift_by_its_start() {
    let f = Fake::new();
    let node = f.node();
    std::fs::remove_file(f.root.join(format!("dev/block/{node}"))).expect("unlink");
    let part = format!("{REGION}/namespace0.0/block/pmem0/pmem0p1");
    f.write(&format!("{part}/partition"), "1\n");
    f.write(&format!("{part}/start"), "2048\n");
    f.write(
        &format!("{REGION}/namespace0.0/block/pmem0/badblocks"),
        "2050 1\n",
    );
    f.link(&format!("dev/block/{node}"), &format!("../../{part}"));
    let ext = vec![Extent {
        logical: 0,
        physical: 0,
        length: 16384,
    }];
    assert_eq!(
        f.detect_with(&ext).bad_ranges(),
        &[BadRange {
            offset: 1024,
            len: 512
        }]
    );
}

#[test]
fn missing_sysfs_gives_unknown_everywhere() {
    let f = Fake::new();
    let meta = std::fs::metadata(&f.pool).expect("stat");
    let p = Platform::detect_in(
        Path::new("/nonexistent/sysfs"),
        &meta,
        &Vec::<Extent>::new(),
        16384,
    );
    assert!(matches!(p.domain, Ok(Detected::Unknown { .. })), "{p:?}");
    assert!(matches!(p.shutdown, Ok(Detected::Unknown { .. })), "{p:?}");
    assert!(
        matches!(p.bad_blocks, Ok(Detected::Unknown { .. })),
        "{p:?}"
    );
}

#[test]
fn a_device_outside_any_region_is_not_on_an_nd_region() {
    let f = Fake::new();
    let node = f.node();
    std::fs::remove_file(f.root.join(format!("dev/block/{node}"))).expect("unlink");
    f.write("devices/pci0000:00/virtio1/block/vda/vda1/partition", "1\n");
    f.link(
        &format!("dev/block/{node}"),
        "../../devices/pci0000:00/virtio1/block/vda/vda1",
    );
    match f.detect().domain {
        Ok(Detected::Unknown { reason }) => {
            assert!(reason.contains("not on an nd region"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

/// Picks an item's error path out of a detection.
type Pick = fn(&Platform) -> PathBuf;

#[test]
fn malformed_files_are_errors_naming_the_file() {
    let cases: [(&str, &str, Pick); 4] = [
        ("persistence_domain", "cpu_cache_maybe\n", |p| {
            malformed_path(&p.domain)
        }),
        ("mapping1", "nmem1;0;0;0\n", |p| malformed_path(&p.shutdown)),
        ("namespace0.0/block/pmem0/badblocks", "12\n", |p| {
            malformed_path(&p.bad_blocks)
        }),
        ("mapping0", "disk0,0,1,0\n", |p| malformed_path(&p.shutdown)),
    ];
    for (rel, text, probe) in cases {
        let f = Fake::new();
        f.write(&format!("{REGION}/{rel}"), text);
        assert_eq!(probe(&f.detect()), f.region(rel), "{rel}");
    }
    let f = Fake::new();
    let count = "devices/platform/e820_pmem/ndbus0/nmem0/nfit/dirty_shutdown";
    f.write(count, "many\n");
    let got = malformed_path(&f.detect().shutdown);
    assert_eq!(got.file_name(), Some("dirty_shutdown".as_ref()));
    assert!(got.to_string_lossy().contains("nmem0"));
}

#[test]
fn devdax_geometry_from_sysfs() {
    let f = Fake::new();
    let node = DeviceNode {
        kind: DeviceKind::Char,
        major: 251,
        minor: 3,
    };
    let dax = format!("{REGION}/dax0.0/dax/dax0.0");
    f.write(&format!("{dax}/size"), "4294967296\n");
    f.write(&format!("{REGION}/dax0.0/align"), "2097152\n");
    f.link("dev/char/251:3", &format!("../../{dax}"));
    f.link(&format!("{dax}/device"), "../..");
    assert_eq!(
        devdax::read_devdax(&f.root, node)
            .ok()
            .and_then(|d| d.value().copied()),
        Some(DevDaxGeometry {
            size: 4 << 30,
            align: 2 << 20
        })
    );
    f.write(&format!("{REGION}/dax0.0/align"), "3000\n");
    assert_eq!(
        malformed_path(&devdax::read_devdax(&f.root, node)),
        f.root.join("dev/char/251:3/device/align")
    );
    // Device DAX bad blocks: the region's list, shifted by the device's place.
    f.write(&format!("{REGION}/dax0.0/align"), "4096\n");
    f.write(&format!("{dax}/resource"), "0x100200000\n");
    f.write(&format!("{REGION}/badblocks"), "4096 1\n8192 1\n");
    let loc = sysfs::locate(&f.root, node).expect("locate");
    let loc = loc.value().expect("in region0");
    let got = pool_bad_blocks(loc, &extents::Identity, 2 << 20).expect("read");
    // Sector 4096 = region offset 2 MiB = device offset 0; sector 8192 = device
    // offset 2 MiB, just past a 2 MiB pool.
    assert_eq!(
        got.value().map(|b| b.in_pool.clone()),
        Some(vec![BadRange {
            offset: 0,
            len: 512
        }])
    );
}

#[test]
fn fiemap_of_a_real_file_covers_it_or_says_unknown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f");
    std::fs::write(&path, vec![7u8; 65536]).expect("write");
    let file = std::fs::File::open(&path).expect("open");
    let got = extents::Fiemap::new(&file, &path)
        .extents(65536)
        .expect("fiemap");
    if let Some(ext) = got {
        let covered: u64 = ext.iter().map(|e| e.length).sum();
        assert!(covered >= 65536, "{ext:?}");
    }
}

#[test]
fn this_machine_detects_without_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f");
    std::fs::write(&path, vec![0u8; 4096]).expect("write");
    let file = std::fs::File::open(&path).expect("open");
    let p = Platform::detect(&file, &path, 4096);
    assert!(
        p.domain.is_ok() && p.shutdown.is_ok() && p.bad_blocks.is_ok(),
        "{p:?}"
    );
}
