//! `pmkit pool create FILE --size SIZE --layout NAME`: make a pool file and format
//! its heap with a [`PageAllocator`], so `info` can report usage.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use pmem_core::{PageAllocator, Pool, PoolOptions};

use crate::failure::{self, Failure};
use crate::human;
use crate::size::parse_size;

/// The page allocator needs its metadata page plus at least one page of heap.
const MIN_ALLOCATOR_HEAP: u64 = 2 * 4096;

/// Creates the pool and prints a one-line summary to `out`. Never touches an
/// existing file (a device-DAX device is formatted: it cannot be created); on
/// failure after creation the new file is removed.
pub fn run(
    file: &Path,
    size: Option<&str>,
    layout: &str,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    use std::os::unix::fs::FileTypeExt;
    let devdax = std::fs::metadata(file).is_ok_and(|m| m.file_type().is_char_device());
    let size = match size {
        Some(s) => parse_size(s).map_err(Failure::general)?,
        // 0: the whole device, from sysfs.
        None if devdax => 0,
        None => return Err(Failure::general("--size is required to create a pool file")),
    };
    let opts = PoolOptions::new(layout, size);
    let pool = if devdax {
        Pool::create_devdax(file, &opts)
    } else {
        Pool::create(file, &opts)
    }
    .map_err(|e| Failure::pool(file, &e))?;
    let size = pool.len();
    let mode = pool.mode();
    let durable = pool.is_durable();
    let heap_size = pool.heap().end - pool.heap().start;
    let heap = if heap_size < MIN_ALLOCATOR_HEAP {
        drop(pool);
        "heap left unformatted (too small for a page allocator)".to_owned()
    } else {
        // SAFETY: `pool` was created a moment ago and is moved into the allocator: no
        // other reference to it exists, so nothing else reads or writes the heap
        // while the allocator lives (it is dropped before this function returns).
        match unsafe { PageAllocator::format_heap(Arc::new(pool)) } {
            Ok(alloc) => {
                let s = alloc.stats();
                format!(
                    "heap formatted with a page allocator of {} pages of {}",
                    s.pages_total,
                    human::bytes(s.page_size)
                )
            }
            Err(e) => {
                // The pool (moved into the failed call) is closed by now; the file is
                // ours, created above, so removing it loses nothing (a device is
                // never removed).
                if !devdax {
                    let _ = std::fs::remove_file(file);
                }
                return Err(Failure::alloc(file, &e));
            }
        }
    };
    failure::output(writeln!(
        out,
        "created {}: layout {layout:?}, {}, {heap}, mode {mode}{}",
        human::path(file),
        human::bytes_exact(size),
        if durable { "" } else { " (NOT durable)" },
    ))
}
