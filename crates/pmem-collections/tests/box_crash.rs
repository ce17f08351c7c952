//! Crash suite of boxes, named roots and multi-box transactions: random sequences of
//! box writes, transactions that write two boxes at once, and transactions that
//! allocate a box and name it (or remove one), crashed wherever the durable set can
//! change (and again during recovery). After each crash the roots must hold the
//! model after the completed operations (or with the one in flight applied whole),
//! and the allocator must hold exactly the roots' blocks: nothing leaked, nothing
//! reachable that is free.

use std::collections::BTreeMap;

use pmem_collections::{Container, Error, HeapOptions, PBox, PHeap};
use pmem_core::sim::{CrashInfo, CrashTest, Model};
use pmem_core::tx::{LogMode, TxGeometry};
use pmem_core::Pool;
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Sets box `b` (of "a", "b") to `v`.
    Set { b: u8, v: u64 },
    /// Sets both boxes in one transaction.
    SetBoth { v: u64 },
    /// Allocates box "c" holding `v` and names it, or replaces it if named.
    MakeC { v: u64 },
    /// Removes box "c" if named.
    DropC,
}

type Model_ = BTreeMap<String, u64>;

fn model(ops: &[Op]) -> Model_ {
    let mut m = Model_::from([("a".to_string(), 0), ("b".to_string(), 0)]);
    for op in ops {
        match *op {
            Op::Set { b, v } => {
                m.insert(name(b).into(), v);
            }
            Op::SetBoth { v } => {
                m.insert("a".into(), v);
                m.insert("b".into(), v + 1);
            }
            Op::MakeC { v } => {
                m.insert("c".into(), v);
            }
            Op::DropC => {
                m.remove("c");
            }
        }
    }
    m
}

fn name(b: u8) -> &'static str {
    if b.is_multiple_of(2) {
        "a"
    } else {
        "b"
    }
}

fn options(mode: LogMode) -> HeapOptions {
    HeapOptions {
        geometry: TxGeometry {
            lanes: 2,
            word_records: 32,
            object_records: 8,
            object_bytes: 1024,
            alloc_records: 8,
            lazy_ring_bytes: 2048,
        },
        page_size: 64,
        mode,
    }
}

fn recover(pool: Pool) -> Result<Model_, String> {
    let heap = PHeap::open(pool).map_err(|e| format!("open: {e}"))?;
    let mut m = Model_::new();
    let mut blocks = Vec::new();
    for n in heap.root_names().map_err(|e| e.to_string())? {
        let b: PBox<u64> = heap.root(&n).map_err(|e| format!("root {n}: {e}"))?;
        m.insert(n.clone(), b.get(&heap).map_err(|e| e.to_string())?);
        blocks.extend(b.blocks(&heap).map_err(|e| e.to_string())?);
    }
    blocks.sort_unstable();
    let live = heap.live_blocks().map_err(|e| e.to_string())?;
    if live != blocks {
        return Err(format!(
            "allocator holds {live:x?}, the roots reach {blocks:x?}"
        ));
    }
    Ok(m)
}

fn apply(heap: &PHeap, a: &mut PBox<u64>, b: &mut PBox<u64>, op: Op) -> Result<(), Error> {
    match op {
        Op::Set { b: which, v } => {
            if which % 2 == 0 {
                a.set(heap, &v)
            } else {
                b.set(heap, &v)
            }
        }
        Op::SetBoth { v } => heap.transaction(|tx| {
            tx.set(a, &v)?;
            tx.set(b, &(v + 1))
        }),
        Op::MakeC { v } => {
            if heap.root_names()?.iter().any(|n| n == "c") {
                let mut c: PBox<u64> = heap.root("c")?;
                c.set(heap, &v)
            } else {
                heap.transaction(|tx| {
                    let c = tx.alloc_box(&v)?;
                    tx.set_root("c", &c)
                })
            }
        }
        Op::DropC => {
            if heap.root_names()?.iter().any(|n| n == "c") {
                let c: PBox<u64> = heap.root("c")?;
                heap.remove_root("c", c)
            } else {
                Ok(())
            }
        }
    }
}

fn run(ops: &[Op], model_kind: Model, mode: LogMode) -> Result<(), String> {
    CrashTest::new(PHeap::pool_options("boxes", 256 * 1024))
        .model(model_kind)
        .run(
            |_| Ok(()),
            |pool, sim| {
                let heap = PHeap::create_with(pool, options(mode)).map_err(|e| e.to_string())?;
                let mut a: PBox<u64> = heap.root("a").map_err(|e| e.to_string())?;
                let mut b: PBox<u64> = heap.root("b").map_err(|e| e.to_string())?;
                heap.checkpoint().map_err(|e| e.to_string())?;
                sim.mark_durable();
                for (n, &op) in ops.iter().enumerate() {
                    sim.op(n as u32, || apply(&heap, &mut a, &mut b, op))
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            },
            recover,
            |got: &Model_, crash: &CrashInfo| {
                crash.expect_model(got, |n| model(&ops[..n as usize]))
            },
        )
        .map(|_| ())
        .map_err(|f| f.to_string())
}

const FIXED: [Op; 6] = [
    Op::Set { b: 0, v: 1 },
    Op::SetBoth { v: 10 },
    Op::MakeC { v: 5 },
    Op::MakeC { v: 6 },
    Op::DropC,
    Op::Set { b: 1, v: 2 },
];

#[test]
fn boxes_roots_and_transactions_survive_every_crash() {
    for m in [Model::Line, Model::Word] {
        for mode in [LogMode::Lazy, LogMode::Undo] {
            run(&FIXED, m, mode).unwrap_or_else(|e| panic!("{m:?} {mode:?}: {e}"));
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<u8>(), 0u64..100).prop_map(|(b, v)| Op::Set { b, v }),
        2 => (0u64..100).prop_map(|v| Op::SetBoth { v }),
        2 => (0u64..100).prop_map(|v| Op::MakeC { v }),
        1 => Just(Op::DropC),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_survive_every_crash(ops in proptest::collection::vec(op(), 1..6), lazy in any::<bool>()) {
        let mode = if lazy { LogMode::Lazy } else { LogMode::Redo };
        run(&ops, Model::Line, mode).map_err(TestCaseError::fail)?;
    }
}

/// The suite catches a "two-box" update done as two transactions: a crash between
/// them leaves one box written and not the other.
#[test]
fn an_update_split_in_two_transactions_is_caught() {
    let err = CrashTest::new(PHeap::pool_options("boxes-split", 256 * 1024))
        .run(
            |_| Ok(()),
            |pool, sim| {
                let heap =
                    PHeap::create_with(pool, options(LogMode::Lazy)).map_err(|e| e.to_string())?;
                let mut a: PBox<u64> = heap.root("a").map_err(|e| e.to_string())?;
                let mut b: PBox<u64> = heap.root("b").map_err(|e| e.to_string())?;
                heap.checkpoint().map_err(|e| e.to_string())?;
                sim.mark_durable();
                sim.op(0, || -> Result<(), Error> {
                    a.set(&heap, &10)?;
                    b.set(&heap, &11)
                })
                .map_err(|e| e.to_string())
            },
            recover,
            |got: &Model_, crash: &CrashInfo| {
                crash.expect_model(got, |n| model(&[Op::SetBoth { v: 10 }][..n as usize]))
            },
        )
        .expect_err("the split update must be caught");
    let msg = err.to_string();
    assert!(msg.contains("recovered"), "{msg}");
}
