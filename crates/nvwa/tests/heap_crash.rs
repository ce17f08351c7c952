//! Crash suite of the NVWA heap: sequences of alloc / free / in-place realloc /
//! publish / checkpoint (and a user moving a pointer between slots), crashed
//! wherever the durable set can change under the line and the word model, and
//! recovered by opening the heap. After every crash:
//!
//! * every non-null slot points to the start of a live block of its size, whose
//!   recorded length is the model's (the in-flight realloc may go either way) and
//!   whose contents are the slot's pattern;
//! * the live blocks are exactly the slots' blocks, plus at most the one block of
//!   an in-flight plain `alloc` (not linked yet) or `free` (unlinked first) — so no
//!   completed free is lost and nothing else leaks;
//! * no two live blocks overlap, and no two slots share a block (no completed
//!   allocation was handed out again);
//! * the slots equal the model after the completed operations (`alloc_publish`
//!   sets its slot exactly when its block is allocated);
//! * opening again gives the same live set (the harness also crashes recovery
//!   itself and recovers again).
//!
//! While recording, every operation's flushes and fences are counted: the paper's
//! budget (at most 2 line flushes per allocation, 1 per free or realloc) must hold.

use std::sync::Arc;

use nvwa::classes::{record_len, Class, MAX_SMALL};
use nvwa::log::AllocLog;
use nvwa::record::Record;
use nvwa::{Nvwa, NvwaOptions};
use pmem_core::sim::{CrashInfo, CrashTest, Model, SimDomain};
use pmem_core::{Counters, PPtr, PersistentAllocator, Pool, PoolOptions};
use proptest::prelude::*;

mod common;
use common::{e, load, slot_ptr, store};

const SLOTS: usize = 6;
/// The size each slot's block is allocated with: small classes (one sharing a
/// run with another slot) and a large block.
const SIZES: [u64; SLOTS] = [160, 48, 160, 2000, 5000, 64];
const POOL: u64 = 512 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// `alloc`, fill with the slot's pattern, persist, link into the slot.
    Alloc(usize),
    /// `alloc_publish` into the slot.
    Publish(usize),
    /// Unlink (persisted), then `free`.
    Free(usize),
    /// Resize within the size class: 16 bytes smaller, or back.
    Realloc(usize),
    /// Move the pointer from one slot to another (the user's own stores).
    Move(usize, usize),
    /// An explicit checkpoint.
    Checkpoint,
    /// A transaction's allocation, committed: `tx_reserve`, `tx_mark`, the
    /// commit's fence, link (persisted), `tx_release`.
    TxAlloc(usize),
    /// On another thread: a transaction that marks this many 64-byte blocks
    /// allocated and never commits (no fence; its blocks may leak, as they
    /// would until the transaction log's recovery undid them).
    TxPending(u64),
    /// `alloc_publish` on another thread.
    PublishElsewhere(usize),
    /// `alloc` on another thread, which hands the block to this one to fill and
    /// link.
    AllocElsewhere(usize),
    /// A checkpoint on another thread.
    CheckpointElsewhere,
    /// A torn allocation left in the log (an object record without its run's),
    /// then the heap reopened (recovered) on another thread. On an empty heap:
    /// the record names the second slot of page 0, where the next run goes.
    TornReopen,
}

fn pattern(i: usize) -> u8 {
    0xa0 + i as u8
}

/// The test's DRAM view: per slot, the block's current size and its pattern.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Held {
    size: u64,
    pattern: u8,
}

type SlotModel = [Option<Held>; SLOTS];

/// The model after `ops`.
fn model(ops: &[Op]) -> SlotModel {
    let mut m: SlotModel = [None; SLOTS];
    for &op in ops {
        step(&mut m, op);
    }
    m
}

/// Applies `op` to the model; false if it does nothing.
fn step(m: &mut SlotModel, op: Op) -> bool {
    match op {
        Op::Alloc(i) | Op::Publish(i) if m[i].is_none() => {
            m[i] = Some(Held {
                size: SIZES[i],
                pattern: pattern(i),
            });
            true
        }
        Op::Free(i) if m[i].is_some() => {
            m[i] = None;
            true
        }
        Op::Realloc(i) => match &mut m[i] {
            Some(h) if Class::of(SIZES[i] - 16) == Class::of(SIZES[i]) || SIZES[i] > MAX_SMALL => {
                h.size = if h.size == SIZES[i] {
                    SIZES[i] - 16
                } else {
                    SIZES[i]
                };
                true
            }
            _ => false,
        },
        Op::Move(from, to) if from != to && m[from].is_some() && m[to].is_none() => {
            m[to] = m[from].take();
            true
        }
        Op::TxAlloc(i) | Op::PublishElsewhere(i) | Op::AllocElsewhere(i) if m[i].is_none() => {
            m[i] = Some(Held {
                size: SIZES[i],
                pattern: pattern(i),
            });
            true
        }
        Op::Checkpoint | Op::CheckpointElsewhere | Op::TornReopen | Op::TxPending(_) => true,
        _ => false,
    }
}

fn options() -> NvwaOptions {
    NvwaOptions {
        // Small, so that checkpoints happen on their own too.
        log_words: Some(64),
        arenas: 1,
        ..NvwaOptions::default()
    }
}

/// Checks the flush budget of one allocator call.
fn within(what: &str, c: Counters, lines: u64, fences: u64) -> Result<(), String> {
    if c.lines_flushed > lines || c.fences > fences {
        return Err(format!(
            "{what}: {} lines flushed and {} fences; the budget is {lines} and {fences}",
            c.lines_flushed, c.fences
        ));
    }
    Ok(())
}

fn apply(heap: &mut Nvwa, arc: &Arc<Pool>, m: &mut SlotModel, op: Op) -> Result<(), String> {
    let pool = &**arc;
    let before = m[..].to_vec();
    if !step(m, op) {
        return Ok(());
    }
    let checkpoints = heap.stats().checkpoints;
    let mut budget: Option<(&str, Counters, u64, u64)> = None;
    match op {
        Op::Alloc(i) | Op::AllocElsewhere(i) => {
            let (p, c) = if op == Op::AllocElsewhere(i) {
                let h: &Nvwa = heap;
                std::thread::scope(|s| {
                    s.spawn(|| Counters::measure(|| h.alloc(SIZES[i])))
                        .join()
                        .map_err(|_| "the allocating thread panicked".to_string())
                })?
            } else {
                Counters::measure(|| heap.alloc(SIZES[i]))
            };
            let p = p.map_err(e)?;
            budget = Some(("alloc", c, 2, 1));
            let data = vec![pattern(i); SIZES[i] as usize];
            // SAFETY: the block is the test's alone until linked.
            unsafe { pool.write_bytes_shared(p.offset(), &data) }.map_err(e)?;
            pool.persist(p.offset(), SIZES[i]).map_err(e)?;
            store(pool, i, p)?;
        }
        Op::Publish(i) => {
            let data_lines = SIZES[i].div_ceil(64) + 1;
            let (p, c) = Counters::measure(|| {
                // SAFETY: the slot is accessed only atomically, and nothing else
                // stores to it meanwhile.
                unsafe {
                    heap.alloc_publish(SIZES[i], slot_ptr(i), &mut |b: &mut [u8]| {
                        b.fill(pattern(i))
                    })
                }
            });
            p.map_err(e)?;
            budget = Some(("alloc_publish", c, 2 + data_lines + 1, 3));
        }
        Op::Free(i) => {
            let p = load(pool, i)?;
            store(pool, i, PPtr::null())?;
            let size = before[i].map_or(0, |h| h.size);
            // SAFETY: unlinked above; nothing references the block.
            let (r, c) = Counters::measure(|| unsafe { heap.free(p, size) });
            r.map_err(e)?;
            budget = Some(("free", c, 1, 1));
        }
        Op::Realloc(i) => {
            let p = load(pool, i)?;
            let (old, new) = (before[i].map_or(0, |h| h.size), m[i].map_or(0, |h| h.size));
            // SAFETY: in place (same class), the block does not move.
            let (q, c) = Counters::measure(|| unsafe { heap.realloc(p, old, new) });
            if q.map_err(e)? != p {
                return Err("an in-class realloc moved the block".into());
            }
            budget = Some(("realloc", c, 1, 1));
        }
        Op::Move(from, to) => {
            let p = load(pool, from)?;
            store(pool, to, p)?;
            store(pool, from, PPtr::null())?;
        }
        Op::Checkpoint => heap.checkpoint().map_err(e)?,
        Op::TxAlloc(i) => {
            let (p, c) = Counters::measure(|| -> Result<PPtr<u8>, String> {
                let p = heap.tx_reserve(SIZES[i]).map_err(e)?;
                // SAFETY: the block is held by this "transaction" (whose log
                // record would be durable by now).
                unsafe { heap.tx_mark(p, SIZES[i], true) }.map_err(e)?;
                Ok(p)
            });
            let p = p?;
            budget = Some(("tx_mark", c, 2, 0));
            let data = vec![pattern(i); SIZES[i] as usize];
            // SAFETY: the block is the test's alone until linked.
            unsafe { pool.write_bytes_shared(p.offset(), &data) }.map_err(e)?;
            pool.flush(p.offset(), SIZES[i]).map_err(e)?;
            // The commit's fence, then the link.
            pool.drain().map_err(e)?;
            store(pool, i, p)?;
            heap.tx_release(p, SIZES[i]);
        }
        Op::TxPending(n) => {
            let h: &Nvwa = heap;
            std::thread::scope(|s| {
                s.spawn(|| -> Result<(), String> {
                    for _ in 0..n {
                        let p = h.tx_reserve(64).map_err(e)?;
                        // SAFETY: held by this transaction, which never commits.
                        unsafe { h.tx_mark(p, 64, true) }.map_err(e)?;
                    }
                    Ok(())
                })
                .join()
                .map_err(|_| "the transaction's thread panicked".to_string())?
            })?;
        }
        Op::PublishElsewhere(i) => {
            let h: &Nvwa = heap;
            std::thread::scope(|s| {
                s.spawn(|| {
                    // SAFETY: the slot is accessed only atomically; nothing else
                    // stores to it meanwhile.
                    unsafe {
                        h.alloc_publish(SIZES[i], slot_ptr(i), &mut |b: &mut [u8]| {
                            b.fill(pattern(i))
                        })
                    }
                    .map(|_| ())
                    .map_err(e)
                })
                .join()
                .map_err(|_| "the publishing thread panicked".to_string())?
            })?;
        }
        Op::CheckpointElsewhere => {
            let h: &Nvwa = heap;
            std::thread::scope(|s| {
                s.spawn(|| h.checkpoint().map_err(e))
                    .join()
                    .map_err(|_| "the checkpointing thread panicked".to_string())?
            })?;
        }
        Op::TornReopen => {
            let g = heap.geometry();
            let (_, _, area) = nvwa::layout::read(pool, g.region_start).map_err(e)?;
            let (log, _) = AllocLog::scan(pool, g.log_base(area), g.log_words).map_err(e)?;
            let torn = Record::Obj {
                offset: 64,
                len: 64,
                exclude: false,
                pending: false,
            }
            .encode()
            .map_err(e)?;
            // SAFETY: the heap is not running operations now; the position is
            // past every record.
            unsafe { log.store(pool, log.tail(), &[torn]) }.map_err(e)?;
            pool.persist(log.offset_of(log.tail()), 8).map_err(e)?;
            let reopened = std::thread::scope(|s| {
                s.spawn(|| {
                    // SAFETY: the old heap is not used while this one recovers
                    // (it is replaced right after).
                    unsafe { Nvwa::open_heap(Arc::clone(arc), &options()) }.map_err(e)
                })
                .join()
                .map_err(|_| "the recovering thread panicked".to_string())?
            })?;
            *heap = reopened;
        }
    }
    // A checkpoint the operation triggered has its own cost.
    if let Some((what, c, lines, fences)) = budget {
        if heap.stats().checkpoints == checkpoints {
            within(what, c, lines, fences)?;
        }
    }
    Ok(())
}

fn workload(ops: &[Op]) -> impl FnOnce(Pool, &SimDomain) -> Result<(), String> + '_ {
    move |pool, sim| {
        let arc = Arc::new(pool);
        // SAFETY: the test is the heap's only user.
        let mut heap = unsafe { Nvwa::format_heap(Arc::clone(&arc), &options()) }.map_err(e)?;
        sim.mark_durable();
        let mut m: SlotModel = [None; SLOTS];
        for (n, &op) in ops.iter().enumerate() {
            sim.op(n as u32, || apply(&mut heap, &arc, &mut m, op))?;
        }
        Ok(())
    }
}

/// A linked block after recovery.
#[derive(Clone, Copy, Debug)]
struct Linked {
    /// The length its live record holds (`None`: not a live block).
    len: Option<u64>,
    /// The byte its head is filled with, if it is one byte.
    head: Option<u8>,
}

/// What recovery finds.
#[derive(Debug)]
struct Found {
    slots: [Option<u64>; SLOTS],
    /// Per non-null slot: what its block holds.
    blocks: [Option<Linked>; SLOTS],
    live: Vec<(u64, u64)>,
    again: Vec<(u64, u64)>,
}

fn live_of(heap: &Nvwa) -> Result<Vec<(u64, u64)>, String> {
    let mut live = Vec::new();
    heap.for_each_live_block(&mut |p, size| live.push((p.offset(), size)))
        .map_err(e)?;
    Ok(live)
}

fn recover(pool: Pool) -> Result<Found, String> {
    let pool = Arc::new(pool);
    // SAFETY: recovery is the pool's only user.
    let heap = unsafe { Nvwa::open_heap(Arc::clone(&pool), &options()) }.map_err(e)?;
    let mut slots = [None; SLOTS];
    let mut blocks = [None; SLOTS];
    for i in 0..SLOTS {
        let p = load(&pool, i)?;
        if p.is_null() {
            continue;
        }
        slots[i] = Some(p.offset());
        let len = heap.recorded_len(p);
        // The first 32 bytes (every size here is at least 48).
        let head = pool
            .bytes(p.offset(), 32)
            .map_or(None, |b| b.iter().all(|&x| x == b[0]).then_some(b[0]));
        blocks[i] = Some(Linked { len, head });
    }
    let live = live_of(&heap)?;
    drop(heap);
    // SAFETY: as above; the first heap is gone.
    let heap = unsafe { Nvwa::open_heap(Arc::clone(&pool), &options()) }.map_err(e)?;
    let again = live_of(&heap)?;
    Ok(Found {
        slots,
        blocks,
        live,
        again,
    })
}

fn check<'a>(ops: &'a [Op]) -> impl Fn(&Found, &CrashInfo) -> Result<(), String> + 'a {
    move |f: &Found, crash: &CrashInfo| {
        if f.live != f.again {
            return Err(format!(
                "opening again changed the live set: {:?} then {:?}",
                f.live, f.again
            ));
        }
        for w in f.live.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!("live blocks overlap: {:?} and {:?}", w[0], w[1]));
            }
        }
        let done = crash.completed_ops as usize;
        let in_flight = crash
            .in_flight
            .first()
            .and_then(|&n| ops.get(n as usize).copied());
        let before = model(&ops[..done]);
        let after = in_flight.map(|op| {
            let mut m = before;
            step(&mut m, op);
            m
        });
        // A move in flight may have stored the pointer in its new slot and not yet
        // cleared the old one: the same block, seen once.
        let mut slots = f.slots;
        if let Some(Op::Move(from, to)) = in_flight {
            if slots[from].is_some() && slots[from] == slots[to] {
                slots[to] = None;
            }
        }
        // Which model the slots follow (the in-flight operation either way).
        let follows = |m: &SlotModel| (0..SLOTS).all(|i| m[i].is_some() == slots[i].is_some());
        let m = if follows(&before) {
            before
        } else if let Some(m) = after.filter(|m| follows(m)) {
            m
        } else {
            return Err(format!(
                "slots {:?} follow neither the model before the in-flight operation ({before:?}) nor after it",
                f.slots
            ));
        };
        let mut linked = Vec::new();
        for i in 0..SLOTS {
            let (Some(b), Some(h)) = (slots[i], m[i]) else {
                continue;
            };
            let Some(Linked { len, head }) = f.blocks[i] else {
                continue;
            };
            if len.is_none() {
                return Err(format!(
                    "slot {i} points to {b:#x}, which is not a live block"
                ));
            }
            let realloc_in_flight = matches!(in_flight, Some(Op::Realloc(j)) if j == i);
            let lens = [SIZES[i], SIZES[i] - 16].map(|s| Some(record_len(s)));
            if len != Some(record_len(h.size)) && !(realloc_in_flight && lens.contains(&len)) {
                return Err(format!(
                    "slot {i}: recorded length {len:?}, the model has {}",
                    record_len(h.size)
                ));
            }
            if head != Some(h.pattern) {
                return Err(format!(
                    "slot {i}: the block's head is {head:?}, not the pattern {:#x}",
                    h.pattern
                ));
            }
            if linked.contains(&b) {
                return Err(format!("two slots share the block {b:#x}"));
            }
            linked.push(b);
        }
        let unlinked: Vec<_> = f.live.iter().filter(|(b, _)| !linked.contains(b)).collect();
        // An uncommitted transaction's marks stay until the transaction log's
        // recovery undoes them (not run here).
        let pending: u64 = ops[..(done + 1).min(ops.len())]
            .iter()
            .map(|op| match op {
                Op::TxPending(n) => *n,
                _ => 0,
            })
            .sum();
        let may_leak = pending as usize
            + match in_flight {
                Some(Op::Alloc(_) | Op::AllocElsewhere(_) | Op::Free(_) | Op::TxAlloc(_)) => 1,
                _ => 0,
            };
        if unlinked.len() > may_leak {
            return Err(format!(
                "live blocks no slot holds: {unlinked:?} (in flight: {in_flight:?})"
            ));
        }
        Ok(())
    }
}

fn crash_test(model: Model) -> CrashTest {
    CrashTest::new(PoolOptions::new("nvwa-crash", POOL).root::<[u64; SLOTS]>()).model(model)
}

/// The tests of this binary one at a time: the mutation test removes a flush or
/// fence from every heap of the process.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn run(ops: &[Op], model: Model) -> Result<u64, String> {
    // An uncommitted transaction leaves its marks unfenced on purpose (the lint
    // would say so); its images are checked all the same.
    let unfenced = ops.iter().any(|op| matches!(op, Op::TxPending(_)));
    run_with(ops, model, !unfenced)
}

fn run_with(ops: &[Op], model: Model, deny_lints: bool) -> Result<u64, String> {
    crash_test(model)
        .deny_correctness_lints(deny_lints)
        .run(|_| Ok(()), workload(ops), recover, check(ops))
        .map(|r| r.images_checked)
        .map_err(|f| f.to_string())
}

/// A script that exercises every path: new runs, a shared run, a large block,
/// both realloc directions, publication, a pointer moved by the user, frees and
/// checkpoints (explicit, and forced by the small log).
const SCRIPT: [Op; 16] = [
    Op::Alloc(0),
    Op::Publish(1),
    Op::Alloc(2),
    Op::Publish(4),
    Op::Realloc(0),
    Op::Free(2),
    Op::Move(1, 2),
    Op::Alloc(3),
    Op::Checkpoint,
    Op::Realloc(0),
    Op::Publish(5),
    Op::Free(4),
    Op::Alloc(1),
    Op::Free(0),
    Op::Publish(0),
    Op::Free(3),
];

#[test]
fn the_script_survives_every_crash() {
    let _one = serial();
    for m in [Model::Line, Model::Word] {
        let images = run(&SCRIPT, m).unwrap_or_else(|f| panic!("{m:?}: {f}"));
        assert!(images > 100, "{m:?}: only {images} images");
    }
}

/// Scenarios whose flushes and fences matter only across threads or
/// transactions.
const SCENARIOS: [&[Op]; 6] = [
    // Allocated on one thread, filled and linked by another.
    &[Op::AllocElsewhere(0), Op::AllocElsewhere(3)],
    // A run announced by another thread's uncommitted transaction (its records
    // fill the first line), then an allocation in it: the run's record must be
    // durable with the allocation.
    &[Op::TxPending(7), Op::Alloc(5)],
    // Published on one thread, moved to another slot by this one.
    &[Op::PublishElsewhere(1), Op::Move(1, 2)],
    // A committed transactional allocation.
    &[Op::TxAlloc(0), Op::Alloc(1)],
    // A torn allocation recovered on another thread; then a run over its page.
    &[Op::TornReopen, Op::Alloc(5)],
    // A checkpoint on another thread, then an allocation in the new log.
    &[Op::Alloc(1), Op::CheckpointElsewhere, Op::Alloc(0)],
];

#[test]
fn cross_thread_and_transactional_scenarios_survive_every_crash() {
    let _one = serial();
    for ops in SCENARIOS {
        for m in [Model::Line, Model::Word] {
            run(ops, m).unwrap_or_else(|f| panic!("{ops:?} {m:?}: {f}"));
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..SLOTS).prop_map(Op::Alloc),
        3 => (0..SLOTS).prop_map(Op::Publish),
        3 => (0..SLOTS).prop_map(Op::Free),
        1 => (0..SLOTS).prop_map(Op::Realloc),
        1 => (0..SLOTS, 0..SLOTS).prop_map(|(a, b)| Op::Move(a, b)),
        1 => Just(Op::Checkpoint),
        1 => (0..SLOTS).prop_map(Op::TxAlloc),
        1 => (0..SLOTS).prop_map(Op::PublishElsewhere),
        1 => (0..SLOTS).prop_map(Op::AllocElsewhere),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(16, 256), ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_survive_every_crash(
        ops in proptest::collection::vec(op(), 1..12),
        word in any::<bool>(),
    ) {
        let m = if word { Model::Word } else { Model::Line };
        let _one = serial();
        run(&ops, m).map_err(TestCaseError::fail)?;
    }
}

/// Every flush and fence of the allocator, removed in turn, makes the checker
/// (not only the lints: they are off here) fail on the script or a scenario.
#[cfg(feature = "mutation")]
#[test]
fn every_flush_and_fence_is_needed() {
    let _one = serial();
    let mut survivors = Vec::new();
    for site in nvwa::Site::ALL {
        nvwa::set_mutant(Some(site));
        let caught = std::iter::once(&SCRIPT[..]).chain(SCENARIOS).any(|ops| {
            [Model::Line, Model::Word]
                .into_iter()
                .any(|m| run_with(ops, m, false).is_err())
        });
        if !caught {
            survivors.push(site);
        }
    }
    nvwa::set_mutant(None);
    assert!(survivors.is_empty(), "mutants not caught: {survivors:?}");
}
