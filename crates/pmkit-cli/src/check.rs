//! `pmkit pool check FILE`: one line per check on stdout, the last `FILE: ok (...)`
//! and exit 0; or, on a problem, the check lines and then one line of reason on
//! stderr and exit 1.
//!
//! A pool is sound when its header validates (magic, version, checksum, size,
//! consistency), the heap of any layout pmkit writes validates as its crate's
//! read-only inspection checks it (see [`crate::heaps`]: checksums, block maps,
//! logs), no bad blocks lie inside it, and the sysfs files describing its
//! device are readable. A heap no known allocator formatted is fine: some other
//! program's data may live there. Where sysfs does not describe the device (no
//! persistent memory), the bad-block and unsafe-shutdown checks say they are
//! skipped and why.

use std::io::Write;
use std::path::Path;

use crate::failure::{self, Failure};
use crate::human;
use crate::info::usage_text;
use crate::report::{PoolReport, Usage};

/// Checks `file`, printing a line per check and the verdict of a sound pool to `out`.
pub fn run(file: &Path, out: &mut dyn Write) -> Result<(), Failure> {
    let r = PoolReport::gather(file)?;
    if let Usage::Corrupt { heap, reason } = &r.usage {
        return Err(Failure::new(file, format!("{heap} is corrupt: {reason}")));
    }
    let name = human::path(file);
    let mut problems = Vec::new();
    for (line, problem) in r.platform.findings() {
        failure::output(writeln!(out, "{name}: {}", human::one_line(&line)))?;
        if problem {
            problems.push(line);
        }
    }
    if let Some(first) = problems.first() {
        // The lines above have the details; flush them before the verdict.
        failure::output(out.flush())?;
        return Err(Failure::new(
            file,
            match problems.len() {
                1 => first.clone(),
                n => format!("{n} problems, first: {first}"),
            },
        ));
    }
    failure::output(writeln!(
        out,
        "{name}: ok (layout {:?}, version {}, pool {}, heap {}, mode {}{}, {})",
        r.layout,
        r.version,
        human::bytes(r.pool_size),
        human::bytes(r.heap_size),
        r.mode,
        if r.durable { "" } else { ", NOT durable" },
        usage_text(&r.usage),
    ))
}
