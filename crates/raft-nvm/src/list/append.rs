//! Appending records and group durability.
//!
//! The [`Tail`] (under its mutex) is the writer's state: the tail page and its fill,
//! the durable position, the pages filled since the last sync, the used-page order,
//! each page's generation and the DRAM free list. Record bytes always go where no
//! reader can look yet: after the tail page's last published record, or into a page
//! taken from the free list.
//!
//! A sync is one fence: the records and sealed headers written since the previous
//! sync and the `durable_tail` hint (set to where the previous sync ended) are
//! flushed together and fenced once (one `msync` in msync mode). Recovery finds the
//! end by reading past the hint while the records' generation-seeded checksums hold
//! (see [`super::layout`]).

use std::collections::VecDeque;

use zerocopy::IntoBytes;

use super::layout::{field, Loc, PageHeader, Pos, DURABLE_WORD, PAGE_HEADER};
use super::persist::{self, Site};
use super::Shared;
use crate::error::{Result, StoreError};
use crate::index::vkey;
use crate::record::{encoded_len, Kind, Record};
use crate::store::Op;
use crate::sync::{lock, write, Ordering};

/// The writer's state.
#[derive(Debug)]
pub(crate) struct Tail {
    /// The page records are appended to.
    pub page: u32,
    /// Its fill (offset of the next record).
    pub used: u32,
    /// End of the durable prefix (where the last sync ended).
    pub durable: Pos,
    /// The value of the control block's `durable_tail` hint (a durable point at or
    /// before `durable`).
    pub hint: Pos,
    /// Pages sealed since the last sync, with their final fill.
    pub sealed: Vec<(u32, u32)>,
    /// The used list in order, head first; the last is `page`.
    pub pages: VecDeque<u32>,
    /// Free pages (DRAM only: rebuilt by recovery).
    pub free: Vec<u32>,
    /// The generation of every page in use (indexed by page; stale for free pages).
    pub gens: Vec<u64>,
    /// The epoch generations are taken in (persisted in the control block).
    pub epoch: u64,
    /// Generations taken in this epoch.
    pub taken: u32,
    /// The next record goes to a fresh page: set by recovery, whose tail page may
    /// hold records of its own generation past the recovered end.
    pub must_advance: bool,
    /// Records appended since the last sync.
    pub unsynced: u32,
    /// The last index appended (what a sync makes durable).
    pub last_index: u64,
    /// Scratch buffer for encoding.
    pub buf: Vec<u8>,
}

impl Shared {
    /// Writes an 8-byte control-block word without flushing it.
    pub(crate) fn write_control_word(&self, field: u64, word: u64) -> Result<()> {
        let off = self.cb.offset() + field;
        // SAFETY: the control block's mutable words are written only here, each by
        // the holder of the lock that owns it (tail: durable_tail and epoch,
        // compaction: head, hard: hard_state), and read only by recovery, before the
        // store is shared.
        unsafe { self.pool.write_bytes_shared(off, &word.to_le_bytes())? };
        Ok(())
    }

    /// Writes an 8-byte control-block word and persists it: a publication step.
    #[track_caller]
    pub(crate) fn store_control_word(
        &self,
        field: u64,
        word: u64,
        sites: (Site, Site),
    ) -> Result<()> {
        self.write_control_word(field, word)?;
        persist::flush(&self.pool, sites.0, self.cb.offset() + field, 8)?;
        persist::fence(&self.pool, sites.1)?;
        Ok(())
    }

    /// A generation never used before: the next of this epoch, or the first of a
    /// new epoch (persisted before it is returned) once this one is spent.
    pub(crate) fn take_gen(&self, t: &mut Tail) -> Result<u64> {
        if t.taken == u32::MAX {
            let epoch = t
                .epoch
                .checked_add(1)
                .filter(|&e| e < 1 << 32)
                .ok_or_else(|| StoreError::Corrupt(format!("epoch {} is spent", t.epoch)))?;
            self.store_control_word(field::EPOCH, epoch, (Site::SettleFlush, Site::SettleFence))?;
            t.epoch = epoch;
            t.taken = 0;
        }
        t.taken += 1;
        Ok(t.epoch << 32 | u64::from(t.taken))
    }

    /// Appends one record under the tail lock; returns its pool offset.
    pub(crate) fn write_record(&self, t: &mut Tail, rec: &Record<'_>) -> Result<u64> {
        let len = encoded_len(rec.key.len(), rec.value.len());
        let max = super::max_record(self.geo.page_size);
        if len as u64 > max {
            return Err(StoreError::TooLarge {
                size: len as u64,
                max,
            });
        }
        if rec.key.len() > usize::from(u16::MAX) {
            return Err(StoreError::Invalid(format!(
                "key of {} bytes (max 65535)",
                rec.key.len()
            )));
        }
        // The page first (its generation seeds the checksum), then one encoding.
        if t.must_advance || t.used as usize + len > self.geo.page_size as usize {
            self.advance_page(t, len as u64)?;
        }
        let mut buf = std::mem::take(&mut t.buf);
        buf.clear();
        let result = rec
            .encode_seeded(&mut buf, t.gens[t.page as usize])
            .and_then(|()| {
                let off = self.geo.page_off(t.page) + u64::from(t.used);
                // SAFETY: these bytes lie after the tail page's last record (or in a page
                // just taken from the free list): no index entry points at them yet, so no
                // reader looks at them, and only the tail-lock holder writes here.
                unsafe { self.pool.write_bytes_shared(off, &buf)? };
                t.used += len as u32;
                t.unsynced += 1;
                Ok(off)
            });
        t.buf = buf;
        result
    }

    /// Appends the record of an entry, as fragments and a `PutLarge` if it is a put
    /// too large for one page (see [`super::large`]); returns the pool offset of
    /// the record the index points to.
    ///
    /// A put whose value is at least an eighth of a page and does not fit what is
    /// left of the tail page, when that is at least an eighth of a page too, is split
    /// the same way (a fragment fills the rest of the page) rather than leaving the
    /// rest empty: with 2 KB values on 8 KiB pages, a quarter of every page.
    pub(crate) fn write_entry(&self, t: &mut Tail, rec: &Record<'_>) -> Result<u64> {
        let len = encoded_len(rec.key.len(), rec.value.len()) as u64;
        let page = u64::from(self.geo.page_size);
        let eighth = page / 8;
        let left = page.saturating_sub(u64::from(t.used));
        let too_large = len > super::max_record(self.geo.page_size);
        let would_waste = !t.must_advance
            && len > left
            && left >= eighth + crate::record::HEADER_LEN as u64
            && rec.value.len() as u64 >= eighth;
        let fits_split =
            super::large::max_large_value(self.geo.page_size, rec.key.len()) >= rec.value.len();
        if rec.kind == Kind::Put && (too_large || (would_waste && fits_split)) {
            return super::large::write_put_large(self, t, rec.index, rec.term, rec.key, rec.value);
        }
        self.write_record(t, rec)
    }

    /// Seals the tail page and links a fresh one from the free list.
    fn advance_page(&self, t: &mut Tail, needed: u64) -> Result<()> {
        let next = t.free.pop().ok_or(StoreError::Full { needed })?;
        let gen = match self.take_gen(t) {
            Ok(gen) => gen,
            Err(e) => {
                t.free.push(next);
                return Err(e);
            }
        };
        // SAFETY: a free page is referenced by nothing (not in the used list, no index
        // entry); the tail-lock holder owns it from the pop on.
        unsafe {
            self.pool
                .write_bytes_shared(self.geo.page_off(next), PageHeader::fresh(gen).as_bytes())?
        };
        let sealed = PageHeader::sealed(t.gens[t.page as usize], t.used, next, gen);
        // SAFETY: page headers are read only by recovery and compaction (of sealed,
        // durable pages only) and written only by the tail-lock holder (compaction
        // writes headers of its own fresh pages only). The seal leaves the page's
        // `durable` word as it is.
        unsafe {
            self.pool.write_bytes_shared(
                self.geo.page_off(t.page),
                &sealed.as_bytes()[..DURABLE_WORD as usize],
            )?
        };
        t.gens[next as usize] = gen;
        t.sealed.push((t.page, t.used));
        t.pages.push_back(next);
        t.page = next;
        t.used = PAGE_HEADER;
        t.must_advance = false;
        Ok(())
    }

    /// Starts a chain of records detached from the list: the next records go to a
    /// fresh page that nothing links to until [`Shared::attach`] seals the current
    /// tail page with a link to it. Returns the tail page's `(page, fill)`.
    pub(crate) fn detach(&self, t: &mut Tail) -> Result<(u32, u32)> {
        let next = t.free.pop().ok_or(StoreError::Full {
            needed: u64::from(self.geo.page_size),
        })?;
        let gen = match self.take_gen(t) {
            Ok(gen) => gen,
            Err(e) => {
                t.free.push(next);
                return Err(e);
            }
        };
        // SAFETY: as in `advance_page`: the page came off the free list.
        unsafe {
            self.pool
                .write_bytes_shared(self.geo.page_off(next), PageHeader::fresh(gen).as_bytes())?
        };
        let from = (t.page, t.used);
        t.gens[next as usize] = gen;
        t.pages.push_back(next);
        t.page = next;
        t.used = PAGE_HEADER;
        t.must_advance = false;
        Ok(from)
    }

    /// Makes the detached chain after `from` (the tail page and fill [`Shared::detach`]
    /// returned) durable, then part of the list: one seal of that page, whose
    /// checksum makes it all or nothing.
    pub(crate) fn attach(&self, t: &mut Tail, from: (u32, u32)) -> Result<()> {
        let (page, used) = from;
        let at = t
            .pages
            .iter()
            .position(|&p| p == page)
            .and_then(|i| t.pages.get(i + 1).copied())
            .ok_or_else(|| StoreError::Corrupt("a detached chain lost its first page".into()))?;
        // The chain first, whole and durable (the hint stays before it).
        self.sync_locked(t)?;
        let seal = PageHeader::sealed(t.gens[page as usize], used, at, t.gens[at as usize]);
        let base = self.geo.page_off(page);
        // SAFETY: page headers are written only by the tail-lock holder (we hold it).
        unsafe {
            self.pool
                .write_bytes_shared(base, &seal.as_bytes()[..DURABLE_WORD as usize])?
        };
        persist::flush(&self.pool, Site::AttachFlush, base, u64::from(PAGE_HEADER))?;
        persist::fence(&self.pool, Site::AttachFence)?;
        self.pool.label("detached chain attached");
        Ok(())
    }

    /// Appends entry `index`.
    pub(crate) fn append(&self, index: u64, term: u64, op: Op<'_>) -> Result<()> {
        let mut t = lock(&self.tail);
        // The tail's copy of the last index is exact: every change to it (append,
        // truncate, install) happens under the tail lock.
        if index != t.last_index + 1 {
            return Err(StoreError::OutOfOrder {
                index,
                last: t.last_index,
            });
        }
        let rec = Record::entry(index, term, op);
        let off = self.write_entry(&mut t, &rec)?;
        let version = match rec.kind {
            Kind::Put => Some((vkey(rec.key, index), Loc::new(off, false))),
            Kind::Delete => Some((vkey(rec.key, index), Loc::new(off, true))),
            _ => None,
        };
        write(&self.index).push(term, version, off);
        t.last_index = index;
        if t.unsynced >= self.opts.group {
            self.sync_locked(&mut t)?;
        }
        Ok(())
    }

    /// Appends a rollback record discarding entries above `after`.
    pub(crate) fn truncate_after(&self, after: u64, term: u64) -> Result<()> {
        let mut t = lock(&self.tail);
        {
            let index = crate::sync::read(&self.index);
            if after >= index.last_index() {
                return Ok(());
            }
            let floor = index.applied().max(index.base().0);
            if after < floor {
                return Err(StoreError::TruncateApplied {
                    after,
                    applied: floor,
                });
            }
        }
        let rec = Record::bare(Kind::Rollback, after, term);
        self.write_record(&mut t, &rec)?;
        write(&self.index).truncate_after(after)?;
        t.last_index = after;
        self.durable_index.fetch_min(after, Ordering::AcqRel);
        if t.unsynced >= self.opts.group {
            self.sync_locked(&mut t)?;
        }
        Ok(())
    }

    /// Makes every append so far durable.
    pub(crate) fn sync(&self) -> Result<()> {
        let mut t = lock(&self.tail);
        self.sync_locked(&mut t)
    }

    /// Makes the `durable_tail` hint the durable end itself (a clean close): one
    /// more flush and fence, when the hint lags.
    pub(crate) fn publish_hint(&self) -> Result<()> {
        let mut t = lock(&self.tail);
        if t.hint == t.durable {
            return Ok(());
        }
        self.write_control_word(field::DURABLE_TAIL, t.durable.pack())?;
        persist::flush(
            &self.pool,
            Site::HintFlush,
            self.cb.offset() + field::DURABLE_TAIL,
            8,
        )?;
        persist::fence(&self.pool, Site::SyncFence)?;
        t.hint = t.durable;
        Ok(())
    }

    /// Flushes what was written since the last sync and the hint (the previous
    /// sync's end), and fences once.
    pub(crate) fn sync_locked(&self, t: &mut Tail) -> Result<()> {
        if t.unsynced == 0 && t.sealed.is_empty() {
            return Ok(());
        }
        let page_size = u64::from(self.geo.page_size);
        // A page's new bytes start at the durable end on the page the last sync ended
        // in, after the header on any other; its header changed if it was sealed
        // since (or taken since: then the whole page is new).
        let flush_page = |page: u32, end: u32, header_changed: bool| -> Result<()> {
            let base = self.geo.page_off(page);
            let from = if page == t.durable.page {
                t.durable.off
            } else {
                0
            };
            if header_changed && from <= 64 {
                persist::flush(
                    &self.pool,
                    Site::SyncFlush,
                    base,
                    u64::from(end).min(page_size),
                )?;
                return Ok(());
            }
            if header_changed {
                persist::flush(&self.pool, Site::SyncFlush, base, u64::from(PAGE_HEADER))?;
            }
            if end > from {
                persist::flush(
                    &self.pool,
                    Site::SyncFlush,
                    base + u64::from(from),
                    u64::from(end - from),
                )?;
            }
            Ok(())
        };
        for &(page, end) in &t.sealed {
            flush_page(page, end, true)?;
        }
        flush_page(t.page, t.used, false)?;
        // The previous sync's end is durable (its fence returned): a safe point to
        // vouch for, published by this sync's one fence along with the new records.
        let prev = t.durable;
        if prev.off > PAGE_HEADER {
            let at = self.geo.page_off(prev.page) + u64::from(DURABLE_WORD);
            let word = PageHeader::durable_word(t.gens[prev.page as usize], prev.off);
            // SAFETY: page headers are written only by the tail-lock holder (we hold
            // it) and read only by recovery and compaction (which reads `used` of
            // sealed pages, not this word).
            unsafe { self.pool.write_bytes_shared(at, &word.to_le_bytes())? };
            persist::flush(&self.pool, Site::HintFlush, at, 8)?;
        }
        if t.hint.page != prev.page {
            // The control block's hint moves once per page (the page-level words
            // vouch for the rest): most syncs dirty no page but the records'.
            self.write_control_word(field::DURABLE_TAIL, prev.pack())?;
            persist::flush(
                &self.pool,
                Site::HintFlush,
                self.cb.offset() + field::DURABLE_TAIL,
                8,
            )?;
            t.hint = prev;
        }
        persist::fence(&self.pool, Site::SyncFence)?;
        self.pool.label("sync fenced");
        t.durable = Pos {
            page: t.page,
            off: t.used,
        };
        t.sealed.clear();
        t.unsynced = 0;
        self.durable_index.store(t.last_index, Ordering::Release);
        self.syncs.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}
