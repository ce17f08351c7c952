//! A read-only look at a WAFA heap: what `pmkit pool info` and `pmkit pool check`
//! report about it.
//!
//! [`Wafa::open`] repairs as it recovers (frees orphan run tails, redoes or clears
//! an interrupted `alloc_publish`). [`Wafa::inspect`] makes the same checks — the
//! region header's checksum and geometry, every kind-table byte, every divided
//! page's metadata bit, the intent record's checksum and bounds — and reports what
//! the next open would repair, writing nothing.

use pmem_core::{PPtr, Pool};

use crate::error::WafaError;
use crate::heap::Wafa;
use crate::layout::{Intent, IntentKind, Kind, INTENT_OFF, META_OFF, PAGE, UNIT};
use crate::recover::read_region;
use crate::segment::DATA_UNITS;
use crate::state::META_BIT;

/// What [`Wafa::inspect`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WafaSummary {
    /// Pages of the heap.
    pub pages: u32,
    /// Pages divided into 64-byte units.
    pub divided_pages: u32,
    /// Pages in whole-page runs (large blocks).
    pub run_pages: u32,
    /// Whole-page runs (large blocks).
    pub runs: u32,
    /// Units allocated in divided pages.
    pub units_used: u64,
    /// Maximal runs of allocated units in divided pages: a lower bound on the
    /// small blocks (adjacent blocks look like one run).
    pub unit_runs: u64,
    /// Bytes allocated (units and run pages).
    pub bytes_used: u64,
    /// Bytes the heap can hand out in all (every page's data units).
    pub bytes_total: u64,
    /// Free bytes inside divided pages over all free bytes: the share of free space
    /// only small requests can use (0: every free byte lies in whole free pages).
    pub fragmentation: f64,
    /// Run-tail pages with no run head, which the next open frees.
    pub orphan_pages: u32,
    /// Whether an intact `alloc_publish` intent awaits its redo at the next open.
    pub intent_pending: bool,
}

fn corrupt(reason: impl Into<String>) -> WafaError {
    WafaError::Corrupt {
        reason: reason.into(),
    }
}

impl Wafa {
    /// Reads and checks the WAFA heap of `pool` without writing anything (works on
    /// a read-only pool): what [`Wafa::open`] checks, and what it would repair.
    ///
    /// Takes `&mut Pool` so that no allocator can be live on the pool while it
    /// reads.
    ///
    /// # Errors
    /// [`WafaError::NotFormatted`] if no WAFA heap starts at the pool's heap,
    /// [`WafaError::Corrupt`] naming the damage.
    pub fn inspect(pool: &mut Pool) -> Result<WafaSummary, WafaError> {
        let pool: &Pool = pool;
        let heap = pool.heap();
        let geo = read_region(pool)?;
        let kinds = pool.bytes(geo.kinds_off, u64::from(geo.pages))?;
        let mut s = WafaSummary {
            pages: geo.pages,
            bytes_total: u64::from(geo.pages) * u64::from(DATA_UNITS) * UNIT,
            ..WafaSummary::default()
        };
        let mut free_in_divided = 0u64;
        let mut free_pages = 0u64;
        let mut in_run = false;
        for (p, &byte) in kinds.iter().enumerate() {
            let kind = Kind::from_byte(byte)
                .ok_or_else(|| corrupt(format!("page {p} has kind {byte}")))?;
            match kind {
                Kind::Free => free_pages += 1,
                Kind::Divided => {
                    let [bitmap, _info]: [u64; 2] =
                        pool.read(PPtr::from_offset(geo.page_off(p as u32) + META_OFF))?;
                    if bitmap & META_BIT == 0 {
                        return Err(corrupt(format!("divided page {p} has no metadata bit")));
                    }
                    let data = bitmap & !META_BIT;
                    let used = u64::from(data.count_ones());
                    s.divided_pages += 1;
                    s.units_used += used;
                    s.unit_runs += u64::from((data & !(data << 1)).count_ones());
                    free_in_divided += u64::from(DATA_UNITS) - used;
                }
                Kind::RunHead => {
                    s.runs += 1;
                    s.run_pages += 1;
                }
                Kind::RunTail if in_run => s.run_pages += 1,
                Kind::RunTail => s.orphan_pages += 1,
            }
            in_run =
                matches!(kind, Kind::RunHead | Kind::RunTail) && (in_run || kind == Kind::RunHead);
        }
        s.bytes_used = s.units_used * UNIT + u64::from(s.run_pages) * PAGE;
        let free_bytes = free_in_divided * UNIT + free_pages * PAGE;
        if free_bytes > 0 {
            s.fragmentation = (free_in_divided * UNIT) as f64 / free_bytes as f64;
        }
        let intent = pool.read(PPtr::<Intent>::from_offset(heap.start + INTENT_OFF))?;
        if intent.intact() == Some(IntentKind::AllocPublish) {
            let end = geo.first_page + u64::from(geo.pages) * PAGE;
            if intent.block < geo.first_page
                || intent.block.saturating_add(intent.extent) > end
                || intent.extent == 0
            {
                return Err(corrupt("intent names a block outside the pages"));
            }
            s.intent_pending = true;
        }
        Ok(s)
    }
}
