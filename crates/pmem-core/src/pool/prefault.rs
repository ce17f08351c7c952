//! Mapping a range writable ahead of its first stores.
//!
//! The first store into each page of a file mapping takes a page fault (and, on a
//! page-cache file, the file system's `page_mkwrite`); a writer that appends into
//! fresh pages pays one per 4 KiB on its own path. [`Pool::prefault`] lets another
//! thread pay them ahead of time with `MADV_POPULATE_WRITE` (Linux 5.14), which
//! maps the pages writable without changing a byte. On a page-cache file the pages
//! become dirty, so a later `msync` of a span that holds them writes them back.

use super::Pool;
use crate::PoolError;

const PAGE: u64 = 4096;

impl Pool {
    /// Maps `[offset, offset + len)` (rounded out to pages) writable now, so stores
    /// into it take no page fault; the bytes are unchanged. A hint: returns whether
    /// the kernel did it (`false` for a read-only pool, a kernel without
    /// `MADV_POPULATE_WRITE`, or a mapping that refuses it).
    pub fn prefault(&self, offset: u64, len: u64) -> Result<bool, PoolError> {
        self.check_range(offset, len)?;
        if self.read_only || len == 0 {
            return Ok(false);
        }
        let start = offset / PAGE * PAGE;
        let end = (offset + len).div_ceil(PAGE) * PAGE;
        // SAFETY: `[start, end)` lies inside the page-rounded mapping (the range was
        // checked and pool sizes are page multiples); MADV_POPULATE_WRITE only faults
        // pages in and changes no byte of the mapping.
        let rc = unsafe {
            libc::madvise(
                self.addr(start).cast::<libc::c_void>(),
                (end - start) as usize,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINVAL | libc::EPERM | libc::EFAULT | libc::ENOMEM) => Ok(false),
            _ => Err(PoolError::io("madvise", &self.path, err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Pool, PoolOptions};

    /// Prefaulting keeps every byte and is refused for a read-only pool.
    #[test]
    fn prefault_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.pool");
        let pool = Pool::create(&path, &PoolOptions::new("p", 64 * 1024)).expect("create");
        let heap = pool.heap();
        // SAFETY: the pool is ours alone.
        unsafe { pool.write_bytes_shared(heap.start, b"kept") }.expect("write");
        let before = pool.bytes(0, pool.len()).expect("bytes").to_vec();
        pool.prefault(heap.start, heap.end - heap.start)
            .expect("prefault");
        assert_eq!(pool.bytes(0, pool.len()).expect("bytes"), &before[..]);
        assert!(pool.prefault(heap.end, 1).is_err(), "out of range");
        drop(pool);
        let ro = Pool::open_with(&path, &crate::OpenOptions::new().read_only(true)).expect("open");
        assert!(!ro.prefault(0, 4096).expect("a hint"));
    }
}
