//! Crash suite of the FFCCD paper's workloads (Table 3: `ll`, `avl`, `ss`, `bt`,
//! `rbt`, and §7.4's Redis-like `lru` over its hash table) under every move
//! protocol on the platform each is meant for: Espresso and SFCCD on ADR (line
//! model), FFCCD on eADR, and FFCCD on ADR with the emulated reached bitmap. The
//! data structures are `defrag_repro`'s own (`examples/defrag_repro/workloads`).
//!
//! Each run builds a fragmented structure (the setup, not crashed), then a
//! defragmenter thread begins a compaction, moves a few objects, moves the rest
//! and finishes, taking turns with the test's thread, whose operations (inserts,
//! deletes, swaps, gets, evictions) move objects inside the read barrier and
//! write the copies. The run is crashed wherever the durable set can change; after
//! each crash, reopening the heap must give the structure of the completed
//! operations (or with the one in flight applied whole), every pointer null or the
//! start of a live object of its declared type, no unreachable object and no
//! compaction left. `PMKIT_DEEP=1` checks at least 1,000 images per protocol and
//! workload, and adds the word model.

// The workloads' modules serve the example too: not every item is used here.
#![allow(dead_code)]

#[path = "../examples/defrag_repro/workloads/avl.rs"]
mod avl;
#[path = "../examples/defrag_repro/workloads/bt.rs"]
mod bt;
#[path = "../examples/defrag_repro/workloads/hash.rs"]
mod hash;
#[path = "../examples/defrag_repro/workloads/ll.rs"]
mod ll;
#[path = "../examples/defrag_repro/workloads/lru.rs"]
mod lru;
#[path = "../examples/defrag_repro/workloads/ops.rs"]
mod ops;
#[path = "../examples/defrag_repro/workloads/pmkit_store.rs"]
mod pmkit_store;
#[path = "../examples/defrag_repro/workloads/rbt.rs"]
mod rbt;
#[path = "../examples/defrag_repro/workloads/ss.rs"]
mod ss;
#[path = "../examples/defrag_repro/workloads/store.rs"]
mod store;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::mpsc;

use ops::{contents, run_op, setup, Ds, Op, Setup};
use pmem_core::sim::{Budget, CrashInfo, CrashTest, Model};
use pmem_core::{Pool, PoolOptions};
use pmem_defrag::{CompactOptions, CompactReport, Compaction, DefragHeap, HeapRoot, Protocol};
use pmkit_store::Pm;
use store::Rng;

/// Keys inserted by the setup (`ss`'s table has twice as many slots).
const SETUP_KEYS: u64 = 40;

/// One step of a script: the defragmenter's, or a mutator operation.
#[derive(Clone, Copy, Debug)]
enum Step {
    Begin,
    Defrag(usize),
    Finish,
    Mutate(Op),
}

/// The workload's operation in one transaction.
fn apply(heap: &DefragHeap, w: Setup, op: Op) -> Result<Option<u64>, String> {
    run_op(heap, w, op).map_err(|e| format!("{op:?}: {e}"))
}

/// Every (key, tag) of the structure, sorted.
fn read_contents(heap: &DefragHeap, w: Setup) -> Result<Vec<(u64, u8)>, String> {
    heap.transaction(|t| contents(&mut Pm(t), w))
        .map_err(|e| format!("{:?} contents: {e}", w.ds))
}

/// The DRAM model: applies an operation given what it returned in the run.
fn model_apply(m: &mut BTreeMap<u64, u8>, op: Op, got: Option<u64>) {
    match op {
        Op::Insert { key, tag } | Op::Swap { key, tag } | Op::HashInsert { key, tag } => {
            m.insert(key, tag);
        }
        Op::Delete { key } | Op::HashDelete { key } => {
            m.remove(&key);
        }
        Op::SetEvict { key, tag } => {
            if let Some(k) = got {
                m.remove(&k);
            }
            m.insert(key, tag);
        }
        Op::DeleteNext { .. } => {
            if let Some(k) = got {
                m.remove(&k);
            }
        }
        Op::Get { .. } => {}
    }
}

/// A key not in `m` (`ss`: a free slot of the table).
fn fresh(w: Setup, rng: &mut Rng, m: &BTreeMap<u64, u8>) -> u64 {
    loop {
        let key = if w.ds == Ds::Ss {
            rng.below(w.slots)
        } else {
            1 + rng.below(1 << 20)
        };
        if !m.contains_key(&key) {
            return key;
        }
    }
}

/// A present key, if any.
fn pick(rng: &mut Rng, m: &BTreeMap<u64, u8>) -> Option<u64> {
    let n = m.len() as u64;
    (n > 0).then(|| *m.keys().nth(rng.below(n) as usize).unwrap_or(&0))
}

/// The setup's operations: `SETUP_KEYS` inserts (`ss`: strings of one length),
/// then deletes of three keys in four, so the pages stay a quarter full.
fn setup_ops(w: Setup, rng: &mut Rng, m: &mut BTreeMap<u64, u8>) -> Vec<Op> {
    let ds = w.ds;
    let mut ops = Vec::new();
    for _ in 0..SETUP_KEYS {
        let key = fresh(w, rng, m);
        let mut tag = rng.next_u64() as u8;
        if ds == Ds::Ss {
            // One string class (the tag mod 4), so its pages fill and thin out.
            tag = (tag & !3) | 1;
        }
        ops.push(Op::Insert { key, tag });
        m.insert(key, tag);
    }
    let keys: Vec<u64> = m.keys().copied().collect();
    for (i, &key) in keys.iter().enumerate() {
        if i % 4 != 0 {
            ops.push(if ds == Ds::Ll {
                // `ll` deletes from its cursor (every other node, lap after lap):
                // its model follows what it returns.
                Op::DeleteNext { skip: 1 }
            } else {
                Op::Delete { key }
            });
            if ds != Ds::Ll {
                m.remove(&key);
            }
        }
    }
    ops
}

/// A mutator operation of the crashed part: a delete, an insert, and the
/// workload's own (`ss` a swap, `lru` a get and an eviction) by turns.
fn mutator_op(w: Setup, i: usize, rng: &mut Rng, m: &BTreeMap<u64, u8>) -> Op {
    let tag = rng.next_u64() as u8;
    match (i % 3, w.ds) {
        (0, Ds::Ll) => Op::DeleteNext { skip: rng.below(3) },
        (0, _) => match pick(rng, m) {
            Some(key) => Op::Delete { key },
            None => Op::Insert {
                key: fresh(w, rng, m),
                tag,
            },
        },
        (2, Ds::Ss) => match pick(rng, m) {
            Some(key) => Op::Swap {
                key,
                tag: tag.wrapping_add(1),
            },
            None => Op::Insert {
                key: fresh(w, rng, m),
                tag,
            },
        },
        (2, Ds::Lru) => match pick(rng, m) {
            Some(key) => Op::Get { key },
            None => Op::Insert {
                key: fresh(w, rng, m),
                tag,
            },
        },
        (1, Ds::Lru) => Op::SetEvict {
            key: fresh(w, rng, m),
            tag,
        },
        _ => Op::Insert {
            key: fresh(w, rng, m),
            tag,
        },
    }
}

/// The crashed script's shape: the defragmenter's steps among mutator operations.
const SHAPE: [Option<Step>; 10] = [
    Some(Step::Begin),
    Some(Step::Defrag(2)),
    None,
    None,
    None,
    Some(Step::Defrag(4)),
    None,
    Some(Step::Finish),
    None,
    None,
];

/// The machine a compaction runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Platform {
    Adr,
    Eadr,
    ReachedBitmap,
}

enum Cmd {
    Begin(CompactOptions),
    Step(usize),
    Finish,
}

/// The defragmenter thread: runs commands on its compaction, replying to each.
fn defragmenter(
    heap: &DefragHeap,
    cmds: mpsc::Receiver<Cmd>,
    done: mpsc::Sender<Result<Option<CompactReport>, String>>,
) {
    let mut c: Option<Compaction<'_>> = None;
    for cmd in cmds {
        let r = match cmd {
            Cmd::Begin(opts) => heap
                .begin_compaction(&opts)
                .map_err(|e| e.to_string())
                .and_then(|x| {
                    c = x;
                    c.as_ref()
                        .map(|_| None)
                        .ok_or_else(|| "nothing to compact".to_owned())
                }),
            Cmd::Step(n) => match c.as_mut() {
                Some(c) => c.step(n).map(|_| None).map_err(|e| e.to_string()),
                None => Err("no compaction began".into()),
            },
            Cmd::Finish => match c.take() {
                Some(c) => c.finish().map(Some).map_err(|e| e.to_string()),
                None => Err("no compaction began".into()),
            },
        };
        if done.send(r).is_err() {
            return;
        }
    }
}

/// Crash-tests workload `ds` under `protocol` on `platform`, crashed under
/// `model`. Returns the images checked.
fn crash_test(
    ds: Ds,
    protocol: Protocol,
    platform: Platform,
    model: Model,
    budget: Budget,
) -> Result<u64, String> {
    let opts = CompactOptions::new()
        .target(1.0)
        .protocol(protocol)
        .eadr(platform == Platform::Eadr);
    let w = setup(ds, SETUP_KEYS);
    let mut rng = Rng::new(0xdef7a6 + ds as u64);
    let mut m = BTreeMap::new();
    let setup = setup_ops(w, &mut rng, &mut m);
    // The script's mutator operations are drawn as it runs (from the model
    // before each); each is kept with what it returned, for the oracle.
    let script: RefCell<Vec<(Step, Option<u64>)>> = RefCell::new(Vec::new());
    // The model after the setup, as the run made it (`ll` deletes what its
    // cursor finds).
    let base: RefCell<BTreeMap<u64, u8>> = RefCell::new(BTreeMap::new());
    let test = CrashTest::new(PoolOptions::new("workloads", 2 << 20).root::<HeapRoot>())
        .model(model)
        .budget(budget)
        // FFCCD flushes nothing in its moves by design: the missing-flush lint
        // would refuse the trace before any image is checked.
        .deny_correctness_lints(protocol != Protocol::Ffccd);
    let trace = test
        .record(
            |_| Ok(()),
            |pool, sim| {
                sim.emulate_reached_bitmap(platform == Platform::ReachedBitmap);
                let registry = pmkit_store::registry();
                let heap = DefragHeap::create(pool, &registry).map_err(|e| e.to_string())?;
                let mut model = BTreeMap::new();
                for &op in &setup {
                    let got = apply(&heap, w, op)?;
                    model_apply(&mut model, op, got);
                }
                // Any lazy entries made durable in place, then the durable base.
                heap.transaction(|_| Ok(())).map_err(|e| e.to_string())?;
                sim.mark_durable();
                base.borrow_mut().clone_from(&model);
                let mut rng = Rng::new(0x5c417 + ds as u64);
                std::thread::scope(|s| {
                    let (cmd_tx, cmd_rx) = mpsc::channel();
                    let (done_tx, done_rx) = mpsc::channel();
                    let h = &heap;
                    s.spawn(move || defragmenter(h, cmd_rx, done_tx));
                    let ask = |cmd: Cmd| -> Result<(), String> {
                        cmd_tx.send(cmd).map_err(|e| e.to_string())?;
                        let report = done_rx.recv().map_err(|e| e.to_string())??;
                        if let Some(r) = report {
                            // The script must exercise both movers.
                            if r.moved < 2 || r.barrier_moves == 0 || r.barrier_moves == r.moved {
                                return Err(format!(
                                    "the compaction did not move objects both ways: {r:?}"
                                ));
                            }
                        }
                        Ok(())
                    };
                    for (i, step) in SHAPE.iter().enumerate() {
                        let step = step
                            .unwrap_or_else(|| Step::Mutate(mutator_op(w, i, &mut rng, &model)));
                        let got = sim.op(i as u32, || match step {
                            Step::Begin => ask(Cmd::Begin(opts)).map(|()| None),
                            Step::Defrag(n) => ask(Cmd::Step(n)).map(|()| None),
                            Step::Finish => ask(Cmd::Finish).map(|()| None),
                            Step::Mutate(op) => apply(h, w, op),
                        })?;
                        if let Step::Mutate(op) = step {
                            model_apply(&mut model, op, got);
                        }
                        script.borrow_mut().push((step, got));
                    }
                    Ok::<(), String>(())
                })
            },
        )
        .map_err(|f| f.to_string())?;
    let script = script.into_inner();
    let base = base.into_inner();
    let model_after = |n: u32| {
        let mut model = base.clone();
        for &(step, got) in &script[..n as usize] {
            if let Step::Mutate(op) = step {
                model_apply(&mut model, op, got);
            }
        }
        model.into_iter().collect::<Vec<_>>()
    };
    let recover = |pool: Pool| -> Result<Vec<(u64, u8)>, String> {
        let (heap, _) =
            DefragHeap::open(pool, &pmkit_store::registry()).map_err(|e| format!("open: {e}"))?;
        let marking = heap.verify().map_err(|e| format!("verify: {e}"))?;
        if !marking.unreachable.is_empty() {
            return Err(format!("unreachable objects {:x?}", marking.unreachable));
        }
        read_contents(&heap, w)
    };
    let check = |got: &Vec<(u64, u8)>, crash: &CrashInfo| crash.expect_model(got, model_after);
    test.check_trace(&trace, &recover, &check)
        .map(|r| r.images_checked)
        .map_err(|f| f.to_string())
}

/// Each protocol on the platform it is meant for, under that platform's model.
const PROTOCOLS: [(Protocol, Platform, Model); 4] = [
    (Protocol::Espresso, Platform::Adr, Model::Line),
    (Protocol::Sfccd, Platform::Adr, Model::Line),
    (Protocol::Ffccd, Platform::Eadr, Model::Eadr),
    (Protocol::Ffccd, Platform::ReachedBitmap, Model::Line),
];

fn deep() -> bool {
    std::env::var_os("PMKIT_DEEP").is_some()
}

/// The default run samples a few images per crash point (every point is still
/// crashed); the deep run (`PMKIT_DEEP=1`) the simulator's default budget,
/// scaled by `PMKIT_SIM_DEPTH`.
fn budget() -> Budget {
    if deep() {
        Budget::from_env()
    } else {
        Budget {
            exhaustive_up_to: 8,
            k: 1,
            random: 2,
            seed: 0x5eed,
        }
    }
}

fn run(ds: Ds) {
    let mut runs: Vec<(Protocol, Platform, Model)> = PROTOCOLS.to_vec();
    if deep() {
        runs.extend([
            (Protocol::Espresso, Platform::Adr, Model::Word),
            (Protocol::Sfccd, Platform::Adr, Model::Word),
            (Protocol::Ffccd, Platform::ReachedBitmap, Model::Word),
        ]);
    }
    for (protocol, platform, model) in runs {
        let images = crash_test(ds, protocol, platform, model, budget())
            .unwrap_or_else(|e| panic!("{ds:?} {protocol} {platform:?} {model:?}: {e}"));
        eprintln!("{ds:?} {protocol} on {platform:?} under {model:?}: {images} images");
        let least = if deep() { 1000 } else { 50 };
        assert!(
            images >= least,
            "{ds:?} {protocol} {platform:?} {model:?}: only {images} images"
        );
    }
}

#[test]
fn ll_survives_every_crash_under_every_protocol() {
    run(Ds::Ll);
}

#[test]
fn avl_survives_every_crash_under_every_protocol() {
    run(Ds::Avl);
}

#[test]
fn ss_survives_every_crash_under_every_protocol() {
    run(Ds::Ss);
}

#[test]
fn bt_survives_every_crash_under_every_protocol() {
    run(Ds::Bt);
}

#[test]
fn rbt_survives_every_crash_under_every_protocol() {
    run(Ds::Rbt);
}

#[test]
fn lru_survives_every_crash_under_every_protocol() {
    run(Ds::Lru);
}

/// FFCCD claiming eADR on ADR loses data in the workloads too: the suite can
/// fail.
#[test]
fn ffccd_claiming_eadr_on_adr_is_caught() {
    let r = crash_test(
        Ds::Avl,
        Protocol::Ffccd,
        Platform::Eadr,
        Model::Line,
        budget(),
    );
    let e = r.expect_err("FFCCD without eADR or the bitmap must lose data");
    assert!(!e.contains("lint"), "{e}");
}
