//! Appending records and group durability.
//!
//! The [`Tail`] (under its mutex) is the writer's state: the tail page and its fill,
//! the durable position, the pages filled since the last sync, the used-page order and
//! the DRAM free list. Record bytes always go where no reader can look yet: after the
//! tail page's last published record, or into a page taken from the free list.

use std::collections::VecDeque;

use zerocopy::IntoBytes;

use super::layout::{field, Loc, PageHeader, Pos, PAGE_HEADER};
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
    /// End of the durable prefix.
    pub durable: Pos,
    /// Pages sealed since the last sync, with their final fill.
    pub sealed: Vec<(u32, u32)>,
    /// The used list in order, head first; the last is `page`.
    pub pages: VecDeque<u32>,
    /// Free pages (DRAM only: rebuilt by recovery).
    pub free: Vec<u32>,
    /// Records appended since the last sync.
    pub unsynced: u32,
    /// The last index appended (what a sync makes durable).
    pub last_index: u64,
    /// Scratch buffer for encoding.
    pub buf: Vec<u8>,
}

impl Shared {
    /// Writes an 8-byte control-block word and persists it: the publication step.
    #[track_caller]
    pub(crate) fn store_control_word(&self, field: u64, word: u64) -> Result<()> {
        let off = self.cb.offset() + field;
        // SAFETY: the control block's mutable words are written only here, each by
        // the holder of the lock that owns it (tail: durable_tail, compaction: head,
        // hard: hard_state), and read only by recovery, before the store is shared.
        unsafe { self.pool.write_bytes_shared(off, &word.to_le_bytes())? };
        self.pool.persist(off, 8)?;
        Ok(())
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
        let mut buf = std::mem::take(&mut t.buf);
        buf.clear();
        let encoded = rec.encode_into(&mut buf);
        let result = encoded.and_then(|()| {
            if t.used as usize + len > self.geo.page_size as usize {
                self.advance_page(t, len as u64)?;
            }
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

    /// Seals the tail page and links a fresh one from the free list.
    fn advance_page(&self, t: &mut Tail, needed: u64) -> Result<()> {
        let next = t.free.pop().ok_or(StoreError::Full { needed })?;
        let fresh = PageHeader {
            next: 0,
            used: PAGE_HEADER,
            pad: 0,
        };
        // SAFETY: a free page is referenced by nothing (not in the used list, no index
        // entry); the tail-lock holder owns it from the pop on.
        unsafe {
            self.pool
                .write_bytes_shared(self.geo.page_off(next), fresh.as_bytes())?
        };
        let sealed = PageHeader {
            next: u64::from(next) + 1,
            used: t.used,
            pad: 0,
        };
        // SAFETY: page headers are read only by recovery and written only by the
        // tail-lock holder (compaction writes headers of its own fresh pages only).
        unsafe {
            self.pool
                .write_bytes_shared(self.geo.page_off(t.page), sealed.as_bytes())?
        };
        t.sealed.push((t.page, t.used));
        t.pages.push_back(next);
        t.page = next;
        t.used = PAGE_HEADER;
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
        let off = self.write_record(&mut t, &rec)?;
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

    /// Flushes what was written since the last sync, fences, then publishes the new
    /// durable tail with one 8-byte store (and persists it).
    pub(crate) fn sync_locked(&self, t: &mut Tail) -> Result<()> {
        if t.unsynced == 0 && t.sealed.is_empty() {
            return Ok(());
        }
        let page_size = u64::from(self.geo.page_size);
        let flush_page = |page: u32, end: u32| -> Result<()> {
            let base = self.geo.page_off(page);
            let from = if page == t.durable.page {
                t.durable.off
            } else {
                PAGE_HEADER
            };
            // The header (next, used) changed too; one flush when it shares a line
            // with the new bytes or is next to them.
            if from <= 64 {
                self.pool.flush(base, u64::from(end).min(page_size))?;
            } else {
                self.pool.flush(base, u64::from(PAGE_HEADER))?;
                if end > from {
                    self.pool
                        .flush(base + u64::from(from), u64::from(end - from))?;
                }
            }
            Ok(())
        };
        for &(page, end) in &t.sealed {
            flush_page(page, end)?;
        }
        // The tail page's header carries its fill; a sealed page's was written at seal.
        let header = PageHeader {
            next: 0,
            used: t.used,
            pad: 0,
        };
        // SAFETY: page headers are written only by the tail-lock holder (we hold it)
        // and read only by recovery.
        unsafe {
            self.pool
                .write_bytes_shared(self.geo.page_off(t.page), header.as_bytes())?
        };
        flush_page(t.page, t.used)?;
        self.pool.drain()?;
        let tail = Pos {
            page: t.page,
            off: t.used,
        };
        self.store_control_word(field::DURABLE_TAIL, tail.pack())?;
        self.pool.label("durable tail published");
        t.durable = tail;
        t.sealed.clear();
        t.unsynced = 0;
        self.durable_index.store(t.last_index, Ordering::Release);
        self.syncs.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}
