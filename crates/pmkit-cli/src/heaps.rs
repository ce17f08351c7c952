//! Which of pmkit's layouts a pool holds, and a read-only summary of it.
//!
//! A pool's header names its layout with a string its program chose, so the heap
//! is recognised by what it starts with: the raft-nvm list store by its header
//! layout name, the others by the magic their format writes at the heap's start
//! (a transaction log, a page allocator). Each is inspected through its crate's
//! read-only inspection function, which validates what the crate's own recovery
//! relies on (checksums, geometry, block maps, logs) and writes nothing.

use std::path::Path;

use pmem_core::tx::{TxError, TxHeap};
use pmem_core::{AllocError, OpenOptions, PageAllocStats, PageAllocator, Pool};
use raft_nvm::ListStore;

use crate::report::{Summary, Usage};

/// What the heap of `pool` (the file `file`, opened read-only) holds.
pub fn usage(pool: &mut Pool, file: &Path) -> Usage {
    if pool.layout() == raft_nvm::list::LAYOUT {
        return list(file);
    }
    // A defragmenting heap is a transaction heap too: its root object says which.
    if pool.info().root_id == <pmem_defrag::HeapRoot as pmem_core::RootType>::ROOT_ID {
        return defrag_heap(pool);
    }
    let heap = pool.heap().start;
    let magic: [u8; 8] = pool
        .bytes(heap, 8)
        .ok()
        .and_then(|b| b.try_into().ok())
        .unwrap_or_default();
    if magic.starts_with(b"PMKTXLG") {
        return tx(pool);
    }
    if magic.starts_with(b"PMKWAFA") {
        return wafa(pool);
    }
    if magic.starts_with(b"PMKNVWA") {
        return nvwa(pool, heap);
    }
    page_allocator(pool, heap)
}

/// A corrupt heap of kind `heap`.
fn corrupt(heap: &'static str, reason: impl ToString) -> Usage {
    Usage::Corrupt {
        heap,
        reason: reason.to_string(),
    }
}

/// Percent of `total` that `part` is (0 for an empty total).
fn fill(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 * 100.0 / total as f64
    }
}

/// A page allocator over the whole heap (`pmkit pool create`'s format).
fn page_allocator(pool: &mut Pool, heap: u64) -> Usage {
    match PageAllocator::inspect(pool, heap) {
        Ok(PageAllocStats {
            page_size,
            pages_total,
            pages_used,
            intent_pending,
        }) => Usage::PageAllocator {
            page_size,
            pages_total,
            pages_used,
            intent_pending,
        },
        Err(AllocError::NotFormatted { .. }) => Usage::Unformatted,
        Err(e) => corrupt("page allocator metadata", e),
    }
}

/// The allocator under a transaction heap: pmem-core's page allocator, or an NVWA
/// heap (`TxHeap::create_with`). `(objects, used bytes, capacity, fill %)`, or the
/// corrupt usage to report.
fn tx_allocator(
    pool: &mut Pool,
    s: &pmem_core::tx::TxHeapSummary,
    what: &'static str,
) -> Result<(u64, u64, u64, f64), Usage> {
    if let Some(a) = s.allocator {
        return Ok((
            s.blocks.unwrap_or(0),
            a.pages_used.saturating_mul(a.page_size),
            a.pages_total.saturating_mul(a.page_size),
            fill(a.pages_used, a.pages_total),
        ));
    }
    match nvwa::Nvwa::inspect(pool, s.allocator_start) {
        Ok(n) => Ok((
            n.objects,
            n.bytes_used,
            n.heap_pages.saturating_mul(4096),
            fill(n.pages_used, n.heap_pages),
        )),
        Err(AllocError::NotFormatted { .. }) => Err(corrupt(
            what,
            format!(
                "no allocator pmkit knows at offset {} after the log",
                s.allocator_start
            ),
        )),
        Err(e) => Err(corrupt(what, format!("nvwa allocator: {e}"))),
    }
}

/// The state of a transaction heap's log, in words.
fn lanes_text(s: &pmem_core::tx::TxHeapSummary) -> String {
    let intent = s.allocator.is_some_and(|a| a.intent_pending);
    if !s.recovery_pending() {
        format!("{} lanes, all idle (clean)", s.geometry.lanes)
    } else {
        format!(
            "{} lanes: {} to roll back, {} to finish ({} log records){}{} at the next \
             read-write open",
            s.geometry.lanes,
            s.lanes_active,
            s.lanes_committed,
            s.records_pending,
            if s.lazy_entries > 0 {
                format!(", {} lazy commits to replay", s.lazy_entries)
            } else {
                String::new()
            },
            if intent {
                ", an allocation intent to recover"
            } else {
                ""
            }
        )
    }
}

/// A transaction heap of pmem-core (`TxHeap`): its log and its allocator.
fn tx(pool: &mut Pool) -> Usage {
    let s = match TxHeap::inspect(pool) {
        Ok(s) => s,
        Err(TxError::Alloc(e)) => return corrupt("transaction heap's page allocator", e),
        Err(e) => return corrupt("transaction heap", e),
    };
    let (objects, used_bytes, capacity_bytes, fill_percent) =
        match tx_allocator(pool, &s, "transaction heap") {
            Ok(a) => a,
            Err(u) => return u,
        };
    Usage::Heap(Summary {
        heap: "tx heap",
        objects,
        used_bytes,
        capacity_bytes,
        fill_percent,
        fragmentation: None,
        log: lanes_text(&s),
    })
}

/// A raft-nvm list store, walked and checked by a second read-only open (the
/// walk consumes its pool).
fn list(file: &Path) -> Usage {
    let pool = match Pool::open_with(file, &OpenOptions::new().read_only(true)) {
        Ok(p) => p,
        Err(e) => return corrupt("raft-nvm list", e),
    };
    let s = match ListStore::inspect(pool) {
        Ok(s) => s,
        Err(e) => return corrupt("raft-nvm list", e),
    };
    let page = u64::from(s.page_size);
    Usage::Heap(Summary {
        heap: "raft-nvm list",
        objects: s.usage.versions,
        used_bytes: s.usage.used,
        capacity_bytes: s.usage.capacity.unwrap_or(0),
        fill_percent: fill(u64::from(s.pages_used), u64::from(s.pages_total)),
        fragmentation: None,
        log: format!(
            "entries to index {} (durable to {}), term {}, {} of {} pages of {} used",
            s.last_index,
            s.durable_index,
            s.hard_state.term,
            s.pages_used,
            s.pages_total,
            crate::human::bytes(page)
        ),
    })
}

/// A WAFA heap over the whole heap.
fn wafa(pool: &mut Pool) -> Usage {
    let s = match wafa::Wafa::inspect(pool) {
        Ok(s) => s,
        Err(e) => return corrupt("wafa heap", e),
    };
    let mut log = Vec::new();
    if s.intent_pending {
        log.push("an interrupted alloc_publish to redo".to_owned());
    }
    if s.orphan_pages > 0 {
        log.push(format!("{} orphan run pages to free", s.orphan_pages));
    }
    Usage::Heap(Summary {
        heap: "wafa heap",
        objects: s.unit_runs + u64::from(s.runs),
        used_bytes: s.bytes_used,
        capacity_bytes: s.bytes_total,
        fill_percent: fill(s.bytes_used, s.bytes_total),
        fragmentation: Some(s.fragmentation),
        log: if log.is_empty() {
            format!(
                "clean ({} divided, {} run, {} pages)",
                s.divided_pages, s.run_pages, s.pages
            )
        } else {
            format!("{} at the next read-write open", log.join(", "))
        },
    })
}

/// An NVWA heap formatted over the whole heap (`Nvwa::format_heap`).
fn nvwa(pool: &mut Pool, heap: u64) -> Usage {
    let s = match nvwa::Nvwa::inspect(pool, heap) {
        Ok(s) => s,
        Err(e) => return corrupt("nvwa heap", e),
    };
    let capacity = s.heap_pages.saturating_mul(4096);
    Usage::Heap(Summary {
        heap: "nvwa heap",
        objects: s.objects,
        used_bytes: s.bytes_used,
        capacity_bytes: capacity,
        fill_percent: fill(s.pages_used, s.heap_pages),
        fragmentation: Some(s.fragmentation),
        log: format!(
            "area {} generation {}, {} records of {} words{}",
            s.log_area,
            s.generation,
            s.log_records,
            s.log_words,
            if s.pending_fixes == 0 {
                ", replays clean".to_owned()
            } else {
                format!(
                    ", {} records the next read-write open decides",
                    s.pending_fixes
                )
            }
        ),
    })
}

/// A defragmenting heap (`DefragHeap`): slab pages in a transaction heap.
fn defrag_heap(pool: &mut Pool) -> Usage {
    // Over pmem-core's page allocator the lister is not called; over anything
    // else, the one other allocator a defragmenting heap runs on is NVWA.
    let s = match pmem_defrag::DefragHeap::inspect_with_blocks(pool, nvwa::Nvwa::inspect_blocks) {
        Ok(s) => s,
        Err(e) => return corrupt("defrag heap", e),
    };
    let (blocks, used, capacity_bytes, fill_percent) =
        match tx_allocator(pool, &s.tx, "defrag heap") {
            Ok(a) => a,
            Err(u) => return u,
        };
    let slabs = if s.slabs_checked {
        format!(
            "{} reachable from the roots, {} slab pages",
            s.reachable_objects
                .map_or_else(|| "references being healed".to_owned(), |n| n.to_string()),
            s.pages
        )
    } else {
        "slab pages not walked (an allocator pmkit cannot list)".to_owned()
    };
    Usage::Heap(Summary {
        heap: "defrag heap",
        objects: if s.slabs_checked {
            s.live_objects
        } else {
            blocks
        },
        used_bytes: if s.slabs_checked {
            s.footprint_bytes
        } else {
            used
        },
        capacity_bytes,
        fill_percent,
        fragmentation: s.slabs_checked.then_some(s.frag_ratio),
        log: format!(
            "{slabs}, {} types; {}{}",
            s.types,
            lanes_text(&s.tx),
            if s.compaction_plans > 0 {
                format!(
                    "; an interrupted compaction of {} plans to finish",
                    s.compaction_plans
                )
            } else {
                String::new()
            }
        ),
    })
}
