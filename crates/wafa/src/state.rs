//! The DRAM side of WAFA: the metadata cache of every page, the buckets, the free
//! pages, and the wear counts.

use crate::buckets::Buckets;
use crate::segment::{max_segment, max_segment_at, DATA_UNITS};

/// Bit of the metadata unit in a page bitmap.
pub const META_BIT: u64 = 1 << 63;

/// The cached state of one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    /// Not in use.
    Free,
    /// Divided into units: the metadata cache (`C_FU`, `S_MS`, clock position `S_FF`).
    Divided {
        /// Allocation bitmap (bit 63 = metadata unit, always set).
        bitmap: u64,
        /// Free units.
        c_fu: u8,
        /// Size of the maximum free segment in the rest of the run (bucket index).
        s_ms: u8,
        /// Clock position: first unit of that segment.
        pos: u8,
    },
    /// First page of a whole-page run of `pages` pages.
    RunHead {
        /// Pages in the run.
        pages: u32,
    },
    /// A following page of a run.
    RunTail,
}

/// Units `[first, first + n)` as a bitmap.
#[inline]
pub fn unit_mask(first: u32, n: u32) -> u64 {
    debug_assert!(first + n <= 64 && n > 0);
    (u64::MAX >> (64 - n)) << first
}

/// Units `[0, n)` as a bitmap (empty for 0).
#[inline]
pub fn unit_mask_below(n: u32) -> u64 {
    if n == 0 {
        0
    } else {
        u64::MAX >> (64 - n)
    }
}

/// What [`State::take_units`] handed out, and the page metadata to write.
#[derive(Clone, Copy, Debug)]
pub struct Taken {
    /// The page.
    pub page: u32,
    /// First unit of the block.
    pub first: u32,
    /// The page's new bitmap (metadata word 0).
    pub bitmap: u64,
    /// Its packed `C_FU`, `S_MS`, `S_FF` (metadata word 1).
    pub info: u64,
}

/// The whole DRAM state, behind the allocator's lock.
#[derive(Debug)]
pub struct State {
    /// Every page.
    pub pages: Vec<Page>,
    /// Divided pages by maximum segment.
    pub buckets: Buckets,
    /// Free pages, one bit each (set = free).
    pub free: Vec<u64>,
    /// Number of free pages.
    pub free_count: u32,
    /// Next-fit cursor over the free pages.
    pub cursor: u32,
    /// Frees since the last reform (what triggers one).
    pub frees_since_reform: u64,
    /// Pages whose cached bitmap has frees not yet written to media.
    pub dirty: Vec<bool>,
    /// Whether the reform daemon was woken since the last pass (wake it once).
    pub daemon_woken: bool,
    /// Pages below this were populated ahead of use (or populating is off).
    pub prefaulted_to: u32,
    /// Allocation count per unit, page-major (with the `wear` feature).
    #[cfg(feature = "wear")]
    pub wear: Vec<u64>,
}

impl State {
    /// All pages free.
    pub fn new(pages: u32) -> State {
        let n = pages as usize;
        let mut free = vec![u64::MAX; n.div_ceil(64)];
        if !n.is_multiple_of(64) {
            if let Some(last) = free.last_mut() {
                *last = (1u64 << (n % 64)) - 1;
            }
        }
        State {
            pages: vec![Page::Free; n],
            buckets: Buckets::new(n),
            free,
            free_count: pages,
            cursor: 0,
            frees_since_reform: 0,
            dirty: vec![false; n],
            daemon_woken: false,
            prefaulted_to: 0,
            #[cfg(feature = "wear")]
            wear: vec![0; n * 64],
        }
    }

    /// Clockwise Best-Fit on the divided pages (Algorithm 1, lines 2–8): takes
    /// `units` units (1..=63) at the clock of the first page of the smallest
    /// non-empty bucket `>= units`, moves the clock to the largest free segment in the
    /// rest of the run and the page to the tail of that segment's bucket. `None` when
    /// no bucket fits. The caller writes the returned metadata to the page.
    #[inline]
    pub fn take_units(&mut self, units: u32) -> Option<Taken> {
        let page = self.buckets.first_at_least(units as usize)?;
        let Page::Divided {
            bitmap, c_fu, pos, ..
        } = self.pages[page as usize]
        else {
            // Only divided pages are ever put in a bucket.
            return None;
        };
        let first = u32::from(pos);
        // A page in bucket `k` has `k` free units at its clock (checked by
        // `check_consistency`), and `k >= units`.
        let bitmap = bitmap | unit_mask(first, units);
        let c_fu = u32::from(c_fu) - units;
        let (s_ms, next) = max_segment_at(bitmap, first + units);
        self.pages[page as usize] = Page::Divided {
            bitmap,
            c_fu: c_fu as u8,
            s_ms: s_ms as u8,
            pos: next as u8,
        };
        // The page's metadata write that follows carries its cached frees.
        self.dirty[page as usize] = false;
        self.buckets.push_tail(s_ms as usize, page, c_fu as u8);
        #[cfg(feature = "wear")]
        for u in first..first + units {
            self.wear[page as usize * 64 + u as usize] += 1;
        }
        Some(Taken {
            page,
            first,
            bitmap,
            info: crate::layout::pack_info(c_fu, s_ms, next),
        })
    }

    /// Releases units `mask` (`units` of them) of page `page` in the cache: the
    /// small-block free. Refuses a page that is not divided or units that are not
    /// all allocated. Returns the frees since the last reform.
    #[inline]
    pub fn release_units(&mut self, page: u32, mask: u64, units: u32) -> Result<u64, &'static str> {
        let Some(Page::Divided { bitmap, c_fu, .. }) = self.pages.get_mut(page as usize) else {
            return Err("not in a divided page");
        };
        if *bitmap & mask != mask {
            return Err("not allocated (double free?)");
        }
        *bitmap &= !mask;
        *c_fu += units as u8;
        self.buckets.add_free(page, units as u8);
        self.dirty[page as usize] = true;
        self.frees_since_reform += 1;
        Ok(self.frees_since_reform)
    }

    /// Marks page `p` free or not in the free bitmap.
    pub fn set_free(&mut self, p: u32, is_free: bool) {
        let (w, b) = ((p / 64) as usize, p % 64);
        let was = self.free[w] & (1 << b) != 0;
        if is_free && !was {
            self.free[w] |= 1 << b;
            self.free_count += 1;
        } else if !is_free && was {
            self.free[w] &= !(1 << b);
            self.free_count -= 1;
        }
    }

    /// Whether page `p` is free.
    pub fn is_free(&self, p: u32) -> bool {
        self.free[(p / 64) as usize] & (1 << (p % 64)) != 0
    }

    /// The first run of `n` free pages, next-fit from the cursor.
    pub fn find_free_run(&self, n: u32) -> Option<u32> {
        let total = self.pages.len() as u32;
        if n == 0 || n > self.free_count {
            return None;
        }
        for start_at in [self.cursor.min(total), 0] {
            let mut run_start = start_at;
            let mut p = start_at;
            while p < total {
                if !self.is_free(p) {
                    run_start = p + 1;
                    p += 1;
                    continue;
                }
                if p + 1 - run_start == n {
                    return Some(run_start);
                }
                p += 1;
            }
        }
        None
    }

    /// Makes page `p` a fresh divided page (in DRAM) in the top bucket.
    pub fn divide(&mut self, p: u32) {
        self.set_free(p, false);
        self.pages[p as usize] = Page::Divided {
            bitmap: META_BIT,
            c_fu: DATA_UNITS as u8,
            s_ms: DATA_UNITS as u8,
            pos: 0,
        };
        self.buckets
            .push_tail(DATA_UNITS as usize, p, DATA_UNITS as u8);
    }

    /// Rebuilds a divided page's cache from its bitmap. The clock keeps turning: it
    /// moves to the largest free segment in the rest of the run (at or after
    /// `clock`), and a new run starts from the page's beginning only when the rest of
    /// the run has no free unit left. (The paper resets the clock to the page's
    /// largest segment; doing that unconditionally sends an alloc/free/reform cycle
    /// back to the same low units every time, which is the wear WAFA exists to
    /// avoid. Pages whose rest of run is small keep serving small requests from the
    /// small buckets until it is used up.)
    ///
    /// With `restart`, the page starts over at its largest free segment wherever it
    /// is (used when a request finds no room anywhere else).
    ///
    /// Without `new_run`, a page whose run is used up stays where it is (bucket 0)
    /// instead of starting a new run: while free pages remain, fresh pages take the
    /// requests, so every unit of the heap is written once before any is written
    /// again.
    pub fn reform_page(
        &mut self,
        p: u32,
        clock: u32,
        restart: bool,
        new_run: bool,
    ) -> Option<(u64, u32, u32, u32)> {
        let Page::Divided { bitmap, .. } = self.pages[p as usize] else {
            return None;
        };
        let c_fu = DATA_UNITS - (bitmap & !META_BIT).count_ones();
        let clock = clock.min(DATA_UNITS);
        let (k_rest, p_rest) = max_segment(bitmap, clock);
        let (k_before, p_before) = max_segment(bitmap | !unit_mask_below(clock), 0);
        let keep_turning = if restart {
            k_rest >= k_before
        } else {
            k_rest > 0 || k_before == 0 || !new_run
        };
        let (s_ms, pos) = if keep_turning {
            (k_rest, p_rest)
        } else {
            (k_before, p_before)
        };
        self.pages[p as usize] = Page::Divided {
            bitmap,
            c_fu: c_fu as u8,
            s_ms: s_ms as u8,
            pos: pos as u8,
        };
        self.buckets.push_tail(s_ms as usize, p, c_fu as u8);
        Some((bitmap, c_fu, s_ms, pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        assert_eq!(unit_mask(0, 1), 1);
        assert_eq!(unit_mask(3, 2), 0b11000);
        assert_eq!(unit_mask(0, 63), (1 << 63) - 1);
        assert_eq!(unit_mask(1, 63), u64::MAX - 1);
    }

    #[test]
    fn free_runs() {
        let mut s = State::new(70);
        assert_eq!(s.free_count, 70);
        s.set_free(1, false);
        assert_eq!(s.find_free_run(1), Some(0));
        assert_eq!(s.find_free_run(2), Some(2));
        assert_eq!(s.find_free_run(68), Some(2));
        assert_eq!(s.find_free_run(69), None);
        s.divide(0);
        assert_eq!(s.buckets.first(63), Some(0));
        assert_eq!(s.free_count, 68);
    }
}
