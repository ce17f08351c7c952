//! Crash suite of `PHashMap`: sequences of inserts, replacements, removals and
//! clears, each one operation, crashed wherever the durable set can change (the
//! harness also crashes recovery itself and recovers again). After each crash,
//! reopening the heap must give the model (a `BTreeMap`) after the completed
//! operations, or with the one in flight applied whole; the table's invariants
//! must hold (every entry reachable by a probe, the count right); and the
//! allocator must hold exactly the map's blocks (nothing leaked, nothing reachable
//! free). The tables start at 8 slots, so growth (x2 past 7 entries) and
//! backward shifts (keys chosen to share a home slot) happen inside the crashed
//! operations. Heaps commit lazily (the default), by undo or by redo.
//!
//! This suite replaces pmem-core's `tx_pht_crash.rs` (the reference hash table it
//! checked is now this map): its word/object/hybrid hints and `log_fresh` engine
//! run here through the benchmark variants `insert_with` / `remove_with`.
//!
//! `PMKIT_DEEP=1` runs many more random sequences.

use std::collections::BTreeMap;
use std::fmt::Debug;

use pmem_collections::hash::hash_bytes;
use pmem_collections::{Container, Element, Error, HeapOptions, PBytes, PHashMap, PHeap};
use pmem_core::sim::{CrashInfo, CrashTest, Model};
use pmem_core::tx::{LogMode, Logging, TxGeometry, TxOptions};
use pmem_core::Pool;
use proptest::prelude::*;

/// A small log, so that the images stay small (a removal's shift of a whole
/// cluster, a clear of a few byte strings and a growth still fit).
fn geometry() -> TxGeometry {
    TxGeometry {
        lanes: 2,
        word_records: 128,
        object_records: 16,
        object_bytes: 4096,
        alloc_records: 24,
        lazy_ring_bytes: 16 * 1024,
    }
}

const POOL: u64 = 256 * 1024;

/// One operation on a map; keys and values are small numbers made into the
/// map's types by [`Kv`].
#[derive(Clone, Copy, Debug)]
enum Op {
    Insert { key: u64, v: u8, big: bool },
    Remove { key: u64 },
    Clear,
}

/// How a test's numbers become keys and values of the map's types.
trait Kv: Element {
    fn arg(n: u64, big: bool) -> Box<Self::Arg>;
}

impl Kv for u64 {
    fn arg(n: u64, _big: bool) -> Box<u64> {
        Box::new(n)
    }
}

impl Kv for PBytes {
    fn arg(n: u64, big: bool) -> Box<[u8]> {
        if big {
            vec![n as u8; 300].into_boxed_slice()
        } else {
            format!("bytes-{n}").into_bytes().into_boxed_slice()
        }
    }
}

type Map<K, V> = BTreeMap<<K as Element>::Out, <V as Element>::Out>;

fn model<K: Kv, V: Kv>(ops: &[Op], prefill: &[Op]) -> Vec<(u64, u8, bool)>
where
    K::Out: Ord,
{
    // The model in numbers: key -> (value, big).
    let mut m: BTreeMap<u64, (u8, bool)> = BTreeMap::new();
    for op in prefill.iter().chain(ops) {
        match *op {
            Op::Insert { key, v, big } => {
                m.insert(key, (v, big));
            }
            Op::Remove { key } => {
                m.remove(&key);
            }
            Op::Clear => m.clear(),
        }
    }
    m.into_iter().map(|(k, (v, b))| (k, v, b)).collect()
}

/// What recovery finds: the entries, as the map's own output types.
fn expected<K: Kv, V: Kv>(ops: &[Op], prefill: &[Op]) -> Map<K, V>
where
    K::Out: Ord,
{
    let heap = scratch_heap();
    let mut m: PHashMap<K, V> = heap.root("model").expect("model map");
    for (k, v, big) in model::<K, V>(ops, prefill) {
        m.insert(&heap, &K::arg(k, false), &V::arg(u64::from(v), big))
            .expect("model insert");
    }
    m.iter(&heap).map(|e| e.expect("entry")).collect()
}

/// A DRAM heap that turns the numeric model into the map's output types.
fn scratch_heap() -> PHeap {
    let pool = Pool::anonymous(&PHeap::pool_options("model", 1 << 20)).expect("pool");
    PHeap::create(pool).expect("heap")
}

fn opts(mode: LogMode) -> HeapOptions {
    HeapOptions {
        geometry: geometry(),
        page_size: 64,
        mode,
    }
}

/// Reopens the heap and reads the map, checking its invariants and that the
/// allocator holds exactly its blocks.
fn recover<K: Kv, V: Kv>(pool: Pool, mode: LogMode) -> Result<Map<K, V>, String>
where
    K::Out: Ord,
{
    let heap = PHeap::open_with(pool, mode).map_err(|e| format!("open: {e}"))?;
    let m: PHashMap<K, V> = heap.root("m").map_err(|e| format!("root: {e}"))?;
    let n = m.check(&heap).map_err(|e| format!("check: {e}"))?;
    let got: Map<K, V> = m
        .iter(&heap)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("iter: {e}"))?;
    if got.len() as u64 != n || m.len(&heap).map_err(|e| e.to_string())? != n {
        return Err(format!("{} entries iterated, {n} counted", got.len()));
    }
    let live = heap.live_blocks().map_err(|e| e.to_string())?;
    let blocks = m.blocks(&heap).map_err(|e| e.to_string())?;
    if live != blocks {
        return Err(format!(
            "allocator holds {live:x?}, the map references {blocks:x?}"
        ));
    }
    Ok(got)
}

/// Applies one operation (through the hidden per-operation variants when
/// `engine` names hints and options).
fn apply<K: Kv, V: Kv>(
    heap: &PHeap,
    m: &mut PHashMap<K, V>,
    op: Op,
    engine: Option<(TxOptions, Logging)>,
) -> Result<(), Error> {
    match (op, engine) {
        (Op::Insert { key, v, big }, None) => m
            .insert(heap, &K::arg(key, false), &V::arg(u64::from(v), big))
            .map(|_| ()),
        (Op::Insert { key, v, big }, Some((o, l))) => m
            .insert_with(heap, &K::arg(key, false), &V::arg(u64::from(v), big), o, l)
            .map(|_| ()),
        (Op::Remove { key }, None) => m.remove(heap, &K::arg(key, false)).map(|_| ()),
        (Op::Remove { key }, Some((o, l))) => {
            m.remove_with(heap, &K::arg(key, false), o, l).map(|_| ())
        }
        (Op::Clear, _) => m.clear(heap),
    }
}

/// Runs `prefill` (not crashed), then `ops`, each crashed everywhere.
fn run<K: Kv, V: Kv>(
    prefill: &[Op],
    ops: &[Op],
    crash_model: Model,
    mode: LogMode,
    engines: bool,
) -> Result<(), String>
where
    K::Out: Ord + Debug + Clone,
    V::Out: Debug + Clone + PartialEq,
{
    let models: Vec<Map<K, V>> = (0..=ops.len())
        .map(|n| expected::<K, V>(&ops[..n], prefill))
        .collect();
    CrashTest::new(PHeap::pool_options("hashmap", POOL))
        .model(crash_model)
        .run(
            |_| Ok(()),
            |pool, sim| {
                let heap = PHeap::create_with(pool, opts(mode)).map_err(|e| e.to_string())?;
                let mut m: PHashMap<K, V> = heap.root("m").map_err(|e| e.to_string())?;
                for &op in prefill {
                    apply(&heap, &mut m, op, None).map_err(|e| e.to_string())?;
                }
                heap.checkpoint().map_err(|e| e.to_string())?;
                sim.mark_durable();
                for (n, &op) in ops.iter().enumerate() {
                    // The benchmark engines by turns: word, object and hybrid
                    // hints; undo, redo and lazy; every fourth logging its fresh
                    // blocks too (the NVWA paper's engine).
                    let engine = engines.then(|| {
                        let logging = [Logging::Word, Logging::Object, Logging::Hybrid][n % 3];
                        let mode = [LogMode::Undo, LogMode::Redo, LogMode::Lazy][n % 4 % 3];
                        (TxOptions::from(mode).log_fresh(n % 4 == 3), logging)
                    });
                    sim.op(n as u32, || apply(&heap, &mut m, op, engine))
                        .map_err(|e| format!("op {n} {op:?}: {e}"))?;
                }
                Ok(())
            },
            |pool| recover::<K, V>(pool, mode),
            |got: &Map<K, V>, crash: &CrashInfo| {
                crash.expect_model(got, |n| models[n as usize].clone())
            },
        )
        .map(|_| ())
        .map_err(|f| f.to_string())
}

/// `n` u64 keys whose home slot in an 8-slot table is the same, so they form one
/// cluster and removals shift it back.
fn colliding(n: usize) -> Vec<u64> {
    let home = |k: u64| hash_bytes(&k.to_le_bytes()) & 7;
    (0u64..).filter(|&k| home(k) == home(0)).take(n).collect()
}

fn ins(key: u64, v: u8) -> Op {
    Op::Insert { key, v, big: false }
}

const MODES: [LogMode; 3] = [LogMode::Lazy, LogMode::Undo, LogMode::Redo];

#[test]
fn u64_inserts_replacements_and_shifting_removals_survive_every_crash() {
    let c = colliding(4);
    // Four keys in one cluster and a stranger; then a replacement, removals
    // from the cluster's front (each shifts the rest back), a miss.
    let prefill = [ins(c[0], 1), ins(c[1], 2), ins(c[2], 3), ins(100, 4)];
    let ops = [
        ins(c[3], 5),
        ins(c[1], 6),
        Op::Remove { key: c[0] },
        Op::Remove { key: c[2] },
        Op::Remove { key: 999 },
    ];
    for mode in MODES {
        for m in [Model::Line, Model::Word] {
            run::<u64, u64>(&prefill, &ops, m, mode, false)
                .unwrap_or_else(|e| panic!("{mode:?} {m:?}: {e}"));
        }
    }
}

/// eADR: the map's pool is in the `CpuCache` domain, so every flush is elided; every
/// logging mode must recover every crash image (prefixes of the store order),
/// through a growth and with byte strings.
#[test]
fn every_mode_survives_eadr_with_flushes_elided() {
    let c = colliding(4);
    let prefill: Vec<Op> = (0..7).map(|k| ins(k, k as u8)).collect();
    let ops = [ins(7, 7), ins(c[0], 5), ins(3, 33), Op::Remove { key: 0 }];
    for mode in MODES {
        run::<u64, u64>(&prefill, &ops, Model::Eadr, mode, false)
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    }
    let big = [
        Op::Insert {
            key: 3,
            v: 3,
            big: true,
        },
        Op::Remove { key: 3 },
    ];
    run::<PBytes, PBytes>(&[], &big, Model::Eadr, LogMode::Lazy, false)
        .unwrap_or_else(|e| panic!("bytes: {e}"));
}

#[test]
fn growth_survives_every_crash() {
    // Seven entries fill an 8-slot table to its limit: the next new key grows it
    // to 16 (its own transaction, then the insert's).
    let prefill: Vec<Op> = (0..7).map(|k| ins(k, k as u8)).collect();
    let ops = [ins(7, 7), ins(3, 33), Op::Remove { key: 0 }];
    for mode in MODES {
        for m in [Model::Line, Model::Word] {
            run::<u64, u64>(&prefill, &ops, m, mode, false)
                .unwrap_or_else(|e| panic!("{mode:?} {m:?}: {e}"));
        }
    }
}

#[test]
fn byte_strings_survive_every_crash_and_never_leak() {
    let prefill = [ins(1, 1), ins(2, 2)];
    let ops = [
        Op::Insert {
            key: 3,
            v: 3,
            big: true,
        },
        Op::Insert {
            key: 1,
            v: 9,
            big: true,
        },
        Op::Remove { key: 2 },
        Op::Clear,
    ];
    for mode in MODES {
        run::<PBytes, PBytes>(&prefill, &ops, Model::Line, mode, false)
            .unwrap_or_else(|e| panic!("{mode:?} line: {e}"));
    }
    run::<PBytes, PBytes>(&prefill, &ops, Model::Word, LogMode::Lazy, false)
        .unwrap_or_else(|e| panic!("lazy word: {e}"));
}

/// The intent of pmem-core's former `tx_pht_crash.rs`: byte-string keys and
/// values (24 B and 300 B) under word, object and hybrid hints, undo, redo and
/// lazy, with and without logging fresh blocks.
#[test]
fn every_logging_engine_is_crash_atomic() {
    let big = |key, v| Op::Insert { key, v, big: true };
    let ops = [
        ins(1, 10),
        big(2, 20),
        big(1, 11),
        ins(3, 30),
        Op::Remove { key: 2 },
        Op::Remove { key: 9 },
    ];
    for m in [Model::Line, Model::Word] {
        run::<PBytes, PBytes>(&[], &ops, m, LogMode::Lazy, true)
            .unwrap_or_else(|e| panic!("{m:?}: {e}"));
    }
}

fn op() -> impl Strategy<Value = Op> {
    // Few keys, so replacements and removals hit; up to 10, so growth happens.
    prop_oneof![
        6 => (0u64..10, any::<u8>(), any::<bool>()).prop_map(|(key, v, big)| Op::Insert { key, v, big }),
        3 => (0u64..10).prop_map(|key| Op::Remove { key }),
        1 => Just(Op::Clear),
    ]
}

fn cases() -> u32 {
    if std::env::var_os("PMKIT_DEEP").is_some() {
        64
    } else {
        4
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn random_u64_sequences_survive_every_crash(
        prefill in proptest::collection::vec(op(), 0..8),
        ops in proptest::collection::vec(op(), 1..6),
        mode in 0usize..3,
    ) {
        run::<u64, u64>(&prefill, &ops, Model::Line, MODES[mode], false)
            .map_err(TestCaseError::fail)?;
    }

    #[test]
    fn random_byte_string_sequences_survive_every_crash(
        prefill in proptest::collection::vec(op(), 0..8),
        ops in proptest::collection::vec(op(), 1..5),
        mode in 0usize..3,
    ) {
        run::<PBytes, PBytes>(&prefill, &ops, Model::Line, MODES[mode], false)
            .map_err(TestCaseError::fail)?;
    }
}

/// The suite catches an operation that is not one transaction: a rename done as a
/// removal and an insert in two transactions loses the key at a crash between them.
#[test]
fn an_operation_split_in_two_transactions_is_caught() {
    let both = |k: u64| BTreeMap::from([(k, 1u64)]);
    let err = CrashTest::new(PHeap::pool_options("hashmap-split", POOL))
        .run(
            |_| Ok(()),
            |pool, sim| {
                let heap =
                    PHeap::create_with(pool, opts(LogMode::Lazy)).map_err(|e| e.to_string())?;
                let mut m: PHashMap<u64, u64> = heap.root("m").map_err(|e| e.to_string())?;
                m.insert(&heap, &1, &1).map_err(|e| e.to_string())?;
                heap.checkpoint().map_err(|e| e.to_string())?;
                sim.mark_durable();
                sim.op(0, || -> Result<(), String> {
                    // Rename key 1 to key 2: two transactions, not one.
                    m.remove(&heap, &1).map_err(|e| e.to_string())?;
                    m.insert(&heap, &2, &1).map_err(|e| e.to_string())?;
                    Ok(())
                })
            },
            |pool| recover::<u64, u64>(pool, LogMode::Lazy),
            |got: &BTreeMap<u64, u64>, crash: &CrashInfo| {
                crash.expect_model(got, |n| both(if n == 0 { 1 } else { 2 }))
            },
        )
        .expect_err("a crash between the two transactions loses the key");
    assert!(err.message.contains("expected"), "{err}");
}

/// A clear of nine byte-string entries (18 blocks) empties the map in one
/// transaction and frees the blocks in two more (eight entries each at most): a
/// crash anywhere leaves the map empty or untouched and every block accounted
/// for (reopening finishes the freeing).
#[test]
fn a_clear_that_drains_in_several_transactions_survives_every_crash() {
    let prefill: Vec<Op> = (0..9).map(|k| ins(k, k as u8)).collect();
    run::<PBytes, PBytes>(&prefill, &[Op::Clear], Model::Line, LogMode::Lazy, false)
        .unwrap_or_else(|e| panic!("{e}"));
}
