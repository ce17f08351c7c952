//! Formatting a new store and recovering an existing one.
//!
//! Recovery walks the used list from `head` up to the durable tail, checks every
//! page header and record (bounds, checksum, kind, index order), replays the records
//! into the DRAM index in list order (rollback records discard the entries above
//! their index; a base record starts the log after a compaction or snapshot), and
//! declares every page the walk did not reach free. It writes nothing: a corrupt pool
//! is reported as [`StoreError::Corrupt`] and left as it was.
//!
//! For speed, the checksums are verified on a second thread while the first replays
//! the records, and the B-tree of versions is built once at the end from sorted
//! input ([`IndexBuilder`]) rather than by one random insert per record.

use std::collections::VecDeque;

use zerocopy::IntoBytes;

use super::append::Tail;
use super::layout::{
    for_each_record, ControlBlock, Loc, PageHeader, Pos, MAGIC, PAGE_HEADER, VERSION,
};
use super::{check_page_size, Geometry, ListOptions, Shared};
use crate::error::{Result, StoreError};
use crate::index::{vkey, IndexBuilder};
use crate::record::Kind;
use crate::store::{HardState, StoreOptions};
use crate::sync::{AtomicU64, Mutex, RwLock};
use pmem_core::{PPtr, Pool};

fn corrupt(msg: String) -> StoreError {
    StoreError::Corrupt(msg)
}

/// Writes the control block and an empty first page, durably.
pub(crate) fn write_format(pool: &Pool, opts: &ListOptions) -> Result<()> {
    check_page_size(opts.page_size)?;
    let cb_ptr: PPtr<ControlBlock> = pool.root()?;
    let heap = pool.heap();
    let page_size = u64::from(opts.page_size);
    let pages_off = heap.start.next_multiple_of(64);
    let page_count = (heap.end.saturating_sub(pages_off) / page_size).min(u64::from(u32::MAX));
    if page_count < 2 {
        return Err(StoreError::Invalid(format!(
            "a pool of {} bytes holds {page_count} pages of {page_size} bytes; at least 2 are needed",
            pool.len()
        )));
    }
    let mut cb = ControlBlock {
        magic: MAGIC,
        version: VERSION,
        page_size: opts.page_size,
        page_count,
        pages_off,
        geometry_crc: 0,
        head: 1,
        durable_tail: Pos {
            page: 0,
            off: PAGE_HEADER,
        }
        .pack(),
        hard_state: 0,
        reserved: [0; 8],
    };
    cb.geometry_crc = cb.compute_geometry_crc();
    let first = PageHeader {
        next: 0,
        used: PAGE_HEADER,
        pad: 0,
    };
    // SAFETY: the pool was just created and is not shared yet.
    unsafe {
        pool.write_bytes_shared(pages_off, first.as_bytes())?;
    }
    pool.flush(pages_off, u64::from(PAGE_HEADER))?;
    // SAFETY: as above.
    unsafe { pool.write_bytes_shared(cb_ptr.offset(), cb.as_bytes())? };
    pool.persist(cb_ptr.offset(), std::mem::size_of::<ControlBlock>() as u64)?;
    Ok(())
}

/// Rebuilds the DRAM state of the store in `pool`.
pub(crate) fn recover(pool: Pool, opts: &StoreOptions) -> Result<Shared> {
    let started = std::time::Instant::now();
    if opts.group == 0 {
        return Err(StoreError::Invalid(
            "group size 0: use 1 to sync every append".into(),
        ));
    }
    let cb_ptr: PPtr<ControlBlock> = pool.root()?;
    let cb: ControlBlock = pool.read(cb_ptr)?;
    if cb.magic != MAGIC {
        return Err(corrupt(format!(
            "bad magic {:#x} in the control block",
            cb.magic
        )));
    }
    if cb.version != VERSION {
        return Err(corrupt(format!(
            "unsupported format version {}",
            cb.version
        )));
    }
    if cb.geometry_crc != cb.compute_geometry_crc() {
        return Err(corrupt("control block geometry checksum mismatch".into()));
    }
    check_page_size(cb.page_size).map_err(|e| corrupt(e.to_string()))?;
    let page_size = u64::from(cb.page_size);
    let fits = cb
        .page_count
        .checked_mul(page_size)
        .and_then(|b| b.checked_add(cb.pages_off))
        .is_some_and(|end| end <= pool.len() && cb.pages_off >= pool.heap().start);
    if !fits || cb.page_count > u64::from(u32::MAX) || cb.page_count < 2 {
        return Err(corrupt(format!(
            "{} pages of {} bytes at {} do not fit the pool of {} bytes",
            cb.page_count,
            cb.page_size,
            cb.pages_off,
            pool.len()
        )));
    }
    let geo = Geometry {
        page_size: cb.page_size,
        page_count: cb.page_count as u32,
        pages_off: cb.pages_off,
    };
    let tail = Pos::unpack(cb.durable_tail);
    if tail.page >= geo.page_count || tail.off < PAGE_HEADER || tail.off > cb.page_size {
        return Err(corrupt(format!("durable tail {tail:?} out of range")));
    }
    if cb.head == 0 || cb.head > u64::from(geo.page_count) {
        return Err(corrupt(format!("head page {} out of range", cb.head)));
    }

    // 1. Follow the page list (headers only) up to the durable tail.
    let mut visited = vec![false; geo.page_count as usize];
    let mut pages = VecDeque::new();
    let mut filled: Vec<(u32, u64, u32)> = Vec::new();
    let mut page = (cb.head - 1) as u32;
    loop {
        if std::mem::replace(&mut visited[page as usize], true) {
            return Err(corrupt(format!("the page list loops back to page {page}")));
        }
        pages.push_back(page);
        let base = geo.page_off(page);
        let header: PageHeader = pool.read(PPtr::from_offset(base))?;
        let end = if page == tail.page {
            tail.off
        } else {
            header.used
        };
        if end < PAGE_HEADER || end > cb.page_size {
            return Err(corrupt(format!("page {page}: fill {end} out of range")));
        }
        filled.push((page, base, end));
        if page == tail.page {
            break;
        }
        if header.next == 0 || header.next > u64::from(geo.page_count) {
            return Err(corrupt(format!(
                "page {page} ends the list (next {}) before the durable tail page {}",
                header.next, tail.page
            )));
        }
        page = (header.next - 1) as u32;
    }

    // 2. Replay the records into the index while a second thread verifies their
    //    checksums (a third of the work for large values): the result is an error
    //    if either finds one.
    let (replayed, verified) = std::thread::scope(|scope| {
        let verifier = scope.spawn(|| walk_records(&pool, &filled, true, |_, _, _, _| Ok(())));
        let mut index: IndexBuilder<Loc> = IndexBuilder::default();
        let replayed = walk_records(&pool, &filled, false, |rec, off, page, at| {
            replay(&mut index, rec, off, page, at)
        })
        .map(|()| index);
        let verified = verifier
            .join()
            .unwrap_or_else(|_| Err(corrupt("the checksum verifier panicked".into())));
        (replayed, verified)
    });
    verified?;
    let index = replayed?;

    let free: Vec<u32> = (0..geo.page_count)
        .rev()
        .filter(|&p| !visited[p as usize])
        .collect();
    let hard = HardState::unpack(cb.hard_state);
    let last_index = index.last_index();
    let versions = index.versions();
    let index = index.finish();
    tracing::debug!(
        pages = pages.len(),
        free = free.len(),
        versions,
        last_index,
        ms = started.elapsed().as_secs_f64() * 1e3,
        "list store recovered"
    );
    let t = Tail {
        page: tail.page,
        used: tail.off,
        durable: tail,
        sealed: Vec::new(),
        pages,
        free,
        unsynced: 0,
        last_index,
        buf: Vec::with_capacity(256),
    };
    Ok(Shared {
        pool,
        cb: cb_ptr,
        geo,
        opts: opts.clone(),
        tail: Mutex::new(t),
        index: RwLock::new(index),
        gc_gate: RwLock::new(()),
        compaction: Mutex::new(()),
        hard: Mutex::new(hard),
        durable_index: AtomicU64::new(last_index),
        syncs: AtomicU64::new(0),
    })
}

/// Decodes every record of the `(page, offset, fill)` pages in order, verifying
/// checksums if `verify`, and hands each to `each` with its pool offset, page and
/// offset in the page.
fn walk_records(
    pool: &Pool,
    pages: &[(u32, u64, u32)],
    verify: bool,
    mut each: impl FnMut(&crate::record::Record<'_>, u64, u32, usize) -> Result<()>,
) -> Result<()> {
    for &(page, base, end) in pages {
        for_each_record(pool, page, base, end, verify, |rec, off, at| {
            each(rec, off, page, at)
        })?;
    }
    Ok(())
}

/// Applies one record, found at pool offset `off`, to the index.
fn replay(
    index: &mut IndexBuilder<Loc>,
    rec: &crate::record::Record<'_>,
    off: u64,
    page: u32,
    at: usize,
) -> Result<()> {
    let place = || format!("page {page} offset {at}");
    let base = index.base().0;
    match rec.kind {
        Kind::Base => {
            if index.last_index() > 0 || index.versions() > 0 {
                return Err(corrupt(format!(
                    "{}: base record after other records",
                    place()
                )));
            }
            index.set_base(rec.index, rec.term);
        }
        Kind::Rollback => {
            index
                .truncate_after(rec.index)
                .map_err(|e| corrupt(format!("{}: {e}", place())))?;
        }
        Kind::HardState => {
            return Err(corrupt(format!(
                "{}: hard-state record in the list",
                place()
            )));
        }
        Kind::Noop if rec.index <= base => {}
        Kind::Put | Kind::Delete if rec.index <= base => {
            // A version kept by compaction or installed from a snapshot.
            index.insert_old(
                vkey(rec.key, rec.index),
                Loc::new(off, rec.kind == Kind::Delete),
            );
        }
        Kind::Put | Kind::Delete | Kind::Noop => {
            index
                .check_next(rec.index)
                .map_err(|e| corrupt(format!("{}: {e}", place())))?;
            let version = match rec.kind {
                Kind::Noop => None,
                k => Some((vkey(rec.key, rec.index), Loc::new(off, k == Kind::Delete))),
            };
            index.push(rec.term, version, off);
        }
    }
    Ok(())
}
