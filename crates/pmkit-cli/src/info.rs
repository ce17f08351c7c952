//! `pmkit pool info FILE [--json]`: print a pool's header, mode and usage.

use std::io::Write;
use std::path::Path;

use pmem_core::PersistenceDomain;

use crate::failure::{self, Failure};
use crate::human;
use crate::report::{PoolReport, Usage};

/// Prints the report of `file` to `out`, as text or as one line of JSON.
pub fn run(file: &Path, json: bool, out: &mut dyn Write) -> Result<(), Failure> {
    let report = PoolReport::gather(file)?;
    let written = if json {
        serde_json::to_string(&report)
            .map_err(std::io::Error::other)
            .and_then(|line| writeln!(out, "{line}"))
    } else {
        write_text(&report, out)
    };
    failure::output(written)
}

/// The text form: one `name: value` line per field.
fn write_text(r: &PoolReport, out: &mut dyn Write) -> std::io::Result<()> {
    let row = |out: &mut dyn Write, name: &str, value: &dyn std::fmt::Display| {
        writeln!(out, "  {name:<12} {value}")
    };
    writeln!(out, "{}", crate::human::one_line(&r.path))?;
    row(out, "layout", &format_args!("{:?}", r.layout))?;
    row(out, "uuid", &r.uuid)?;
    row(out, "version", &r.version)?;
    row(out, "created", &human::utc(r.created_unix_s))?;
    row(out, "pool size", &human::bytes_exact(r.pool_size))?;
    row(out, "header", &human::bytes_exact(r.header_size))?;
    match &r.root {
        Some(root) => row(
            out,
            "root",
            &format_args!(
                "{} at offset {}, id {:?} version {}",
                human::bytes_exact(root.size),
                root.offset,
                root.id,
                root.layout_version
            ),
        )?,
        None => row(out, "root", &"none")?,
    }
    row(
        out,
        "heap",
        &format_args!(
            "{} at offset {}..{}",
            human::bytes_exact(r.heap_size),
            r.heap_offset,
            r.heap_offset.saturating_add(r.heap_size)
        ),
    )?;
    row(
        out,
        "mode",
        &format_args!("{} ({})", r.mode, r.mode_description),
    )?;
    row(out, "durable", &if r.durable { "yes" } else { "NO" })?;
    row(
        out,
        "domain",
        &format_args!(
            "{} ({}){}",
            r.persistence_domain,
            r.domain_description,
            if r.domain_effective {
                "; flushes elided, a drain is a fence"
            } else if r.persistence_domain == PersistenceDomain::CpuCache.name() {
                "; no effect in this mode"
            } else {
                ""
            }
        ),
    )?;
    row(out, "flush", &r.flush_instruction)?;
    for (name, value) in r.platform.rows() {
        row(out, name, &value)?;
    }
    row(out, "usage", &usage_text(&r.usage))
}

/// One line describing what the heap holds.
pub fn usage_text(usage: &Usage) -> String {
    match usage {
        Usage::PageAllocator {
            page_size,
            pages_total,
            pages_used,
            intent_pending,
        } => {
            let percent = if *pages_total == 0 {
                0.0
            } else {
                *pages_used as f64 * 100.0 / *pages_total as f64
            };
            let free = pages_total.saturating_sub(*pages_used);
            format!(
                "page allocator, {pages_used} of {pages_total} pages of {} used ({percent:.1}%), {} free{}",
                human::bytes(*page_size),
                human::bytes(free.saturating_mul(*page_size)),
                if *intent_pending {
                    "; an interrupted allocation awaits recovery at the next read-write open"
                } else {
                    ""
                }
            )
        }
        Usage::Heap(h) => format!(
            "{}, {} objects, {} of {} used ({:.1}%){}; log: {}",
            h.heap,
            h.objects,
            human::bytes(h.used_bytes),
            human::bytes(h.capacity_bytes),
            h.fill_percent,
            h.fragmentation
                .map(|f| format!(", fragmentation {f:.3}"))
                .unwrap_or_default(),
            h.log
        ),
        Usage::Unformatted => "heap not formatted by a known allocator".to_owned(),
        Usage::Corrupt { heap, reason } => format!("{heap} is corrupt: {reason}"),
    }
}
