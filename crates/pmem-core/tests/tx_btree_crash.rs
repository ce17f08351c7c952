//! Crash suite of the reference B+-tree (`pmem_core::tx::reference::btree`), order
//! 3 so that inserts split leaves and inner nodes (and grow a new root) within a few
//! operations: every crash, reopened and checked, must give the model after the
//! completed operations (or with the one in flight applied whole), and the allocator
//! must hold exactly the tree's blocks.

use std::collections::BTreeMap;

use pmem_core::sim::{CrashInfo, CrashTest, Model};
use pmem_core::tx::reference::btree::BTree;
use pmem_core::tx::reference::Logging;
use pmem_core::tx::{LogMode, TxGeometry, TxHeap};
use pmem_core::{PPtr, Pool, PoolOptions, RootType};
use proptest::prelude::*;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Root {
    tree: u64,
}

impl RootType for Root {
    const ROOT_ID: &'static str = "pmkit-tests/btree";
    const LAYOUT_VERSION: u32 = 1;
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Insert { key: u64, v: u64 },
    Remove { key: u64 },
}

type Map = BTreeMap<u64, u64>;

fn model(ops: &[Op]) -> Map {
    let mut m = Map::new();
    for op in ops {
        match *op {
            Op::Insert { key, v } => {
                m.insert(key, v);
            }
            Op::Remove { key } => {
                m.remove(&key);
            }
        }
    }
    m
}

fn geometry() -> TxGeometry {
    TxGeometry {
        lanes: 2,
        word_records: 512,
        object_records: 16,
        object_bytes: 8 * 1024,
        alloc_records: 8,
        lazy_ring_bytes: 4096,
    }
}

fn setup(pool: Pool) -> Result<(TxHeap, BTree), String> {
    let mut heap = TxHeap::create(pool, &geometry(), 64).map_err(|e| e.to_string())?;
    let t = BTree::create(&mut heap, 3).map_err(|e| e.to_string())?;
    let root = heap.pool().root::<Root>().map_err(|e| e.to_string())?;
    heap.transaction(|tx| tx.write(root.cast::<u64>(), &t.header().offset()))
        .map_err(|e| e.to_string())?;
    Ok((heap, t))
}

fn recover(pool: Pool) -> Result<Map, String> {
    let (heap, _) = TxHeap::open(pool).map_err(|e| format!("open: {e}"))?;
    let root = heap.pool().root::<Root>().map_err(|e| e.to_string())?;
    let at = heap.pool().read(root).map_err(|e| e.to_string())?.tree;
    let t = BTree::at(PPtr::from_offset(at));
    let pairs = t.check(&heap).map_err(|e| e.to_string())?;
    let live = heap.live_blocks().map_err(|e| e.to_string())?;
    let blocks = t.blocks(&heap).map_err(|e| e.to_string())?;
    if live != blocks {
        return Err(format!(
            "allocator holds {live:x?}, the tree references {blocks:x?}"
        ));
    }
    Ok(pairs.into_iter().collect())
}

/// Runs `warm` operations as the durable starting state, then crashes `ops`.
fn run(warm: &[Op], ops: &[Op], model_kind: Model) -> Result<(), String> {
    let all: Vec<Op> = warm.iter().chain(ops).copied().collect();
    let apply = |heap: &mut TxHeap, t: &BTree, n: usize, op: Op| {
        let logging = [Logging::Word, Logging::Object, Logging::Hybrid][n % 3];
        let mode = if n.is_multiple_of(2) {
            LogMode::Undo
        } else {
            LogMode::Redo
        };
        match op {
            Op::Insert { key, v } => t.insert(heap, key, v, logging, mode).map(|_| ()),
            Op::Remove { key } => t.remove(heap, key, logging, mode).map(|_| ()),
        }
        .map_err(|e| e.to_string())
    };
    CrashTest::new(PoolOptions::new("btree", 512 * 1024).root::<Root>())
        .model(model_kind)
        .run(
            |_| Ok(()),
            |pool, sim| {
                let (mut heap, t) = setup(pool)?;
                for (n, &op) in warm.iter().enumerate() {
                    apply(&mut heap, &t, n, op)?;
                }
                sim.mark_durable();
                for (n, &op) in ops.iter().enumerate() {
                    sim.op(n as u32, || apply(&mut heap, &t, warm.len() + n, op))?;
                }
                Ok(())
            },
            recover,
            |got: &Map, crash: &CrashInfo| {
                crash.expect_model(got, |n| model(&all[..warm.len() + n as usize]))
            },
        )
        .map(|_| ())
        .map_err(|f| f.to_string())
}

#[test]
fn splits_and_a_new_root_survive_every_crash() {
    // Three keys fill the root leaf; the fourth insert splits it under a new root,
    // and later inserts split leaves again and then the inner root.
    let warm: Vec<Op> = (1..=3).map(|k| Op::Insert { key: k * 10, v: k }).collect();
    let ops = [
        Op::Insert { key: 40, v: 4 },
        Op::Insert { key: 25, v: 5 },
        Op::Insert { key: 26, v: 6 },
        Op::Remove { key: 10 },
        Op::Insert { key: 20, v: 7 },
    ];
    for m in [Model::Line, Model::Word] {
        run(&warm, &ops, m).unwrap_or_else(|e| panic!("{m:?}: {e}"));
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..12, 1u64..100).prop_map(|(key, v)| Op::Insert { key, v }),
        1 => (0u64..12).prop_map(|key| Op::Remove { key }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_survive_every_crash(
        warm in proptest::collection::vec(op(), 0..6),
        ops in proptest::collection::vec(op(), 1..4),
    ) {
        run(&warm, &ops, Model::Line).map_err(TestCaseError::fail)?;
    }
}
