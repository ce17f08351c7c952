//! `pmkit pool grow FILE --size SIZE`: grow a raft-nvm list store's pool offline.
//!
//! The pool must not be open (stop the node first). A grown copy is built beside
//! the file and renamed over it, so a crash or an error leaves the file as it was;
//! the copy needs the disk space of the new size while it is built.

use std::io::Write;
use std::path::Path;

use pmem_core::{OpenOptions, Pool};
use raft_nvm::{list::LAYOUT, ListStore, StoreError};

use crate::failure::{self, Failure};
use crate::human;
use crate::size::parse_size;

/// Grows `file` to `size` and prints a one-line summary to `out`.
pub fn run(file: &Path, size: &str, out: &mut dyn Write) -> Result<(), Failure> {
    let size = parse_size(size).map_err(Failure::general)?;
    let pool = Pool::open_with(file, &OpenOptions::new().read_only(true))
        .map_err(|e| Failure::pool(file, &e))?;
    let (layout, old) = (pool.layout().to_owned(), pool.len());
    drop(pool);
    if layout != LAYOUT {
        return Err(Failure::new(
            file,
            format!("layout {layout:?}: only raft-nvm list stores ({LAYOUT:?}) can be grown"),
        ));
    }
    ListStore::grow(file, size).map_err(|e| match e {
        StoreError::Pool(p) => Failure::pool(file, &p),
        other => Failure::new(file, other.to_string()),
    })?;
    failure::output(writeln!(
        out,
        "grown {}: {} -> {}",
        human::path(file),
        human::bytes_exact(old),
        human::bytes_exact(size)
    ))
}
