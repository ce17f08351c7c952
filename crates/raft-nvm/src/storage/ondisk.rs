//! Checks on the files a node opens, made before it opens them.
//!
//! A store's files (the list pool, the WAL directory and its files, the cluster-id
//! and node-id files, the join marker) are named by paths an operator controls. An
//! `open(2)` of a FIFO blocks until a writer appears, and one of a device reads
//! whatever the device holds: a node given such a path would hang for ever or
//! read garbage. So every path is looked at first ([`std::fs::metadata`], which
//! follows symbolic links, so a link to a regular file is fine and a link to a
//! FIFO is not), and anything but a regular file (or, for the WAL engine, a
//! directory) is refused with [`StoreError::NotRegular`] before it is opened.

use std::path::Path;

use crate::storage::error::{Result, StoreError};

/// What kind of file `t` is, in words, for errors.
pub(crate) fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Whether `path` exists, refusing anything there that is not a regular file.
/// Reads only.
pub(crate) fn regular_file(path: &Path) -> Result<bool> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(true),
        Ok(m) => Err(StoreError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(m.file_type()),
            expected: "a regular file",
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::Io(e)),
    }
}

/// Whether `path` exists, refusing anything there that is not a directory.
/// Reads only.
pub(crate) fn directory(path: &Path) -> Result<bool> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(true),
        Ok(m) => Err(StoreError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(m.file_type()),
            expected: "a directory",
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::Io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_fifos_directories_and_links_to_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").expect("write");
        assert!(regular_file(&file).expect("a file"));
        assert!(!regular_file(&dir.path().join("none")).expect("missing"));
        assert!(directory(dir.path()).expect("a directory"));
        assert!(matches!(
            regular_file(dir.path()),
            Err(StoreError::NotRegular { .. })
        ));
        assert!(matches!(
            directory(&file),
            Err(StoreError::NotRegular { .. })
        ));
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&fifo, &link).expect("symlink");
        for p in [&fifo, &link] {
            match regular_file(p) {
                Err(e @ StoreError::NotRegular { .. }) => {
                    assert!(e.to_string().contains("FIFO"), "{e}")
                }
                other => panic!("{}: {other:?}", p.display()),
            }
        }
    }
}
