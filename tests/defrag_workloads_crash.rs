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

use defrag::{CompactOptions, CompactReport, Compaction, DefragHeap, HeapRoot, Protocol};
use pmem_core::sim::{Budget, CrashInfo, CrashTest, Model};
use pmem_core::{Pool, PoolOptions};
use pmkit_store::Pm;
use store::{Rng, Store};

/// A workload of Table 3 (or `lru`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ds {
    Ll,
    Avl,
    Ss,
    Bt,
    Rbt,
    Lru,
}

/// Keys inserted by the setup, and `ss`'s table (slots and depth for them).
const SETUP_KEYS: u64 = 40;
const SLOTS: u64 = 2 * SETUP_KEYS;

/// One step of a script: the defragmenter's, or a mutator operation.
#[derive(Clone, Copy, Debug)]
enum Op {
    Begin,
    Step(usize),
    Finish,
    Insert {
        key: u64,
        tag: u8,
    },
    Delete {
        key: u64,
    },
    /// `ll`: delete the node `skip` nodes past the cursor.
    DeleteNext {
        skip: u64,
    },
    /// `ss`: give a slot a string of another length.
    Swap {
        key: u64,
        tag: u8,
    },
    /// `lru`: a lookup (moves the entry to the front).
    Get {
        key: u64,
    },
    /// `lru`: a new key, evicting the least recent one.
    SetEvict {
        key: u64,
        tag: u8,
    },
}

/// Applies a mutator operation in one transaction; returns a deleted or evicted key.
fn apply(heap: &DefragHeap, ds: Ds, op: Op) -> Result<Option<u64>, String> {
    let depth = ss::depth(SLOTS);
    heap.transaction(|t| {
        let s = &mut Pm(t);
        let none = |r: Result<(), defrag::DefragError>| r.map(|()| None);
        match (ds, op) {
            (Ds::Ll, Op::Insert { key, tag }) => none(ll::insert(s, key, tag)),
            (Ds::Ll, Op::DeleteNext { skip }) => ll::delete_next(s, skip).map(Some),
            (Ds::Avl, Op::Insert { key, tag }) => none(avl::insert(s, key, tag)),
            (Ds::Avl, Op::Delete { key }) => none(avl::delete(s, key)),
            (Ds::Rbt, Op::Insert { key, tag }) => none(rbt::insert(s, key, tag)),
            (Ds::Rbt, Op::Delete { key }) => none(rbt::delete(s, key)),
            (Ds::Bt, Op::Insert { key, tag }) => none(bt::insert(s, key, tag)),
            (Ds::Bt, Op::Delete { key }) => none(bt::delete(s, key)),
            (Ds::Ss, Op::Insert { key, tag }) => none(ss::insert(s, key, tag, depth)),
            (Ds::Ss, Op::Delete { key }) => none(ss::delete(s, key, depth)),
            (Ds::Ss, Op::Swap { key, tag }) => none(ss::swap(s, key, tag, depth)),
            (Ds::Lru, Op::Insert { key, tag }) => lru::set_new(s, key, tag, false),
            (Ds::Lru, Op::SetEvict { key, tag }) => lru::set_new(s, key, tag, true),
            (Ds::Lru, Op::Delete { key }) => none(lru::delete(s, key)),
            (Ds::Lru, Op::Get { key }) => lru::get(s, key).map(|_| None),
            (ds, op) => Err(<Pm<'_, '_, '_> as Store>::fail(format!(
                "{ds:?}: no operation {op:?}"
            ))),
        }
    })
    .map_err(|e| format!("{ds:?} {op:?}: {e}"))
}

/// Every (key, tag) of the structure, sorted.
fn contents(heap: &DefragHeap, ds: Ds) -> Result<Vec<(u64, u8)>, String> {
    let mut v = heap
        .transaction(|t| {
            let s = &mut Pm(t);
            match ds {
                Ds::Ll => ll::contents(s),
                Ds::Avl => avl::contents(s),
                Ds::Rbt => rbt::contents(s),
                Ds::Bt => bt::contents(s),
                Ds::Ss => ss::contents(s, ss::depth(SLOTS)),
                Ds::Lru => lru::contents(s),
            }
        })
        .map_err(|e| format!("{ds:?} contents: {e}"))?;
    v.sort_unstable();
    Ok(v)
}

/// The DRAM model: applies an operation given what it returned in the run.
fn model_apply(m: &mut BTreeMap<u64, u8>, op: Op, got: Option<u64>) {
    match op {
        Op::Insert { key, tag } | Op::Swap { key, tag } => {
            m.insert(key, tag);
        }
        Op::Delete { key } => {
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
        Op::Begin | Op::Step(_) | Op::Finish | Op::Get { .. } => {}
    }
}

/// A key not in `m` (`ss`: a free slot of the table).
fn fresh(ds: Ds, rng: &mut Rng, m: &BTreeMap<u64, u8>) -> u64 {
    loop {
        let key = if ds == Ds::Ss {
            rng.below(SLOTS)
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
fn setup_ops(ds: Ds, rng: &mut Rng, m: &mut BTreeMap<u64, u8>) -> Vec<Op> {
    let mut ops = Vec::new();
    for _ in 0..SETUP_KEYS {
        let key = fresh(ds, rng, m);
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
fn mutator_op(ds: Ds, i: usize, rng: &mut Rng, m: &BTreeMap<u64, u8>) -> Op {
    let tag = rng.next_u64() as u8;
    match (i % 3, ds) {
        (0, Ds::Ll) => Op::DeleteNext { skip: rng.below(3) },
        (0, _) => match pick(rng, m) {
            Some(key) => Op::Delete { key },
            None => Op::Insert {
                key: fresh(ds, rng, m),
                tag,
            },
        },
        (2, Ds::Ss) => match pick(rng, m) {
            Some(key) => Op::Swap {
                key,
                tag: tag.wrapping_add(1),
            },
            None => Op::Insert {
                key: fresh(ds, rng, m),
                tag,
            },
        },
        (2, Ds::Lru) => match pick(rng, m) {
            Some(key) => Op::Get { key },
            None => Op::Insert {
                key: fresh(ds, rng, m),
                tag,
            },
        },
        (1, Ds::Lru) => Op::SetEvict {
            key: fresh(ds, rng, m),
            tag,
        },
        _ => Op::Insert {
            key: fresh(ds, rng, m),
            tag,
        },
    }
}

/// The crashed script's shape: the defragmenter's steps among mutator operations.
const SHAPE: [Option<Op>; 10] = [
    Some(Op::Begin),
    Some(Op::Step(2)),
    None,
    None,
    None,
    Some(Op::Step(4)),
    None,
    Some(Op::Finish),
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
    let mut rng = Rng::new(0xdef7a6 + ds as u64);
    let mut m = BTreeMap::new();
    let setup = setup_ops(ds, &mut rng, &mut m);
    // The script's mutator operations are drawn as it runs (from the model
    // before each); each is kept with what it returned, for the oracle.
    let script: RefCell<Vec<(Op, Option<u64>)>> = RefCell::new(Vec::new());
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
                    let got = apply(&heap, ds, op)?;
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
                        let op = step.unwrap_or_else(|| mutator_op(ds, i, &mut rng, &model));
                        let got = sim.op(i as u32, || match op {
                            Op::Begin => ask(Cmd::Begin(opts)).map(|()| None),
                            Op::Step(n) => ask(Cmd::Step(n)).map(|()| None),
                            Op::Finish => ask(Cmd::Finish).map(|()| None),
                            _ => apply(h, ds, op),
                        })?;
                        model_apply(&mut model, op, got);
                        script.borrow_mut().push((op, got));
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
        for &(op, got) in &script[..n as usize] {
            model_apply(&mut model, op, got);
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
        contents(&heap, ds)
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
