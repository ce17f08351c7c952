//! pmem-core's transactions on the NVWA heap (`TxHeap<Nvwa>`): a small map whose
//! every operation is one transaction (undo, redo or lazy) that allocates, frees
//! (copy-on-write replacements too) or aborts, crashed everywhere the durable set
//! can change under the line and the word model. After each crash, reopening (the
//! heap's log replay, then the transactions' recovery, which marks blocks through
//! nvwa's `tx_mark`) must leave the map of the completed operations (the one in
//! flight whole or not at all), and nvwa must hold exactly the map's blocks: no
//! leak, no slot pointing to a free block.

use std::collections::BTreeMap;
use std::sync::Arc;

use nvwa::{Nvwa, NvwaOptions};
use pmem_core::sim::{CrashInfo, CrashTest, Model, SimDomain};
use pmem_core::tx::{LogMode, Tx, TxError, TxGeometry, TxHeap, TxOptions};
use pmem_core::{PPtr, Pool, PoolOptions, RootType};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

const SLOTS: usize = 4;
/// Bytes of a value block (a small class) and of a large one.
const SMALL: u64 = 48;
const LARGE: u64 = 5000;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct MapRoot {
    slots: [u64; SLOTS],
}

impl RootType for MapRoot {
    const ROOT_ID: &'static str = "pmkit-tests/nvwa-tx-map";
    const LAYOUT_VERSION: u32 = 1;
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Insert `slot` with value `v`, or replace its block copy-on-write.
    Put { slot: usize, v: u64 },
    /// Remove `slot`, freeing its block.
    Del { slot: usize },
    /// Allocate and write, then abort: no effect.
    Abort { slot: usize },
}

fn size_of_slot(slot: usize) -> u64 {
    if slot == SLOTS - 1 {
        LARGE
    } else {
        SMALL
    }
}

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

fn geometry() -> TxGeometry {
    TxGeometry {
        lanes: 2,
        word_records: 16,
        object_records: 8,
        object_bytes: 512,
        alloc_records: 4,
        lazy_ring_bytes: 16 * 1024,
    }
}

fn options() -> NvwaOptions {
    NvwaOptions {
        log_words: Some(64),
        arenas: 1,
        ..NvwaOptions::default()
    }
}

fn create(pool: Pool) -> Result<TxHeap<Nvwa>, String> {
    TxHeap::create_with(pool, &geometry(), |pool: Arc<Pool>, region| {
        // SAFETY: create_with gives the allocator its region alone.
        unsafe { Nvwa::format(pool, region, &options()) }
    })
    .map_err(e)
}

fn body(tx: &mut Tx<'_>, root: u64, op: Op) -> Result<(), TxError> {
    let slot_at = |s: usize| PPtr::<u64>::from_offset(root + 8 * s as u64);
    match op {
        Op::Put { slot, v } => {
            let cur = tx.read(slot_at(slot))?;
            let b = tx.alloc(size_of_slot(slot))?;
            tx.write(PPtr::<u64>::from_offset(b.offset()), &v)?;
            if cur != 0 {
                tx.free(PPtr::from_offset(cur), size_of_slot(slot))?;
            }
            tx.write(slot_at(slot), &b.offset())
        }
        Op::Del { slot } => {
            let cur = tx.read(slot_at(slot))?;
            if cur != 0 {
                tx.free(PPtr::from_offset(cur), size_of_slot(slot))?;
                tx.write(slot_at(slot), &0u64)?;
            }
            Ok(())
        }
        Op::Abort { slot } => {
            let b = tx.alloc(size_of_slot(slot))?;
            tx.write(slot_at(slot), &b.offset())?;
            Err(TxError::Aborted("on purpose".into()))
        }
    }
}

fn apply(heap: &mut TxHeap<Nvwa>, op: Op, mode: LogMode) -> Result<(), String> {
    let root = heap.pool().root::<MapRoot>().map_err(e)?.offset();
    let r = heap.transaction_with(TxOptions::new().mode(mode), |tx| body(tx, root, op));
    match (op, r) {
        (Op::Abort { .. }, Err(TxError::Aborted(_))) => Ok(()),
        (Op::Abort { .. }, other) => Err(format!("abort returned {other:?}")),
        (_, r) => r.map_err(e),
    }
}

fn model(ops: &[Op]) -> BTreeMap<usize, u64> {
    let mut m = BTreeMap::new();
    for op in ops {
        match *op {
            Op::Put { slot, v } => {
                m.insert(slot, v);
            }
            Op::Del { slot } => {
                m.remove(&slot);
            }
            Op::Abort { .. } => {}
        }
    }
    m
}

fn recover(pool: Pool) -> Result<BTreeMap<usize, u64>, String> {
    let (heap, _) = TxHeap::open_with(pool, |pool: Arc<Pool>, start| {
        // SAFETY: open_with gives the allocator its region alone.
        unsafe { Nvwa::open(pool, start, &options()) }
    })
    .map_err(|err| format!("open: {err}"))?;
    let root: MapRoot = heap
        .pool()
        .read(heap.pool().root::<MapRoot>().map_err(e)?)
        .map_err(e)?;
    let mut map = BTreeMap::new();
    let mut blocks = Vec::new();
    for (s, &b) in root.slots.iter().enumerate() {
        if b != 0 {
            let v: u64 = heap.pool().read(PPtr::from_offset(b)).map_err(e)?;
            map.insert(s, v);
            blocks.push(b);
        }
    }
    blocks.sort_unstable();
    let live = heap.live_blocks().map_err(e)?;
    if live != blocks {
        return Err(format!(
            "nvwa holds {live:x?}, the map references {blocks:x?}"
        ));
    }
    Ok(map)
}

fn workload(ops: &[Op], mode: LogMode) -> impl FnOnce(Pool, &SimDomain) -> Result<(), String> + '_ {
    move |pool, sim| {
        let mut heap = create(pool)?;
        sim.mark_durable();
        for (n, &op) in ops.iter().enumerate() {
            sim.op(n as u32, || apply(&mut heap, op, mode))?;
        }
        Ok(())
    }
}

const SCRIPT: [Op; 9] = [
    Op::Put { slot: 0, v: 10 },
    Op::Put { slot: 3, v: 30 },
    Op::Abort { slot: 1 },
    Op::Put { slot: 0, v: 11 },
    Op::Del { slot: 3 },
    Op::Put { slot: 1, v: 20 },
    Op::Abort { slot: 3 },
    Op::Put { slot: 3, v: 31 },
    Op::Del { slot: 0 },
];

#[test]
fn transactions_on_nvwa_survive_every_crash() {
    for mode in [LogMode::Undo, LogMode::Redo, LogMode::Lazy] {
        for m in [Model::Line, Model::Word] {
            CrashTest::new(PoolOptions::new("nvwa-tx", 512 * 1024).root::<MapRoot>())
                .model(m)
                .run(
                    |_| Ok(()),
                    workload(&SCRIPT, mode),
                    recover,
                    |got: &BTreeMap<usize, u64>, crash: &CrashInfo| {
                        crash.expect_model(got, |n| model(&SCRIPT[..n as usize]))
                    },
                )
                .unwrap_or_else(|f| panic!("{mode:?} {m:?}: {f}"));
        }
    }
}
