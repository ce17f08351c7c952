//! Device-DAX recognition reads sysfs under `PMKIT_SYSFS_ROOT` like the rest of the
//! platform checks: a fake tree that calls `/dev/null`'s device number a DAX
//! device makes the open read that tree's size attribute (and name it when it is
//! unreadable), and without the fake tree `/dev/null` is refused as a plain
//! character device.
//!
//! One test function: the sysfs root is a process-wide environment variable.

use std::os::unix::fs::{symlink, MetadataExt};
use std::path::Path;

use pmem_core::platform::SYSFS_ROOT_ENV;
use pmem_core::{OpenOptions, Pool, PoolError};

fn open_dev_null() -> PoolError {
    Pool::open_with("/dev/null", &OpenOptions::new().read_only(true)).expect_err("refused")
}

#[test]
fn device_dax_recognition_follows_the_sysfs_root() {
    // The real /sys (or none): /dev/null is a character device, not device DAX.
    std::env::remove_var(SYSFS_ROOT_ENV);
    let e = open_dev_null();
    assert!(
        matches!(e, PoolError::UnsupportedFileType { .. }),
        "real sysfs: {e}"
    );

    // A fake tree in which /dev/null's device number belongs to the dax subsystem
    // and its size attribute is not a number.
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("sys");
    let rdev = std::fs::metadata("/dev/null")
        .expect("stat /dev/null")
        .rdev();
    let node = format!("{}:{}", libc::major(rdev), libc::minor(rdev));
    let dev = root.join("dev/char").join(&node);
    std::fs::create_dir_all(&dev).expect("mkdir");
    std::fs::create_dir_all(root.join("bus/dax")).expect("mkdir");
    symlink(Path::new("../../../bus/dax"), dev.join("subsystem")).expect("symlink");
    std::fs::write(dev.join("size"), "not a size\n").expect("write size");
    std::env::set_var(SYSFS_ROOT_ENV, &root);

    let e = open_dev_null();
    let text = e.to_string();
    assert!(
        text.contains(&dev.join("size").display().to_string()),
        "the fake tree's size attribute is read and named: {text}"
    );
    std::env::remove_var(SYSFS_ROOT_ENV);
}
