//! Crash suites of `pmem_core::tx`: a small persistent map whose every operation is
//! one transaction (undo or redo, word or object records), recorded on a simulated
//! pool and crashed everywhere the durable set can change. After each crash,
//! reopening the heap (which recovers the log) must leave exactly the map of the
//! completed operations, or of those plus the one in flight applied whole; the
//! allocator must hold exactly the map's blocks (no leak, no dangling slot); and a
//! crash during recovery must recover again. Every flush and fence of the log,
//! removed in turn, must be caught by the checker alone.

use std::collections::BTreeMap;

use pmem_core::sim::{CrashInfo, CrashTest, Model, SimDomain};
use pmem_core::tx::mutation::{Site, SITES};
use pmem_core::tx::{Hint, LogMode, TxError, TxGeometry, TxHeap, TxOptions};
use pmem_core::{PPtr, Pool, PoolOptions, RootType};
use proptest::prelude::*;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

const SLOTS: usize = 6;
/// Words in a value block.
const WORDS: usize = 3;
const BLOCK: u64 = (WORDS * 8) as u64;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct MapRoot {
    count: u64,
    slots: [u64; SLOTS],
}

impl RootType for MapRoot {
    const ROOT_ID: &'static str = "pmkit-tests/tx-map";
    const LAYOUT_VERSION: u32 = 1;
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Insert or overwrite `slot` with a value derived from `v` (an overwrite with
    /// an odd `v` replaces the block copy-on-write: allocate, free the old one).
    Put { slot: usize, v: u64 },
    /// Remove `slot` (if present).
    Del { slot: usize },
    /// A transaction that writes and then aborts: no effect.
    Abort { slot: usize, v: u64 },
}

fn geometry() -> TxGeometry {
    TxGeometry {
        lanes: 2,
        word_records: 16,
        object_records: 8,
        object_bytes: 512,
        alloc_records: 4,
        lazy_ring_bytes: 512,
    }
}

fn opts_for(n: usize, hint: Option<Hint>, mode: Option<LogMode>) -> TxOptions {
    // Without a fixed choice, vary hint and mode with the operation's number.
    let hint = hint.unwrap_or(if n.is_multiple_of(2) {
        Hint::Object
    } else {
        Hint::Word
    });
    let mode = mode.unwrap_or(match n % 3 {
        0 => LogMode::Undo,
        1 => LogMode::Redo,
        _ => LogMode::Lazy,
    });
    // Every other operation also logs its writes into blocks it allocated (the
    // paper's engine), so flagged records are rolled back and recovered too.
    TxOptions::new().hint(hint).mode(mode).log_fresh(n % 2 == 1)
}

fn value_words(v: u64) -> [u64; WORDS] {
    [v, v.wrapping_mul(3) + 1, v ^ 0xffff]
}

fn root(heap: &TxHeap) -> Result<PPtr<MapRoot>, String> {
    heap.pool().root::<MapRoot>().map_err(|e| e.to_string())
}

/// Runs one operation as one transaction: a lazy one through `&mut` access, the
/// others through `transaction_shared` (as concurrent users would).
/// `hybrid`: word records for the map's words, an object record for the value.
fn apply(heap: &mut TxHeap, op: Op, opts: TxOptions, hybrid: bool) -> Result<(), String> {
    let r = root(heap)?;
    let result = if opts.mode == LogMode::Lazy {
        heap.transaction_with(opts, |tx| body(tx, r, op, opts, hybrid))
    } else {
        // SAFETY: operations run one at a time (threads are joined in turn), so no
        // other transaction or reader touches the map while this one runs.
        unsafe { heap.transaction_shared(opts, |tx| body(tx, r, op, opts, hybrid)) }.map(|(r, _)| r)
    };
    match (op, result) {
        (Op::Abort { .. }, Err(TxError::Aborted(_))) => Ok(()),
        (Op::Abort { .. }, other) => Err(format!("abort returned {other:?}")),
        (_, r) => r.map_err(|e| e.to_string()),
    }
}

/// The body of one operation's transaction.
fn body(
    tx: &mut pmem_core::tx::Tx<'_>,
    r: PPtr<MapRoot>,
    op: Op,
    opts: TxOptions,
    hybrid: bool,
) -> Result<(), TxError> {
    let slots = r.offset() + 8;
    let slot_at = |s: usize| PPtr::<u64>::from_offset(slots + 8 * s as u64);
    let count = PPtr::<u64>::from_offset(r.offset());
    match op {
        Op::Put { slot, v } => {
            if hybrid {
                tx.set_hint(Hint::Word);
            }
            let cur = tx.read(slot_at(slot))?;
            let block = if cur == 0 {
                let b = tx.alloc(BLOCK)?.offset();
                // Everything the insert changes, logged with one fence (the
                // fresh block only under `log_fresh`).
                let h = if hybrid { Hint::Word } else { opts.hint };
                tx.add_ranges(&[
                    (slot_at(slot).offset(), 8, h),
                    (count.offset(), 8, h),
                    (b, BLOCK, Hint::Object),
                ])?;
                tx.write(slot_at(slot), &b)?;
                let c = tx.read(count)?;
                tx.write(count, &(c + 1))?;
                b
            } else if v % 2 == 1 {
                // Copy-on-write: log the slot first, then allocate the new block
                // and free the old one with no snapshot after them, so their
                // records need a fence of their own before the commit marks them.
                tx.add_range(slot_at(slot).offset(), 8)?;
                let b = tx.alloc(BLOCK)?.offset();
                tx.free(PPtr::from_offset(cur), BLOCK)?;
                tx.write(slot_at(slot), &b)?;
                b
            } else {
                cur
            };
            if hybrid {
                tx.set_hint(Hint::Object);
            }
            tx.write(PPtr::<[u64; WORDS]>::from_offset(block), &value_words(v))
        }
        Op::Del { slot } => {
            let cur = tx.read(slot_at(slot))?;
            if cur != 0 {
                tx.free(PPtr::from_offset(cur), BLOCK)?;
                tx.add_ranges(&[
                    (slot_at(slot).offset(), 8, opts.hint),
                    (count.offset(), 8, opts.hint),
                ])?;
                tx.write(slot_at(slot), &0u64)?;
                let c = tx.read(count)?;
                tx.write(count, &(c - 1))?;
            }
            Ok(())
        }
        Op::Abort { slot, v } => {
            let cur = tx.read(slot_at(slot))?;
            if cur == 0 {
                let b = tx.alloc(BLOCK)?.offset();
                tx.write(slot_at(slot), &b)?;
                // Into the fresh block: rolled back by freeing it.
                tx.write(PPtr::<[u64; WORDS]>::from_offset(b), &value_words(v))?;
            } else {
                tx.write(PPtr::<[u64; WORDS]>::from_offset(cur), &value_words(v))?;
            }
            tx.write(count, &999)?;
            Err(TxError::Aborted("on purpose".into()))
        }
    }
}

/// The model: slot -> value.
fn model(ops: &[Op]) -> BTreeMap<usize, u64> {
    let mut m = BTreeMap::new();
    for op in ops {
        match *op {
            Op::Put { slot, v } => {
                m.insert(slot, v);
            }
            Op::Del { slot } => {
                m.remove(&slot);
            }
            Op::Abort { .. } => {}
        }
    }
    m
}

/// What recovery leaves: the map, checked for integrity (count, values, and the
/// allocator holding exactly the map's blocks).
fn recover(pool: Pool) -> Result<BTreeMap<usize, u64>, String> {
    let (heap, _report) = TxHeap::open(pool).map_err(|e| format!("open: {e}"))?;
    let r: MapRoot = heap.pool().read(root(&heap)?).map_err(|e| e.to_string())?;
    let mut map = BTreeMap::new();
    let mut blocks = Vec::new();
    for (s, &b) in r.slots.iter().enumerate() {
        if b != 0 {
            let w: [u64; WORDS] = heap
                .pool()
                .read(PPtr::from_offset(b))
                .map_err(|e| format!("slot {s} points at {b:#x}: {e}"))?;
            if w != value_words(w[0]) {
                return Err(format!("slot {s}: torn value {w:?}"));
            }
            map.insert(s, w[0]);
            blocks.push(b);
        }
    }
    if r.count != map.len() as u64 {
        return Err(format!("count {} but {} slots are set", r.count, map.len()));
    }
    let live = heap.live_blocks().map_err(|e| e.to_string())?;
    blocks.sort_unstable();
    if live != blocks {
        return Err(format!(
            "allocator holds {live:x?}, the map references {blocks:x?}"
        ));
    }
    Ok(map)
}

fn crash_test(model: Model, deny_lints: bool) -> CrashTest {
    CrashTest::new(PoolOptions::new("txmap", 256 * 1024).root::<MapRoot>())
        .model(model)
        .deny_correctness_lints(deny_lints)
}

/// The workload: format the heap, make that the durable start, run the ops — each
/// on a thread of its own if `threads` (a thread's fence does not complete another
/// thread's flushes, so this is where a missing fence at the end of a transaction
/// shows: the next thread's transaction commits over data the lane still claims).
fn workload(
    ops: &[Op],
    hint: Option<Hint>,
    mode: Option<LogMode>,
    threads: bool,
    removed: Option<Site>,
) -> impl FnOnce(Pool, &SimDomain) -> Result<(), String> + '_ {
    move |pool, sim| {
        let mut heap = TxHeap::create(pool, &geometry(), 64).map_err(|e| e.to_string())?;
        heap.log().remove_site(removed);
        sim.mark_durable();
        for (n, &op) in ops.iter().enumerate() {
            let opts = opts_for(n, hint, mode);
            let hybrid = hint.is_none() && n % 4 == 3;
            sim.op(n as u32, || {
                if threads {
                    std::thread::scope(|s| {
                        s.spawn(|| apply(&mut heap, op, opts, hybrid))
                            .join()
                            .unwrap_or_else(|_| Err("operation thread panicked".into()))
                    })
                } else {
                    apply(&mut heap, op, opts, hybrid)
                }
            })?;
        }
        Ok(())
    }
}

fn check(ops: &[Op]) -> impl Fn(&BTreeMap<usize, u64>, &CrashInfo) -> Result<(), String> + '_ {
    move |got, crash| crash.expect_model(got, |n| model(&ops[..n as usize]))
}

fn run(
    ops: &[Op],
    model: Model,
    hint: Option<Hint>,
    mode: Option<LogMode>,
    deny_lints: bool,
) -> Result<(), String> {
    run_on(ops, model, hint, mode, deny_lints, false, None)
}

fn run_on(
    ops: &[Op],
    model: Model,
    hint: Option<Hint>,
    mode: Option<LogMode>,
    deny_lints: bool,
    threads: bool,
    removed: Option<Site>,
) -> Result<(), String> {
    crash_test(model, deny_lints)
        .run(
            |_| Ok(()),
            workload(ops, hint, mode, threads, removed),
            recover,
            check(ops),
        )
        .map(|_| ())
        .map_err(|f| f.to_string())
}

/// With the mixed modes (undo, redo, lazy by turns), a lazy replacement of slot 0
/// (op 2) is followed by transactions of other modes, the last of which deletes
/// slot 0 again (op 6): a truncation of the lazy ring that did not reach the media
/// would replay the replacement over the deletion. Op 9 checkpoints the ring after
/// the lazy replacement of slot 3 (op 8) and issues no fence of its own (it deletes
/// nothing), so op 10, on a thread of its own, shows a truncation left unfenced.
const SCRIPT: [Op; 11] = [
    Op::Put { slot: 0, v: 10 },
    Op::Put { slot: 1, v: 20 },
    Op::Put { slot: 0, v: 11 },
    Op::Abort { slot: 2, v: 30 },
    Op::Del { slot: 1 },
    Op::Abort { slot: 0, v: 40 },
    Op::Del { slot: 0 },
    Op::Put { slot: 3, v: 7 },
    Op::Put { slot: 3, v: 9 },
    Op::Del { slot: 5 },
    Op::Del { slot: 3 },
];

#[test]
fn every_mode_and_hint_survives_every_crash() {
    for mode in [LogMode::Undo, LogMode::Redo, LogMode::Lazy] {
        for hint in [Hint::Word, Hint::Object] {
            run(&SCRIPT, Model::Line, Some(hint), Some(mode), true)
                .unwrap_or_else(|e| panic!("{mode:?} {hint:?}: {e}"));
        }
    }
}

#[test]
fn the_word_model_tears_nothing_that_matters() {
    run(&SCRIPT, Model::Word, None, None, true).unwrap_or_else(|e| panic!("{e}"));
}

/// eADR: the simulated pool is in the `CpuCache` domain, so every flush of the
/// transaction engine is elided (none is recorded); the crash images are prefixes
/// of the store order and every mode must still recover them.
#[test]
fn every_mode_survives_eadr_with_flushes_elided() {
    for mode in [LogMode::Undo, LogMode::Redo, LogMode::Lazy] {
        run(&SCRIPT, Model::Eadr, None, Some(mode), true)
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    }
    run_on(&SCRIPT, Model::Eadr, None, None, true, true, None)
        .unwrap_or_else(|e| panic!("threads: {e}"));
}

/// Each flush and fence of the log removed in turn is caught by the checker alone
/// (lints off): in undo or redo mode, under the line or the word model, with the
/// operations on one thread or each on its own.
#[test]
fn every_flush_and_fence_of_the_log_is_needed() {
    let mut survivors = Vec::new();
    for site in SITES {
        let mut caught = false;
        'search: for threads in [false, true] {
            for model in [Model::Line, Model::Word] {
                for mode in [
                    None,
                    Some(LogMode::Lazy),
                    Some(LogMode::Undo),
                    Some(LogMode::Redo),
                ] {
                    let r = run_on(&SCRIPT, model, None, mode, false, threads, Some(site));
                    if r.is_err() {
                        caught = true;
                        break 'search;
                    }
                }
            }
        }
        if !caught {
            survivors.push(site);
        }
    }
    assert!(survivors.is_empty(), "mutants not caught: {survivors:?}");
}

#[test]
fn operations_on_threads_of_their_own_survive_every_crash() {
    for mode in [LogMode::Undo, LogMode::Redo, LogMode::Lazy] {
        run_on(&SCRIPT, Model::Line, None, Some(mode), true, true, None)
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..SLOTS, 1u64..1000).prop_map(|(slot, v)| Op::Put { slot, v }),
        2 => (0..SLOTS).prop_map(|slot| Op::Del { slot }),
        1 => (0..SLOTS, 1u64..1000).prop_map(|(slot, v)| Op::Abort { slot, v }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_survive_every_crash(ops in proptest::collection::vec(op(), 1..7)) {
        run(&ops, Model::Line, None, None, true).map_err(TestCaseError::fail)?;
    }
}
