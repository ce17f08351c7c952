//! Crash suite of the reference hash table (`pmem_core::tx::reference::pht`): random
//! sequences of inserts, replacements and removals, each one transaction, crashed
//! wherever the durable set can change. After each crash, reopening the heap and
//! checking the table must give the model after the completed operations (or with
//! the one in flight applied whole), and the allocator must hold exactly the table's
//! blocks: nothing leaked, nothing referenced that is free.

use std::collections::BTreeMap;

use pmem_core::sim::{CrashInfo, CrashTest, Model};
use pmem_core::tx::reference::pht::Pht;
use pmem_core::tx::reference::Logging;
use pmem_core::tx::{LogMode, TxGeometry, TxHeap, TxOptions};
use pmem_core::{PPtr, Pool, PoolOptions, RootType};
use proptest::prelude::*;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Root {
    table: u64,
}

impl RootType for Root {
    const ROOT_ID: &'static str = "pmkit-tests/pht";
    const LAYOUT_VERSION: u32 = 1;
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Insert { key: u8, v: u8, big: bool },
    Remove { key: u8 },
}

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(k: u8) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}

fn value(v: u8, big: bool) -> Vec<u8> {
    vec![v; if big { 300 } else { 24 }]
}

fn model(ops: &[Op]) -> Map {
    let mut m = Map::new();
    for op in ops {
        match *op {
            Op::Insert { key: k, v, big } => {
                m.insert(key(k), value(v, big));
            }
            Op::Remove { key: k } => {
                m.remove(&key(k));
            }
        }
    }
    m
}

fn geometry() -> TxGeometry {
    TxGeometry {
        lanes: 2,
        // Room for a big value logged word by word (under `log_fresh`).
        word_records: 64,
        object_records: 8,
        object_bytes: 1024,
        alloc_records: 8,
        lazy_ring_bytes: 4096,
    }
}

fn recover(pool: Pool) -> Result<Map, String> {
    let (heap, _) = TxHeap::open(pool).map_err(|e| format!("open: {e}"))?;
    let root = heap.pool().root::<Root>().map_err(|e| e.to_string())?;
    let at = heap.pool().read(root).map_err(|e| e.to_string())?.table;
    let t = Pht::at(PPtr::from_offset(at));
    let pairs = t.check(&heap).map_err(|e| e.to_string())?;
    let live = heap.live_blocks().map_err(|e| e.to_string())?;
    let blocks = t.blocks(&heap).map_err(|e| e.to_string())?;
    if live != blocks {
        return Err(format!(
            "allocator holds {live:x?}, the table references {blocks:x?}"
        ));
    }
    Ok(pairs.into_iter().collect())
}

/// Formats the heap, creates a table with two buckets (so chains form) and records
/// it in the root.
fn setup(pool: Pool) -> Result<(TxHeap, Pht), String> {
    let mut heap = TxHeap::create(pool, &geometry(), 64).map_err(|e| e.to_string())?;
    let t = Pht::create(&mut heap, 2).map_err(|e| e.to_string())?;
    let root = heap.pool().root::<Root>().map_err(|e| e.to_string())?;
    heap.transaction(|tx| tx.write(root.cast::<u64>(), &t.header().offset()))
        .map_err(|e| e.to_string())?;
    Ok((heap, t))
}

fn run(ops: &[Op], model_kind: Model) -> Result<(), String> {
    CrashTest::new(PoolOptions::new("pht", 512 * 1024).root::<Root>())
        .model(model_kind)
        .run(
            |_| Ok(()),
            |pool, sim| {
                let (mut heap, t) = setup(pool)?;
                sim.mark_durable();
                for (n, &op) in ops.iter().enumerate() {
                    let logging = [Logging::Word, Logging::Object, Logging::Hybrid][n % 3];
                    // Undo, redo and lazy by turns (their period differs from the
                    // logging's, so every pairing occurs).
                    let mode = [LogMode::Undo, LogMode::Redo, LogMode::Lazy][n % 4 % 3];
                    // Every fourth operation logs its fresh node and value too.
                    let mode = TxOptions::from(mode).log_fresh(n % 4 == 3);
                    sim.op(n as u32, || match op {
                        Op::Insert { key: k, v, big } => t
                            .insert(&mut heap, &key(k), &value(v, big), logging, mode)
                            .map(|_| ()),
                        Op::Remove { key: k } => {
                            t.remove(&mut heap, &key(k), logging, mode).map(|_| ())
                        }
                    })
                    .map_err(|e| e.to_string())?;
                }
                Ok(())
            },
            recover,
            |got: &Map, crash: &CrashInfo| crash.expect_model(got, |n| model(&ops[..n as usize])),
        )
        .map(|_| ())
        .map_err(|f| f.to_string())
}

#[test]
fn inserts_replacements_and_removals_survive_every_crash() {
    let ops = [
        Op::Insert {
            key: 1,
            v: 10,
            big: false,
        },
        Op::Insert {
            key: 2,
            v: 20,
            big: true,
        },
        Op::Insert {
            key: 1,
            v: 11,
            big: true,
        },
        Op::Insert {
            key: 3,
            v: 30,
            big: false,
        },
        Op::Remove { key: 2 },
        Op::Remove { key: 9 },
    ];
    for m in [Model::Line, Model::Word] {
        run(&ops, m).unwrap_or_else(|e| panic!("{m:?}: {e}"));
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..5, any::<u8>(), any::<bool>()).prop_map(|(key, v, big)| Op::Insert { key, v, big }),
        2 => (0u8..5).prop_map(|key| Op::Remove { key }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_survive_every_crash(ops in proptest::collection::vec(op(), 1..6)) {
        run(&ops, Model::Line).map_err(TestCaseError::fail)?;
    }
}

/// The suite catches an operation that is not one transaction: a "move" done as a
/// removal and an insert in two transactions loses the key at a crash between them.
#[test]
fn an_operation_split_in_two_transactions_is_caught() {
    let err = CrashTest::new(PoolOptions::new("pht-split", 512 * 1024).root::<Root>())
        .run(
            |_| Ok(()),
            |pool, sim| {
                let (mut heap, t) = setup(pool)?;
                t.insert(
                    &mut heap,
                    &key(1),
                    &value(1, false),
                    Logging::Hybrid,
                    LogMode::Undo,
                )
                .map_err(|e| e.to_string())?;
                sim.mark_durable();
                sim.op(0, || -> Result<(), String> {
                    // Rename key 1 to key 2: two transactions, not one.
                    t.remove(&mut heap, &key(1), Logging::Hybrid, LogMode::Undo)
                        .map_err(|e| e.to_string())?;
                    t.insert(
                        &mut heap,
                        &key(2),
                        &value(1, false),
                        Logging::Hybrid,
                        LogMode::Undo,
                    )
                    .map_err(|e| e.to_string())?;
                    Ok(())
                })
            },
            recover,
            |got: &Map, crash: &CrashInfo| {
                crash.expect_model(got, |n| {
                    let k = if n == 0 { 1 } else { 2 };
                    Map::from([(key(k), value(1, false))])
                })
            },
        )
        .expect_err("a crash between the two transactions loses the key");
    assert!(err.message.contains("expected"), "{err}");
}
