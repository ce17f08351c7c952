//! Growing a pool file, offline and crash-safely.
//!
//! A pool's header records its size and is never modified in place (it has no
//! crash-safe update protocol), and the structure in the pool usually records its
//! heap's extent in its root too. So [`grow`] never touches the pool it was given:
//! it copies the file to `<file>.grow`, extends the copy, rewrites the copy's header
//! (pool and heap size, checksum), lets the caller adapt the copy's root to the
//! larger heap (through an ordinary [`Pool`] of the copy, whose writes it persists),
//! syncs the copy, and renames it over the original (then syncs the directory). A
//! crash before the rename leaves the original as it was (a stale `<file>.grow` is
//! removed by the next attempt); after it, the grown pool is complete. The cost is
//! one copy of the file: the pool must not be open meanwhile (the copy takes the
//! pool's lock, so a running owner makes it fail).
//!
//! A `path` that is a symbolic link grows the pool it points to: the copy is
//! built beside the link's final target and renamed over that target, so the link
//! itself (a path the user named) is never replaced by a regular file.

use std::fs::{File, OpenOptions as FsOpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use zerocopy::{FromBytes, IntoBytes};

use super::header::{Header, HEADER_LEN, PAGE};
use super::open::{reserve_space, sync_parent_dir};
use super::{OpenOptions, Pool};
use crate::PoolError;

/// Where [`grow`] builds the grown copy of `path`.
pub fn grow_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".grow");
    path.with_file_name(name)
}

/// Grows the pool file at `path` (layout `layout`) to `new_size` bytes (a multiple
/// of 4096, larger than its size), offline and crash-safely (see the module
/// documentation); `adapt` is given the grown copy and the old heap's end offset,
/// to extend the structure in it (its writes are persisted before the swap). A
/// symbolic link grows its target in place (the link stays a link).
pub fn grow<E>(
    path: &Path,
    layout: &str,
    new_size: u64,
    adapt: impl FnOnce(&Pool, u64) -> Result<(), E>,
) -> Result<(), GrowError<E>> {
    // The file to replace is the link's target, never the link: renaming the copy
    // over a link would replace the link and leave its pool as it was.
    let resolved = std::fs::canonicalize(path).map_err(|e| PoolError::io("resolve", path, e))?;
    let path = resolved.as_path();
    // Validate the original read-only: header, checksum, layout, and that nobody
    // holds it open for writing.
    let old = Pool::open_with(path, &OpenOptions::new().layout(layout).read_only(true))?;
    let old_size = old.len();
    let old_heap_end = old.heap().end;
    drop(old);
    if new_size <= old_size || !new_size.is_multiple_of(PAGE) {
        return Err(PoolError::InvalidSize {
            size: new_size,
            reason: "a grown pool must be larger than the pool and a multiple of 4096",
        }
        .into());
    }
    let tmp = grow_path(path);
    if tmp.exists() {
        std::fs::remove_file(&tmp).map_err(|e| PoolError::io("remove", &tmp, e))?;
    }
    let built = build_copy(path, &tmp, new_size, old_heap_end, layout, adapt);
    if built.is_err() {
        // Best effort: the original is untouched either way.
        let _ = std::fs::remove_file(&tmp);
        return built;
    }
    std::fs::rename(&tmp, path).map_err(|e| PoolError::io("rename", &tmp, e))?;
    sync_parent_dir(path)?;
    tracing::info!(path = %path.display(), old_size, new_size, "pool grown");
    Ok(())
}

/// Copies `path` to `tmp`, grows it and its header, adapts its root, syncs it.
fn build_copy<E>(
    path: &Path,
    tmp: &Path,
    new_size: u64,
    old_heap_end: u64,
    layout: &str,
    adapt: impl FnOnce(&Pool, u64) -> Result<(), E>,
) -> Result<(), GrowError<E>> {
    std::fs::copy(path, tmp).map_err(|e| PoolError::io("copy", tmp, e))?;
    {
        let mut file = FsOpenOptions::new()
            .read(true)
            .write(true)
            .open(tmp)
            .map_err(|e| PoolError::io("open", tmp, e))?;
        reserve_space(&file, tmp, new_size)?;
        let mut bytes = [0u8; HEADER_LEN];
        file.read_exact(&mut bytes)
            .map_err(|e| PoolError::io("read header", tmp, e))?;
        let mut header = Header::read_from_bytes(&bytes[..]).map_err(|_| PoolError::Corrupt {
            reason: "the copied header is unreadable".into(),
        })?;
        header.pool_size = new_size;
        header.heap_size = new_size - header.heap_off;
        header.checksum = header.compute_checksum();
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(header.as_bytes()))
            .and_then(|()| file.sync_all())
            .map_err(|e| PoolError::io("write header", tmp, e))?;
    }
    let pool = Pool::open(tmp, layout)?;
    adapt(&pool, old_heap_end).map_err(GrowError::Adapt)?;
    pool.close()?;
    File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| PoolError::io("fsync", tmp, e))?;
    Ok(())
}

/// Why [`grow`] failed (the original pool is unchanged in every case).
#[derive(Debug, thiserror::Error)]
pub enum GrowError<E> {
    /// The pool could not be opened, copied, extended or swapped.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The caller's adaptation of the grown copy failed.
    #[error("adapting the grown pool: {0}")]
    Adapt(E),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolOptions;

    /// A failed adaptation leaves the original byte for byte and no copy; a
    /// successful one grows the file, its header and heap, keeps every old byte,
    /// and the adaptation's writes are in the grown pool.
    #[test]
    fn grow_is_all_or_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("g.pool");
        let pool = Pool::create(&path, &PoolOptions::new("g", 64 * 1024)).expect("create");
        let heap = pool.heap();
        // SAFETY: the pool is ours alone.
        unsafe { pool.write_bytes_shared(heap.start, b"kept") }.expect("write");
        pool.persist(heap.start, 4).expect("persist");
        drop(pool);
        let original = std::fs::read(&path).expect("read");

        let failed = grow(&path, "g", 128 * 1024, |_, _| Err("no"));
        assert!(matches!(failed, Err(GrowError::Adapt("no"))));
        assert_eq!(std::fs::read(&path).expect("read"), original);
        assert!(!grow_path(&path).exists());
        let wrong = grow(&path, "other", 128 * 1024, |_, _| Ok::<(), ()>(()));
        assert!(matches!(wrong, Err(GrowError::Pool(_))));
        let smaller = grow(&path, "g", 32 * 1024, |_, _| Ok::<(), ()>(()));
        assert!(matches!(
            smaller,
            Err(GrowError::Pool(PoolError::InvalidSize { .. }))
        ));
        assert_eq!(std::fs::read(&path).expect("read"), original);

        grow(&path, "g", 128 * 1024, |pool, old_end| {
            assert_eq!(old_end, heap.end);
            // SAFETY: the grown copy is this closure's alone.
            unsafe { pool.write_bytes_shared(old_end, b"new") }.map_err(|e| e.to_string())?;
            pool.persist(old_end, 3).map_err(|e| e.to_string())
        })
        .expect("grow");
        let pool = Pool::open(&path, "g").expect("open the grown pool");
        assert_eq!(pool.len(), 128 * 1024);
        assert_eq!(pool.heap().end, 128 * 1024);
        assert_eq!(pool.bytes(heap.start, 4).expect("bytes"), b"kept");
        assert_eq!(pool.bytes(heap.end, 3).expect("bytes"), b"new");
    }

    /// Growing through a symbolic link grows the pool it points to and leaves the
    /// link a link (it once replaced the link with a grown regular file, leaving
    /// the pool as it was).
    #[test]
    fn a_link_grows_its_target() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("real.pool");
        drop(Pool::create(&path, &PoolOptions::new("g", 64 * 1024)).expect("create"));
        let link = dir.path().join("link.pool");
        std::os::unix::fs::symlink("real.pool", &link).expect("symlink");
        grow(&link, "g", 128 * 1024, |_, _| Ok::<(), ()>(())).expect("grow");
        assert!(std::fs::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink());
        assert_eq!(
            std::fs::read_link(&link).expect("target"),
            Path::new("real.pool")
        );
        assert_eq!(Pool::open(&path, "g").expect("open").len(), 128 * 1024);
        assert!(!grow_path(&path).exists() && !grow_path(&link).exists());
        let dangling = dir.path().join("dangling.pool");
        std::os::unix::fs::symlink("nowhere.pool", &dangling).expect("symlink");
        let failed = grow(&dangling, "g", 128 * 1024, |_, _| Ok::<(), ()>(()));
        assert!(matches!(failed, Err(GrowError::Pool(PoolError::Io { .. }))));
        assert!(std::fs::symlink_metadata(&dangling)
            .expect("link")
            .file_type()
            .is_symlink());
    }
}
