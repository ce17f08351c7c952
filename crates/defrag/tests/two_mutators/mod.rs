//! The script of the two-mutator crash suites (`concurrent_tx_crash.rs`,
//! `heal_mutants.rs`). Crash suite of two mutator threads and the defragmenter at once, for each
//! protocol, in the line and word models. Two lists ("a" and "b", 120-byte
//! records) share two slab pages that the compaction relocates into one. The
//! script overlaps transactions of the two mutators (one holds its objects
//! locked, uncommitted, while the other commits; then both allocate at once),
//! and races the defragmenter's healing against a transaction that holds a
//! record whose pointer word names a source:
//!
//! * `Commit`: the mutator's write to the word comes first; healing must skip
//!   the record and revisit it after the commit (the word is then translated).
//! * `Rollback`: the transaction rolls back, restoring the source pointer after
//!   healing's first pass skipped it: healing must revisit and swap it.
//! * After the compaction, a write to a word healing swapped (heal first).
//!
//! After every crash, reopening must give both lists as the completed operations
//! made them (concurrent ones in the order they ended, each one in flight applied
//! whole or not at all), every pointer valid, nothing unreachable and no
//! compaction left. By default the images per crash point are few and the line
//! model crashes the commit case, the word model the rollback case, to keep the
//! suite fast; `PMKIT_DEEP=1` runs both cases in both models with the full
//! budget.

#![allow(dead_code)] // each suite uses part of it

use std::sync::mpsc;
use std::time::Duration;

use pmem_core::sim::{Budget, CrashInfo, CrashTest, Model, SimDomain};
use pmem_core::{PPtr, Pool, PoolOptions};
use pmem_defrag::{
    persistent_type, CompactOptions, Compaction, DefragError, DefragHeap, DefragTx, HeapRoot,
    Protocol, Registry,
};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Rec {
    pub data: [u64; 14],
    pub next: PPtr<Rec>,
}
persistent_type!(Rec, id = 3, pointers = [next: Rec]);

pub fn registry() -> Registry {
    Registry::new().with::<Rec>()
}

pub const LISTS: [&str; 2] = ["a", "b"];

/// Records pushed by the setup, alternately on "a" (even) and "b" (odd): 56 fill
/// two pages. The ones kept: three of "a" on the first page, three of "b" on the
/// second.
pub const SETUP: u64 = 56;
pub const KEEP: [u64; 6] = [0, 10, 20, 31, 41, 51];

#[derive(Clone, Copy, Debug)]
pub enum Mut {
    /// Sets every data word of list `l`'s record at position `k` (and writes its
    /// pointer word back, translated).
    Update(usize, usize, u64),
    /// Pushes a record holding `v` on list `l`.
    Push(usize, u64),
}

#[derive(Clone, Copy, Debug)]
pub enum Step {
    Begin,
    Moves(usize),
    /// Mutator A's operation runs until it holds its objects, then mutator B's
    /// whole transaction commits, then A's commits.
    Overlap(Mut, Mut),
    /// Mutator A's operation holds its objects; the defragmenter finishes (heals)
    /// meanwhile; A commits (or rolls back if `rollback`) while it heals.
    FinishRacing(Mut, bool),
    Alone(Mut),
}

/// The script; op numbers are the mutations' and the defragmenter's commands'
/// in this order (an `Overlap` is two ops, A's then B's; `FinishRacing` is A's
/// op then the finish).
pub fn script(rollback: bool) -> Vec<Step> {
    vec![
        Step::Begin,
        Step::Moves(2),
        Step::Overlap(Mut::Update(0, 0, 100), Mut::Update(1, 2, 200)),
        Step::Moves(1),
        Step::Overlap(Mut::Push(0, 300), Mut::Push(1, 301)),
        // The record at position 2 of "a" has not been read since its successor
        // moved: its pointer word still names a source, which A's read heals in
        // place (logged) and A's rollback puts back.
        Step::FinishRacing(Mut::Update(0, 2, 400), rollback),
        Step::Alone(Mut::Update(1, 0, 500)),
        Step::Alone(Mut::Update(0, 2, 600)),
    ]
}

/// The mutations by op number (`None`: a defragmenter command, or a rolled-back
/// mutation).
pub fn mutations(steps: &[Step]) -> Vec<Option<Mut>> {
    let mut v = Vec::new();
    for s in steps {
        match *s {
            Step::Begin | Step::Moves(_) => v.push(None),
            Step::Overlap(a, b) => v.extend([Some(a), Some(b)]),
            Step::FinishRacing(a, rollback) => v.extend([(!rollback).then_some(a), None]),
            Step::Alone(m) => v.push(Some(m)),
        }
    }
    v
}

pub fn initial() -> [Vec<u64>; 2] {
    let a = KEEP.iter().rev().copied().filter(|v| v % 2 == 0).collect();
    let b = KEEP.iter().rev().copied().filter(|v| v % 2 == 1).collect();
    [a, b]
}

pub fn model(muts: &[Option<Mut>], ops: &[u32]) -> [Vec<u64>; 2] {
    let mut lists = initial();
    for &op in ops {
        match muts.get(op as usize).copied().flatten() {
            Some(Mut::Update(l, k, v)) if k < lists[l].len() => lists[l][k] = v,
            Some(Mut::Push(l, v)) => lists[l].insert(0, v),
            _ => {}
        }
    }
    lists
}

pub fn record(v: u64, next: PPtr<Rec>) -> Rec {
    Rec {
        data: [v; 14],
        next,
    }
}

pub fn push(t: &mut DefragTx<'_, '_>, l: usize, v: u64) -> Result<(), DefragError> {
    let head = t.root::<Rec>(LISTS[l])?;
    let r = t.alloc::<Rec>()?;
    t.write(r, &record(v, head))?;
    t.set_root(LISTS[l], r)
}

pub fn find(
    t: &mut DefragTx<'_, '_>,
    l: usize,
    k: usize,
) -> Result<(Option<PPtr<Rec>>, PPtr<Rec>), DefragError> {
    let mut prev = None;
    let mut cur = t.root::<Rec>(LISTS[l])?;
    for _ in 0..k {
        if cur.is_null() {
            break;
        }
        prev = Some(cur);
        cur = t.read(cur)?.next;
    }
    Ok((prev, cur))
}

pub fn apply(t: &mut DefragTx<'_, '_>, m: Mut) -> Result<(), DefragError> {
    match m {
        Mut::Update(l, k, v) => {
            let (_, cur) = find(t, l, k)?;
            if cur.is_null() {
                return Ok(());
            }
            let next = t.read(cur)?.next;
            t.write(cur, &record(v, next))
        }
        Mut::Push(l, v) => push(t, l, v),
    }
}

pub fn setup(heap: &DefragHeap) -> Result<(), String> {
    for v in 0..SETUP {
        heap.transaction(|t| push(t, (v % 2) as usize, v))
            .map_err(|e| e.to_string())?;
    }
    for (l, name) in LISTS.iter().enumerate() {
        let mut list: Vec<u64> = (0..SETUP).rev().filter(|v| (v % 2) as usize == l).collect();
        for k in (0..list.len()).rev() {
            if !KEEP.contains(&list[k]) {
                heap.transaction(|t| {
                    let (prev, cur) = find(t, l, k)?;
                    let next = t.read(cur)?.next;
                    match prev {
                        None => t.set_root(name, next)?,
                        Some(p) => {
                            let r = t.read(p)?;
                            t.write(p, &record(r.data[0], next))?;
                        }
                    }
                    t.free(cur)
                })
                .map_err(|e| e.to_string())?;
                list.remove(k);
            }
        }
    }
    Ok(())
}

/// Mutator A's transaction: applies `m`, then (on its first attempt only: a
/// retry after a conflict runs alone) tells `held` it holds its objects and
/// waits for `go`; rolls back if `rollback`.
pub fn held_transaction(
    heap: &DefragHeap,
    m: Mut,
    rollback: bool,
    held: mpsc::Sender<()>,
    go: mpsc::Receiver<()>,
) -> Result<(), String> {
    let mut first = true;
    let r = heap.transaction(|t| {
        apply(t, m)?;
        if std::mem::take(&mut first) {
            let _ = held.send(());
            let _ = go.recv();
        }
        if rollback {
            return Err(DefragError::Corrupt("rolled back on purpose".into()));
        }
        Ok(())
    });
    match (r, rollback) {
        (Ok(()), false) | (Err(DefragError::Corrupt(_)), true) => Ok(()),
        (r, _) => Err(format!("{m:?}: {r:?}")),
    }
}

pub fn run_script(
    heap: &DefragHeap,
    steps: &[Step],
    opts: CompactOptions,
    sim: &SimDomain,
) -> Result<(), String> {
    let mut c: Option<Compaction<'_>> = None;
    let mut n = 0u32;
    let mut next = || {
        n += 1;
        n - 1
    };
    for &step in steps {
        match step {
            Step::Begin => {
                c = sim
                    .op(next(), || heap.begin_compaction(&opts))
                    .map_err(|e| e.to_string())?;
                if c.is_none() {
                    return Err("nothing to compact".into());
                }
            }
            Step::Moves(k) => {
                let c = c.as_mut().ok_or("no compaction")?;
                sim.op(next(), || c.step(k)).map_err(|e| e.to_string())?;
            }
            Step::Overlap(a, b) => {
                let (na, nb) = (next(), next());
                std::thread::scope(|s| {
                    let (held_tx, held_rx) = mpsc::channel();
                    let (go_tx, go_rx) = mpsc::channel();
                    let ta = s.spawn(move || {
                        sim.op(na, || held_transaction(heap, a, false, held_tx, go_rx))
                    });
                    held_rx.recv().map_err(|e| e.to_string())?;
                    let rb = s
                        .spawn(move || {
                            sim.op(nb, || {
                                heap.transaction(|t| apply(t, b)).map_err(|e| e.to_string())
                            })
                        })
                        .join()
                        .map_err(|_| "mutator B panicked".to_string());
                    let _ = go_tx.send(());
                    let ra = ta.join().map_err(|_| "mutator A panicked".to_string())?;
                    rb??;
                    ra
                })?;
            }
            Step::FinishRacing(a, rollback) => {
                let (na, nf) = (next(), next());
                let cmp = c.take().ok_or("no compaction")?;
                std::thread::scope(|s| {
                    let (held_tx, held_rx) = mpsc::channel();
                    let (go_tx, go_rx) = mpsc::channel();
                    let ta = s.spawn(move || {
                        sim.op(na, || held_transaction(heap, a, rollback, held_tx, go_rx))
                    });
                    held_rx.recv().map_err(|e| e.to_string())?;
                    let tf = s.spawn(move || sim.op(nf, || cmp.finish()));
                    // Let healing pass the held record at least once.
                    std::thread::sleep(Duration::from_millis(200));
                    let _ = go_tx.send(());
                    let ra = ta.join().map_err(|_| "mutator A panicked".to_string())?;
                    let rf = tf
                        .join()
                        .map_err(|_| "the defragmenter panicked".to_string())?;
                    let rf = rf.map_err(|e| e.to_string())?;
                    if rf.moved != 6 {
                        return Err(format!("{rf:?}"));
                    }
                    ra
                })?;
            }
            Step::Alone(m) => {
                sim.op(next(), || heap.transaction(|t| apply(t, m)))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

pub fn recover(pool: Pool) -> Result<[Vec<u64>; 2], String> {
    let (heap, _) = DefragHeap::open(pool, &registry()).map_err(|e| format!("open: {e}"))?;
    let marking = heap.verify().map_err(|e| format!("verify: {e}"))?;
    if !marking.unreachable.is_empty() {
        return Err(format!("unreachable objects {:x?}", marking.unreachable));
    }
    let mut lists = [Vec::new(), Vec::new()];
    for (l, list) in lists.iter_mut().enumerate() {
        let mut p = heap.root::<Rec>(LISTS[l]).map_err(|e| e.to_string())?;
        while !p.is_null() {
            let r = heap.read(p).map_err(|e| e.to_string())?;
            if r.data.iter().any(|&d| d != r.data[0]) {
                return Err(format!("torn record {:?}", r.data));
            }
            list.push(r.data[0]);
            p = r.next;
        }
    }
    let stats = heap.stats().map_err(|e| e.to_string())?;
    if stats.live_objects != (lists[0].len() + lists[1].len()) as u64 {
        return Err(format!("{stats:?} for lists {lists:?}"));
    }
    Ok(lists)
}

pub fn budget() -> Budget {
    let b = Budget::from_env();
    if std::env::var_os("PMKIT_DEEP").is_some() {
        return b;
    }
    Budget {
        exhaustive_up_to: 4,
        k: 1,
        random: 1,
        ..b
    }
}

/// The crash test of the script; FFCCD runs on ADR with the emulated reached
/// bitmap (the line and word models are ADR models). Returns the images checked.
pub fn crash_test(protocol: Protocol, model_kind: Model, rollback: bool) -> Result<u64, String> {
    let steps = script(rollback);
    let muts = mutations(&steps);
    let tracked = protocol == Protocol::Ffccd;
    CrashTest::new(PoolOptions::new("defrag", 1 << 20).root::<HeapRoot>())
        .model(model_kind)
        .budget(budget())
        // The simulator's lints judge each op at its end, as if ops ran one at a
        // time: with A's op still open when B's ends, A's flushed, unfenced lines
        // would be blamed on B. The images are the judge here.
        .deny_correctness_lints(false)
        .run(
            |_| Ok(()),
            |pool, sim| {
                sim.emulate_reached_bitmap(tracked);
                let heap = DefragHeap::create(pool, &registry()).map_err(|e| e.to_string())?;
                setup(&heap)?;
                sim.mark_durable();
                let opts = CompactOptions::new().target(1.0).protocol(protocol);
                run_script(&heap, &steps, opts, sim)
            },
            recover,
            |got: &[Vec<u64>; 2], crash: &CrashInfo| {
                crash.expect_model_ops(got, |ops| model(&muts, ops))
            },
        )
        .map(|r| r.images_checked)
        .map_err(|f| f.to_string())
}
