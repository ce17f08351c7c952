//! The script of the concurrent crash suites (`concurrent_crash.rs`,
//! `move_mutants.rs`), for each protocol: a
//! defragmenter thread (begin, steps of moves, finish) and the test's thread
//! (updates, a push and a removal on a list of 120-byte records, every one of
//! which the compaction relocates) take turns, so some objects are moved by the
//! defragmenter and some by the mutator's barrier, and the mutator writes objects
//! both have moved. The run is recorded on a simulated pool and crashed wherever
//! the durable set can change. After each crash, reopening must give: the list of
//! the completed operations (or with the one in flight applied whole), no torn
//! record, every pointer null or the start of a live object of its type, no
//! unreachable object and no compaction left (recovery finished it).
//!
//! Espresso and SFCCD run under the line model (ADR) and FFCCD under eADR, or
//! under the line and word models with the reached bitmap emulated; FFCCD
//! claiming eADR under the line model must fail, and so must Espresso and SFCCD
//! with any one of their flushes or fences removed, and tracked FFCCD with its
//! recovery or settling broken (`mutation` feature).

#![allow(dead_code)] // each suite uses part of it

use std::sync::mpsc;

use pmem_core::sim::{Budget, CrashInfo, CrashTest, Model};
use pmem_core::{PPtr, Pool, PoolOptions};
use pmem_defrag::{
    persistent_type, CompactOptions, Compaction, DefragHeap, HeapRoot, Protocol, Registry,
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

/// Records pushed by the setup (28 fill a page), and the ones it keeps: four on
/// the first page, two on the second, so both pages are relocated into one.
pub const SETUP: u64 = 30;
pub const KEEP: [u64; 6] = [0, 9, 18, 27, 28, 29];

#[derive(Clone, Copy, Debug)]
pub enum Op {
    Begin,
    Step(usize),
    Finish,
    /// Sets every word of the record at this position.
    Update(usize, u64),
    Push(u64),
    Remove(usize),
}

/// The plan moves the records in this order: 28, 29 (the emptier page first),
/// then 0, 9, 18, 27; the list is 29, 28, 27, 18, 9, 0. Loading a pointer moves
/// its target (the barrier), so a mutator walking to position k moves positions
/// up to k + 1.
pub const SCRIPT: [Op; 11] = [
    Op::Begin,
    // The defragmenter moves 28, 29, 0 (each published by the next move's fence
    // under SFCCD) and 9 (the step's last).
    Op::Step(4),
    // Writes to copies the defragmenter made: lost if a forward word was not
    // durable before its copy was published.
    Op::Update(0, 100),
    // Walking to 0, the barrier moves 27 and 18.
    Op::Update(5, 105),
    Op::Update(4, 106),
    Op::Push(200),
    Op::Remove(2),
    Op::Step(10),
    Op::Update(4, 102),
    Op::Finish,
    Op::Update(1, 103),
];

pub fn model(ops: &[Op]) -> Vec<u64> {
    let mut list: Vec<u64> = KEEP.iter().rev().copied().collect();
    for op in ops {
        match *op {
            Op::Update(k, v) if k < list.len() => list[k] = v,
            Op::Push(v) => list.insert(0, v),
            Op::Remove(k) if k < list.len() => {
                list.remove(k);
            }
            _ => {}
        }
    }
    list
}

pub fn record(v: u64) -> Rec {
    Rec {
        data: [v; 14],
        next: PPtr::null(),
    }
}

/// Pushes a record holding `v` on the list.
pub fn push(t: &mut pmem_defrag::DefragTx<'_, '_>, v: u64) -> Result<(), pmem_defrag::DefragError> {
    let head = t.root::<Rec>("list")?;
    let r = t.alloc::<Rec>()?;
    t.write(
        r,
        &Rec {
            next: head,
            ..record(v)
        },
    )?;
    t.set_root("list", r)
}

pub fn setup(heap: &DefragHeap) -> Result<(), String> {
    for v in 0..SETUP {
        heap.transaction(|t| push(t, v))
            .map_err(|e| e.to_string())?;
    }
    // Remove the others, from the tail so positions stay simple.
    let mut list: Vec<u64> = (0..SETUP).rev().collect();
    for k in (0..list.len()).rev() {
        if !KEEP.contains(&list[k]) {
            heap.transaction(|t| remove_at(t, k))
                .map_err(|e| e.to_string())?;
            list.remove(k);
        }
    }
    Ok(())
}

/// The record at position `k` and the one before it.
pub fn find(
    t: &mut pmem_defrag::DefragTx<'_, '_>,
    k: usize,
) -> Result<(Option<PPtr<Rec>>, PPtr<Rec>), pmem_defrag::DefragError> {
    let mut prev = None;
    let mut cur = t.root::<Rec>("list")?;
    for _ in 0..k {
        if cur.is_null() {
            break;
        }
        prev = Some(cur);
        cur = t.read(cur)?.next;
    }
    Ok((prev, cur))
}

pub fn remove_at(
    t: &mut pmem_defrag::DefragTx<'_, '_>,
    k: usize,
) -> Result<(), pmem_defrag::DefragError> {
    let (prev, cur) = find(t, k)?;
    if cur.is_null() {
        return Ok(());
    }
    let next = t.read(cur)?.next;
    match prev {
        None => t.set_root("list", next)?,
        Some(p) => {
            let mut r = t.read(p)?;
            r.next = next;
            t.write(p, &r)?;
        }
    }
    t.free(cur)
}

pub fn mutate(heap: &DefragHeap, op: Op) -> Result<(), String> {
    heap.transaction(|t| match op {
        Op::Update(k, v) => {
            let (_, cur) = find(t, k)?;
            if cur.is_null() {
                return Ok(());
            }
            let next = t.read(cur)?.next;
            t.write(cur, &Rec { next, ..record(v) })
        }
        Op::Push(v) => push(t, v),
        Op::Remove(k) => remove_at(t, k),
        _ => Ok(()),
    })
    .map_err(|e| e.to_string())
}

pub enum Cmd {
    Begin(CompactOptions),
    Step(usize),
    Finish,
}

/// The defragmenter thread: runs commands on its compaction, replying to each.
pub fn defragmenter(
    heap: &DefragHeap,
    cmds: mpsc::Receiver<Cmd>,
    done: mpsc::Sender<Result<(), String>>,
) {
    let mut c: Option<Compaction<'_>> = None;
    for cmd in cmds {
        let r = match cmd {
            Cmd::Begin(opts) => heap
                .begin_compaction(&opts)
                .map(|x| c = x)
                .map_err(|e| e.to_string()),
            Cmd::Step(n) => match c.as_mut() {
                Some(c) => c.step(n).map(|_| ()).map_err(|e| e.to_string()),
                None => Err("no compaction began".into()),
            },
            Cmd::Finish => match c.take() {
                Some(c) => c.finish().map(|_| ()).map_err(|e| e.to_string()),
                None => Err("no compaction began".into()),
            },
        };
        if done.send(r).is_err() {
            return;
        }
    }
}

/// Runs op `n` (the closure) inside the simulator's op markers, or as it is.
pub type OpWrapper<'a> =
    dyn Fn(u32, &mut dyn FnMut() -> Result<(), String>) -> Result<(), String> + 'a;

/// Runs the script on `heap`, each op through `wrap` (the simulator's op marker).
pub fn run_script(
    heap: &DefragHeap,
    opts: CompactOptions,
    wrap: &OpWrapper<'_>,
) -> Result<(), String> {
    std::thread::scope(|s| {
        let (cmd_tx, cmd_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        s.spawn(move || defragmenter(heap, cmd_rx, done_tx));
        let ask = |cmd: Cmd| -> Result<(), String> {
            cmd_tx.send(cmd).map_err(|e| e.to_string())?;
            done_rx.recv().map_err(|e| e.to_string())?
        };
        for (i, &op) in SCRIPT.iter().enumerate() {
            wrap(i as u32, &mut || match op {
                Op::Begin => ask(Cmd::Begin(opts)),
                Op::Step(n) => ask(Cmd::Step(n)),
                Op::Finish => ask(Cmd::Finish),
                _ => mutate(heap, op),
            })?;
        }
        Ok(())
    })
}

pub fn recover(pool: Pool) -> Result<Vec<u64>, String> {
    let (heap, _) = DefragHeap::open(pool, &registry()).map_err(|e| format!("open: {e}"))?;
    let marking = heap.verify().map_err(|e| format!("verify: {e}"))?;
    if !marking.unreachable.is_empty() {
        return Err(format!("unreachable objects {:x?}", marking.unreachable));
    }
    let mut list = Vec::new();
    let mut p = heap.root::<Rec>("list").map_err(|e| e.to_string())?;
    while !p.is_null() {
        let r = heap.read(p).map_err(|e| e.to_string())?;
        if r.data.iter().any(|&d| d != r.data[0]) {
            return Err(format!("torn record {:?}", r.data));
        }
        list.push(r.data[0]);
        p = r.next;
    }
    let stats = heap.stats().map_err(|e| e.to_string())?;
    if stats.live_objects != list.len() as u64 {
        return Err(format!("{stats:?} for a list of {}", list.len()));
    }
    Ok(list)
}

/// The machine a compaction believes it runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    /// Flushes needed, caches lost at a power failure.
    Adr,
    /// Declared eADR (persistent caches).
    Eadr,
    /// ADR with the FFCCD paper's reached bitmap, emulated by the simulator.
    ReachedBitmap,
}

impl Platform {
    /// Where each protocol is meant to run without extra hardware.
    pub fn native(protocol: Protocol) -> Platform {
        if protocol == Protocol::Ffccd {
            Platform::Eadr
        } else {
            Platform::Adr
        }
    }
}

pub fn options(protocol: Protocol) -> CompactOptions {
    options_on(protocol, Platform::native(protocol))
}

pub fn options_on(protocol: Protocol, platform: Platform) -> CompactOptions {
    CompactOptions::new()
        .target(1.0)
        .protocol(protocol)
        .eadr(platform == Platform::Eadr)
}

/// The crash test of the script under `protocol` and `model`, on the protocol's
/// native platform. Returns the images checked.
pub fn crash_test(protocol: Protocol, model_kind: Model) -> Result<u64, String> {
    crash_test_with(protocol, model_kind, Budget::from_env())
}

/// [`crash_test`] with the cuts per crash point that `budget` allows.
pub fn crash_test_with(
    protocol: Protocol,
    model_kind: Model,
    budget: Budget,
) -> Result<u64, String> {
    crash_test_on(protocol, Platform::native(protocol), model_kind, budget)
}

/// The crash test of the script under `protocol` on `platform`, crashed under
/// `model_kind`.
pub fn crash_test_on(
    protocol: Protocol,
    platform: Platform,
    model_kind: Model,
    budget: Budget,
) -> Result<u64, String> {
    CrashTest::new(PoolOptions::new("defrag", 1 << 20).root::<HeapRoot>())
        .model(model_kind)
        .budget(budget)
        // FFCCD's copies and forward words are never flushed, by design: the
        // simulator's missing-flush lint would refuse the trace before any image
        // is checked. Its images are what must be right (or, on ADR, wrong).
        .deny_correctness_lints(protocol != Protocol::Ffccd)
        .run(
            |_| Ok(()),
            |pool, sim| {
                sim.emulate_reached_bitmap(platform == Platform::ReachedBitmap);
                let heap = DefragHeap::create(pool, &registry()).map_err(|e| e.to_string())?;
                setup(&heap)?;
                sim.mark_durable();
                run_script(&heap, options_on(protocol, platform), &|i, f| sim.op(i, f))
            },
            recover,
            |got: &Vec<u64>, crash: &CrashInfo| {
                crash.expect_model(got, |n| model(&SCRIPT[..n as usize]))
            },
        )
        .map(|r| r.images_checked)
        .map_err(|f| f.to_string())
}
