//! Background compaction of the list (the thesis's collector and deduplication).
//!
//! The region compacted is the durable pages before the page of the `durable_tail`
//! hint (recovery must still reach the hint's page from the new head). A new
//! base index `b` is chosen no higher than the applied index and below every record
//! and rollback of the rest of the list, so every record left outside the region is a
//! log entry above `b`. Kept: every live entry above `b`, and for each key its visible
//! version at `b` unless it is a tombstone. Dropped: superseded versions, tombstones
//! at or below `b`, rolled-back entries, rollback and old base records.
//!
//! Steps, none of which blocks appends or reads for more than one short batch:
//! 1. plan from the region (immutable durable pages) and the index (read lock);
//! 2. write a base record `(b, term(b))` and the kept records into pages taken from
//!    the free list (new generations: the copies are re-checksummed for them), link
//!    the last to the first page of the rest, persist them;
//! 3. switch `head` to the new pages with one 8-byte store (persisted) — the commit
//!    point: a crash before it recovers the old list, after it the new one;
//! 4. remap the index to the copies in batches under its write lock (the pause);
//! 5. give the region's pages to the free list: no reader can hold a location in
//!    them any more (every location was replaced under the write lock).

use std::time::{Duration, Instant};

use zerocopy::IntoBytes;

use super::large;
use super::layout::{self, field, Loc, PageHeader, PAGE_HEADER};
use super::persist::{self, Site};
use super::Shared;
use crate::storage::error::{Result, StoreError};
use crate::storage::index::{vkey, VKey, Version as _};
use crate::storage::record::{decode_unverified, encoded_len, reseed, Kind, Record};
use crate::storage::store::CompactStats;
use crate::storage::sync::{lock, read, write};

/// Index entries remapped per write-lock hold.
const REMAP_BATCH: usize = 64;

/// A record of the region and what compaction does with it.
struct Planned {
    old: u64,
    index: u64,
    kind: Kind,
    key: Vec<u8>,
    len: usize,
    /// A `PutLarge`'s fragments: their offsets and encoded lengths, in order.
    fragments: Vec<(u64, usize)>,
}

/// Runs one compaction: the five steps of the module doc, in order.
pub(crate) fn compact(s: &Shared, limit: u64) -> Result<CompactStats> {
    let started = Instant::now();
    let _one = lock(&s.compaction);
    let _gate = write(&s.gc_gate);
    let mut stats = CompactStats::default();
    let done = |mut stats: CompactStats| {
        stats.total = started.elapsed();
        Ok(stats)
    };

    // 1. Plan: the region, the new base, the records kept, the fresh pages.
    let scan_started = Instant::now();
    let region = find_region(s)?;
    stats.max_pause = scan_started.elapsed();
    stats.examined = region.pages.len() as u64;
    if region.pages.is_empty() {
        return done(stats);
    }
    let Some((base, base_term)) = choose_base(s, region.rest_floor, limit) else {
        return done(stats);
    };
    let plan = plan_records(s, &region.pages, base)?;
    stats.records_dropped = plan.considered - plan.kept.len() as u64;
    stats.records_kept = plan.kept.len() as u64;
    let needed = pages_needed(s, &plan.kept);
    if needed >= region.pages.len() {
        tracing::debug!(
            needed,
            region = region.pages.len(),
            "compaction skipped: nothing to reclaim"
        );
        return done(stats);
    }
    let Some((fresh, rest_gen)) = take_fresh_pages(s, needed, region.rest_first)? else {
        return done(stats);
    };

    // 2. Write the new pages.
    let rest = (region.rest_first, rest_gen);
    let moved = match write_pages(s, &fresh, rest, base, base_term, &plan.kept) {
        Ok(m) => m,
        Err(e) => {
            // Nothing points at the fresh pages: give them back.
            lock(&s.tail).free.extend(fresh.iter().map(|&(p, _)| p));
            return Err(e);
        }
    };

    // 3. The commit point.
    switch_head(s, &fresh)?;

    // 4. Remap the index in short batches.
    let pause = remap_index(s, &plan, &moved, &region.pages, base);
    stats.max_pause = stats.max_pause.max(pause);

    // 5. Retire the region.
    let pause = retire_region(s, &region.pages, &fresh);
    stats.max_pause = stats.max_pause.max(pause);
    stats.freed = (region.pages.len() - fresh.len()) as u64;
    tracing::debug!(?stats, base, "compaction done");
    done(stats)
}

/// The pages a compaction may rewrite, and what it must know of the rest.
struct Region {
    /// The region's pages, in list order, with their generations.
    pages: Vec<(u32, u64)>,
    /// The first page of the rest of the list.
    rest_first: u32,
    /// No record or rollback of the rest lies at or below this index: the highest
    /// base the rest allows.
    rest_floor: u64,
}

/// Step 1, the region: the durable pages before the hint's page, less any page
/// that holds a fragment of a large value whose record lies in the rest.
fn find_region(s: &Shared) -> Result<Region> {
    let t = lock(&s.tail);
    let Some(pos) = t.pages.iter().position(|&p| p == t.hint.page) else {
        return Err(StoreError::Corrupt(
            "the durable tail hint's page is missing from the used list".into(),
        ));
    };
    // The rest starts at the hint's page, or earlier: a large value in the rest
    // may keep fragments in pages before it, and those stay too (repeated
    // until no page before the rest holds a fragment of a record in it).
    let mut floor = u64::MAX;
    let mut end = t.pages.len();
    let mut start = pos;
    while start < end {
        let mut first_fragment = start;
        for &p in t.pages.range(start..end) {
            let fill = if p == t.page {
                t.used
            } else {
                sealed_fill(s, p)?
            };
            for_each_record(s, p, fill, t.gens[p as usize], |rec, _| {
                floor = floor.min(match rec.kind {
                    Kind::Rollback => rec.index,
                    _ => rec.index.saturating_sub(1),
                });
                if rec.kind == Kind::PutLarge {
                    let (_, offsets) = large::decode_table(rec.value)?;
                    for off in offsets {
                        let page = s.geo.page_of(off);
                        // Searched from the rest backwards: fragments lie just
                        // before their record.
                        let back = t.pages.range(..start).rev().position(|&q| q == page);
                        if let Some(back) = back {
                            first_fragment = first_fragment.min(start - 1 - back);
                        }
                    }
                }
                Ok(())
            })?;
        }
        (start, end) = (first_fragment, start);
    }
    let pages = t
        .pages
        .range(..start)
        .map(|&p| (p, t.gens[p as usize]))
        .collect();
    Ok(Region {
        pages,
        rest_first: t.pages[start],
        rest_floor: floor,
    })
}

/// Step 1, the new base `(b, term(b))`: no higher than the applied index, the
/// caller's `limit` ([`crate::storage::store::Store::compact_to`]) and below the
/// rest's floor; `None` (compaction skipped) if its term is no longer known.
fn choose_base(s: &Shared, rest_floor: u64, limit: u64) -> Option<(u64, u64)> {
    let index = read(&s.index);
    let base = index
        .applied()
        .min(rest_floor)
        .min(limit)
        .max(index.base().0);
    let term = index.term_at(base);
    if term.is_none() {
        tracing::debug!(
            base,
            "compaction skipped: the base index's term is no longer known"
        );
    }
    term.map(|term| (base, term))
}

/// What a compaction keeps of its region and what it drops from the index.
struct Plan {
    /// The records copied, in list order: the versions visible at the base, then
    /// the entries above it.
    kept: Vec<Planned>,
    /// Versions at or below the base that are not kept: removed from the index.
    dropped_versions: Vec<(VKey, u64)>,
    /// Records of the region looked at (fragments aside).
    considered: u64,
}

/// Step 1, the records kept. At or below the base: each key's visible version
/// there (from the index). Above it: the entries the region's own replay leaves
/// standing at its end, live or later rolled back by a record in the rest of the
/// list (that rollback must still find them, in order).
fn plan_records(s: &Shared, region: &[(u32, u64)], base: u64) -> Result<Plan> {
    let mut kept = Vec::new();
    let mut suffix: Vec<Planned> = Vec::new();
    let mut dropped_versions = Vec::new();
    let mut considered = 0u64;
    for &(p, gen) in region {
        for_each_record(s, p, sealed_fill(s, p)?, gen, |rec, off| {
            if rec.kind == Kind::Fragment {
                // Copied with its `PutLarge`, if that is kept.
                return Ok(());
            }
            considered += 1;
            let fragments = if rec.kind == Kind::PutLarge {
                large::fragment_lens(s, rec.index, rec.value)?
            } else {
                Vec::new()
            };
            let planned = || Planned {
                old: off,
                index: rec.index,
                kind: rec.kind,
                key: rec.key.to_vec(),
                len: encoded_len(rec.key.len(), rec.value.len()),
                fragments,
            };
            match rec.kind {
                Kind::Rollback => {
                    while suffix.last().is_some_and(|e| e.index > rec.index) {
                        suffix.pop();
                    }
                }
                Kind::Put | Kind::PutLarge | Kind::Delete | Kind::Noop if rec.index > base => {
                    suffix.push(planned())
                }
                Kind::Put | Kind::PutLarge | Kind::Delete if visible_at_base(s, rec, off, base) => {
                    kept.push(planned())
                }
                Kind::Put | Kind::PutLarge | Kind::Delete => {
                    dropped_versions.push((vkey(rec.key, rec.index), off))
                }
                _ => {}
            }
            Ok(())
        })?;
    }
    kept.append(&mut suffix);
    Ok(Plan {
        kept,
        dropped_versions,
        considered,
    })
}

/// Step 1, the pages the base record and the kept records fill.
fn pages_needed(s: &Shared, kept: &[Planned]) -> usize {
    let page_room = (s.geo.page_size - PAGE_HEADER) as usize;
    let mut needed = 1usize;
    let mut fill = encoded_len(0, 0);
    for k in kept {
        for len in k.fragments.iter().map(|&(_, len)| len).chain([k.len]) {
            if fill + len > page_room {
                needed += 1;
                fill = 0;
            }
            fill += len;
        }
    }
    needed
}

/// Fresh pages with their generations, and the generation of the rest's first page.
type Fresh = (Vec<(u32, u64)>, u64);

/// Step 2's pages: `needed` pages off the free list, each with a new generation,
/// and the generation of `rest_first`; `None` (compaction skipped) if the free
/// list is too short.
fn take_fresh_pages(s: &Shared, needed: usize, rest_first: u32) -> Result<Option<Fresh>> {
    let mut t = lock(&s.tail);
    if t.free.len() < needed {
        tracing::debug!(
            needed,
            free = t.free.len(),
            "compaction skipped: not enough free pages"
        );
        return Ok(None);
    }
    let at = t.free.len() - needed;
    let pages = t.free.split_off(at);
    let mut fresh = Vec::with_capacity(pages.len());
    for &p in &pages {
        match s.take_gen(&mut t) {
            Ok(gen) => {
                t.gens[p as usize] = gen;
                fresh.push((p, gen));
            }
            Err(e) => {
                t.free.extend_from_slice(&pages);
                return Err(e);
            }
        }
    }
    Ok(Some((fresh, t.gens[rest_first as usize])))
}

/// Step 3, the commit point: `head` names the first fresh page (one persisted
/// 8-byte store).
fn switch_head(s: &Shared, fresh: &[(u32, u64)]) -> Result<()> {
    s.store_control_word(
        field::HEAD,
        u64::from(fresh[0].0) + 1,
        (Site::HeadFlush, Site::HeadFence),
    )?;
    s.pool.label("compaction head switched");
    Ok(())
}

/// Step 4: points the index at the copies (`moved`: position in `plan.kept`, new
/// offset) and drops the versions not kept, in batches of [`REMAP_BATCH`] under its
/// write lock, then forgets the region's entry locations at or below the base;
/// returns the longest hold of the lock.
fn remap_index(
    s: &Shared,
    plan: &Plan,
    moved: &[(usize, u64)],
    region: &[(u32, u64)],
    base: u64,
) -> Duration {
    let mut max_pause = Duration::ZERO;
    for chunk in moved.chunks(REMAP_BATCH) {
        let held = Instant::now();
        let mut index = write(&s.index);
        for &(i, new) in chunk {
            let k = &plan.kept[i];
            if matches!(k.kind, Kind::Put | Kind::PutLarge | Kind::Delete) {
                let tomb = k.kind == Kind::Delete;
                index.remap(
                    &vkey(&k.key, k.index),
                    |v| v.offset() == k.old,
                    Some(Loc::new(new, tomb)),
                );
            }
            index.remap_entry(k.index, k.old, new);
        }
        drop(index);
        max_pause = max_pause.max(held.elapsed());
    }
    for chunk in plan.dropped_versions.chunks(REMAP_BATCH) {
        let held = Instant::now();
        let mut index = write(&s.index);
        for (vk, old) in chunk {
            index.remap(vk, |v| v.offset() == *old, None);
        }
        drop(index);
        max_pause = max_pause.max(held.elapsed());
    }
    // Entries at or below the base whose records stay in the region were
    // dropped: their locations must not be read once the pages are recycled.
    let pages_off = s.geo.pages_off;
    let page_size = u64::from(s.geo.page_size);
    let region_set: std::collections::HashSet<u32> = region.iter().map(|&(p, _)| p).collect();
    let in_region = |loc: u64| {
        let page = loc.saturating_sub(pages_off) / page_size;
        u32::try_from(page).is_ok_and(|p| region_set.contains(&p))
    };
    let mut index = write(&s.index);
    index.forget_entry_locations(base, in_region);
    index.raise_floor(base);
    max_pause
}

/// Step 5: the fresh pages replace the region at the front of the used list, and
/// the region's pages go to the free list (no reader can hold a location in them
/// any more: every location was replaced under the index's write lock); returns
/// how long the tail's lock was held.
fn retire_region(s: &Shared, region: &[(u32, u64)], fresh: &[(u32, u64)]) -> Duration {
    let held = Instant::now();
    let mut t = lock(&s.tail);
    for _ in 0..region.len() {
        t.pages.pop_front();
    }
    for &(p, _) in fresh.iter().rev() {
        t.pages.push_front(p);
    }
    t.free.extend(region.iter().rev().map(|&(p, _)| p));
    held.elapsed()
}

/// Whether a put or delete at or below `base` is its key's visible version at `base`
/// (and not a tombstone, which compaction drops along with what it hides).
fn visible_at_base(s: &Shared, rec: &Record<'_>, off: u64, base: u64) -> bool {
    read(&s.index)
        .version_at(rec.key, base)
        .is_some_and(|(at, v)| at == rec.index && v.offset() == off && !v.is_tombstone())
}

/// The fill of a sealed page (final: written when the page was sealed).
fn sealed_fill(s: &Shared, page: u32) -> Result<u32> {
    let header: PageHeader = s
        .pool
        .read(pmem_core::PPtr::from_offset(s.geo.page_off(page)))?;
    Ok(header.used)
}

/// Calls `f` on each record of `page` (generation `gen`) up to `end`, with its pool
/// offset.
fn for_each_record(
    s: &Shared,
    page: u32,
    end: u32,
    gen: u64,
    mut f: impl FnMut(&Record<'_>, u64) -> Result<()>,
) -> Result<()> {
    let end = end.min(s.geo.page_size);
    layout::for_each_record(
        &s.pool,
        page,
        s.geo.page_off(page),
        end,
        Some(gen),
        |rec, off, _| f(rec, off),
    )
}

/// Fills `fresh` (pages with their generations) with the base record and the kept
/// records, each checksummed for the page it lands in, and links the last page to
/// `rest` (the first page of the rest of the list, with its generation); returns,
/// per kept record, its position in `kept` and its new offset. Persists the pages.
fn write_pages(
    s: &Shared,
    fresh: &[(u32, u64)],
    rest: (u32, u64),
    base: u64,
    base_term: u64,
    kept: &[Planned],
) -> Result<Vec<(usize, u64)>> {
    let mut moved = Vec::with_capacity(kept.len());
    let mut page_i = 0;
    let mut used = PAGE_HEADER;
    let mut buf = Vec::with_capacity(64);
    Record::bare(Kind::Base, base, base_term).encode_into(&mut buf)?;
    let mut fills = Vec::with_capacity(fresh.len());
    let mut put = |bytes: &mut [u8], page_i: &mut usize, used: &mut u32| -> Result<u64> {
        if *used as usize + bytes.len() > s.geo.page_size as usize {
            seal(s, fresh, *page_i, *used, rest)?;
            fills.push(*used);
            *page_i += 1;
            *used = PAGE_HEADER;
        }
        let &(page, gen) = fresh.get(*page_i).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "compaction planned {} pages, needs more",
                fresh.len()
            ))
        })?;
        reseed(bytes, gen)?;
        let off = s.geo.page_off(page) + u64::from(*used);
        // SAFETY: fresh pages came off the free list: nothing references them and only
        // this compaction (serialised by its mutex) writes them.
        unsafe { s.pool.write_bytes_shared(off, bytes)? };
        *used += bytes.len() as u32;
        Ok(off)
    };
    put(&mut buf, &mut page_i, &mut used)?;
    for (i, k) in kept.iter().enumerate() {
        // The region's pages are immutable: copy the record's bytes, checksummed
        // again for the generation of the page they land in.
        let mut copy = s.pool.bytes(k.old, k.len as u64)?.to_vec();
        if k.kind == Kind::PutLarge {
            // Its fragments first, then a new table naming where they went.
            let mut offsets = Vec::with_capacity(k.fragments.len());
            for &(old, len) in &k.fragments {
                let mut piece = s.pool.bytes(old, len as u64)?.to_vec();
                offsets.push(put(&mut piece, &mut page_i, &mut used)?);
            }
            let (rec, _) = decode_unverified(&copy, &|| format!("record at offset {}", k.old))?;
            let (total, _) = large::decode_table(rec.value)?;
            let table = large::encode_table(total, &offsets);
            let mut fresh_rec = Vec::with_capacity(copy.len());
            Record {
                value: &table,
                ..rec
            }
            .encode_into(&mut fresh_rec)?;
            copy = fresh_rec;
        }
        let new = put(&mut copy, &mut page_i, &mut used)?;
        moved.push((i, new));
    }
    seal(s, fresh, page_i, used, rest)?;
    fills.push(used);
    if page_i + 1 != fresh.len() {
        return Err(StoreError::Corrupt(format!(
            "compaction planned {} pages and filled {}",
            fresh.len(),
            page_i + 1
        )));
    }
    for (&(p, _), &fill) in fresh.iter().zip(&fills) {
        persist::flush(
            &s.pool,
            Site::CompactFlush,
            s.geo.page_off(p),
            u64::from(fill),
        )?;
    }
    persist::fence(&s.pool, Site::CompactFence)?;
    Ok(moved)
}

/// Writes the header of fresh page `i`: its generation, its fill and the next page
/// (the following fresh page, or the first page of the rest of the list) with that
/// page's generation.
fn seal(s: &Shared, fresh: &[(u32, u64)], i: usize, used: u32, rest: (u32, u64)) -> Result<()> {
    let (next, next_gen) = fresh.get(i + 1).copied().unwrap_or(rest);
    let (page, gen) = fresh[i];
    let h = PageHeader::sealed(gen, used, next, next_gen);
    // SAFETY: as in `write_pages`: the page is compaction's own until `head` links it.
    unsafe {
        s.pool
            .write_bytes_shared(s.geo.page_off(page), h.as_bytes())?
    };
    Ok(())
}
