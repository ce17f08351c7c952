//! Support for fuzzing (hidden from the documentation; not a stable API; needs the
//! `sim` feature): the body of the `tx_ops` cargo-fuzz target, which the ordinary
//! test `tests/fuzz_corpus.rs` also runs over the committed corpus.
//!
//! [`run_ops`] is structure-aware, as redb's fuzzer is: the input decodes (with
//! the `arbitrary` crate) into a [`Case`] — a log mode, a sequence of operations
//! (hash-map inserts and removals, vector pushes, pops and sets, transactions that
//! write 8-byte words or objects into a box under word or object records, aborted
//! transactions, checkpoints), a crash point and how the lines in flight there
//! persist, and optionally a failure injected at one flush or fence of the log in
//! one operation (what an `msync` error does to the log). The operations run on a
//! simulated pool and on a model ([`Model`]: a `BTreeMap`, a `Vec` and the box's
//! words), then:
//!
//! * the live heap must equal the model (an operation that returned an error had
//!   no effect);
//! * the crash image at the chosen point, with the chosen lines persisted, reopened
//!   (recovery), must equal the model after the operations completed before the
//!   crash, or after the one in flight too (all or nothing);
//! * an injected failure: the operation returns an error, no further operation
//!   runs, and recovery finds every earlier acknowledged operation and the failed
//!   one whole or not at all (an error after the commit point leaves it in doubt);
//! * after recovery the hash map's invariants hold, and the allocator holds exactly
//!   the containers' blocks (no leak, nothing reachable free).

use std::collections::BTreeMap;

use arbitrary::{Result as ArbResult, Unstructured};
use pmem_core::sim::{CrashPoints, CrashState, CrashTest, Model as CrashModel};
use pmem_core::tx::mutation::{Site, SITES};
use pmem_core::tx::{Hint, LogMode, TxGeometry, TxOptions};
use pmem_core::Pool;

use crate::roots::sealed::Structure;
use crate::tag::TAG_BYTES;
use crate::{Container, HeapOptions, PBox, PHashMap, PHeap, PVec};

/// Words of the box the raw transactions write.
pub const BOX_WORDS: usize = 16;
/// Most operations of one case (keeps a run short).
pub const MAX_OPS: usize = 12;
/// Keys of the hash map (small, so removals hit).
const KEYS: u64 = 12;
const POOL_BYTES: u64 = 128 * 1024;

/// One operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `PHashMap::insert`.
    MapInsert {
        /// The key (below 12).
        key: u64,
        /// The value.
        value: u64,
    },
    /// `PHashMap::remove`.
    MapRemove {
        /// The key.
        key: u64,
    },
    /// `PVec::push`.
    VecPush {
        /// The value.
        value: u64,
    },
    /// `PVec::pop`.
    VecPop,
    /// `PVec::set` (an error if `index` is past the end).
    VecSet {
        /// The index.
        index: u64,
        /// The value.
        value: u64,
    },
    /// One transaction writing words of the box, each with its own write call.
    Words {
        /// Undo, redo or lazy.
        mode: LogMode,
        /// Word or object records.
        hint: Hint,
        /// `(word index, value)`, in order.
        writes: Vec<(usize, u64)>,
    },
    /// One transaction writing a run of the box's words as one object.
    Object {
        /// Undo, redo or lazy.
        mode: LogMode,
        /// The first word.
        at: usize,
        /// The words.
        words: Vec<u64>,
    },
    /// A transaction that writes a word of the box and allocates and writes a
    /// block, then aborts: no effect.
    Abort {
        /// Undo, redo or lazy.
        mode: LogMode,
        /// A word index of the box.
        at: usize,
        /// What it writes before aborting.
        value: u64,
    },
    /// An explicit checkpoint of the lazy ring.
    Checkpoint,
}

/// One fuzz case.
#[derive(Clone, Debug)]
pub struct Case {
    /// How the containers' own operations commit.
    pub mode: LogMode,
    /// The operations.
    pub ops: Vec<Op>,
    /// Which crash point (modulo their number; the end is the last).
    pub point: u32,
    /// Per line in flight, which of its states persists (modulo its choices;
    /// missing ones: everything persisted).
    pub cuts: Vec<u16>,
    /// A log site made to fail during operation `.0`.
    pub fail: Option<(usize, Site)>,
}

fn mode(u: &mut Unstructured<'_>) -> ArbResult<LogMode> {
    Ok(*u.choose(&[LogMode::Undo, LogMode::Redo, LogMode::Lazy])?)
}

fn word_index(u: &mut Unstructured<'_>) -> ArbResult<usize> {
    u.int_in_range(0..=BOX_WORDS - 1)
}

impl Op {
    fn decode(u: &mut Unstructured<'_>) -> ArbResult<Op> {
        Ok(match u.int_in_range(0..=8u8)? {
            0 => Op::MapInsert {
                key: u.int_in_range(0..=KEYS - 1)?,
                value: u.arbitrary()?,
            },
            1 => Op::MapRemove {
                key: u.int_in_range(0..=KEYS - 1)?,
            },
            2 => Op::VecPush {
                value: u.arbitrary()?,
            },
            3 => Op::VecPop,
            4 => Op::VecSet {
                index: u.int_in_range(0..=7)?,
                value: u.arbitrary()?,
            },
            5 => {
                let mode = mode(u)?;
                let hint = *u.choose(&[Hint::Word, Hint::Object])?;
                let n = u.int_in_range(1..=6)?;
                let mut writes = Vec::with_capacity(n);
                for _ in 0..n {
                    writes.push((word_index(u)?, u.arbitrary()?));
                }
                Op::Words { mode, hint, writes }
            }
            6 => {
                let mode = mode(u)?;
                let at = word_index(u)?;
                let n = u.int_in_range(1..=BOX_WORDS - at)?;
                let mut words = Vec::with_capacity(n);
                for _ in 0..n {
                    words.push(u.arbitrary()?);
                }
                Op::Object { mode, at, words }
            }
            7 => Op::Abort {
                mode: mode(u)?,
                at: word_index(u)?,
                value: u.arbitrary()?,
            },
            _ => Op::Checkpoint,
        })
    }
}

impl Case {
    /// Decodes a case from fuzz bytes (missing bytes read as zeros).
    pub fn decode(data: &[u8]) -> ArbResult<Case> {
        let mut u = Unstructured::new(data);
        let mode = mode(&mut u)?;
        let point = u.arbitrary()?;
        let fail = if u.ratio(1, 4)? {
            Some((u.int_in_range(0..=MAX_OPS - 1)?, *u.choose(&SITES)?))
        } else {
            None
        };
        let n = u.int_in_range(0..=MAX_OPS)?;
        let mut ops = Vec::with_capacity(n);
        for _ in 0..n {
            ops.push(Op::decode(&mut u)?);
        }
        let mut cuts = Vec::new();
        while !u.is_empty() && cuts.len() < 64 {
            cuts.push(u.arbitrary()?);
        }
        Ok(Case {
            mode,
            ops,
            point,
            cuts,
            fail,
        })
    }
}

/// What the containers hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    /// The hash map.
    pub map: BTreeMap<u64, u64>,
    /// The vector.
    pub vec: Vec<u64>,
    /// The box's words.
    pub words: Vec<u64>,
}

impl Model {
    fn new() -> Model {
        Model {
            words: vec![0; BOX_WORDS],
            ..Model::default()
        }
    }

    /// Applies `op` as it succeeded.
    fn apply(&mut self, op: &Op) {
        match op {
            Op::MapInsert { key, value } => {
                self.map.insert(*key, *value);
            }
            Op::MapRemove { key } => {
                self.map.remove(key);
            }
            Op::VecPush { value } => self.vec.push(*value),
            Op::VecPop => {
                self.vec.pop();
            }
            Op::VecSet { index, value } => {
                if let Some(v) = self.vec.get_mut(*index as usize) {
                    *v = *value;
                }
            }
            Op::Words { writes, .. } => {
                for &(i, v) in writes {
                    self.words[i] = v;
                }
            }
            Op::Object { at, words, .. } => {
                self.words[*at..*at + words.len()].copy_from_slice(words);
            }
            Op::Abort { .. } | Op::Checkpoint => {}
        }
    }
}

/// What the run found (for the corpus test's expectations).
#[derive(Debug, Default)]
pub struct Outcome {
    /// Operations that returned an error.
    pub failed_ops: usize,
    /// Whether an injected failure made an operation fail.
    pub injected: bool,
    /// Crash points of the trace.
    pub points: usize,
}

/// The containers of a heap.
struct Handles {
    map: PHashMap<u64, u64>,
    vec: PVec<u64>,
    words: PBox<[u64; BOX_WORDS]>,
}

impl Handles {
    fn open(heap: &PHeap) -> crate::Result<Handles> {
        Ok(Handles {
            map: heap.root("map")?,
            vec: heap.root("vec")?,
            words: heap.root("box")?,
        })
    }

    /// The box's words' pool offset.
    fn words_at(&self) -> u64 {
        Structure::offset(&self.words) + TAG_BYTES
    }

    fn read(&self, heap: &PHeap) -> Result<Model, String> {
        let e = |e: crate::Error| e.to_string();
        let n = self
            .map
            .check(heap)
            .map_err(|e| format!("map check: {e}"))?;
        let map: BTreeMap<u64, u64> = self.map.iter(heap).collect::<Result<_, _>>().map_err(e)?;
        if map.len() as u64 != n {
            return Err(format!("{} entries iterated, {n} counted", map.len()));
        }
        Ok(Model {
            map,
            vec: self.vec.to_vec(heap).map_err(e)?,
            words: self.words.get(heap).map_err(e)?.to_vec(),
        })
    }

    /// Every block the containers hold, ascending.
    fn blocks(&self, heap: &PHeap) -> crate::Result<Vec<u64>> {
        let mut b = self.map.blocks(heap)?;
        b.extend(self.vec.blocks(heap)?);
        b.extend(self.words.blocks(heap)?);
        b.sort_unstable();
        Ok(b)
    }

    fn apply(&mut self, heap: &PHeap, op: &Op) -> crate::Result<()> {
        match op {
            Op::MapInsert { key, value } => self.map.insert(heap, key, value).map(|_| ()),
            Op::MapRemove { key } => self.map.remove(heap, key).map(|_| ()),
            Op::VecPush { value } => self.vec.push(heap, value),
            Op::VecPop => self.vec.pop(heap).map(|_| ()),
            Op::VecSet { index, value } => self.vec.set(heap, *index, value).map(|_| ()),
            Op::Words { mode, hint, writes } => {
                let at = self.words_at();
                heap.run_with(TxOptions::from(*mode).hint(*hint), |tx| {
                    for &(i, v) in writes {
                        tx.write(pmem_core::PPtr::<u64>::from_offset(at + 8 * i as u64), &v)?;
                    }
                    Ok(())
                })
            }
            Op::Object { mode, at, words } => {
                let off = self.words_at() + 8 * *at as u64;
                let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                heap.run_with(
                    TxOptions::from(*mode),
                    |tx| Ok(tx.write_bytes(off, &bytes)?),
                )
            }
            Op::Abort { mode, at, value } => {
                let off = self.words_at() + 8 * *at as u64;
                let r = heap.run_with(TxOptions::from(*mode), |tx| {
                    tx.write(pmem_core::PPtr::<u64>::from_offset(off), value)?;
                    let p = tx.alloc(40)?;
                    tx.write(p.cast::<u64>(), value)?;
                    Err::<(), _>(crate::Error::Tx(pmem_core::tx::TxError::Aborted(
                        "fuzz".into(),
                    )))
                });
                match r {
                    Err(crate::Error::Tx(pmem_core::tx::TxError::Aborted(_))) => Ok(()),
                    Ok(()) => Err(crate::Error::Tx(pmem_core::tx::TxError::Aborted(
                        "an aborting transaction committed".into(),
                    ))),
                    Err(e) => Err(e),
                }
            }
            Op::Checkpoint => heap.checkpoint(),
        }
    }
}

fn heap_options(mode: LogMode) -> HeapOptions {
    HeapOptions {
        geometry: TxGeometry {
            lanes: 2,
            word_records: 64,
            object_records: 16,
            object_bytes: 2048,
            alloc_records: 16,
            lazy_ring_bytes: 4096,
        },
        page_size: 64,
        mode,
    }
}

/// Reopens a crash image: recovery, the map's invariants, the leak check.
fn recover(pool: Pool, mode: LogMode) -> Result<Model, String> {
    let heap = PHeap::open_with(pool, mode).map_err(|e| format!("open: {e}"))?;
    let h = Handles::open(&heap).map_err(|e| format!("roots: {e}"))?;
    let got = h.read(&heap)?;
    let live = heap.live_blocks().map_err(|e| e.to_string())?;
    let blocks = h.blocks(&heap).map_err(|e| e.to_string())?;
    if live != blocks {
        return Err(format!(
            "the allocator holds {live:x?}, the containers {blocks:x?}"
        ));
    }
    Ok(got)
}

/// The body of the `tx_ops` target: decodes `data` and checks the case.
///
/// # Panics
/// When a promise of the module docs is broken (that is the finding).
pub fn run_ops(data: &[u8]) -> Outcome {
    match Case::decode(data) {
        Ok(case) => run_case(&case),
        Err(_) => Outcome::default(),
    }
}

/// Runs one case (see the module docs).
///
/// # Panics
/// As [`run_ops`].
pub fn run_case(case: &Case) -> Outcome {
    let mut outcome = Outcome::default();
    // results[i]: whether op i took effect in the live run (`None`: in doubt).
    let mut results: Vec<Option<bool>> = Vec::new();
    let test = CrashTest::new(PHeap::pool_options("pmkit-fuzz-ops", POOL_BYTES));
    let trace = test.record(
        |_| Ok(()),
        |pool, sim| {
            let heap =
                PHeap::create_with(pool, heap_options(case.mode)).map_err(|e| e.to_string())?;
            let mut h = Handles::open(&heap).map_err(|e| e.to_string())?;
            heap.checkpoint().map_err(|e| e.to_string())?;
            sim.mark_durable();
            let mut model = Model::new();
            for (n, op) in case.ops.iter().enumerate() {
                let failing = case.fail.filter(|&(at, _)| at == n).map(|(_, s)| s);
                heap.fail_site(failing);
                let r = sim.op(n as u32, || h.apply(&heap, op));
                heap.fail_site(None);
                match (r, failing) {
                    (Ok(()), _) => {
                        model.apply(op);
                        results.push(Some(true));
                    }
                    (Err(_), Some(_)) => {
                        // In doubt: no further operation runs (the heap may
                        // refuse them until reopened), as after an msync error.
                        outcome.injected = true;
                        outcome.failed_ops += 1;
                        results.push(None);
                        return Ok(());
                    }
                    (Err(_), None) => {
                        outcome.failed_ops += 1;
                        results.push(Some(false));
                    }
                }
            }
            let live = h.read(&heap)?;
            assert_eq!(live, model, "the live heap differs from the model");
            Ok(())
        },
    );
    let trace = match trace {
        Ok(t) => t,
        // The simulator's event bound: not a finding.
        Err(f) if f.message.contains("overflowed") => return outcome,
        Err(f) => panic!("recording the case failed: {f}"),
    };
    let models = prefix_models(&case.ops, &results);
    let points = trace.crash_points(CrashPoints::Durable);
    outcome.points = points.len();
    let pi = case.point as usize % points.len();
    let at = points[pi];
    let state = CrashState::new(&trace, at, CrashModel::Line);
    let mut cut = state.maximal();
    for (i, unit) in state.in_flight().iter().enumerate() {
        if let Some(&c) = case.cuts.get(i) {
            cut[i] = unit.durable + usize::from(c) % unit.choices();
        }
    }
    let image = state.materialize(&cut);
    let pool = Pool::from_image(&image).expect("a crash image is a pool");
    let got = recover(pool, case.mode).unwrap_or_else(|e| {
        panic!(
            "recovery at crash point {pi}/{} failed: {e}\ncase: {case:?}",
            points.len()
        )
    });
    let ops = trace.ops_at(at);
    let done = ops.completed.len();
    let allowed = allowed_models(&models, &results, done, !ops.in_flight.is_empty());
    assert!(
        allowed.iter().any(|m| **m == got),
        "recovered {got:?} at crash point {pi}/{} ({done} ops done, in flight {:?}); \
         allowed {allowed:?}\ncase: {case:?}",
        points.len(),
        ops.in_flight
    );
    outcome
}

/// `models[n]`: the model after the first `n` operations, each applied if it took
/// effect in the live run (an in-doubt operation is applied: its "before" is
/// `models[n - 1]`).
fn prefix_models(ops: &[Op], results: &[Option<bool>]) -> Vec<Model> {
    let mut m = Model::new();
    let mut out = vec![m.clone()];
    for (op, r) in ops.iter().zip(results) {
        if *r != Some(false) {
            m.apply(op);
        }
        out.push(m.clone());
    }
    out
}

/// The states recovery may find after `done` completed operations, `in_flight`
/// saying whether the next one had begun.
fn allowed_models<'m>(
    models: &'m [Model],
    results: &[Option<bool>],
    done: usize,
    in_flight: bool,
) -> Vec<&'m Model> {
    let mut allowed = vec![&models[done]];
    if in_flight {
        allowed.push(&models[done + 1]);
    }
    // An operation in doubt (the last that ran) may have taken effect or not,
    // even once it returned.
    if done > 0 && results.get(done - 1) == Some(&None) {
        allowed.push(&models[done - 1]);
    }
    allowed
}

/// Bytes that [`Case::decode`] turns into `case` (for the corpus' named seeds).
/// Ranged integers take one byte each (`arbitrary` reads one byte for a range
/// under 256, as the value's offset from the range's start), plain integers their
/// little-endian bytes.
pub fn encode(case: &Case) -> Vec<u8> {
    let mode = |m: LogMode| match m {
        LogMode::Undo => 0u8,
        LogMode::Redo => 1,
        LogMode::Lazy => 2,
    };
    let mut b = vec![mode(case.mode)];
    b.extend_from_slice(&case.point.to_le_bytes());
    match case.fail {
        // ratio(1, 4): a byte of 0 (mod 4) is "yes".
        Some((at, site)) => {
            b.push(0);
            b.push(at as u8);
            b.push(SITES.iter().position(|&s| s == site).unwrap_or(0) as u8);
        }
        None => b.push(1),
    }
    b.push(case.ops.len() as u8);
    for op in &case.ops {
        match op {
            Op::MapInsert { key, value } => {
                b.extend([0, *key as u8]);
                b.extend_from_slice(&value.to_le_bytes());
            }
            Op::MapRemove { key } => b.extend([1, *key as u8]),
            Op::VecPush { value } => {
                b.push(2);
                b.extend_from_slice(&value.to_le_bytes());
            }
            Op::VecPop => b.push(3),
            Op::VecSet { index, value } => {
                b.extend([4, *index as u8]);
                b.extend_from_slice(&value.to_le_bytes());
            }
            Op::Words {
                mode: m,
                hint,
                writes,
            } => {
                let h = u8::from(*hint == Hint::Object);
                b.extend([5, mode(*m), h, writes.len() as u8 - 1]);
                for &(i, v) in writes {
                    b.push(i as u8);
                    b.extend_from_slice(&v.to_le_bytes());
                }
            }
            Op::Object { mode: m, at, words } => {
                b.extend([6, mode(*m), *at as u8, words.len() as u8 - 1]);
                for w in words {
                    b.extend_from_slice(&w.to_le_bytes());
                }
            }
            Op::Abort { mode: m, at, value } => {
                b.extend([7, mode(*m), *at as u8]);
                b.extend_from_slice(&value.to_le_bytes());
            }
            Op::Checkpoint => b.push(8),
        }
    }
    for c in &case.cuts {
        b.extend_from_slice(&c.to_le_bytes());
    }
    b
}
