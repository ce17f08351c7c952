//! Every way a file can fail to be a pool gets its own typed error, and opening it —
//! read-write or read-only — leaves the file byte-for-byte unchanged.

use std::path::{Path, PathBuf};

use pmem_core::{OpenOptions, Pool, PoolError, PoolOptions};

const SIZE: u64 = 64 * 1024;

fn make_pool(dir: &Path, name: &str) -> (PathBuf, Vec<u8>) {
    let path = dir.join(name);
    Pool::create(&path, &PoolOptions::new("errors", SIZE))
        .expect("create")
        .close()
        .expect("close");
    let bytes = std::fs::read(&path).expect("read pool");
    (path, bytes)
}

/// Opens `bytes` as a pool both ways and returns the read-write error; asserts the
/// file is unchanged after each attempt.
fn open_err(dir: &Path, name: &str, bytes: &[u8], layout: Option<&str>) -> PoolError {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write test file");
    let mtime = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .expect("mtime");
    let mut opts = OpenOptions::new();
    if let Some(l) = layout {
        opts = opts.layout(l);
    }
    let rw = Pool::open_with(&path, &opts).expect_err("read-write open must fail");
    let ro = Pool::open_with(&path, &opts.clone().read_only(true))
        .expect_err("read-only open must fail");
    assert_eq!(
        format!("{rw}"),
        format!("{ro}"),
        "both modes report the same problem"
    );
    assert_eq!(
        std::fs::read(&path).expect("reread"),
        bytes,
        "{name}: file changed"
    );
    assert_eq!(
        std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .expect("mtime"),
        mtime,
        "{name}: mtime changed"
    );
    rw
}

#[test]
fn empty_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(matches!(
        open_err(dir.path(), "empty", &[], None),
        PoolError::Empty
    ));
}

#[test]
fn not_a_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = open_err(dir.path(), "text", b"hello, I am a text file\n", None);
    assert!(matches!(e, PoolError::NotAPool), "{e}");
    let e = open_err(dir.path(), "zeros", &vec![0u8; 8192], None);
    assert!(matches!(e, PoolError::NotAPool), "{e}");
}

#[test]
fn truncated_header_and_truncated_body() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, good) = make_pool(dir.path(), "good");
    for cut in [3usize, 8, 100, 255] {
        let e = open_err(dir.path(), "cut-header", &good[..cut], None);
        assert!(matches!(e, PoolError::Truncated { .. }), "cut {cut}: {e}");
    }
    for cut in [256usize, 4096, 8192, good.len() - 4096] {
        let e = open_err(dir.path(), "cut-body", &good[..cut], None);
        assert!(
            matches!(e, PoolError::Truncated { expected, .. } if expected == SIZE),
            "cut {cut}: {e}"
        );
    }
}

#[test]
fn grown_file_is_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, mut bytes) = make_pool(dir.path(), "good");
    bytes.extend_from_slice(&[0u8; 4096]);
    assert!(matches!(
        open_err(dir.path(), "grown", &bytes, None),
        PoolError::Corrupt { .. }
    ));
}

#[test]
fn bad_checksum() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, good) = make_pool(dir.path(), "good");
    for byte in [16usize, 30, 50, 104, 140, 251, 252] {
        let mut b = good.clone();
        b[byte] ^= 0x40;
        let e = open_err(dir.path(), "flipped", &b, None);
        assert!(
            matches!(e, PoolError::BadChecksum { .. }),
            "byte {byte}: {e}"
        );
    }
}

#[test]
fn unsupported_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, mut b) = make_pool(dir.path(), "good");
    b[8] = 9;
    let e = open_err(dir.path(), "v9", &b, None);
    assert!(
        matches!(
            e,
            PoolError::UnsupportedVersion {
                found: 9,
                supported: 3
            }
        ),
        "{e}"
    );
}

#[test]
fn wrong_layout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, b) = make_pool(dir.path(), "good");
    let e = open_err(dir.path(), "layout", &b, Some("something-else"));
    assert!(
        matches!(&e, PoolError::LayoutMismatch { expected, found } if expected == "something-else" && found == "errors"),
        "{e}"
    );
}

#[test]
fn missing_file_is_an_io_error_and_creates_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("absent");
    let e = Pool::open(&path, "x").expect_err("must fail");
    assert!(matches!(e, PoolError::Io { .. }), "{e}");
    assert!(!path.exists());
}

#[test]
fn create_never_clobbers_an_existing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("precious");
    std::fs::write(&path, b"precious data").expect("write");
    let e = Pool::create(&path, &PoolOptions::new("x", SIZE)).expect_err("must fail");
    assert!(matches!(e, PoolError::AlreadyExists { .. }), "{e}");
    assert_eq!(std::fs::read(&path).expect("read"), b"precious data");
}

#[test]
fn impossible_sizes_and_names_create_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p");
    for (layout, size) in [
        ("x", 0u64),
        ("x", 4096),
        ("x", 10_000),
        ("x", 1 << 50),
        ("", SIZE),
        ("a\0b", SIZE),
    ] {
        let e = Pool::create(&path, &PoolOptions::new(layout, size)).expect_err("must fail");
        assert!(
            matches!(
                e,
                PoolError::InvalidSize { .. } | PoolError::InvalidLayoutName { .. }
            ),
            "{layout:?} {size}: {e}"
        );
        assert!(!path.exists(), "a rejected create left a file behind");
    }
}

#[test]
fn errors_read_as_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = open_err(dir.path(), "text", b"not a pool", None);
    let msg = e.to_string();
    assert!(!msg.contains('\n'));
    assert!(msg.contains("not a pmkit pool"), "{msg}");
}

#[test]
fn special_files_are_refused_without_blocking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file system node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (path, ro) in [
        (fifo.as_path(), true),
        (fifo.as_path(), false),
        (dir.path(), true),
        (Path::new("/dev/null"), true),
    ] {
        let e = Pool::open_with(path, &OpenOptions::new().read_only(ro)).expect_err("refused");
        assert!(
            matches!(
                e,
                PoolError::UnsupportedFileType { .. } | PoolError::Io { .. }
            ),
            "{}: {e}",
            path.display()
        );
    }
    let e = Pool::open_with(&fifo, &OpenOptions::new().read_only(true)).expect_err("refused");
    assert!(
        matches!(e, PoolError::UnsupportedFileType { kind: "a FIFO", .. }),
        "{e}"
    );
    let e = Pool::open_with("/dev/null", &OpenOptions::new().read_only(true)).expect_err("refused");
    assert!(matches!(e, PoolError::UnsupportedFileType { .. }), "{e}");
}
