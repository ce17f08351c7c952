//! The allocators WAFA is compared with on the same traces, behind [`WearTarget`].
//!
//! * [`PageGrained`] (`page_grained`, simulated): every request gets whole 4 KiB pages
//!   (the lowest-numbered free run: first fit) and its bytes start at the page's
//!   first unit — the page-grained allocator of the paper's motivation (§1, Fig. 1),
//!   which "converges writes on the memory cells at the beginning of a page".
//! * [`NvmallocLike`] (`nvmalloc_like`, simulated): fine-grained, first fit over
//!   64 B units in address order, with NVMalloc's wear rule as the paper states it:
//!   a page may be allocated from at most twice per window. The paper (like
//!   NVMalloc) uses a 100 ms window; here the window is a number of allocator calls
//!   (allocations and frees), `--nvmalloc-window`, default
//!   [`DEFAULT_NVMALLOC_WINDOW`] = 100 ms at 100,000 calls/s, the request rate of a
//!   busy single-node memcached or YCSB client (a replay runs much faster than that,
//!   so wall time cannot be used). Windows are global and fixed: calls
//!   `[kW, (k+1)W)`. When no page is eligible the rule is waived (first fit over
//!   all pages); the simulated space is large enough that this does not happen in
//!   these workloads, and [`NvmallocLike::waived`] counts it.
//! * [`Libc`] (`glibc`), [`Jemalloc`] (`jemalloc`), [`Mimalloc`] (`mimalloc`): the
//!   real allocators, called through their C entry points (`malloc`/`free`,
//!   `_rjem_malloc`/`_rjem_free`, `mi_malloc`/`mi_free`); their wear is taken from
//!   the virtual addresses they return.
//!
//! The simulated spaces have [`SIM_PAGES`] pages (256 MiB) at address 0, enough for
//! every workload's peak under whole-page allocation (memcached ends with 20,000
//! live items of two pages each), all 64 units of a page usable (no metadata unit).
//! Only touched pages enter the metrics, so the size of the space does not.

use crate::workloads::WearTarget;

/// Pages of the simulated spaces (256 MiB).
pub const SIM_PAGES: usize = 65_536;
/// Units per page.
const UNITS: u32 = 64;
/// Default NVMalloc window, in allocator calls: 100 ms at 100,000 calls/s.
pub const DEFAULT_NVMALLOC_WINDOW: u64 = 10_000;
/// Allocations NVMalloc allows from one page per window.
const NVMALLOC_ALLOCS_PER_WINDOW: u8 = 2;

/// Units needed for `size` bytes.
fn units_for(size: u32) -> u32 {
    size.div_ceil(64).max(1)
}

/// Pages needed for `size` bytes.
fn pages_for(size: u32) -> usize {
    size.div_ceil(4096).max(1) as usize
}

/// Lowest start of a run of `n` (1..=64) clear bits in `used`, if any.
fn first_fit_in_page(used: u64, n: u32) -> Option<u32> {
    debug_assert!((1..=UNITS).contains(&n));
    let free = !used;
    let mut starts = free;
    // Bit s of `starts` survives iff bits s..s+i are all free; bits shifted in
    // from above are zero, so runs crossing the page end are excluded.
    for i in 1..n {
        starts &= free >> i;
        if starts == 0 {
            return None;
        }
    }
    (starts != 0).then(|| starts.trailing_zeros())
}

/// Bitmap of units `[first, first + n)`.
fn mask(first: u32, n: u32) -> u64 {
    debug_assert!(n >= 1 && first + n <= UNITS);
    (u64::MAX >> (UNITS - n)) << first
}

/// First fit over a bitmap of pages for a run of `n` free pages.
fn first_free_pages(used: &[bool], n: usize) -> Option<usize> {
    let mut run = 0usize;
    for (i, &u) in used.iter().enumerate() {
        run = if u { 0 } else { run + 1 };
        if run == n {
            return Some(i + 1 - n);
        }
    }
    None
}

/// Whole-page allocation; see the module documentation.
pub struct PageGrained {
    used: Vec<bool>,
    /// No page below this is free (a lower bound for the first-fit scan).
    low: usize,
}

impl PageGrained {
    /// An empty space of `pages` pages.
    pub fn new(pages: usize) -> PageGrained {
        PageGrained {
            used: vec![false; pages],
            low: 0,
        }
    }
}

impl WearTarget for PageGrained {
    fn name(&self) -> &'static str {
        "page_grained"
    }

    fn alloc(&mut self, size: u32) -> Result<u64, String> {
        let n = pages_for(size);
        let at = first_free_pages(&self.used[self.low..], n)
            .map(|i| i + self.low)
            .ok_or_else(|| format!("out of simulated pages for {size} B"))?;
        self.used[at..at + n].fill(true);
        if at == self.low {
            self.low += n;
        }
        Ok((at as u64) << 12)
    }

    unsafe fn free(&mut self, addr: u64, size: u32) -> Result<(), String> {
        let at = (addr >> 12) as usize;
        let n = pages_for(size);
        let pages = self
            .used
            .get_mut(at..at + n)
            .ok_or_else(|| format!("free of {addr:#x} outside the space"))?;
        if addr & 4095 != 0 || pages.iter().any(|u| !u) {
            return Err(format!("invalid free of {addr:#x} ({size} B)"));
        }
        pages.fill(false);
        self.low = self.low.min(at);
        Ok(())
    }
}

/// One page of the NVMalloc-like space.
#[derive(Clone, Copy, Default)]
struct NvPage {
    /// Units in use.
    used: u64,
    /// Window of the last allocation from this page.
    window: u64,
    /// Allocations from this page in that window.
    allocs: u8,
}

/// NVMalloc's page rule over first fit; see the module documentation.
pub struct NvmallocLike {
    pages: Vec<NvPage>,
    /// Window length in allocator calls.
    window_calls: u64,
    /// Allocator calls so far.
    calls: u64,
    /// Pages below this are, in the current window, exhausted or completely full
    /// (a lower bound for the scan; reset by a new window and lowered by frees).
    low: usize,
    /// Window `low` was computed in.
    low_window: u64,
    /// Allocations that found no eligible page and waived the rule.
    pub waived: u64,
}

impl NvmallocLike {
    /// An empty space of `pages` pages with a window of `window_calls` calls (>= 1).
    pub fn new(pages: usize, window_calls: u64) -> NvmallocLike {
        NvmallocLike {
            pages: vec![NvPage::default(); pages],
            window_calls: window_calls.max(1),
            calls: 0,
            low: 0,
            low_window: 0,
            waived: 0,
        }
    }

    fn window(&self) -> u64 {
        self.calls / self.window_calls
    }

    /// Whether page `p` may still be allocated from in window `w`.
    fn eligible(p: &NvPage, w: u64) -> bool {
        p.window != w || p.allocs < NVMALLOC_ALLOCS_PER_WINDOW
    }

    fn take(&mut self, page: usize, first: u32, n: u32, w: u64) -> u64 {
        let p = &mut self.pages[page];
        p.used |= mask(first, n);
        if p.window != w {
            p.window = w;
            p.allocs = 0;
        }
        p.allocs = p.allocs.saturating_add(1);
        ((page as u64) << 12) | (u64::from(first) << 6)
    }

    fn alloc_units(&mut self, n: u32, w: u64) -> Option<u64> {
        let mut advancing = true;
        for i in self.low..self.pages.len() {
            let p = self.pages[i];
            let ok = Self::eligible(&p, w);
            if advancing && (!ok || p.used == u64::MAX) {
                self.low = i + 1;
                continue;
            }
            advancing = false;
            if ok {
                if let Some(first) = first_fit_in_page(p.used, n) {
                    return Some(self.take(i, first, n, w));
                }
            }
        }
        // No eligible page has room: waive the rule.
        for i in 0..self.pages.len() {
            if let Some(first) = first_fit_in_page(self.pages[i].used, n) {
                self.waived += 1;
                return Some(self.take(i, first, n, w));
            }
        }
        None
    }

    fn alloc_pages(&mut self, n: usize, w: u64) -> Option<u64> {
        let free: Vec<bool> = self
            .pages
            .iter()
            .map(|p| p.used != 0 || !Self::eligible(p, w))
            .collect();
        let at = first_free_pages(&free, n)?;
        for i in at..at + n {
            self.take(i, 0, UNITS, w);
        }
        Some((at as u64) << 12)
    }
}

impl WearTarget for NvmallocLike {
    fn name(&self) -> &'static str {
        "nvmalloc_like"
    }

    fn alloc(&mut self, size: u32) -> Result<u64, String> {
        let w = self.window();
        self.calls += 1;
        if w != self.low_window {
            self.low = 0;
            self.low_window = w;
        }
        let n = units_for(size);
        let got = if n <= UNITS {
            self.alloc_units(n, w)
        } else {
            self.alloc_pages(pages_for(size), w)
        };
        got.ok_or_else(|| format!("out of simulated space for {size} B"))
    }

    unsafe fn free(&mut self, addr: u64, size: u32) -> Result<(), String> {
        self.calls += 1;
        let n = units_for(size);
        let page = (addr >> 12) as usize;
        let (pages, first, per_page) = if n <= UNITS {
            (1, ((addr >> 6) & 63) as u32, n)
        } else {
            (pages_for(size), 0, UNITS)
        };
        let span = self
            .pages
            .get_mut(page..page + pages)
            .ok_or_else(|| format!("free of {addr:#x} outside the space"))?;
        let m = mask(first, per_page);
        if addr & 63 != 0 || span.iter().any(|p| p.used & m != m) {
            return Err(format!("invalid free of {addr:#x} ({size} B)"));
        }
        for p in span {
            p.used &= !m;
        }
        self.low = self.low.min(page);
        Ok(())
    }
}

/// glibc's `malloc`/`free` (the process allocator of this program).
pub struct Libc;

impl WearTarget for Libc {
    fn name(&self) -> &'static str {
        "glibc"
    }

    fn alloc(&mut self, size: u32) -> Result<u64, String> {
        // SAFETY: malloc has no preconditions; a null result is handled.
        let p = unsafe { libc::malloc(size as usize) };
        if p.is_null() {
            return Err(format!("malloc({size}) failed"));
        }
        Ok(p as u64)
    }

    unsafe fn free(&mut self, addr: u64, _size: u32) -> Result<(), String> {
        // SAFETY: the caller passes a live block from `alloc`, i.e. from malloc.
        unsafe { libc::free(addr as *mut libc::c_void) };
        Ok(())
    }
}

/// jemalloc (tikv-jemalloc-sys: its own prefixed symbols, so it does not replace the
/// process allocator).
pub struct Jemalloc;

impl WearTarget for Jemalloc {
    fn name(&self) -> &'static str {
        "jemalloc"
    }

    fn alloc(&mut self, size: u32) -> Result<u64, String> {
        // SAFETY: malloc has no preconditions; a null result is handled.
        let p = unsafe { tikv_jemalloc_sys::malloc(size as usize) };
        if p.is_null() {
            return Err(format!("jemalloc malloc({size}) failed"));
        }
        Ok(p as u64)
    }

    unsafe fn free(&mut self, addr: u64, _size: u32) -> Result<(), String> {
        // SAFETY: the caller passes a live block from `alloc`, i.e. from jemalloc.
        unsafe { tikv_jemalloc_sys::free(addr as *mut libc::c_void) };
        Ok(())
    }
}

/// mimalloc (libmimalloc-sys, `mi_` symbols; not the process allocator).
pub struct Mimalloc;

impl WearTarget for Mimalloc {
    fn name(&self) -> &'static str {
        "mimalloc"
    }

    fn alloc(&mut self, size: u32) -> Result<u64, String> {
        // SAFETY: mi_malloc has no preconditions; a null result is handled.
        let p = unsafe { libmimalloc_sys::mi_malloc(size as usize) };
        if p.is_null() {
            return Err(format!("mi_malloc({size}) failed"));
        }
        Ok(p as u64)
    }

    unsafe fn free(&mut self, addr: u64, _size: u32) -> Result<(), String> {
        // SAFETY: the caller passes a live block from `alloc`, i.e. from mi_malloc.
        unsafe { libmimalloc_sys::mi_free(addr as *mut libc::c_void) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_in_page_finds_the_lowest_run() {
        assert_eq!(first_fit_in_page(0, 1), Some(0));
        assert_eq!(first_fit_in_page(0b1, 1), Some(1));
        assert_eq!(first_fit_in_page(0b1011, 2), Some(4));
        assert_eq!(first_fit_in_page(0b1001, 2), Some(1));
        assert_eq!(first_fit_in_page(u64::MAX, 1), None);
        assert_eq!(first_fit_in_page(0, 64), Some(0));
        assert_eq!(first_fit_in_page(1, 64), None);
        // Only the top 3 units free: a run of 4 does not fit past the end.
        assert_eq!(first_fit_in_page(u64::MAX >> 3, 4), None);
        assert_eq!(first_fit_in_page(u64::MAX >> 3, 3), Some(61));
    }

    #[test]
    fn page_grained_reuses_the_first_free_page_from_its_start() {
        let mut a = PageGrained::new(8);
        let x = a.alloc(10).expect("alloc");
        let y = a.alloc(256).expect("alloc");
        assert_eq!((x, y), (0, 4096));
        // SAFETY: `x` is live, from `a`, 10 B.
        unsafe { a.free(x, 10) }.expect("free");
        assert_eq!(a.alloc(30).expect("alloc"), 0);
        let big = a.alloc(8192).expect("alloc");
        assert_eq!(big, 2 * 4096);
        // SAFETY: `y` is live, from `a`, 256 B.
        unsafe { a.free(y, 256) }.expect("free");
        assert_eq!(a.alloc(5000).expect("alloc"), 4 * 4096);
        // SAFETY: `y` was already freed: the double free must be refused.
        assert!(unsafe { a.free(y, 256) }.is_err());
    }

    #[test]
    fn nvmalloc_like_allows_two_allocations_per_page_per_window() {
        let mut a = NvmallocLike::new(4, 100);
        let got: Vec<u64> = (0..5).map(|_| a.alloc(64).expect("alloc")).collect();
        // Page 0 twice, then page 1 twice, then page 2.
        assert_eq!(got, vec![0, 64, 4096, 4096 + 64, 8192]);
        // Free everything on page 0: still exhausted in this window.
        for &x in &got[..2] {
            // SAFETY: each is live, from `a`, 64 B.
            unsafe { a.free(x, 64) }.expect("free");
        }
        assert_eq!(a.alloc(64).expect("alloc"), 8192 + 64);
        // Next window: page 0 is eligible again, first fit from unit 0.
        a.calls = 100;
        assert_eq!(a.alloc(256).expect("alloc"), 0);
        assert_eq!(a.alloc(10).expect("alloc"), 4 * 64);
        assert_eq!(a.alloc(10).expect("alloc"), 4096 + 2 * 64);
        assert_eq!(a.waived, 0);
    }

    #[test]
    fn nvmalloc_like_waives_the_rule_when_nothing_is_eligible() {
        let mut a = NvmallocLike::new(1, 1_000);
        for i in 0..4u64 {
            assert_eq!(a.alloc(64).expect("alloc"), 64 * i);
        }
        assert_eq!(a.waived, 2);
    }

    #[test]
    fn nvmalloc_like_refuses_bad_frees() {
        let mut a = NvmallocLike::new(2, 10);
        let x = a.alloc(128).expect("alloc");
        // SAFETY: deliberately wrong size/address: the simulator must refuse them
        // (it is simulated, so nothing real is freed).
        assert!(unsafe { a.free(x + 64, 128) }.is_err());
        // SAFETY: `x` is live, from `a`, 128 B.
        unsafe { a.free(x, 128) }.expect("free");
        // SAFETY: as above: a double free is refused.
        assert!(unsafe { a.free(x, 128) }.is_err());
    }

    #[test]
    fn real_allocators_round_trip() {
        let targets: [&mut dyn WearTarget; 3] = [&mut Libc, &mut Jemalloc, &mut Mimalloc];
        for t in targets {
            let a = t.alloc(256).expect("alloc");
            assert_ne!(a, 0);
            // SAFETY: `a` is live, from `t`, 256 B.
            unsafe { t.free(a, 256) }.expect("free");
        }
    }
}
