//! The two workloads of the WAFA paper (§4.1) as deterministic allocation traces, and
//! the replay that turns a trace plus an allocator into per-unit allocation counts.
//!
//! A trace is a list of allocator calls ([`Op`]); every allocation names a slot, and
//! the matching free names the same slot, so one trace drives any allocator. Traces
//! are generated once per run from a fixed seed with SplitMix64, so every allocator
//! sees exactly the same sequence and every run the same traces.
//!
//! * **memcached** — 60,000 inserts and 40,000 deletes, randomly interleaved: at each
//!   step a delete is chosen with probability (deletes left) / (operations left),
//!   provided an item is live, otherwise an insert (so the interleaving is uniform
//!   among those where no delete finds an empty store). An insert allocates a 10 B
//!   key, then a 256 B value; a delete picks a live item uniformly and frees its key,
//!   then its value. 200,000 allocator calls; 20,000 items are still live at the end.
//!   (The paper's §4.2.1 says the key takes four units and the value one; with a
//!   10 B key and a 256 B value it is the other way round, which is what we do.)
//! * **ycsb** — four smart-home scenarios of 1,000 records each; each record has a
//!   fixed size drawn uniformly from 4..=32 B. All records start destroyed. Each
//!   step picks a scenario and a record in it uniformly and toggles it: a destroyed
//!   record is stored (allocated), a stored one destroyed (freed). The paper's "store
//!   and destroy the mixed four scenarios one million times" is read as 1,000,000 such
//!   steps (`--quick`: 100,000), i.e. one allocator call per step.
//!
//! After the trace, the replay frees whatever is still live (not counted: only
//! allocations count as writes) so a real allocator's heap is left as it was found.

use std::collections::HashMap;

/// Units are 64 B.
pub const UNIT_SHIFT: u32 = 6;
/// Pages are 4 KiB.
pub const PAGE_SHIFT: u32 = 12;

/// The workspace's one seeded generator (SplitMix64): tiny, fast and good enough
/// for traces.
pub use pmem_core::SplitMix64;

/// One allocator call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Allocate `size` bytes and remember the block in `slot`.
    Alloc {
        /// Slot the block is kept in until freed.
        slot: u32,
        /// Bytes requested.
        size: u32,
    },
    /// Free the block held in `slot` (allocated with `size` bytes).
    Free {
        /// Slot holding the block.
        slot: u32,
        /// Bytes it was allocated with.
        size: u32,
    },
}

/// A workload as a list of allocator calls.
#[derive(Clone, Debug)]
pub struct Trace {
    /// Workload name used in tables and JSON keys (`memcached`, `ycsb`).
    pub name: &'static str,
    /// The calls, in order.
    pub ops: Vec<Op>,
    /// Number of slots (every `slot` is below this).
    pub slots: usize,
    /// Number of [`Op::Alloc`] in `ops`.
    pub allocs: usize,
}

/// Seed of the memcached trace.
pub const MEMCACHED_SEED: u64 = 0x6d65_6d63_6163_6865;
/// Seed of the YCSB trace.
pub const YCSB_SEED: u64 = 0x7963_7362_5f73_6d68;

/// Memcached parameters (the paper's).
pub const MC_INSERTS: u32 = 60_000;
/// Deletes of the memcached workload.
pub const MC_DELETES: u32 = 40_000;
/// Key size, bytes.
pub const MC_KEY: u32 = 10;
/// Value size, bytes.
pub const MC_VALUE: u32 = 256;

/// YCSB parameters: scenarios.
pub const YCSB_SCENARIOS: u32 = 4;
/// Records per scenario.
pub const YCSB_RECORDS: u32 = 1_000;
/// Smallest record, bytes.
pub const YCSB_MIN: u32 = 4;
/// Largest record, bytes.
pub const YCSB_MAX: u32 = 32;
/// Steps of the full run.
pub const YCSB_STEPS: u64 = 1_000_000;

/// The memcached-like trace (see the module documentation).
pub fn memcached(inserts: u32, deletes: u32, seed: u64) -> Trace {
    let mut rng = SplitMix64::new(seed);
    let mut ops = Vec::with_capacity(2 * (inserts + deletes) as usize);
    // Item i uses slots 2i (key) and 2i + 1 (value).
    let mut live: Vec<u32> = Vec::with_capacity(inserts as usize);
    let (mut ins_left, mut del_left) = (inserts, deletes);
    while ins_left + del_left > 0 {
        let left = u64::from(ins_left + del_left);
        let delete = del_left > 0
            && !live.is_empty()
            && (ins_left == 0 || rng.below(left) < u64::from(del_left));
        if delete {
            let victim = live.swap_remove(rng.below(live.len() as u64) as usize);
            ops.push(Op::Free {
                slot: 2 * victim,
                size: MC_KEY,
            });
            ops.push(Op::Free {
                slot: 2 * victim + 1,
                size: MC_VALUE,
            });
            del_left -= 1;
        } else if ins_left > 0 {
            let item = inserts - ins_left;
            ops.push(Op::Alloc {
                slot: 2 * item,
                size: MC_KEY,
            });
            ops.push(Op::Alloc {
                slot: 2 * item + 1,
                size: MC_VALUE,
            });
            live.push(item);
            ins_left -= 1;
        } else {
            // Deletes left but nothing live and no inserts left: impossible while
            // deletes <= inserts; stop rather than loop.
            break;
        }
    }
    let allocs = 2 * inserts as usize;
    Trace {
        name: "memcached",
        ops,
        slots: 2 * inserts as usize,
        allocs,
    }
}

/// The YCSB-like smart-home trace (see the module documentation).
pub fn ycsb(steps: u64, seed: u64) -> Trace {
    let mut rng = SplitMix64::new(seed);
    let records = (YCSB_SCENARIOS * YCSB_RECORDS) as usize;
    let span = u64::from(YCSB_MAX - YCSB_MIN + 1);
    let sizes: Vec<u32> = (0..records)
        .map(|_| YCSB_MIN + rng.below(span) as u32)
        .collect();
    let mut stored = vec![false; records];
    let mut ops = Vec::with_capacity(steps as usize);
    let mut allocs = 0usize;
    for _ in 0..steps {
        let scenario = rng.below(u64::from(YCSB_SCENARIOS)) as u32;
        let record = rng.below(u64::from(YCSB_RECORDS)) as u32;
        let slot = scenario * YCSB_RECORDS + record;
        let size = sizes[slot as usize];
        let s = &mut stored[slot as usize];
        if *s {
            ops.push(Op::Free { slot, size });
        } else {
            ops.push(Op::Alloc { slot, size });
            allocs += 1;
        }
        *s = !*s;
    }
    Trace {
        name: "ycsb",
        ops,
        slots: records,
        allocs,
    }
}

/// An allocator the traces can drive. Addresses are whatever the allocator hands out
/// (a virtual address, or an offset into a pool or a simulated space); wear is taken
/// from them as `addr >> 6` per unit and `addr >> 12` per page.
pub trait WearTarget {
    /// Name in tables, plots and JSON keys.
    fn name(&self) -> &'static str;

    /// Allocates `size` bytes (`size > 0`).
    fn alloc(&mut self, size: u32) -> Result<u64, String>;

    /// Frees a block.
    ///
    /// # Safety
    /// `addr` was returned by this target's [`WearTarget::alloc`] for `size` bytes and
    /// has not been freed since.
    unsafe fn free(&mut self, addr: u64, size: u32) -> Result<(), String>;
}

/// Every allocation of a replay, in order: (address, size).
pub type Allocations = Vec<(u64, u32)>;

/// Replays `trace` on `target` and returns every allocation it made. The record and
/// the slot table are allocated before the first call, so the replay itself does no
/// allocation through the process allocator (which may be the allocator measured).
pub fn replay(trace: &Trace, target: &mut dyn WearTarget) -> Result<Allocations, String> {
    let mut record: Allocations = Vec::with_capacity(trace.allocs);
    let mut slots: Vec<Option<(u64, u32)>> = vec![None; trace.slots];
    let mut result = Ok(());
    for op in &trace.ops {
        match *op {
            Op::Alloc { slot, size } => {
                let s = &mut slots[slot as usize];
                if s.is_some() {
                    result = Err(format!("trace {}: slot {slot} allocated twice", trace.name));
                    break;
                }
                let addr = match target.alloc(size) {
                    Ok(a) => a,
                    Err(e) => {
                        result = Err(format!("{} on {}: {e}", target.name(), trace.name));
                        break;
                    }
                };
                *s = Some((addr, size));
                record.push((addr, size));
            }
            Op::Free { slot, size } => {
                let Some((addr, asize)) = slots[slot as usize].take() else {
                    result = Err(format!("trace {}: free of empty slot {slot}", trace.name));
                    break;
                };
                debug_assert_eq!(asize, size);
                // SAFETY: `addr` came from this target's `alloc` for `asize` bytes and
                // was taken out of its slot, so it is freed exactly once.
                if let Err(e) = unsafe { target.free(addr, asize) } {
                    result = Err(format!("{} on {}: {e}", target.name(), trace.name));
                    break;
                }
            }
        }
    }
    // Free what is still live, also after an error, so a real allocator gets its
    // memory back.
    for (addr, size) in slots.into_iter().flatten() {
        // SAFETY: as above; each live block is freed once.
        let r = unsafe { target.free(addr, size) };
        if result.is_ok() {
            result = r.map_err(|e| format!("{} on {}: {e}", target.name(), trace.name));
        }
    }
    result.map(|()| record)
}

/// Allocation count per 64 B unit, counting every unit a request's bytes cover
/// (`[addr, addr + size)`): a 256 B line-aligned value covers 4 units; a 10 B key
/// covers 1, or 2 if it straddles a line boundary.
pub fn unit_counts(allocs: &[(u64, u32)]) -> HashMap<u64, u64> {
    let mut m: HashMap<u64, u64> = HashMap::with_capacity(allocs.len());
    for &(addr, size) in allocs {
        let first = addr >> UNIT_SHIFT;
        let last = (addr + u64::from(size.max(1)) - 1) >> UNIT_SHIFT;
        for u in first..=last {
            *m.entry(u).or_insert(0) += 1;
        }
    }
    m
}

/// The counts laid out page-major, 64 per touched page, pages in address order
/// (the input of `wafa::wear::cdf` and `WearSummary::from_page_counts`).
pub fn dense_pages(counts: &HashMap<u64, u64>) -> Vec<u64> {
    let per_page = 1u64 << (PAGE_SHIFT - UNIT_SHIFT);
    let mut pages: Vec<u64> = counts.keys().map(|u| u / per_page).collect();
    pages.sort_unstable();
    pages.dedup();
    let mut dense = vec![0u64; pages.len() * per_page as usize];
    for (&u, &c) in counts {
        // `pages` holds every touched page, so the search always succeeds.
        if let Ok(i) = pages.binary_search(&(u / per_page)) {
            dense[i * per_page as usize + (u % per_page) as usize] += c;
        }
    }
    dense
}

#[cfg(test)]
mod tests {
    use super::*;

    fn balance(t: &Trace) -> (usize, usize) {
        let a = t
            .ops
            .iter()
            .filter(|o| matches!(o, Op::Alloc { .. }))
            .count();
        (a, t.ops.len() - a)
    }

    #[test]
    fn memcached_has_the_papers_counts_and_valid_frees() {
        let t = memcached(MC_INSERTS, MC_DELETES, MEMCACHED_SEED);
        assert_eq!(balance(&t), (120_000, 80_000));
        assert_eq!(t.allocs, 120_000);
        let mut live = vec![false; t.slots];
        for op in &t.ops {
            match *op {
                Op::Alloc { slot, size } => {
                    assert!(!live[slot as usize]);
                    assert_eq!(size, if slot % 2 == 0 { MC_KEY } else { MC_VALUE });
                    live[slot as usize] = true;
                }
                Op::Free { slot, .. } => {
                    assert!(live[slot as usize]);
                    live[slot as usize] = false;
                }
            }
        }
        assert_eq!(live.iter().filter(|&&l| l).count(), 2 * 20_000);
    }

    #[test]
    fn memcached_interleaves_deletes_through_the_run() {
        let t = memcached(MC_INSERTS, MC_DELETES, MEMCACHED_SEED);
        let half = t.ops.len() / 2;
        let frees_first_half = t.ops[..half]
            .iter()
            .filter(|o| matches!(o, Op::Free { .. }))
            .count();
        // Uniform interleaving: about 40% of each half are frees.
        assert!(
            (30_000..50_000).contains(&frees_first_half),
            "{frees_first_half}"
        );
    }

    #[test]
    fn ycsb_toggles_fixed_size_records() {
        let t = ycsb(50_000, YCSB_SEED);
        assert_eq!(t.ops.len(), 50_000);
        let mut size = vec![0u32; t.slots];
        let mut live = vec![false; t.slots];
        for op in &t.ops {
            let (slot, s, alloc) = match *op {
                Op::Alloc { slot, size } => (slot, size, true),
                Op::Free { slot, size } => (slot, size, false),
            };
            assert!((YCSB_MIN..=YCSB_MAX).contains(&s));
            let i = slot as usize;
            assert!(size[i] == 0 || size[i] == s);
            size[i] = s;
            assert_eq!(live[i], !alloc);
            live[i] = alloc;
        }
        // Every scenario was used.
        for sc in 0..YCSB_SCENARIOS as usize {
            let r = sc * YCSB_RECORDS as usize..(sc + 1) * YCSB_RECORDS as usize;
            assert!(size[r].iter().any(|&s| s > 0));
        }
    }

    #[test]
    fn traces_are_deterministic() {
        assert_eq!(ycsb(1000, 7).ops, ycsb(1000, 7).ops);
        assert_ne!(ycsb(1000, 7).ops, ycsb(1000, 8).ops);
        assert_eq!(memcached(100, 50, 3).ops, memcached(100, 50, 3).ops);
    }

    #[test]
    fn units_covered_by_a_request_are_all_counted() {
        let m = unit_counts(&[(0, 256), (56, 10), (128, 64)]);
        assert_eq!(m.get(&0), Some(&2)); // value + straddling key
        assert_eq!(m.get(&1), Some(&2)); // value + straddling key
        assert_eq!(m.get(&2), Some(&2)); // value + the 64 B block
        assert_eq!(m.get(&3), Some(&1));
        assert_eq!(m.get(&4), None);
        let dense = dense_pages(&m);
        assert_eq!(dense.len(), 64);
        assert_eq!(&dense[..5], &[2, 2, 2, 1, 0]);
    }

    #[test]
    fn dense_pages_keeps_page_positions() {
        let mut m = HashMap::new();
        m.insert(64 * 7 + 5, 3u64);
        m.insert(64 * 2, 1u64);
        let d = dense_pages(&m);
        assert_eq!(d.len(), 128);
        assert_eq!(d[0], 1);
        assert_eq!(d[64 + 5], 3);
    }
}
