//! The `pmkit` command-line tool, run as a subprocess.
//!
//! The happy path (create → info → check), and for every kind of bad file: a
//! non-zero exit, exactly one line on stderr, no panic, and the file unchanged.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pmem_core::Pool;

fn pmkit(args: &[&str]) -> Output {
    pmkit_env(args, &[])
}

/// Runs pmkit with `env` set (and the mode and domain overrides otherwise unset).
fn pmkit_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pmkit"));
    cmd.args(args)
        .env_remove("PMKIT_FORCE_DAX")
        .env_remove("PMKIT_PERSISTENCE_DOMAIN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run the pmkit binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temporary path")
}

/// Asserts a clean failure: exit code 1, no stdout, one line on stderr mentioning
/// `expect`, and nothing that looks like a panic.
fn assert_fails(out: &Output, expect: &str) {
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout {stdout:?}, stderr {stderr:?}"
    );
    assert!(stdout.is_empty(), "stdout {stdout:?}");
    assert_eq!(stderr.lines().count(), 1, "stderr {stderr:?}");
    assert!(stderr.starts_with("pmkit: "), "stderr {stderr:?}");
    assert!(stderr.contains(expect), "expected {expect:?} in {stderr:?}");
    for bad in ["panicked", "RUST_BACKTRACE", "backtrace", "internal error"] {
        assert!(!stderr.contains(bad), "stderr {stderr:?}");
    }
}

/// Creates a valid 1 MiB pool with the CLI and returns its path.
fn make_pool(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let out = pmkit(&[
        "pool",
        "create",
        path_str(&path),
        "--size",
        "1M",
        "--layout",
        "demo",
    ]);
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    path
}

#[test]
fn create_info_check() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = make_pool(dir.path(), "a.pool");
    let file = path_str(&path);
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 1 << 20);

    let info = pmkit(&["pool", "info", file]);
    let stdout = text(&info.stdout);
    assert!(info.status.success(), "info: {}", text(&info.stderr));
    for want in [
        "\"demo\"",
        "1048576 bytes (1 MiB)",
        "msync",
        "page allocator",
        "0 of 254 pages",
        "uuid",
        "flush",
        "domain       memory_controller (not detected: assumed memory controller (safe))",
    ] {
        assert!(
            stdout.contains(want),
            "{want:?} missing from info:\n{stdout}"
        );
    }

    let json = pmkit(&["pool", "info", "--json", file]);
    assert!(json.status.success(), "info --json: {}", text(&json.stderr));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON output");
    assert_eq!(v["layout"], "demo");
    assert_eq!(v["pool_size"], 1 << 20);
    assert_eq!(v["heap_offset"], 4096);
    assert_eq!(v["mode"], "msync");
    assert_eq!(v["durable"], true);
    assert_eq!(v["persistence_domain"], "memory_controller");
    assert_eq!(v["domain_source"], "default");
    assert_eq!(v["domain_effective"], false);
    assert_eq!(v["usage"]["kind"], "page_allocator");
    assert_eq!(v["usage"]["pages_used"], 0);

    let check = pmkit(&["pool", "check", file]);
    let stdout = text(&check.stdout);
    assert!(check.status.success(), "check: {}", text(&check.stderr));
    // A line per platform check (skipped here: no persistent memory), then the verdict.
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    let verdict = stdout.lines().last().unwrap_or_default();
    for want in [": ok", "\"demo\"", "1 MiB", "mode msync", "pages"] {
        assert!(
            verdict.contains(want),
            "{want:?} missing from check: {stdout}"
        );
    }
    assert!(text(&check.stderr).is_empty());
}

/// `PMKIT_PERSISTENCE_DOMAIN` shows in `info`: on an msync pool a `cpu_cache`
/// override is recorded and said to have no effect; an invalid value is a clean
/// failure naming the variable.
#[test]
fn info_shows_the_persistence_domain_override() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = make_pool(dir.path(), "eadr.pool");
    let file = path_str(&path);
    let eadr = [("PMKIT_PERSISTENCE_DOMAIN", "cpu_cache")];
    let json = pmkit_env(&["pool", "info", "--json", file], &eadr);
    assert!(json.status.success(), "info --json: {}", text(&json.stderr));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON output");
    assert_eq!(v["mode"], "msync");
    assert_eq!(v["persistence_domain"], "cpu_cache");
    assert_eq!(v["domain_source"], "override");
    assert_eq!(v["domain_effective"], false);
    assert_eq!(v["durable"], true);
    let info = pmkit_env(&["pool", "info", file], &eadr);
    let stdout = text(&info.stdout);
    assert!(
        stdout.contains("cpu_cache (forced by PMKIT_PERSISTENCE_DOMAIN); no effect in this mode"),
        "{stdout}"
    );
    let bad = pmkit_env(
        &["pool", "info", file],
        &[("PMKIT_PERSISTENCE_DOMAIN", "eadr")],
    );
    assert_fails(&bad, "PMKIT_PERSISTENCE_DOMAIN=\"eadr\" is invalid");
}

#[test]
fn info_and_check_of_an_unformatted_minimal_pool() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("small");
    let file = path_str(&path);
    let out = pmkit(&["pool", "create", file, "-s", "8KiB", "-l", "x"]);
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("unformatted"));
    let info = pmkit(&["pool", "info", file]);
    assert!(text(&info.stdout).contains("heap not formatted by a known allocator"));
    assert!(pmkit(&["pool", "check", file]).status.success());
}

#[test]
fn info_of_a_pool_open_elsewhere_says_locked() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = make_pool(dir.path(), "busy");
    let pool = Pool::open(&path, "demo").expect("open read-write in the test");
    assert_fails(&pmkit(&["pool", "info", path_str(&path)]), "locked");
    assert_fails(&pmkit(&["pool", "check", path_str(&path)]), "locked");
    drop(pool);
    // The lock is an flock on the pool's open file description. A child that
    // another test thread is spawning right now may hold a copy of our descriptor
    // until its exec closes it (close-on-exec), so the lock can outlive `drop` by
    // a moment: retry briefly.
    let released = (0..100).any(|_| {
        let ok = pmkit(&["pool", "check", path_str(&path)]).status.success();
        if !ok {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        ok
    });
    assert!(
        released,
        "the lock was not released after the pool was dropped"
    );
}

/// Writes `bytes` as `name`, runs info and check on it, and checks each fails
/// cleanly with `expect` in its message and leaves the file as it was.
fn assert_bad_file(dir: &Path, name: &str, bytes: &[u8], expect: &str) {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write the bad file");
    for cmd in ["info", "check"] {
        let out = pmkit(&["pool", cmd, path_str(&path)]);
        assert_fails(&out, expect);
        let stderr = text(&out.stderr);
        assert!(stderr.contains(path_str(&path)), "{cmd} {name}: {stderr}");
        assert_eq!(
            std::fs::read(&path).expect("read back"),
            bytes,
            "{cmd} changed {name}"
        );
    }
}

#[test]
fn bad_files_fail_cleanly_and_stay_unchanged() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let good_path = make_pool(dir.path(), "good");
    let good = std::fs::read(&good_path).expect("read the pool");

    assert_bad_file(dir.path(), "empty", &[], "empty");
    assert_bad_file(
        dir.path(),
        "truncated",
        &good[..good.len() / 2],
        "truncated",
    );
    assert_bad_file(dir.path(), "short-header", &good[..100], "truncated");
    assert_bad_file(
        dir.path(),
        "text",
        b"this is not a pool, just some text\n",
        "not a pmkit pool",
    );
    let mut bad_sum = good.clone();
    bad_sum[50] ^= 0x20;
    assert_bad_file(dir.path(), "checksum", &bad_sum, "checksum");
    let mut v1 = good.clone();
    v1[8] = 1;
    assert_bad_file(
        dir.path(),
        "version",
        &v1,
        "unsupported pool format version 1",
    );
    let mut longer = good.clone();
    longer.extend_from_slice(&[0; 4096]);
    assert_bad_file(dir.path(), "longer", &longer, "corrupt");

    // A sound header over a page allocator whose bitmap marks a page past its end
    // (heap at 4096; two bits a page, so the bitmap's last word follows the
    // 128-byte allocator header and the 7 full words of 254 pages; its top bit is
    // past the end): info reports it, check fails.
    let mut bad_bitmap = good.clone();
    bad_bitmap[4096 + 128 + 7 * 8 + 7] |= 0x80;
    let path = dir.path().join("bitmap");
    std::fs::write(&path, &bad_bitmap).expect("write");
    let info = pmkit(&["pool", "info", path_str(&path)]);
    assert!(info.status.success());
    assert!(
        text(&info.stdout).contains("corrupt"),
        "{}",
        text(&info.stdout)
    );
    assert_fails(
        &pmkit(&["pool", "check", path_str(&path)]),
        "page allocator",
    );
    assert_eq!(std::fs::read(&path).expect("read back"), bad_bitmap);
}

#[test]
fn missing_files_and_directories() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let missing = dir.path().join("nope");
    for cmd in ["info", "check"] {
        assert_fails(
            &pmkit(&["pool", cmd, path_str(&missing)]),
            "No such file or directory",
        );
        assert_fails(&pmkit(&["pool", cmd, path_str(dir.path())]), "directory");
    }
    assert!(!missing.exists());
}

#[test]
fn create_rejects_bad_sizes_and_layouts_without_creating_files() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("p");
    let file = path_str(&path);
    for (size, expect) in [
        ("10X", "unknown unit"),
        ("10MB", "unknown unit"),
        ("abc", "expected a number"),
        ("0", "more than zero"),
        ("5000", "multiple of 4096"),
        ("100000000000000000000000", "too large"),
        ("4K", "too small"),
    ] {
        let out = pmkit(&["pool", "create", file, "--size", size, "--layout", "l"]);
        assert_fails(&out, expect);
        assert!(!path.exists(), "size {size:?} left a file behind");
    }
    let long = "x".repeat(64);
    for layout in ["", long.as_str()] {
        let out = pmkit(&["pool", "create", file, "--size", "1M", "--layout", layout]);
        assert_fails(&out, "invalid layout name");
        assert!(!path.exists());
    }
}

#[test]
fn create_never_clobbers_an_existing_file() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("precious");
    let contents = b"do not overwrite me\n";
    std::fs::write(&path, contents).expect("write");
    let out = pmkit(&[
        "pool",
        "create",
        path_str(&path),
        "--size",
        "1M",
        "--layout",
        "x",
    ]);
    assert_fails(&out, "already exists");
    assert_eq!(std::fs::read(&path).expect("read back"), contents);

    let pool = make_pool(dir.path(), "pool");
    let before = std::fs::read(&pool).expect("read");
    let out = pmkit(&[
        "pool",
        "create",
        path_str(&pool),
        "--size",
        "2M",
        "--layout",
        "y",
    ]);
    assert_fails(&out, "already exists");
    assert_eq!(std::fs::read(&pool).expect("read back"), before);
}

#[test]
fn usage_errors_are_claps() {
    let out = pmkit(&["pool", "create", "x"]);
    assert_eq!(out.status.code(), Some(2));
    let out = pmkit(&["pool", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    let out = pmkit(&["--help"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("pool"));
}

/// crc32c (Castagnoli), bitwise: enough to forge a checksummed test input.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0x82F6_3B78 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// A page-allocator header that checksums correctly but records a page size of 0
/// (found by the `open_pool_resealed` fuzz target): `info` reports the allocator as
/// corrupt and exits 0 (the pool itself is fine), `check` fails with one line and
/// exit code 1, and neither panics nor writes.
#[test]
fn forged_allocator_metadata_fails_in_one_line() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("forged");
    let file = path_str(&path);
    let out = pmkit(&["pool", "create", file, "-s", "8K", "-l", "x"]);
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    let mut bytes = std::fs::read(&path).expect("read");
    let mut meta = Vec::with_capacity(64);
    meta.extend_from_slice(b"PMKPAGE1");
    for field in [0u64, 0, 4096, 4096, 0, 0] {
        // page size, page count, region offset, region length, first page, reserved
        meta.extend_from_slice(&field.to_le_bytes());
    }
    meta.extend_from_slice(&u64::from(crc32c(&meta)).to_le_bytes());
    bytes[4096..4096 + 64].copy_from_slice(&meta);
    std::fs::write(&path, &bytes).expect("write");
    let out = pmkit(&["pool", "info", file]);
    assert_eq!(out.status.code(), Some(0), "info: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("corrupt"),
        "info: {}",
        text(&out.stdout)
    );
    assert_eq!(std::fs::read(&path).expect("read back"), bytes);
    let out = pmkit(&["pool", "check", file]);
    assert_fails(&out, "page allocator");
    assert_eq!(std::fs::read(&path).expect("read back"), bytes);
}

/// `pmkit pool grow` on a raft-nvm list store that filled up: afterwards every
/// record is still there and the new pages take more; a pool of another layout, a
/// size that is not larger, and a store that is open are refused in one line, with
/// the file unchanged and no `.grow` copy left behind.
#[test]
fn grow_a_full_list_store_and_refuse_what_cannot_be_grown() {
    use raft_nvm::{ListOptions, ListStore, Op, Store, StoreError};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("node.pool");
    let opts = ListOptions {
        page_size: 512,
        ..ListOptions::default()
    };
    let store = ListStore::create(&path, 256 * 1024, &opts).expect("create");
    let value = [7u8; 100];
    let mut last = 0u64;
    loop {
        let key = format!("k{last}");
        let op = Op::Put {
            key: key.as_bytes(),
            value: &value,
        };
        match store.append(last + 1, 1, op) {
            Ok(()) => last += 1,
            Err(StoreError::Full { .. }) => break,
            Err(e) => panic!("append: {e}"),
        }
    }
    assert!(last > 100, "{last} records filled the pool");

    // Open: refused (the pool is locked), nothing changed.
    store.sync().expect("sync");
    let before = std::fs::read(&path).expect("read");
    let out = pmkit(&["pool", "grow", path_str(&path), "--size", "1M"]);
    assert_fails(&out, "locked");
    store.close().expect("close");
    let closed = std::fs::read(&path).expect("read");
    assert_eq!(closed.len(), before.len());

    // Not larger: refused, unchanged.
    let out = pmkit(&["pool", "grow", path_str(&path), "--size", "128K"]);
    assert_fails(&out, "larger");
    assert_eq!(std::fs::read(&path).expect("read"), closed);

    let out = pmkit(&["pool", "grow", path_str(&path), "--size", "1M"]);
    assert!(out.status.success(), "grow: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("grown "),
        "{}",
        text(&out.stdout)
    );
    assert!(!pmem_core::grow_path(&path).exists(), "no copy left behind");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 1 << 20);

    let store = ListStore::open(&path, &opts).expect("reopen the grown store");
    assert_eq!(store.last_index(), last);
    for i in (0..last).step_by(37) {
        assert_eq!(
            store
                .get(format!("k{i}").as_bytes(), u64::MAX)
                .expect("get"),
            Some(value.to_vec())
        );
    }
    let more = last;
    for i in 0..more {
        let key = format!("m{i}");
        let op = Op::Put {
            key: key.as_bytes(),
            value: &value,
        };
        store
            .append(last + 1, 1, op)
            .expect("the grown pool takes as much again");
        last += 1;
    }
    store.close().expect("close");

    // Another layout: refused, unchanged.
    let other = make_pool(dir.path(), "demo.pool");
    let bytes = std::fs::read(&other).expect("read");
    let out = pmkit(&["pool", "grow", path_str(&other), "--size", "2M"]);
    assert_fails(&out, "only raft-nvm list stores");
    assert_eq!(std::fs::read(&other).expect("read"), bytes);
}

/// A closed raft-nvm list store of 256 KiB at `dir/node.pool`.
fn closed_list_store(dir: &Path) -> PathBuf {
    use raft_nvm::{ListOptions, ListStore};
    let path = dir.join("node.pool");
    ListStore::create(&path, 256 * 1024, &ListOptions::default())
        .expect("create")
        .close()
        .expect("close");
    path
}

/// `pmkit pool grow LINK` grows the pool the link points to and leaves the link a
/// link (it once replaced the link with a grown regular file, the pool it pointed
/// at left as it was).
#[test]
fn grow_through_a_symlink_grows_its_target() {
    use raft_nvm::{ListOptions, ListStore};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = closed_list_store(dir.path());
    let link = dir.path().join("link.pool");
    std::os::unix::fs::symlink("node.pool", &link).expect("symlink");
    let out = pmkit(&["pool", "grow", path_str(&link), "--size", "1M"]);
    assert!(out.status.success(), "grow: {}", text(&out.stderr));
    let meta = std::fs::symlink_metadata(&link).expect("lstat");
    assert!(meta.file_type().is_symlink(), "the link was replaced");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 1 << 20);
    ListStore::open(&path, &ListOptions::default())
        .expect("the target is a grown store")
        .close()
        .expect("close");
    assert!(!pmem_core::grow_path(&path).exists());
    assert!(!pmem_core::grow_path(&link).exists());
}

/// A list store whose control block records a page size of 0 under a correct
/// checksum: `grow` refuses it in one line (it once divided by it and panicked),
/// leaves the file unchanged and no `.grow` copy behind.
#[test]
fn grow_refuses_a_page_size_of_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = closed_list_store(dir.path());
    let root = Pool::open_with(&path, &pmem_core::OpenOptions::new().read_only(true))
        .expect("open")
        .info()
        .root_offset as usize;
    let mut bytes = std::fs::read(&path).expect("read");
    // The control block: magic (8), version (4), page size (4), page count (8),
    // pages offset (8), then the crc32c of those 32 bytes.
    bytes[root + 12..root + 16].copy_from_slice(&0u32.to_le_bytes());
    let crc = u64::from(crc32c(&bytes[root..root + 32]));
    bytes[root + 32..root + 40].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bytes).expect("write");
    let out = pmkit(&["pool", "grow", path_str(&path), "--size", "1M"]);
    assert_fails(&out, "page size");
    assert_eq!(std::fs::read(&path).expect("read back"), bytes);
    assert!(!pmem_core::grow_path(&path).exists(), "a copy left behind");
}

/// A file name holding a newline and a terminal escape sequence is printed
/// escaped: the error stays one line and no escape byte reaches the terminal,
/// and `create`/`info` name the file the same way.
#[test]
fn odd_file_names_are_escaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = dir.path().join("bad\nname\u{1b}[31m.pool");
    let file = path_str(&name);
    let out = pmkit(&["pool", "check", file]);
    assert_fails(&out, "cannot open");
    let stderr = text(&out.stderr);
    assert!(!stderr.contains('\u{1b}'), "stderr {stderr:?}");
    assert!(
        stderr.contains("bad\\nname\\u{1b}[31m.pool"),
        "stderr {stderr:?}"
    );

    let out = pmkit(&["pool", "create", file, "--size", "1M", "--layout", "demo"]);
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    for args in [&["pool", "info", file][..], &["pool", "check", file]] {
        let out = pmkit(args);
        let stdout = text(&out.stdout);
        assert!(!stdout.contains('\u{1b}'), "{args:?}: {stdout:?}");
        assert!(!stdout.contains("bad\nname"), "{args:?}: {stdout:?}");
    }
    let out = pmkit(&["pool", "create", file, "--size", "1M", "--layout", "demo"]);
    assert_fails(&out, "already exists");
    assert!(!text(&out.stderr).contains('\u{1b}'));
}

/// A fake sysfs tree in which `dir`'s device is the pmem block device of an ADR
/// region with one DIMM (unsafe-shutdown count 3); returns the root and the path of
/// the block device's `badblocks` list.
fn fake_sysfs(dir: &Path) -> (PathBuf, PathBuf) {
    use pmem_core::platform::DeviceNode;
    let root = dir.join("sys");
    let region = root.join("devices/ndbus0/region0");
    let write = |p: PathBuf, text: &str| {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    let badblocks = region.join("namespace0.0/block/pmem0/badblocks");
    write(badblocks.clone(), "");
    write(region.join("persistence_domain"), "memory_controller\n");
    write(region.join("mapping0"), "nmem0,0,1073741824,0\n");
    write(root.join("devices/ndbus0/nmem0/nfit/dirty_shutdown"), "3\n");
    write(root.join("devices/ndbus0/nmem0/nfit/id"), "8089-a2-0001\n");
    std::fs::create_dir_all(root.join("bus/nd/devices")).expect("mkdir");
    std::os::unix::fs::symlink(
        "../../../devices/ndbus0/nmem0",
        root.join("bus/nd/devices/nmem0"),
    )
    .expect("symlink");
    let probe = dir.join("probe");
    std::fs::write(&probe, b"x").expect("probe");
    let node = DeviceNode::of(&std::fs::metadata(&probe).expect("stat")).expect("file");
    std::fs::create_dir_all(root.join("dev/block")).expect("mkdir");
    std::os::unix::fs::symlink(
        "../../devices/ndbus0/region0/namespace0.0/block/pmem0",
        root.join(format!("dev/block/{node}")),
    )
    .expect("symlink");
    (root, badblocks)
}

fn pmkit_in(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmkit"))
        .args(args)
        .env_remove("PMKIT_FORCE_DAX")
        .env("PMKIT_SYSFS_ROOT", root)
        .output()
        .expect("run the pmkit binary")
}

#[test]
fn info_and_check_report_the_platform_and_bad_blocks() {
    use pmem_core::platform::{extents::Fiemap, ExtentSource};
    let dir = tempfile::tempdir().expect("temporary directory");
    let (root, badblocks) = fake_sysfs(dir.path());
    let path = dir.path().join("p.pool");
    let file = path_str(&path);
    let out = pmkit_in(&root, &["pool", "create", file, "-s", "1M", "-l", "demo"]);
    assert!(out.status.success(), "create: {}", text(&out.stderr));

    let json = pmkit_in(&root, &["pool", "info", "--json", file]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON output");
    let p = &v["platform"];
    assert_eq!(p["persistence_domain"]["status"], "found");
    assert_eq!(p["persistence_domain"]["value"], "memory_controller");
    assert!(p["persistence_domain"]["from"]
        .as_str()
        .is_some_and(|f| f.ends_with("region0/persistence_domain")));
    assert_eq!(p["unsafe_shutdown"]["value"]["count"], 3);
    assert_eq!(p["bad_blocks"]["value"]["on_device"], 0);
    let info = text(&pmkit_in(&root, &["pool", "info", file]).stdout);
    assert!(info.contains("memory_controller (from "), "{info}");
    assert!(info.contains("unsafe-shutdown count 3"), "{info}");

    let check = pmkit_in(&root, &["pool", "check", file]);
    let stdout = text(&check.stdout);
    assert!(check.status.success(), "{stdout} {}", text(&check.stderr));
    assert!(
        stdout.contains("bad blocks: ok, none in the pool"),
        "{stdout}"
    );
    assert!(
        stdout.contains("unsafe shutdown: ok, closed cleanly (device count now 3)"),
        "{stdout}"
    );

    // Put one bad sector under the pool's byte 65536.
    let f = std::fs::File::open(&path).expect("open");
    let Some(ext) = Fiemap::new(&f, &path).extents(1 << 20).expect("fiemap") else {
        eprintln!("skipped the bad-block half: no FIEMAP on this file system");
        return;
    };
    let e = ext
        .iter()
        .find(|e| e.logical <= 65536 && 65536 < e.logical + e.length)
        .expect("extent of byte 65536");
    let sector = (e.physical + 65536 - e.logical) / 512;
    std::fs::write(&badblocks, format!("{sector} 1\n")).expect("badblocks");
    let check = pmkit_in(&root, &["pool", "check", file]);
    let (stdout, stderr) = (text(&check.stdout), text(&check.stderr));
    assert_eq!(check.status.code(), Some(1), "{stdout} {stderr}");
    assert!(
        stdout.contains("bad blocks inside the pool: 65536..66048 (512 bytes)"),
        "{stdout}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("bad blocks inside the pool"), "{stderr}");
    let info = pmkit_in(&root, &["pool", "info", "--json", file]);
    let v: serde_json::Value = serde_json::from_slice(&info.stdout).expect("JSON output");
    assert_eq!(
        v["platform"]["bad_blocks"]["value"]["in_pool"][0]["offset"],
        65536
    );

    // A malformed list is a problem naming the file.
    std::fs::write(&badblocks, "lots of bad\n").expect("badblocks");
    let check = pmkit_in(&root, &["pool", "check", file]);
    assert_eq!(check.status.code(), Some(1));
    assert!(
        text(&check.stderr).contains("pmem0/badblocks"),
        "{}",
        text(&check.stderr)
    );
}

#[test]
fn create_on_a_character_device_wants_device_dax_and_files_want_a_size() {
    // /dev/null is a character device but not device DAX: refused, left alone.
    let out = pmkit(&["pool", "create", "/dev/null", "--layout", "x"]);
    assert_fails(&out, "not device DAX");
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("nosize");
    let out = pmkit(&["pool", "create", path_str(&path), "--layout", "x"]);
    assert_fails(&out, "--size is required");
    assert!(!path.exists());
}

#[test]
fn upgrade_a_version_2_pool_and_check_an_unsafe_shutdown() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (root, _) = fake_sysfs(dir.path());
    let path = dir.path().join("v2.pool");
    let file = path_str(&path);
    let out = pmkit_in(&root, &["pool", "create", file, "-s", "1M", "-l", "demo"]);
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    // Make it a version-2 pool: old version, resealed, no records.
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c(&bytes[..252]);
    bytes[252..256].copy_from_slice(&crc.to_le_bytes());
    bytes[256..4096].fill(0);
    std::fs::write(&path, &bytes).expect("write");
    let check = pmkit_in(&root, &["pool", "check", file]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    assert!(text(&check.stdout).contains("version-2 pool records no count"));

    let up = pmkit_in(&root, &["pool", "upgrade", file]);
    assert!(up.status.success(), "{}", text(&up.stderr));
    assert!(text(&up.stdout).contains("upgraded from version 2 to 3"));
    let v: serde_json::Value =
        serde_json::from_slice(&pmkit_in(&root, &["pool", "info", "--json", file]).stdout)
            .expect("JSON output");
    assert_eq!(v["version"], 3);
    assert_eq!(v["platform"]["unsafe_shutdown_check"]["status"], "ok");
    let again = pmkit_in(&root, &["pool", "upgrade", file]);
    assert!(text(&again.stdout).contains("already version 3"));

    // Forge the record of a pool that was open (not clean) at count 3 ...
    let mut bytes = std::fs::read(&path).expect("read");
    let seq = [1024usize, 1088]
        .iter()
        .map(|&o| u64::from_le_bytes(bytes[o + 8..o + 16].try_into().expect("8 bytes")))
        .max()
        .unwrap_or(0);
    let mut rec = [0u8; 64];
    rec[..8].copy_from_slice(b"PMKITUSC");
    rec[8..16].copy_from_slice(&(seq + 1).to_le_bytes());
    rec[16..24].copy_from_slice(&3u64.to_le_bytes());
    rec[24..28].copy_from_slice(&crc32c(b"8089-a2-0001").to_le_bytes());
    rec[28..32].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c(&rec[..60]);
    rec[60..].copy_from_slice(&crc.to_le_bytes());
    bytes[1024..1088].copy_from_slice(&rec);
    std::fs::write(&path, &bytes).expect("write");
    // ... and a count that moved since: check fails, and writes nothing.
    std::fs::write(root.join("devices/ndbus0/nmem0/nfit/dirty_shutdown"), "4\n").expect("count");
    let check = pmkit_in(&root, &["pool", "check", file]);
    assert_eq!(check.status.code(), Some(1));
    assert!(
        text(&check.stdout)
            .contains("shut down unsafely while the pool was open (count 3 at open, 4 now)"),
        "{}",
        text(&check.stdout)
    );
    assert!(text(&check.stderr).contains("shut down unsafely"));
    assert_eq!(std::fs::read(&path).expect("read"), bytes);
}
