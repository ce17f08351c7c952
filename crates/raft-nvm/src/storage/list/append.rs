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
//! (see [`super::layout`]). The tail lock is held for the flushes and to publish,
//! not for the fence: appends go on while `msync` runs ([`Shared::sync_with`]).
//!
//! An append batch gathers its records and page headers and copies each run of
//! adjacent bytes at once ([`Staged`]): in msync mode the pool copies by `pwrite`
//! (see `pmem_core::Pool::copies_by_pwrite`), one system call per page filled.
//! The crash suites check batches as well as single appends.

use std::collections::VecDeque;

use zerocopy::IntoBytes;

use super::layout::{field, Loc, PageHeader, Pos, DURABLE_WORD, PAGE_HEADER};
use super::persist::{self, Site};
use super::Shared;
use crate::storage::error::{Result, StoreError};
use crate::storage::index::vkey;
use crate::storage::record::{encoded_len, Kind, Record};
use crate::storage::store::Op;
use crate::storage::sync::{lock, write, Ordering};

/// The bytes an append batch gathers before it copies them into the pool: one
/// run of adjacent bytes (see [`Shared::append_batch`]).
#[derive(Debug, Default)]
pub(crate) struct Staged {
    /// Whether writes are gathered (only inside a batch).
    pub on: bool,
    /// Pool offset of the run.
    pub off: u64,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

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
    /// The number of the last sync started (see [`Shared::sync_with`]).
    pub sync_seq: u64,
    /// The lowest point truncated to since the last sync started (`u64::MAX`:
    /// none): the durable index that sync publishes is capped there.
    pub truncated_to: u64,
    /// Scratch buffer for encoding.
    pub buf: Vec<u8>,
    /// What an append batch gathered and has not written yet.
    pub staged: Staged,
    /// An append batch's index entries, pushed once their bytes are written (kept
    /// to reuse its allocation).
    pub found: Vec<(u64, Option<Version>, u64)>,
}

impl Shared {
    /// Writes an 8-byte control-block word without flushing it.
    pub(crate) fn write_control_word(&self, field: u64, word: u64) -> Result<()> {
        let off = self.cb.offset() + field;
        // SAFETY: the control block's mutable words are written only here, each by
        // the holder of the lock that owns it (tail: durable_tail and epoch,
        // compaction: head, hard: hard_state and hard_check), and read only by recovery, before the
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
        let gen = t.gens[t.page as usize];
        let off = self.geo.page_off(t.page) + u64::from(t.used);
        // These bytes lie after the tail page's last record (or in a page just
        // taken from the free list): no index entry points at them yet, so no
        // reader looks at them, and only the tail-lock holder writes here.
        if t.staged.on {
            // Encoded straight into the gathered run: no copy of its own.
            self.run_ending_at(t, off)?;
            let start = t.staged.bytes.len();
            if let Err(e) = rec.encode_seeded(&mut t.staged.bytes, gen) {
                t.staged.bytes.truncate(start);
                return Err(e);
            }
        } else {
            let mut buf = std::mem::take(&mut t.buf);
            buf.clear();
            let written = rec
                .encode_seeded(&mut buf, gen)
                .and_then(|()| self.put_bytes(t, off, &buf));
            t.buf = buf;
            written?;
        }
        t.used += len as u32;
        t.unsynced += 1;
        Ok(off)
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
            && left >= eighth + crate::storage::record::HEADER_LEN as u64
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
        // The seal first, then the fresh page: while a batch gathers its bytes
        // ([`Staged`]), a seal of a page the batch filled is patched into the
        // gathered bytes, and the fresh header starts the next page's run. (No
        // fence separates the two: either order persists the same ways.)
        let sealed = PageHeader::sealed(t.gens[t.page as usize], t.used, next, gen);
        // Page headers are read only by recovery and compaction (of sealed, durable
        // pages only) and written only by the tail-lock holder (compaction writes
        // headers of its own fresh pages only). The seal leaves the page's `durable`
        // word as it is.
        let at = self.geo.page_off(t.page);
        self.put_bytes(t, at, &sealed.as_bytes()[..DURABLE_WORD as usize])?;
        // A free page is referenced by nothing (not in the used list, no index
        // entry); the tail-lock holder owns it from the pop on.
        self.put_bytes(
            t,
            self.geo.page_off(next),
            PageHeader::fresh(gen).as_bytes(),
        )?;
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
        self.append_batch(&[(index, term, op)])
    }

    /// Appends one entry, written directly (no gathering).
    fn append_one(&self, index: u64, term: u64, op: Op<'_>) -> Result<()> {
        let mut t = lock(&self.tail);
        let last = t.last_index;
        let (version, off) = self.write_next(&mut t, last, index, term, op)?;
        write(&self.index).push(term, version, off);
        t.last_index = index;
        if t.unsynced >= self.opts.group {
            self.sync_locked(&mut t)?;
        }
        Ok(())
    }

    /// Appends `entries` in order (see [`crate::storage::store::Store::append_batch`]) under one
    /// hold of the tail lock. The bytes of a batch are gathered in [`Staged`] runs
    /// and each run is copied into the pool at once: one copy per page filled
    /// instead of one per record and header, which matters when the pool copies by
    /// system call ([`pmem_core::Pool::copies_by_pwrite`], msync mode, where even a
    /// single append gathers its record with a fresh page's header). A single
    /// append to a pool that stores through the mapping is written directly
    /// ([`Shared::append_one`]): gathering would only add bookkeeping. Every byte
    /// is written before any index entry points at it.
    pub(crate) fn append_batch(&self, entries: &[(u64, u64, Op<'_>)]) -> Result<()> {
        if let &[(index, term, op)] = entries {
            if !self.pool.copies_by_pwrite() {
                return self.append_one(index, term, op);
            }
        }
        let mut t = lock(&self.tail);
        t.staged.on = true;
        let mut found = std::mem::take(&mut t.found);
        found.clear();
        let mut result = Ok(());
        let mut last = t.last_index;
        for &(index, term, op) in entries {
            match self.write_next(&mut t, last, index, term, op) {
                Ok((version, off)) => {
                    found.push((term, version, off));
                    last = index;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        t.staged.on = false;
        self.write_staged(&mut t)?;
        if !found.is_empty() {
            let mut index = write(&self.index);
            for (term, version, off) in found.drain(..) {
                index.push(term, version, off);
            }
        }
        t.found = found;
        t.last_index = last;
        if result.is_ok() && t.unsynced >= self.opts.group {
            self.sync_locked(&mut t)?;
        }
        result
    }

    /// Writes the record of entry `index` after entry `last` (the tail's last
    /// index, or the batch's so far); returns its index entry and offset.
    fn write_next(
        &self,
        t: &mut Tail,
        last: u64,
        index: u64,
        term: u64,
        op: Op<'_>,
    ) -> Result<(Option<Version>, u64)> {
        // The tail's copy of the last index is exact: every change to it (append,
        // truncate, install) happens under the tail lock.
        if index != last + 1 {
            return Err(StoreError::OutOfOrder { index, last });
        }
        let rec = Record::entry(index, term, op);
        let off = self.write_entry(t, &rec)?;
        Ok((version_of(&rec, off), off))
    }

    /// Writes `bytes` at `off` under the tail lock: gathered into the staged run
    /// while a batch gathers ([`Staged`]), else at once.
    fn put_bytes(&self, t: &mut Tail, off: u64, bytes: &[u8]) -> Result<()> {
        if t.staged.on {
            let run = &mut t.staged;
            let end = run.off + run.bytes.len() as u64;
            if !run.bytes.is_empty() && off >= run.off && off + bytes.len() as u64 <= end {
                // Inside the run (a seal of the page it started): patched there.
                let at = (off - run.off) as usize;
                run.bytes[at..at + bytes.len()].copy_from_slice(bytes);
                return Ok(());
            }
            self.run_ending_at(t, off)?;
            t.staged.bytes.extend_from_slice(bytes);
            return Ok(());
        }
        // SAFETY: the callers write only bytes no reader looks at (past the tail
        // page's last indexed record, a page off the free list, or a page header,
        // which only recovery and compaction of durable pages read) under the tail
        // lock, which every writer of these bytes holds.
        unsafe { self.pool.write_bytes_shared(off, bytes)? };
        Ok(())
    }

    /// Makes the staged run end at `off`, so that bytes for `off` extend it: the
    /// run is written out and a new one starts at `off` unless it already ends
    /// there.
    fn run_ending_at(&self, t: &mut Tail, off: u64) -> Result<()> {
        let run = &t.staged;
        if run.bytes.is_empty() || run.off + run.bytes.len() as u64 != off {
            self.write_staged(t)?;
            t.staged.off = off;
        }
        Ok(())
    }

    /// Writes the staged run, if any, with one copy.
    fn write_staged(&self, t: &mut Tail) -> Result<()> {
        if t.staged.bytes.is_empty() {
            return Ok(());
        }
        // SAFETY: as in `put_bytes`: the run holds only bytes written under the
        // tail lock (held) that no index entry points at yet.
        let written = unsafe { self.pool.write_bytes_shared(t.staged.off, &t.staged.bytes) };
        t.staged.bytes.clear();
        written?;
        Ok(())
    }

    /// Appends a rollback record discarding entries above `after`.
    pub(crate) fn truncate_after(&self, after: u64, term: u64) -> Result<()> {
        let mut t = lock(&self.tail);
        {
            let index = crate::storage::sync::read(&self.index);
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
        t.truncated_to = t.truncated_to.min(after);
        self.durable_index.fetch_min(after, Ordering::AcqRel);
        if t.unsynced >= self.opts.group {
            self.sync_locked(&mut t)?;
        }
        Ok(())
    }

    /// Makes every append so far durable, holding the tail lock only to start and
    /// to finish: appends and truncations go on while the fence (in msync mode, the
    /// `msync`) runs. See [`Shared::sync_with`].
    pub(crate) fn sync(&self) -> Result<()> {
        self.sync_with(&mut || Ok(()))
    }

    /// [`Shared::sync`] in three steps, running `between` where a concurrent
    /// writer may run (the crash suites interleave appends there):
    ///
    /// 1. under the tail lock: flush what was written since the last sync and the
    ///    hint, and note the end reached ([`Tail::sync_seq`] numbers the sync);
    ///    nothing other threads read changes yet (compaction reads [`Tail::hint`]);
    /// 2. without it: `between`, then the one fence;
    /// 3. under the lock again: publish the end noted in step 1 as durable (and
    ///    the hint step 1 wrote as [`Tail::hint`]), unless
    ///    a sync that started later (an in-lock one: a group, a snapshot's attach)
    ///    already published a later end. A truncation meanwhile caps the durable
    ///    index at its point.
    ///
    /// One such sync runs at a time (`sync_lock`). An in-lock sync meanwhile
    /// flushes from the same durable end and the same sealed pages, so its own fence
    /// covers everything this sync flushed, on any thread.
    pub(crate) fn sync_with(&self, between: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        let _one = lock(&self.sync_lock);
        let started = {
            let mut t = lock(&self.tail);
            if t.unsynced == 0 && t.sealed.is_empty() {
                drop(t);
                return between();
            }
            let hint = self.sync_flush(&mut t)?;
            t.sync_seq += 1;
            t.truncated_to = u64::MAX;
            SyncStart::of(&t, hint)
        };
        between()?;
        persist::fence(&self.pool, Site::SyncFence)?;
        self.pool.label("sync fenced");
        let mut t = lock(&self.tail);
        if t.sync_seq == started.seq {
            let durable = started.last_index.min(t.truncated_to);
            self.publish_sync(&mut t, &started, durable);
        }
        Ok(())
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
    /// sync's end), and fences once, all under the tail lock.
    pub(crate) fn sync_locked(&self, t: &mut Tail) -> Result<()> {
        if t.unsynced == 0 && t.sealed.is_empty() {
            return Ok(());
        }
        let hint = self.sync_flush(t)?;
        // A sync started without the lock and not finished yet publishes nothing:
        // this one covers all it flushed and more.
        t.sync_seq += 1;
        let started = SyncStart::of(t, hint);
        persist::fence(&self.pool, Site::SyncFence)?;
        self.pool.label("sync fenced");
        self.publish_sync(t, &started, started.last_index);
        Ok(())
    }

    /// Publishes what a fenced sync made durable: the tail's durable end and hint,
    /// the sealed pages and records it covered, and `durable_index`.
    fn publish_sync(&self, t: &mut Tail, started: &SyncStart, durable_index: u64) {
        if let Some(hint) = started.hint {
            t.hint = hint;
        }
        t.durable = started.end;
        t.sealed.drain(..started.sealed);
        t.unsynced -= started.unsynced;
        self.durable_index.store(durable_index, Ordering::Release);
        self.syncs.fetch_add(1, Ordering::AcqRel);
    }

    /// A sync's flushes: the records and headers written since the durable end
    /// (`t.durable`, the previous sync's end), the page-level word vouching for
    /// that end, and the control block's hint when it moves to a new page. Returns
    /// the hint's new value, for the caller to make [`Tail::hint`] once its fence
    /// returned: compaction trusts the pages before [`Tail::hint`] to be durable,
    /// and on persistent memory another thread's fence does not make this one's
    /// flushes durable.
    fn sync_flush(&self, t: &mut Tail) -> Result<Option<Pos>> {
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
            return Ok(Some(prev));
        }
        Ok(None)
    }
}

/// A version of a key in the index: the key at an index, and where its record is.
type Version = (crate::storage::index::VKey, Loc);

/// The index entry of the record of entry `rec` at pool offset `off`: a version
/// of its key for a put or a delete, none for the other kinds.
fn version_of(rec: &Record<'_>, off: u64) -> Option<Version> {
    match rec.kind {
        Kind::Put => Some((vkey(rec.key, rec.index), Loc::new(off, false))),
        Kind::Delete => Some((vkey(rec.key, rec.index), Loc::new(off, true))),
        _ => None,
    }
}

/// What a sync noted when it started (after its flushes, under the tail lock).
struct SyncStart {
    /// The control block's hint it wrote, if it moved ([`Tail::hint`] once fenced).
    hint: Option<Pos>,
    /// Its number ([`Tail::sync_seq`]).
    seq: u64,
    /// The end it flushed to.
    end: Pos,
    /// The sealed pages it flushed (the first of [`Tail::sealed`]).
    sealed: usize,
    /// The records it covers.
    unsynced: u32,
    /// The last index it makes durable.
    last_index: u64,
}

impl SyncStart {
    /// The tail as a sync finds it once flushed, with the hint it wrote.
    fn of(t: &Tail, hint: Option<Pos>) -> SyncStart {
        SyncStart {
            hint,
            seq: t.sync_seq,
            end: Pos {
                page: t.page,
                off: t.used,
            },
            sealed: t.sealed.len(),
            unsynced: t.unsynced,
            last_index: t.last_index,
        }
    }
}
