//! `pmkit pool upgrade FILE`: bring a pool's format to the current version in place
//! (version 2 -> 3 adds the shutdown-state record), crash-safely; see
//! [`Pool::upgrade`].

use std::io::Write;
use std::path::Path;

use pmem_core::pool::FORMAT_VERSION;
use pmem_core::Pool;

use crate::failure::{self, Failure};
use crate::human;

/// Upgrades `file` and prints one line saying what was done.
pub fn run(file: &Path, out: &mut dyn Write) -> Result<(), Failure> {
    let old = Pool::upgrade(file).map_err(|e| Failure::pool(file, &e))?;
    let line = if old == FORMAT_VERSION {
        format!("{}: already version {old}, unchanged", human::path(file))
    } else {
        format!(
            "{}: upgraded from version {old} to {FORMAT_VERSION}",
            human::path(file)
        )
    };
    failure::output(writeln!(out, "{line}"))
}
