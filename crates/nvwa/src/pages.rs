//! The page source of the allocator: the heap's `pages` pages of 4 KiB, numbered
//! `0..pages`, handed to the arenas (one per thread group) in runs of `n`
//! contiguous pages, and taken back. It reproduces in user space the kernel page
//! policy of the paper's §4.1 ("Page Contiguity Based Partitioning", Figs 7–11,
//! Table 1), with pool offsets standing in for physical addresses.
//!
//! * **JIT** (the paper's baseline, just-in-time allocation): every request takes
//!   the lowest-addressed free extent of `n` contiguous pages from the global free
//!   set (first fit). With several arenas taking pages in turn, an arena's
//!   consecutive pages are rarely contiguous: with `N` co-running takers, the
//!   chance of a contiguous next page falls to `1/N`.
//! * **CAA-N** (contiguity-aware allocation, batch `N`): each arena has a bucket
//!   with a *contiguous list* (here one contiguous extent of reserved pages) and a
//!   *non-contiguous list*. On an arena's first touch, and whenever its contiguous
//!   extent cannot serve a request, a batch of `max(N, n)` contiguous pages is
//!   reserved from the global free set (first fit) and requests take pages from
//!   its front; the leftover of the old extent moves to the non-contiguous list.
//!   When no contiguous batch of that size exists, the request is served from the
//!   non-contiguous list if that holds `n` contiguous pages; otherwise the source
//!   gathers what it can (first fit, smaller extents) into the non-contiguous list
//!   ("a batch that comes back non-contiguous goes to the non-contiguous list")
//!   and serves the request from there if it can, else from the global set, first
//!   fit.
//!
//! **Contiguity misses** are the paper's Table 1 measure. Per arena, a request
//! whose first page is not the page right after the last page of that arena's
//! previous request is one miss; an arena's first request is none. The paper
//! counts physical frames; on this user-space allocator the kernel still maps the
//! pool file's pages, so we count pool offsets, which is what the allocator
//! controls.
//!
//! **Watermarks** on the fraction of the heap in the global free set (pages
//! reserved in buckets count as used: no other arena can take them). Below `high`,
//! arenas of kind [`ArenaKind::Persistent`] get no more batches and are served
//! JIT-style, one request at a time, from their non-contiguous list or the global
//! set; below `low`, CAA is off for every arena. [`ArenaKind::Volatile`] arenas
//! keep CAA until `low`. The paper names the two watermarks but gives no values:
//! the defaults (`high` = 0.25, `low` = 0.10) are ours.
//!
//! The source never gives bucket pages back by itself: the allocator calls
//! [`PageSource::release_buckets`] before it reports that it is out of space.

use std::collections::BTreeMap;
use std::ops::Range;

/// How the source hands out pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagePolicy {
    /// Just in time: first fit from the global free set on every request.
    Jit,
    /// Contiguity-aware allocation: per-arena batches of `batch` contiguous pages.
    Caa {
        /// Pages reserved per batch (the paper's CAA-4 and CAA-16).
        batch: u64,
    },
}

impl PagePolicy {
    /// The policy's short name: `jit`, `caa-4`, `caa-16`, ….
    pub fn name(&self) -> String {
        match self {
            PagePolicy::Jit => "jit".to_string(),
            PagePolicy::Caa { batch } => format!("caa-{batch}"),
        }
    }
}

/// What an arena's pages hold; decides at which watermark it loses its batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArenaKind {
    /// Persistent objects (the paper's NVMPersist): JIT below the high watermark.
    Persistent,
    /// Volatile objects (the paper's NVMCap): JIT below the low watermark only.
    Volatile,
}

/// The two watermarks, as fractions of the heap in the global free set.
#[derive(Clone, Copy, Debug)]
pub struct Watermarks {
    /// Below it, persistent arenas get no more batches.
    pub high: f64,
    /// Below it, no arena gets batches.
    pub low: f64,
}

impl Default for Watermarks {
    /// `high` = 0.25, `low` = 0.10: our values; the paper gives none.
    fn default() -> Watermarks {
        Watermarks {
            high: 0.25,
            low: 0.10,
        }
    }
}

/// Counters of a page source.
#[derive(Clone, Debug, Default)]
pub struct PageStats {
    /// Requests served.
    pub takes: u64,
    /// Contiguity misses of all arenas.
    pub contiguity_misses: u64,
    /// Contiguity misses per arena.
    pub misses_per_arena: Vec<u64>,
    /// Batches reserved, contiguous or not.
    pub batches: u64,
    /// Batches that came back short or non-contiguous (to a non-contiguous list).
    pub noncontiguous_batches: u64,
    /// Pages not in use: the global free set and the buckets' reserves.
    pub free_pages: u64,
}

/// Errors of giving pages back and of recovering used pages.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PageError {
    /// A run of no pages.
    #[error("empty page run at page {first}")]
    Empty {
        /// The run's first page.
        first: u64,
    },
    /// A run that does not lie inside the heap.
    #[error("pages {first}..{first}+{n} lie outside the heap of {total} pages")]
    OutOfRange {
        /// The run's first page.
        first: u64,
        /// Pages of the run.
        n: u64,
        /// Pages of the heap.
        total: u64,
    },
    /// A page marked used is not in the global free set.
    #[error("page {page} is not free, so it cannot be marked used")]
    NotFree {
        /// The lowest such page.
        page: u64,
    },
    /// A page given back was not handed out.
    #[error("page {page} is not in use (free, or reserved in a bucket): a double give-back?")]
    NotInUse {
        /// The lowest such page.
        page: u64,
    },
}

/// Disjoint extents of pages, keyed by first page; neighbours are always merged,
/// so a run of free pages lies inside one extent.
#[derive(Clone, Debug, Default)]
struct Extents {
    by_start: BTreeMap<u64, u64>,
    pages: u64,
}

impl Extents {
    /// Adds `start..start + len`, which must not overlap the set, merging it with
    /// the extents it touches.
    fn insert(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        self.pages += len;
        let (mut start, mut end) = (start, start + len);
        if let Some((&s, &l)) = self.by_start.range(..start).next_back() {
            if s + l == start {
                self.by_start.remove(&s);
                start = s;
            }
        }
        if let Some(l) = self.by_start.remove(&end) {
            end += l;
        }
        self.by_start.insert(start, end - start);
    }

    /// Removes `start..start + len`, or returns the lowest page of it not in the
    /// set (merged extents: the run is in the set only if one extent covers it).
    fn carve(&mut self, start: u64, len: u64) -> Result<(), u64> {
        let Some((&s, &l)) = self.by_start.range(..=start).next_back() else {
            return Err(start);
        };
        if s + l <= start {
            return Err(start);
        }
        if s + l < start + len {
            return Err(s + l);
        }
        self.by_start.remove(&s);
        self.pages -= l;
        self.insert(s, start - s);
        self.insert(start + len, s + l - start - len);
        Ok(())
    }

    /// Removes the lowest-addressed `n` contiguous pages; their first page.
    fn first_fit(&mut self, n: u64) -> Option<u64> {
        let start = self
            .by_start
            .iter()
            .find(|&(_, &l)| l >= n)
            .map(|(&s, _)| s)?;
        self.carve(start, n).ok()?;
        Some(start)
    }

    /// Moves up to `want` pages, lowest-addressed first, into `into`; how many.
    fn move_front(&mut self, want: u64, into: &mut Extents) -> u64 {
        let mut moved = 0;
        while moved < want {
            let Some((s, l)) = self.by_start.pop_first() else {
                break;
            };
            let k = l.min(want - moved);
            self.pages -= l;
            self.insert(s + k, l - k);
            into.insert(s, k);
            moved += k;
        }
        moved
    }

    /// The lowest page of `range` in the set.
    fn overlap(&self, range: &Range<u64>) -> Option<u64> {
        if let Some((&s, &l)) = self.by_start.range(..=range.start).next_back() {
            if s + l > range.start {
                return Some(range.start);
            }
        }
        self.by_start.range(range.clone()).next().map(|(&s, _)| s)
    }

    /// Empties the set into `into`.
    fn drain_into(&mut self, into: &mut Extents) {
        for (s, l) in std::mem::take(&mut self.by_start) {
            into.insert(s, l);
        }
        self.pages = 0;
    }
}

/// One arena's bucket and its contiguity bookkeeping.
#[derive(Clone, Debug, Default)]
struct Arena {
    /// The contiguous list: the rest of the current batch.
    contiguous: Range<u64>,
    /// The non-contiguous list: leftovers and batches that came back scattered.
    noncontiguous: Extents,
    /// The page right after the arena's previous request.
    next: Option<u64>,
    misses: u64,
}

impl Arena {
    /// Takes `n` pages from the front of the contiguous extent, if it has them.
    fn take_contiguous(&mut self, n: u64) -> Option<u64> {
        let first = self.contiguous.start;
        (self.contiguous.end - first >= n).then(|| {
            self.contiguous.start += n;
            first
        })
    }

    /// Moves the contiguous extent's pages to the non-contiguous list: they can
    /// no longer serve requests from the front of a batch.
    fn demote(&mut self) {
        let rest = std::mem::take(&mut self.contiguous);
        self.noncontiguous.insert(rest.start, rest.end - rest.start);
    }

    /// Pages reserved in the bucket.
    fn reserved(&self) -> u64 {
        self.contiguous.end - self.contiguous.start + self.noncontiguous.pages
    }

    /// The lowest page of `range` reserved in the bucket.
    fn overlap(&self, range: &Range<u64>) -> Option<u64> {
        let lo = range.start.max(self.contiguous.start);
        let in_contiguous = (lo < range.end.min(self.contiguous.end)).then_some(lo);
        let in_list = self.noncontiguous.overlap(range);
        in_contiguous.into_iter().chain(in_list).min()
    }
}

/// The heap's pages: the global free set and the arenas' buckets.
#[derive(Debug)]
pub struct PageSource {
    total: u64,
    policy: PagePolicy,
    marks: Watermarks,
    free: Extents,
    arenas: Vec<Arena>,
    takes: u64,
    batches: u64,
    noncontiguous_batches: u64,
}

impl PageSource {
    /// A source of `pages` pages, all free, for `arenas` arenas (at least one).
    pub fn new(pages: u64, policy: PagePolicy, arenas: usize, marks: Watermarks) -> PageSource {
        let mut free = Extents::default();
        free.insert(0, pages);
        PageSource {
            total: pages,
            policy,
            marks,
            free,
            arenas: vec![Arena::default(); arenas.max(1)],
            takes: 0,
            batches: 0,
            noncontiguous_batches: 0,
        }
    }

    /// The policy.
    pub fn policy(&self) -> PagePolicy {
        self.policy
    }

    /// Pages of the heap.
    pub fn total_pages(&self) -> u64 {
        self.total
    }

    /// Recovery: marks `first..first + n`, the pages of a recovered run, used.
    /// Fails if any of them is out of range or not in the global free set.
    pub fn mark_used(&mut self, first: u64, n: u64) -> Result<(), PageError> {
        self.check_range(first, n)?;
        self.free
            .carve(first, n)
            .map_err(|page| PageError::NotFree { page })
    }

    /// The first page of `n` contiguous pages for `arena` (taken modulo the number
    /// of arenas), or `None` if no such run can be found in the arena's bucket or
    /// the global free set. Pages reserved in other buckets are left alone: the
    /// caller releases them ([`release_buckets`](Self::release_buckets)) and
    /// retries before it reports that it is out of space.
    pub fn take(&mut self, arena: usize, kind: ArenaKind, n: u64) -> Option<u64> {
        if n == 0 || n > self.total {
            return None;
        }
        let arena = arena % self.arenas.len();
        let first = match self.batch_for(kind) {
            Some(batch) => self.take_caa(arena, n, batch.max(n)),
            None => {
                self.arenas[arena].demote();
                self.take_jit(arena, n)
            }
        }?;
        self.count(arena, first, n);
        Some(first)
    }

    /// Returns `first..first + n` to the global free set, merged with its free
    /// neighbours. Fails, changing nothing, if any page is out of range or not in
    /// use (free, or reserved in a bucket).
    pub fn give_back(&mut self, first: u64, n: u64) -> Result<(), PageError> {
        let range = self.check_range(first, n)?;
        let held = self.free.overlap(&range).into_iter();
        let reserved = self.arenas.iter().filter_map(|a| a.overlap(&range));
        if let Some(page) = held.chain(reserved).min() {
            return Err(PageError::NotInUse { page });
        }
        self.free.insert(first, n);
        Ok(())
    }

    /// Returns the pages of every bucket to the global free set.
    pub fn release_buckets(&mut self) {
        for arena in &mut self.arenas {
            arena.demote();
            arena.noncontiguous.drain_into(&mut self.free);
        }
    }

    /// Pages not in use: the global free set and the buckets' reserves.
    pub fn free_pages(&self) -> u64 {
        self.free.pages + self.arenas.iter().map(Arena::reserved).sum::<u64>()
    }

    /// The counters.
    pub fn stats(&self) -> PageStats {
        let misses_per_arena: Vec<u64> = self.arenas.iter().map(|a| a.misses).collect();
        PageStats {
            takes: self.takes,
            contiguity_misses: misses_per_arena.iter().sum(),
            misses_per_arena,
            batches: self.batches,
            noncontiguous_batches: self.noncontiguous_batches,
            free_pages: self.free_pages(),
        }
    }

    /// `first..first + n` if it is a non-empty run inside the heap.
    fn check_range(&self, first: u64, n: u64) -> Result<Range<u64>, PageError> {
        if n == 0 {
            return Err(PageError::Empty { first });
        }
        match first.checked_add(n) {
            Some(end) if end <= self.total => Ok(first..end),
            _ => Err(PageError::OutOfRange {
                first,
                n,
                total: self.total,
            }),
        }
    }

    /// The batch size an arena of `kind` gets now, or `None` if it is served JIT.
    fn batch_for(&self, kind: ArenaKind) -> Option<u64> {
        let PagePolicy::Caa { batch } = self.policy else {
            return None;
        };
        let floor = match kind {
            // A persistent arena yields first, even if the marks are swapped.
            ArenaKind::Persistent => self.marks.high.max(self.marks.low),
            ArenaKind::Volatile => self.marks.low,
        };
        (self.free_fraction() >= floor).then_some(batch)
    }

    /// The fraction of the heap in the global free set.
    fn free_fraction(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        self.free.pages as f64 / self.total as f64
    }

    /// CAA: the contiguous extent, else a fresh batch of `want` pages, else the
    /// non-contiguous list, else a non-contiguous batch, else the global set.
    fn take_caa(&mut self, arena: usize, n: u64, want: u64) -> Option<u64> {
        if let Some(first) = self.arenas[arena].take_contiguous(n) {
            return Some(first);
        }
        let bucket = &mut self.arenas[arena];
        bucket.demote();
        if let Some(start) = self.free.first_fit(want) {
            self.batches += 1;
            bucket.contiguous = start + n..start + want;
            return Some(start);
        }
        // No contiguous batch: use the leftovers before scattering more pages
        // into the bucket.
        if let Some(first) = bucket.noncontiguous.first_fit(n) {
            return Some(first);
        }
        if self.free.move_front(want, &mut bucket.noncontiguous) > 0 {
            self.batches += 1;
            self.noncontiguous_batches += 1;
        }
        self.take_jit(arena, n)
    }

    /// JIT: the arena's non-contiguous list if it holds `n` contiguous pages,
    /// else the global set, first fit.
    fn take_jit(&mut self, arena: usize, n: u64) -> Option<u64> {
        let bucket = &mut self.arenas[arena];
        bucket
            .noncontiguous
            .first_fit(n)
            .or_else(|| self.free.first_fit(n))
    }

    /// Counts a served request and whether it continues the arena's previous one.
    fn count(&mut self, arena: usize, first: u64, n: u64) {
        self.takes += 1;
        let a = &mut self.arenas[arena];
        if a.next.is_some_and(|next| next != first) {
            a.misses += 1;
        }
        a.next = Some(first + n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const V: ArenaKind = ArenaKind::Volatile;
    const P: ArenaKind = ArenaKind::Persistent;

    fn source(pages: u64, policy: PagePolicy, arenas: usize) -> PageSource {
        PageSource::new(pages, policy, arenas, Watermarks::default())
    }

    fn caa(batch: u64) -> PagePolicy {
        PagePolicy::Caa { batch }
    }

    /// `arenas` arenas take one page each in turn, `rounds` times, from a heap
    /// large enough to stay above the watermarks.
    fn interleaved(policy: PagePolicy, arenas: usize, rounds: u64) -> PageStats {
        let mut src = source(4096, policy, arenas);
        for _ in 0..rounds {
            for a in 0..arenas {
                assert!(src.take(a, V, 1).is_some());
            }
        }
        src.stats()
    }

    /// The global free set is merged and its count right.
    fn assert_merged(src: &PageSource) {
        let extents: Vec<(u64, u64)> = src.free.by_start.iter().map(|(&s, &l)| (s, l)).collect();
        assert_eq!(extents.iter().map(|e| e.1).sum::<u64>(), src.free.pages);
        for w in extents.windows(2) {
            assert!(w[0].0 + w[0].1 < w[1].0, "unmerged or overlapping: {w:?}");
        }
    }

    #[test]
    fn names() {
        assert_eq!(PagePolicy::Jit.name(), "jit");
        assert_eq!(caa(4).name(), "caa-4");
        assert_eq!(caa(16).name(), "caa-16");
    }

    #[test]
    fn jit_interleaved_arenas_miss_every_time() {
        let mut src = source(256, PagePolicy::Jit, 2);
        for i in 0..64 {
            assert_eq!(src.take(0, V, 1), Some(2 * i));
            assert_eq!(src.take(1, V, 1), Some(2 * i + 1));
        }
        let stats = src.stats();
        assert_eq!(stats.misses_per_arena, vec![63, 63]);
        assert_eq!(stats.contiguity_misses, 126);
        assert_eq!(stats.takes, 128);
        assert_eq!(stats.batches, 0);
    }

    #[test]
    fn caa_cuts_misses_against_jit() {
        for arenas in [2, 4] {
            let jit = interleaved(PagePolicy::Jit, arenas, 256).contiguity_misses;
            let caa4 = interleaved(caa(4), arenas, 256).contiguity_misses;
            let caa16 = interleaved(caa(16), arenas, 256).contiguity_misses;
            let a = arenas as u64;
            // JIT misses on every page after the first, CAA-N once per N pages.
            assert_eq!(jit, a * 255);
            assert_eq!(caa4, a * (256 / 4 - 1));
            assert_eq!(caa16, a * (256 / 16 - 1));
            assert!(caa4 * 4 <= jit, "CAA-4 {caa4} vs JIT {jit}: < 75 %");
            assert!(caa16 * 10 <= jit, "CAA-16 {caa16} vs JIT {jit}: < 90 %");
        }
    }

    #[test]
    fn caa_batches_are_per_arena_and_contiguous() {
        let mut src = source(64, caa(4), 2);
        assert_eq!(src.take(0, V, 1), Some(0));
        assert_eq!(src.take(1, V, 1), Some(4));
        assert_eq!(src.take(0, V, 1), Some(1));
        assert_eq!(src.take(1, V, 1), Some(5));
        assert_eq!(src.stats().batches, 2);
        assert_eq!(src.stats().contiguity_misses, 0);
        assert_eq!(src.free_pages(), 60);
    }

    #[test]
    fn multi_page_runs_are_disjoint() {
        for policy in [PagePolicy::Jit, caa(4), caa(16)] {
            let mut src = source(1024, policy, 3);
            let mut used = vec![false; 1024];
            for (i, n) in [2u64, 3, 8].into_iter().cycle().take(90).enumerate() {
                let first = src.take(i % 3, V, n).expect("room");
                for p in first..first + n {
                    assert!(!used[p as usize], "{policy:?}: page {p} twice");
                    used[p as usize] = true;
                }
            }
            let taken = used.iter().filter(|&&u| u).count() as u64;
            assert_eq!(src.free_pages() + taken, 1024);
        }
    }

    #[test]
    fn batch_smaller_than_request_reserves_the_request() {
        let mut src = source(64, caa(4), 2);
        assert_eq!(src.take(0, V, 8), Some(0));
        assert_eq!(src.stats().batches, 1);
        // The batch was exactly 8 pages: nothing left, so a new batch follows it.
        assert_eq!(src.take(0, V, 1), Some(8));
        assert_eq!(src.take(1, V, 1), Some(12));
        assert_eq!(src.stats().batches, 3);
        assert_eq!(src.free_pages(), 64 - 10);
        // A leftover too short for a request moves to the non-contiguous list.
        assert_eq!(src.take(0, V, 5), Some(16));
        assert_eq!(src.arenas[0].noncontiguous.pages, 3);
    }

    #[test]
    fn watermarks_turn_caa_off() {
        let mut src = source(100, caa(4), 2);
        assert_eq!(src.mark_used(0, 70), Ok(()));
        // 30 % free: both kinds batch.
        assert_eq!(src.take(0, P, 1), Some(70));
        for p in 71..74 {
            assert_eq!(src.take(0, P, 1), Some(p));
        }
        // 26 % free: still above high.
        assert_eq!(src.take(0, P, 1), Some(74));
        for p in 75..78 {
            assert_eq!(src.take(0, P, 1), Some(p));
        }
        assert_eq!(src.stats().batches, 2);
        // 22 % free: below high, the persistent arena goes JIT ...
        assert_eq!(src.take(0, P, 1), Some(78));
        assert_eq!(src.stats().batches, 2);
        // ... while the volatile one still batches.
        assert_eq!(src.take(1, V, 1), Some(79));
        assert_eq!(src.stats().batches, 3);
        assert_eq!(src.take(0, P, 1), Some(83), "first fit past the batch");
        assert_eq!(src.stats().batches, 3);
        // 6 % free: below low, everyone is JIT; the volatile arena uses up its
        // reserve, then the global set first fit.
        assert_eq!(src.mark_used(84, 10), Ok(()));
        for p in [80, 81, 82, 94, 95] {
            assert_eq!(src.take(1, V, 1), Some(p));
        }
        assert_eq!(src.stats().batches, 3);
        assert_eq!(src.free_pages(), 4);
    }

    #[test]
    fn fragmented_heap_gives_noncontiguous_batches() {
        let mut src = source(32, caa(4), 1);
        assert_eq!(src.mark_used(0, 32), Ok(()));
        for p in (1..16).step_by(2) {
            assert_eq!(src.give_back(p, 1), Ok(()));
        }
        // No 4-page extent: pages 1, 3, 5, 7 go to the non-contiguous list.
        assert_eq!(src.take(0, V, 1), Some(1));
        let stats = src.stats();
        assert_eq!((stats.batches, stats.noncontiguous_batches), (1, 1));
        assert_eq!(src.arenas[0].noncontiguous.pages, 3);
        // The list serves until empty, without new batches ...
        for p in [3, 5, 7] {
            assert_eq!(src.take(0, V, 1), Some(p));
        }
        assert_eq!(src.stats().batches, 1);
        // ... then the next scattered batch.
        assert_eq!(src.take(0, V, 1), Some(9));
        assert_eq!(src.stats().noncontiguous_batches, 2);
        // Two contiguous pages exist nowhere.
        assert_eq!(src.take(0, V, 2), None);
        assert_eq!(src.free_pages(), 3);
    }

    #[test]
    fn give_back_merges_and_catches_double_give_backs() {
        let mut src = source(16, PagePolicy::Jit, 1);
        for p in 0..3 {
            assert_eq!(src.take(0, V, 1), Some(p));
        }
        assert_eq!(src.give_back(1, 1), Ok(()));
        assert_eq!(src.give_back(1, 1), Err(PageError::NotInUse { page: 1 }));
        assert_eq!(src.give_back(0, 3), Err(PageError::NotInUse { page: 1 }));
        assert_eq!(src.give_back(0, 1), Ok(()));
        assert_eq!(src.give_back(2, 1), Ok(()));
        assert_merged(&src);
        assert_eq!(src.free.by_start.len(), 1);
        assert_eq!(src.take(0, V, 16), Some(0));
        assert_eq!(
            src.give_back(10, 7),
            Err(PageError::OutOfRange {
                first: 10,
                n: 7,
                total: 16
            })
        );
        assert_eq!(
            src.give_back(u64::MAX, 2),
            Err(PageError::OutOfRange {
                first: u64::MAX,
                n: 2,
                total: 16
            })
        );
        assert_eq!(src.give_back(3, 0), Err(PageError::Empty { first: 3 }));
    }

    #[test]
    fn bucket_pages_are_not_in_use() {
        let mut src = source(64, caa(16), 1);
        assert_eq!(src.take(0, V, 1), Some(0));
        assert_eq!(src.give_back(5, 1), Err(PageError::NotInUse { page: 5 }));
        assert_eq!(src.mark_used(5, 1), Err(PageError::NotFree { page: 5 }));
    }

    #[test]
    fn mark_used_needs_free_pages() {
        let mut src = source(16, PagePolicy::Jit, 1);
        assert_eq!(src.mark_used(4, 4), Ok(()));
        assert_eq!(src.mark_used(6, 1), Err(PageError::NotFree { page: 6 }));
        assert_eq!(src.mark_used(2, 4), Err(PageError::NotFree { page: 4 }));
        assert!(matches!(
            src.mark_used(15, 2),
            Err(PageError::OutOfRange { .. })
        ));
        assert_eq!(src.free_pages(), 12);
        assert_eq!(src.take(0, V, 4), Some(0));
        assert_eq!(src.take(0, V, 4), Some(8));
    }

    #[test]
    fn release_buckets_returns_reserves() {
        let mut src = source(64, caa(16), 2);
        assert_eq!(src.take(0, V, 1), Some(0));
        assert_eq!(src.take(1, V, 1), Some(16));
        assert_eq!(src.free_pages(), 62);
        assert_eq!(src.free.pages, 32);
        src.release_buckets();
        assert_eq!(src.free_pages(), 62);
        assert_eq!(src.free.pages, 62);
        assert_merged(&src);
        // Both batches are back in the global set, merged with the free rest.
        let extents: Vec<(u64, u64)> = src.free.by_start.iter().map(|(&s, &l)| (s, l)).collect();
        assert_eq!(extents, vec![(1, 15), (17, 47)]);
    }

    #[test]
    fn degenerate_inputs_do_not_panic() {
        let mut src = source(8, caa(4), 2);
        assert_eq!(src.take(0, V, 0), None);
        assert_eq!(src.take(0, V, 9), None);
        assert_eq!(src.take(7, V, 1), Some(0), "arena 7 wraps to 1");
        assert_eq!(src.stats().misses_per_arena.len(), 2);
        let mut empty = PageSource::new(0, caa(4), 0, Watermarks::default());
        assert_eq!(empty.take(0, P, 1), None);
        assert_eq!(empty.free_pages(), 0);
        empty.release_buckets();
    }

    #[derive(Clone, Debug)]
    enum Op {
        Take {
            arena: usize,
            persistent: bool,
            n: u64,
        },
        GiveBack(usize),
        Release,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0..6usize, any::<bool>(), 1..=9u64)
                .prop_map(|(arena, persistent, n)| Op::Take { arena, persistent, n }),
            3 => any::<usize>().prop_map(Op::GiveBack),
            1 => Just(Op::Release),
        ]
    }

    fn policy() -> impl Strategy<Value = PagePolicy> {
        prop_oneof![Just(PagePolicy::Jit), (0..20u64).prop_map(caa)]
    }

    proptest! {
        #[test]
        fn never_hands_out_a_page_twice(
            pages in 1..96u64,
            policy in policy(),
            arenas in 1..5usize,
            high in 0.0..1.0f64,
            low in 0.0..1.0f64,
            recovered in (any::<u64>(), 0..12u64),
            ops in proptest::collection::vec(op(), 0..120),
        ) {
            let mut src = PageSource::new(pages, policy, arenas, Watermarks { high, low });
            let mut used = vec![false; pages as usize];
            let mut runs: Vec<(u64, u64)> = Vec::new();
            let (first, n) = (recovered.0 % pages, recovered.1);
            match src.mark_used(first, n) {
                Ok(()) => {
                    used[first as usize..(first + n) as usize].fill(true);
                    runs.push((first, n));
                }
                Err(e) => prop_assert!(n == 0 || first + n > pages, "{e}"),
            }
            for op in ops {
                match op {
                    Op::Take { arena, persistent, n } => {
                        let kind = if persistent { P } else { V };
                        match src.take(arena, kind, n) {
                            Some(first) => {
                                prop_assert!(first + n <= pages);
                                for p in first..first + n {
                                    prop_assert!(!used[p as usize], "page {} twice", p);
                                    used[p as usize] = true;
                                }
                                runs.push((first, n));
                            }
                            // Only when the global set has no such run.
                            None => prop_assert!(src.free.by_start.values().all(|&l| l < n)),
                        }
                    }
                    Op::GiveBack(i) if !runs.is_empty() => {
                        let (first, n) = runs.swap_remove(i % runs.len());
                        prop_assert_eq!(src.give_back(first, n), Ok(()));
                        used[first as usize..(first + n) as usize].fill(false);
                        prop_assert!(src.give_back(first, n).is_err());
                    }
                    Op::GiveBack(_) => {}
                    Op::Release => {
                        let before = src.free_pages();
                        src.release_buckets();
                        prop_assert_eq!(src.free_pages(), before);
                        prop_assert_eq!(src.free.pages, before);
                    }
                }
                assert_merged(&src);
                let taken = used.iter().filter(|&&u| u).count() as u64;
                prop_assert_eq!(src.free_pages() + taken, pages);
            }
            for (first, n) in runs {
                prop_assert_eq!(src.give_back(first, n), Ok(()));
            }
            src.release_buckets();
            prop_assert_eq!(src.free_pages(), pages);
            prop_assert_eq!(src.free.by_start.len(), 1);
            prop_assert_eq!(src.take(0, P, pages), Some(0));
        }
    }
}
