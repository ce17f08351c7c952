//! Formatting a new store and recovering an existing one.
//!
//! Recovery walks the used list from `head`: up to the `durable_tail` hint, and up
//! to each later page's `durable` word, it checks every page seal and record
//! (bounds, generation-seeded checksum, kind, index order), and any fault there is
//! [`StoreError::Corrupt`]; past that it reads on
//! while records of the page's generation are intact and follows a sealed page's
//! link only when every record up to the seal's fill was found, so the first gap
//! left by an unfinished sync ends the list (see [`super::layout`]). It replays the
//! records into the DRAM index in list order (rollback records discard the entries
//! above their index; a base record starts the log after a compaction or snapshot),
//! and declares every page the walk did not reach free. It writes nothing to a pool
//! it finds corrupt: that is reported and left as it was. The hard state is
//! checked first, against its checksum (`hard_check`, see [`super::layout`]) and
//! for plausibility. Once the walk succeeded, and the caller accepted what it
//! found ([`super::ListStore::open_checked`]), the store is *settled* with one
//! fence: the next epoch (so this run's page generations are new) and the
//! records found past the hint (durable from here on).
//!
//! For speed, a second thread follows the page list and hands the pages over as it
//! finds them, then verifies the checksums, while the calling thread replays the
//! records (so the replay neither waits for the whole walk nor takes its page
//! faults); the B-tree of versions is built once at the end from sorted input
//! ([`IndexBuilder`]) rather than by one random insert per record.

use std::collections::VecDeque;

use zerocopy::IntoBytes;

use super::append::Tail;
use super::layout::{
    field, for_each_record, valid_end, ControlBlock, Loc, PageHeader, Pos, MAGIC, PAGE_HEADER,
    VERSION,
};
use super::persist::{self, Site};
use super::{check_page_size, Geometry, ListOptions, Shared};
use crate::storage::error::{Result, StoreError};
use crate::storage::index::{vkey, Index, IndexBuilder};
use crate::storage::record::Kind;
use crate::storage::store::{HardState, StoreOptions};
use crate::storage::sync::{AtomicU64, Mutex, RwLock};
use pmem_core::{PPtr, Pool};

/// The generation of the first page of a new store (epoch 1).
const FIRST_GEN: u64 = 1 << 32 | 1;

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
        epoch: FIRST_GEN >> 32,
        hard_check: super::layout::hard_check(0, 0),
        reserved: [0; 6],
    };
    cb.geometry_crc = cb.compute_geometry_crc();
    // The whole first page: no byte of an earlier use of the pool may follow the
    // fresh header (a freshly formatted store appends into this page at once).
    let mut first = vec![0u8; opts.page_size as usize];
    first[..PAGE_HEADER as usize].copy_from_slice(PageHeader::fresh(FIRST_GEN).as_bytes());
    // SAFETY: the pool was just created and is not shared yet.
    unsafe {
        pool.write_bytes_shared(pages_off, &first)?;
    }
    persist::flush(pool, Site::FormatFlush, pages_off, page_size)?;
    // SAFETY: as above.
    unsafe { pool.write_bytes_shared(cb_ptr.offset(), cb.as_bytes())? };
    persist::flush(
        pool,
        Site::FormatControlFlush,
        cb_ptr.offset(),
        std::mem::size_of::<ControlBlock>() as u64,
    )?;
    persist::fence(pool, Site::FormatFence)?;
    Ok(())
}

/// The geometry the control block `cb` of `pool` records, once its magic,
/// version and checksum are right and its page size and page count are sound
/// (nothing read from media is divided by, or multiplied, before this).
pub(crate) fn geometry(cb: &ControlBlock, pool: &Pool) -> Result<Geometry> {
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
    Ok(Geometry {
        page_size: cb.page_size,
        page_count: cb.page_count as u32,
        pages_off: cb.pages_off,
    })
}

/// Rebuilds the DRAM state of the store in `pool`, reading only: the store must
/// be [`settle`]d before anything is appended to it (a caller may first check the
/// recovered state, and drop it unwritten if it refuses it). The steps of the
/// module doc: the control block and hard state ([`read_control`]), the walk and
/// the replay ([`walk_and_replay`]), then the DRAM state ([`assemble`]).
pub(crate) fn recover(pool: Pool, opts: &StoreOptions) -> Result<(Shared, Settle)> {
    let started = std::time::Instant::now();
    if opts.group == 0 {
        return Err(StoreError::Invalid(
            "group size 0: use 1 to sync every append".into(),
        ));
    }
    let control = read_control(&pool)?;
    let (walked, replayed) = walk_and_replay(&pool, &control)?;
    Ok(assemble(pool, opts, control, walked, replayed, started))
}

/// What recovery reads from the control block before it walks the list.
struct Control {
    /// The control block's place.
    cb_ptr: PPtr<ControlBlock>,
    /// The control block as read.
    cb: ControlBlock,
    /// Its checked geometry.
    geo: Geometry,
    /// The `durable_tail` hint, checked to lie in range.
    hint: Pos,
    /// This run's epoch (the recorded one plus one).
    epoch: u64,
    /// The hard state, checked against its checksum and for plausibility.
    hard: HardState,
}

/// Reads the control block and checks what the walk relies on: the geometry, the
/// hint, the epoch and the head in range, the hard state against its checksum.
fn read_control(pool: &Pool) -> Result<Control> {
    let cb_ptr: PPtr<ControlBlock> = pool.root()?;
    let cb: ControlBlock = pool.read(cb_ptr)?;
    let geo = geometry(&cb, pool)?;
    let hint = Pos::unpack(cb.durable_tail);
    if hint.page >= geo.page_count || hint.off < PAGE_HEADER || hint.off > cb.page_size {
        return Err(corrupt(format!("durable tail {hint:?} out of range")));
    }
    let epoch = cb
        .epoch
        .checked_add(1)
        .filter(|&e| (2..1 << 32).contains(&e))
        .ok_or_else(|| corrupt(format!("epoch {} out of range", cb.epoch)))?;
    if cb.head == 0 || cb.head > u64::from(geo.page_count) {
        return Err(corrupt(format!("head page {} out of range", cb.head)));
    }
    let hard_at = cb_ptr.offset() + field::HARD_STATE;
    match super::layout::hard_check_holds(cb.hard_state, cb.hard_check) {
        Some(true) => {}
        Some(false) => {
            return Err(corrupt(format!(
                "offset {hard_at}: the hard state word {:#018x} fails its checksum {:#018x}",
                cb.hard_state, cb.hard_check
            )))
        }
        None => tracing::info!("the hard state has no checksum yet (a pool from before it): one is written at its next update"),
    }
    let hard = HardState::unpack(cb.hard_state).check_plausible(&format!("offset {hard_at}"))?;
    Ok(Control {
        cb_ptr,
        cb,
        geo,
        hint,
        epoch,
        hard,
    })
}

/// What the replay built: the last index, the number of versions, the index.
type Replayed = (u64, usize, Index<Loc>);

/// Walks the list and replays it into an index, on two threads.
///
/// A second thread follows the page list (headers only up to the hint), handing
/// the pages over in batches as it finds them, then verifies every record's
/// checksum. This thread replays the pages' records into the index as they arrive.
/// A broken list or a bad checksum is reported in preference to an error the
/// replay met, so what is reported does not depend on timing.
fn walk_and_replay(pool: &Pool, control: &Control) -> Result<(Walked, Replayed)> {
    let Control { cb, geo, hint, .. } = control;
    std::thread::scope(|scope| {
        let (batches, arrivals) = std::sync::mpsc::channel::<Vec<Fill>>();
        let walker = scope.spawn(|| {
            let mut batch = Vec::with_capacity(PAGES_PER_BATCH);
            let walked = walk_pages(pool, cb, *geo, *hint, |fill| {
                batch.push(fill);
                if batch.len() == PAGES_PER_BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(PAGES_PER_BATCH));
                    // A closed channel means the replay stopped at an error: the
                    // walk and the checksums still decide what is reported.
                    let _ = batches.send(full);
                }
            });
            if !batch.is_empty() {
                let _ = batches.send(batch);
            }
            // Ends the replay's loop below.
            drop(batches);
            let walked = walked?;
            walk_records(pool, &walked.filled, true, |_, _, _, _| Ok(()))?;
            Ok(walked)
        });
        let mut index: IndexBuilder<Loc> = IndexBuilder::default();
        let mut fragments = Fragments::new();
        let mut replayed = Ok(());
        for batch in arrivals {
            replayed = walk_records(pool, &batch, false, |rec, off, page, at| {
                replay(&mut index, &mut fragments, rec, off, page, at)
            });
            if replayed.is_err() {
                break;
            }
        }
        // The tree is built while the walker may still be verifying checksums; a
        // bad one discards it.
        let built = replayed.map(|()| {
            let (last_index, versions) = (index.last_index(), index.versions());
            (last_index, versions, index.finish())
        });
        let walked: Result<Walked> = walker
            .join()
            .unwrap_or_else(|_| Err(corrupt("the page-list walker panicked".into())));
        walked.and_then(|w| built.map(|b| (w, b)))
    })
}

/// The store's DRAM state from what the walk found (every page it did not reach is
/// free), and what [`settle`] must write; logs the recovery, `started` then.
fn assemble(
    pool: Pool,
    opts: &StoreOptions,
    control: Control,
    walked: Walked,
    (last_index, versions, index): Replayed,
    started: std::time::Instant,
) -> (Shared, Settle) {
    let Control {
        cb_ptr,
        geo,
        hint,
        epoch,
        hard,
        ..
    } = control;
    let Walked {
        filled,
        visited,
        tail,
    } = walked;
    let pages: VecDeque<u32> = filled.iter().map(|f| f.page).collect();
    let mut gens = vec![0u64; geo.page_count as usize];
    for f in &filled {
        gens[f.page as usize] = f.gen;
    }
    let settle = Settle {
        epoch,
        spans: settle_spans(&filled, hint),
    };

    let free: Vec<u32> = (0..geo.page_count)
        .rev()
        .filter(|&p| !visited[p as usize])
        .collect();
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
        hint,
        sealed: Vec::new(),
        pages,
        free,
        gens,
        epoch,
        taken: 0,
        must_advance: true,
        unsynced: 0,
        last_index,
        sync_seq: 0,
        truncated_to: u64::MAX,
        buf: Vec::with_capacity(256),
        staged: Default::default(),
        found: Vec::new(),
    };
    let shared = Shared {
        pool,
        cb: cb_ptr,
        geo,
        opts: opts.clone(),
        tail: Mutex::new(t),
        index: RwLock::new(index),
        gc_gate: RwLock::new(()),
        compaction: Mutex::new(()),
        sync_lock: Mutex::new(()),
        hard: Mutex::new(hard),
        durable_index: AtomicU64::new(last_index),
        syncs: AtomicU64::new(0),
    };
    (shared, settle)
}

/// One page of the list as recovery found it.
#[derive(Clone, Copy, Debug)]
struct Fill {
    /// The page.
    page: u32,
    /// Its pool offset.
    base: u64,
    /// How far its records reach.
    end: u32,
    /// Its generation.
    gen: u64,
}

/// Pages the walker hands to the replay at a time (a channel message per batch).
const PAGES_PER_BATCH: usize = 32;

/// What following the page list found.
struct Walked {
    /// The list's pages, in list order.
    filled: Vec<Fill>,
    /// Which pages are on the list (the others are free).
    visited: Vec<bool>,
    /// Where the list ends.
    tail: Pos,
}

/// Follows the page list from `cb.head`, checking each header, and hands every page
/// to `found` in list order: up to the `hint` page every page must be sealed; from
/// the hint on, each page's records are read while intact, and a sealed page's link
/// is followed only if they reach its seal's fill.
fn walk_pages(
    pool: &Pool,
    cb: &ControlBlock,
    geo: Geometry,
    hint: Pos,
    mut found: impl FnMut(Fill),
) -> Result<Walked> {
    let mut visited = vec![false; geo.page_count as usize];
    let mut filled = Vec::new();
    let mut page = (cb.head - 1) as u32;
    let head: PageHeader = pool.read(PPtr::from_offset(geo.page_off(page)))?;
    let mut gen = head.gen;
    if gen == 0 {
        return Err(corrupt(format!("head page {page} has no generation")));
    }
    let mut past_hint = false;
    loop {
        if std::mem::replace(&mut visited[page as usize], true) {
            return Err(corrupt(format!("the page list loops back to page {page}")));
        }
        let base = geo.page_off(page);
        let header: PageHeader = pool.read(PPtr::from_offset(base))?;
        let seal = header.seal_of(gen);
        if let Some((used, next, _)) = seal {
            if used < PAGE_HEADER || used > cb.page_size || next >= geo.page_count {
                return Err(corrupt(format!(
                    "page {page}: seal (fill {used}, next {next}) out of range"
                )));
            }
        }
        let here = |end| Fill {
            page,
            base,
            end,
            gen,
        };
        if !past_hint && page != hint.page {
            let Some((used, next, next_gen)) = seal else {
                return Err(corrupt(format!(
                    "page {page} ends the list (no intact seal) before the durable tail page {}",
                    hint.page
                )));
            };
            filled.push(here(used));
            found(here(used));
            (page, gen) = (next, next_gen);
            continue;
        }
        let from = if past_hint { PAGE_HEADER } else { hint.off };
        past_hint = true;
        let limit = seal.map_or(cb.page_size, |(used, _, _)| used);
        if from > limit {
            return Err(corrupt(format!(
                "page {page}: the durable tail {from} lies past the seal's fill {limit}"
            )));
        }
        let bytes = pool.bytes(base, u64::from(cb.page_size))?;
        let end = valid_end(bytes, gen, from, limit);
        if let Some(durable) = header.durable_of(gen) {
            if end < durable {
                return Err(corrupt(format!(
                    "file offset {} (page {page} offset {end}): the record there is damaged, before offset {durable} a sync made durable",
                    base + u64::from(end)
                )));
            }
        }
        filled.push(here(end));
        found(here(end));
        match seal {
            Some((used, next, next_gen)) if end == used => (page, gen) = (next, next_gen),
            _ => {
                return Ok(Walked {
                    filled,
                    visited,
                    tail: Pos { page, off: end },
                })
            }
        }
    }
}

/// Decodes every record of `pages` in order, verifying checksums if `verify`, and
/// hands each to `each` with its pool offset, page and offset in the page.
fn walk_records(
    pool: &Pool,
    pages: &[Fill],
    verify: bool,
    mut each: impl FnMut(&crate::storage::record::Record<'_>, u64, u32, usize) -> Result<()>,
) -> Result<()> {
    for f in pages {
        let seed = verify.then_some(f.gen);
        for_each_record(pool, f.page, f.base, f.end, seed, |rec, off, at| {
            each(rec, off, f.page, at)
        })?;
    }
    Ok(())
}

/// What [`settle`] writes once a recovered store is accepted.
pub(crate) struct Settle {
    /// The epoch of this run.
    epoch: u64,
    /// The pool ranges of the records found past the hint.
    spans: Vec<(u64, u64)>,
}

/// The pool ranges of the records in `filled` past the hint.
fn settle_spans(filled: &[Fill], hint: Pos) -> Vec<(u64, u64)> {
    let from_hint = filled.iter().skip_while(|f| f.page != hint.page);
    from_hint
        .filter_map(|f| {
            let from = if f.page == hint.page { hint.off } else { 0 };
            (f.end > from).then(|| (f.base + u64::from(from), u64::from(f.end - from)))
        })
        .collect()
}

/// Makes the recovered store safe to append to, with one fence: the next epoch (no
/// generation of this run was used before) and every record found past the hint
/// (durable from now on, whatever the page cache held). The first write to the
/// pool of an open.
pub(crate) fn settle(pool: &Pool, cb: PPtr<ControlBlock>, settle: &Settle) -> Result<()> {
    let at = cb.offset() + field::EPOCH;
    // SAFETY: the store is not shared yet: recovery is the only user of the pool.
    unsafe { pool.write_bytes_shared(at, &settle.epoch.to_le_bytes())? };
    persist::flush(pool, Site::SettleFlush, at, 8)?;
    for &(off, len) in &settle.spans {
        persist::flush(pool, Site::SettleFlush, off, len)?;
    }
    persist::fence(pool, Site::SettleFence)?;
    Ok(())
}

/// Applies one record, found at pool offset `off`, to the index.
/// The fragment records the replay has met and no `PutLarge` has claimed yet:
/// pool offset to (entry index, value bytes).
type Fragments = std::collections::HashMap<u64, (u64, u64)>;

/// Checks a `PutLarge`'s table against the fragments met before it (a large value
/// whose table names a record that is not one of its fragments, or whose
/// fragments do not add up to its length, cannot be read: it is damage, found at
/// open rather than at the first read) and claims them.
fn claim_fragments(
    fragments: &mut Fragments,
    rec: &crate::storage::record::Record<'_>,
    place: &dyn Fn() -> String,
) -> Result<()> {
    let (total, offsets) =
        super::large::decode_table(rec.value).map_err(|e| corrupt(format!("{}: {e}", place())))?;
    let mut sum = 0u64;
    for off in &offsets {
        match fragments.get(off) {
            Some(&(index, len)) if index == rec.index => sum += len,
            _ => {
                return Err(corrupt(format!(
                    "{}: entry {}'s large value names offset {off}, not one of its fragments",
                    place(),
                    rec.index
                )))
            }
        }
    }
    if sum != total {
        return Err(corrupt(format!(
            "{}: entry {}'s fragments hold {sum} bytes of a {total}-byte value",
            place(),
            rec.index
        )));
    }
    for off in &offsets {
        fragments.remove(off);
    }
    Ok(())
}

fn replay(
    index: &mut IndexBuilder<Loc>,
    fragments: &mut Fragments,
    rec: &crate::storage::record::Record<'_>,
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
        // A piece of the `PutLarge` that follows it (or of one a crash cut off).
        Kind::Fragment => {
            fragments.insert(off, (rec.index, rec.value.len() as u64));
            return Ok(());
        }
        _ => {}
    }
    if rec.kind == Kind::PutLarge {
        claim_fragments(fragments, rec, &place)?;
    }
    match rec.kind {
        Kind::Base | Kind::Rollback | Kind::HardState | Kind::Fragment => {}
        Kind::Noop if rec.index <= base => {}
        Kind::Put | Kind::PutLarge | Kind::Delete if rec.index <= base => {
            // A version kept by compaction or installed from a snapshot.
            index.insert_old(
                vkey(rec.key, rec.index),
                Loc::new(off, rec.kind == Kind::Delete),
            );
        }
        Kind::Put | Kind::PutLarge | Kind::Delete | Kind::Noop => {
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

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::storage::list::{ListOptions, ListStore};
    use crate::storage::record::HEADER_LEN;
    use crate::storage::store::{Op, Store};

    const PAGE: u32 = 256;
    const RECORDS: u64 = 400;

    fn opts() -> ListOptions {
        ListOptions {
            page_size: PAGE,
            ..ListOptions::default()
        }
    }

    /// A closed store of [`RECORDS`] puts on 256-byte pages (far more pages than
    /// one batch of the walker), its file's bytes, its pages' file offsets in list
    /// order, and the control block's `head`.
    fn fixture(dir: &Path) -> (PathBuf, Vec<u8>, Vec<u64>, u64) {
        let path = dir.join("r.pool");
        let s = ListStore::create(&path, 256 * 1024, &opts()).expect("create");
        for i in 1..=RECORDS {
            let key = format!("key{i}");
            let op = Op::Put {
                key: key.as_bytes(),
                value: b"value",
            };
            s.append(i, 1, op).expect("append");
        }
        let pool = s.pool();
        let cb: ControlBlock = pool
            .read(pool.root().expect("root"))
            .expect("control block");
        // The tail page is the one not sealed yet.
        let mut pages = Vec::new();
        let mut next = cb.head;
        while next != 0 {
            let off = cb.pages_off + (next - 1) * u64::from(cb.page_size);
            pages.push(off);
            let header: PageHeader = pool.read(PPtr::from_offset(off)).expect("header");
            next = u64::from(header.next);
        }
        // Closing publishes the exact end as the hint: every page is covered.
        s.close().expect("close");
        let pristine = std::fs::read(&path).expect("read");
        (path, pristine, pages, cb.head)
    }

    /// Writes `value` at `at` into a page header of `bytes` (the header at `page`)
    /// and recomputes the seal's checksum, as a consistent but wrong seal.
    fn reseal(bytes: &mut [u8], page: usize, at: usize, value: &[u8]) {
        bytes[page + at..page + at + value.len()].copy_from_slice(value);
        let crc = crc32c::crc32c(&bytes[page..page + 24]);
        bytes[page + 24..page + 28].copy_from_slice(&crc.to_le_bytes());
    }

    /// Writes `damaged`, opens it, checks the open failed as `Corrupt` without
    /// writing to the file, and returns the message.
    fn open_damaged(path: &Path, damaged: &[u8]) -> String {
        std::fs::write(path, damaged).expect("write");
        let err = ListStore::open(path, &opts()).expect_err("the damage must be reported");
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
        assert_eq!(
            std::fs::read(path).expect("read"),
            damaged,
            "open wrote to a corrupt pool"
        );
        err.to_string()
    }

    /// Damage on the first page, on a page several walker batches in, and on the
    /// page before the tail is found whichever thread meets it: the walker (page
    /// links and fills, checksums) or the replay (records in the wrong order).
    #[test]
    fn damage_anywhere_in_the_list_is_reported_and_nothing_is_written() {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let (path, pristine, pages, head) = fixture(dir.path());
        assert!(
            pages.len() > 2 * PAGES_PER_BATCH,
            "{} pages: too few to span several batches",
            pages.len()
        );
        let targets = [0, PAGES_PER_BATCH + 8, pages.len() - 2];
        for &t in &targets {
            let page = pages[t] as usize;
            let first_record = page + PAGE_HEADER as usize;

            // A flipped key byte: the checksum catches it.
            let mut bad = pristine.clone();
            bad[first_record + HEADER_LEN] ^= 0x20;
            let msg = open_damaged(&path, &bad);
            assert!(msg.contains("checksum"), "page #{t}: {msg}");

            // A link back to the head page (`next` holds a page number plus one),
            // the head's generation with it, under an intact seal.
            let mut bad = pristine.clone();
            let head_off = pages[0] as usize;
            let head_gen: [u8; 8] = pristine[head_off..head_off + 8]
                .try_into()
                .expect("8 bytes");
            reseal(&mut bad, page, 8, &(head as u32).to_le_bytes());
            reseal(&mut bad, page, 16, &head_gen);
            let msg = open_damaged(&path, &bad);
            assert!(msg.contains("loops back"), "page #{t}: {msg}");

            // A torn seal before the durable tail.
            let mut bad = pristine.clone();
            bad[page + 12] ^= 1;
            let msg = open_damaged(&path, &bad);
            assert!(msg.contains("no intact seal"), "page #{t}: {msg}");

            // A fill past the end of the page, under an intact seal.
            let mut bad = pristine.clone();
            reseal(&mut bad, page, 12, &(PAGE + 8).to_le_bytes());
            let msg = open_damaged(&path, &bad);
            assert!(msg.contains("out of range"), "page #{t}: {msg}");

            // A record moved out of order, with its checksum recomputed: only the
            // replay can tell.
            let mut bad = pristine.clone();
            let header = &mut bad[first_record..first_record + HEADER_LEN];
            let index = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
            header[8..16].copy_from_slice(&(index + 1000).to_le_bytes());
            let key_len = usize::from(u16::from_le_bytes([header[24], header[25]]));
            let value_len = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
            let body = HEADER_LEN + key_len + value_len;
            let gen = u64::from_le_bytes(bad[page..page + 8].try_into().expect("8 bytes"));
            let crc =
                crate::storage::record::checksum(gen, &bad[first_record + 4..first_record + body]);
            bad[first_record..first_record + 4].copy_from_slice(&crc.to_le_bytes());
            let msg = open_damaged(&path, &bad);
            assert!(!msg.contains("checksum"), "page #{t}: {msg}");
        }
        std::fs::write(&path, &pristine).expect("restore");
        let s = ListStore::open(&path, &opts()).expect("the undamaged pool opens");
        assert_eq!(s.last_index(), RECORDS);
    }
}
