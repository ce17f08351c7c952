//! `Tx::cas_word` and `Pool::cas_word_shared` under the crash simulator: a
//! transaction's logged CAS of a word and a healer's unlogged CAS of the same word
//! (both orders), a CAS that loses (the word is not the transaction's), and a
//! rollback of a won CAS. After every crash, in the line and word models, the two
//! words of the root must be those of the completed operations, with the one in
//! flight applied whole or not at all: a CAS that reached the media without its
//! undo record, or a commit without the CAS durable, is caught.

use pmem_core::sim::{CrashTest, Model, SimDomain};
use pmem_core::tx::{TxError, TxGeometry, TxHeap};
use pmem_core::{PPtr, Pool, PoolOptions, RootType};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Root {
    /// Written by every transaction (plain logged write).
    version: u64,
    /// The word transactions and the healer CAS.
    word: u64,
}

impl RootType for Root {
    const ROOT_ID: &'static str = "pmkit-tests/tx-cas-word";
    const LAYOUT_VERSION: u32 = 1;
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// A transaction: version = v, CAS word from `from` to `to`; aborts if `abort`.
    Tx {
        v: u64,
        from: u64,
        to: u64,
        abort: bool,
    },
    /// The healer: CAS word from `from` to `to`, flushed and fenced, no log.
    Heal { from: u64, to: u64 },
}

const SCRIPT: [Op; 6] = [
    Op::Tx {
        v: 1,
        from: 0,
        to: 10,
        abort: false,
    },
    // The heal after the transaction's CAS: it wins.
    Op::Heal { from: 10, to: 20 },
    // A transaction's CAS that finds the healed value: it loses, the rest commits.
    Op::Tx {
        v: 2,
        from: 10,
        to: 30,
        abort: false,
    },
    // A won CAS rolled back: the healed value comes back.
    Op::Tx {
        v: 3,
        from: 20,
        to: 40,
        abort: true,
    },
    // The transaction's CAS first, then a heal that expected the old value loses.
    Op::Tx {
        v: 4,
        from: 20,
        to: 50,
        abort: false,
    },
    Op::Heal { from: 20, to: 60 },
];

fn model(ops: &[Op]) -> (u64, u64) {
    let (mut version, mut word) = (0, 0);
    for op in ops {
        match *op {
            Op::Tx { v, from, to, abort } if !abort => {
                version = v;
                if word == from {
                    word = to;
                }
            }
            Op::Tx { .. } => {}
            Op::Heal { from, to } => {
                if word == from {
                    word = to;
                }
            }
        }
    }
    (version, word)
}

fn root(pool: &Pool) -> Result<PPtr<Root>, String> {
    pool.root::<Root>().map_err(|e| e.to_string())
}

fn apply(heap: &TxHeap, op: Op) -> Result<(), String> {
    let r = root(heap.pool())?;
    let word = r.offset() + 8;
    match op {
        Op::Tx { v, from, to, abort } => {
            // SAFETY: one thread runs transactions; the healer runs between them.
            let res = unsafe {
                heap.transaction_shared(Default::default(), |tx| {
                    tx.write(PPtr::<u64>::from_offset(r.offset()), &v)?;
                    tx.cas_word(word, from, to)?;
                    if abort {
                        return Err(TxError::Aborted("on purpose".into()));
                    }
                    Ok(())
                })
            };
            match (res, abort) {
                (Ok(_), false) | (Err(TxError::Aborted(_)), true) => Ok(()),
                (r, _) => Err(format!("{op:?}: {:?}", r.map(|_| ()))),
            }
        }
        Op::Heal { from, to } => {
            let pool = heap.pool();
            // SAFETY: no reference to the word is live; no transaction runs.
            let won = unsafe { pool.cas_word_shared(word, from, to) }.map_err(|e| e.to_string())?;
            if won.is_ok() {
                pool.flush(word, 8).map_err(|e| e.to_string())?;
                pool.drain().map_err(|e| e.to_string())?;
            }
            Ok(())
        }
    }
}

fn recover(pool: Pool) -> Result<(u64, u64), String> {
    let (heap, _) = TxHeap::open(pool).map_err(|e| format!("open: {e}"))?;
    let r: Root = heap
        .pool()
        .read(root(heap.pool())?)
        .map_err(|e| e.to_string())?;
    Ok((r.version, r.word))
}

fn run(model_: Model) -> Result<(), String> {
    CrashTest::new(PoolOptions::new("cas", 256 * 1024).root::<Root>())
        .model(model_)
        .deny_correctness_lints(true)
        .run(
            |_| Ok(()),
            |pool: Pool, sim: &SimDomain| {
                let geometry = TxGeometry {
                    lanes: 2,
                    word_records: 16,
                    object_records: 8,
                    object_bytes: 512,
                    ..TxGeometry::default()
                };
                let heap = TxHeap::create(pool, &geometry, 64).map_err(|e| e.to_string())?;
                sim.mark_durable();
                for (n, &op) in SCRIPT.iter().enumerate() {
                    sim.op(n as u32, || apply(&heap, op))?;
                }
                Ok(())
            },
            recover,
            |got, crash| crash.expect_model(got, |n| model(&SCRIPT[..n as usize])),
        )
        .map(|_| ())
        .map_err(|f| f.to_string())
}

#[test]
fn a_transactions_cas_and_a_heal_survive_every_crash_in_the_line_model() {
    assert_eq!(model(&SCRIPT), (4, 50));
    run(Model::Line).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_transactions_cas_and_a_heal_survive_every_crash_in_the_word_model() {
    run(Model::Word).unwrap_or_else(|e| panic!("{e}"));
}
