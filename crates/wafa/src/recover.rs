//! Formatting a heap, and opening one: rebuilding the DRAM state by scanning the
//! kind table and each divided page's bitmap, repairing orphan run tails, and
//! finishing or discarding an interrupted `alloc_publish`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pmem_core::{AtomicPPtr, PPtr, Pool};
use zerocopy::IntoBytes;

use crate::error::WafaError;
use crate::heap::{Geometry, Inner, ReformMode, Wafa, WafaOptions, MAX_SMALL};
use crate::layout::{
    Intent, IntentKind, Kind, RegionHeader, INTENT_OFF, KINDS_OFF, MAGIC, META_OFF, PAGE, UNIT,
};
use crate::reform::Daemon;
use crate::segment::{max_segment, DATA_UNITS};
use crate::state::{unit_mask, Page, State, META_BIT};

pub(crate) fn geometry(region_off: u64, region_len: u64) -> Option<Geometry> {
    let end = region_off.checked_add(region_len)?;
    let layout = |pages: u64| -> Option<u64> {
        // The kind table (one byte per page) follows the header and intent; the
        // pages start at the next page boundary.
        let kinds_end = region_off.checked_add(KINDS_OFF + pages.div_ceil(64) * 64)?;
        let first_page = kinds_end.div_ceil(PAGE) * PAGE;
        (first_page.checked_add(pages.checked_mul(PAGE)?)? <= end).then_some(first_page)
    };
    // Each page costs PAGE + 1 bytes; alignment costs under two pages more, so the
    // estimate is at most a few pages too high.
    let mut pages = region_len.checked_sub(KINDS_OFF)? / (PAGE + 1) + 1;
    for _ in 0..8 {
        if let Some(first_page) = layout(pages) {
            let pages = u32::try_from(pages).ok()?;
            return (pages > 0).then_some(Geometry {
                region_off,
                pages,
                first_page,
                kinds_off: region_off + KINDS_OFF,
            });
        }
        pages = pages.checked_sub(1)?;
    }
    None
}

fn corrupt(reason: impl Into<String>) -> WafaError {
    WafaError::Corrupt {
        reason: reason.into(),
    }
}

fn new_inner(pool: Arc<Pool>, geo: Geometry, opts: WafaOptions, state: State) -> Arc<Inner> {
    Arc::new(Inner::new(pool, geo, opts, state))
}

impl Wafa {
    /// Wraps the shared state, starting the reform daemon if the options ask for it.
    fn start(inner: Arc<Inner>) -> Result<Wafa, WafaError> {
        let daemon = match inner.opts.reform {
            ReformMode::Daemon { .. } => Some(Daemon::start(&inner).map_err(|e| {
                WafaError::Pool(pmem_core::PoolError::Io {
                    op: "spawn reform thread",
                    path: Default::default(),
                    source: e,
                })
            })?),
            _ => None,
        };
        Ok(Wafa { inner, daemon })
    }

    /// Formats the pool's whole heap as a WAFA heap.
    ///
    /// # Safety
    /// While the allocator lives, the heap is accessed only through it and each
    /// block only by its owner.
    pub unsafe fn format(pool: Arc<Pool>, opts: WafaOptions) -> Result<Wafa, WafaError> {
        let heap = pool.heap();
        let geo = geometry(heap.start, heap.end - heap.start).ok_or(WafaError::TooSmall {
            len: heap.end - heap.start,
        })?;
        let header = RegionHeader {
            magic: MAGIC,
            pages: u64::from(geo.pages),
            first_page: geo.first_page,
            region_off: geo.region_off,
            region_len: heap.end - heap.start,
            reserved: [0; 2],
            checksum: 0,
        }
        .sealed();
        let zero_kinds = vec![Kind::Free as u8; geo.pages as usize];
        // SAFETY: the caller gives the heap to the allocator.
        unsafe {
            pool.write_bytes_shared(geo.region_off + INTENT_OFF, Intent::default().as_bytes())?;
            pool.write_bytes_shared(geo.kinds_off, &zero_kinds)?;
        }
        pool.persist(geo.region_off + INTENT_OFF, 64 + zero_kinds.len() as u64)?;
        // The header last: a crash before it leaves no heap.
        // SAFETY: as above.
        unsafe { pool.write_bytes_shared(geo.region_off, header.as_bytes())? };
        pool.persist(geo.region_off, 64)?;
        let state = State::new(geo.pages);
        Self::start(new_inner(pool, geo, opts, state))
    }

    /// Opens the WAFA heap of the pool: rebuilds the buckets and the metadata cache
    /// from the page metadata, frees orphan run tails, and finishes an interrupted
    /// `alloc_publish`. Writes only those repairs.
    ///
    /// # Safety
    /// As for [`Wafa::format`].
    pub unsafe fn open(pool: Arc<Pool>, opts: WafaOptions) -> Result<Wafa, WafaError> {
        let geo = read_region(&pool)?;
        let kinds = pool.bytes(geo.kinds_off, u64::from(geo.pages))?.to_vec();
        let mut state = State::new(geo.pages);
        let mut orphans = Vec::new();
        let mut p = 0u32;
        while p < geo.pages {
            let kind = Kind::from_byte(kinds[p as usize])
                .ok_or_else(|| corrupt(format!("page {p} has kind {}", kinds[p as usize])))?;
            match kind {
                Kind::Free => p += 1,
                Kind::Divided => {
                    let [bitmap, info]: [u64; 2] =
                        pool.read(PPtr::from_offset(geo.page_off(p) + META_OFF))?;
                    if bitmap & META_BIT == 0 {
                        return Err(corrupt(format!("divided page {p} has no metadata bit")));
                    }
                    state.set_free(p, false);
                    state.pages[p as usize] = Page::Divided {
                        bitmap,
                        c_fu: 0,
                        s_ms: 0,
                        pos: 0,
                    };
                    // The clock as last written steers where the next run starts (a
                    // stale or torn value only changes that, never correctness).
                    let clock = ((info >> 16) & 0xff) as u32;
                    state.reform_page(p, clock, false, true);
                    p += 1;
                }
                Kind::RunHead => {
                    let tails = kinds[p as usize + 1..]
                        .iter()
                        .take_while(|&&k| k == Kind::RunTail as u8)
                        .count() as u32;
                    let pages = 1 + tails;
                    for q in p..p + pages {
                        state.set_free(q, false);
                        state.pages[q as usize] = if q == p {
                            Page::RunHead { pages }
                        } else {
                            Page::RunTail
                        };
                    }
                    p += pages;
                }
                Kind::RunTail => {
                    orphans.push(p);
                    p += 1;
                }
            }
        }
        let inner = new_inner(pool, geo, opts, state);
        {
            let mut s = inner.lock();
            if !orphans.is_empty() {
                tracing::info!(count = orphans.len(), "freeing orphan run pages");
                for &q in &orphans {
                    inner.write_kinds(q, &[Kind::Free as u8])?;
                }
                inner.pool.drain()?;
            }
            redo_intent(&inner, &mut s)?;
        }
        Self::start(inner)
    }
}

/// Finishes an intact intent (idempotently) or discards a torn one.
fn redo_intent(inner: &Inner, s: &mut State) -> Result<(), WafaError> {
    let off = inner.geo.region_off + INTENT_OFF;
    let intent = inner.pool.read(PPtr::<Intent>::from_offset(off))?;
    if intent.is_none() {
        return Ok(());
    }
    if intent.intact() == Some(IntentKind::AllocPublish) {
        let geo = inner.geo;
        let rel = intent
            .block
            .checked_sub(geo.first_page)
            .ok_or_else(|| corrupt("intent block before the pages"))?;
        let page =
            u32::try_from(rel / PAGE).map_err(|_| corrupt("intent block beyond the pages"))?;
        if page >= geo.pages || intent.extent == 0 {
            return Err(corrupt("intent block beyond the pages"));
        }
        inner
            .check_slot(intent.slot)
            .map_err(|e| corrupt(format!("intent slot: {e}")))?;
        if intent.extent <= MAX_SMALL {
            let first = ((rel % PAGE) / UNIT) as u32;
            let units = intent.extent.div_ceil(UNIT) as u32;
            if rel % UNIT != 0 || first + units > DATA_UNITS {
                return Err(corrupt("intent names an impossible unit run"));
            }
            let bitmap = match s.pages[page as usize] {
                Page::Divided { bitmap, .. } => bitmap,
                Page::Free => META_BIT,
                _ => return Err(corrupt("intent names a unit run in a whole-page run")),
            };
            s.set_free(page, false);
            s.pages[page as usize] = Page::Divided {
                bitmap: bitmap | unit_mask(first, units),
                c_fu: 0,
                s_ms: 0,
                pos: 0,
            };
            let (_, after) = max_segment(bitmap, first + units);
            s.reform_page(page, after, false, true);
            inner.write_meta(s, page)?;
            inner.pool.drain()?;
            inner.write_kinds(page, &[Kind::Divided as u8])?;
        } else {
            let pages = intent.extent.div_ceil(PAGE) as u32;
            if rel % PAGE != 0 || page + pages > geo.pages {
                return Err(corrupt("intent names an impossible page run"));
            }
            for q in page..page + pages {
                s.buckets.remove(q);
                s.set_free(q, false);
                s.pages[q as usize] = if q == page {
                    Page::RunHead { pages }
                } else {
                    Page::RunTail
                };
            }
            if pages > 1 {
                inner.write_kinds(page + 1, &vec![Kind::RunTail as u8; pages as usize - 1])?;
            }
            inner.write_kinds(page, &[Kind::RunHead as u8])?;
        }
        inner.pool.drain()?;
        // SAFETY: open is single-threaded; the publication being redone owns the slot.
        let slot = unsafe {
            inner
                .pool
                .get_shared(PPtr::<AtomicPPtr<u8>>::from_offset(intent.slot))?
        };
        slot.store(PPtr::from_offset(intent.block), Ordering::Release);
        inner.pool.persist(intent.slot, 8)?;
        tracing::info!(
            block = intent.block,
            slot = intent.slot,
            "redid an interrupted alloc_publish"
        );
    }
    inner.write_intent(&Intent::default())?;
    Ok(())
}

/// The magic of format 1, whose intent record had its own layout.
const FORMAT_1_MAGIC: [u8; 8] = *b"PMKWAFA1";

/// Reads and validates the region header at the start of `pool`'s heap (magic,
/// checksum, agreement with the heap's extent) and returns the heap's geometry.
/// Reads only: shared by [`Wafa::open`] and [`Wafa::inspect`].
pub(crate) fn read_region(pool: &Pool) -> Result<Geometry, WafaError> {
    let heap = pool.heap();
    let header = pool.read(PPtr::<RegionHeader>::from_offset(heap.start))?;
    if header.magic == FORMAT_1_MAGIC {
        return Err(corrupt(
            "a WAFA format-1 heap (its intent record predates the shared one): \
             reformat it with this version",
        ));
    }
    if header.magic != MAGIC {
        return Err(WafaError::NotFormatted { offset: heap.start });
    }
    if !header.valid() {
        return Err(corrupt("region header checksum mismatch"));
    }
    let geo = geometry(heap.start, heap.end - heap.start).ok_or(WafaError::TooSmall {
        len: heap.end - heap.start,
    })?;
    if header.region_off != heap.start
        || u64::from(geo.pages) != header.pages
        || geo.first_page != header.first_page
    {
        return Err(corrupt("region header does not match the pool's heap"));
    }
    Ok(geo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_fits() {
        let g = geometry(4096, 64 * 4096).expect("fits");
        assert_eq!(g.first_page, 8192);
        assert_eq!(g.pages, 63);
        assert!(g.first_page + u64::from(g.pages) * PAGE <= 4096 + 64 * 4096);
        assert!(geometry(4096, 100).is_none());
        for len in [64u64 << 20, 1 << 30, (1 << 30) + 12_345 * 64] {
            let g = geometry(4096, len).expect("large heaps fit");
            let end = 4096 + len;
            assert!(g.first_page + u64::from(g.pages) * PAGE <= end);
            // Maximal: one more page would not fit.
            assert!(
                g.first_page + u64::from(g.pages + 1) * PAGE > end
                    || g.first_page
                        != (4096 + KINDS_OFF + u64::from(g.pages + 1).div_ceil(64) * 64)
                            .div_ceil(PAGE)
                            * PAGE
            );
        }
    }
}
