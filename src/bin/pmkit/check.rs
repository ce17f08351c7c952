//! `pmkit pool check FILE`: `FILE: ok (...)` and exit 0, or one line of reason on
//! stderr and exit 1.
//!
//! A pool is sound when its header validates (magic, version, checksum, size,
//! consistency) and, if its heap holds a page allocator, the allocator's metadata
//! validates too. A heap no known allocator formatted is fine: some other program's
//! data may live there.

use std::io::Write;
use std::path::Path;

use crate::failure::{self, Failure};
use crate::human;
use crate::info::usage_text;
use crate::report::{PoolReport, Usage};

/// Checks `file`, printing the one-line verdict of a sound pool to `out`.
pub fn run(file: &Path, out: &mut dyn Write) -> Result<(), Failure> {
    let r = PoolReport::gather(file)?;
    if let Usage::Corrupt { reason } = &r.usage {
        return Err(Failure::new(
            file,
            format!("page allocator metadata is corrupt: {reason}"),
        ));
    }
    failure::output(writeln!(
        out,
        "{}: ok (layout {:?}, version {}, pool {}, heap {}, mode {}{}, {})",
        human::path(file),
        r.layout,
        r.version,
        human::bytes(r.pool_size),
        human::bytes(r.heap_size),
        r.mode,
        if r.durable { "" } else { ", NOT durable" },
        usage_text(&r.usage),
    ))
}
