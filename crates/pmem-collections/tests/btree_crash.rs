//! Crash suite of `PBTreeMap`: sequences of inserts, replacements and removals on
//! a tree of order 3 (so splits, borrows, merges, new roots and root shrinks all
//! happen within a few operations), each one transaction, crashed wherever the
//! durable set can change, in the line and word models (the harness also crashes
//! during recovery). After each crash the reopened tree must pass every invariant
//! check, hold the model after the completed operations (or with the one in flight
//! applied whole), and the allocator must hold exactly the tree's blocks.
//!
//! Operations take turns between the heap's own path (lazy commits) and the
//! benchmarks' explicit options: undo, redo, and undo logging its fresh nodes.

use std::collections::BTreeMap;

use pmem_collections::{Container, HeapOptions, OrdElement, PBTreeMap, PBytes, PHeap, PString};
use pmem_core::sim::{CrashInfo, CrashTest, Model};
use pmem_core::tx::{Hint, LogMode, TxGeometry, TxOptions};
use pmem_core::Pool;
use proptest::prelude::*;

/// A small tree order: a node holds 1 to 3 keys.
const ORDER: usize = 3;

#[derive(Clone, Copy, Debug)]
enum Op {
    Insert { key: u8, v: u8 },
    Remove { key: u8 },
}

fn geometry() -> TxGeometry {
    TxGeometry {
        lanes: 2,
        word_records: 64,
        object_records: 32,
        object_bytes: 4096,
        alloc_records: 32,
        lazy_ring_bytes: 8192,
    }
}

fn pool_options(name: &str) -> pmem_core::PoolOptions {
    PHeap::pool_options(name, 1 << 20)
}

/// What a tree's keys and values are made of, so one suite covers `u64` and byte
/// strings.
trait Kind: 'static {
    type K: OrdElement;
    type V: pmem_collections::Element;
    type Map: PartialEq + std::fmt::Debug;
    fn apply(m: &mut Self::Map, op: Op);
    fn empty() -> Self::Map;
    fn run_op(
        t: &mut PBTreeMap<Self::K, Self::V, ORDER>,
        heap: &PHeap,
        op: Op,
        n: usize,
    ) -> pmem_collections::Result<()>;
    fn collect(t: &PBTreeMap<Self::K, Self::V, ORDER>, heap: &PHeap) -> Result<Self::Map, String>;
}

/// The n-th operation's options: the heap's own path, undo, redo, undo logging
/// fresh blocks, by turns.
fn options(n: usize) -> Option<TxOptions> {
    match n % 4 {
        0 => None,
        1 => Some(TxOptions::from(LogMode::Undo)),
        2 => Some(TxOptions::from(LogMode::Redo).hint(Hint::Word)),
        _ => Some(TxOptions::from(LogMode::Undo).log_fresh(true)),
    }
}

/// Word records for every write on odd operations, hybrid on even ones.
fn hint_for(n: usize) -> impl Fn(u64) -> Hint {
    move |len| {
        if n % 2 == 1 || len <= 8 {
            Hint::Word
        } else {
            Hint::Object
        }
    }
}

struct Words;

impl Kind for Words {
    type K = u64;
    type V = u64;
    type Map = BTreeMap<u64, u64>;
    fn apply(m: &mut Self::Map, op: Op) {
        match op {
            Op::Insert { key, v } => {
                m.insert(key.into(), v.into());
            }
            Op::Remove { key } => {
                m.remove(&key.into());
            }
        }
    }
    fn empty() -> Self::Map {
        BTreeMap::new()
    }
    fn run_op(
        t: &mut PBTreeMap<u64, u64, ORDER>,
        heap: &PHeap,
        op: Op,
        n: usize,
    ) -> pmem_collections::Result<()> {
        match (op, options(n)) {
            (Op::Insert { key, v }, None) => t.insert(heap, &key.into(), &v.into()).map(|_| ()),
            (Op::Insert { key, v }, Some(o)) => t
                .insert_with(heap, &key.into(), &v.into(), o, hint_for(n))
                .map(|_| ()),
            (Op::Remove { key }, None) => t.remove(heap, &key.into()).map(|_| ()),
            (Op::Remove { key }, Some(o)) => {
                t.remove_with(heap, &key.into(), o, hint_for(n)).map(|_| ())
            }
        }
    }
    fn collect(t: &PBTreeMap<u64, u64, ORDER>, heap: &PHeap) -> Result<Self::Map, String> {
        t.iter(heap)
            .map_err(|e| e.to_string())?
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())
    }
}

struct Strings;

fn skey(k: u8) -> String {
    format!("key-{k:03}")
}

/// Values of 0 to 40 bytes (empty ones own no block).
fn sval(v: u8) -> Vec<u8> {
    vec![v; usize::from(v % 41)]
}

impl Kind for Strings {
    type K = PString;
    type V = PBytes;
    type Map = BTreeMap<String, Vec<u8>>;
    fn apply(m: &mut Self::Map, op: Op) {
        match op {
            Op::Insert { key, v } => {
                m.insert(skey(key), sval(v));
            }
            Op::Remove { key } => {
                m.remove(&skey(key));
            }
        }
    }
    fn empty() -> Self::Map {
        BTreeMap::new()
    }
    fn run_op(
        t: &mut PBTreeMap<PString, PBytes, ORDER>,
        heap: &PHeap,
        op: Op,
        n: usize,
    ) -> pmem_collections::Result<()> {
        match (op, options(n)) {
            (Op::Insert { key, v }, None) => t.insert(heap, &skey(key), &sval(v)).map(|_| ()),
            (Op::Insert { key, v }, Some(o)) => t
                .insert_with(heap, &skey(key), &sval(v), o, hint_for(n))
                .map(|_| ()),
            (Op::Remove { key }, None) => t.remove(heap, &skey(key)).map(|_| ()),
            (Op::Remove { key }, Some(o)) => {
                t.remove_with(heap, &skey(key), o, hint_for(n)).map(|_| ())
            }
        }
    }
    fn collect(t: &PBTreeMap<PString, PBytes, ORDER>, heap: &PHeap) -> Result<Self::Map, String> {
        t.iter(heap)
            .map_err(|e| e.to_string())?
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())
    }
}

/// Reopens the heap, checks the tree and the exact block set, and reads it out.
fn recover<C: Kind>(pool: Pool) -> Result<C::Map, String> {
    let heap = PHeap::open(pool).map_err(|e| format!("open: {e}"))?;
    let t: PBTreeMap<C::K, C::V, ORDER> = heap.root("t").map_err(|e| format!("root: {e}"))?;
    t.check(&heap).map_err(|e| format!("check: {e}"))?;
    let live = heap.live_blocks().map_err(|e| e.to_string())?;
    let blocks = t.blocks(&heap).map_err(|e| e.to_string())?;
    if live != blocks {
        return Err(format!(
            "allocator holds {live:x?}, the tree references {blocks:x?}"
        ));
    }
    C::collect(&t, &heap)
}

/// Formats the heap and fills the tree with `pre` (durable before any crash).
fn setup<C: Kind>(pool: Pool, pre: &[Op]) -> Result<(PHeap, PBTreeMap<C::K, C::V, ORDER>), String> {
    let heap = PHeap::create_with(
        pool,
        HeapOptions {
            geometry: geometry(),
            page_size: 64,
            mode: LogMode::Lazy,
        },
    )
    .map_err(|e| e.to_string())?;
    let mut t: PBTreeMap<C::K, C::V, ORDER> = heap.root("t").map_err(|e| e.to_string())?;
    for &op in pre {
        C::run_op(&mut t, &heap, op, 0).map_err(|e| e.to_string())?;
    }
    heap.checkpoint().map_err(|e| e.to_string())?;
    Ok((heap, t))
}

fn model<C: Kind>(pre: &[Op], ops: &[Op]) -> C::Map {
    let mut m = C::empty();
    for &op in pre.iter().chain(ops) {
        C::apply(&mut m, op);
    }
    m
}

fn run<C: Kind>(pre: &[Op], ops: &[Op], model_kind: Model) -> Result<(), String> {
    CrashTest::new(pool_options("btree"))
        .model(model_kind)
        .run(
            |_| Ok(()),
            |pool, sim| {
                let (heap, mut t) = setup::<C>(pool, pre)?;
                sim.mark_durable();
                for (n, &op) in ops.iter().enumerate() {
                    sim.op(n as u32, || C::run_op(&mut t, &heap, op, n))
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            },
            recover::<C>,
            |got: &C::Map, crash: &CrashInfo| {
                crash.expect_model(got, |n| model::<C>(pre, &ops[..n as usize]))
            },
        )
        .map(|_| ())
        .map_err(|f| f.to_string())
}

fn ins(key: u8, v: u8) -> Op {
    Op::Insert { key, v }
}

fn rm(key: u8) -> Op {
    Op::Remove { key }
}

/// Keys 0, 2, .., 22: a tree of height 3 at order 3.
fn prefill() -> Vec<Op> {
    (0..12).map(|k| ins(k * 2, k + 1)).collect()
}

/// A fixed sequence through every structural change: leaf and inner splits (a new
/// root), a replacement, borrows from both sides, merges of leaves and of inner
/// nodes, and the root shrinking.
fn scripted() -> Vec<Op> {
    vec![
        ins(1, 50),
        ins(3, 51),
        ins(5, 52),
        ins(2, 99),
        rm(0),
        rm(22),
        rm(20),
        rm(1),
        rm(2),
        rm(3),
        rm(4),
        rm(18),
        rm(16),
        rm(14),
    ]
}

#[test]
fn u64_tree_survives_every_crash_in_both_models() {
    for m in [Model::Line, Model::Word] {
        run::<Words>(&prefill(), &scripted(), m).unwrap_or_else(|e| panic!("{m:?}: {e}"));
    }
}

#[test]
fn byte_string_tree_survives_every_crash_in_both_models() {
    for m in [Model::Line, Model::Word] {
        run::<Strings>(&prefill(), &scripted(), m).unwrap_or_else(|e| panic!("{m:?}: {e}"));
    }
}

/// The scripted sequence does make every structural change: counted by the
/// number of nodes and the height as the operations run (no crash).
#[test]
fn the_scripted_sequence_splits_merges_and_shrinks() {
    let pool = Pool::anonymous(&pool_options("btree")).expect("pool");
    let (heap, mut t) = setup::<Words>(pool, &prefill()).expect("setup");
    let nodes = |t: &PBTreeMap<u64, u64, ORDER>| t.blocks(&heap).expect("blocks").len();
    let mut counts = vec![nodes(&t)];
    for (n, op) in scripted().into_iter().enumerate() {
        Words::run_op(&mut t, &heap, op, n).expect("op");
        t.check(&heap).expect("check");
        counts.push(nodes(&t));
    }
    let grew = counts.windows(2).any(|w| w[1] > w[0]);
    let shrank = counts.windows(2).filter(|w| w[1] < w[0]).count();
    assert!(grew && shrank >= 3, "node counts {counts:?}");
    assert!(counts.last() < counts.first(), "node counts {counts:?}");
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..24, any::<u8>()).prop_map(|(key, v)| ins(key, v)),
        2 => (0u8..24).prop_map(rm),
    ]
}

fn deep() -> bool {
    std::env::var_os("PMKIT_DEEP").is_some()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if deep() { 64 } else { 4 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_u64_sequences_survive_every_crash(ops in proptest::collection::vec(op(), 1..10)) {
        run::<Words>(&prefill(), &ops, Model::Line).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn random_byte_string_sequences_survive_every_crash(ops in proptest::collection::vec(op(), 1..8)) {
        run::<Strings>(&prefill(), &ops, Model::Word).map_err(TestCaseError::fail)?;
    }
}

/// The suite catches an operation that is not one transaction: a "move" done as a
/// removal and an insertion in two transactions loses the key at a crash between
/// them.
#[test]
fn an_operation_split_in_two_transactions_is_caught() {
    let pre = prefill();
    let err = CrashTest::new(pool_options("btree-split"))
        .run(
            |_| Ok(()),
            |pool, sim| {
                let (heap, mut t) = setup::<Words>(pool, &pre)?;
                sim.mark_durable();
                sim.op(0, || -> Result<(), String> {
                    // Move key 4 to key 5: two transactions, not one.
                    let v = t.remove(&heap, &4).map_err(|e| e.to_string())?;
                    t.insert(&heap, &5, &v.unwrap_or(0))
                        .map_err(|e| e.to_string())?;
                    Ok(())
                })
            },
            recover::<Words>,
            |got: &BTreeMap<u64, u64>, crash: &CrashInfo| {
                crash.expect_model(got, |n| {
                    let mut m = model::<Words>(&pre, &[]);
                    if n > 0 {
                        let v = m.remove(&4).unwrap_or(0);
                        m.insert(5, v);
                    }
                    m
                })
            },
        )
        .expect_err("a crash between the two transactions loses the key");
    assert!(err.message.contains("expected"), "{err}");
}
